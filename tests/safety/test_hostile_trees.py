"""Hostile trees: links where directories were, races between plan and apply.

A restore walks down from a descriptor on the root one component at a time
with O_NOFOLLOW, so nothing it does can land outside the root, and a link at
the last component is replaced, never written through or deleted through.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worksnap import ConflictError, Workspace
from worksnap.apply import Result, apply_plan
from worksnap.plan import Plan
from worksnap.workspace import Seams

from .conftest import STORE, tree_state, write


def test_symlinked_parent_never_leads_outside(root: Path, outside: Path) -> None:
    write(root, "vendor/x", "inside\n")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        shutil.rmtree(root / "vendor")
        os.symlink(outside, root / "vendor")  # vendor -> /outside, then restore vendor/x
        before = tree_state(outside)
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert tree_state(outside) == before
    assert not (outside / "x").exists()
    assert not (root / "vendor").is_symlink()
    assert (root / "vendor" / "x").read_text() == "inside\n"


def test_symlink_at_final_component_is_replaced_not_written_through(
    root: Path, outside: Path
) -> None:
    write(root, "a.txt", "mine\n")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        (root / "a.txt").unlink()
        os.symlink(outside / "secret.txt", root / "a.txt")
        before = tree_state(outside)
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert tree_state(outside) == before
    assert not (root / "a.txt").is_symlink()
    assert (root / "a.txt").read_text() == "mine\n"


def test_hard_link_at_final_component_is_replaced_not_written_through(
    root: Path, outside: Path
) -> None:
    write(root, "a.txt", "mine\n")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        (root / "a.txt").unlink()
        os.link(outside / "secret.txt", root / "a.txt")  # same inode as a file outside
        before = tree_state(outside)
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert (outside / "secret.txt").read_text() == "do not touch"
    assert tree_state(outside) != before  # only its link count went back down
    assert os.stat(outside / "secret.txt").st_nlink == 1
    assert (root / "a.txt").read_text() == "mine\n"


def test_deletes_never_follow_links(root: Path, outside: Path) -> None:
    write(root, "keep.txt", "k")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        os.symlink(outside, root / "link-to-dir")  # added since: removed as a link
        os.symlink(outside / "secret.txt", root / "link-to-file")
        (root / "gone").mkdir()  # a whole directory added since, with a link inside
        os.symlink(outside, root / "gone" / "inner")
        os.link(outside / "secret.txt", root / "gone" / "hard")
        before = tree_state(outside)
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert sorted(os.listdir(root)) == [STORE, "keep.txt"]
    assert (outside / "secret.txt").read_text() == "do not touch"
    assert set(tree_state(outside)) == set(before)


def _swap_for_link(directory: Path, outside: Path) -> None:
    """Replaces `directory` by a symlink to `outside` holding the same names."""
    for name in os.listdir(directory):
        if (directory / name).is_file():
            shutil.copy(directory / name, outside / name)
    shutil.rmtree(directory)
    os.symlink(outside, directory)


@pytest.mark.parametrize("what", ["modified file below", "recreated file below"])
def test_directory_swapped_for_link_between_plan_and_apply_is_a_conflict(
    root: Path, outside: Path, what: str
) -> None:
    write(root, "src/main.py", "v1\n")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        if what == "modified file below":
            write(root, "src/main.py", "v2\n")
        else:
            (root / "src" / "main.py").unlink()
        plan = ws.plan_restore(ws.load(snap.id))
        assert [c.path for c in plan.changes] == ["src/main.py"]
        _swap_for_link(root / "src", outside)
        before, outside_before = tree_state(root), tree_state(outside)
        with pytest.raises(ConflictError):
            ws.apply(plan)
    assert tree_state(root) == before
    assert tree_state(outside) == outside_before


class SwapAfterChecks:
    """Runs the queued callables after every check, just before the first change."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], None]] = []
        self.seams = Seams(apply_plan=self._late)

    def _late(self, root: str, plan: Plan, *args: Any, **kwargs: Any) -> Result:
        while self.queued:
            self.queued.pop(0)()
        return apply_plan(root, plan, *args, **kwargs)


