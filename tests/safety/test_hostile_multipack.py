"""A hostile or damaged multi-pack index changes nothing but how long a read takes.

`cache/multi-pack-index` only says where objects are; every object it finds is checked
against its digest, and anything it cannot answer for sends the store to the pack
indexes (docs/format.md, "The multi-pack index"). Each case damages the file of a real
store the way a crash, a disk or a hostile hand would, then checks that a new process
shows and diffs the snapshots exactly as a store without the file does.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from tests.conftest import write
from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.multipack import MAGIC, QuickIndex, refresh

from .conftest import STORE, cli

Edit = Callable[[bytearray, dict[str, int]], bytes]


def _store(root: Path) -> tuple[str, str]:
    """Two snapshots of a tree with versions of files (deltas), and the file written."""
    for i in range(40):
        write(root, f"d{i % 4}/f{i}.txt", "".join(f"line {j} of {i}\n" for j in range(60)))
    with Workspace(root) as ws:
        old = ws.snapshot().id
        for i in range(0, 40, 7):
            write(root, f"d{i % 4}/f{i}.txt", f"changed {i}\n" * 30)
        write(root, "d9/new.txt", "new\n")
        new = ws.snapshot().id
    store = DiskStore(str(root / STORE))
    index = store._load_index()
    assert refresh(store.files, store.paths.multi_pack_index, store._listed(), index, worth=0)
    store.close()
    return old, new


def _seen(root: Path, old: str, new: str) -> tuple[object, object, bool]:
    """What a new process shows of both snapshots and their diff; True if it used the file."""
    with Workspace(root) as ws:
        changes = [(c.op, c.path) for c in ws.diff(old, new)[0]]
        shown = msgspec.json.encode(ws.load(new))
        return changes, shown, isinstance(ws.store._quick.index, QuickIndex)


def _layout(data: bytes | bytearray) -> dict[str, int]:
    magic, length = struct.unpack_from("<8sI", data)
    assert magic == MAGIC
    count = msgspec.msgpack.decode(data[12 : 12 + length])[0]
    at = 12 + length
    where = {"header": 12, "header_end": at, "count": count, "fanout": at}
    at += 1024
    for name, width in (("keys", 32), ("pack", 4), ("stored", 4), ("raw", 4), ("offset", 8)):
        where[name], at = at, at + width * count
    where["base"] = at
    return where


def _swap_offsets(data: bytearray, at: dict[str, int]) -> bytes:
    first, second = at["offset"], at["offset"] + 8
    data[first : first + 8], data[second : second + 8] = (
        data[second : second + 8],
        data[first : first + 8],
    )
    return bytes(data)


def _pack_out_of_range(data: bytearray, at: dict[str, int]) -> bytes:
    data[at["pack"] : at["pack"] + 4] = struct.pack("<I", 7)
    return bytes(data)


def _own_base(data: bytearray, at: dict[str, int]) -> bytes:
    for row in range(at["count"]):
        data[at["pack"] + 4 * row + 3] |= 0x80  # every entry has a base: its own prefix
        key = data[at["keys"] + 32 * row : at["keys"] + 32 * row + 16]
        data[at["base"] + 16 * row : at["base"] + 16 * row + 16] = key
    return bytes(data)


def _fanout_out_of_order(data: bytearray, at: dict[str, int]) -> bytes:
    data[at["fanout"] : at["fanout"] + 4] = struct.pack("<I", at["count"])
    return bytes(data)


def _unsorted(data: bytearray, at: dict[str, int]) -> bytes:
    keys = data[at["keys"] : at["pack"]]
    data[at["keys"] : at["pack"]] = keys[::-1]  # every digest reversed, out of order
    return bytes(data)


def _names_a_pack_gone(data: bytearray, at: dict[str, int]) -> bytes:
    count, packs = msgspec.msgpack.decode(data[at["header"] : at["header_end"]])
    header = msgspec.msgpack.encode([count, [["0" * 16, True] for _ in packs]])
    return MAGIC + struct.pack("<I", len(header)) + header + bytes(data[at["header_end"] :])


def _count_too_big(data: bytearray, at: dict[str, int]) -> bytes:
    count, packs = msgspec.msgpack.decode(data[at["header"] : at["header_end"]])
    header = msgspec.msgpack.encode([count + 1, packs])
    return MAGIC + struct.pack("<I", len(header)) + header + bytes(data[at["header_end"] :])


def _offset_past_2_63(data: bytearray, at: dict[str, int]) -> bytes:
    for row in range(at["count"]):  # os.pread raised OverflowError, out of every command
        data[at["offset"] + 8 * row : at["offset"] + 8 * row + 8] = struct.pack("<Q", 2**63 + 5)
    return bytes(data)


def _huge_header(data: bytearray, at: dict[str, int]) -> bytes:
    return MAGIC + struct.pack("<I", 2**31) + bytes(data[12:])


EDITS: dict[str, Edit] = {
    "garbage": lambda data, at: os.urandom(len(data)),
    "empty": lambda data, at: b"",
    "cut short": lambda data, at: bytes(data[: len(data) // 2]),
    "a byte more": lambda data, at: bytes(data) + b"\0",
    "another magic": lambda data, at: b"wsmidx\x00\x02" + bytes(data[8:]),
    "huge header": _huge_header,
    "offsets past 2**63": _offset_past_2_63,
    "count too big": _count_too_big,
    "names a pack gone": _names_a_pack_gone,
    "fan-out out of order": _fanout_out_of_order,
    "digests out of order": _unsorted,
    "offsets swapped": _swap_offsets,
    "pack out of range": _pack_out_of_range,
    "its own base": _own_base,
    "zeroed records": lambda data, at: bytes(data[: at["pack"]]) + bytes(len(data) - at["pack"]),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_a_damaged_file_changes_nothing_a_command_shows(root: Path, case: str) -> None:
    old, new = _store(root)
    path = Path(DiskStore(str(root / STORE)).paths.multi_pack_index)
    clean = _seen(root, old, new)
    assert clean[2]  # the intact file answered
    data = bytearray(path.read_bytes())
    path.write_bytes(EDITS[case](data, _layout(data)))
    damaged = _seen(root, old, new)
    assert damaged[:2] == clean[:2]
    assert cli("--root", str(root), "verify")[0] == 0


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_something_else_where_the_file_goes_is_never_followed_or_waited_on(
    root: Path, tmp_path: Path, kind: str
) -> None:
    old, new = _store(root)
    path = Path(DiskStore(str(root / STORE)).paths.multi_pack_index)
    elsewhere = tmp_path / "elsewhere"
    os.replace(path, elsewhere)  # a valid file, outside the store
    if kind == "symlink":
        path.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    changes, shown, used = _seen(root, old, new)
    assert not used
    os.rename(elsewhere, tmp_path / "kept")
    with Workspace(root) as ws:
        ws.store._load_index()
        assert (changes, shown) == (
            [(c.op, c.path) for c in ws.diff(old, new)[0]],
            msgspec.json.encode(ws.load(new)),
        )
    kept = (tmp_path / "kept").read_bytes()
    store = DiskStore(str(root / STORE))  # a command that reads every index
    index = store._load_index()
    written = refresh(store.files, store.paths.multi_pack_index, store._listed(), index, worth=0)
    store.close()
    assert not written  # what it did not write is left where it is, not replaced
    assert {"symlink": path.is_symlink, "fifo": path.is_fifo, "directory": path.is_dir}[kind]()
    assert (tmp_path / "kept").read_bytes() == kept  # what the link named is untouched


def test_verify_still_names_a_damaged_pack_index_the_file_covers(root: Path) -> None:
    """The file may still find the objects of a damaged pack index: verify reads the indexes."""
    _store(root)
    packs = Path(DiskStore(str(root / STORE)).paths.packs)
    index = sorted(packs.glob("*.idx"))[0]
    index.write_bytes(b"\x93\xa6wspack\x02\xc1")  # does not decode
    code, out, err = cli("--root", str(root), "verify")
    assert code != 0
    assert "is damaged" in out + err


@pytest.mark.parametrize("count", [4_000_000, 1_000_000_000])
def test_a_bucket_of_millions_is_refused_not_read(root: Path, count: int) -> None:
    """A sparse file claiming millions of objects, all in one bucket: each look-up read
    128 MB (4 million), or raised a MemoryError out of every command (a billion)."""
    old, new = _store(root)
    path = Path(DiskStore(str(root / STORE)).paths.multi_pack_index)
    clean = _seen(root, old, new)
    data = bytearray(path.read_bytes())
    at = _layout(data)
    _, packs = msgspec.msgpack.decode(data[at["header"] : at["header_end"]])
    header = msgspec.msgpack.encode([count, packs])
    with path.open("wb") as f:
        f.write(
            MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<256I", *[count] * 256)
        )
        f.truncate(12 + len(header) + 1024 + 68 * count)  # sparse: a few KB on disk
    assert _seen(root, old, new)[:2] == clean[:2]


def test_gc_never_reads_through_the_file(root: Path) -> None:
    """With a pack index damaged, gc must stop (what the snapshots need is unknown): read
    through the file, it found every tree, went on, and its sweep dropped live objects."""
    _store(root)
    first = sorted(Path(root / STORE / "packs").glob("*.idx"), key=os.path.getmtime)[0]
    saved = first.read_bytes()
    first.write_bytes(b"\xc1")
    code, _, err = cli("--root", str(root), "gc")
    assert code != 0 and "nothing removed" in err
    first.write_bytes(saved)
    assert cli("--root", str(root), "verify")[0] == 0


def test_a_store_of_a_newer_format_is_refused_by_show_and_cat_too(root: Path) -> None:
    old, _ = _store(root)
    (root / STORE / "format").write_text("4\n")
    for command in (["show", old], ["cat", old, "d0/f0.txt"], ["diff", old, old]):
        code, _, err = cli("--root", str(root), *command)
        assert code == 2 and "install a newer worksnap" in err, command
