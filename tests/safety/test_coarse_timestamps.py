"""A file system that keeps whole-second times: nothing written in a snapshot's second is missed.

On ext4 made with 128-byte inodes (as on ext3, FAT, some network mounts) a write
moves neither mtime nor ctime within the second: a same-size rewrite looks
unchanged, and a file created in a directory keeps the directory's times. worksnap
sees whole-second times, records that the store's file system ticks in seconds
(`cache/timestamps`), and from then on trusts a cached digest or listing only for
what is older than the snapshot by more than a tick, as git does.

These run on a real loop-mounted file system (tests/coarse_fs.py): forcing
whole-second mtimes with `os.utime` on a normal one would not reproduce it, as
ctime still moves in nanoseconds.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401  (fixtures)
from worksnap import Workspace
from worksnap.hash import hash_bytes
from worksnap.layout import StorePaths

pytestmark = pytest.mark.slow  # a loop mount, and waits for the right moment in a second


def in_one_second(scenario: Callable[[], None]) -> None:
    """Runs `scenario` so that all of it falls in one second of the clock (retried if not)."""
    for _ in range(20):
        # Late enough in the second that a write is older than a 100 ms margin, early
        # enough that the rest fits in the same second.
        while not 0.2 < time.time() % 1 < 0.4:
            time.sleep(0.01)
        start = int(time.time())
        scenario()
        if int(time.time()) == start:
            return
    pytest.fail("never fitted the scenario inside one second")


def _digest(manifest: object, path: str) -> str | None:
    return next((e.hash for e in manifest.entries if e.path == path), None)  # type: ignore[attr-defined]


WATCHED = pytest.mark.parametrize("watch", [False, True], ids=["plain", "watched"])
"""Also with an inotify watch (the daemon's workspaces): the tick feeds that path too."""


@WATCHED
def test_a_same_size_rewrite_in_the_snapshots_second_is_captured(
    coarse_tmp: Path,  # noqa: F811
    watch: bool,
) -> None:
    root = coarse_tmp / "ws"
    root.mkdir()
    path = root / "a.txt"
    taken: list[object] = []

    def scenario() -> None:
        taken.clear()
        path.write_bytes(b"one\n")
        with Workspace(root, watch=watch) as ws:
            taken.append(ws.snapshot())
            path.write_bytes(b"two\n")  # same size, same second: same mtime and ctime
            taken.append(ws.snapshot())

    in_one_second(scenario)
    first, second = taken
    assert _digest(first, "a.txt") == hash_bytes(b"one\n")
    assert _digest(second, "a.txt") == hash_bytes(b"two\n")
    time.sleep(1.1)  # and in a later second, from a fresh process's caches
    with Workspace(root) as ws:
        assert _digest(ws.snapshot(), "a.txt") == hash_bytes(b"two\n")


def test_a_file_created_in_the_snapshots_second_is_seen_later(coarse_tmp: Path) -> None:  # noqa: F811
    root = coarse_tmp / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "old.txt").write_bytes(b"old\n")
    time.sleep(1.1)  # the directory is old: its listing is cached by the first snapshot

    def scenario() -> None:
        (root / "d" / "new.txt").unlink(missing_ok=True)
        (root / "d" / "old.txt").rename(root / "d" / "older.txt")  # the directory changes
        (root / "d" / "older.txt").rename(root / "d" / "old.txt")  # in this second
        with Workspace(root) as ws:
            ws.snapshot()  # caches the directory's listing: its times look old enough
        (root / "d" / "new.txt").write_bytes(b"new\n")  # the directory's times stay the same

    in_one_second(scenario)
    time.sleep(1.1)
    with Workspace(root) as ws:
        later = ws.snapshot()
    assert _digest(later, "d/new.txt") == hash_bytes(b"new\n")