@pytest.mark.parametrize("what", ["write below", "remove below"])
def test_swap_after_the_checks_is_stopped_by_nofollow(root: Path, outside: Path, what: str) -> None:
    swap_after_checks = SwapAfterChecks()
    write(root, "src/main.py", "v1\n")
    write(root, "src/other.py", "o\n")
    with Workspace(root, seams=swap_after_checks.seams) as ws:
        snap = ws.snapshot()
        if what == "write below":
            write(root, "src/main.py", "v2\n")
        else:
            write(root, "src/added.py", "new\n")  # the restore removes it
        before = tree_state(root)
        for name in ("main.py", "other.py", "added.py"):
            write(outside, name, f"outside {name}\n")  # the same names, as bait
        outside_before = tree_state(outside)

        def swap() -> None:
            shutil.rmtree(root / "src")
            os.symlink(outside, root / "src")

        swap_after_checks.queued.append(swap)
        result = ws.restore(snap.id)
    assert not result.ok
    assert "src is not a directory" in (result.error or "")
    assert result.rolled_back
    assert tree_state(outside) == outside_before
    assert tree_state(root) == before  # rolled back to the pre-restore state


def test_many_directories_do_not_exhaust_descriptors(root: Path) -> None:
    for i in range(400):
        write(root, f"d{i:03}/sub/f", str(i))
    with Workspace(root) as ws:
        snap = ws.snapshot()
        expected = tree_state(root)
        for i in range(400):
            shutil.rmtree(root / f"d{i:03}")
        gc.collect()  # descriptors of workspaces other tests dropped unclosed
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        try:
            result = ws.restore(snap.id)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.ok, result.error
    assert tree_state(root) == expected


def _deep(root: Path, depth: int, *, make: bool, data: bytes = b"bottom") -> bytes:
    """Makes (or reads back) a chain of `depth` directories `d` with a file at the bottom.

    With `make`, the chain may exist already: only the file is (re)written then.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        if make:
            out = os.open("f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
            os.write(out, data)
            os.close(out)
        inner = os.open("f", os.O_RDONLY, dir_fd=fd)
        try:
            return os.read(inner, 100)
        finally:
            os.close(inner)
    finally:
        os.close(fd)


def _remove_deep(root: Path) -> None:
    """Removes a chain `_deep` made, bottom up (shutil.rmtree recurses too deep for it)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        while "d" in os.listdir(fds[-1]):
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        for name in os.listdir(fds[-1]):
            os.unlink(name, dir_fd=fds[-1])
        while len(fds) > 1:
            os.close(fds.pop())
            os.rmdir("d", dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def test_a_very_deep_tree_restores(root: Path) -> None:
    depth = 1100  # deeper than Python's recursion limit, within PATH_MAX for the scan
    _deep(root, depth, make=True)
    try:
        with Workspace(root) as ws:
            snap = ws.snapshot()
            assert len(snap.dirs) == depth
            _deep(root, depth, make=True, data=b"changed at the bottom")
            result = ws.restore(snap.id)  # walks all the way down in one go
        assert result.ok, result.error
        assert _deep(root, depth, make=False) == b"bottom"
    finally:
        _remove_deep(root)


def _nested_git(root: Path) -> Path:
    git_dir = root / "x" / ".git"
    for part in ("objects", "refs", "info"):
        (git_dir / part).mkdir(parents=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    return git_dir


def _fifo_commondir(root: Path) -> None:
    os.mkfifo(_nested_git(root) / "commondir")


def _fifo_exclude(root: Path) -> None:
    os.mkfifo(_nested_git(root) / "info" / "exclude")


_GIT_SPECIALS = {
    "a FIFO .git in the tree": lambda root: os.mkfifo(root / "x" / ".git"),
    "a FIFO .git above the root": lambda root: os.mkfifo(root.parent / ".git"),
    ".git -> /dev/zero": lambda root: os.symlink("/dev/zero", root / "x" / ".git"),
    "a FIFO commondir": _fifo_commondir,
    "a FIFO info/exclude": _fifo_exclude,
}


@pytest.mark.parametrize("case", sorted(_GIT_SPECIALS))
def test_a_special_file_where_git_keeps_a_file_never_hangs_a_command(root: Path, case: str) -> None:
    """A FIFO or device named `.git` (in the tree or above it), or as a file git reads
    inside a `.git`: every command that scans opened it blocking, and waited forever
    (or read /dev/zero without end). Now it is no repository, or its rules are empty."""
    import subprocess
    import sys

    write(root, "a.txt", "a\n")
    write(root, "x/b.txt", "b\n")
    _GIT_SPECIALS[case](root)
    env = {**os.environ, "WORKSNAP_NO_DAEMON": "1"}
    for command in (["snapshot"], ["plan", "latest"], ["status"]):
        done = subprocess.run(
            [sys.executable, "-m", "worksnap", "--root", str(root), *command],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stderr)
    with Workspace(root) as ws:
        assert "x/b.txt" in {e.path for e in ws.load("latest").entries}
