"""Compressed files: manifests and caches are stored as one zstd frame each (docs/format.md).

A frame is written at level 1 with its content size and a checksum of its content,
so damage is found on reading and a hostile frame is refused before it is
decompressed. Bytes that do not start with the zstd magic are returned as they
are: stores written before compression hold plain JSON and msgpack.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec
import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_UNPACKED = 1 << 30
"""The most a stored zstd frame may hold: a few bytes of hostile frame must not cost gigabytes."""


def pack(data: bytes) -> bytes:
    """Returns `data` as one zstd frame: level 1, its size and a checksum of it in the frame."""
    # A compressor per call (~10 us): one instance must not be used by two threads at once.
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def pack_pieces(pieces: Callable[[], Iterable[bytes]]) -> Iterator[bytes]:
    """`pack` of the bytes `pieces()` yields joined, without ever holding them joined.

    A frame declares its content size before its content: a first pass counts the
    bytes, a second compresses them as they come (`pieces` must yield the same bytes
    both times). A cold cache of 200k files is 34 MB of msgpack but 12 MB packed; the
    frame is yielded in pieces too, for `StoreDir.write` to write as they come (held
    whole, they were the peak of a cold snapshot's memory).

    Raises:
        ValueError: the second pass yielded another number of bytes than the first.
    """
    size = sum(len(piece) for piece in pieces())
    compressor = zstandard.ZstdCompressor(level=1, write_checksum=True).compressobj(size=size)
    try:
        for piece in pieces():
            if out := compressor.compress(piece):
                yield out
        yield compressor.flush()
    except zstandard.ZstdError as exc:  # a content size other than declared
        raise ValueError(f"pieces changed between passes ({exc})") from None


CHUNK = 8192
"""Items msgpack-encoded at once by `msgpack_array` and `msgpack_map`."""


def _header(count: int, small: int, short: bytes, long: bytes) -> bytes:
    if count < 16:
        return bytes([small | count])
    if count < 1 << 16:
        return short + count.to_bytes(2, "big")
    return long + count.to_bytes(4, "big")


def msgpack_array(
    encoder: msgspec.msgpack.Encoder, count: int, chunks: Iterable[list[Any]]
) -> Iterator[bytes]:
    """The msgpack array of the `count` items `chunks` yields, a chunk at a time.

    Exactly `encoder.encode` of the whole list: its header, then each chunk's items
    (a chunk's own array header is left out).
    """
    yield _header(count, 0x90, b"\xdc", b"\xdd")
    for chunk in chunks:
        yield encoder.encode(chunk)[len(_header(len(chunk), 0x90, b"\xdc", b"\xdd")) :]


def msgpack_map(encoder: msgspec.msgpack.Encoder, table: dict[Any, Any]) -> Iterator[bytes]:
    """The msgpack map of `table`, `CHUNK` items at a time: exactly `encoder.encode(table)`."""
    yield _header(len(table), 0x80, b"\xde", b"\xdf")
    items = iter(table.items())
    while chunk := dict(itertools.islice(items, CHUNK)):
        yield encoder.encode(chunk)[len(_header(len(chunk), 0x80, b"\xde", b"\xdf")) :]


def unpack(data: bytes, *, limit: int = MAX_UNPACKED) -> bytes:
    """Returns what a stored file holds: a zstd frame's content, any other bytes as they are.

    Args:
        data: the file's bytes.
        limit: the most the frame may declare (`MAX_UNPACKED`; smaller only in tests).

    Raises:
        ValueError: the frame is damaged, lacks its size, or holds more than `limit`.
    """
    if not data.startswith(ZSTD_MAGIC):
        return data
    try:
        # decompress() allocates the size the frame declares: check it first.
        size = zstandard.frame_content_size(data)
        if size < 0:
            raise ValueError("zstd frame without its content size (worksnap writes it)")
        if size > limit:
            raise ValueError(f"zstd frame declares {size} bytes, more than the {limit} allowed")
        return zstandard.ZstdDecompressor().decompress(data, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise ValueError(f"damaged zstd frame ({exc})") from None
