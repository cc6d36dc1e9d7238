"""Compressed files: manifests and caches are stored as one zstd frame each (docs/format.md).

A frame is written at level 1 with its content size and a checksum of its content,
so damage is found on reading and a hostile frame is refused before it is
decompressed. Bytes that do not start with the zstd magic are returned as they
are: stores written before compression hold plain JSON and msgpack.
"""

from __future__ import annotations

import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_UNPACKED = 1 << 30
"""The most a stored zstd frame may hold: a few bytes of hostile frame must not cost gigabytes."""


def pack(data: bytes) -> bytes:
    """Returns `data` as one zstd frame: level 1, its size and a checksum of it in the frame."""
    # A compressor per call (~10 us): one instance must not be used by two threads at once.
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


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
