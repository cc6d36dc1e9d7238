"""Paths named on the command line: the root itself is the whole tree (as git takes `.`
at the top), and a path no restore can reach says why (a symbolic link on the way, or a
path the snapshot left out), with the exit code of every path a snapshot does not hold.

The commands run in this process, from the directory a shell would be in; the tree
and the store are real.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli, tree_state, write
from tests.conftest import run_here as run
from worksnap import Workspace


def edited(root: Path) -> None:
    """A snapshot, then a file changed, one added and one deleted, at the top and below."""
    write(root, "a.txt", "a\n")
    write(root, "gone.txt", "g\n")
    write(root, "sub/s.txt", "s\n")
    Workspace(root).snapshot()
    write(root, "a.txt", "b\n")
    write(root, "sub/s.txt", "t\n")
    write(root, "sub/new.txt", "n\n")
    os.unlink(root / "gone.txt")


# -- 3. the root as a PATH ---------------------------------------------------


@pytest.mark.parametrize(
    ("where", "spellings"),
    [(".", [".", "./", "sub/.."]), ("sub", ["..", "../", "../sub/.."])],
)
def test_naming_the_root_is_the_whole_tree(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    spellings: list[str],
) -> None:
    edited(root)
    monkeypatch.chdir(root / where)
    commands = [
        ["plan", "latest"],
        ["restore", "latest", "--dry-run"],
        ["--json", "restore", "latest", "--dry-run"],
        ["show", "latest"],
        ["--json", "show", "latest"],
        ["diff", "latest", "--stat"],
        ["diff", "latest"],
    ]
    for command in commands:
        whole = run(capsys, *command)
        assert whole[0] == 0, (command, whole)
        for spelling in spellings:
            at = command.index("latest") + 1
            named = [*command, "--", spelling] if "diff" in command else command[:at]
            named += [] if "diff" in command else [spelling, *command[at:]]
            assert run(capsys, *named) == whole, named


def _copies(tmp_path: Path) -> tuple[Path, Path]:
    roots = tmp_path / "one", tmp_path / "two"
    for r in roots:
        r.mkdir()
        edited(r)
        write(r, ".gitignore", "*.log\n")
        write(r, "keep.log", "ignored\n")
    return roots


def test_restoring_the_root_does_exactly_what_a_restore_without_paths_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, two = _copies(tmp_path)
    whole = json.loads(run_cli(capsys, one, "--json", "restore", "latest")[1])
    named = json.loads(run_cli(capsys, two, "--json", "restore", "latest", ".")[1])
    assert whole["error"] is None and named["error"] is None
    assert sorted(named["restored"]) == sorted(whole["restored"])
    assert set(whole["restored"]) >= {"a.txt", "gone.txt", "sub/new.txt", "sub/s.txt"}
    assert tree_state(two) == tree_state(one)
    ws = Workspace(two)
    write(two, "a.txt", "again\n")
    target = ws.load("latest")
    assert ws.plan_restore(target, paths=[two]).changes == ws.plan_restore(target).changes


def test_restore_to_of_the_root_writes_the_whole_snapshot(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edited(root)
    code, out, err = run_cli(capsys, root, "restore", "latest", ".", "--to", str(tmp_path / "c"))
    assert code == 0, err
    assert out.startswith("wrote 4 paths of snapshot ")


@pytest.mark.parametrize(
    "command",
    [["capture", "."], ["cat", "latest", "."], ["config", "exclude", "add", "."]],
)
def test_commands_that_take_no_root_say_so_in_one_line(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    edited(root)
    Workspace(root).begin()
    monkeypatch.chdir(root)
    code, out, err = run(capsys, *command)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"is the root ({root}) itself, not a path inside it" in err, err


# -- 4. a path reached through a symlink; a path the snapshot left out ---------


@pytest.fixture
def linked(root: Path) -> str:
    """A tree with `lsub -> sub` and an ignored file; returns the snapshot's id."""
    write(root, "sub/s.txt", "s\n")
    os.symlink("sub", root / "lsub")
    write(root, ".gitignore", "*.log\n")
    write(root, "keep.log", "keep\n")
    return Workspace(root).snapshot().id


def test_a_path_through_a_symlink_says_so(
    root: Path, capsys: pytest.CaptureFixture[str], linked: str
) -> None:
    for options in ([], ["--dry-run"], ["--yes"]):
        command = ["restore" if options else "plan", "latest", "lsub/s.txt", *options]
        code, out, err = run_cli(capsys, root, *command)
        assert (code, out) == (2, ""), command
        assert err == (
            "worksnap: error: 'lsub/s.txt' is reached through the symbolic link 'lsub' "
            "(a restore never follows one): name the path it points to\n"
        ), command
    # The same in a snapshot that has the link where the workspace now has none.
    os.unlink(root / "lsub")
    for command in (["plan", "latest"], ["cat", "latest"]):
        code, _, err = run_cli(capsys, root, *command, "lsub/s.txt")
        assert code == 2 and "through the symbolic link 'lsub'" in err, command


def test_an_ignored_path_the_snapshot_left_out_says_so_as_cat_does(
    root: Path, capsys: pytest.CaptureFixture[str], linked: str
) -> None:
    cat = run_cli(capsys, root, "cat", "latest", "keep.log")
    assert cat == (
        2, "", f"worksnap: error: 'keep.log' is not in snapshot {linked}: it left that out "
        "(ignored)\n"
    )  # fmt: skip
    missing = run_cli(capsys, root, "plan", "latest", "no-such.txt")
    assert missing[0] == 2
    before = tree_state(root)
    for command in (["plan", "latest", "keep.log"], ["restore", "latest", "keep.log", "--dry-run"],
                    ["restore", "latest", "keep.log", "--yes"],
                    ["--json", "restore", "latest", "keep.log"]):  # fmt: skip
        assert run_cli(capsys, root, *command) == cat, command
    assert tree_state(root) == before
    shutil.rmtree(root / "sub")  # a directory the snapshot holds: still restored alone
    code, _, err = run_cli(capsys, root, "restore", "latest", "sub", "--yes")
    assert code == 0, err
    assert (root / "sub" / "s.txt").read_text() == "s\n"


