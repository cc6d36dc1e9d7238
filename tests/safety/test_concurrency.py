"""Concurrency: snapshots side by side, a restore and a snapshot, a lock holder that dies.

Also: every metadata write in the store is atomic (temp file in the same
directory, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import builtins
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.conftest import tick
from worksnap import LockError, Workspace
from worksnap.layout import StorePaths
from worksnap.lock import StoreLock
from worksnap.workspace import Seams

from .conftest import STORE, cli, tree_state, write
from .faults import build_scenario
from .test_kill import SRC

pytestmark = pytest.mark.slow  # processes racing for one store


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )


SNAPSHOTTER = r"""
import os, sys
from worksnap import Workspace
root, name, other = sys.argv[1], sys.argv[2], sys.argv[3]
# The other process rewrites its directory all the time: reading it would rightly fail
# with "kept changing". Both still share the store, which is what is under test.
with Workspace(root, exclude=(other,)) as ws:
    for i in range(4):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for j in range(40):
            with open(os.path.join(root, name, f"{j}.txt"), "w") as f:
                f.write(f"{name} {i} {j}\n" * (j + 1))
        with open(os.path.join(root, name, "big.bin"), "wb") as f:
            f.write(os.urandom(1 << 20) + name.encode())  # stored loose
        print(ws.snapshot(label=f"{name} {i}").id, flush=True)
"""


def test_two_processes_snapshot_one_store_at_once(root: Path) -> None:
    write(root, "shared.txt", "both see this\n")
    with Workspace(root) as ws:
        ws.snapshot()  # the store exists before the race
    children = [_python(SNAPSHOTTER, str(root), name, other) for name, other in ("ab", "ba")]
    ids = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        ids += out.split()
    assert len(ids) == 8
    code, out, err = cli("--root", str(root), "--json", "verify")
    assert (code, msgspec.json.decode(out)["problems"]) == (0, []), err
    listed = {s["id"] for s in msgspec.json.decode(cli("--root", str(root), "--json", "list")[1])}
    assert set(ids) <= listed
    with Workspace(root) as ws:  # and each one restores
        for snapshot_id in (ids[0], ids[-1]):
            assert ws.restore(snapshot_id).ok


RESTORER = r"""
import sys
from worksnap import Workspace
with Workspace(sys.argv[1]) as ws:
    result = ws.restore(sys.argv[2])
    print(result.ok, result.pre_restore, flush=True)
"""


def test_restore_and_snapshot_in_parallel_serialize(root: Path) -> None:
    for d in range(8):
        for f in range(25):
            write(root, f"d{d}/f{f}.txt", f"target {d} {f}\n")
    with Workspace(root) as ws:
        target = ws.snapshot()
    for d in range(8):
        for f in range(25):
            write(root, f"d{d}/f{f}.txt", f"current {d} {f}, longer\n")
    restorer = _python(RESTORER, str(root), target.id)
    seen: list[str] = []
    with Workspace(root) as ws:
        while restorer.poll() is None:
            seen.append(ws.snapshot(label="during").tree)
    out, err = restorer.communicate()
    ok, pre = out.split()
    assert ok == "True", err
    with Workspace(root) as ws:
        before_tree = ws.load(pre).tree
    # Every snapshot saw the whole tree before the restore or the whole tree after it.
    assert seen
    assert set(seen) <= {before_tree, target.tree}, "a snapshot saw a half-restored tree"


HOLDER = r"""
import sys, time
from worksnap.layout import StorePaths
from worksnap.lock import StoreLock
with StoreLock(sys.argv[1], exclusive=True):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_lock_of_a_killed_process_does_not_block(root: Path) -> None:
    write(root, "a.txt", "a")
    assert cli("--root", str(root), "snapshot")[0] == 0
    holder = _python(HOLDER, str(root / STORE))
    assert holder.stdout is not None
    assert holder.stdout.readline() == "locked\n"
    note = (root / STORE / "lock.holder").read_text()
    assert note == f"pid {holder.pid} on {socket.gethostname()}\n"
    waiting = StoreLock(str(root / STORE), exclusive=False, timeout=0.2)
    with pytest.raises(LockError, match=f"pid {holder.pid} on {socket.gethostname()}"):
        waiting.__enter__()
    holder.send_signal(signal.SIGKILL)
    holder.communicate(timeout=10)
    started = time.monotonic()
    code, _, err = cli("--root", str(root), "snapshot")
    assert code == 0, err
    assert time.monotonic() - started < 10  # the kernel released the lock at death


