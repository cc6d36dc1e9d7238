"""BLAKE3 digests of file contents, read so that a file changing mid-read is never recorded."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from blake3 import blake3

from worksnap.errors import SnapshotError
from worksnap.manifest import Digest

SMALL = 1 << 20
"""Files below this size are read whole and hashed on one thread; larger ones are streamed."""

_CHUNK = 1 << 20
_RETRIES = 3


def hash_bytes(data: bytes) -> Digest:
    """Returns the digest of `data`."""
    threads = 1 if len(data) < SMALL else blake3.AUTO
    return Digest(blake3(data, max_threads=threads).hexdigest())


def same_file_state(a: os.stat_result, b: os.stat_result) -> bool:
    """True when two stats show the same unchanged file (same inode, size, times and mode)."""
    return (
        a.st_ino == b.st_ino
        and a.st_size == b.st_size
        and a.st_mtime_ns == b.st_mtime_ns
        and a.st_ctime_ns == b.st_ctime_ns
        and a.st_mode == b.st_mode
    )


def _chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, _CHUNK):
        yield chunk


def read_file(path: str, rel: str, *, keep: bool) -> tuple[Digest, bytes | None, os.stat_result]:
    """Reads and hashes one regular file, re-reading it if it changes while it is read.

    Args:
        path: the file's absolute path (never followed if it is a symlink).
        rel: its path relative to the root, for errors.
        keep: return the bytes too (for storing them); only honoured below `SMALL`.

    Returns:
        The digest, the bytes (or None), and the file's stat while it was read.

    Raises:
        SnapshotError: the file cannot be read, is no longer a regular file, or
            kept changing on every try.
    """
    for _ in range(_RETRIES):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise SnapshotError(rel, "is no longer a regular file")
            if before.st_size < SMALL:
                data = b"".join(_chunks(fd))
                digest = hash_bytes(data)
            else:
                data = None
                hasher = blake3(max_threads=blake3.AUTO)
                for chunk in _chunks(fd):
                    hasher.update(chunk)
                digest = Digest(hasher.hexdigest())
            after = os.fstat(fd)
        except OSError as exc:
            raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
        finally:
            os.close(fd)
        # A writer racing with us shows up as a changed size or times; the bytes we
        # hashed may then be a mix of two versions, so read again.
        if same_file_state(before, after) and (data is None or len(data) == after.st_size):
            return digest, data if keep else None, after
    raise SnapshotError(rel, f"kept changing while it was read ({_RETRIES} tries)")
