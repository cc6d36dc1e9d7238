"""Finding the root and the store as git finds its repository, in real git repositories.

From a subdirectory, in a linked work tree, in a submodule; the store in the git
directory survives `git clean -fdx` and is never captured nor shown by `git status`;
an older `<root>/.worksnap` keeps working; commands that only read create no store.
Each runs the command line in this process, from a chosen working directory.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tree_state, write
from worksnap.cli import main

from .gitrun import GIT, clean_git_env, git, init_repo

pytestmark = [
    pytest.mark.slow,  # real git repositories
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean git environment and an empty home; worksnap runs without a daemon."""
    place = tmp_path / "home"
    place.mkdir()
    clean_git_env(monkeypatch, place)
    monkeypatch.setenv("WORKSNAP_NO_DAEMON", "1")
    for name, value in (("NAME", "Test"), ("EMAIL", "test@example.com")):
        monkeypatch.setenv(f"GIT_AUTHOR_{name}", value)
        monkeypatch.setenv(f"GIT_COMMITTER_{name}", value)
    return place


def ws(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cwd: Path,
    *args: str,
) -> tuple[int, str, str]:
    """Runs `worksnap ARGS` in `cwd`."""
    monkeypatch.chdir(cwd)
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def ws_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, cwd: Path, *args: str
) -> object:
    code, out, err = ws(capsys, monkeypatch, cwd, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def project(path: Path) -> Path:
    """A git repository with a committed file, an untracked one, an ignored one, a subdir."""
    path.mkdir(parents=True)
    init_repo(path)
    write(path, ".gitignore", "*.log\n")
    write(path, "README.md", "top\n")
    write(path, "src/app.py", "print('v1')\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "first")
    write(path, "notes.txt", "untracked, only worksnap keeps it\n")
    write(path, "debug.log", "ignored\n")
    return path


def test_from_a_subdirectory_the_top_of_the_work_tree_is_the_root(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    sub = top / "src"
    status = ws_json(capsys, monkeypatch, sub, "status")
    assert isinstance(status, dict)
    assert (status["root"], status["found"]) == (str(top), "git")
    assert (status["store"], status["store_exists"]) == (str(top / ".git" / "worksnap"), False)
    code, out, err = ws(capsys, monkeypatch, sub, "snapshot", "--label", "from src")
    assert code == 0, err
    assert f"snapshot of {top}" in err  # the root is named: it is not where we stand
    snap_id = out.strip()
    shown = ws_json(capsys, monkeypatch, top, "show", snap_id)
    assert isinstance(shown, dict)
    paths = [e["path"] for e in shown["entries"]]
    assert paths == [".gitignore", "README.md", "notes.txt", "src/app.py"]  # the whole tree
    assert ".git" in shown["excluded"] and not any(p.startswith(".git/") for p in paths)
    listed = ws_json(capsys, monkeypatch, sub, "list")
    assert isinstance(listed, list) and [s["id"] for s in listed] == [snap_id]
    status = ws_json(capsys, monkeypatch, sub, "status")
    assert isinstance(status, dict) and (status["found"], status["store_exists"]) == ("store", True)
    # A path on the command line is read from the current directory, as git reads it.
    write(top, "src/app.py", "broken\n")
    code, _, err = ws(capsys, monkeypatch, sub, "restore", "latest", "app.py", "--yes")
    assert code == 0, err
    assert (top / "src" / "app.py").read_text() == "print('v1')\n"
    assert not (top / ".worksnap").exists() and not (sub / ".worksnap").exists()


def test_git_clean_fdx_keeps_every_snapshot(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    before = tree_state(top, skip=(".git",))
    code, _, err = ws(capsys, monkeypatch, top, "snapshot")
    assert code == 0, err
    git(top, "clean", "-fdxq")
    assert not (top / "notes.txt").exists() and not (top / "debug.log").exists()
    listed = ws_json(capsys, monkeypatch, top, "list")
    assert isinstance(listed, list) and len(listed) == 1
    code, _, err = ws(capsys, monkeypatch, top, "restore", "latest", "--yes")
    assert code == 0, err
    after = tree_state(top, skip=(".git",))
    assert after == {k: v for k, v in before.items() if k != b"debug.log"}  # ignored: not kept


def test_the_store_in_the_git_directory_is_neither_captured_nor_shown(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    git(top, "add", "notes.txt")
    git(top, "commit", "-q", "-m", "notes")
    for _ in range(2):
        assert ws(capsys, monkeypatch, top, "snapshot")[0] == 0
    assert (top / ".git" / "worksnap" / "snapshots").is_dir()
    assert git(top, "status", "--porcelain", "--ignored") == b"!! debug.log\n"
    listed = ws_json(capsys, monkeypatch, top, "list")
    assert isinstance(listed, list)
    shown = ws_json(capsys, monkeypatch, top, "show", listed[0]["id"])
    assert isinstance(shown, dict)
    names = [e["path"] for e in shown["entries"]] + shown["dirs"] + shown["excluded"]
    assert not any("worksnap" in name for name in names)


def test_a_linked_work_tree_has_a_store_of_its_own(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    linked = home / "linked"
    git(top, "worktree", "add", "-q", str(linked))
    write(linked, "src/app.py", "print('in the linked tree')\n")
    code, out, err = ws(capsys, monkeypatch, linked / "src", "snapshot")
    assert code == 0, err
    status = ws_json(capsys, monkeypatch, linked / "src", "status")
    assert isinstance(status, dict)
    assert status["root"] == str(linked)
    # Its own git directory (git's `worktrees/<name>`), not the common one: a store
    # serves one root, and each work tree is a root of its own.
    assert status["store"] == str(top / ".git" / "worktrees" / "linked" / "worksnap")
    assert ws_json(capsys, monkeypatch, top, "list") == []
    main_status = ws_json(capsys, monkeypatch, top, "status")
    assert isinstance(main_status, dict) and main_status["store"] == str(top / ".git" / "worksnap")
    listed = ws_json(capsys, monkeypatch, linked, "list")
    assert isinstance(listed, list) and [s["id"] for s in listed] == [out.strip()]


def test_a_submodule_keeps_its_store_in_the_superprojects_git_directory(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    library = project(home / "library")
    top = project(home / "proj")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    sub = top / "lib"
    assert (sub / ".git").is_file()  # `gitdir: ../.git/modules/lib`
    code, _, err = ws(capsys, monkeypatch, sub / "src", "snapshot")
    assert code == 0, err
    status = ws_json(capsys, monkeypatch, sub / "src", "status")
    assert isinstance(status, dict)
    assert status["root"] == str(sub)
    assert status["store"] == str(top / ".git" / "modules" / "lib" / "worksnap")
    git(top, "clean", "-fdxq")
    git(sub, "clean", "-fdxq")
    assert (top / ".git" / "modules" / "lib" / "worksnap" / "snapshots").is_dir()


def test_an_older_store_in_the_root_keeps_working(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    old = top / ".worksnap"
    code, out, err = ws(capsys, monkeypatch, top, "--store", str(old), "snapshot")
    assert code == 0, err
    status = ws_json(capsys, monkeypatch, top / "src", "status")
    assert isinstance(status, dict)
    assert (status["root"], status["store"], status["found"]) == (str(top), str(old), "store")
    listed = ws_json(capsys, monkeypatch, top / "src", "list")
    assert isinstance(listed, list) and [s["id"] for s in listed] == [out.strip()]
    assert not (top / ".git" / "worksnap").exists()


def test_a_store_and_root_given_or_in_the_environment_win(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = project(home / "proj")
    elsewhere = home / "stores" / "proj"
    monkeypatch.setenv("WORKSNAP_STORE", str(elsewhere))
    assert ws(capsys, monkeypatch, top, "snapshot")[0] == 0
    status = ws_json(capsys, monkeypatch, top / "src", "status")
    assert isinstance(status, dict)
    assert (status["root"], status["store"]) == (str(top), str(elsewhere))  # its bound root
    monkeypatch.delenv("WORKSNAP_STORE")
    status = ws_json(capsys, monkeypatch, home, "--root", str(top / "src"), "status")
    assert isinstance(status, dict) and (status["root"], status["found"]) == (
        str(top / "src"),
        "option",
    )
    assert status["store"].startswith(str(top / ".git" / "worksnap-"))  # one per root
    assert not (top / ".git" / "worksnap").exists()


def test_the_home_directory_is_never_found_by_walking_up(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(home, ".worksnap/manifests/.keep", "")  # a store of the home (made with --force)
    plain = home / "plain" / "deeper"
    plain.mkdir(parents=True)
    status = ws_json(capsys, monkeypatch, plain, "status")
    assert isinstance(status, dict)
    assert (status["root"], status["found"]) == (str(plain), "cwd")
    assert status["store"] == str(plain / ".worksnap")


READ_ONLY = [
    ["list"], ["status"], ["plan", "latest"], ["show", "latest"], ["cat", "latest", "x"],
    ["diff"], ["verify"], ["undo"], ["redo"], ["recover"], ["gc"], ["gc", "--dry-run"],
    ["du"], ["config"], ["config", "max-file-bytes"], ["pin", "latest"], ["rewind", "1"],
    ["restore", "latest", "--yes"], ["undo", "--dry-run"], ["daemon", "status"],
]  # fmt: skip


@pytest.mark.parametrize("in_git", [True, False], ids=["git work tree", "plain directory"])
def test_commands_that_only_read_create_no_store(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, in_git: bool
) -> None:
    top = project(home / "proj") if in_git else home / "plain"
    if not in_git:
        write(top, "x", "x")
    before = tree_state(top)
    for args in READ_ONLY:
        code, _, err = ws(capsys, monkeypatch, top, *args)
        assert code in (0, 1, 2), (args, err)
        assert "Traceback" not in err, (args, err)
        assert tree_state(top) == before, args
    assert not (top / ".worksnap").exists()


def test_git_apply_cannot_see_the_store_either(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git stash -u` and `git add -A` never pick the store up (it is inside .git)."""
    top = project(home / "proj")
    assert ws(capsys, monkeypatch, top, "snapshot")[0] == 0
    git(top, "add", "-A")
    staged = git(top, "diff", "--cached", "--name-only").decode().split()
    assert staged == ["notes.txt"]
    subprocess.run([GIT or "git", "stash", "-q", "-u"], cwd=top, check=True)
    assert (top / ".git" / "worksnap" / "snapshots").is_dir()
    assert os.listdir(top / ".git" / "worksnap" / "snapshots")


# -- random layouts: the root and git directory found, against `git rev-parse` ------------

LAYOUTS = int(os.environ.get("WORKSNAP_LOCATE_LAYOUTS", "12"))


def _layout(rng: random.Random, base: Path) -> list[Path]:
    """A repository with nested repositories, `.git` files and a linked work tree."""
    top = base / "top"
    top.mkdir(parents=True)
    init_repo(top)
    dirs = [top]
    for i in range(rng.randrange(4, 12)):
        parent = rng.choice(dirs)
        if ".git" in parent.parts:
            continue
        child = parent / rng.choice(["a", "b", "sub dir", "x.y"]) / str(i)
        child.mkdir(parents=True, exist_ok=True)
        dirs.append(child)
        roll = rng.random()
        if roll < 0.2:
            init_repo(child)  # a nested repository with its `.git` folder
        elif roll < 0.35:
            init_repo(child, git_dir=os.fsencode(base / "separate" / str(i)))  # a `.git` file
    if rng.random() < 0.5:
        git(top, "commit", "-q", "--allow-empty", "-m", "first")
        linked = base / "linked"
        git(top, "worktree", "add", "-q", str(linked))
        (linked / "inner").mkdir()
        dirs += [linked, linked / "inner"]
    return dirs


@pytest.mark.parametrize("seed", range(LAYOUTS))
def test_random_layouts_find_what_git_finds(home: Path, seed: int) -> None:
    from worksnap.layout import locate

    rng = random.Random(seed)
    for cwd in _layout(rng, home / "layout"):
        top = git(cwd, "rev-parse", "--show-toplevel").decode().rstrip("\n")
        git_dir = git(cwd, "rev-parse", "--absolute-git-dir").decode().rstrip("\n")
        found = locate(str(cwd))
        assert (found.root, found.store, found.found) == (
            os.path.realpath(top),
            os.path.join(os.path.realpath(git_dir), "worksnap"),
            "git",
        ), cwd
