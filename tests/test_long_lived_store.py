"""A long-lived workspace against a store changed under it; the tree cache attacked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import worksnap
from tests.conftest import tick, write
from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.flatbuild import from_flat
from worksnap.hash import hash_bytes
from worksnap.manifest import Manifest
from worksnap.treewalk import Flat
from worksnap.workspace import Seams

SRC = str(Path(worksnap.__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": SRC}


def cli(root: Path, store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), "--store", str(store), *args],
        env=ENV,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def cold(root: Path, tmp_path: Path) -> Manifest:
    with Workspace(root, store=tmp_path / "cold-store") as ws:
        return ws.capture(store_objects=False)


def same(taken: Manifest, root: Path, tmp_path: Path) -> None:
    plain = cold(root, tmp_path)
    assert taken.tree == plain.tree
    assert taken.tree == from_flat(Flat.of(plain), lambda d, b: None)[0]


def _tree(root: Path, tag: str) -> None:
    for i in range(4):
        write(root, f"d{i}/sub/f.txt", f"{tag}{i}\n")
        write(root, f"d{i}/g.txt", f"g{i}\n")


def test_gc_in_another_process_then_old_content_again(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, seams=Seams(racy_margin_ns=0)) as ws:
        ws.snapshot()
        tick(root)
        _tree(root, "y")
        ws.snapshot()
        r = cli(root, store, "gc", "--keep-last", "1")
        assert r.returncode == 0, r.stderr
        tick(root)
        _tree(root, "x")
        taken = ws.snapshot()
        same(taken, root, tmp_path)
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr
    # a new process after another gc
    tick(root)
    _tree(root, "y")
    cli(root, store, "snapshot")
    r = cli(root, store, "gc", "--keep-last", "1")
    assert r.returncode == 0, r.stderr
    tick(root)
    _tree(root, "x")
    r = cli(root, store, "snapshot")
    assert r.returncode == 0, r.stderr
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def test_watched_gc_in_another_process(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, watch=True, seams=Seams(racy_margin_ns=0)) as ws:
        ws.snapshot()
        write(root, "d1/sub/f.txt", "y\n")
        ws.snapshot()
        r = cli(root, store, "gc", "--keep-last", "1")
        assert r.returncode == 0, r.stderr
        write(root, "d1/sub/f.txt", "x1\n")
        taken = ws.snapshot()
        same(taken, root, tmp_path)
        taken = ws.snapshot()
        same(taken, root, tmp_path)
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def test_watched_preview_then_gc_then_snapshot(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, watch=True, seams=Seams(racy_margin_ns=0)) as ws:
        ws.snapshot()
        write(root, "d2/new.txt", "new\n")
        ws.capture(store_objects=False)
        cli(root, store, "snapshot")
        write(root, "d3/new.txt", "new3\n")
        cli(root, store, "snapshot")
        r = cli(root, store, "gc", "--keep-last", "1")
        assert r.returncode == 0, r.stderr
        taken = ws.snapshot()
        same(taken, root, tmp_path)
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def rot(store: Path, digest: str) -> None:
    """Flips a byte in the middle of a packed object's frame (bit rot on disk)."""
    disk = DiskStore(str(store))
    try:
        slot = disk._load_index()[digest]
    finally:
        disk.close()
    pack = store / "packs" / f"{slot.pack}.pack"
    data = bytearray(pack.read_bytes())
    data[slot.offset + slot.stored // 2] ^= 0xFF
    pack.write_bytes(bytes(data))


def test_after_a_repair_a_long_lived_workspace_stores_alone(root: Path, tmp_path: Path) -> None:
    """A new version is never stored against a chain through a copy `verify --repair` took out.

    The workspace checked the bytes of the version that rots while it ran; the repair (in
    another process, as `verify` advises) makes it read the indexes again and drop them,
    so the next version's base is read from disk, found damaged, and it is stored alone.
    """
    store = tmp_path / "store"
    text = "".join(f"line {i} of a file two agents edit\n" for i in range(400))
    versions = [(text + f"edit {k}\n" * (k + 1)).encode() for k in range(4)]
    with Workspace(root, store=store, watch=True) as ws:
        for data in versions[:3]:  # each stored against the one before
            (root / "a.txt").write_bytes(data)
            ws.snapshot()
        rot(store, hash_bytes(versions[1]))
        repaired = cli(root, store, "verify", "--repair")
        assert "taken as not stored" in repaired.stdout, repaired.stdout + repaired.stderr
        (root / "a.txt").write_bytes(versions[3])
        newest = ws.snapshot().id
    found = cli(root, store, "verify", newest)
    assert found.returncode == 0, found.stdout + found.stderr


_LOOP = """
import sys
from pathlib import Path
from worksnap.workspace import Workspace
root, store, tag = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for i in range(25):
    p = root / f"d{i % 7}" / f"{tag}.txt"
    p.parent.mkdir(exist_ok=True)
    p.write_text(f"{tag} {i}\\n")
    with Workspace(root, store=store) as ws:
        ws.snapshot()
"""


def test_two_processes_appending_at_once(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    for i in range(7):
        for j in range(40):
            write(root, f"d{i}/f{j}.txt", f"{i} {j}\n" * 50)
    with Workspace(root, store=store) as ws:
        ws.snapshot()
        ws.snapshot()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LOOP, str(root), str(store), tag],
            env=ENV,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b", "c")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    from worksnap.caches import load_tree_table
    from worksnap.storedir import StoreDir

    table, base, log = load_tree_table(StoreDir(str(store)), str(root))
    print("records", len(table), "base", base, "log", log)
    with Workspace(root, store=store) as ws:
        taken = ws.snapshot()
        print("cached", ws._capture.trees.memo.cached, "encoded", ws._capture.trees.memo.encoded)
    same(taken, root, tmp_path)
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def _fresh(root: Path, store: Path) -> tuple[Manifest, int, int]:
    """A snapshot by a new workspace that walks (how its trees were built is counted)."""
    with Workspace(root, store=store, seams=Seams(racy_margin_ns=0, last_capture=False)) as ws:
        taken = ws.snapshot()
        return taken, ws._capture.trees.memo.cached, ws._capture.trees.memo.encoded


def test_records_appended_after_a_cut_record_are_not_lost_for_good(
    root: Path, tmp_path: Path
) -> None:
    """A kill mid-append leaves a cut record; every later append lands after it, unread.

    The next save must notice the log was not read to its end and write a new base.
    """
    store = tmp_path / "store"
    for i in range(6):
        write(root, f"d{i}/sub/f.txt", f"{i}\n")
    _fresh(root, store)
    _fresh(root, store)  # base written; later saves append
    tick(root)
    write(root, "d1/sub/f.txt", "one\n")
    _fresh(root, store)
    log = Path(str(store), "cache", "trees.log")
    data = log.read_bytes()
    log.write_bytes(data[: len(data) - 5])  # what a kill mid-append leaves
    for n in range(3):
        tick(root)
        write(root, "d2/sub/f.txt", f"edit {n}\n")
        _fresh(root, store)  # encodes d2/sub, d2, the root and appends them
        taken, _, encoded = _fresh(root, store)  # a new process, nothing changed
        same(taken, root, tmp_path)
        assert encoded == 0, f"after edit {n}: {encoded} directories encoded again"


def _cold_with(root: Path, tmp_path: Path, **kw: object) -> Manifest:
    store = tmp_path / f"cold-{len(list(tmp_path.iterdir()))}"
    with Workspace(root, store=store, **kw) as ws:  # type: ignore[arg-type]
        return ws.capture(store_objects=False)


def test_watched_settings_changed_by_another_process(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _tree(root, "x")
    write(root, "d2/big.bin", b"z" * 300)
    with Workspace(root, store=store, watch=True, seams=Seams(racy_margin_ns=0)) as ws:
        ws.snapshot()
        assert cli(root, store, "config", "exclude", "add", "d1/g.txt", "d3/sub").returncode == 0
        taken = ws.snapshot()
        assert taken.tree == _cold_with(root, tmp_path, exclude=("d1/g.txt", "d3/sub")).tree
        assert cli(root, store, "config", "exclude", "remove", "d3/sub").returncode == 0
        write(root, "d0/g.txt", "changed\n")
        taken = ws.snapshot()
        assert taken.tree == _cold_with(root, tmp_path, exclude=("d1/g.txt",)).tree
        assert cli(root, store, "config", "max-file-bytes", "100").returncode == 0
        taken = ws.snapshot()
        assert (
            taken.tree == _cold_with(root, tmp_path, exclude=("d1/g.txt",), max_file_bytes=100).tree
        )
        write(root, "d2/big.bin", b"y" * 50)
        taken = ws.snapshot()
        assert (
            taken.tree == _cold_with(root, tmp_path, exclude=("d1/g.txt",), max_file_bytes=100).tree
        )
        assert cli(root, store, "config", "max-file-bytes", "2M").returncode == 0
        assert cli(root, store, "config", "exclude", "remove", "d1/g.txt").returncode == 0
        taken = ws.snapshot()
        same(taken, root, tmp_path)


def test_watched_restore_undo_then_snapshot(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, watch=True, seams=Seams(racy_margin_ns=0)) as ws:
        first = ws.snapshot()
        _tree(root, "y")
        (root / "d0" / "g.txt").chmod(0o755)
        os.symlink("g.txt", root / "d1" / "ln")
        second = ws.snapshot()
        same(second, root, tmp_path)
        ws.restore(first.id)
        taken = ws.snapshot()
        same(taken, root, tmp_path)
        assert taken.tree == first.tree
        ws.undo()
        taken = ws.snapshot()
        same(taken, root, tmp_path)
        ws.restore(first.id, paths=["d1"])
        taken = ws.snapshot()
        same(taken, root, tmp_path)


def test_watched_snapshot_after_a_disk_full_snapshot_has_its_objects(tmp_path: Path) -> None:
    """A snapshot whose pack could not be written (a full disk) is discarded; the next one,
    with nothing changed since, must not name the objects that pack held."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], check=True)
    try:
        root = tmp_path / "ws"
        store = small / "store"
        write(root, "a.txt", "a\n")
        with Workspace(root, store=store, watch=True) as ws:
            ws.snapshot()
            write(root, "d/blob.bin", os.urandom(200_000))
            filler = small / "filler"
            free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
            filler.write_bytes(b"\0" * (free - 64 * 1024))  # room for less than the blob
            try:
                ws.snapshot()
                raise AssertionError("the snapshot did not fail on a full disk")
            except worksnap.SnapshotError:
                pass
            filler.unlink()  # the disk has room again; nothing in the tree changed
            taken = ws.snapshot()
        same(taken, root, tmp_path)
        r = cli(root, store, "verify")
        assert r.returncode == 0, r.stdout + r.stderr
        out = tmp_path / "restored"
        r = cli(root, store, "restore", "--to", str(out), taken.id)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (out / "d" / "blob.bin").read_bytes() == (root / "d" / "blob.bin").read_bytes()
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_watched_snapshot_after_a_pack_is_moved_out_of_the_store(
    root: Path, tmp_path: Path
) -> None:
    """What verify advises for a damaged pack index: move the pack and its index out; "a
    snapshot stores again what is still on disk". A long-lived (daemon's) workspace too?"""
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, watch=True) as ws:
        ws.snapshot()
        aside = tmp_path / "aside"
        aside.mkdir()
        packs = [p for p in store.rglob("*") if p.is_file() and "pack" in str(p.relative_to(store))]
        assert packs
        for p in packs:
            os.rename(p, aside / p.name)
        taken = ws.snapshot()
    same(taken, root, tmp_path)
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr


def test_undo_brings_back_work_after_a_disk_full_snapshot(tmp_path: Path) -> None:
    """The same hole, as data loss: the pre-restore snapshot taken after a failed (disk
    full) one named the discarded objects; the restore removed the file; undo could not."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], check=True)
    try:
        root = tmp_path / "ws"
        write(root, "a.txt", "a\n")
        with Workspace(root, store=small / "store", watch=True) as ws:
            first = ws.snapshot()
            work = os.urandom(200_000)
            write(root, "work.bin", work)
            stats = os.statvfs(small)
            (small / "filler").write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - 65536))
            with pytest.raises(worksnap.SnapshotError):
                ws.snapshot()
            (small / "filler").unlink()
            ws.restore(first.id)
            assert not (root / "work.bin").exists()
            ws.undo()
            assert (root / "work.bin").read_bytes() == work
    finally:
        subprocess.run(["umount", str(small)], check=False)