def test_long_lived_workspace_reads_objects_another_process_packed(root: Path) -> None:
    write(root, "a.txt", "first\n")
    with Workspace(root) as ws:
        ws.snapshot()  # loads this instance's pack index
        other = _python(SNAPSHOTTER, str(root), "other", "none")
        _, err = other.communicate(timeout=120)
        assert other.returncode == 0, err
        newest = ws.resolve("latest")
        shutil.rmtree(root / "other")  # the restore must read the other process's objects
        result = ws.restore(newest)
    assert result.ok, result.error
    assert (root / "other" / "0.txt").read_text() == "other 3 0\n"


class _Tracer:
    """Records file creation, fsync and rename in the store, by absolute path.

    The store is written through its directory descriptor (`storedir.StoreDir`), so
    a name is resolved against the descriptor it is relative to, and a descriptor
    to the path it has, through /proc/self/fd: what the kernel says, at that moment.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
        self.store = str(store)
        self.events: list[tuple[str, str, str]] = []
        real_open, real_fsync = os.open, os.fsync
        real_replace, real_rename, real_bopen = os.replace, os.rename, builtins.open

        def fd_path(fd: int) -> str:
            return os.readlink(f"/proc/self/fd/{fd}")

        def absolute(path: Any, dir_fd: int | None) -> str:
            if isinstance(path, int):
                return fd_path(path)
            if dir_fd is None:
                return os.path.abspath(os.fsdecode(path))
            return os.path.join(fd_path(dir_fd), os.fsdecode(path))

        def open_(path: Any, flags: int, *args: Any, dir_fd: int | None = None, **kw: Any) -> int:
            fd = real_open(path, flags, *args, dir_fd=dir_fd, **kw)
            if flags & (os.O_WRONLY | os.O_RDWR):
                self.events.append(("write", absolute(path, dir_fd), ""))
            return fd

        def bopen(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            f = real_bopen(file, mode, *args, **kwargs)
            if isinstance(file, (str, bytes, os.PathLike)) and set(mode) & set("wax+"):
                self.events.append(("write", os.path.abspath(os.fsdecode(file)), ""))
            return f

        def fsync(fd: int) -> None:
            real_fsync(fd)
            self.events.append(("fsync", fd_path(fd), ""))

        def moved(real: Any) -> Any:
            def move(src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None) -> None:
                before = absolute(src, src_dir_fd)
                after = absolute(dst, dst_dir_fd)
                real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
                self.events.append(("rename", before, after))

            return move

        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(builtins, "open", bopen)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", moved(real_replace))
        monkeypatch.setattr(os, "rename", moved(real_rename))

    def check(self) -> set[str]:
        """Asserts every store file was published atomically; returns what was published."""
        published: set[str] = set()
        paths = StorePaths(self.store)
        # Atomic but not durable, by design: losing them costs time, never a snapshot.
        losable = {
            os.path.relpath(p, self.store)
            for p in (
                paths.stat_cache, paths.listing_cache, paths.tree_cache, paths.lock_holder,
                paths.last_full, paths.last_capture,
            )
        }  # fmt: skip
        for i, (kind, where, dst) in enumerate(self.events):
            if kind == "rename" and dst.startswith(self.store + "/"):
                src = where
                name = os.path.relpath(dst, self.store)
                assert os.path.dirname(src) == os.path.dirname(dst), f"{name}: temp elsewhere"
                earlier, later = self.events[:i], self.events[i + 1 :]
                if name not in losable:
                    assert ("fsync", src, "") in earlier, f"{name}: not fsynced before rename"
                    assert ("fsync", os.path.dirname(dst), "") in later, f"{name}: dir not fsynced"
                published.add(name)
        for kind, where, _ in self.events:
            if kind == "write" and where.startswith(self.store + "/"):
                name = os.path.relpath(where, self.store)
                if name in published or name in ("journal.json",):
                    raise AssertionError(f"{name} was written in place")
        return published


def test_every_metadata_write_is_atomic(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tracer = _Tracer(monkeypatch, root / STORE)
    # A racy margin of 0 and a tick before the second snapshot: every file and directory
    # is older than that scan, so both caches are written, every time (they were written
    # or not depending on how long the scenario took, and the listing cache's write was
    # checked against the rules of durable files only when it happened: issue 11, #15).
    ws, target = build_scenario(root, Seams(racy_margin_ns=0))  # store, root, records
    write(root, "big.bin", os.urandom(1 << 20))  # a loose object
    tick(root)
    with ws:
        ws.snapshot()
        assert ws.restore(target).ok  # pre-restore record, journal, lock note
    published = tracer.check()
    kinds = {name.split("/")[0] if "/" in name else name for name in published}
    assert {"snapshots", "packs", "objects", "journal.json", "root"} <= kinds
    assert {".gitignore", "lock.holder", "cache/stat", "cache/dirs"} <= published
    assert not (root / STORE / "journal.json").exists()
    assert tree_state(root)  # the restore itself happened
