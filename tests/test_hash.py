"""Reading ahead: hints only, never blocking, started for a cold tree and not for a warm one."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap import Workspace
from worksnap import hash as hash_module
from worksnap.errors import SnapshotError
from worksnap.hash import read_file
from worksnap.scanparts import Scan, add_link
from worksnap.workspace import Seams


def test_prefetch_skips_what_it_cannot_open_and_never_blocks(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "a")
    os.mkfifo(tmp_path / "fifo")  # a file swapped for a FIFO must not hang the helper
    os.symlink("a.txt", tmp_path / "link")  # nor be followed
    paths = [os.fsencode(tmp_path / name) for name in ("fifo", "gone", "link", "a.txt")]
    seen: list[bytes] = []

    def recorded() -> Iterable[bytes]:
        for path in paths:
            seen.append(path)
            yield path

    helper = threading.Thread(target=hash_module.Prefetch()._run, args=(recorded(),))
    helper.start()
    helper.join(timeout=30)
    assert not helper.is_alive()
    assert seen == paths


def test_leaving_stops_the_helper(tmp_path: Path) -> None:
    release = threading.Event()
    given: list[bytes] = []

    def slow() -> Iterable[bytes]:
        for i in range(1000):
            release.wait()
            given.append(b"%d" % i)
            yield os.fsencode(tmp_path / "missing")

    with hash_module.Prefetch() as prefetch:
        prefetch.start(slow())
        release.set()
    assert len(given) < 1000  # the exit stopped it early and waited for it


def recorded_prefetch(starts: list[list[bytes]]) -> Callable[[], hash_module.Prefetch]:
    """A read-ahead helper that records the paths of each start, and reads none of them."""

    class Recorded(hash_module.Prefetch):
        def start(self, paths: Iterable[bytes]) -> None:
            starts.append(list(paths))
            super().start(iter(()))

    return Recorded


def test_a_cold_snapshot_reads_ahead_exactly_the_files_it_hashes(root: Path) -> None:
    for i in range(100):
        write(root, f"d{i % 7}/f{i:03d}.txt", f"file {i}\n")
    starts: list[list[bytes]] = []
    seams = Seams(
        prefetch=recorded_prefetch(starts),
        slow_read_seconds=0.0,  # as if every read came from the disk
        racy_margin_ns=0,  # so that digests are cached at once
    )
    ws = Workspace(root, seams=seams)
    snap = ws.snapshot()
    # The first 64 are hashed before the helper starts; it is given the other 36.
    hinted = [path for start in starts for path in start]
    assert len(hinted) == 36
    assert {os.path.relpath(os.fsdecode(p), root) for p in hinted} < {e.path for e in snap.entries}
    starts.clear()
    ws.snapshot()
    assert starts == []  # warm: nothing to read, no helper
    assert threading.active_count() == 1


def test_reads_from_the_page_cache_are_not_read_ahead(root: Path) -> None:
    for i in range(100):
        write(root, f"f{i:03d}.txt", f"file {i}\n")
    started: list[list[bytes]] = []
    seams = Seams(prefetch=recorded_prefetch(started), slow_read_seconds=3600.0)  # reads are fast
    assert len(Workspace(root, seams=seams).snapshot().entries) == 100
    assert started == []


def test_a_fifo_where_a_file_was_listed_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Opened without O_NONBLOCK, a FIFO swapped in for a listed file made the read wait
    for a writer forever (a capture, or a restore's check of a path it replaces)."""

    def waited(*_: object) -> None:
        raise TimeoutError("open() waited on the FIFO")

    os.mkfifo(tmp_path / "f")
    old = signal.signal(signal.SIGALRM, waited)
    signal.alarm(10)
    try:
        with pytest.raises(SnapshotError, match="no longer a regular file"):
            read_file(str(tmp_path / "f"), "f", keep=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_file_swapped_for_a_symlink_or_the_reverse_since_listed_is_said_so(
    tmp_path: Path,
) -> None:
    """A review swapped files for symlinks while snapshots ran: the error was the system's
    "Too many levels of symbolic links" or "Invalid argument", not what happened."""
    os.symlink("elsewhere", tmp_path / "was-a-file")
    with pytest.raises(SnapshotError, match="is no longer a regular file"):
        read_file(str(tmp_path / "was-a-file"), "was-a-file", keep=False)
    (tmp_path / "was-a-link").write_text("a file now\n")
    found = Scan()
    with pytest.raises(SnapshotError, match="is no longer a symlink"):
        add_link(found, "was-a-link", str(tmp_path / "was-a-link"), -100)  # (AT_FDCWD)
