"""The tree cache (`cache/trees` and its log): a new process takes unchanged trees from it.

It may only ever save work: a damaged, truncated or foreign cache costs encoding again,
and a link or FIFO where it belongs is refused as any store file is. A save appends
what it encoded; the base is rewritten only when the log has grown past it.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import worksnap
from tests.conftest import tick, write
from worksnap import Workspace
from worksnap.caches import load_tree_table, save_tree_table
from worksnap.diskstore import DiskStore
from worksnap.errors import StoreError
from worksnap.layout import StorePaths
from worksnap.manifest import Manifest
from worksnap.paths import Digest
from worksnap.storedir import StoreDir
from worksnap.tree import Dir, Index, decode_node
from worksnap.treebuild import LAST_ROOT
from worksnap.treewalk import children
from worksnap.workspace import Seams

SRC = str(Path(worksnap.__file__).resolve().parents[1])


def _tree(root: Path) -> Path:
    for i in range(6):
        write(root, f"d{i}/sub/f.txt", f"{i}\n")
        write(root, f"d{i}/g.txt", f"g{i}\n")
    return root


WALKS = Seams(racy_margin_ns=0, last_capture=False)
"""Every capture walks (`lastcapture.py` would take the last one whole): what is tested
here is how a walk's trees are built."""


def _store(root: Path) -> Path:
    return root.parent / "store"  # outside the root, as the cold capture's


def _paths(root: Path) -> StorePaths:
    return StorePaths(str(_store(root)))


def _fresh_snapshot(root: Path) -> tuple[Manifest, int, int]:
    """A snapshot by a new workspace (a new process): the directories cached and encoded."""
    with Workspace(root, store=_store(root), seams=WALKS) as ws:
        taken = ws.snapshot()
        memo = ws._capture.trees.memo
        return taken, memo.cached, memo.encoded


def _cold_tree(root: Path, tmp_path: Path) -> str:
    with Workspace(root, store=tmp_path / "cold-store") as ws:
        return ws.capture(store_objects=False).tree


def test_a_new_process_encodes_only_what_changed(root: Path, tmp_path: Path) -> None:
    _tree(root)
    _, cached, encoded = _fresh_snapshot(root)
    assert (cached, encoded) == (0, 13)  # 6 x (d, d/sub) and the root
    tick(root)
    write(root, "d3/sub/f.txt", "changed\n")
    taken, cached, encoded = _fresh_snapshot(root)
    assert encoded == 3  # d3/sub, d3, the root
    assert cached == 10
    assert taken.tree == _cold_tree(root, tmp_path)


def test_a_save_appends_to_the_log_and_leaves_the_base(root: Path) -> None:
    _tree(root)
    _fresh_snapshot(root)
    base = Path(_paths(root).tree_cache)
    log = Path(_paths(root).tree_cache_log)
    before = (base.stat().st_ino, base.read_bytes())
    assert not log.exists()
    for i in range(3):
        tick(root)
        write(root, f"d{i}/g.txt", f"edit {i}\n")
        _fresh_snapshot(root)
    assert (base.stat().st_ino, base.read_bytes()) == before
    assert 0 < log.stat().st_size < len(before[1])


def test_the_log_is_read_up_to_a_record_cut_short(root: Path, tmp_path: Path) -> None:
    """A save killed part-way leaves a short last record: the records before it hold."""
    _tree(root)
    _fresh_snapshot(root)
    store = StoreDir(str(_store(root)))
    whole, _, _ = load_tree_table(store, str(root))
    tick(root)
    write(root, "d1/g.txt", "one\n")
    _fresh_snapshot(root)
    with_first, _, _ = load_tree_table(store, str(root))
    tick(root)
    write(root, "d2/g.txt", "two\n")
    _fresh_snapshot(root)
    log = Path(_paths(root).tree_cache_log)
    data = log.read_bytes()
    first_length = int.from_bytes(data[:4], "big")
    for cut in (4 + first_length + 2, len(data) - 1):
        log.write_bytes(data[:cut])
        table, _, _ = load_tree_table(store, str(root))
        assert table == with_first and len(table) > len(whole)
    log.write_bytes(data[:3])
    assert load_tree_table(store, str(root))[0] == whole
    # And a snapshot after the damage is right.
    taken, cached, _ = _fresh_snapshot(root)
    assert taken.tree == _cold_tree(root, tmp_path) and cached > 0


