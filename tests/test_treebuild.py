"""The capture's tree building (treebuild.TreeMemo) against the slow one it replaces.

A long-lived `Workspace` builds each snapshot's trees from the last capture's, encoding
only the directories whose children changed. After every step of a seeded random walk
of file operations (tests/watchops.py), interleaved with previews that store nothing,
gc runs that sweep objects, and failed captures, its root tree must be exactly
`treebuild.from_flat` of a cold full scan (a fresh workspace with no caches), and every
object of the stored snapshot must be there (its trees flatten to that scan).

Derandomized: `WORKSNAP_TREEBUILD_SEED` (default 1) and `WORKSNAP_TREEBUILD_STEPS`
(default 200; CI runs the default) choose the walk.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path

import msgspec
import pytest

from tests.conftest import write
from tests.watchops import Ops
from worksnap import Workspace, frames
from worksnap.config import Retention
from worksnap.errors import ObjectError
from worksnap.flatbuild import from_flat
from worksnap.hash import hash_bytes
from worksnap.layout import StorePaths
from worksnap.manifest import Entry, Manifest
from worksnap.memstore import MemoryStore
from worksnap.paths import Digest
from worksnap.tree import Child, File, Node, decode_node, encode_node, node_digest
from worksnap.treebuild import CaptureTrees, TreeMemo
from worksnap.treewalk import Flat, Nodes, diff_trees, flatten

STEPS = int(os.environ.get("WORKSNAP_TREEBUILD_STEPS", "200"))
SEED = int(os.environ.get("WORKSNAP_TREEBUILD_SEED", "1"))


def _discard(digest: Digest, data: bytes) -> None:
    pass


def cold(root: Path, store: Path) -> Manifest:
    """A capture by a process that never captured before: no caches, no memo."""
    with Workspace(root, store=store) as ws:
        return ws.capture(store_objects=False)


def slow_tree(manifest: Manifest) -> Digest:
    return from_flat(Flat.of(manifest), _discard)[0]


@pytest.mark.parametrize("watch", [False, True], ids=["plain", "watched"])
def test_the_memo_builds_what_from_flat_builds_after_every_step(
    tmp_path: Path, watch: bool
) -> None:
    rnd = random.Random(SEED + watch)
    root = tmp_path / "ws"
    root.mkdir()
    for rel in ("src/main.py", "src/lib/util.py", "docs/a.log", "keep.log", "build/b.o"):
        write(root, rel, os.urandom(rnd.randint(0, 200)))
    write(root, ".gitignore", "*.log\n!keep.log\nbuild/\n")
    for i in range(1000):  # one directory large enough to be split into parts
        write(root, f"big/file-{i:04d}.txt", f"{i}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    ops = Ops(root, rnd, outside=outside, hard_links=False)
    start = time.monotonic()
    encoded: list[int] = []
    directories: list[int] = []
    unseen = 0
    with Workspace(root, store=tmp_path / "store", watch=watch) as ws:
        for step in range(STEPS):
            last = ops.step()
            roll = rnd.random()
            if roll < 0.15:
                ws.capture(store_objects=False)  # a preview: trees built, none stored
            elif roll < 0.2:
                ws.gc(Retention(keep_last=1))  # sweeps what only older snapshots had
            taken = ws.snapshot()
            encoded.append(ws._capture.trees.memo.encoded)
            unseen += ws._capture.trees.memo.unseen
            expected = cold(root, tmp_path / "cold-store")
            assert Flat.of(taken) == Flat.of(expected), (step, last)
            assert taken.tree == slow_tree(expected), (step, last)
            stored = flatten(Digest(taken.tree), ws.store.read)  # every object is there
            assert stored == Flat.of(expected), (step, last)
            directories.append(len(expected.dirs) + 1)  # and the root
    assert ws.verify() == []
    # It is a fast path: most snapshots encode a few directories, not all of them.
    assert sum(encoded) < sum(directories) / 2
    # Watched, the directories without events are not looked at again (and so must be
    # equal to the slow path above without it).
    assert (unseen > sum(directories) / 4) if watch else unseen == 0, unseen
    print(f"treebuild {'watched' if watch else 'plain'}: {STEPS} steps, seed {SEED}, "
          f"{time.monotonic() - start:.1f} s, {unseen} of {sum(directories)} unseen")  # fmt: skip


def _damage_tree_cache(store: Path, rnd: random.Random) -> str:
    """Damages the tree cache as a crash, a disk or another tool could; returns how."""
    paths = StorePaths(str(store))
    base, log = Path(paths.tree_cache), Path(paths.tree_cache_log)
    how = rnd.choice(["none", "none", "truncate log", "flip log", "flip base", "delete",
                      "garbage log", "other root"])  # fmt: skip
    if how == "truncate log" and log.exists():
        data = log.read_bytes()
        log.write_bytes(data[: rnd.randrange(len(data) + 1)])  # a save killed part-way
    elif how == "flip log" and log.exists() and log.stat().st_size:
        data = bytearray(log.read_bytes())
        data[rnd.randrange(len(data))] ^= 0xFF
        log.write_bytes(bytes(data))
    elif how == "flip base" and base.exists():
        data = bytearray(base.read_bytes())
        data[rnd.randrange(len(data))] ^= 0xFF
        base.write_bytes(bytes(data))
    elif how == "delete":
        base.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
    elif how == "garbage log":
        with log.open("ab") as f:
            f.write(os.urandom(rnd.randint(1, 40)))
    elif how == "other root" and base.exists():
        # The same records, claimed for another root: dropped whole.
        try:
            version, _, table = msgspec.msgpack.decode(frames.unpack(base.read_bytes()))
        except ValueError:
            return "base already damaged"
        base.write_bytes(frames.pack(msgspec.msgpack.encode((version, "/elsewhere", table))))
    return how


def test_a_new_process_with_the_tree_cache_builds_what_from_flat_builds(tmp_path: Path) -> None:
    """Each step a new `Workspace` (as a new CLI process): its memo is empty, so every
    directory it does not encode comes from the tree cache read from disk (damaged now
    and then, as a kill or a disk could leave it)."""
    rnd = random.Random(SEED + 2)
    root = tmp_path / "ws"
    root.mkdir()
    for rel in ("src/main.py", "src/lib/util.py", "docs/a.log", "keep.log", "build/b.o"):
        write(root, rel, os.urandom(rnd.randint(0, 200)))
    write(root, ".gitignore", "*.log\n!keep.log\nbuild/\n")
    for i in range(1000):  # one directory large enough to be split into parts
        write(root, f"big/file-{i:04d}.txt", f"{i}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    ops = Ops(root, rnd, outside=outside, hard_links=False)
    store = tmp_path / "store"
    start = time.monotonic()
    cached = encoded = 0
    for step in range(max(STEPS // 2, 20)):
        last = ops.step()
        how = _damage_tree_cache(store, rnd)
        with Workspace(root, store=store) as ws:
            roll = rnd.random()
            if roll < 0.15:
                ws.capture(store_objects=False)  # a preview: trees built, none stored
            elif roll < 0.2:
                ws.gc(Retention(keep_last=1))  # sweeps what only older snapshots had
            taken = ws.snapshot()
            memo = ws._capture.trees.memo
            if how == "none" and roll >= 0.2:  # the cache as the last process left it
                cached += memo.cached
                encoded += memo.encoded
            stored = flatten(Digest(taken.tree), ws.store.read)  # every object is there
        expected = cold(root, tmp_path / "cold-store")
        assert Flat.of(taken) == Flat.of(expected), (step, last, how)
        assert taken.tree == slow_tree(expected), (step, last, how)
        assert stored == Flat.of(expected), (step, last, how)
    # It is a fast path: without the cache a new process encodes every directory; with
    # it, those the step did not touch come from it (in this small tree, each step's
    # operations and their ancestors touch about half of them).
    assert cached > (cached + encoded) / 4, (cached, encoded)
    print(f"treebuild fresh: {max(STEPS // 2, 20)} steps, seed {SEED}, "
          f"{time.monotonic() - start:.1f} s, {cached} cached, {encoded} encoded")  # fmt: skip


def test_equal_to_from_flat_on_what_no_tree_holds() -> None:
    # Left-out paths whose parent is not a captured directory, or whose name is taken,
    # go to the record (`Loose`), as from_flat puts them; repeats are kept once.
    digest = "ab" * 32
    flat = Flat(
        entries=[Entry(path="d/f", type="file", mode=0o644, hash=digest, size=1)],
        dirs=["d"],
        ignored=["d/f", "gone/x", "i", "i"],
        large=["d/big", "nowhere/big"],
        excluded=[".git", "d/.git"],
    )
    fast = TreeMemo().build(flat, _discard, stored=None)
    assert fast == from_flat(flat, _discard)
    assert fast[1].ignored == ["d/f", "gone/x"] and fast[1].large == ["nowhere/big"]


@pytest.mark.parametrize("keep", [True, False], ids=["children", "digests"])
def test_a_directory_is_encoded_again_when_one_of_its_objects_is_gone(keep: bool) -> None:
    objects: dict[str, bytes] = {}
    children: list[Child] = [File(name=f"f{i:04d}", mode=0o644, size=i, digest=bytes(32))
                             for i in range(1500)]  # fmt: skip
    flat = Flat(
        entries=[Entry(path=f"d/{c.name}", type="file", mode=0o644, hash="00" * 32,
                       size=c.size) for c in children if isinstance(c, File)],
        dirs=["d"], ignored=[], large=[], excluded=[],
    )  # fmt: skip
    memo = TreeMemo(children=keep)
    first = memo.build(flat, objects.__setitem__, stored=objects.keys())
    assert memo.encoded == 2 and len(objects) > 3  # the root, and `d` split into parts
    second = memo.build(flat, objects.__setitem__, stored=objects.keys())
    assert (second, memo.encoded) == (first, 0)
    part = next(d for d, data in objects.items() if b"wspart" in data[:8])
    del objects[part]  # swept (a gc killed part-way could leave the index alone)
    third = memo.build(flat, objects.__setitem__, stored=objects.keys())
    assert third == first and memo.encoded == 1 and part in objects


def test_without_children_the_memo_reads_a_files_previous_digest_from_the_store() -> None:
    """`previous` (a changed file's compression base) answers alike either way."""
    objects: dict[str, bytes] = {}
    paths = [f"d/f{i:04d}" for i in range(1500)] + ["top.txt", "e/x"]  # `d` split into parts
    flat = Flat(
        entries=[Entry(path=p, type="file", mode=0o644, hash=hash_bytes(p.encode()), size=1)
                 for p in sorted(paths)],
        dirs=["d", "e"], ignored=[], large=[], excluded=[],
    )  # fmt: skip
    kept, digests = TreeMemo(children=True), TreeMemo(children=False)
    kept.build(flat, objects.__setitem__, stored=objects.keys())
    digests.build(flat, objects.__setitem__, stored=objects.keys())
    read = objects.__getitem__
    for rel in [*paths, "d/new", "nowhere/x"]:
        expected = hash_bytes(rel.encode()) if rel in paths else None
        assert kept.previous(rel) == digests.previous(rel, read) == expected, rel
    assert TreeMemo(children=False).previous("top.txt", read) is None  # nothing built
    unread = TreeMemo(children=False)
    unread.build(flat, _discard, stored=None)  # a preview: its trees were never stored
    assert unread.previous("d/f0001", _missing) is None


def _missing(digest: str) -> bytes:
    raise ObjectError(digest, "missing from the store")


def _flat_of(paths: list[str], dirs: list[str]) -> Flat:
    return Flat(
        entries=[Entry(path=p, type="file", mode=0o644, hash=hash_bytes(p.encode()), size=1)
                 for p in sorted(paths)],
        dirs=dirs, ignored=[], large=[], excluded=[],
    )  # fmt: skip


def test_the_nodes_a_build_encodes_are_given_as_a_reader_would_get_them() -> None:
    """`made` gets every object written, decoded: a cache of them answers reads unasked."""
    objects: dict[str, bytes] = {}
    made: dict[Digest, Node] = {}
    paths = [f"d/f{i:04d}" for i in range(1500)] + ["top.txt", "e/x"]  # `d` split into parts
    memo = TreeMemo()
    old = memo.build(_flat_of(paths, ["d", "e"]), objects.__setitem__, stored=None,
                     made=made.__setitem__)[0]  # fmt: skip
    assert made.keys() == objects.keys() and len(made) > 3
    for digest, node in made.items():
        assert node_digest(encode_node(node)) == digest
        assert decode_node(objects[digest], digest) == node
    changed = [p for p in paths if p != "d/f0700"] + ["d/f0700x", "e/y"]
    new = memo.build(_flat_of(changed, ["d", "e"]), objects.__setitem__, stored=None,
                     made=made.__setitem__)[0]  # fmt: skip
    reads: list[str] = []
    nodes = Nodes(lambda digest: reads.append(digest) or objects[digest])
    for digest, node in made.items():
        nodes.add(digest, node)
    assert list(diff_trees(old, new, nodes)) == list(diff_trees(old, new, objects.__getitem__))
    assert [d.path for d in diff_trees(old, new, nodes)] == ["d/f0700", "d/f0700x", "e/y"]
    assert reads == []  # every node compared was one the builds encoded


@pytest.mark.parametrize("keep", [True, False], ids=["children", "digests"])
def test_a_capture_adds_its_new_nodes_only_when_it_keeps_children(keep: bool) -> None:
    store = MemoryStore()
    reads: list[str] = []
    nodes = Nodes(lambda digest: reads.append(digest) or store.read(digest))
    trees = CaptureTrees(store, children=keep, nodes=nodes)
    old = trees.build(_flat_of(["a/x", "b/y"], ["a", "b"]), True, False)
    new = trees.build(_flat_of(["a/x", "b/z"], ["a", "b"]), True, False)
    assert [d.path for d in diff_trees(old, new, nodes)] == ["b/y", "b/z"]
    # Kept children: the nodes were added as built. Without, they are read (4: the two
    # roots and the two versions of `b`), so that a cold capture holds no more memory.
    assert len(reads) == (0 if keep else 4)


def test_a_new_process_builds_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """A review's second snapshot of a tree 1,000 directories deep raised RecursionError
    where a new process looks for each directory's earlier objects (the walks allow
    2,048 levels). Built with a new workspace each time, as a command does."""
    root = tmp_path / "ws"
    deep = str(root)
    os.mkdir(deep)
    for _ in range(1500):  # (os.makedirs recurses on its parents)
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    try:
        with open(os.path.join(deep, "f.txt"), "w") as f:
            f.write("one\n")
        with Workspace(root) as ws:
            first = ws.snapshot()
        with open(os.path.join(deep, "f.txt"), "w") as f:
            f.write("two\n")
        with Workspace(root) as ws:
            second = ws.snapshot()
            assert second.tree != first.tree
            assert ws.load(second.id).entries[-1].path.endswith("/d/f.txt")
    finally:
        # Bottom up, without recursion: pytest's removal of old temp folders (shutil.rmtree)
        # recurses, and a tree this deep left behind failed every later session at its exit.
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(deep, "f.txt"))
        while deep != str(root):
            os.rmdir(deep)
            deep = os.path.dirname(deep)
