"""The multi-pack index: every packed object's place in one file, sorted by digest.

A new process that reads a few objects (a `diff` of two snapshots, `show`) first read
every pack's index whole: at 200k objects, 8.8 MB of msgpack and 150 ms, for the 76
objects a diff of 10 files reads. `cache/multi-pack-index` (git's name for the same idea)
holds the places of the store's joined index (`objectindex.join_indexes`: one copy of
each twin), sorted by digest under a fan-out table, so that a look-up reads one bucket
where it lies. docs/format.md gives its bytes.

It is a cache derived from the pack indexes, never the only answer. `refresh` writes it
from an index read whole, when the store is big enough to gain (`WORTH`) and the file
there would not be used. `QuickIndex` searches it; `Quick` is how a store uses it: only
for commands that read a few objects and write none (`diff`, `show`, `cat`), before the
store reads its pack indexes, and only while it is sure: an object it does not hold, a
pack it names that is gone, an entry out of range, a twin in a pack it does not cover,
or bytes that do not match their digest send the store to the pack indexes (the full
path), once and for good.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import chain
from operator import itemgetter

import msgspec

from worksnap.errors import StoreError
from worksnap.fsio import released_with
from worksnap.hash import SMALL, hash_bytes
from worksnap.objectindex import ObjectIndex, join_indexes
from worksnap.packcodec import BASE_PREFIX, MAX_FRAME, Recent, Slot, decode_rows, rebuild
from worksnap.storedir import MIB, StoreDir

MAGIC = b"wsmidx\x00\x01"
WORTH = 100_000
"""The fewest objects a store has for the file to be written (68 bytes an object): below,
reading every pack index costs a new process under 70 ms, and the reference tree's
200-step session (47k objects) stays within issue 13's bound on its growth."""
UNCOVERED = 4_096
"""The most objects the file may leave to the packs it does not cover: a store reads
those packs' indexes whole (and checks each object against the file for a twin). Past
this, the next process that reads the indexes whole writes the file again (200 ms at
200k objects): once every 4,096 new objects."""

_HEAD = struct.Struct("<8sI")
_FANOUT = struct.Struct("<256I")
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_HAS_BASE = 1 << 31
_MAX_COUNT = 8_000_000  # a 544 MB file; a store of 200k files holds 211k objects
_MAX_BUCKET = 2 * MIB  # the digests of one first byte: 31k of 8 million, 64k here
_MAX_OFFSET = 1 << 48  # where a frame may start in a pack (256 TiB)
_WIDTH = 32 + 4 + 4 + 4 + 8 + BASE_PREFIX  # digest, pack, stored, raw, offset, base
_MAX_HEADER = MIB
_header = msgspec.msgpack.Decoder(tuple[int, list[tuple[str, bool]]])
_encoder = msgspec.msgpack.Encoder()


class StaleIndex(Exception):
    """The multi-pack index cannot answer: the pack indexes must (the message says why)."""


class NotHeld(StaleIndex):
    """No packed object has this digest, as far as the multi-pack index knows."""


