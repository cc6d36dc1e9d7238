"""The object store: each object once, readable before and after publishing, verified on read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worksnap.errors import ObjectError
from worksnap.hash import SMALL, hash_bytes
from worksnap.store import Store


def test_objects_stored_once_and_read_back_across_instances(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s"))
    store.create()
    blobs = [os.urandom(n) for n in (0, 1, 100, 70_000, 300_000)] + [b"x" * (SMALL + 5)]
    for blob in blobs:
        assert store.add(hash_bytes(blob), blob) is True
        assert store.add(hash_bytes(blob), blob) is False
        assert store.read(hash_bytes(blob)) == blob  # readable before the pack is published
    other = Store(str(tmp_path / "s"))
    with pytest.raises(ObjectError, match="missing"):
        other.read(hash_bytes(blobs[2]))  # not published yet: invisible to others
    store.flush()
    for blob in blobs:
        assert other.read(hash_bytes(blob)) == blob
    assert store.added == len(blobs)
    assert set(Store(str(tmp_path / "s")).digests()) == {hash_bytes(b) for b in blobs}


def test_damaged_pack_bytes_are_refused(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s"))
    store.create()
    blob = b"precious" * 100
    store.add(hash_bytes(blob), blob)
    store.flush()
    store.close()
    pack = next((tmp_path / "s" / "packs").glob("*.pack"))
    data = bytearray(pack.read_bytes())
    data[3] ^= 0xFF
    pack.write_bytes(bytes(data))
    with pytest.raises(ObjectError, match="damaged"):
        Store(str(tmp_path / "s")).read(hash_bytes(blob))


def test_sweep_keeps_live_objects_and_repacks(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s"))
    store.create()
    live, dead = b"live" * 10, b"dead" * 10
    big_dead = b"B" * (SMALL + 1)
    for blob in (live, dead, big_dead):
        store.add(hash_bytes(blob), blob)
    store.flush()
    removed, freed = store.sweep({hash_bytes(live)})
    assert removed == 2
    assert freed == len(dead) + len(big_dead)
    fresh = Store(str(tmp_path / "s"))
    assert fresh.read(hash_bytes(live)) == live
    assert set(fresh.digests()) == {hash_bytes(live)}
