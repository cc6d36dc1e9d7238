"""The multi-pack index is a second way to find packed objects: it must read what the first reads.

The differential test drives random stores (objects alone and against bases, twins from
writers side by side, loose objects, gc sweeps, merges, the file written at random
moments) and after every step reads every object, and some never stored, through a new
store that uses the file and one that reads every pack index; both must answer the same.
`WORKSNAP_MIDX_SEEDS` runs more seeds (CI: the first 12).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from worksnap.diskstore import DiskStore
from worksnap.errors import ObjectError
from worksnap.hash import SMALL, hash_bytes
from worksnap.multipack import UNCOVERED, WORTH, QuickIndex, encode, refresh
from worksnap.packcodec import BASE_PREFIX
from worksnap.workspace import Workspace

SEEDS = int(os.environ.get("WORKSNAP_MIDX_SEEDS", "12"))


def _open(path: Path) -> DiskStore:
    store = DiskStore(str(path))
    store.create()
    return store


def _refresh(path: Path, *, worth: int = 0) -> bool:
    """Writes the file as a command that read every pack index would (any store size)."""
    store = _open(path)
    try:
        index = store._load_index()
        return refresh(store.files, store.paths.multi_pack_index, store._listed(), index,
                       worth=worth)  # fmt: skip
    finally:
        store.close()


def _outcome(store: DiskStore, digest: str) -> bytes | str:
    try:
        return store.read(digest)
    except ObjectError as exc:
        return f"error: {exc}"


class Walk:
    """Random stores: what every step leaves must read the same both ways."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path, self.rng = path, random.Random(seed)
        self.blobs: dict[str, bytes] = {}
        self.quick_reads = 0

    def _blob(self) -> tuple[bytes, str | None]:
        rng = self.rng
        if self.blobs and rng.random() < 0.5:  # a new version of a stored object
            base = rng.choice(list(self.blobs))
            old = self.blobs[base]
            at = rng.randrange(len(old) + 1)
            return old[:at] + rng.randbytes(rng.randrange(1, 40)) + old[at:], base
        return rng.randbytes(rng.randrange(1, 4000)), None

    def add(self) -> None:
        store = _open(self.path)
        for _ in range(self.rng.randrange(1, 12)):
            data, base = self._blob()
            digest = hash_bytes(data)
            store.add(digest, data, base=base)
            self.blobs[digest] = data
        store.flush()
        store.close()

    def twins(self) -> None:
        """Two writers side by side store the same objects, each against its own base."""
        first, second = _open(self.path), _open(self.path)
        first._load_index(), second._load_index()
        for _ in range(self.rng.randrange(1, 5)):
            data, base = self._blob()
            digest = hash_bytes(data)
            for store in (first, second):
                other = self.rng.choice([base, None, *list(self.blobs)[-3:]])
                store.add(digest, data, base=other)
            self.blobs[digest] = data
        for store in (first, second):
            store.flush()
            store.close()

    def loose(self) -> None:
        data = self.rng.randbytes(SMALL + self.rng.randrange(100))
        store = _open(self.path)
        store.add(digest := hash_bytes(data), data)
        store.close()
        self.blobs[digest] = data

    def sweep(self, *, merge: bool) -> None:
        store = _open(self.path)
        if merge:
            store.sweep(None, merge=True)
        else:
            keep = {d for d in self.blobs if self.rng.random() < 0.8}
            store.sweep(keep)
            self.blobs = {d: b for d, b in self.blobs.items() if d in keep}
        store.close()

    def step(self) -> str:
        action = self.rng.choices(
            ["add", "twins", "loose", "gc", "merge", "refresh"], [8, 2, 0.3, 1, 1, 3]
        )[0]
        if action == "add":
            self.add()
        elif action == "twins":
            self.twins()
        elif action == "loose":
            self.loose()
        elif action in ("gc", "merge"):
            self.sweep(merge=action == "merge")
        else:
            _refresh(self.path)
        return action

    def compare(self) -> None:
        stored = list(self.blobs)
        self.rng.shuffle(stored)
        absent = [hash_bytes(b"never %d" % i) for i in range(3)]  # a miss ends the file's use
        quick, full = DiskStore(str(self.path)), DiskStore(str(self.path))
        quick.reading_few()
        full._load_index()
        try:
            for digest in [*stored, *absent]:
                if digest == absent[0]:
                    self.quick_reads += isinstance(quick._quick.index, QuickIndex)
                got, want = _outcome(quick, digest), _outcome(full, digest)
                assert got == want, digest
                if digest in self.blobs:
                    assert want == self.blobs[digest]
        finally:
            quick.close()
            full.close()