def encode(index: ObjectIndex) -> list[bytes]:
    """The multi-pack index of `index` (read from pack indexes alone), in pieces.

    Built a column at a time at C speed (200k objects: 200 ms, most of it the sort).
    """
    packs = index.pack_rows()
    starts, total = [], 0
    for rows in packs:
        starts.append(total)
        total += len(rows.offsets)
    places = index.places()  # digest -> pack << 32 | row
    if len(places) == total:  # no twin, none pruned: the dict holds every row, in order
        in_rows = list(places)
        ids = sorted(range(total), key=in_rows.__getitem__)
        digests = [in_rows[i] for i in ids]
    else:
        digests = sorted(places)
        rows_in_order = chain.from_iterable(
            range(n << 32, (n << 32) + len(r.offsets)) for n, r in enumerate(packs))  # fmt: skip
        at_row = dict(zip(rows_in_order, range(total), strict=True))  # place -> row of all
        ids = list(map(at_row.__getitem__, map(places.__getitem__, digests)))

    def column(code: str, parts: Iterable[array[int]]) -> array[int]:
        joined = array(code)
        for part in parts:
            joined.extend(part)
        return array(code, itemgetter(*ids)(joined) if len(ids) > 1 else [joined[i] for i in ids])

    owner = column("I", (array("I", [n]) * len(r.offsets) for n, r in enumerate(packs)))
    bases = bytearray(BASE_PREFIX * len(digests))
    based = {starts[n] + row: base for n, r in enumerate(packs) for row, base in r.bases.items()}
    if based:
        where = dict(zip(ids, range(len(ids)), strict=True))
        for row, base in based.items():
            if (at := where.get(row)) is not None:  # (else a twin's other copy is used)
                owner[at] |= _HAS_BASE
                bases[BASE_PREFIX * at : BASE_PREFIX * (at + 1)] = bytes.fromhex(base)
    keys = bytes.fromhex("".join(digests))
    firsts = keys[::32]
    fanout = _FANOUT.pack(*(bisect_right(firsts, b) for b in range(256)))
    header = _encoder.encode((len(digests), [(r.name, r.framed) for r in packs]))
    columns = [column(code, (getattr(r, name) for r in packs))
               for code, name in (("I", "stored"), ("I", "raw"), ("Q", "offsets"))]  # fmt: skip
    return [_HEAD.pack(MAGIC, len(header)), header, fanout, keys,
            *map(_little, [owner, *columns]), bytes(bases)]  # fmt: skip


def _little(column: array[int]) -> bytes:
    """A column's bytes, little-endian (as the file holds them) on any machine."""
    if sys.byteorder == "big":
        column.byteswap()
    return column.tobytes()


def refresh(
    files: StoreDir, path: str, listed: list[str], index: ObjectIndex, *, worth: int = WORTH
) -> bool:
    """Writes the multi-pack index of `index` if it is worth it and the one there is refused.

    `index`: just read whole from the pack indexes `listed` (none damaged), nothing added.
    The file there is kept while a `QuickIndex` would use it (it covers all but a few
    objects, with no twin among them, its fan-out intact). Nothing is encoded where the
    file cannot go (a folder in its place, a store another user owns, a disk too full),
    and a failure to write is no failure of the command that read the index: the next
    one tries again. True when it was written.
    """
    if len(index) < worth:
        return False
    try:
        QuickIndex(files, path, listed).close()
        return False  # it answers
    except (OSError, StoreError, StaleIndex):
        pass
    try:
        space = os.statvfs(files.paths.cache)
        if (
            (st := files.lstat(path)) is not None and not stat.S_ISREG(st.st_mode)
        ) or space.f_bavail * space.f_frsize < 4 * _WIDTH * len(index) + 16 * MIB:
            return False
        if not os.access(files.paths.cache, os.W_OK):
            return False
        files.write(path, encode(index), durable=False)
    except (OSError, StoreError):
        return False
    return True


def _read_head(files: StoreDir, path: str) -> tuple[int, list[str], list[bool], int]:
    """(fd, pack names, their framing, object count) of the file at `path`, opened."""
    fd = files.open_file(path)
    try:
        magic, length = _HEAD.unpack(os.pread(fd, _HEAD.size, 0).ljust(_HEAD.size, b"\0"))
        if magic != MAGIC or length > _MAX_HEADER:
            raise StaleIndex("not a multi-pack index this worksnap reads")
        try:
            count, packs = _header.decode(os.pread(fd, length, _HEAD.size))
        except msgspec.DecodeError as exc:
            raise StaleIndex(f"its header does not decode ({exc})") from None
        size = os.fstat(fd).st_size
        if not 0 <= count <= _MAX_COUNT:
            raise StaleIndex(f"it claims {count} objects")
        if size != _HEAD.size + length + _FANOUT.size + count * _WIDTH:
            raise StaleIndex("its size does not match its header")
    except BaseException:
        os.close(fd)
        raise
    return fd, [name for name, _ in packs], [framed for _, framed in packs], count


