"""A local copy of a remote repository's pack indexes (immutable, named by their digest).

It lives in the store (`<store>/cache/remote/<repository id>/`, `layout.StorePaths`), so
it keeps the store's rule: no folder below the store is reached through a symlink,
and no file is read through one or waited on (a FIFO). A copy is checked against its
name on every read; anything odd is no copy, and the index is fetched again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from blake3 import blake3

from worksnap.remote import formats
from worksnap.remote.formats import PackIndex


class IndexCache:
    """The copies of one repository's indexes, in `cache/<repository id>`."""

    def __init__(self, cache: str, repository: str, trusted: str | None = None) -> None:
        """Makes no system call.

        Args:
            cache: the folder of every repository's copies.
            repository: the repository's id (its own folder in `cache`).
            trusted: a folder above `cache` (default: its parent) below which no folder is
                reached through a symlink (the store's directory).
        """
        self.dir = os.path.join(cache, repository)
        self._trusted = trusted or os.path.dirname(cache)
        self._parts = os.path.relpath(self.dir, self._trusted).split(os.sep)

    def _folder(self, *, create: bool) -> int | None:
        """The cache folder opened without following a symlink below `trusted` (None: none)."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self._trusted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            for part in self._parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                inner = os.open(part, flags, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError:
            os.close(fd)
            return None  # a symlink, a file or a FIFO where a folder should be: no cache
        return fd

    def get(self, digest: str, url: str, key: str) -> PackIndex | None:
        """The index whose bytes have `digest`, if a whole copy is here (None: fetch it).

        Raises:
            RemoteError: the copy is whole but not a valid index (names `url` and `key`).
        """
        folder = self._folder(create=False)
        if folder is None:
            return None
        # Never through a symlink, never waiting on a FIFO: anything odd is fetched again.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(digest, flags, dir_fd=folder)
        except OSError:
            return None
        finally:
            os.close(folder)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with open(fd, "rb", closefd=False) as f:
                data = f.read(formats.MAX_INDEX_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if blake3(data).hexdigest() != digest:
            return None  # a damaged cache entry is fetched again
        return formats.decode_index(data, url, key)

    def put(self, digest: str, data: bytes) -> None:
        """Keeps a copy of the index whose bytes (`data`) have `digest`."""
        folder = self._folder(create=True)
        if folder is None:
            return
        # A cache that cannot be written is no cache; a torn copy fails its digest check.
        part = f"{digest}.{secrets.token_hex(4)}.partial"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(part, flags, 0o644, dir_fd=folder)
            try:
                with open(fd, "wb", closefd=False) as f:
                    f.write(data)
            finally:
                os.close(fd)
            os.replace(part, digest, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(part, dir_fd=folder)
        finally:
            os.close(folder)
