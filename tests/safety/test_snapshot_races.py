"""Snapshot-time races: a file that changes while it is hashed is read again or reported.

Never is a digest recorded for bytes the file did not hold at one moment.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worksnap import SnapshotError, Workspace
from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes, read_file
from worksnap.paths import Digest
from worksnap.scan import Scan, scan_tree
from worksnap.workspace import Seams

from .conftest import write

OLD = b"old-" * 64
NEW = b"NEW-" * 64  # the same size: only the bytes differ


def _rewrite_during_reads(
    monkeypatch: pytest.MonkeyPatch, path: Path, contents: Callable[[int], bytes | None]
) -> list[int]:
    """After the first 16-byte chunk of read number n, writes contents(n) into the file.

    Open `SMALL_READS` workspaces to read 16 bytes at a time.
    """
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


SMALL_READS = Seams(read_file=functools.partial(read_file, chunk_size=16))
"""Files are read 16 bytes at a time, so that a write can land between two reads."""


def _frozen_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulates a filesystem whose timestamps do not tick between two writes."""
    real_fstat = os.fstat
    seen: dict[int, os.stat_result] = {}

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return seen.setdefault(st.st_ino, st)

    monkeypatch.setattr(os, "fstat", fstat)


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
    with Workspace(root, seams=SMALL_READS) as ws:
        if not ticks:
            _frozen_stat(monkeypatch)
        reads = _rewrite_during_reads(monkeypatch, path, lambda n: NEW if n == 1 else None)
        digest, stored = _recorded(ws, "f.txt")
    assert len(reads) >= 2  # it was read again
    assert stored == NEW  # what the file holds now; never OLD[:16] + NEW[16:]
    assert digest == hash_bytes(NEW)


