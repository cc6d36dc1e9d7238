"""Reading ahead: hints only, never blocking, started for a cold tree and not for a warm one."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap import Workspace
from worksnap import hash as hash_module
from worksnap import workspace as workspace_module


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


def test_a_cold_snapshot_reads_ahead_exactly_the_files_it_hashes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(100):
        write(root, f"d{i % 7}/f{i:03d}.txt", f"file {i}\n")
    hinted: list[bytes] = []
    real_start = hash_module.Prefetch.start

    def start(self: hash_module.Prefetch, paths: Iterable[bytes]) -> None:
        hinted.extend(paths)
        real_start(self, iter(()))

    monkeypatch.setattr(hash_module.Prefetch, "start", start)
    monkeypatch.setattr(workspace_module, "_SLOW_READ_SECONDS", 0.0)  # as if from the disk
    time.sleep(workspace_module._RACY_MARGIN_NS / 1e9 * 2)  # so that digests are cached
    ws = Workspace(root)
    snap = ws.snapshot()
    # The first 64 are hashed before the helper starts; it is given the other 36.
    assert len(hinted) == 36
    assert {os.path.relpath(os.fsdecode(p), root) for p in hinted} < {e.path for e in snap.entries}
    hinted.clear()
    ws.snapshot()
    assert hinted == []  # warm: nothing to read, no helper
    assert threading.active_count() == 1


def test_reads_from_the_page_cache_are_not_read_ahead(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(100):
        write(root, f"f{i:03d}.txt", f"file {i}\n")
    started: list[object] = []
    monkeypatch.setattr(hash_module.Prefetch, "start", lambda self, paths: started.append(1))
    monkeypatch.setattr(workspace_module, "_SLOW_READ_SECONDS", 3600.0)  # every read is fast
    assert len(Workspace(root).snapshot().entries) == 100
    assert started == []
