"""Fault injection for the safety suite: make one `os` call of a restore fail.

The workspace's applier is wrapped through `Seams(apply_plan=...)` so that only the
`os` calls an apply makes are counted and failed; the `os` functions themselves
are the operating system's boundary, patched because the OS cannot be asked to
fail one call on demand.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worksnap.apply import apply_plan as real_apply
from worksnap.workspace import Seams, Workspace

from .conftest import write


def _is_dir_fd(fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False


# Each step of an apply, as the `os` function that carries it out and a test
# that tells this use of the function from its other uses.
STEPS: dict[str, tuple[str, Callable[..., bool]]] = {
    "unlink": ("unlink", lambda *a, **k: True),
    "rmdir": ("rmdir", lambda *a, **k: True),
    "mkdir": ("mkdir", lambda *a, **k: True),
    "open dir": ("open", lambda path, flags, *a, **k: bool(flags & os.O_DIRECTORY)),
    "open temp file": ("open", lambda path, flags, *a, **k: bool(flags & os.O_CREAT)),
    "write": ("write", lambda *a, **k: True),
    "fchmod": ("fchmod", lambda *a, **k: True),
    "fsync file": ("fsync", lambda fd: not _is_dir_fd(fd)),
    "fsync dir": ("fsync", _is_dir_fd),
    "symlink": ("symlink", lambda *a, **k: True),
    "rename": ("rename", lambda *a, **k: True),
}


class Faults:
    """Counts, and can fail, the steps of the first `arm_calls` applies of a workspace.

    Rollbacks are applies too: with `arm_calls=1` only the restore itself fails
    and its rollback runs clean. Only a workspace opened with `seams` is watched.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, arm_calls: int = 1) -> None:
        self.counts: Counter[str] = Counter()
        self.fail_step: str | None = None
        self.fail_at = 0
        self.errno = errno.EIO
        self.persistent = False
        self.failed = 0
        self._armed = False
        self._left = arm_calls

        def apply_plan(*args: Any, **kwargs: Any) -> Any:
            if self._left <= 0:
                return real_apply(*args, **kwargs)
            self._left -= 1
            self._armed = True
            try:
                return real_apply(*args, **kwargs)
            finally:
                self._armed = False

        self.seams = Seams(apply_plan=apply_plan)
        """Open the workspace under test with these."""
        for func in {func for func, _ in STEPS.values()}:
            monkeypatch.setattr(os, func, self._wrap(func, getattr(os, func)))

    def _wrap(self, func: str, real: Callable[..., Any]) -> Callable[..., Any]:
        steps = [(name, test) for name, (f, test) in STEPS.items() if f == func]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self._armed:
                for name, test in steps:
                    if test(*args, **kwargs):
                        self.counts[name] += 1
                        hit = self.counts[name] == self.fail_at or (
                            self.persistent and self.counts[name] >= self.fail_at
                        )
                        if name == self.fail_step and hit:
                            self.failed += 1
                            raise OSError(self.errno, os.strerror(self.errno))
            return real(*args, **kwargs)

        return wrapper


def build_scenario(root: Path, seams: Seams | None = None) -> tuple[Workspace, str]:
    """A workspace whose restore needs every kind of step; returns it and the target id.

    The target has files (one executable), a symlink, nested and empty
    directories; since then files were edited, chmodded, added and deleted,
    directories added and removed, and a file and a directory swapped types.
    """
    write(root, "keep.txt", "same\n")
    write(root, "mod.txt", "old content\n")
    write(root, "exec.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "del.txt", "deleted since\n")
    write(root, "ddir/f1", "one\n")
    write(root, "ddir/sub/f2", "two\n", mode=0o600)
    os.symlink("mod.txt", root / "link")
    (root / "empty").mkdir()
    write(root, "was_file", "a file then\n")
    write(root, "was_dir/x", "inside\n")
    ws = Workspace(root, seams=seams)
    target = ws.snapshot(label="target").id
    write(root, "mod.txt", "new content, longer\n")
    (root / "exec.sh").chmod(0o644)
    (root / "del.txt").unlink()
    shutil.rmtree(root / "ddir")
    (root / "link").unlink()
    os.symlink("keep.txt", root / "link")
    (root / "empty").rmdir()
    (root / "was_file").unlink()
    write(root, "was_file/y", "a dir now\n")
    shutil.rmtree(root / "was_dir")
    write(root, "was_dir", "a file now\n")
    write(root, "added.txt", "added since\n")
    write(root, "addeddir/a/b.txt", "deep added\n")
    (root / "addeddir" / "emptyadded").mkdir()
    return ws, target


def killed_at_call(argv_index: int, then: str) -> str:
    """A Python script that kills itself (SIGKILL) at its n-th unlink, replace, write or
    fsync, n being `sys.argv[argv_index]`, and runs `then` (the code under test)."""
    return rf"""
import os, signal, sys
n, calls = int(sys.argv[{argv_index}]), [0]
for name in ("unlink", "replace", "write", "fsync"):
    def wrap(*args, _real=getattr(os, name), **kwargs):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return _real(*args, **kwargs)
    setattr(os, name, wrap)
{then}
"""
