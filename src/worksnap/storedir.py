"""The store directory, opened once: every file and folder in it is reached through its descriptor.

A store is input like any other: it may have arrived with a cloned repository, and
a `packs -> ../../victim` in it must not turn a sweep into a deletion elsewhere. So
every access to a store file goes through one `StoreDir`:

- the store's directory is opened once (its path was resolved by the caller) and
  every name below it is opened relative to that descriptor, one component at a
  time, with `O_NOFOLLOW`: a symlink anywhere in the layout is refused, never followed;
- every file is checked with `fstat` after it is opened (`O_NONBLOCK`, so a FIFO
  cannot hang the open): a FIFO, socket or device where a file or folder is expected
  is refused;
- every read is bounded: by the file's size from `fstat`, and by a cap per kind of
  file that the caller gives (a link to `/dev/zero` cannot eat memory);
- every write is atomic (temp file in the same directory, `fsync`, rename, `fsync` of
  the directory), and a temp file is `flock`ed by its writer until it is renamed, so
  a sweep can tell an abandoned temp file (its writer died) from one being written.

Errors name the store file and say what to do (`errors.StoreError`). Callers pass
the absolute paths `layout.StorePaths` spells; a path outside the store is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterable, Iterator

from worksnap.errors import ForeignStoreError, StoreError
from worksnap.fsio import released_with, stamp_of, write_all
from worksnap.layout import TEMP_MARK, StorePaths
from worksnap.storeplace import (
    DIR_MODE,
    check_own,
    check_owner,
    make_store_dir,
    not_a_store,
)

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# What the umask leaves, as git does: 0644 and 0755 under the usual 022; under a team's
# 002 in a setgid folder, every member of the group works in the store (a review found
# the second member refused at the store lock, `lock.gate`). Elsewhere the store's own
# folder lets no one else in (`storeplace.make_store_dir`).
FILE_MODE = 0o666

KIB = 1 << 10
MIB = 1 << 20


def kind_of(mode: int) -> str:
    """Names the type of a file from its mode, as an error message says it."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "of an unknown type"


_NEVER_FOLLOWED = "worksnap never follows links in its store, nor reads anything but files there"


def _refuse(path: str, mode: int, expected: str) -> StoreError:
    return StoreError(
        path, f"is {kind_of(mode)}, not {expected}: {_NEVER_FOLLOWED} (remove it or move it away)"
    )


def _name(exc: OSError, path: str) -> None:
    """Makes an error met below the store name the store file, as an absolute path.

    The system names only what it was given: the last component, or a descriptor.
    """
    if not (isinstance(exc.filename, str) and exc.filename.startswith("/")):
        exc.filename = path
        del exc.filename2  # (set to None, it would show as "-> None")