def test_file_that_keeps_changing_is_reported(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(root, "f.txt", OLD)
    with Workspace(root, seams=SMALL_READS) as ws:
        _frozen_stat(monkeypatch)
        _rewrite_during_reads(monkeypatch, path, lambda n: NEW if n % 2 else OLD)
        with pytest.raises(SnapshotError, match="kept changing"):
            ws.snapshot()
        assert ws.list() == []  # nothing half-true was recorded


def test_file_growing_while_hashed_is_read_again(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(root, "log.txt", OLD)
    with Workspace(root, seams=SMALL_READS) as ws:
        reads = _rewrite_during_reads(
            monkeypatch, path, lambda n: OLD + b"appended" if n == 1 else None
        )
        _, stored = _recorded(ws, "log.txt")
    assert len(reads) >= 2
    assert stored == OLD + b"appended"


class _ChangedAfterHashing(DiskStore):
    """A store whose large files change between being hashed and being stored."""

    def add_file(self, digest: Digest, path: str | bytes, rel: str, *, dir_fd: int | None) -> bool:
        big = Path(self.dir).parent / rel
        big.write_bytes(big.read_bytes()[::-1])  # changed after it was hashed
        return super().add_file(digest, path, rel, dir_fd=dir_fd)


def test_large_file_changed_between_hash_and_store_is_reported(root: Path) -> None:
    big = os.urandom(1 << 20)
    path = write(root, "big.bin", big)
    with Workspace(root, seams=Seams(open_store=_ChangedAfterHashing)) as ws:
        with pytest.raises(SnapshotError, match="changed while it was being stored"):
            ws.snapshot()
        assert ws.list() == []
        assert not any(ws.store.digests())
    assert path.read_bytes() == big[::-1]


def test_parent_swapped_for_a_symlink_never_reads_outside(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside).mkdir()
    (outside / "x.txt").write_bytes(b"SECRET outside the root")
    write(root, "d/x.txt", "inside")

    scans = []

    def scan_then_swap(*args: Any, **kwargs: Any) -> Scan:
        found = scan_tree(*args, **kwargs)
        scans.append(found)
        if len(scans) == 1:
            (root / "d" / "x.txt").unlink()
            (root / "d").rmdir()
            os.symlink(outside, root / "d")  # swapped after the scan, before the read
        return found

    with Workspace(root, seams=Seams(scan_tree=scan_then_swap)) as ws:
        # The first look fails on the swap; the capture looks again and takes the link.
        snap = ws.snapshot()
        stored = [ws.store.read(d) for d in ws.store.digests()]
    assert len(scans) == 2
    assert [(e.path, e.type, e.target) for e in snap.entries] == [("d", "symlink", str(outside))]
    assert b"SECRET outside the root" not in stored


@pytest.mark.parametrize("watch", [False, True], ids=["plain", "watched"])
def test_a_file_gone_between_listing_and_reading_makes_the_capture_look_again(
    root: Path, watch: bool
) -> None:
    """An editor's atomic save: a temp file listed, then renamed over the real one before
    it is read. Every such snapshot failed ("cannot read: No such file or directory"), also
    the pre-restore snapshot of an unrelated restore (review I 13). The capture looks
    again, and takes the tree as the next listing finds it."""
    write(root, "kept.txt", "kept")
    scans = []

    def scan_then_save(*args: Any, **kwargs: Any) -> Scan:
        found = scan_tree(*args, **kwargs)
        scans.append(found)
        if len(scans) == 1:
            write(root, ".save.tmp", "new contents")  # (the listing saw none: list again)
            found = scan_tree(*args, **kwargs)
            os.rename(root / ".save.tmp", root / "saved.txt")  # after the listing
        return found

    with Workspace(root, watch=watch, seams=Seams(scan_tree=scan_then_save)) as ws:
        snap = ws.snapshot()
        assert len(scans) == 2
        assert [e.path for e in snap.entries] == ["kept.txt", "saved.txt"]


@pytest.mark.parametrize("watch", [False, True], ids=["plain", "watched"])
def test_a_file_gone_under_every_look_is_left_out_by_the_last(root: Path, watch: bool) -> None:
    """A tool that renames temp files without a pause: every look meets one gone. Looking
    again only halved the failures (review I 13, its repro 13: 5 of 10 snapshots still
    failed). The last look leaves such a file out, as a listing leaves out what is deleted
    while it walks: it was not there when read. Everything else is captured."""
    write(root, "kept.txt", "kept")
    write(root, "sub/saved.txt", "saved 0")
    scans = []

    def scan_then_save(*args: Any, **kwargs: Any) -> Scan:
        write(root, "churn.tmp", "x")
        write(root, "sub/.save.tmp", f"saved {len(scans) + 1}")
        found = scan_tree(*args, **kwargs)
        scans.append(found)
        os.unlink(root / "churn.tmp")  # after the listing, before the reads
        os.rename(root / "sub/.save.tmp", root / "sub/saved.txt")
        return found

    with Workspace(root, watch=watch, seams=Seams(scan_tree=scan_then_save)) as ws:
        for n in range(1, 3):  # every look finds the tree changing: none fails
            snap = ws.snapshot()
            assert len(scans) == 3 * n
            assert [e.path for e in snap.entries] == ["kept.txt", "sub/saved.txt"]
            assert ws.file_bytes(snap.id, "sub/saved.txt")[1] == f"saved {3 * n}".encode()
    with Workspace(root) as ws:  # a plain look, the tree still: it holds what was captured
        assert not ws.plan_restore(ws.load(snap.id)).changes


def test_of_two_snapshots_taken_at_once_the_one_begun_later_is_the_newest(root: Path) -> None:
    """Parallel tool calls of an agent run their hooks at once: one hook's capture read a
    file, then another tool's edit of it landed and that tool's hook took a snapshot whole,
    then the first hook's snapshot was saved. It was stamped when it ended, so it became
    `latest` (and what `step:N` and `rewind N` restore) with the file as it was before the
    edit (review W 02). A snapshot is stamped when its look at the tree began: one begun
    after an edit ended is newer than one begun before it."""
    write(root, "edited.txt", "old\n")
    later: list[str] = []

    def read_then_edit(path: str | bytes, rel: str, **kwargs: Any) -> Any:
        found = read_file(path, rel, **kwargs)
        if rel == "edited.txt" and not later:
            write(root, "edited.txt", "new, longer\n")  # the parallel tool's edit, its hook
            with Workspace(root) as parallel:
                later.append(parallel.snapshot(step=1).id)
        return found

    with Workspace(root, seams=Seams(read_file=read_then_edit)) as ws:
        first = ws.snapshot(step=1)
        assert ws.file_bytes(first.id, "edited.txt")[1] == b"old\n"  # as it was read
        for ref in ("latest", "step:1"):
            assert ws.load(ref).id == later[0], ref
        assert ws.file_bytes("step:1", "edited.txt")[1] == b"new, longer\n"
        assert not ws.plan_restore(ws.load("latest")).changes  # the tree is as the newest
