"""A remote store in a directory (`file:///path`): a shared disk, and the tests.

Layout: key `a/b/c` is the file `<root>/a/b/c`. Names starting with `.` are the
backend's own and never keys: `.tmp-*` files being written, and `.locks/`.

- Every folder below the remote's directory is opened from the one above it with
  `O_NOFOLLOW`, and every file by name in its folder's descriptor (`*at` calls): on a
  shared disk anyone in the group can plant `snapshots -> /elsewhere`, and a push
  wrote records through such a link, a gc deleted files out there. A symlink where
  a folder belongs is refused in one line; one where an object belongs is not read
  (`O_NOFOLLOW`) and is removed as a link. The remote's own path may hold links (a
  mount reached through one), as a store's path may.

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
from collections.abc import Iterable, Iterator
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
from worksnap.storedir import FILE_MODE, kind_of
from worksnap.storeplace import DIR_MODE

_LOCK_STRIPES = 256
_LOCK_TIMEOUT = 30.0
# O_NONBLOCK: a FIFO planted in the directory must not hang the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A team's shared folder (setgid, umask 002) is written by every member, as git's
# core.sharedRepository and restic allow: new files and folders take what the umask
# leaves (`storedir.FILE_MODE`, `storeplace.DIR_MODE`, as the store's), and a lock is opened for
# reading (flock needs no more), so a member may lock another's stripe file.
_LOCK_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LOCKS = ".locks"
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
        self._locks = os.path.join(root, _LOCKS)

    @property
    def directory(self) -> str:
        """The remote's directory, as given."""
        return self._root

    @property
    def url(self) -> str:
        """`file://` and the directory's path."""
        return "file://" + self._root

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Creates `key` unless it exists (temp file, then `os.link`, which never replaces)."""
        with self._parent(key, "create", create=True) as (parent, name):
            with contextlib.suppress(FileNotFoundError):
                os.stat(name, dir_fd=parent, follow_symlinks=False)
                return False
            tmp = self._write_temp(parent, data, key)
            try:
                os.link(tmp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            except FileExistsError:
                return False
            except OSError as exc:
                raise self._error(exc, key, "create") from None
            finally:
                with contextlib.suppress(FileNotFoundError):  # (a gc took it for a dead one's)
                    os.unlink(tmp, dir_fd=parent)
            self._sync_dir(parent)
        return True

    def get(self, key: str, *, max_bytes: int) -> bytes:
        """Returns the bytes of `key`; its size is checked before they are read."""
        try:
            return self._read(key, max_bytes)
        except FileNotFoundError:
            raise RemoteError(self.url, "missing", key=key) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Returns `length` bytes of `key` from `offset`."""
        try:
            fd = self._open(key)
        except FileNotFoundError:
            raise RemoteError(self.url, "missing", key=key) from None
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
            fd = self._open(key)
        except FileNotFoundError:
            return None
        try:
            return self._stat(fd, key)
        finally:
            os.close(fd)

    def list_keys(self, prefix: str = "") -> Iterator[ListEntry]:
        """Walks the directory `prefix`; skips dot-names and invalid names, refuses the rest.

        Each folder is opened again from the root, one component at a time with
        `O_NOFOLLOW` (the remote is three levels deep): a folder swapped for a symlink
        while it is listed is refused, never listed through.
        """
        stack = [check_key(prefix).split("/") if prefix else []]
        while stack:
            names = stack.pop()
            dir_key = "/".join(names)
            try:
                with self._folder(names, dir_key, "list") as fd:
                    found = self._entries(fd, names, dir_key)
            except (FileNotFoundError, NotADirectoryError):
                continue  # no such prefix, or removed since it was listed
            for entry in found:
                if isinstance(entry, list):
                    stack.append(entry)
                else:
                    yield entry

    def _entries(self, fd: int, names: list[str], dir_key: str) -> list[ListEntry | list[str]]:
        """The objects in one open folder, and its folders (as their names from the root)."""
        found: list[ListEntry | list[str]] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    key = f"{dir_key}/{entry.name}" if dir_key else entry.name
                    if entry.name.startswith(".") or not is_key(key):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            found.append([*names, entry.name])
                            continue
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # deleted while listed
                    if not stat_mode.S_ISREG(st.st_mode):
                        # Never passed over: a gc that did not see a ref deleted the
                        # records it names, and one that did not see an index its pack.
                        raise RemoteError(
                            self.url,
                            f"is {kind_of(st.st_mode)}, not a regular file or a folder: a "
                            f"remote's entries are never followed nor passed over (remove it)",
                            key=key,
                        )
                    modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, timezone.utc)
                    found.append(ListEntry(key, st.st_size, modified))
        except OSError as exc:
            raise self._error(exc, dir_key, "list") from None
        return found

    def sweep_leftovers(
        self, before: float, folders: Iterable[str], *, dry_run: bool = False
    ) -> tuple[int, int]:
        """Removes the `.tmp-*` files of writers killed part-way, written before `before`.

        Only in the remote's own folder and below its `folders`: a shared disk's folder
        may hold other things, and a gc deleted another tool's `.tmp-*` files anywhere
        below it. A live writer's temp file is fresh: it is written in one go, then
        linked under its key and removed. Symlinks and folders of that name are left
        alone, and so is a file this user may not remove. The walk never follows a link
        (`os.fwalk` by descriptors): a folder swapped for a symlink cannot lead it out
        of the remote.
        """
        count = size = 0

        def sweep(dir_fd: int, files: Iterable[str]) -> None:
            nonlocal count, size
            for name in files:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if not name.startswith(TEMP_MARK) or not stat_mode.S_ISREG(st.st_mode):
                        continue
                    if st.st_mtime < before:
                        if not dry_run:
                            os.unlink(name, dir_fd=dir_fd)
                        count, size = count + 1, size + st.st_size
                except OSError:
                    # Gone (its writer finished meanwhile), or not this user's to remove
                    # (a shared disk's sticky folder): left; the rest of the gc is done.
                    continue

        with self._folder([], "", "list") as top:
            sweep(top, os.listdir(top))
        for folder in folders:
            try:
                with self._folder([folder], folder, "list") as fd:
                    for _, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                        dirs[:] = [d for d in dirs if not d.startswith(".")]  # `.locks/`
                        sweep(dir_fd, files)
            except (FileNotFoundError, NotADirectoryError):
                continue  # none yet (or a file by that name: not a folder of the layout)
        return count, size

    def get_ref(self, key: str, *, max_bytes: int = MAX_REF_BYTES) -> Ref | None:
        """The ref's bytes and their ETag, from one read (a ref is replaced, never rewritten)."""
        try:
            data = self._read(key, max_bytes)
        except FileNotFoundError:
            return None
        return Ref(data, etag_of(data))

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        """Compare-and-swap under the key's lock; publication by link (create) or rename."""
        operation = "write" if expected_etag else "create"
        with self._lock(key), self._parent(key, operation, create=True) as (parent, name):
            try:
                fd = self._open_in(parent, name, key)
            except FileNotFoundError:
                current: str | None = None
            else:
                try:
                    current = self._stat(fd, key).etag
                finally:
                    os.close(fd)
            if current != expected_etag:
                return False
            tmp = self._write_temp(parent, data, key)
            try:
                if expected_etag is None:
                    # link, not rename: `put_if_absent` takes no lock and may create it now.
                    os.link(tmp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
                else:
                    os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except FileExistsError:
                return False
            except OSError as exc:
                raise self._error(exc, key, operation) from None
            finally:
                with contextlib.suppress(FileNotFoundError):  # gone when renamed
                    os.unlink(tmp, dir_fd=parent)
            self._sync_dir(parent)
        return True

    def delete(self, key: str) -> None:
        """Removes `key` under its lock (see the module's docstring); missing is fine.

        The name is removed, never followed: a symlink there is removed as a link.
        """
        with self._lock(key):
            try:
                with self._parent(key, "delete") as (parent, name):
                    try:
                        os.unlink(name, dir_fd=parent)
                    except FileNotFoundError:
                        return
                    except OSError as exc:
                        raise self._error(exc, key, "delete") from None
                    self._sync_dir(parent)
            except FileNotFoundError:
                return  # its folder is gone: so is the key

    def probe(self) -> None:
        """Runs `probe_transport`: catches a file system that cannot make hard links."""
        probe_transport(self)

    @contextlib.contextmanager
    def _folder(
        self, names: list[str], key: str, operation: str, *, create: bool = False
    ) -> Iterator[int]:
        """Yields a descriptor on the folder `names` below the remote's directory.

        The remote's own path is followed (a shared disk may be mounted through a
        link); below it every folder is opened from the one above with `O_NOFOLLOW`, so
        a symlink planted anywhere in the remote (a member of the group can plant one)
        never carries a read, a write or a delete out of it.

        Raises:
            FileNotFoundError: a folder on the way is missing (and not `create`).
            RemoteError: the remote's directory is missing, or a folder on the way is
                a symlink or not a folder.
        """
        try:
            fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise RemoteError(self.url, "no such directory") from None
        except OSError as exc:
            raise RemoteError(self.url, f"cannot open: {exc.strerror or exc}") from None
        try:
            for depth in range(len(names)):
                child = self._descend(fd, names[: depth + 1], key, operation, create=create)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _descend(
        self, parent: int, names: list[str], key: str, operation: str, *, create: bool
    ) -> int:
        """Opens (making it if `create`) the last folder of `names` in its folder `parent`."""
        name = names[-1]
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, DIR_MODE, dir_fd=parent)
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise
        except NotADirectoryError as exc:  # what O_DIRECTORY | O_NOFOLLOW gives on a symlink too
            try:
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            except OSError:
                raise exc from None
            if operation == "list" and stat_mode.S_ISREG(mode):
                raise  # a prefix that is an object holds no keys
            raise RemoteError(
                self.url,
                f"cannot {operation}: {'/'.join(names)} is {kind_of(mode)}, not a folder "
                "(worksnap never follows a link inside a remote)",
                key=key,
            ) from None
        except OSError as exc:
            raise self._error(exc, key, operation) from None

    @contextlib.contextmanager
    def _parent(
        self, key: str, operation: str, *, create: bool = False
    ) -> Iterator[tuple[int, str]]:
        """Yields (descriptor of the folder holding `key`, its last segment); see `_folder`."""
        *names, name = check_key(key).split("/")
        with self._folder(names, key, operation, create=create) as fd:
            yield fd, name

    def _read(self, key: str, max_bytes: int) -> bytes:
        """Reads a whole file, refusing it unread if larger than `max_bytes`.

        Raises:
            FileNotFoundError: there is no such file.
        """
        fd = self._open(key)
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

    def _stat(self, fd: int, key: str) -> Stat:
        """Size and ETag of an open file, hashed in pieces so that no size costs memory."""
        try:
            hasher, size = blake3(), 0
            while piece := os.pread(fd, 1 << 20, size):
                hasher.update(piece)
                size += len(piece)
            return Stat(size, '"' + hasher.hexdigest(length=16) + '"')
        except OSError as exc:
            raise self._error(exc, key, "read") from None

    def _open(self, key: str) -> int:
        """Opens the regular file of `key` for reading, never through a symlink.

        Raises:
            FileNotFoundError: there is no such file.
        """
        with self._parent(key, "read") as (parent, name):
            return self._open_in(parent, name, key)

    def _open_in(self, parent: int, name: str, key: str) -> int:
        """Opens the regular file `name` in the folder `parent` for reading (see `_open`)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._error(exc, key, "read") from None
        if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RemoteError(self.url, "not a regular file", key=key)
        return fd

    def _write_temp(self, parent: int, data: bytes, key: str) -> str:
        """Writes `data` to a new fsynced `.tmp-*` file in the folder `parent`; returns its name."""
        tmp = f"{TEMP_MARK}{secrets.token_hex(8)}"
        try:
            fd = os.open(tmp, _NEW_FLAGS, FILE_MODE, dir_fd=parent)
        except OSError as exc:
            raise self._error(exc, key, "write") from None
        try:
            write_all(fd, data)
            if self._durable:
                os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            os.unlink(tmp, dir_fd=parent)
            raise self._error(exc, key, "write") from None
        os.close(fd)
        return tmp

    @contextlib.contextmanager
    def _lock(self, key: str) -> Iterator[None]:
        """Holds the `flock` of the key's stripe (polled, so a stuck holder is reported)."""
        stripe = blake3(key.encode()).digest(length=1)[0] % _LOCK_STRIPES
        path = os.path.join(self._locks, f"{stripe:02x}")
        with self._folder([_LOCKS], key, "lock", create=True) as locks:
            try:
                fd = os.open(f"{stripe:02x}", _LOCK_FLAGS, FILE_MODE, dir_fd=locks)
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

    def _sync_dir(self, fd: int) -> None:
        if self._durable:
            os.fsync(fd)

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