def test_the_tick_is_recorded_in_the_store(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    coarse = coarse_tmp / "ws"
    coarse.mkdir()
    (coarse / "a.txt").write_bytes(b"a\n")
    with Workspace(coarse) as ws:
        ws.snapshot()
    assert Path(StorePaths(str(coarse / ".worksnap")).timestamps).read_bytes() == b"1000000000\n"
    fine = tmp_path / "fine"
    fine.mkdir()
    (fine / "a.txt").write_bytes(b"a\n")
    with Workspace(fine) as ws:
        ws.snapshot()
    assert not os.path.exists(StorePaths(str(fine / ".worksnap")).timestamps)


def test_a_store_on_a_fine_file_system_for_a_coarse_tree(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    """The tick is the tree's: a store elsewhere (a fine file system) still records it."""
    root = coarse_tmp / "ws"
    root.mkdir()
    path = root / "a.txt"
    store = tmp_path / "store"
    taken: list[object] = []

    def scenario() -> None:
        taken.clear()
        path.write_bytes(b"one\n")
        with Workspace(root, store=store) as ws:
            taken.append(ws.snapshot())
        path.write_bytes(b"two\n")
        with Workspace(root, store=store) as ws:
            taken.append(ws.snapshot())

    in_one_second(scenario)
    assert _digest(taken[1], "a.txt") == hash_bytes(b"two\n")


@WATCHED
def test_a_coarse_file_system_mounted_below_a_fine_root(
    coarse_tmp: Path,  # noqa: F811
    tmp_path: Path,
    watch: bool,
) -> None:
    """The root's own times are fine: the tick is learnt from what is below, mid-capture."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "top.txt").write_bytes(b"fine\n")
    subprocess.run(["mount", "--bind", str(coarse_tmp), str(root / "sub")], check=True)
    try:
        path = root / "sub" / "a.txt"
        taken: list[object] = []

        def scenario() -> None:
            taken.clear()
            path.write_bytes(b"one\n")
            with Workspace(root, watch=watch) as ws:
                taken.append(ws.snapshot())
                path.write_bytes(b"two\n")
                taken.append(ws.snapshot())

        in_one_second(scenario)
        assert _digest(taken[0], "sub/a.txt") == hash_bytes(b"one\n")
        assert _digest(taken[1], "sub/a.txt") == hash_bytes(b"two\n")
        timestamps = Path(StorePaths(str(root / ".worksnap")).timestamps)
        assert timestamps.read_bytes() == b"1000000000\n"
    finally:
        subprocess.run(["umount", str(root / "sub")], check=True)


@contextlib.contextmanager
def coarse_below_a_fine_root(coarse: Path, tmp_path: Path) -> Iterator[Path]:
    """A root on a fine file system, snapshotted once (no tick known yet), with `sub` a
    whole-second file system bind-mounted there since."""
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "top.txt").write_bytes(b"fine\n")
    with Workspace(root) as ws:
        ws.snapshot()
    subprocess.run(["mount", "--bind", str(coarse), str(root / "sub")], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root / "sub")], check=True)


KILLED_IN_THE_SECOND_LOOK = """
import os, signal, sys
from worksnap.scan import scan_tree
from worksnap.workspace import Seams, Workspace

looks = []

def scan(*args, **kwargs):
    looks.append(1)
    if len(looks) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return scan_tree(*args, **kwargs)

Workspace(sys.argv[1], seams=Seams(scan_tree=scan)).snapshot()
"""
"""A snapshot killed (-9) as its second look begins: after its first saved the caches."""


def test_a_capture_killed_after_it_learnt_the_tick_leaves_no_record_it_trusted_before(
    coarse_tmp: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Killed in its second look, a capture that learnt the tick mid-way must leave no
    cache record that its first look trusted under the fine margin.

    Else the next process, which knows the tick, trusts them: a same-size rewrite in
    that second keeps the old digest, and a file created there is never seen.
    """
    with coarse_below_a_fine_root(coarse_tmp, tmp_path) as root:
        path, created = root / "sub" / "a.txt", root / "sub" / "b.txt"
        killed: list[int] = []

        def scenario() -> None:
            path.unlink(missing_ok=True)
            created.unlink(missing_ok=True)
            Path(StorePaths(str(root / ".worksnap")).timestamps).unlink(missing_ok=True)
            path.write_bytes(b"one\n")
            run = subprocess.run([sys.executable, "-c", KILLED_IN_THE_SECOND_LOOK, str(root)],
                                 check=False, capture_output=True)  # fmt: skip
            killed.append(run.returncode)
            path.write_bytes(b"two\n")  # same size, same second: the same stat
            created.write_bytes(b"new\n")

        in_one_second(scenario)
        assert killed[-1] == -9, killed  # the tick was learnt in the first look
        time.sleep(1.2)  # all of it older than a tick now
        with Workspace(root) as ws:
            later = ws.snapshot()
        assert _digest(later, "sub/a.txt") == hash_bytes(b"two\n")
        assert _digest(later, "sub/b.txt") == hash_bytes(b"new\n")


def test_a_look_that_learnt_the_tick_and_failed_is_not_trusted_by_the_next(
    coarse_tmp: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A review found a look that learnt the tick, then met a file gone since its
    listing (a temp file), retried with the listings it had made under the finer tick:
    a file created in that second was missing from the snapshot. And the process never
    stored its stat and listing caches again."""
    from worksnap.scan import scan_tree
    from worksnap.workspace import Seams

    with coarse_below_a_fine_root(coarse_tmp, tmp_path) as root:
        sub, looks, taken = root / "sub", [], []

        def scan(*args: object, **kwargs: object) -> object:
            found = scan_tree(*args, **kwargs)  # type: ignore[arg-type]
            looks.append(1)
            if len(looks) == 1:  # listed: a temp file goes, a file comes, in that second
                (sub / "tmp.txt").unlink()
                (sub / "new.txt").write_bytes(b"new\n")
            return found

        def scenario() -> None:
            looks.clear()
            taken.clear()
            for name in ("a.txt", "tmp.txt", "new.txt"):
                (sub / name).unlink(missing_ok=True)
            Path(StorePaths(str(root / ".worksnap")).timestamps).unlink(missing_ok=True)
            (sub / "a.txt").write_bytes(b"a\n")
            (sub / "tmp.txt").write_bytes(b"t\n")
            with Workspace(root, seams=Seams(scan_tree=scan)) as ws:
                taken.append(ws.snapshot())
                time.sleep(0.2)
                taken.append(ws.snapshot())  # the same process: its caches are stored again

        in_one_second(scenario)
        assert len(looks) >= 2
        assert _digest(taken[0], "sub/new.txt") == hash_bytes(b"new\n")
        cache = Path(StorePaths(str(root / ".worksnap")).stat_cache)
        assert cache.exists() and Path(StorePaths(str(root / ".worksnap")).listing_cache).exists()
