"""Writes the watcher hears at a path that holds another file (issue 12).

A descriptor opened on a file by a name that then went (removed, or another file
renamed onto it) writes under that name for as long as it stays open, while the file
lives on under another name in the tree. inotify names the path; fanotify names the
file (`fanotify.py`), and a file written that is at no name an event named makes the
capture stat every file (`written.py`). Most of these cases were found by a hostile
review of stop 28's first answer (files kept "hot" by inode, `481105b`), which each of
them defeated; the descriptor is written through, or `fchmod`-ed, after snapshots.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from tests.conftest import write
from tests.test_watch import plain
from worksnap import Workspace
from worksnap.errors import SnapshotError
from worksnap.fanotify import file_system, handle_of, inode_of
from worksnap.manifest import Manifest
from worksnap.scan import scan_tree
from worksnap.watch import Watcher
from worksnap.workspace import Seams

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")


def state(manifest: Manifest) -> dict[str, tuple[str | None, int]]:
    return {e.path: (e.hash, e.mode) for e in manifest.entries}


def touch_through(f: BinaryIO, how: str) -> None:
    if how == "write":
        f.write(b"two\n")
        f.truncate()
    else:
        os.fchmod(f.fileno(), 0o755)  # IN_ATTRIB, heard at the name it was opened by


def watcher(ws: Workspace) -> Watcher:
    found = ws._capture._watcher
    assert found is not None
    return found


@pytest.mark.parametrize("how", ["write", "fchmod"])
@pytest.mark.parametrize("via", ["ignored name", "ignored dir", "outside the root"])
def test_a_file_that_lost_its_name_is_seen_after_it_left_the_tree_and_came_back(
    root: Path, tmp_path: Path, via: str, how: str
) -> None:
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "a.txt", "one\n")
    (root / "build").mkdir()
    away = {"ignored name": root / "c.log", "ignored dir": root / "build" / "c",
            "outside the root": tmp_path / "c"}[via]  # fmt: skip
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        with open(root / "a.txt", "r+b") as f:
            os.link(root / "a.txt", root / "b.txt")
            os.unlink(root / "a.txt")
            write(root, "a.txt", "another file\n")
            ws.snapshot()
            os.rename(root / "b.txt", away)
            ws.snapshot()
            os.rename(away, root / "d.txt")  # back, under a new name, with one link
            ws.snapshot()
            touch_through(f, how)  # heard at a.txt, which holds another file
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


@pytest.mark.parametrize("how", ["write", "fchmod"])
def test_a_file_linked_through_an_ignored_name_opened_there_is_seen(
    root: Path, tmp_path: Path, how: str
) -> None:
    write(root, ".gitignore", "*.log\n")
    write(root, "k.txt", "one\n")
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        os.link(root / "k.txt", root / "x.log")  # heard at an ignored name only
        ws.snapshot()
        with open(root / "x.log", "r+b") as f:
            os.unlink(root / "x.log")
            write(root, "x.log", "another file\n")
            ws.snapshot()
            touch_through(f, how)
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


@pytest.mark.parametrize("how", ["write", "fchmod"])
def test_a_name_lost_in_a_directory_made_since_the_last_snapshot_is_seen(
    root: Path, tmp_path: Path, how: str
) -> None:
    write(root, "a.txt", "a\n")
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        write(root, "new/x", "one\n")  # new/ is watched from the next snapshot on
        with open(root / "new" / "x", "r+b") as f:
            os.link(root / "new" / "x", root / "keep.txt")
            os.unlink(root / "new" / "x")  # not heard
            write(root, "new/x", "another file\n")
            ws.snapshot()
            touch_through(f, how)  # heard at new/x: another file
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_name_lost_after_a_failed_snapshot_relabelled_its_directory_is_seen(
    root: Path, tmp_path: Path
) -> None:
    fail: list[int] = []

    def scan(*args: Any, **kwargs: Any) -> Any:  # the real walk (it watches), then a failure
        found = scan_tree(*args, **kwargs)
        if fail:
            fail.clear()
            raise SnapshotError("x", "cannot read: injected")
        return found

    (root / "a").mkdir()
    write(root, "b/x", "in b\n")
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(scan_tree=scan)) as ws:  # fmt: skip
        ws.snapshot()
        os.rename(root / "b", root / "a")  # onto the empty directory a
        fail.append(1)
        with pytest.raises(SnapshotError):
            ws.snapshot()  # b's directory now watched as "a"; nothing committed
        with open(root / "a" / "x", "r+b") as f:
            os.link(root / "a" / "x", root / "keep.txt")
            os.unlink(root / "a" / "x")
            write(root, "a/x", "another file\n")
            ws.snapshot()
            touch_through(f, "write")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_name_lost_while_the_queue_overflowed_is_seen(root: Path, tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    write(root, "a.txt", "one\n")
    (root / "flood").mkdir()
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        for i in range(limit // 2 + 1):  # CREATE and CLOSE_WRITE each: the queue fills
            (root / "flood" / str(i)).touch()
        with open(root / "a.txt", "r+b") as f:  # nothing is queued from here on
            os.link(root / "a.txt", root / "keep.txt")
            os.unlink(root / "a.txt")
            write(root, "a.txt", "another file\n")
            ws.snapshot()  # reads everything afresh
            assert watcher(ws).overflows == 1
            touch_through(f, "write")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_without_fanotify_a_write_makes_the_capture_stat_every_file(
    root: Path, tmp_path: Path
) -> None:
    """Where fanotify cannot report handles (an older kernel, a seccomp filter), a write
    the watcher hears may have gone to any file: the capture stats every one."""
    write(root, "a.txt", "one\n")
    write(root, "docs/x", "x\n")
    seams = Seams(watcher=lambda: Watcher(fanotify=False))
    with Workspace(root, store=tmp_path / "store", watch=True, seams=seams) as ws:
        ws.snapshot()
        write(root, "docs/x", "x, in place\n")
        assert watcher(ws).peek().lost
        ws.snapshot()
        with open(root / "a.txt", "r+b") as f:
            os.link(root / "a.txt", root / "docs" / "hl")
            os.unlink(root / "a.txt")
            os.rename(root / "docs" / "x", root / "a.txt")
            ws.snapshot()
            touch_through(f, "write")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_descriptor_opened_in_a_directory_ignored_since_is_heard(
    root: Path, tmp_path: Path
) -> None:
    """The directory's watch goes when it is ignored, but its fanotify mark stays (found
    by a hostile review: removing it left the write unheard)."""
    write(root, "keep.txt", "one\n")
    (root / "d").mkdir()
    os.link(root / "keep.txt", root / "d" / "hl")
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        with open(root / "d" / "hl", "r+b") as f:
            os.unlink(root / "d" / "hl")
            ws.snapshot()  # keep.txt: one link
            write(root, ".gitignore", "d/\n")
            ws.snapshot()  # d is not scanned, nor watched, from here on
            f.write(b"two\n")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_write_is_not_vouched_for_through_a_symlink_put_where_its_directory_was(
    root: Path, tmp_path: Path
) -> None:
    """The names events named are looked up through directories only: here d/sub/x,
    through a symlink d -> e put in d's place, is the file written (a hostile review)."""
    write(root, "d/sub/x", "one\n")
    (root / "e" / "sub").mkdir(parents=True)
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        with open(root / "d" / "sub" / "x", "r+b") as f:
            os.link(root / "d" / "sub" / "x", root / "e" / "sub" / "x")
            os.unlink(root / "d" / "sub" / "x")
            ws.snapshot()
            f.write(b"two\n")  # heard at d/sub/x
        os.rename(root / "d", tmp_path / "d-away")  # d/sub's watch stays, labelled d/sub
        os.symlink("e", root / "d")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_write_is_not_vouched_for_by_an_ignored_name_of_the_file(
    root: Path, tmp_path: Path
) -> None:
    """Only a name the scan stats counts: k.log, a link to keep.txt at an ignored name an
    event named, is not looked at (a hostile review)."""
    write(root, ".gitignore", "*.log\n")
    write(root, "keep.txt", "one\n")
    (root / "docs").mkdir()
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        os.link(root / "keep.txt", root / "docs" / "hl")
        with open(root / "docs" / "hl", "r+b") as f:
            os.unlink(root / "docs" / "hl")
            write(root, "docs/hl", "another file\n")
            ws.snapshot()
            os.link(root / "keep.txt", root / "k.log")
            f.write(b"two\n")  # heard at docs/hl; the handle is k.log's (and keep.txt's)
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_descriptor_opened_in_a_directory_moved_away_is_heard(root: Path, tmp_path: Path) -> None:
    """Moving a directory out of the tree ends its watch, not its fanotify mark."""
    write(root, "keep.txt", "one\n")
    (root / "d").mkdir()
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        os.link(root / "keep.txt", root / "d" / "hl")
        with open(root / "d" / "hl", "r+b") as f:
            os.unlink(root / "d" / "hl")
            ws.snapshot()
            os.rename(root / "d", tmp_path / "d-away")
            ws.snapshot()
            f.write(b"two\n")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_link_made_at_a_name_linked_before_for_another_file_is_a_new_link(
    root: Path, tmp_path: Path
) -> None:
    """n.txt had several links at the last snapshot; now it is another file's second
    name, written through: its other name q.txt heard nothing (a hostile review; the
    walk asked only whether the name was linked before)."""
    write(root, "q.txt", "one\n")
    write(root, "n.txt", "other\n")
    os.link(root / "n.txt", root / "m.txt")
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        os.unlink(root / "n.txt")
        os.link(root / "q.txt", root / "n.txt")
        with open(root / "n.txt", "r+b") as f:
            f.write(b"two\n")
        assert state(ws.snapshot()) == state(plain(root, tmp_path))


