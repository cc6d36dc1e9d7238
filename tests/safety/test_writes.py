"""How a restore writes: temp file in the same directory, hashed, fsynced, renamed, dir fsynced."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from worksnap import Workspace

from .conftest import write

_TEMP = re.compile(r"\.worksnap-[0-9a-f]{12}\.tmp\Z")


def test_each_file_goes_temp_fsync_rename_then_dir_fsync(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "a.txt", "A\n")
    write(root, "sub/b.txt", "B\n", mode=0o600)
    os.symlink("a.txt", root / "sub" / "link")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        write(root, "a.txt", "changed\n")
        (root / "sub" / "b.txt").unlink()
        (root / "sub" / "link").unlink()
        events: list[tuple[str, ...]] = []
        real = {n: getattr(os, n) for n in ("open", "fsync", "rename", "symlink", "close")}

        store = str(root / ".worksnap")

        def ino(fd: int) -> int:
            return os.fstat(fd).st_ino

        def in_store(fd: int) -> bool:
            # The store's own files are written through its directory descriptor too.
            where = os.readlink(f"/proc/self/fd/{fd}")
            return where == store or where.startswith(store + "/")

        def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
            fd = real["open"](path, flags, mode, dir_fd=dir_fd)
            if dir_fd is not None and flags & os.O_CREAT and not in_store(dir_fd):
                events.append(("create", os.fsdecode(path), str(ino(dir_fd)), str(fd)))
                assert flags & os.O_EXCL
                assert flags & os.O_NOFOLLOW
            return fd

        def fsync(fd: int) -> None:
            if in_store(fd):
                real["fsync"](fd)
                return
            st = os.fstat(fd)
            kind = "fsync dir" if stat.S_ISDIR(st.st_mode) else "fsync file"
            events.append((kind, str(st.st_ino), str(fd)))
            real["fsync"](fd)

        def rename(src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> None:
            assert src_dir_fd == dst_dir_fd  # never across directories
            if src_dir_fd is not None and not in_store(src_dir_fd):
                events.append(("rename", os.fsdecode(src), os.fsdecode(dst), str(ino(src_dir_fd))))
            real["rename"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

        def symlink(target: Any, path: Any, *, dir_fd: Any = None) -> None:
            events.append(("symlink", os.fsdecode(path), str(ino(dir_fd))))
            real["symlink"](target, path, dir_fd=dir_fd)

        for name, func in (("open", open_), ("fsync", fsync), ("rename", rename)):
            monkeypatch.setattr(os, name, func)
        monkeypatch.setattr(os, "symlink", symlink)
        result = ws.restore(snap.id)
        monkeypatch.undo()
    assert result.ok, result.error
    renames = [e for e in events if e[0] == "rename"]
    assert sorted(e[2] for e in renames) == ["a.txt", "b.txt", "link"]
    for i, event in enumerate(events):
        if event[0] != "rename":
            continue
        _, tmp, _, dir_ino = event
        assert _TEMP.match(tmp)
        made = [e for e in events[:i] if e[0] in ("create", "symlink") and e[1] == tmp]
        assert made, f"{tmp} was not made before its rename"
        assert made[0][2] == dir_ino  # the temp is in the directory of the file
        if made[0][0] == "create":  # a file (not a symlink): its bytes fsynced before the rename
            fd = made[0][3]
            start = events.index(made[0])
            assert [e for e in events[start:i] if e[0] == "fsync file" and e[2] == fd]
        assert ("fsync dir", dir_ino) in [(e[0], e[1]) for e in events[i + 1 :]]
    assert (root / "sub" / "b.txt").stat().st_mode & 0o777 == 0o600
    assert not [n for n in os.listdir(root / "sub") if _TEMP.match(n)]


def test_writes_that_free_room_go_first(root: Path) -> None:
    """A file replaced by a smaller one is written before any write that needs room, the
    smallest first; the rest keep path order (a full disk stops a run only where its end
    state does not fit: tests/safety/test_disk_full.py)."""
    from worksnap.apply import order

    write(root, "a.txt", "a" * 10)
    write(root, "b.txt", "b")
    write(root, "c.txt", "c" * 5)
    write(root, "d.txt", "d" * 3)
    with Workspace(root) as ws:
        snap = ws.snapshot()
        write(root, "a.txt", "a" * 1000)  # restoring shrinks it to 10 bytes
        write(root, "b.txt", "b" * 100)  # to 1 byte
        write(root, "c.txt", "c")  # grows back to 5
        (root / "d.txt").unlink()  # made again
        os.symlink("b.txt", root / "e.txt")  # goes
        steps = order(ws.plan_restore(snap))
    assert [(action, change.path) for action, change in steps] == [
        ("remove", "e.txt"),
        ("write", "b.txt"),
        ("write", "a.txt"),
        ("write", "c.txt"),
        ("write", "d.txt"),
    ]
