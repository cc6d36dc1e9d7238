"""Local packs, version 2: each object a zstd frame, alone or against a base (docs/format.md).

An object of a version 2 pack is one zstd frame of its bytes, compressed either alone
or with another packed object's bytes as a raw-content dictionary (zstd "patch-from":
the previous version of a file, or of a directory's tree, makes the new one cost what
changed). Its index entry says which: [digest, stored size, raw size, base], the base
named by the first 16 bytes of its digest (an index entry costs 58 bytes instead of 76:
the index was half of what a session step stored).

Reading is bounded and checked: the base chain is walked through the index first
(depth, cycle, missing or unpacked base: refused before anything is decompressed), a
frame must declare exactly the raw size its index entry gives, and the reader checks
BLAKE3 of every object it rebuilds, bases included. Version 1 packs (raw bytes back
to back, index [[hex digest, offset, size], ...]) are read as they are.
"""

from __future__ import annotations

import errno
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec
import zstandard
from blake3 import blake3

from worksnap.frames import CHUNK, msgpack_array
from worksnap.fsio import released_with, write_all
from worksnap.hash import SMALL
from worksnap.layout import STORE_FORMAT
from worksnap.storedir import MIB, StoreDir

PACK_TAG = "wspack"
PACK_VERSION = 2
"""The version of the packs this worksnap writes (1: raw objects, read as they are)."""

LEVEL = 1
"""The zstd level of pack frames. Measured on the reference tree (docs/performance.md,
"Compressed packs"): a cold snapshot stores 54.0 MB at level 1 in 2.9 s, 53.0 MB at
level 3 in 3.8 s (126.8 MB and 2.5 s uncompressed); no level shrinks a session's deltas,
which are mostly new digests."""

MAX_CHAIN = 50
"""The most bases an object may stand on: a read decompresses at most this many + 1 frames
(git's default depth; 16 stored a 200-step session's trees 30% larger)."""

MAX_FRAME = SMALL + 64 * 1024
"""The most a frame may take in a pack: zstd adds a few bytes to incompressible data."""

_V2_START = b"\x93\xa6" + PACK_TAG.encode()  # msgpack: an array of 3, then the tag
_v1_decoder = msgspec.msgpack.Decoder(list[tuple[str, int, int]])
_v2_decoder = msgspec.msgpack.Decoder(tuple[str, int, list[tuple[bytes, int, int, bytes | None]]])

BASE_PREFIX = 16
"""Bytes of a base's digest an index entry keeps: two digests sharing 16 bytes take 2**64
BLAKE3 evaluations to find, and a prefix naming two objects is refused, never guessed."""

Lookup = Callable[[str], "tuple[str, Slot] | None"]
"""Finds a packed object by its digest or by a base's prefix (hex): (its digest, its slot).
Raises ValueError when a prefix names more than one object."""
_encoder = msgspec.msgpack.Encoder()


class Slot(NamedTuple):
    """Where a packed object is and how it is stored.

    Attributes:
        pack: the pack's name.
        offset: where its stored bytes start in the pack.
        stored: how many bytes it takes there.
        raw: its size once rebuilt (its digest is BLAKE3 of those bytes).
        base: the object its frame was compressed against (its digest, or the hex of its
            first `BASE_PREFIX` bytes as an index names it), or None.
        framed: a zstd frame (version 2) or the raw bytes (version 1).
    """

    pack: str
    offset: int
    stored: int
    raw: int
    base: str | None
    framed: bool


NEWER_VERSION = "install a newer worksnap to read it"
"""How a pack index of a newer version is refused: not damage, nothing to move out."""


def format_problem(data: bytes) -> str | None:
    """What is wrong with the store's `format` file (None: this worksnap can read it)."""
    text = data.decode("ascii", "replace").strip()
    if text.isdigit() and int(text) <= STORE_FORMAT:
        return None
    return (
        f"names store format {text[:20]!r}, newer than this worksnap's {STORE_FORMAT}: "
        "install a newer worksnap"
    )


