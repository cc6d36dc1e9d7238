"""The store's index answers for objects this process wrote as one Slot each would have.

A `ObjectIndex` keeps a `PackWriter` for them, not a Slot: these tests work out each new
object's Slot on their own (its frame compressed again, offsets added up) and compare.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import msgspec
import pytest

from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes
from worksnap.objectindex import ObjectIndex, join_indexes
from worksnap.packcodec import (
    BASE_PREFIX,
    PACK_TAG,
    PACK_VERSION,
    PackRows,
    PackWriter,
    Recent,
    Slot,
    compress,
    decode_rows,
    slots,
)


class Expected:
    """Adds objects to a store and works out, as the old code did, the Slot of each."""

    def __init__(self, store: DiskStore) -> None:
        self.store = store
        self.slots: dict[str, Slot] = {}
        self.blobs: dict[str, bytes] = {}
        self.frames: dict[str, list[bytes]] = {}  # by pack
        self.order: list[str] = []

    def add(self, data: bytes, base: bytes | None = None) -> str:
        digest = hash_bytes(data)
        base_digest = None if base is None else hash_bytes(base)
        assert self.store.add(digest, data, base=base_digest)
        frame, used = compress(data, base)
        pack = self.store._writer.name  # type: ignore[union-attr]
        frames = self.frames.setdefault(pack, [])
        offset = sum(map(len, frames))
        frames.append(frame)
        based = base_digest if used else None
        self.slots[digest] = Slot(pack, offset, len(frame), len(data), based, framed=True)
        self.blobs[digest] = data
        self.order.append(digest)
        return digest

    def on_disk(self, digest: str) -> Slot:
        """Its Slot as a pack index read from disk gives it (a base named by a prefix)."""
        slot = self.slots[digest]
        return slot._replace(base=slot.base and slot.base[: 2 * BASE_PREFIX])


def _edited(data: bytes, i: int) -> bytes:
    return data[:1000] + b"edit %d\n" % i + data[1000:]


def _fill(expected: Expected, count: int = 40) -> list[str]:
    """Objects alone and in chains of versions (each version against the one before)."""
    digests = []
    for i in range(count):
        first = os.urandom(3000) + b"%d" % i
        digests.append(expected.add(first))
        if i % 4 == 0:
            before = first
            for step in range(3):
                after = _edited(before, step)
                digests.append(expected.add(after, base=before))
                before = after
    return digests


def _store(tmp_path: Path) -> DiskStore:
    store = DiskStore(str(tmp_path / "s"))
    store.create()
    return store


def test_new_objects_resolve_to_their_slots_before_and_after_flush(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = Expected(store)
    digests = _fill(expected)
    assert sum(s.base is not None for s in expected.slots.values()) >= 25  # deltas were used
    index = store._load_index()
    assert isinstance(index, ObjectIndex)
    # No Slot of their own: the writer answers for them.
    assert all(type(index._entries[d]) is PackWriter for d in digests)
    for _ in range(2):  # while the pack is written, then once it is published
        assert {d: index[d] for d in digests} == expected.slots
        assert {d: index.get(d) for d in digests} == expected.slots
        assert dict(index.items()) == expected.slots
        assert list(index.values()) == [expected.slots[d] for d in index]
        assert all(type(s) is Slot for s in index.values())
        assert all(d in index and d in store.indexed() for d in digests)
        store.flush()
    assert index.get(hash_bytes(b"not stored")) is None
    assert hash_bytes(b"not stored") not in index
    fresh = DiskStore(str(tmp_path / "s"))._load_index()
    assert dict(fresh.items()) == {d: expected.on_disk(d) for d in digests}
    store.close()


def test_the_pack_and_index_bytes_are_what_the_old_code_wrote(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = Expected(store)
    digests = _fill(expected)
    name = store._writer.name  # type: ignore[union-attr]
    store.flush()
    pack = Path(store.paths.pack(name)).read_bytes()
    assert pack == b"".join(expected.frames[name])
    rows = [
        (
            bytes.fromhex(d),
            s.stored,
            s.raw,
            None if s.base is None else bytes.fromhex(s.base)[:BASE_PREFIX],
        )
        for d in digests
        for s in [expected.slots[d]]
    ]
    index = Path(store.paths.pack_index(name)).read_bytes()
    assert index == msgspec.msgpack.encode((PACK_TAG, PACK_VERSION, rows))
    assert slots(*decode_rows(index, name)) == [(d, expected.on_disk(d)) for d in digests]
    store.close()


def test_objects_read_back_in_the_writing_process(tmp_path: Path) -> None:
    """From the write buffer, then from the published pack; bases rebuilt from frames."""
    store = _store(tmp_path)
    expected = Expected(store)
    digests = _fill(expected, count=9)
    assert store._writer is not None and store._writer.pending  # still in the buffer
    for published in (False, True):
        for digest in digests:
            # An empty Recent: every base is read from its frame through the index.
            data = b"".join(store.read_chunks(digest, recent=Recent()))
            assert data == expected.blobs[digest], (published, digest)
            store.check(digest)
        store.flush()
    store.close()


def test_a_base_prefix_finds_an_object_of_the_pack_being_written(tmp_path: Path) -> None:
    """A Finder that resolved its prefixes before the objects were written still finds them."""
    store = _store(tmp_path)
    old = Expected(store)
    first = os.urandom(5000)
    old.add(first)
    second = old.add(_edited(first, 0), base=first)
    store.flush()
    store.close()
    store = DiskStore(str(tmp_path / "s"))
    assert store.read(second) == old.blobs[second]  # its base by prefix: prefixes resolved
    assert store._find._found is not None
    new = Expected(store)
    digests = _fill(new, count=6)
    for digest in digests:
        found = store._find(digest[: 2 * BASE_PREFIX])
        assert found == (digest, new.slots[digest])
    # A chain through both packs, its new link named by prefix as it would be on disk.
    third = new.add(_edited(old.blobs[second], 1), base=old.blobs[second])
    assert new.slots[third].base == second
    assert store._find(third[: 2 * BASE_PREFIX]) == (third, new.slots[third])
    assert store.read(third) == new.blobs[third]
    store.flush()
    assert store._find(third[: 2 * BASE_PREFIX]) == (third, new.slots[third])
    store.close()


def test_a_long_lived_store_answers_for_every_pack_it_wrote(tmp_path: Path) -> None:
    """The daemon keeps its index across snapshots: each snapshot's writer stays in it."""
    store = _store(tmp_path)
    expected = Expected(store)
    first = _fill(expected, count=5)
    store.flush()
    assert not store.sync()  # nothing swept: the index is kept
    second = [expected.add(_edited(expected.blobs[d], 9), base=expected.blobs[d]) for d in first]
    packs = {expected.slots[d].pack for d in first + second}
    assert len(packs) == 2
    index = store._load_index()
    assert {d: index[d] for d in first + second} == {d: expected.slots[d] for d in first + second}
    store.flush()
    for digest in first + second:
        assert store.read(digest) == expected.blobs[digest]
    fresh = DiskStore(str(tmp_path / "s"))
    assert {d: fresh._load_index()[d] for d in first + second} == {
        d: expected.on_disk(d) for d in first + second
    }
    fresh.close()
    store.close()


