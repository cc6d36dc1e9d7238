"""The stat cache may only ever save work, never hide a change.

Workspaces here have a racy margin of 0 (`Hashes`): a file's digest is cached as
soon as its times are older than the scan, so no test waits the margin out. Where a
change must not hide behind a cached stat, `tick` first lets the clock move on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec
import pytest
import zstandard

from tests.conftest import ZSTD_MAGIC, Hashes, flip_middle, packed, tick, unpacked, write
from worksnap import Workspace
from worksnap.hash import hash_bytes

HOUR_NS = 3600 * 10**9


def digests(ws: Workspace) -> dict[str, str | None]:
    return {e.path: e.hash for e in ws.snapshot().entries}


def age(path: Path, seconds: float = 10.0) -> None:
    """Makes a file look untouched for a while (mtime set back; ctime cannot be)."""
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_unchanged_old_files_are_not_rehashed(root: Path) -> None:
    for name in ("a", "b", "c"):
        age(write(root, name, name))
    hashes = Hashes()
    ws = hashes.open(root)
    ws.snapshot()
    hashed = hashes.counted()
    ws.snapshot()
    hashes.open(root).snapshot()  # a new process reads the cache from the store
    assert hashed == []


def test_racy_file_is_rehashed_until_it_is_old(root: Path) -> None:
    path = write(root, "fresh.txt", "just written")
    racy = Hashes(racy_margin_ns=HOUR_NS)  # the file stays inside the racy window
    ws = racy.open(root)
    ws.snapshot()
    hashed = racy.counted()
    ws.snapshot()
    assert hashed == ["fresh.txt"]
    age(path)
    aged = Hashes()  # now it is older than the margin
    ws = aged.open(root)
    ws.snapshot()
    ws.snapshot()
    assert hashed + aged.paths == ["fresh.txt", "fresh.txt"]


def test_touched_but_unchanged_file_rehashed_and_same_digest(root: Path) -> None:
    path = write(root, "a.txt", "same bytes")
    age(path, 20)
    hashes = Hashes()
    ws = hashes.open(root)
    before = digests(ws)
    age(path, 5)  # touched: new mtime, same content
    hashed = hashes.counted()
    assert digests(ws) == before
    assert hashed == ["a.txt"]


def test_changed_same_size_same_mtime_is_detected(root: Path) -> None:
    path = write(root, "a.txt", "AAAA")
    age(path)
    ws = Hashes().open(root)
    before = digests(ws)
    st = path.stat()
    tick(root)
    path.write_text("BBBB")  # same size ...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and mtime put back; ctime moved
    after = digests(ws)
    assert after["a.txt"] != before["a.txt"]
    assert Workspace(root).plan_restore(ws.load("latest")).changes == []


def test_replaced_by_a_new_inode_with_identical_stat_fields_is_detected(root: Path) -> None:
    path = write(root, "a.txt", "1111")
    age(path)
    ws = Hashes().open(root)
    before = digests(ws)
    st = path.stat()
    other = write(root, "tmp", "2222")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)  # same size and mtime, different inode
    assert digests(ws)["a.txt"] != before["a.txt"]


def test_directory_replaced_by_file_and_back(root: Path) -> None:
    age(write(root, "thing/inside.txt", "inside"))
    ws = Hashes().open(root)
    first = ws.snapshot()
    (root / "thing" / "inside.txt").unlink()
    (root / "thing").rmdir()
    age(write(root, "thing", "now a file"))
    second = ws.snapshot()
    assert [(e.path, e.type) for e in second.entries] == [("thing", "file")]
    assert second.dirs == []
    (root / "thing").unlink()
    age(write(root, "thing/inside.txt", "inside"))
    third = ws.snapshot()
    assert third.tree == first.tree


def test_deleted_cache_only_costs_rehashing(root: Path) -> None:
    age(write(root, "a.txt", "a"))
    hashes = Hashes()
    first = hashes.open(root).snapshot()
    (root / ".worksnap" / "cache" / "stat").unlink()
    assert hashes.open(root).snapshot().tree == first.tree
    (root / ".worksnap" / "cache" / "stat").write_bytes(b"garbage")
    assert hashes.open(root).snapshot().tree == first.tree


def test_objects_swept_by_gc_are_stored_again(root: Path) -> None:
    from worksnap.retention import Retention

    age(write(root, "a.txt", "kept content"))
    ws = Hashes().open(root)
    first = ws.snapshot(step=1)
    write(root, "a.txt", "other")
    ws.snapshot(step=2)
    ws.gc(Retention(keep_last=1))  # drops step 1 and its object
    write(root, "a.txt", "kept content")
    age(root / "a.txt")
    again = ws.snapshot(step=3)
    assert again.tree == first.tree
    assert ws.verify() == []


def _forged_size(frame: bytes) -> bytes:
    # A frame header declaring 1 TiB (8-byte content size, checksum flag), then one block.
    return frame[:4] + b"\xc4\x00" + (1 << 40).to_bytes(8, "little") + b"\x01\x00\x00"


CACHE_DAMAGE = {
    "byte flipped": flip_middle,
    "truncated": lambda raw: raw[: len(raw) // 2],
    "declares 1 TiB": _forged_size,
    "garbage after the magic": lambda raw: ZSTD_MAGIC + b"garbage",
}


def test_stat_cache_is_a_checksummed_zstd_frame(root: Path) -> None:
    age(write(root, "a.txt", "a"))
    hashes = Hashes()
    hashes.open(root).snapshot()
    raw = (root / ".worksnap" / "cache" / "stat").read_bytes()
    assert raw.startswith(ZSTD_MAGIC)
    assert zstandard.get_frame_parameters(raw).has_checksum
    cached_root, table = msgspec.msgpack.decode(unpacked(raw))
    assert cached_root == str(root) and list(table) == ["a.txt"]
    hashed = hashes.counted()
    hashes.open(root).snapshot()
    assert hashed == []  # a new process reads it back


@pytest.mark.parametrize("damage", CACHE_DAMAGE)
def test_damaged_stat_cache_frame_is_ignored(root: Path, damage: str) -> None:
    age(write(root, "a.txt", "a"))
    hashes = Hashes()
    first = hashes.open(root).snapshot()
    path = root / ".worksnap" / "cache" / "stat"
    path.write_bytes(CACHE_DAMAGE[damage](path.read_bytes()))
    hashed = hashes.counted()
    assert hashes.open(root).snapshot().tree == first.tree
    assert hashed == ["a.txt"]  # dropped whole: re-hashed, then cached again
    assert hashes.open(root).snapshot().tree == first.tree
    assert hashed == ["a.txt"]


def test_stat_cache_with_a_wrong_checksum_is_not_trusted(root: Path) -> None:
    age(write(root, "a.txt", "a"))
    age(write(root, "b.txt", "b"))
    hashes = Hashes()
    first = hashes.open(root).snapshot()
    path = root / ".worksnap" / "cache" / "stat"
    raw = path.read_bytes()
    # The content decodes and gives a.txt the digest of b.txt, a stored object: only the
    # checksum tells that it is wrong.
    lying = unpacked(raw).replace(hash_bytes(b"a").encode(), hash_bytes(b"b").encode())
    assert lying != unpacked(raw)
    path.write_bytes(packed(lying)[:-4] + raw[-4:])
    assert hashes.open(root).snapshot().tree == first.tree


def test_plain_msgpack_stat_cache_from_before_compression_is_used(root: Path) -> None:
    age(write(root, "a.txt", "a"))
    hashes = Hashes()
    first = hashes.open(root).snapshot()
    path = root / ".worksnap" / "cache" / "stat"
    path.write_bytes(unpacked(path.read_bytes()))
    hashed = hashes.counted()
    assert hashes.open(root).snapshot().tree == first.tree
    assert hashed == []