def test_a_file_written_is_judged_by_what_the_walk_saw_not_by_a_later_look(
    root: Path, tmp_path: Path
) -> None:
    """q.txt is chmod-ed through x.log, an ignored link to it; once the walk has taken
    q.txt from memory, another process removes it, so x.log has one link when the walk
    is done. A look then would vouch for the file (a hostile review); the look before
    the walk sees two links."""
    removed: list[Path] = []

    def scan(*args: Any, **kwargs: Any) -> Any:
        def check() -> None:  # before each directory: the root is done before sub
            if removed and removed[0].exists():
                removed[0].unlink()

        return scan_tree(*args, **{**kwargs, "check": check})

    write(root, ".gitignore", "*.log\n")
    write(root, "q.txt", "one\n")
    write(root, "sub/s.txt", "s\n")
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(scan_tree=scan)) as ws:  # fmt: skip
        ws.snapshot()
        os.link(root / "q.txt", root / "x.log")
        os.chmod(root / "x.log", 0o755)  # IN_ATTRIB at x.log; fanotify: q.txt's file
        removed.append(root / "q.txt")
        got = state(ws.snapshot())
    assert got.get("q.txt", (None, 0o755))[1] == 0o755  # 0o755 from before until removed


def test_a_large_name_linked_before_for_another_file_is_a_new_link(
    root: Path, tmp_path: Path
) -> None:
    """As above, with n.txt over the size cap (no stat of it was kept): the inode at each
    linked name is kept with the name (a hostile review)."""
    write(root, "q.txt", "one\n")
    write(root, "n.txt", "x" * 100)
    os.link(root / "n.txt", root / "m.txt")
    with Workspace(root, store=tmp_path / "store", watch=True, max_file_bytes=50) as ws:
        ws.snapshot()
        os.unlink(root / "n.txt")
        os.link(root / "q.txt", root / "n.txt")
        with open(root / "n.txt", "r+b") as f:
            f.write(b"two\n")
        with Workspace(root, store=tmp_path / "plain-store", max_file_bytes=50) as other:
            expected = other.capture(store_objects=False)
        assert state(ws.snapshot()) == state(expected)


