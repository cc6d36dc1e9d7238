"""The object store: each object once, readable before and after publishing, verified on read."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import zstandard

from tests.conftest import ZSTD_MAGIC, unpacked, write
from worksnap import Workspace
from worksnap.cli import main
from worksnap.diskstore import DiskStore
from worksnap.errors import ObjectError, SnapshotError
from worksnap.hash import SMALL, hash_bytes
from worksnap.workspace import Seams


def test_objects_stored_once_and_read_back_across_instances(tmp_path: Path) -> None:
    store = DiskStore(str(tmp_path / "s"))
    store.create()
    blobs = [os.urandom(n) for n in (0, 1, 100, 70_000, 300_000)] + [b"x" * (SMALL + 5)]
    for blob in blobs:
        assert store.add(hash_bytes(blob), blob) is True
        assert store.add(hash_bytes(blob), blob) is False
        assert store.read(hash_bytes(blob)) == blob  # readable before the pack is published
    other = DiskStore(str(tmp_path / "s"))
    with pytest.raises(ObjectError, match="missing"):
        other.read(hash_bytes(blobs[2]))  # not published yet: invisible to others
    store.flush()
    for blob in blobs:
        assert other.read(hash_bytes(blob)) == blob
    assert store.added == len(blobs)
    assert set(DiskStore(str(tmp_path / "s")).digests()) == {hash_bytes(b) for b in blobs}


def test_damaged_pack_bytes_are_refused(tmp_path: Path) -> None:
    store = DiskStore(str(tmp_path / "s"))
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
        DiskStore(str(tmp_path / "s")).read(hash_bytes(blob))


def test_sweep_keeps_live_objects_and_repacks(tmp_path: Path) -> None:
    store = DiskStore(str(tmp_path / "s"))
    store.create()
    live, dead = b"live" * 10, b"dead" * 10
    big_dead = b"B" * (SMALL + 1)
    for blob in (live, dead, big_dead):
        store.add(hash_bytes(blob), blob)
    store.flush()
    removed, freed = store.sweep({hash_bytes(live)})
    assert removed == 2
    assert freed == len(dead) + len(big_dead)
    fresh = DiskStore(str(tmp_path / "s"))
    assert fresh.read(hash_bytes(live)) == live
    assert set(fresh.digests()) == {hash_bytes(live)}


# -- manifests on disk: zstd frames, plain JSON still read ------------------------


def _manifest_file(root: Path, snapshot_id: str) -> Path:
    return root / ".worksnap" / "manifests" / f"{snapshot_id}.json"


def test_manifest_is_stored_as_a_checksummed_zstd_frame(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(300):
        write(root, f"src/pkg{i % 7}/module_{i}.py", f"x = {i}\n")
    snap = Workspace(root).snapshot()
    raw = _manifest_file(root, snap.id).read_bytes()
    assert raw.startswith(ZSTD_MAGIC)
    params = zstandard.get_frame_parameters(raw)
    assert params.has_checksum
    assert params.content_size == len(unpacked(raw))
    assert len(raw) * 2 < len(unpacked(raw))  # 300 entries: well under half
    assert main(["--root", str(root), "--json", "show", snap.id]) == 0
    assert capsys.readouterr().out.encode() == unpacked(raw)  # `show --json` prints the JSON
    assert Workspace(root).show_bytes(snap.id) == unpacked(raw)


def test_plain_json_manifest_from_before_compression_is_read(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "old\n")
    write(root, "sub/b.txt", "b\n")
    ws = Workspace(root)
    old = ws.snapshot()
    path = _manifest_file(root, old.id)
    plain = unpacked(path.read_bytes())
    path.write_bytes(plain)  # as a store written before compression holds it
    ws.close()

    ws = Workspace(root)
    assert ws.load(old.id) == old
    assert ws.show_bytes(old.id) == plain
    assert main(["--root", str(root), "--json", "show", old.id]) == 0
    assert capsys.readouterr().out.encode() == plain
    assert ws.verify() == []
    write(root, "a.txt", "new\n")
    assert ws.restore(old.id).ok
    assert (root / "a.txt").read_text() == "old\n"
    assert path.read_bytes() == plain  # read, never rewritten


def test_rebind_rewrites_manifests_compressed_and_leaves_misfiled_ones(
    root: Path, tmp_path: Path
) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    first, second = ws.snapshot(), ws.snapshot(label="second")
    ws.close()
    plain = _manifest_file(root, first.id)
    plain.write_bytes(unpacked(plain.read_bytes()))
    misfiled = _manifest_file(root, "0123456789ab")
    misfiled.write_bytes(_manifest_file(root, second.id).read_bytes())  # holds `second`
    moved = tmp_path / "moved"
    root.rename(moved)
    misfiled_before = (moved / misfiled.relative_to(root)).read_bytes()

    assert Workspace(moved).rebind() == 2
    for snap in (first, second):
        raw = _manifest_file(moved, snap.id).read_bytes()
        assert raw.startswith(ZSTD_MAGIC)
        assert Workspace(moved).load(snap.id).root == str(moved)
    assert (moved / misfiled.relative_to(root)).read_bytes() == misfiled_before


def test_manifest_over_the_bound_is_not_written(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    ws.snapshot()
    bounded = Seams(open_store=functools.partial(DiskStore, max_unpacked=100))
    with pytest.raises(SnapshotError, match=r"manifest of \d+ bytes is over 100"):
        Workspace(root, seams=bounded).snapshot()  # no reader would accept it: refused
    assert len(Workspace(root).list()) == 1
    assert len(list((root / ".worksnap" / "manifests").iterdir())) == 1
