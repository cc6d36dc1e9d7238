"""The stat cache may only ever save work, never hide a change.

Workspaces here have a racy margin of 0 (`Hashes`): a file's digest is cached as
soon as its times are older than the scan, so no test waits the margin out. Where a
change must not hide behind a cached stat, `tick` first lets the clock move on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ZSTD_MAGIC, Hashes, flip_middle, packed, tick, unpacked, write
from worksnap import Workspace
from worksnap.caches import StatRecord, StatTable, load_stat_table, stat_changes
from worksnap.fsio import file_state, state_fields
from worksnap.hash import hash_bytes
from worksnap.layout import StorePaths
from worksnap.storedir import StoreDir

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


# -- the log: a save appends what changed ------------------------------------------------


def _stat_paths(root: Path) -> tuple[Path, Path]:
    paths = StorePaths(str(root / ".worksnap"))
    return Path(paths.stat_cache), Path(paths.stat_cache_log)


def _stored_table(root: Path) -> StatTable:
    return load_stat_table(StoreDir(str(root / ".worksnap")), str(root))[0]


def test_a_warm_save_appends_only_the_changed_records_and_leaves_the_base(root: Path) -> None:
    for name in ("a", "b", "c"):
        age(write(root, name, name))
    hashes = Hashes()
    hashes.open(root).snapshot()
    base, log = _stat_paths(root)
    before = (base.stat().st_ino, base.read_bytes())
    assert not log.exists()
    age(write(root, "b", "b, changed"))
    (root / "c").unlink()
    age(write(root, "d", "d"))
    hashes.open(root).snapshot()
    assert (base.stat().st_ino, base.read_bytes()) == before
    length = int.from_bytes(log.read_bytes()[:4], "big")
    assert log.stat().st_size == 4 + length  # one record
    cached_root, changes = msgspec.msgpack.decode(unpacked(log.read_bytes()[4:]))
    assert cached_root == str(root)
    assert sorted(changes) == ["b", "d"]  # c's record stays behind: it vouches for nothing now
    assert changes["b"][1] == bytes.fromhex(hash_bytes(b"b, changed"))  # 32 bytes, not hex
    assert sorted(_stored_table(root)) == ["a", "b", "c", "d"]
    hashed = hashes.counted()
    hashes.open(root).snapshot()  # base and log read back: nothing to hash
    assert hashed == []
    hashes.open(root).snapshot()
    assert log.stat().st_size == 4 + length  # nothing changed: nothing appended


def test_a_long_lived_workspace_logs_what_changed_before_its_first_capture(root: Path) -> None:
    """The table as read is dropped at the first capture only when there is nothing to log.

    A watched workspace keeps one table, keyed by its scan's own path strings, once
    what it found is what is stored (but the records of paths gone); a change found
    by that first capture must still reach the log.
    """
    for name in ("a", "b", "c"):
        age(write(root, name, name))
    hashes = Hashes()
    hashes.open(root).snapshot()
    (root / "c").unlink()  # its record stays behind in the stored table
    age(write(root, "b", "b, changed before the first capture"))
    with hashes.open(root, watch=True) as ws:
        ws.snapshot()
        age(write(root, "d", "d, added later"))
        ws.snapshot()
    hashed = hashes.counted()
    hashes.open(root).snapshot()  # a new process: every record came through the log
    assert hashed == []
    assert sorted(_stored_table(root)) == ["a", "b", "c", "d"]


def test_a_stat_log_cut_short_keeps_the_records_before_it(root: Path) -> None:
    age(write(root, "a", "a"))
    age(write(root, "b", "b"))
    hashes = Hashes()
    hashes.open(root).snapshot()
    age(write(root, "a", "a2"))
    hashes.open(root).snapshot()
    age(write(root, "b", "b2"))
    hashes.open(root).snapshot()
    _, log = _stat_paths(root)
    data = log.read_bytes()
    first = 4 + int.from_bytes(data[:4], "big")
    log.write_bytes(data[: len(data) - 1])  # a save killed part-way through its record
    table = _stored_table(root)
    assert table["a"][1] == hash_bytes(b"a2") and table["b"][1] == hash_bytes(b"b")
    hashed = hashes.counted()
    ws = hashes.open(root)
    assert digests(ws) == {"a": hash_bytes(b"a2"), "b": hash_bytes(b"b2")}
    assert hashed == ["b"]  # its record was cut: hashed again, never trusted wrongly
    ws.close()
    base, _ = _stat_paths(root)
    assert not log.exists() or log.stat().st_size < first  # a log not read whole is folded
    assert _stored_table(root)["b"][1] == hash_bytes(b"b2")
    assert base.exists()


def test_a_long_stat_log_is_folded_into_a_new_base(root: Path) -> None:
    names = [f"f{i:03}" for i in range(300)]
    for name in names:
        age(write(root, name, name))
    hashes = Hashes()
    hashes.open(root).snapshot()
    base, log = _stat_paths(root)
    inodes = {base.stat().st_ino}
    for round_ in range(12):
        for name in names:
            age(write(root, name, f"{name} {round_}"))
        hashes.open(root).snapshot()
        inodes.add(base.stat().st_ino)
        # Never longer than what folding allows (64 KiB at this size) plus one record.
        assert not log.exists() or log.stat().st_size < (64 << 10) + base.stat().st_size
    assert len(inodes) > 1  # folded at least once
    hashed = hashes.counted()
    hashes.open(root).snapshot()
    assert hashed == []


def _a_then_a2(root: Path) -> Hashes:
    """A base that caches `a`, then a log record that caches its next version."""
    age(write(root, "a", "a"))
    hashes = Hashes()
    hashes.open(root).snapshot()
    age(write(root, "a", "a2"))
    hashes.open(root).snapshot()
    return hashes


def test_a_log_for_another_root_or_a_damaged_base_is_not_applied(root: Path) -> None:
    hashes = _a_then_a2(root)
    base, _ = _stat_paths(root)
    base.write_bytes(flip_middle(base.read_bytes()))
    assert _stored_table(root) == {}  # the log holds changes to that base: not used alone
    hashed = hashes.counted()
    assert digests(hashes.open(root)) == {"a": hash_bytes(b"a2")}
    assert hashed == ["a"]


@given(
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 3)),
    st.dictionaries(st.sampled_from("abcdefgh"), st.integers(0, 3)),
    st.sets(st.sampled_from("abcdefgh")),
)
def test_stat_changes_give_every_record_of_the_new_table(
    saved_digits: dict[str, int], new_digits: dict[str, int], shared: set[str]
) -> None:
    """Saved table + log record: the new table's every record, and saved ones left behind."""

    def record(digit: int) -> StatRecord:
        return ((digit, 1, 2, 3, 4), str(digit))

    saved = {rel: record(d) for rel, d in saved_digits.items()}
    # A record the capture kept is the very object; one it made again is only equal.
    table = {rel: saved[rel] if rel in shared and rel in saved else record(d)
             for rel, d in new_digits.items()}  # fmt: skip
    changes = stat_changes(saved, table)
    rebuilt = {**saved, **changes}
    assert {rel: rebuilt[rel] for rel in table} == table
    assert all(rebuilt[rel] is saved[rel] for rel in rebuilt.keys() - table.keys())
    assert all(saved.get(rel) != change for rel, change in changes.items())


