"""The daemon's client finds the root and store the full command line would (`layout.locate`).

A forwarded command runs in the daemon of the store the client found: from a
subdirectory, in a git work tree (`<git-dir>/worksnap`), with `--root`, `--store`
(before or after the command) or `$WORKSNAP_STORE`, that must be the store the
command line itself would use, or the command reaches another store's daemon (or
none). Table tests on hand-made `.git` directories, as tests/test_layout_locate.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap import client
from worksnap.arguments import parse
from worksnap.invocation import locate

pytestmark = pytest.mark.skipif(not client.SUPPORTED, reason="the daemon is Linux-only")


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WORKSNAP_NO_DAEMON", raising=False)  # forwardable() says None
    monkeypatch.delenv("WORKSNAP_STORE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def cli_finds(argv: list[str]) -> tuple[str, str]:
    args = parse(argv)
    args.given_store = args.store is not None
    locate(args)
    return args.root, args.store


def repo(path: Path) -> Path:
    write(path, ".git/HEAD", "ref: refs/heads/main\n")
    return path


def store(directory: Path, bound: Path | None = None) -> Path:
    (directory / "manifests").mkdir(parents=True)
    if bound is not None:
        (directory / "root").write_text(f"{bound}\n")
    return directory


@pytest.fixture
def project(tmp_path: Path) -> Path:
    top = repo(tmp_path / "proj")
    store(top / ".git" / "worksnap")
    (top / "src" / "pkg").mkdir(parents=True)
    (top / "vendor" / "lib" / "deep").mkdir(parents=True)
    store(top / "vendor" / "lib" / ".worksnap")  # a store of its own, nearer
    linked = tmp_path / "linked"
    (linked / "docs").mkdir(parents=True)
    write(top, ".git/worktrees/linked/HEAD", "ref: refs/heads/other\n")
    (linked / ".git").write_text(f"gitdir: {top}/.git/worktrees/linked\n")
    store(tmp_path / "elsewhere", bound=top)
    return top


CASES = [
    ("src/pkg", ["list"], ("proj", "proj/.git/worksnap")),
    ("src/pkg", ["--json", "plan", "latest", "app.py"], ("proj", "proj/.git/worksnap")),
    ("src", ["snapshot", "--label", "x"], ("proj", "proj/.git/worksnap")),
    (".", ["status"], ("proj", "proj/.git/worksnap")),
    ("vendor/lib/deep", ["list"], ("proj/vendor/lib", "proj/vendor/lib/.worksnap")),
    ("src/pkg", ["list", "--root", ".."], ("proj/src", None)),
    ("src/pkg", ["--root=../..", "list"], ("proj", "proj/.git/worksnap")),
    ("src/pkg", ["list", "--store", "../../../elsewhere"], ("proj", "elsewhere")),
    ("src/pkg", ["--store=../../../elsewhere", "--session", "s", "list"], ("proj", "elsewhere")),
    ("../linked/docs", ["list"], ("linked", "proj/.git/worktrees/linked/worksnap")),
    ("../linked/docs", ["list", "--root", "../../proj"], ("proj", "proj/.git/worksnap")),
]


@pytest.mark.parametrize(("cwd", "argv", "expected"), CASES)
def test_the_client_finds_the_store_the_command_line_finds(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    cwd: str,
    argv: list[str],
    expected: tuple[str, str | None],
) -> None:
    monkeypatch.chdir(project / cwd)
    found = client.forwardable(argv)
    assert found == cli_finds(argv)
    assert found is not None
    base = project.parent
    assert found[0] == str(base / expected[0])
    if expected[1] is not None:
        assert found[1] == str(base / expected[1])
    else:  # a root below its work tree's top: a store of its own in the git directory
        assert found[1].startswith(str(project / ".git" / "worksnap-"))


def test_the_environment_names_the_store_for_both(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "src" / "pkg")
    monkeypatch.setenv("WORKSNAP_STORE", str(project.parent / "elsewhere"))
    assert client.forwardable(["list"]) == cli_finds(["list"])
    assert client.forwardable(["list"]) == (str(project), str(project.parent / "elsewhere"))


def test_what_the_client_cannot_be_sure_of_runs_here(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "src")
    for argv in (["run", "--", "make"], ["daemon", "status"], ["completion", "bash"],
                 ["list", "--ro", ".."], ["--help"], ["list", "--root"], []):  # fmt: skip
        assert client.forwardable(argv) is None, argv
    monkeypatch.setenv("WORKSNAP_NO_DAEMON", "1")
    assert client.forwardable(["list"]) is None


def test_a_current_directory_that_is_gone_runs_here(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    before = os.getcwd()
    os.chdir(gone)
    try:
        gone.rmdir()
        assert client.forwardable(["list"]) is None  # the command line says what happened
    finally:
        os.chdir(before)