@pytest.mark.parametrize("seed", range(SEEDS))
def test_reads_through_the_multi_pack_index_equal_reads_through_every_pack_index(
    tmp_path: Path, seed: int
) -> None:
    walk = Walk(tmp_path / "s", seed)
    done = []
    for _ in range(40):
        done.append(walk.step())
        walk.compare()
    assert walk.quick_reads >= 5, done  # the file answered whole steps' reads


def test_a_store_reads_the_file_only_until_it_reads_the_pack_indexes(tmp_path: Path) -> None:
    walk = Walk(tmp_path / "s", 0)
    for _ in range(5):
        walk.add()
    some = next(iter(walk.blobs))
    assert _refresh(tmp_path / "s")
    store = DiskStore(str(tmp_path / "s"))
    assert store.read(some) == walk.blobs[some] and store._quick.index is None  # not asked
    store.reading_few()  # too late: the index was read
    assert store.read(some) == walk.blobs[some] and store._quick.index is None
    store.close()
    store = DiskStore(str(tmp_path / "s"))
    store.reading_few()
    assert store.read(some) == walk.blobs[some]
    assert isinstance(store._quick.index, QuickIndex) and store._index is None  # no index read
    assert store.has(some)  # needs every pack's index: read, and the file left for good
    assert not store._quick.usable and store._index is not None
    store.close()


def test_it_is_written_only_when_worth_it_and_again_once_too_much_is_uncovered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s"
    walk = Walk(path, 1)
    walk.add()
    mpi = Path(DiskStore(str(path)).paths.multi_pack_index)
    count = len(walk.blobs)
    assert not _refresh(path, worth=count + 1) and not mpi.exists()
    assert _refresh(path, worth=count)
    first = mpi.stat().st_ino
    walk.add()
    assert not _refresh(path)  # a few objects uncovered: read from their pack index
    store = _open(path)
    for i in range(UNCOVERED):  # past the limit: too much for a new process to read
        store.add(hash_bytes(b"%d" % i), b"%d" % i)
    store.flush()
    store.close()
    quick = DiskStore(str(path))
    quick.reading_few()
    assert quick.read(hash_bytes(b"7")) == b"7"  # answered by reading the indexes
    assert not quick._quick.usable
    quick.close()
    assert _refresh(path)
    assert mpi.stat().st_ino != first


def test_a_file_that_would_be_refused_is_written_again(tmp_path: Path) -> None:
    """A twin in a pack the file does not cover, or a fan-out a crash zeroed (it is not
    fsynced), made every new process refuse it until 4,096 more objects came."""
    path = tmp_path / "s"
    walk = Walk(path, 3)
    walk.add()
    daemon = _open(path)
    daemon._load_index()  # a long-lived store: it will not see what comes next
    data = b"stored by another process first" * 9
    store = _open(path)
    store.add(hash_bytes(data), data)
    store.flush()
    store.close()
    assert _refresh(path)
    daemon.add(hash_bytes(data), data)  # a twin, in a pack the file does not cover
    daemon.flush()
    daemon.close()
    some = next(iter(walk.blobs))

    def used() -> bool:
        store = DiskStore(str(path))
        store.reading_few()
        assert store.read(some) == walk.blobs[some]
        answered = store._quick.usable
        store.close()
        return answered

    assert not used()
    assert _refresh(path) and used()
    mpi = Path(DiskStore(str(path)).paths.multi_pack_index)
    data = bytearray(mpi.read_bytes())
    header = 12 + int.from_bytes(data[8:12], "little")
    data[header : header + 1024] = bytes(1024)  # the fan-out table zeroed
    mpi.write_bytes(bytes(data))
    assert not used()
    assert _refresh(path) and used()
    assert not _refresh(path)  # it answers: left as it is