class PackRows:
    """A pack's index as read back, as columns (as `PackWriter` keeps the pack it writes).

    A `Slot` and its three ints cost about 190 bytes an object: a long-lived store kept
    17 MB of them for the reference tree's 44,531 objects. A row costs 16 bytes here (and
    the store's index one int: `ObjectIndex`); `slot` makes a row's Slot when asked.
    """

    __slots__ = ("bases", "framed", "name", "offsets", "raw", "stored")

    def __init__(self, name: str, *, framed: bool) -> None:
        self.name, self.framed = name, framed
        self.offsets = array("Q")  # a pack may pass 4 GiB
        self.stored = array("I")  # a frame takes at most MAX_FRAME
        self.raw = array("I")  # a packed object is under SMALL
        self.bases: dict[int, str] = {}  # by row: few objects have a base

    def slot(self, row: int) -> Slot:
        """Where the object of `row` is."""
        base = self.bases.get(row)
        return Slot(self.name, self.offsets[row], self.stored[row], self.raw[row], base,
                    self.framed)  # fmt: skip


def slots(digests: list[str], rows: PackRows) -> list[tuple[str, Slot]]:
    """Each object of a pack and its Slot, in the order of its index."""
    return [(digest, rows.slot(row)) for row, digest in enumerate(digests)]


def decode_rows(data: bytes, pack_name: str) -> tuple[list[str], PackRows]:
    """A pack index's digests, and its entries as rows in the same order; either version.

    Raises:
        ValueError: the index does not decode, is of a newer version, or holds an entry
            that cannot be right (a size past the limits, a digest that is not 32 bytes,
            an object that is its own base); the message says which.
    """
    if not data.startswith(_V2_START):
        try:
            old = _v1_decoder.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise ValueError(f"does not decode ({exc})") from None
        # Packs hold objects under 1 MiB only: a bigger size is damage, not an allocation.
        if not all(_is_hex_digest(d) and off >= 0 and 0 <= size < SMALL for d, off, size in old):
            raise ValueError("holds a record that is not [digest, offset, size]")
        rows = PackRows(pack_name, framed=False)
        rows.offsets.extend(off for _, off, _ in old)
        rows.stored.extend(size for _, _, size in old)
        rows.raw.extend(rows.stored)
        return [d for d, _, _ in old], rows
    try:
        tag, version, entries = _v2_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f"does not decode ({exc})") from None
    if tag != PACK_TAG or version != PACK_VERSION:
        raise ValueError(f"is of pack version {version}: {NEWER_VERSION}")
    rows = PackRows(pack_name, framed=True)
    digests: list[str] = []
    offset = 0  # frames are back to back from the start of the pack
    for digest, stored, raw, base in entries:
        if (
            len(digest) != 32
            or (base is not None and (len(base) != BASE_PREFIX or digest.startswith(base)))
            or not 0 < stored <= MAX_FRAME
            or not 0 <= raw < SMALL
        ):
            raise ValueError("holds an entry that is not [digest, stored, raw, base]")
        if base is not None:
            rows.bases[len(digests)] = base.hex()
        digests.append(digest.hex())
        rows.offsets.append(offset)
        rows.stored.append(stored)
        rows.raw.append(raw)
        offset += stored
    return digests, rows


def encode_index(
    digests: Sequence[str], stored: Sequence[int], raw: Sequence[int], bases: Mapping[int, str]
) -> list[bytes]:
    """A version 2 index of these objects (all framed), in the order they were written.

    Columns, as `PackWriter` keeps them: row i is `digests[i]`, `stored[i]`, `raw[i]` and
    `bases.get(i)` (a digest or the hex prefix an index names a base by). Rows are made
    and encoded `CHUNK` at a time, and returned in those pieces (for `StoreDir.write`): a
    cold pack of 200k objects would hold 30 MB of rows at once, and its 8 MB index twice
    if joined.
    """

    def base_prefix(row: int) -> bytes | None:
        base = bases.get(row)
        return None if base is None else bytes.fromhex(base)[:BASE_PREFIX]

    def rows() -> Iterator[list[Any]]:
        for start in range(0, len(digests), CHUNK):
            end = min(start + CHUNK, len(digests))
            yield [
                (bytes.fromhex(digests[i]), stored[i], raw[i], base_prefix(i) if bases else None)
                for i in range(start, end)
            ]

    head = _encoder.encode((PACK_TAG, PACK_VERSION, []))[:-1]  # less the empty list's header
    return [head, *msgpack_array(_encoder, len(digests), rows())]


