"""BLAKE3 digests of file contents, read so that a file changing mid-read is never recorded."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator

from blake3 import blake3

from worksnap.errors import SnapshotError, Vanished, unreadable
from worksnap.fsio import file_state
from worksnap.paths import Digest

SMALL = 1 << 20
"""Files below this size are read whole and hashed on one thread; larger ones are streamed."""

_CHUNK = 1 << 20
_RETRIES = 4
# A file changed within this long before it is read may change again without its
# size or times moving (timestamps tick coarsely): it is read twice and must agree.
# On a file system whose times tick in seconds, the caller passes a second more.
RECENT_NS = 100_000_000


class Prefetch:
    """Asks the kernel to start reading files about to be hashed (`POSIX_FADV_WILLNEED`).

    Without it a cold snapshot waits for the disk one file at a time; with the reads
    queued ahead by a helper thread, the disk works while Python hashes (the reference
    tree with an empty page cache: 4.3 to 4.8 s of reading and hashing, 1.0 to 1.2 s
    with the hints). Only a hint: no byte comes to worksnap this way, and every file is
    still read and checked by `read_file`. A context manager: leaving it stops the helper.
    """

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, paths: Iterable[bytes]) -> None:
        """Starts hinting `paths` (absolute), in order, unless already started."""
        if self._thread is None and hasattr(os, "posix_fadvise"):
            self._thread = threading.Thread(target=self._run, args=(paths,), daemon=True)
            self._thread.start()

    def _run(self, paths: Iterable[bytes]) -> None:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        for path in paths:
            if self._stop.is_set():
                return
            try:
                fd = os.open(path, flags)
            except OSError:
                continue  # gone or changed: the hashing itself will say
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def hash_bytes(data: bytes) -> Digest:
    """Returns the digest of `data`."""
    threads = 1 if len(data) < SMALL else blake3.AUTO
    return Digest(blake3(data, max_threads=threads).hexdigest())


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    while chunk := os.read(fd, size):
        yield chunk


def read_file(
    path: str | bytes,
    rel: str,
    *,
    keep: bool,
    dir_fd: int | None = None,
    chunk_size: int = _CHUNK,
    recent_ns: int = RECENT_NS,
) -> tuple[Digest, bytes | None, os.stat_result]:
    """Reads and hashes one regular file, re-reading it if it changes while it is read.

    Args:
        path: the file (a name relative to `dir_fd` when given); never followed
            if it is a symlink.
        dir_fd: a descriptor on the file's directory (see `fsio.DirTree`), so that
            a parent swapped for a symlink cannot lead the read outside the root.
        rel: its path relative to the root, for errors.
        keep: return the bytes too (for storing them); only honoured below `SMALL`.
        chunk_size: bytes per `read` (1 MiB; tests make it small to write between reads).
        recent_ns: a file whose times are this recent is read twice, and the two reads
            must agree (the capture's racy margin: a tick of the file system more).

    Returns:
        The digest, the bytes (or None), and the file's stat while it was read.

    Raises:
        SnapshotError: the file cannot be read, is no longer a regular file, or
            kept changing on every try; `Vanished` when it is gone since it was listed.
    """
    previous: Digest | None = None
    for _ in range(_RETRIES):
        try:
            # O_NONBLOCK: a FIFO swapped in since it was listed is refused, not waited on.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(path, flags, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # (O_NOFOLLOW) swapped for a symlink since listed
                raise SnapshotError(
                    rel, "is no longer a regular file (a symlink now)", changing=True
                ) from None
            if exc.errno == errno.ENOENT:  # deleted (or renamed away) since it was listed
                raise Vanished(rel) from None
            raise unreadable(rel, exc) from None
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise SnapshotError(rel, "is no longer a regular file", changing=True)
            if before.st_size < SMALL:
                data = b"".join(_chunks(fd, chunk_size))
                digest = hash_bytes(data)
            else:
                data = None
                hasher = blake3(max_threads=blake3.AUTO)
                for chunk in _chunks(fd, chunk_size):
                    hasher.update(chunk)
                digest = Digest(hasher.hexdigest())
            after = os.fstat(fd)
        except OSError as exc:
            raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
        finally:
            os.close(fd)
        # A writer racing with us shows up as a changed size or times; the bytes we
        # hashed may then be a mix of two versions, so read again.
        if file_state(before) != file_state(after) or (
            data is not None and len(data) != after.st_size
        ):
            previous = None
            continue
        # Within one timestamp tick a write need not move the times: a file changed
        # that recently is trusted only when two reads in a row agree.
        recent = time.time_ns() - max(after.st_mtime_ns, after.st_ctime_ns) < recent_ns
        if not recent or digest == previous:
            return digest, data if keep else None, after
        previous = digest
    raise SnapshotError(rel, f"kept changing while it was read ({_RETRIES} tries)")