def _random_packs(rng: random.Random) -> list[tuple[list[str], PackRows]]:
    """Pack indexes as read back: twins across and within packs, digests sharing a base
    prefix (a damaged or hostile store), bases named by prefix, some of them missing."""
    made: list[str] = []
    packs = []
    for number in range(rng.randint(1, 5)):
        rows, digests = PackRows(f"pack{number}", framed=True), []
        for row in range(rng.randint(0, 50)):
            if made and rng.random() < 0.15:
                digest = rng.choice(made)  # a twin
            elif made and rng.random() < 0.1:
                digest = rng.choice(made)[: 2 * BASE_PREFIX] + rng.randbytes(16).hex()
            else:
                digest = rng.randbytes(32).hex()
            if made and rng.random() < 0.4:
                rows.bases[row] = rng.choice(made)[: 2 * BASE_PREFIX]
            elif rng.random() < 0.05:
                rows.bases[row] = rng.randbytes(BASE_PREFIX).hex()  # packed nowhere
            rows.offsets.append(7 * row)
            rows.stored.append(7)
            rows.raw.append(9)
            digests.append(digest)
            made.append(digest)
        packs.append((digests, rows))
    return packs


@pytest.mark.parametrize("seed", range(40))
def test_a_finder_answers_each_prefix_as_a_look_through_every_digest_would(seed: int) -> None:
    """`Finder` resolves the prefixes the entries name in one pass: the obvious answer is
    every digest beginning with the prefix (none, one, or more: refused)."""
    rng = random.Random(seed)
    packs = _random_packs(rng)
    index, find = join_indexes(packs)
    digests = list(index)
    asked = [base for _, rows in packs for base in rows.bases.values()]
    asked += [d[: 2 * BASE_PREFIX] for d in rng.sample(digests, min(5, len(digests)))]
    asked += [rng.randbytes(BASE_PREFIX).hex() for _ in range(3)]
    rng.shuffle(asked)
    for key in asked + digests:
        holding = [d for d in digests if d.startswith(key)]
        if len(holding) > 1:
            with pytest.raises(ValueError, match="more than one object"):
                find(key)
        else:
            assert find(key) == (None if not holding else (holding[0], index[holding[0]]))


@pytest.mark.parametrize("seed", range(60))
def test_packs_joined_in_one_update_read_the_copies_the_loop_chooses(seed: int) -> None:
    """A pack without twins is joined in one `dict.update`; the loop, one digest at a time,
    is the obvious version: same copy of every object, twins (across or within packs,
    their chains whole or broken: a base packed nowhere)."""
    packs = _random_packs(random.Random(seed))

    def places(at_once: bool) -> dict[str, tuple[str, int]]:
        index, _ = join_indexes(packs, at_once=at_once)
        return {d: (index[d].pack, index[d].offset) for d in index}

    assert places(at_once=True) == places(at_once=False)