def _is_hex_digest(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


class _Codecs(threading.local):
    """A compressor and a decompressor per thread (one must not serve two at once).

    One made per object cost about 10 us each, for 45k objects in a cold snapshot.
    """

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(
            level=LEVEL, write_checksum=False, write_content_size=True
        )
        self.decompressor = zstandard.ZstdDecompressor()


_codecs = _Codecs()


DELTA_WINDOW_LOG = 21
"""The largest window a delta frame asks for (2 MiB: a packed object and its base are each
under a MiB)."""


def _raw_dict(base: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def compress(data: bytes, base: bytes | None) -> tuple[bytes, bool]:
    """`data` as one frame; against `base` when that is smaller. Returns (frame, used base)."""
    alone = _codecs.compressor.compress(data)
    if base is None or not base:
        return alone, False
    # Level 1's match tables (2**14 entries, a 512 KiB window) see little of a base over
    # about 100 KB: a 184 KB file with one line appended took 10.7 KB against its base
    # instead of 51 bytes. Sized to the base and the object instead (the same as level 1
    # below 16 KB; a frame any zstd decoder reads within its default window limit).
    bits = (len(base) + len(data)).bit_length()
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL,
        window_log=min(max(bits, 19), DELTA_WINDOW_LOG),
        hash_log=min(max(bits, 14), 20),
        write_checksum=0,
        write_content_size=1,
        write_dict_id=0,
    )
    delta = zstandard.ZstdCompressor(compression_params=params, dict_data=_raw_dict(base)).compress(
        data
    )
    return (delta, True) if len(delta) < len(alone) else (alone, False)


def decompress(frame: bytes, raw: int, base: bytes | None) -> bytes:
    """The bytes of one stored frame, which must declare exactly `raw` bytes.

    Raises:
        ValueError: the frame is damaged, declares another size, or has bytes after it.
    """
    try:
        declared = zstandard.frame_content_size(frame)
        if declared != raw:
            # Checked before decompress(), which allocates what the frame declares.
            said = "no size" if declared < 0 else f"{declared} bytes"
            raise ValueError(f"its frame declares {said}, its index entry {raw}")
        if base is None:
            out = _codecs.decompressor.decompress(frame, allow_extra_data=False)
        else:
            decompressor = zstandard.ZstdDecompressor(dict_data=_raw_dict(base))
            out = decompressor.decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise ValueError(f"damaged frame ({exc})") from None
    if len(out) != raw:
        raise ValueError(f"its frame holds {len(out)} bytes, its index entry says {raw}")
    return out


def chain(digest: str, lookup: Lookup) -> list[tuple[str, Slot]]:
    """The objects to rebuild `digest` from, deepest base first, `digest` last.

    Checked through the index alone, before any frame is read.

    Raises:
        ValueError: the object is not packed, or its chain has a missing base, a base
            that is not packed, a cycle, more than `MAX_CHAIN` bases, or a base prefix
            that names more than one object.
    """
    out: list[tuple[str, Slot]] = []
    seen: set[str] = set()
    key: str | None = digest
    while key is not None:
        found = lookup(key)
        if found is None:
            if key == digest:
                raise ValueError("missing from the store")
            raise ValueError(f"its base {key} is not a packed object of the store")
        current, slot = found
        if current in seen:
            raise ValueError(f"its base chain has a cycle (through {current})")
        if len(out) > MAX_CHAIN:
            raise ValueError(f"its base chain is longer than {MAX_CHAIN}")
        seen.add(current)
        out.append((current, slot))
        key = slot.base
    out.reverse()
    return out


def rebuild(
    digest: str,
    lookup: Lookup,
    stored: Callable[[Slot], bytes],
    recent: Recent,
    links: list[tuple[str, Slot]] | None = None,
) -> bytes:
    """A version 2 object's bytes, from its chain's frames (`stored` reads one).

    Every base is checked against its digest as it is rebuilt (and remembered in
    `recent`); the caller checks the object itself. `links`: `chain(digest)`, when the
    caller has it already.

    Raises:
        ValueError: the chain or a frame is damaged (the message names the base).
    """
    links = chain(digest, lookup) if links is None else links
    # From the nearest base already at hand (usually the previous version); the
    # object itself always from its frame.
    start, data = 0, None
    for i in range(len(links) - 2, -1, -1):
        if (data := recent.get(links[i][0])) is not None:
            start = i + 1
            break
    for name, link in links[start:]:
        what = "damaged: " if name == digest else f"damaged: its base {name}: "
        try:
            frame = stored(link)
            base = data if link.base is not None else None
            data = decompress(frame, link.raw, base) if link.framed else frame
        except ValueError as exc:
            raise ValueError(f"{what}{exc}") from None
        if name != digest:
            if blake3(data).hexdigest() != name:
                raise ValueError(f"{what}its bytes do not match its digest")
            recent.put(name, data)
    if data is None:  # an empty chain: `chain` never returns one
        raise ValueError("missing from the store")
    return data


def base_bytes(
    links: list[tuple[str, Slot]], lookup: Lookup, stored: Callable[[Slot], bytes], recent: Recent
) -> bytes | None:
    """The checked bytes of the last of `links` (a `sound_chain`); None: damaged, or moved.

    As reading it: its own frame always read (a new object on a damaged base would be
    unreadable too); the chain is not walked again (40 links cost more than the rest).
    """
    try:
        data = rebuild(links[-1][0], lookup, stored, recent, links)
    except (ValueError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # a full disk (writing out the pack to read from it), said as such
        return None  # damaged, unreadable, or moved by a merge since: stored alone
    return data if blake3(data).hexdigest() == links[-1][0] else None


def sound_chain(digest: str, lookup: Lookup) -> list[tuple[str, Slot]]:
    """`chain(digest)`, or [] when `digest` is not packed or its chain is damaged."""
    try:
        return chain(digest, lookup)
    except ValueError:
        return []


def moved(stored: bytes, slot: Slot, alone: bytes | None) -> tuple[bytes, int, str | None]:
    """What a sweep writes of a live object: (frame, raw size, base).

    Args:
        stored: its bytes in the old pack.
        slot: its old index entry.
        alone: its bytes when its base dies (it is stored again without one), else None.
    """
    if alone is not None:
        return compress(alone, None)[0], len(alone), None
    if not slot.framed:  # a version 1 object: compressed as it moves
        return compress(stored, None)[0], len(stored), None
    return stored, slot.raw, slot.base  # its frame as it is: its base is live too


class Recent:
    """The bytes of objects read or written lately, up to `limit` bytes in all.

    A restore reads the versions of a file one after the other: each stands on the
    one before, which is then still here (no chain decompressed again).
    """

    def __init__(self, limit: int = 16 * MIB) -> None:
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._limit = limit

    def get(self, digest: str) -> bytes | None:
        """The bytes of `digest` if remembered (checked when they were put)."""
        data = self._items.get(digest)
        if data is not None:
            self._items.move_to_end(digest)
        return data

    def put(self, digest: str, data: bytes) -> None:
        """Remembers bytes already checked against `digest`."""
        if digest in self._items or len(data) > self._limit // 4:
            return
        self._items[digest] = data
        self._size += len(data)
        while self._size > self._limit:
            _, dropped = self._items.popitem(last=False)
            self._size -= len(dropped)

    def clear(self) -> None:
        """Forgets everything."""
        self._items.clear()
        self._size = 0


def geometric(sizes: list[tuple[int, str]]) -> set[str]:
    """The packs to merge, of (size, name): smallest first, each while <= twice all before.

    As `git repack --geometric=2`; none when fewer than two: taking every small pack
    rewrote the whole history each time (45% of a long session's time).
    """
    chosen, total = set[str](), 0
    for size, name in sorted(sizes):
        if chosen and size > 2 * total:
            break
        chosen.add(name)
        total += size
    return chosen if len(chosen) > 1 else set()


class OpenPacks:
    """Descriptors of the packs read lately, at most `limit` of them open at once.

    A session stores a pack per step: a restore of a thousand steps' files must not run
    out of descriptors (the usual limit is 1024), nor keep swept packs' space in use.
    """

    def __init__(self, limit: int = 64) -> None:
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._limit = limit
        released_with(self, _close_all, self._fds)  # what is open when it is dropped

    def get(self, name: str, open_pack: Callable[[], int]) -> int:
        """A descriptor on pack `name` (`open_pack` opens it when it is not open)."""
        fd = self._fds.get(name)
        if fd is not None:
            self._fds.move_to_end(name)
            return fd
        if len(self._fds) >= self._limit:
            os.close(self._fds.popitem(last=False)[1])
        fd = self._fds[name] = open_pack()
        return fd

    def close(self) -> None:
        """Closes every descriptor (more may be opened after)."""
        _close_all(self._fds)


def _close_all(fds: OrderedDict[str, int]) -> None:
    while fds:
        os.close(fds.popitem()[1])


class PackWriter(PackRows):
    """Appends objects to one new pack file owned by this process.

    Small objects are gathered in memory and written 1 MiB at a time: one
    `write` per object cost a third of a cold snapshot. The pack stays locked
    (`StoreDir.create`) until its index is published, so a sweep by another
    process never takes it for the leftover of a writer that died.

    Its objects are rows (`PackRows`), not a `Slot` each (45 MB for a cold snapshot of
    200k files, with the lists); the store's index names the writer itself for each
    (the digest is the one it holds), and `slot_of` finds the row when asked, which is
    rare for a pack being written.
    """

    _BUFFER = 1 << 20

    def __init__(self, store: StoreDir) -> None:
        super().__init__(store.new_name(), framed=True)
        self.path = store.paths.pack(self.name)
        self.fd = store.create(self.path)
        self.offset = 0
        self.pending = bytearray()
        self.digests: list[str] = []
        self._rows: dict[str, int] = {}  # digest -> row, made on the first `slot_of`
        self._rows_known = 0  # how many rows `_rows` holds

    def append(self, digest: str, frame: bytes, raw: int, base: str | None) -> int:
        """Appends one object's frame; returns its row (see `slot`)."""
        row = len(self.digests)
        self.pending += frame
        self.digests.append(digest)
        self.offsets.append(self.offset)
        self.stored.append(len(frame))
        self.raw.append(raw)
        if base is not None:
            self.bases[row] = base
        self.offset += len(frame)
        if len(self.pending) >= self._BUFFER:
            self.drain()
        return row

    def slot_of(self, digest: str) -> Slot:
        """Where the object `digest` is (the last row of it).

        Raises:
            KeyError: this writer did not append it.
        """
        known, count = self._rows_known, len(self.digests)
        if known < count:
            # The rows appended since the last lookup. Safe for two readers at once
            # (the daemon's read-only commands): both add the same rows, counted after.
            self._rows.update(zip(self.digests[known:count], range(known, count), strict=True))
            self._rows_known = count
        return self.slot(self._rows[digest])

    def drain(self) -> None:
        """Writes the gathered objects to the pack file."""
        write_all(self.fd, self.pending)
        self.pending.clear()

    def index(self) -> list[bytes]:
        """The pack's index in pieces, to be published once the pack is durable."""
        return encode_index(self.digests, self.stored, self.raw, self.bases)