class QuickIndex:
    """Finds packed objects through the multi-pack index, and the few packs it does not cover.

    Called as a `packcodec.Lookup`: by digest or by a base's prefix (hex). Raises
    `StaleIndex` whenever it cannot be sure (a miss included: the pack indexes decide);
    a hit is only a place, whose bytes the reader checks against the digest.
    """

    def __init__(self, files: StoreDir, path: str, listed: list[str]) -> None:
        self._fd, self._packs, self._framed, count = _read_head(files, path)
        self._release = released_with(self, os.close, self._fd)  # also if never closed
        self._closed = False
        try:
            self._open(files, listed, count)
        except BaseException:
            self.close()
            raise

    def _open(self, files: StoreDir, listed: list[str], count: int) -> None:
        if not set(self._packs) <= set(listed) or len(set(self._packs)) != len(self._packs):
            raise StaleIndex("it names a pack that is gone")
        at = os.fstat(self._fd).st_size - count * _WIDTH - _FANOUT.size
        if len(fanout := os.pread(self._fd, _FANOUT.size, at)) != _FANOUT.size:
            raise StaleIndex("it was cut short")
        self._fanout = _FANOUT.unpack(fanout)
        if list(self._fanout) != sorted(self._fanout) or self._fanout[-1] != count:
            raise StaleIndex("its fan-out table is out of order")
        at += _FANOUT.size
        self._columns = {}  # where each column starts
        for name, width in (("keys", 32), ("pack", 4), ("stored", 4), ("raw", 4), ("offset", 8)):
            self._columns[name], at = at, at + width * count
        self._columns["base"] = at
        self._buckets: dict[int, bytes] = {}
        covered = set(self._packs)
        read = []
        for name in (name for name in listed if name not in covered):
            data = files.read(files.paths.pack_index(name), limit=80 * UNCOVERED)
            try:
                read.append(decode_rows(data, name))
            except ValueError as exc:
                raise StaleIndex(f"the index of pack {name} {exc}") from None
        if sum(len(digests) for digests, _ in read) > UNCOVERED:
            raise StaleIndex("it leaves too many objects uncovered")
        self._rest, self._find = join_indexes(read)
        if any(self._holding(bytes.fromhex(d)) for d in self._rest):
            raise StaleIndex("a pack it does not cover holds a twin of one it does")

    def close(self) -> None:
        """Closes the file (idempotent)."""
        self._closed = True
        self._release()

    def _holding(self, key: bytes) -> dict[str, int]:
        """The digests (hex) that begin with `key` (a digest, or a prefix), by position."""
        first = key[0]
        start = self._fanout[first - 1] if first else 0
        if (keys := self._buckets.get(first)) is None:
            size = 32 * (self._fanout[first] - start)
            if size > _MAX_BUCKET:
                raise StaleIndex(f"one bucket holds {size // 32} digests")
            keys = self._buckets[first] = self._read("keys", start, size, 32)
        low, high = 0, len(keys) // 32
        while low < high:  # the first digest >= key
            mid = (low + high) // 2
            if keys[32 * mid : 32 * mid + 32] < key:
                low = mid + 1
            else:
                high = mid
        found = {}
        while (digest := keys[32 * low : 32 * low + 32]).startswith(key):
            found[digest.hex()] = start + low
            low += 1
        return found

    def _read(self, column: str, position: int, size: int, width: int) -> bytes:
        if self._closed:
            raise StaleIndex("closed")
        data = os.pread(self._fd, size, self._columns[column] + width * position)
        if len(data) != size:
            raise StaleIndex("it was cut short")
        return data

    def _slot(self, digest: str, position: int) -> Slot:
        owner, stored, raw = (_U32.unpack(self._read(c, position, 4, 4))[0]
                              for c in ("pack", "stored", "raw"))  # fmt: skip
        (offset,) = _U64.unpack(self._read("offset", position, 8, 8))
        pack, base = owner & ~_HAS_BASE, None
        if owner & _HAS_BASE:
            base = self._read("base", position, BASE_PREFIX, BASE_PREFIX).hex()
            if digest.startswith(base):
                raise StaleIndex("an entry is its own base")
        framed = pack < len(self._packs) and self._framed[pack]
        if (
            pack >= len(self._packs)
            or offset >= _MAX_OFFSET
            or not 0 <= raw < SMALL
            or not (0 < stored <= MAX_FRAME if framed else stored == raw and base is None)
        ):
            raise StaleIndex("an entry is out of range")
        return Slot(self._packs[pack], offset, stored, raw, base, framed)

    def __call__(self, key: str) -> tuple[str, Slot] | None:
        """(digest, slot) of the object `key` names (a digest or a base's prefix, hex).

        Raises:
            ValueError: `key` is a prefix that names more than one packed object.
            StaleIndex: the file does not hold it, or cannot be trusted for it.
        """
        try:
            raw_key = bytes.fromhex(key)
        except ValueError:
            raise StaleIndex(f"{key!r} is not hex") from None
        if len(raw_key) not in (32, BASE_PREFIX):
            raise StaleIndex(f"{key!r} is not a digest or a base's prefix")
        rest = self._find(key)  # ValueError: two uncovered objects share the prefix
        found = self._holding(raw_key)
        if len({*found, *([rest[0]] if rest else [])}) > 1:
            raise ValueError(f"its base prefix {key} names more than one object")
        if rest is not None:
            return rest
        if not found:
            raise (NotHeld if len(raw_key) == 32 else StaleIndex)(f"it does not hold {key}")
        digest, position = found.popitem()
        return digest, self._slot(digest, position)

    def read(self, digest: str, stored: Callable[[Slot], bytes], recent: Recent) -> bytes:
        """A packed object's bytes, checked against `digest` (and kept in `recent`).

        Raises:
            NotHeld: no packed object has this digest, as far as the file knows.
            StaleIndex: anything else went wrong: the pack indexes must answer.
        """
        found = self(digest)
        if found is None:
            raise NotHeld(digest)
        try:
            data = rebuild(digest, self, stored, recent) if found[1].framed else stored(found[1])
        except (ValueError, OSError, OverflowError, MemoryError) as exc:
            raise StaleIndex(f"object {digest}: {exc}") from None
        if hash_bytes(data) != digest:
            raise StaleIndex(f"object {digest}: its bytes do not match")
        recent.put(digest, data)
        return data