def test_a_name_removed_before_the_look_and_linked_again_after_it(
    root: Path, tmp_path: Path
) -> None:
    """Another process removes m.txt once the changes are taken and links it again after
    the walk: a look then finds the file written alone at sub/n.txt, which the changes
    never said (a hostile review). Anything heard since they were taken makes the walk
    stat every file."""
    relink: list[tuple[Path, Path]] = []

    def scan(*args: Any, **kwargs: Any) -> Any:
        if not relink:
            return scan_tree(*args, **kwargs)
        src, dst = relink.pop()
        os.unlink(dst)
        try:
            return scan_tree(*args, **kwargs)
        finally:
            os.link(src, dst)

    write(root, "m.txt", "one\n")
    (root / "sub").mkdir()
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(scan_tree=scan)) as ws:  # fmt: skip
        ws.snapshot()
        os.link(root / "m.txt", root / "sub" / "n.txt")  # heard in sub only
        with open(root / "sub" / "n.txt", "r+b") as f:
            f.write(b"two\n")
        relink.append((root / "sub" / "n.txt", root / "m.txt"))
        got = state(ws.snapshot())
    now = state(plain(root, tmp_path))
    assert got["sub/n.txt"] == now["sub/n.txt"]
    assert got.get("m.txt", now["m.txt"]) == now["m.txt"]  # gone while the walk ran, or "two"