@pytest.mark.parametrize("where", [".", "sub"])
def test_an_empty_path_is_refused_never_the_whole_tree(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    edited(root)
    monkeypatch.chdir(root / where)
    before = tree_state(root)
    for command in (["restore", "latest", "", "--yes"], ["plan", "latest", ""]):
        code, _, err = run(capsys, *command)
        assert code == 2, command
        assert "an empty path is not a path: name the root as '.'" in err
    assert tree_state(root) == before


# -- 5. everything after `--` is a PATH ------------------------------------------


def test_everything_after_dashdash_is_a_path_even_one_named_dashdash(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python's argparse drops a second `--` from a list of positionals: `restore REF -- --`
    # came back with no PATH, and no PATH is the whole tree.
    write(root, "--", "orig\n")
    write(root, "-x", "orig\n")
    write(root, "other.txt", "keep\n")
    snap = Workspace(root).snapshot().id
    write(root, "--", "changed\n")
    write(root, "-x", "changed\n")
    write(root, "other.txt", "edited\n")
    write(root, "new.txt", "precious\n")
    for command in (["plan", "latest"], ["restore", "latest", "--dry-run"]):
        plan = json.loads(run_cli(capsys, root, "--json", *command, "--", "--")[1])
        assert plan["changes"] == [{"op": "M", "path": "--"}], command
    code, out, err = run_cli(capsys, root, "show", "latest", "--", "--")
    assert code == 0, err
    assert out.splitlines()[-1].endswith("  --") and "other.txt" not in out
    assert run_cli(capsys, root, "cat", "latest", "--", "--") == (0, "orig\n", "")
    assert run_cli(capsys, root, "cat", "latest", "--", "-x") == (0, "orig\n", "")
    code, out, err = run_cli(capsys, root, "restore", "latest", "--yes", "--", "--", "-x")
    assert code == 0, err
    assert out.startswith(f"restored 2 paths in {root} from snapshot {snap}")
    assert (root / "--").read_text() == (root / "-x").read_text() == "orig\n"
    assert (root / "other.txt").read_text() == "edited\n"
    assert (root / "new.txt").read_text() == "precious\n"


def test_an_abbreviated_global_option_keeps_what_follows_dashdash_a_path(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse takes `--ro` for `--root` and `--sess` for `--session`: a review found the
    value taken for the command's name, so `restore REF -- --` restored every file."""
    write(root, "--", "orig\n")
    write(root, "other.txt", "keep\n")
    Workspace(root).snapshot()
    write(root, "--", "changed\n")
    write(root, "other.txt", "edited\n")
    code, _, err = run(capsys, "--ro", str(root), "--sess", "default", "restore",
                            "--yes", "latest", "--", "--")  # fmt: skip
    assert code == 0, err
    assert (root / "--").read_text() == "orig\n"
    assert (root / "other.txt").read_text() == "edited\n"
    code, out, err = run(capsys, "--ro", str(root), "plan", "latest", "--")
    assert (code, out) == (2, ""), err


def test_dashdash_with_no_path_after_it_never_restores_the_whole_tree(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As `git restore --source=HEAD --` ("you must specify path(s) to restore"); `show`
    # and `diff` show everything, as `git show HEAD --` and `git diff HEAD --` do.
    edited(root)
    before = tree_state(root)
    for command in (["restore", "latest", "--yes"], ["restore", "latest"],
                    ["plan", "latest"], ["restore", "latest", "--dry-run"]):  # fmt: skip
        code, out, err = run_cli(capsys, root, *command, "--")
        assert (code, out) == (2, ""), command
        assert err.startswith("worksnap: error: ") and err.count("\n") == 1, err
        assert "no PATH after `--`" in err, err
    code, out, err = run_cli(capsys, root, "restore", "--yes", "--", "latest")
    assert (code, out) == (2, "") and "REF comes before `--`" in err, err
    code, out, err = run_cli(capsys, root, "restore", "latest", "--to", "--", "copy")
    assert (code, out) == (2, "") and "value of --to comes before `--`" in err, err
    assert tree_state(root) == before
    assert run_cli(capsys, root, "show", "latest", "--") == run_cli(capsys, root, "show", "latest")
    assert run_cli(capsys, root, "cat", "latest", "--")[0] == 2


def test_an_absolute_path_through_a_symlink_to_the_project_is_inside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review I 10: with the project reached through a symlink (`~/src -> /data/src`), a
    path spelled as the shell shows it (`$PWD/app.py`) was "not a path inside" it; git
    takes it."""
    from tests.conftest import run_here

    real = tmp_path / "real"
    write(real, "src/app.py", "one\n")
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(real)
    assert run_here(capsys, "snapshot")[0] == 0
    write(real, "src/app.py", "two\n")
    spelled = str(tmp_path / "link" / "src" / "app.py")
    code, out, err = run_here(capsys, "restore", "latest", "--yes", spelled)
    assert (code, out.split(" in ")[0]) == (0, "restored 1 path"), err
    assert (real / "src" / "app.py").read_text() == "one\n"
    code, out, err = run_here(capsys, "restore", "latest", "--yes", str(tmp_path / "app.py"))
    assert code == 2 and "is not a path inside" in err  # (outside is still outside)
