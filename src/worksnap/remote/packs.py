"""A pack of objects being built for a push, and an index less some of its objects.

Below `repository.py` (which writes what `PackBuilder` builds); knows only the formats.
"""

from __future__ import annotations

import secrets
from collections.abc import Container

import msgspec
import zstandard
from blake3 import blake3

from worksnap.remote import formats
from worksnap.remote.formats import IndexEntry, PackIndex


def without(index: PackIndex, digests: Container[str]) -> PackIndex:
    """`index` less the objects of `digests` (its pack's size and offsets unchanged)."""
    kept = [e for e in index.entries if e.digest.hex() not in digests]
    return msgspec.structs.replace(index, entries=kept)


class PackBuilder:
    """Gathers compressed objects into one pack (objects are never split)."""

    def __init__(self, *, trees: bool) -> None:
        self.trees = trees
        self._parts: list[bytes] = [secrets.token_bytes(formats.SALT_BYTES)]
        self._entries: list[IndexEntry] = []
        self.size = formats.SALT_BYTES
        self._compressor = zstandard.ZstdCompressor(level=1, write_checksum=True)

    def __len__(self) -> int:
        return len(self._entries)

    def absorb(self, other: PackBuilder) -> None:
        """Appends the objects of `other` (which is then not to be used)."""
        for frame, entry in zip(other._parts[1:], other._entries, strict=True):
            self._parts.append(frame)
            self._entries.append(IndexEntry(entry.digest, self.size, entry.length, entry.raw))
            self.size += entry.length

    def add(self, digest: str, data: bytes) -> None:
        """Appends an object (its bytes as read, checked by the reader against `digest`)."""
        frame = self._compressor.compress(data)
        self._parts.append(frame)
        self._entries.append(IndexEntry(bytes.fromhex(digest), self.size, len(frame), len(data)))
        self.size += len(frame)

    def finish(self) -> tuple[bytes, PackIndex]:
        """The pack's bytes and its index."""
        data = b"".join(self._parts)
        index = PackIndex(
            version=formats.VERSION,
            pack=blake3(data).hexdigest(),
            size=len(data),
            trees=self.trees,
            entries=self._entries,
        )
        return data, index