@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_a_handle_is_read_for_its_inode_rightly_or_not_at_all(tmp_path: Path, where: str) -> None:
    """`inode_of` reads the inode number from a handle only in the layouts it knows
    (ext4 and tmpfs, checked here on both where the machine has them), and only for a
    handle of the file system it is given: a wrong number would let a capture skip a
    file written through a name it lost."""
    base = tmp_path if where == "tmp" or not os.path.isdir("/dev/shm") else Path("/dev/shm")
    found: list[tuple[bytes, tuple[bytes, int], int]] = []
    for name in ("f", "d"):
        path = base / f"worksnap-handle-{os.getpid()}-{name}"
        if name == "f":
            path.write_bytes(b"x")
        else:
            path.mkdir()
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW)
        try:
            handle, fs = handle_of(fd), file_system(fd)
            assert handle is not None and fs is not None
            found.append((handle, fs, os.fstat(fd).st_ino))
        finally:
            os.close(fd)
            path.unlink() if name == "f" else path.rmdir()
    for handle, fs, ino in found:
        assert inode_of(handle, fs) in (None, ino)
    proc = os.open("/proc", os.O_PATH)
    try:
        other = file_system(proc)
    finally:
        os.close(proc)
    assert other is not None and other[0] != found[0][1][0]
    assert inode_of(found[0][0], other) is None  # another file system's handle: not read
    assert inode_of(found[0][0][:-1], found[0][1]) is None  # a layout not known


def test_an_ignored_gitignore_written_through_a_name_it_lost_is_read_again(
    root: Path, tmp_path: Path
) -> None:
    """sub/.gitignore ignores everything, itself included (`*`, as tool caches write it),
    so it is no captured file: no remembered name holds its inode, and a write to it
    through a descriptor opened by a name it lost elsewhere was dismissed; a restat did
    not read it again either (a hostile review of a4b7afc; wrong before it too)."""
    write(root, "sub/.gitignore", "*\n")
    write(root, "sub/a.txt", "a\n")
    (root / "other").mkdir()
    with Workspace(root, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        write(root, "other/x", "*\n")
        with open(root / "other" / "x", "r+b") as f:
            os.unlink(root / "sub" / ".gitignore")
            os.link(root / "other" / "x", root / "sub" / ".gitignore")
            os.unlink(root / "other" / "x")
            ws.snapshot()  # sub/.gitignore read again: one link, "*"
            f.truncate(0)  # heard at other/x only; the handle is sub/.gitignore's
        got = state(ws.snapshot())
    assert got == state(plain(root, tmp_path))


def test_a_write_before_a_moved_directory_gets_its_mark_is_seen(root: Path, tmp_path: Path) -> None:
    """p/x could not be marked (`fs.fanotify.max_user_marks` reached); once marks are
    free again p is renamed q, and a write through a descriptor opened by a name p/x
    lost lands while the snapshot walks, before q/x is watched (and now marked) under
    its new name. The event is read at the next snapshot as q/x's, a marked directory,
    with no handle: a directory watched without a mark that gets one makes the next
    capture stat every file, under whichever name it had (a hostile review of a4b7afc,
    which looked only at the same name)."""

    failing: list[int] = []  # the inode whose mark fails (the limit reached)

    def make() -> Watcher:
        w = Watcher()
        fan = w._fan
        assert fan is not None
        mark = fan.mark

        def limited(fd: int) -> bool:
            return False if os.fstat(fd).st_ino in failing else mark(fd)

        fan.mark = limited  # type: ignore[method-assign]  # the marks' limit, here
        return w

    during: list[Any] = []

    def scan(*args: Any, **kwargs: Any) -> Any:
        def check() -> None:  # before each directory: the first is the root
            while during:
                during.pop()()

        return scan_tree(*args, **{**kwargs, "check": check})

    write(root, "keep.txt", "one\n")
    (root / "p" / "x").mkdir(parents=True)
    failing.append((root / "p" / "x").stat().st_ino)
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(watcher=make, scan_tree=scan)) as ws:  # fmt: skip
        ws.snapshot()
        os.link(root / "keep.txt", root / "p" / "x" / "hl")
        with open(root / "p" / "x" / "hl", "r+b") as f:
            os.unlink(root / "p" / "x" / "hl")
            ws.snapshot()  # keep.txt: one link again
            assert "p/x" not in watcher(ws)._marked
            failing.clear()  # marks free again
            os.rename(root / "p", root / "q")
            during.append(lambda: (f.write(b"two\n"), f.flush()))
            ws.snapshot()  # the write lands as this one walks
        got = state(ws.snapshot())
    assert got == state(plain(root, tmp_path))