def test_past_its_limit_a_store_reads_the_pack_indexes_instead(tmp_path: Path) -> None:
    """A look-up in the file costs 12 us, one in the index 1.5: many reads, then the index."""
    path = tmp_path / "s"
    walk = Walk(path, 4)
    for _ in range(4):
        walk.add()
    assert _refresh(path)
    store = DiskStore(str(path))
    store.reading_few()
    store._quick.limit = 3
    digests = list(walk.blobs)
    assert [store.read(d) for d in digests[:3]] == [walk.blobs[d] for d in digests[:3]]
    assert store._index is None
    assert [store.read(d) for d in digests] == list(walk.blobs.values())
    assert store._index is not None and store._quick.dropped
    store.close()


def test_a_store_dropped_without_close_releases_the_file(tmp_path: Path) -> None:
    import gc

    walk = Walk(tmp_path / "s", 5)
    walk.add()
    assert _refresh(tmp_path / "s")
    some = next(iter(walk.blobs))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        store = DiskStore(str(tmp_path / "s"))
        store.reading_few()
        assert store.read(some) == walk.blobs[some]
        assert store._quick.index is not None
        del store
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before


def test_only_commands_that_read_a_few_objects_use_it(tmp_path: Path) -> None:
    """diff of two snapshots (and its patch reader), show and cat; gc, verify, restore,
    snapshot read the pack indexes, and answer the same."""
    root, store = tmp_path / "root", tmp_path / "store"
    root.mkdir()
    for i in range(30):
        (root / f"f{i}.txt").write_text(f"file {i}\n")
    with Workspace(str(root), store=str(store)) as ws:
        old = ws.snapshot().id
        (root / "f3.txt").write_text("changed\n")
        new = ws.snapshot().id
    assert _refresh(store)
    for slow in (False, True):
        with Workspace(str(root), store=str(store)) as ws:
            if slow:
                ws.store._load_index()
            changes, read = ws.diff(old, new)
            assert [c.path for c in changes] == ["f3.txt"]
            assert [read(c.new) for c in changes if c.new] == [b"changed\n"]
            assert ws.file_bytes(old, "f3.txt")[1] == b"file 3\n"
            assert b"f3.txt" in ws.show_bytes(old)
            assert isinstance(ws.store._quick.index, QuickIndex) != slow
            assert (ws.store._index is None) != slow
    for run in (lambda ws: ws.gc(), lambda ws: ws.verify(), lambda ws: ws.restore(old)):
        with Workspace(str(root), store=str(store)) as ws:
            run(ws)
            assert ws.store._quick.index is None and not ws.store._quick.usable


def test_a_store_of_100_000_objects_gets_the_file_from_its_first_full_read(
    tmp_path: Path,
) -> None:
    """Below `WORTH` objects no file is written; at it, reading the indexes writes it."""
    path = tmp_path / "s"
    store = _open(path)
    for i in range(WORTH - 1):
        store.add(hash_bytes(b"%d" % i), b"%d" % i)
    store.flush()
    store.close()
    mpi = Path(store.paths.multi_pack_index)
    DiskStore(str(path))._load_index()
    assert not mpi.exists()
    store = _open(path)
    store.add(hash_bytes(b"one more"), b"one more")
    store.flush()
    store.close()
    DiskStore(str(path))._load_index()
    assert mpi.stat().st_size == 12 + len(_header(path)) + 1024 + 68 * WORTH
    store = DiskStore(str(path))
    store.reading_few()
    assert store.read(hash_bytes(b"4242")) == b"4242"
    assert isinstance(store._quick.index, QuickIndex) and store._index is None


def _header(path: Path) -> bytes:
    data = Path(DiskStore(str(path)).paths.multi_pack_index).read_bytes()
    return data[12 : 12 + int.from_bytes(data[8:12], "little")]


def test_encoding_names_each_base_by_its_prefix(tmp_path: Path) -> None:
    walk = Walk(tmp_path / "s", 2)
    for _ in range(6):
        walk.add()
    store = _open(tmp_path / "s")
    index = store._load_index()
    path = Path(store.paths.multi_pack_index)
    path.write_bytes(b"".join(encode(index)))
    quick = QuickIndex(store.files, str(path), store._listed())
    for digest in index:
        found = quick(digest)
        assert found == (digest, index[digest])
        if (base := index[digest].base) is not None:
            assert len(base) == 2 * BASE_PREFIX
            assert quick(base)[0] == store._find(base)[0]  # type: ignore[index]
    quick.close()
    store.close()