@pytest.mark.parametrize("damage", ["flip", "other root", "garbage"])
def test_a_damaged_or_foreign_base_is_dropped(root: Path, tmp_path: Path, damage: str) -> None:
    _tree(root)
    _fresh_snapshot(root)
    base = Path(_paths(root).tree_cache)
    if damage == "flip":
        data = bytearray(base.read_bytes())
        data[len(data) // 2] ^= 1
        base.write_bytes(bytes(data))
    elif damage == "garbage":
        base.write_bytes(os.urandom(200))
    else:
        store = StoreDir(str(_store(root)))
        assert load_tree_table(store, "/somewhere/else")[0] == {}
        os.rename(root, tmp_path / "moved")  # the same store, now read for another root
        root = tmp_path / "moved"
        with Workspace(root, store=tmp_path / "store", seams=WALKS) as ws:
            ws.rebind()
    taken, cached, _ = _fresh_snapshot(root)
    assert cached == 0
    assert taken.tree == _cold_tree(root, tmp_path)


@pytest.mark.parametrize("name", ["tree_cache", "tree_cache_log"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_link_or_fifo_as_the_tree_cache_is_refused(root: Path, name: str, kind: str) -> None:
    _tree(root)
    _fresh_snapshot(root)
    path = Path(getattr(_paths(root), name))
    path.unlink(missing_ok=True)
    outside = root.parent / "outside"
    outside.write_bytes(b"not a cache")
    if kind == "symlink":
        path.symlink_to(outside)
    else:
        os.mkfifo(path)
    with pytest.raises(StoreError, match=kind if kind == "symlink" else "FIFO"):
        _fresh_snapshot(root)
    assert outside.read_bytes() == b"not a cache"
    if kind == "fifo":
        assert stat.S_ISFIFO(path.lstat().st_mode)  # never replaced through, nor read


def test_a_directory_replaced_by_a_file_with_the_same_times(root: Path, tmp_path: Path) -> None:
    _tree(root)
    _fresh_snapshot(root)
    parent = root / "d4"
    st = parent.stat()
    for child in (parent / "sub").iterdir():
        child.unlink()
    (parent / "sub").rmdir()
    write(root, "d4/sub", "a file now\n")
    os.utime(parent, ns=(st.st_atime_ns, st.st_mtime_ns))
    taken, _, _ = _fresh_snapshot(root)
    assert taken.tree == _cold_tree(root, tmp_path)
    assert {e.path: e.type for e in taken.entries}["d4/sub"] == "file"


def test_a_record_whose_tree_is_not_among_its_objects_is_not_used(
    root: Path, tmp_path: Path
) -> None:
    """Every object of a record must be in the store, and its tree must be one of them."""
    _tree(root)
    _fresh_snapshot(root)
    store = StoreDir(str(_store(root)))
    table, _, _ = load_tree_table(store, str(root))
    forged = {key: ("ab" * 32, files, size, ()) for key, (_, files, size, _) in table.items()}
    save_tree_table(store, str(root), forged)
    taken, cached, encoded = _fresh_snapshot(root)
    assert (cached, encoded) == (0, 13)
    assert taken.tree == _cold_tree(root, tmp_path)


_KILLED_MID_APPEND = """
import os, signal, sys
from pathlib import Path
from worksnap.workspace import Seams, Workspace

real_write = os.write

def write(fd, data):
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        name = ""
    if name.endswith("/cache/trees.log"):  # half of the record, then SIGKILL
        real_write(fd, bytes(data)[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)

os.write = write
root, store = Path(sys.argv[1]), Path(sys.argv[2])
(root / "d2" / "g.txt").write_text("edited before the kill\\n")
with Workspace(root, store=store, seams=Seams(last_capture=False)) as ws:
    ws.snapshot()
"""


def test_kill_9_in_the_middle_of_a_log_append(root: Path, tmp_path: Path) -> None:
    """A real SIGKILL half-way through appending to the log: the next process is right."""
    _tree(root)
    _fresh_snapshot(root)
    _fresh_snapshot(root)  # the base is written; the next save appends
    tick(root)
    log = Path(_paths(root).tree_cache_log)
    assert not log.exists()
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_APPEND, str(root), str(_store(root))],
        env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True, check=False,
        timeout=60,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert log.stat().st_size > 0  # half a record
    table, _, _ = load_tree_table(StoreDir(str(_store(root))), str(root))
    assert table  # the base's records hold; the half record is dropped
    taken, cached, _ = _fresh_snapshot(root)
    assert taken.tree == _cold_tree(root, tmp_path) and cached > 0
    assert {e.path: e.hash for e in taken.entries}["d2/g.txt"] is not None


def _tops(store: DiskStore, root_tree: str) -> dict[str, str]:
    """Each directory's tree digest in a snapshot's trees, by path."""
    tops = {"": root_tree}
    todo = [""]
    while todo:
        d = todo.pop()
        for child in children(Digest(tops[d]), store.read):
            if isinstance(child, Dir):
                path = f"{d}/{child.name}" if d else child.name
                tops[path] = child.tree.hex()
                todo.append(path)
    return tops


def _wide_tree(root: Path) -> None:
    # Directories with enough children that a tree compressed alone costs more than one
    # compressed against its previous version.
    for i in range(3):
        for j in range(40):
            write(root, f"d{i}/sub/f{j:02}.txt", f"{i} {j}\n")
            write(root, f"d{i}/g{j:02}.txt", f"g {i} {j}\n")


def test_a_new_process_compresses_new_trees_against_the_last_build(
    root: Path, tmp_path: Path
) -> None:
    # The daemon and a long-lived workspace compress each directory's new tree against its
    # previous one (their memo knows it); a plain command is a new process with no memo:
    # the tree cache's LAST_ROOT names the last build's root tree, read on demand.
    _wide_tree(root)
    first, _, _ = _fresh_snapshot(root)
    tick(root)
    write(root, "d1/sub/f07.txt", "changed\n")
    second, _, encoded = _fresh_snapshot(root)
    assert encoded == 3 and second.tree == _cold_tree(root, tmp_path)
    store = DiskStore(str(_store(root)))
    try:
        old, new = _tops(store, first.tree), _tops(store, second.tree)
        index = store._load_index()
        for d in ("", "d1", "d1/sub"):
            base = index[new[d]].base
            assert base is not None and old[d].startswith(base), d
    finally:
        store.close()


@pytest.mark.parametrize("names", ["a file", "a missing object", "no tree"])
def test_a_wrong_last_root_costs_only_compression(root: Path, tmp_path: Path, names: str) -> None:
    # LAST_ROOT is a hint read from a cache: pointing at a file's bytes, at nothing, or at
    # a digest that is no object, the next snapshot is still the tree as it is.
    _wide_tree(root)
    first, _, _ = _fresh_snapshot(root)
    store = StoreDir(str(_store(root)))
    table, _, _ = load_tree_table(store, str(root))
    file_digest = next(e.hash for e in first.entries if e.hash is not None)
    wrong = {"a file": file_digest, "a missing object": "ab" * 32, "no tree": "zz"}[names]
    table[LAST_ROOT] = (wrong, 0, 0, ())
    save_tree_table(store, str(root), table)
    store.close()
    tick(root)
    write(root, "d2/g05.txt", "changed\n")
    second, _, encoded = _fresh_snapshot(root)
    assert encoded == 2 and second.tree == _cold_tree(root, tmp_path)
    with Workspace(root, store=_store(root)) as ws:
        assert ws.verify() == []


def test_a_new_process_compresses_a_split_directory_part_by_part(
    root: Path, tmp_path: Path
) -> None:
    # A directory of thousands of entries is split into parts under an index; a new
    # process compresses each new part against the old part at its place (the old index
    # alone made every part a nearly whole copy).
    for i in range(6000):
        write(root, f"big/f{i:05}.txt", f"{i}\n")
    first, _, _ = _fresh_snapshot(root)
    tick(root)
    write(root, "big/f03000.txt", "changed\n")
    second, _, _ = _fresh_snapshot(root)
    assert second.tree == _cold_tree(root, tmp_path)
    store = DiskStore(str(_store(root)))
    try:
        old, new = _tops(store, first.tree), _tops(store, second.tree)
        index = store._load_index()
        before, after = _objects(store, old["big"]), _objects(store, new["big"])
        assert len(after) > 3, "not split: the test needs a split"
        changed = [digest for digest in after if digest not in before]
        assert changed, "no part changed"
        for digest in changed:  # the part with the change, and the index nodes above it
            slot = index[digest]
            assert slot.base is not None and slot.stored < slot.raw // 4, (slot, digest)
    finally:
        store.close()


def _objects(store: DiskStore, top: str) -> set[str]:
    """Every object of a directory: its top, its index nodes and its parts."""
    found, todo = set(), [top]
    while todo:
        digest = todo.pop()
        found.add(digest)
        node = decode_node(store.read(Digest(digest)), digest)
        if isinstance(node, Index):
            todo.extend(span.node.hex() for span in node.spans)
    return found