class StoreDir:
    """One store directory: its descriptor, and every safe way to reach the files below it.

    Args:
        directory: the store directory, absolute and already resolved (a store reached
            through a symlink is resolved once, by the caller, before it gets here).
    """

    def __init__(self, directory: str) -> None:
        self.path = directory
        self.paths = StorePaths(directory)
        self._held: _Held | None = None  # the descriptor and the identity of what it opened

    # -- the directory itself --------------------------------------------------

    def _root(self) -> _Held:
        """The store's descriptor, opened on first use; hold it while its `fd` is used.

        It is closed once nobody holds it (threads share a StoreDir: `refresh` or `close`
        in one must not close the descriptor another is reading through).

        Raises:
            FileNotFoundError: there is no store (yet).
            StoreError: the store path is not a directory.
        """
        held = self._held
        if held is None:
            try:
                fd = os.open(self.path, _DIR)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise self._wrong(self.path, "a directory") from None
                if exc.errno == errno.EACCES:
                    check_owner(self.path, os.stat(self.path, follow_symlinks=False))
                raise
            try:
                st = check_own(self.path, fd)
            except (ForeignStoreError, OSError):
                os.close(fd)
                raise
            held = self._held = _Held(fd, (st.st_dev, st.st_ino))
        return held

    def refresh(self) -> None:
        """Lets go of the descriptor if the store directory was replaced or removed since.

        A long-lived process (the daemon) would otherwise go on writing into a store
        that someone deleted and created anew.
        """
        held = self._held
        if held is None:
            return
        try:
            st = os.stat(self.path, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == held.identity
        except OSError:
            same = False
        if not same:
            self.close()

    def close(self) -> None:
        """Closes the store's descriptor (it is opened again on next use)."""
        self._held = None  # closed when the last user lets go of it

    def _wrong(self, path: str, expected: str) -> StoreError:
        """The error for `path` (which failed to open as `expected`), naming what is there."""
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return StoreError(path, f"cannot be opened as {expected}")
        return _refuse(path, mode, expected)

    def _parts(self, path: str) -> list[str]:
        if path == self.path:
            return []
        if not path.startswith(self.path.rstrip("/") + "/"):
            raise ValueError(f"{path} is not inside the store {self.path}")
        return path[len(self.path.rstrip("/")) + 1 :].split("/")

    @contextlib.contextmanager
    def _parent(self, path: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """Yields (descriptor of the directory holding `path`, its last component).

        Every folder on the way is opened with `O_NOFOLLOW` (made first when `create`).
        """
        parts = self._parts(path)
        if not parts:
            raise ValueError("the store directory itself has no parent in the store")
        opened: list[int] = []
        try:
            if create and not os.path.isdir(self.path):
                make_store_dir(self.path)
            held = self._root()
            fd = held.fd
            for depth, name in enumerate(parts[:-1]):
                fd = self._open_dir(fd, name, "/".join([self.path, *parts[: depth + 1]]), create)
                opened.append(fd)
            yield fd, parts[-1]
        except OSError as exc:
            _name(exc, path)
            raise
        finally:
            for each in opened:
                os.close(each)

    def _open_dir(self, parent: int, name: str, path: str, create: bool) -> int:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, DIR_MODE, dir_fd=parent)
        try:
            return os.open(name, _DIR, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._wrong(path, "a directory") from None
            raise

    @contextlib.contextmanager
    def directory(self, path: str) -> Iterator[int]:
        """Yields a descriptor on a folder of the store (`path` may be the store itself).

        Raises:
            FileNotFoundError: it does not exist.
            StoreError: it is not a directory (a symlink, a file...).
        """
        if path == self.path:
            try:
                held = self._root()
                yield held.fd
            except OSError as exc:
                _name(exc, path)
                raise
            return
        with self._parent(path) as (parent, name):
            fd = self._open_dir(parent, name, path, create=False)
            try:
                yield fd
            finally:
                os.close(fd)

    def exists(self) -> bool:
        """True when the store directory is there (a symlink or a file there is refused)."""
        try:
            self._root()
        except FileNotFoundError:
            return False
        return True

    def is_dir(self, path: str) -> bool:
        """True when the folder `path` of the store exists (refused if it is not a folder)."""
        try:
            with self.directory(path):
                return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: str) -> None:
        """Makes a folder of the store and the folders above it, each checked on the way."""
        with self._parent(path, create=True) as (parent, name):
            os.close(self._open_dir(parent, name, path, create=True))

    def _open_regular(self, path: str, flags: int, *, create: bool) -> int:
        """Opens a regular store file with `flags` (which hold O_NOFOLLOW); refuses all else."""
        with self._parent(path, create=create) as (parent, name):
            try:
                fd = os.open(name, flags, FILE_MODE, dir_fd=parent)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise self._wrong(path, "a regular file") from None
                raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _refuse(path, mode, "a regular file")
        return fd

    # -- reading -----------------------------------------------------------------

    def open_file(self, path: str) -> int:
        """Opens a store file for reading: never through a link, never anything but a file.

        The caller closes the descriptor.

        Raises:
            FileNotFoundError: it does not exist (or a folder above it does not).
            StoreError: it, or a folder above it, is not what the layout says.
        """
        return self._open_regular(path, _READ, create=False)

    def read(self, path: str, *, limit: int) -> bytes:
        """Returns a store file's bytes, at most `limit` of them.

        Raises:
            FileNotFoundError: it does not exist.
            StoreError: it is not a regular file, or holds more than `limit` bytes.
        """
        fd = self.open_file(path)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise StoreError(path, f"is {size} bytes, more than the {limit} it may hold")
            chunks: list[bytes] = []
            total = 0
            while chunk := os.read(fd, min(MIB, limit + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise StoreError(path, f"grew past the {limit} bytes it may hold")
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_optional(self, path: str, *, limit: int) -> bytes | None:
        """Like `read`, but None when the file (or the store) does not exist."""
        try:
            return self.read(path, limit=limit)
        except FileNotFoundError:
            return None

    def lstat(self, path: str) -> os.stat_result | None:
        """The store file's own stat (a link is not followed), or None when it is missing."""
        try:
            with self._parent(path) as (parent, name):
                return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def refuse_foreign(self) -> None:
        """Refuses to make a store in a directory that holds what no store does.

        `--store .git` made a store in git's directory and its gc deleted git's objects,
        a review found; `--store src` (for `--root src`) wrote `*` into `src/.gitignore`.

        Raises:
            InputError: names the first names found that are not a store's.
        """
        if strange := self.paths.foreign(self.listdir(self.path)):
            raise not_a_store(self.path, strange)

    def listdir(self, path: str) -> list[str]:
        """The names in a folder of the store ([] when it does not exist)."""
        try:
            with self.directory(path) as fd:
                return os.listdir(fd)
        except FileNotFoundError:
            return []

    def walk_sizes(self) -> int:
        """The bytes of every file below the store (links are counted, never followed)."""
        total = 0
        try:
            held = self._root()
        except FileNotFoundError:
            return 0
        for _, _, files, dir_fd in os.fwalk(".", dir_fd=held.fd, follow_symlinks=False):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
        return total

    # -- writing -----------------------------------------------------------------

    def write(self, path: str, data: bytes | Iterable[bytes], *, durable: bool = True) -> int:
        """Replaces a store file with `data` so that readers see the old or the new bytes.

        Args:
            path: the store file.
            data: its new content, or that in pieces (written one after the other, as
                they come: an iterator's failure leaves the old file as it was).
            durable: fsync the file and its folder (off only for what may be lost:
                caches, the lock note).

        Returns:
            How many bytes were written.
        """
        written = 0
        with self._parent(path, create=True) as (parent, name):
            tmp, fd = self._new_temp(parent, name)
            try:
                for piece in [data] if isinstance(data, bytes) else data:
                    written += len(piece)
                    write_all(fd, piece)
                if durable:
                    os.fsync(fd)
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
            finally:
                os.close(fd)  # after the rename: the temp file is locked until it is gone
            if durable:
                os.fsync(parent)
        return written

    def _new_temp(self, parent: int, name: str) -> tuple[str, int]:
        """Creates and locks a temp file beside `name`; returns its name and descriptor."""
        while True:
            tmp = f"{name}{TEMP_MARK}{os.urandom(6).hex()}"
            fd = os.open(tmp, _NEW, FILE_MODE, dir_fd=parent)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:
                return tmp, fd
            os.close(fd)  # a sweep took it for abandoned between create and lock: again

    def create(self, path: str) -> int:
        """Creates a new store file (never over anything) and locks it while it is written.

        The caller writes, closes (which unlocks) and, for a temp file, renames it. As long
        as the descriptor is open, `remove_abandoned` leaves the file alone.
        """
        with self._parent(path, create=True) as (parent, name):
            while True:
                fd = os.open(name, _NEW, FILE_MODE, dir_fd=parent)
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_nlink:
                    return fd
                os.close(fd)  # swept as abandoned between create and lock: make it again

    def open_shared(self, path: str, *, append: bool = False) -> int:
        """Opens (creating) a store file to use in place: a lock file, the daemon's log.

        The caller closes the descriptor. `append`: every write goes to the end.

        Raises:
            StoreError: something other than a regular file is there.
        """
        return self._open_regular(path, _LOCK | (os.O_APPEND if append else 0), create=True)

    def trim(self, path: str, *, keep: int) -> None:
        """Keeps a log's last `keep` bytes once past 4x that (a line added meanwhile may go)."""
        st = self.lstat(path)
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size <= 4 * keep:
            return
        fd = self.open_file(path)
        try:
            tail = os.pread(fd, keep, st.st_size - keep)
        finally:
            os.close(fd)
        self.write(path, tail[tail.find(b"\n") + 1 :], durable=False)

    def append(self, path: str, data: bytes) -> None:
        """Appends `data` to a store file (created if missing) in one write; not fsynced.

        For what may be lost (a cache's log): a kill leaves at most a short last record.

        Raises:
            StoreError: something other than a regular file is there.
        """
        fd = self._open_regular(path, _LOCK | os.O_APPEND, create=True)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        """Renames a store file within one folder of the store, then makes it durable."""
        with self._parent(src) as (parent, name):
            target = self._parts(dst)
            if self._parts(src)[:-1] != target[:-1]:
                raise ValueError("renames stay within one folder")
            os.replace(name, target[-1], src_dir_fd=parent, dst_dir_fd=parent)
            os.fsync(parent)

    def unlink(self, path: str) -> bool:
        """Removes a store file (a link is removed, never followed); False when it was missing."""
        try:
            with self._parent(path) as (parent, name):
                os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            return False
        return True

    def fsync(self, path: str) -> None:
        """Makes the renames and removals inside a folder of the store durable."""
        with self.directory(path) as fd:
            os.fsync(fd)

    def remove_abandoned(
        self, path: str, *, unless: Callable[[], bool] | None = None, dry_run: bool = False
    ) -> int | None:
        """Removes a file whose writer is gone (nobody holds its lock); returns its size.

        Returns None, and leaves the file, when a live writer holds it (see `create`
        and `write`): a snapshot running beside this one may be writing it.

        Args:
            path: the store file.
            unless: asked once the lock is taken; True keeps the file (a pack whose
                writer published its index and let go of it in between).
            dry_run: only say what would go (the lock is taken and let go: a writer
                that creates the file now waits for it a moment).
        """
        try:
            fd = self.open_file(path)
        except (FileNotFoundError, StoreError):
            return None  # gone, or not a file this store writes: not ours to remove
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            if unless is not None and unless():
                return None
            size = os.fstat(fd).st_size
            # Under its lock: a writer that opens it now finds it unlinked and starts over.
            return size if dry_run or self.unlink(path) else None
        finally:
            os.close(fd)

    def remove_unpublished(self, *, dry_run: bool = False) -> int:
        """Removes the packs and temp files of writers that died; returns the bytes freed.

        Safe beside running snapshots: a writer holds its pack locked until the pack's
        index is published, so only a pack nobody holds and that has no index is a
        leftover (of a snapshot killed, or failed, before it could remove it). With
        `dry_run`, removes nothing and returns the bytes it would free.
        """
        names = self.listdir(self.paths.packs)
        indexed = {p for p, kind in map(self.paths.pack_file, names) if kind == "index"}
        freed = 0
        for name in names:
            pack_name, kind = self.paths.pack_file(name)
            if (kind == "pack" and pack_name not in indexed) or self.paths.is_temp(name):
                index = self.paths.pack_index(pack_name)

                def published(index: str = index) -> bool:
                    return self.lstat(index) is not None

                path = os.path.join(self.paths.packs, name)
                freed += self.remove_abandoned(path, unless=published, dry_run=dry_run) or 0
        return freed

    def sweep_loose(self, live: set[str], *, dry_run: bool = False) -> tuple[int, int]:
        """Removes the loose objects not in `live`, and dead writers' temp files there.

        Returns how many objects were removed and how many bytes that freed (`dry_run`:
        would be; nothing is removed).
        """
        removed = freed = 0
        for sub in self.listdir(self.paths.objects):
            directory = os.path.join(self.paths.objects, sub)
            for rest in self.listdir(directory):
                path = os.path.join(directory, rest)
                if self.paths.is_temp(rest):
                    freed += self.remove_abandoned(path, dry_run=dry_run) or 0
                elif sub + rest not in live:
                    st = self.lstat(path)
                    if st is not None and (dry_run or self.unlink(path)):
                        freed += st.st_size
                        removed += 1
        return removed, freed

    def objects_witness(self, packs: list[str]) -> bytes:
        """Bytes that change whenever a stored object may be gone (`ObjectStore.witness`).

        `generation` (a sweep or a damaged copy writes it anew); each published pack's index
        (`packs`), by name and stamp (one removed, merged or damaged in place); each folder of
        loose objects, by stamp (an object removed from it moves it).
        """
        paths = self.paths
        places = [paths.pack_index(p) for p in packs]
        places += [os.path.join(paths.objects, n) for n in sorted(self.listdir(paths.objects))]
        stamps = [None if (st := self.lstat(p)) is None else stamp_of(st) for p in places]
        generation = self.read_optional(paths.generation, limit=256)
        return repr((generation, places, stamps)).encode()

    def new_name(self) -> str:
        """A fresh random name for a file this process alone writes (a pack)."""
        return os.urandom(8).hex()


class _Held:
    """An open descriptor of the store directory, closed when no one holds it any more."""

    __slots__ = ("__weakref__", "fd", "identity")

    def __init__(self, fd: int, identity: tuple[int, int]) -> None:
        self.fd, self.identity = fd, identity
        released_with(self, os.close, fd)
