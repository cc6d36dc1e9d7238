"""What a command prints reaches the same place from where the user stands.

A hint ("undo it with: ...") is followed as printed, in the same shell: it must name the
session, store and root the command was run with (stop 43's review followed
"worksnap undo" after `--session agent rewind` and undid the default session). A
directory it names is absolute, not as typed relative to some other directory. And a
restore that removed the directory the user stands in leaves commands that work.
Real processes, run in a real current directory, as a shell runs them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write

SRC = str(Path(__file__).resolve().parent.parent / "src")


def worksnap(*args: str, session: str | None = None) -> tuple[int, str, str]:
    """`worksnap ARGS` in a fresh process, in this process's current directory.

    `session`: `$WORKSNAP_SESSION` (else none is set).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    env.update(PYTHONPATH=SRC, WORKSNAP_NO_DAEMON="1", NO_COLOR="1")
    if session is not None:
        env["WORKSNAP_SESSION"] = session
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def hinted(out: str, verb: str) -> list[str]:
    """The command a "VERB it with: worksnap ..." hint names, as a shell splits it."""
    found = re.search(rf"\({verb} it with: worksnap (.*)\)$", out.strip())
    assert found is not None, out
    return shlex.split(found.group(1))


def snapshotted(root: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """`path` written under `root`, then a snapshot taken from `root` (the current directory)."""
    write(root, path, "a")
    monkeypatch.chdir(root)
    assert worksnap("snapshot")[0] == 0


def test_the_undo_and_redo_hints_reach_the_session_and_store_they_were_run_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    store = tmp_path / "my store"  # a space: the hint quotes it for a shell
    write(root, "f.txt", "a")
    monkeypatch.chdir(root)
    named = ["--store", str(store)]
    assert worksnap(*named, "snapshot")[0] == 0
    write(root, "f.txt", "b")
    assert worksnap(*named, "restore", "latest", "--yes")[0] == 0  # default: an undo target
    assert worksnap(*named, "--session", "agent", "snapshot", "--step", "1")[0] == 0
    write(root, "f.txt", "c")
    code, out, err = worksnap(*named, "--session", "agent", "rewind", "1", "--yes")
    assert code == 0, err
    undo = hinted(out, "undo")
    assert undo == ["--store", str(store), "--session", "agent", "undo"]
    code, out, err = worksnap(*undo, "--yes")  # as the hint says, from the same directory
    assert code == 0, err
    assert (root / "f.txt").read_text() == "c"  # the agent's rewind undone, not the default's
    redo = hinted(out, "redo")
    assert redo == ["--store", str(store), "--session", "agent", "redo"]
    assert worksnap(*redo, "--yes")[0] == 0
    assert (root / "f.txt").read_text() == "a"
    # The default session's hint names none; `list` and `status` of an empty session too.
    write(root, "f.txt", "d")
    assert hinted(worksnap(*named, "restore", "latest", "--yes")[1], "undo")[-1:] == ["undo"]
    code, out, _ = worksnap(*named, "--session", "new", "list")
    assert (
        code == 0
        and f"(take one with `worksnap {shlex.join(named)} --session new snapshot`)" in out
    )
    code, out, _ = worksnap("--store", str(tmp_path / "none"), "status")
    assert f"(take one: worksnap --store {tmp_path / 'none'} snapshot)" in out


def test_a_session_from_the_environment_is_named_in_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hint is read in another shell too (an agent's log): a session the environment
    # chose is named; the default one is named when the environment would choose another.
    write(tmp_path, "f.txt", "a")
    monkeypatch.chdir(tmp_path)
    code, out, _ = worksnap("--session", "default", "list", session="agent")
    assert code == 0 and "`worksnap --session default snapshot`" in out
    code, out, _ = worksnap("list", session="agent")
    assert code == 0 and "`worksnap --session agent snapshot`" in out
    code, out, _ = worksnap("list", session="default")
    assert code == 0 and "`worksnap snapshot`" in out


def test_restore_to_from_a_subdirectory_says_the_directory_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "proj"
    snapshotted(root, monkeypatch, "sub/a.txt")
    monkeypatch.chdir(root / "sub")
    code, out, err = worksnap("--json", "restore", "latest", "--to", "../../out", "--dry-run")
    assert code == 0, err
    assert json.loads(out)["to"] == str(tmp_path / "out")
    code, out, err = worksnap("--json", "restore", "latest", "--to", "../../out")
    assert code == 0, err
    assert json.loads(out)["to"] == str(tmp_path / "out")  # (was "../../out", as typed)
    assert (tmp_path / "out" / "sub" / "a.txt").read_text() == "a"
    code, out, err = worksnap("restore", "latest", "--to", "../../text")
    assert code == 0, err
    assert out.endswith(f" into {tmp_path / 'text'}\n")


def test_a_restore_keeps_the_directory_it_runs_in_emptied_as_git_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a directory added since, a restore removes what it holds and keeps it and
    the one above it (it removed them: the shell stood in a removed directory, and the
    hinted `worksnap undo` failed there; stop 43's review). The preview says so."""
    root = tmp_path / "ws"
    snapshotted(root, monkeypatch, "a.txt")
    write(root, "new/sub/x.txt", "x")
    monkeypatch.chdir(root / "new" / "sub")
    code, out, _ = worksnap("--json", "plan", "latest")
    assert code == 0
    rows = [(c["op"], c["path"]) for c in json.loads(out)["changes"]]
    assert rows == [("B", "new"), ("B", "new/sub"), ("A", "new/sub/x.txt")]
    code, out, err = worksnap("restore", "latest", "--yes")
    assert code == 0, err
    assert sorted(p.name for p in (root / "new").rglob("*")) == ["sub"]  # x.txt went
    kept = (
        "left as it is: the directory you are in, or one above it: kept, emptied, as git "
        "keeps it, so the restore is not finished here: cd out of it and restore again "
        "(it removes the directory, or writes the snapshot's file in its place)"
    )
    assert err.splitlines() == [f"worksnap: warning: {d} {kept}" for d in ("new", "new/sub")]
    assert hinted(out, "undo") == ["undo"]  # where the user stands: found from here
    code, out, err = worksnap("undo", "--yes")
    assert code == 0, err
    assert (root / "new" / "sub" / "x.txt").read_text() == "x"


def test_from_a_directory_where_the_snapshot_has_a_file_status_and_diff_say_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`latest` has a file `a`; a directory stands there now, and the user stands in it.
    `status` and `diff` compare: they say the file went, wherever they run (a review: from
    there they said "nothing changed", the restore's kept directory applied to them). A
    restore from there keeps the directory, so the file is not written, and says so."""
    root = tmp_path / "ws"
    snapshotted(root, monkeypatch, "a")
    (root / "a").unlink()
    (root / "a" / "sub").mkdir(parents=True)
    changes = [
        {"op": "D", "path": "a", "from": None},
        {"op": "A", "path": "a/sub", "from": None},  # (a directory too, as `plan` lists it)
    ]
    for here in (root, root / "a" / "sub"):
        monkeypatch.chdir(here)
        code, out, _ = worksnap("--json", "status")
        assert code == 0 and json.loads(out)["changes"] == changes, here
        code, out, _ = worksnap("diff", "latest")
        assert code == 0 and "deleted file mode" in out, here
    code, _, err = worksnap("restore", "latest", "--yes")
    assert code == 0 and (root / "a" / "sub").is_dir()
    assert "a left as it is: the directory you are in" in err and "not finished here" in err
    code, out, _ = worksnap("--json", "status")
    assert json.loads(out)["changes"] == changes  # not finished: still differs
    monkeypatch.chdir(root)
    assert worksnap("restore", "latest", "--yes")[0] == 0
    assert (root / "a").read_text() == "a"


def test_after_the_current_directory_was_removed_the_root_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    snapshotted(root, monkeypatch, "a.txt")
    write(root, "new/sub/x.txt", "x")
    assert worksnap("snapshot")[0] == 0
    monkeypatch.chdir(root / "new" / "sub")
    shutil.rmtree(root / "new")  # (another shell, say)
    code, out, err = worksnap("undo", "--yes")
    assert (code, out) == (2, "")
    gone = "worksnap: error: the current directory no longer exists: cd to the project, or "
    assert err == f"{gone}name it with an absolute --root DIR (and --store, --to, paths too)\n"
    # A relative --store or --to cannot be found from here either: the same line, exit 2
    # (a review: a bare "[Errno 2] No such file or directory", exit 1, for --to).
    for relative in (["--store", "../../st", "status"], ["restore", "latest", "--to", "out"]):
        code, out, err = worksnap("--root", str(root), *relative)
        assert (code, out) == (2, ""), relative
        assert err.startswith(gone) and "absolute" in err, err
    code, out, err = worksnap("--root", str(root), "restore", "latest", "--yes")
    assert code == 0, err  # (was: "No such file or directory")
    assert (root / "new" / "sub" / "x.txt").read_text() == "x"
