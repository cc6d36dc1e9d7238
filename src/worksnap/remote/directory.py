"""A remote store in a directory (`file:///path`): a shared disk, and the tests.

Layout: key `a/b/c` is the file `<root>/a/b/c`. Names starting with `.` are the
backend's own and never keys: `.tmp-*` files being written, and `.locks/`.

- Objects appear whole or not at all: the bytes go to a temp file in the target's
  directory (fsynced), and `os.link` publishes it under its name, which fails if
  the name exists: an atomic create-if-absent, even between machines on NFS. A
  process killed mid-write leaves only a `.tmp-*` file, which no reader sees.
- A ref is replaced by `os.replace` of a fsynced temp file, under an `flock` on
  one of 256 lock files picked by the key's digest; the ETag is compared under the
  same lock, so a compare-and-swap is atomic. `delete` takes the lock too, so a
  swap never resurrects a ref deleted after its ETag was read. The kernel drops
  the lock of a killed process. Lock files are never removed: removing one while
  another process waits on it would let two processes hold "the" lock.
- ETag: the first 128 bits of the BLAKE3 of the content, quoted like S3's, so it
  behaves as S3's does (it names the bytes, not the write). Content rather than
  (inode, mtime, size): inode numbers are reused and mtimes tick coarsely, so a
  ref rewritten within one tick could look unchanged. `stat` therefore reads the
  object (BLAKE3: about 1 ms per MiB).

A key cannot be both an object and a directory of others (`a` and `a/b`); the
remote layout never needs that.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat as stat_mode
import time
from collections.abc import Iterator
from datetime import datetime, timezone

from blake3 import blake3

from worksnap.errors import RemoteError
from worksnap.fsio import write_all
from worksnap.layout import TEMP_MARK
from worksnap.remote.transport import (
    MAX_REF_BYTES,
    ListEntry,
    Ref,
    Stat,
    check_key,
    is_key,
    probe_transport,
)

_LOCK_STRIPES = 256
_LOCK_TIMEOUT = 30.0
# O_NONBLOCK: a FIFO planted in the directory must not hang the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Errors of link() on file systems without hard links (some FUSE, SMB, FAT).
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def etag_of(data: bytes) -> str:
    """The ETag of an object holding `data`."""
    return '"' + blake3(data).hexdigest(length=16) + '"'


class DirectoryTransport:
    """A `Transport` over the directory `root` (see the module's docstring)."""

    def __init__(self, root: str, *, durable: bool = True) -> None:
        """Makes no system call: a missing directory is reported by the first operation.

        Args:
            root: absolute path of the directory; it must exist (it is never created).
            durable: fsync files and directories (off only for throwaway test stores).
        """
        self._root = root
        self._durable = durable
        self._locks = os.path.join(root, ".locks")

    @property
    def url(self) -> str:
        """`file://` and the directory's path."""
        return "file://" + self._root

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Creates `key` unless it exists (temp file, then `os.link`, which never replaces)."""
        path = self._path(key)
        if os.path.lexists(path):
            return False
        directory = os.path.dirname(path)
        tmp = self._write_temp(directory, data, key)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise self._error(exc, key, "create") from None
        finally:
            with contextlib.suppress(FileNotFoundError):  # (a gc took it for a dead one's)
                os.unlink(tmp)
        self._sync_dir(directory)
        return True

    def get(self, key: str, *, max_bytes: int) -> bytes:
        """Returns the bytes of `key`; its size is checked before they are read."""
        try:
            return self._read(self._path(key), max_bytes, key)
        except FileNotFoundError:
            raise self._missing(key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Returns `length` bytes of `key` from `offset`."""
        try:
            fd = os.open(self._path(key), _READ_FLAGS)
        except FileNotFoundError:
            raise self._missing(key) from None
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or length < 0 or offset + length > size:
                raise RemoteError(
                    self.url, f"range {offset}+{length} is outside its {size} bytes", key=key
                )
            parts = []
            while length:
                part = os.pread(fd, length, offset)
                if not part:
                    raise RemoteError(self.url, "shrank while it was read", key=key)
                parts.append(part)
                offset += len(part)
                length -= len(part)
            return b"".join(parts)
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        finally:
            os.close(fd)

    def stat(self, key: str) -> Stat | None:
        """Size and ETag of `key` (the ETag costs a read of the object, in 1 MiB pieces)."""
        try:
            return self._stat(self._path(key), key)
        except FileNotFoundError:
            self._check_root()
            return None

    def list_keys(self, prefix: str = "") -> Iterator[ListEntry]:
        """Walks the directory `prefix`; skips dot-names, symlinks and invalid names."""
        self._check_root()
        stack = [(self._path(prefix) if prefix else self._root, prefix)]
        while stack:
            directory, dir_key = stack.pop()
            try:
                entries = os.scandir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue  # no such prefix, or removed since it was listed
            except OSError as exc:
                raise self._error(exc, dir_key, "list") from None
            with entries:
                for entry in entries:
                    key = f"{dir_key}/{entry.name}" if dir_key else entry.name
                    if entry.name.startswith(".") or not is_key(key):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((entry.path, key))
                            continue
                        if not entry.is_file(follow_symlinks=False):
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # deleted while listed
                    modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, timezone.utc)
                    yield ListEntry(key, st.st_size, modified)

    def sweep_leftovers(self, before: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Removes the `.tmp-*` files of writers killed part-way, written before `before`.

        A live writer's temp file is fresh: it is written in one go, then linked under
        its key and removed. Symlinks and folders of that name are left alone, and so is
        a file this user may not remove.
        """
        self._check_root()
        count = size = 0
        for directory, dirs, files in os.walk(self._root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]  # `.locks/` and the like
            for name in files:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                    if not name.startswith(TEMP_MARK) or not stat_mode.S_ISREG(st.st_mode):
                        continue
                    if st.st_mtime < before:
                        if not dry_run:
                            os.unlink(path)
                        count, size = count + 1, size + st.st_size
                except OSError:
                    # Gone (its writer finished meanwhile), or not this user's to remove (a
                    # shared disk's sticky folder): left; the rest of the gc is done.
                    continue
        return count, size

    def get_ref(self, key: str, *, max_bytes: int = MAX_REF_BYTES) -> Ref | None:
        """The ref's bytes and their ETag, from one read (a ref is replaced, never rewritten)."""
        try:
            data = self._read(self._path(key), max_bytes, key)
        except FileNotFoundError:
            self._check_root()
            return None
        return Ref(data, etag_of(data))

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        """Compare-and-swap under the key's lock; publication by link (create) or rename."""
        path = self._path(key)
        directory = os.path.dirname(path)
        with self._lock(key):
            try:
                current: str | None = self._stat(path, key).etag
            except FileNotFoundError:
                current = None
            if current != expected_etag:
                return False
            tmp = self._write_temp(directory, data, key)
            try:
                if expected_etag is None:
                    # link, not rename: `put_if_absent` takes no lock and may create it now.
                    os.link(tmp, path)
                else:
                    os.replace(tmp, path)
            except FileExistsError:
                return False
            except OSError as exc:
                raise self._error(exc, key, "write" if expected_etag else "create") from None
            finally:
                with contextlib.suppress(FileNotFoundError):  # gone when renamed
                    os.unlink(tmp)
            self._sync_dir(directory)
        return True

    def delete(self, key: str) -> None:
        """Removes `key` under its lock (see the module's docstring); missing is fine."""
        path = self._path(key)
        with self._lock(key):
            try:
                os.unlink(path)
            except FileNotFoundError:
                self._check_root()
                return
            except OSError as exc:
                raise self._error(exc, key, "delete") from None
            self._sync_dir(os.path.dirname(path))

    def probe(self) -> None:
        """Runs `probe_transport`: catches a file system that cannot make hard links."""
        probe_transport(self)

    def _path(self, key: str) -> str:
        return os.path.join(self._root, *check_key(key).split("/"))

    def _read(self, path: str, max_bytes: int, key: str) -> bytes:
        """Reads a whole file, refusing it unread if larger than `max_bytes`.

        Raises:
            FileNotFoundError: there is no such file.
        """
        fd = self._open(path, key)
        try:
            size = os.fstat(fd).st_size
            if size > max_bytes:
                raise RemoteError(
                    self.url, f"is {size} bytes, more than the {max_bytes} allowed", key=key
                )
            parts, total = [], 0
            while part := os.read(fd, max_bytes - total + 1):
                parts.append(part)
                total += len(part)
                if total > max_bytes:
                    raise RemoteError(self.url, f"grew past {max_bytes} bytes", key=key)
            return b"".join(parts)
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        finally:
            os.close(fd)

    def _stat(self, path: str, key: str) -> Stat:
        """Size and ETag of a file, hashed in pieces so that no size costs memory.

        Raises:
            FileNotFoundError: there is no such file.
        """
        fd = self._open(path, key)
        try:
            hasher, size = blake3(), 0
            while piece := os.read(fd, 1 << 20):
                hasher.update(piece)
                size += len(piece)
            return Stat(size, '"' + hasher.hexdigest(length=16) + '"')
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        finally:
            os.close(fd)

    def _open(self, path: str, key: str) -> int:
        """Opens a regular file for reading, never through a symlink.

        Raises:
            FileNotFoundError: there is no such file.
        """
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RemoteError(self.url, "not a regular file", key=key)
        return fd

    def _write_temp(self, directory: str, data: bytes, key: str) -> str:
        """Writes `data` to a new fsynced `.tmp-*` file in `directory` (made if missing)."""
        tmp = os.path.join(directory, f"{TEMP_MARK}{secrets.token_hex(8)}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:
                self._check_root()
                os.makedirs(directory, exist_ok=True)
                fd = os.open(tmp, flags, 0o644)
        except OSError as exc:
            raise self._error(exc, key, "write") from None
        try:
            write_all(fd, data)
            if self._durable:
                os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            os.unlink(tmp)
            raise self._error(exc, key, "write") from None
        os.close(fd)
        return tmp

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Holds the `flock` of the key's stripe (polled, so a stuck holder is reported)."""
        stripe = blake3(key.encode()).digest(length=1)[0] % _LOCK_STRIPES
        path = os.path.join(self._locks, f"{stripe:02x}")
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                self._check_root()
                os.makedirs(self._locks, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise self._error(exc, key, "lock") from None
        try:
            deadline = time.monotonic() + _LOCK_TIMEOUT
            pause = 0.0005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise RemoteError(
                            self.url,
                            f"its lock {path} was held for {_LOCK_TIMEOUT:.0f} s",
                            key=key,
                        ) from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.02)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _sync_dir(self, directory: str) -> None:
        if not self._durable:
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _check_root(self) -> None:
        if not os.path.isdir(self._root):
            raise RemoteError(self.url, "no such directory")

    def _missing(self, key: str) -> RemoteError:
        self._check_root()
        return RemoteError(self.url, "missing", key=key)

    def _error(self, exc: OSError, key: str, operation: str) -> RemoteError:
        if exc.errno in _NO_LINKS and operation == "create":
            reason = (
                f"cannot create: {exc.strerror}; worksnap needs a file system with hard "
                "links to create objects atomically"
            )
        elif exc.errno == errno.ELOOP:
            reason = f"cannot {operation}: it is a symlink"
        else:
            reason = f"cannot {operation}: {exc.strerror or exc}"
        return RemoteError(self.url, reason, key=key)