def test_a_stat_cache_from_before_states_were_packed_is_used(root: Path) -> None:
    """Its states were five ints: read back, they vouch as the packed ones would."""
    for name in ("a", "b"):
        age(write(root, name, name))
    hashes = Hashes()
    hashes.open(root).snapshot()
    base, _ = _stat_paths(root)
    cached_root, table = msgspec.msgpack.decode(unpacked(base.read_bytes()))
    assert all(isinstance(state, bytes) and len(state) == 36 for state, _ in table.values())
    old = {rel: [list(state_fields(state)), digest] for rel, (state, digest) in table.items()}
    base.write_bytes(packed(msgspec.msgpack.encode([cached_root, old])))
    hashed = hashes.counted()
    hashes.open(root).snapshot()
    assert hashed == []


def test_a_state_that_does_not_fit_64_bits_keeps_five_ints() -> None:
    """A time past 2262 or before 1677 (tmpfs and btrfs keep them) is no 64-bit int: such
    a state stays five ints, equal only to itself, never to a packed one."""
    far = SimpleNamespace(st_ino=7, st_size=3, st_mtime_ns=2**63, st_ctime_ns=1, st_mode=0o100644)
    near = SimpleNamespace(st_ino=7, st_size=3, st_mtime_ns=2**63 - 1, st_ctime_ns=1,
                           st_mode=0o100644)  # fmt: skip
    assert file_state(far) == (7, 3, 2**63, 1, 0o100644)
    assert isinstance(file_state(near), bytes) and file_state(near) != file_state(far)
    assert state_fields(file_state(near)) == (7, 3, 2**63 - 1, 1, 0o100644)


def test_a_file_dated_in_the_future_is_hashed_at_every_capture(root: Path) -> None:
    """Its times are never older than the scan: never vouched for by the cache."""
    far = 15 * 10**18  # the year 2445 (ext4 keeps it; 2**63 ns does not hold it)
    path = write(root, "far", "from the future")
    os.utime(path, ns=(far, far))
    age(write(root, "near", "now"))
    hashes = Hashes()
    hashes.open(root).snapshot()
    assert "far" not in _stored_table(root)
    hashed = hashes.counted()
    path.write_text("from the future, changed")
    os.utime(path, ns=(far, far))
    assert digests(hashes.open(root))["far"] == hash_bytes(b"from the future, changed")
    assert hashed == ["far"]


def test_a_log_record_with_a_digest_that_is_not_32_bytes_ends_the_log(root: Path) -> None:
    hashes = _a_then_a2(root)
    _, log = _stat_paths(root)
    cached_root, changes = msgspec.msgpack.decode(unpacked(log.read_bytes()[4:]))
    changes["a"][1] = changes["a"][1][:31]
    frame = packed(msgspec.msgpack.encode([cached_root, changes]))
    log.write_bytes(len(frame).to_bytes(4, "big") + frame)
    assert "a" not in _stored_table(root) or _stored_table(root)["a"][1] != hash_bytes(b"a2")
    hashed = hashes.counted()
    assert digests(hashes.open(root)) == {"a": hash_bytes(b"a2")}
    assert hashed == ["a"]
