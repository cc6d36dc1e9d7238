"""Snapshot-time races: a file that changes while it is hashed is read again or reported.

Never is a digest recorded for bytes the file did not hold at one moment.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import worksnap.hash
import worksnap.store
from worksnap import SnapshotError, Workspace
from worksnap.hash import hash_bytes

from .conftest import write

OLD = b"old-" * 64
NEW = b"NEW-" * 64  # the same size: only the bytes differ


def _rewrite_during_reads(
    monkeypatch: pytest.MonkeyPatch, path: Path, contents: Callable[[int], bytes | None]
) -> list[int]:
    """Reads 16 bytes at a time; after the first chunk of read number n, writes contents(n)."""
    monkeypatch.setattr(worksnap.hash, "_CHUNK", 16)
    real_open, real_read = os.open, os.read
    fresh: set[int] = set()
    reads: list[int] = []

    def open_(file: str | bytes, flags: int, *args: object, **kwargs: object) -> int:
        fd = real_open(file, flags, *args, **kwargs)  # type: ignore[arg-type]
        # Files are opened by name under a directory descriptor, or by absolute path.
        name = os.fsdecode(file)
        if name in (str(path), path.name) and not flags & os.O_WRONLY:
            fresh.add(fd)
        return fd

    def read(fd: int, n: int) -> bytes:
        chunk = real_read(fd, n)
        if fd in fresh:  # the first chunk of a new read of the file
            fresh.discard(fd)
            reads.append(1)
            new = contents(len(reads))
            if new is not None:
                with open(path, "r+b") as f:
                    f.write(new)
        return chunk

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "read", read)
    return reads


def _frozen_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulates a filesystem whose timestamps do not tick between two writes."""
    real_fstat = os.fstat
    seen: dict[int, os.stat_result] = {}

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return seen.setdefault(st.st_ino, st)

    monkeypatch.setattr(worksnap.hash.os, "fstat", fstat)


def _recorded(ws: Workspace, rel: str) -> tuple[str, bytes]:
    manifest = ws.snapshot()
    (entry,) = [e for e in manifest.entries if e.path == rel]
    assert entry.hash is not None
    return entry.hash, ws.store.read(entry.hash)


@pytest.mark.parametrize("ticks", [True, False], ids=["times move", "times frozen"])
def test_file_rewritten_while_hashed_is_read_again(
    root: Path, monkeypatch: pytest.MonkeyPatch, ticks: bool
) -> None:
    path = write(root, "f.txt", OLD)
    with Workspace(root) as ws:
        if not ticks:
            _frozen_stat(monkeypatch)
        reads = _rewrite_during_reads(monkeypatch, path, lambda n: NEW if n == 1 else None)
        digest, stored = _recorded(ws, "f.txt")
    assert len(reads) >= 2  # it was read again
    assert stored == NEW  # what the file holds now; never OLD[:16] + NEW[16:]
    assert digest == hash_bytes(NEW)


def test_file_that_keeps_changing_is_reported(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(root, "f.txt", OLD)
    with Workspace(root) as ws:
        _frozen_stat(monkeypatch)
        _rewrite_during_reads(monkeypatch, path, lambda n: NEW if n % 2 else OLD)
        with pytest.raises(SnapshotError, match="kept changing"):
            ws.snapshot()
        assert ws.list() == []  # nothing half-true was recorded


def test_file_growing_while_hashed_is_read_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(root, "log.txt", OLD)
    with Workspace(root) as ws:
        reads = _rewrite_during_reads(
            monkeypatch, path, lambda n: OLD + b"appended" if n == 1 else None
        )
        _, stored = _recorded(ws, "log.txt")
    assert len(reads) >= 2
    assert stored == OLD + b"appended"


def test_large_file_changed_between_hash_and_store_is_reported(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = os.urandom(1 << 20)
    path = write(root, "big.bin", big)
    real_add_file = worksnap.store.DiskStore.add_file

    def add_file(
        self: worksnap.store.DiskStore, digest: str, path_: bytes, rel: str, *, dir_fd: int | None
    ) -> bool:
        write(root, "big.bin", big[::-1])  # changed after it was hashed
        return real_add_file(self, digest, path_, rel, dir_fd=dir_fd)  # type: ignore[arg-type]

    monkeypatch.setattr(worksnap.store.DiskStore, "add_file", add_file)
    with Workspace(root) as ws:
        with pytest.raises(SnapshotError, match="changed while it was being stored"):
            ws.snapshot()
        assert ws.list() == []
        assert not any(ws.store.digests())
    assert path.read_bytes() == big[::-1]


def test_parent_swapped_for_a_symlink_never_reads_outside(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worksnap.workspace

    outside = tmp_path / "outside"
    (outside).mkdir()
    (outside / "x.txt").write_bytes(b"SECRET outside the root")
    write(root, "d/x.txt", "inside")
    real_scan = worksnap.workspace.scan_tree

    def scan_then_swap(*args: object, **kwargs: object) -> object:
        found = real_scan(*args, **kwargs)  # type: ignore[arg-type]
        (root / "d" / "x.txt").unlink()
        (root / "d").rmdir()
        os.symlink(outside, root / "d")  # swapped after the scan, before the read
        return found

    monkeypatch.setattr(worksnap.workspace, "scan_tree", scan_then_swap)
    with Workspace(root) as ws:
        with pytest.raises(SnapshotError, match="changed while the snapshot ran"):
            ws.snapshot()
        stored = [ws.store.read(d) for d in ws.store.digests()]
    assert b"SECRET outside the root" not in stored