class Quick:
    """The multi-pack index as a store uses it: only when asked, and dropped for good.

    Off until `allow` (a command that reads a few objects and writes none: `diff`,
    `show`, `cat`); then the store reads objects through it (`read`) until it cannot
    answer, the store reads its pack indexes, or `limit` objects were read (a look-up
    here costs 12 us, one in the index 1.5 us: past that, reading the indexes is
    cheaper); `drop` then ends its use for good.
    """

    def __init__(self, files: StoreDir, listed: Callable[[], list[str]]) -> None:
        self._files, self._listed = files, listed
        self.index: QuickIndex | None = None
        self.usable = False
        self.dropped = False
        self.limit = 2_000
        """Objects read through it before the pack indexes are read instead."""

    def allow(self) -> None:
        """Lets reads go through the file, unless it was dropped."""
        self.usable = not self.dropped

    def read(self, digest: str, stored: Callable[[Slot], bytes], recent: Recent) -> bytes | None:
        """A packed object's checked bytes (None: not packed, but a loose object).

        Raises:
            StaleIndex: the pack indexes must answer, from now on.
        """
        try:
            if not self.usable or self.limit <= 0:
                raise StaleIndex("not allowed, or dropped")
            self.limit -= 1
            if self.index is None:
                self.index = QuickIndex(self._files, self._files.paths.multi_pack_index,
                                        self._listed())  # fmt: skip
            return self.index.read(digest, stored, recent)
        except NotHeld:
            if self._files.lstat(self._files.paths.loose(digest)) is not None:
                return None
            self.drop()
            raise
        except (StaleIndex, OSError, StoreError) as exc:
            self.drop()
            raise StaleIndex(str(exc)) from None

    def drop(self) -> None:
        """Closes the file; the pack indexes answer from now on."""
        if self.index is not None:
            self.index.close()
        self.index, self.usable, self.dropped = None, False, True
