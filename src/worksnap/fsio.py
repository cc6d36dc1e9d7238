"""File system helpers for the workspace: what "unchanged" means, and a descriptor walk.

`DirTree` holds directory descriptors under a root that never cross a symlink; the
store's files have their own (`storedir.StoreDir`, which also makes every write of
the store durable: temp file in the same directory, fsync, rename, fsync the directory).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from worksnap.errors import shown
from worksnap.paths import fs_path, is_under

FileState = bytes | tuple[int, int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns, st_mode): what tells that a file is unchanged.

Packed into 36 bytes (`_PACKED`): one object, not a tuple of five ints, for each of a
tree's files (32 MB less at 200k files). The tuple itself only where a field does not fit
(a time past 2262 or before 1677): the two forms never compare equal, so such a file is
only hashed again, never taken for another.
"""

_PACKED = struct.Struct("<QQqqI")
_RENAME_NOREPLACE = 1  # renameat2(2), <linux/fs.h>

MODES = tuple(range(0o1000))
"""Permission bits as shared ints: `MODES[st.st_mode & 0o777]` makes no new int per file
(Python keeps only ints up to 256 shared; 0o644 is 420): 6 MB less at 200k files."""


class StatLike(Protocol):
    """What `file_state` reads: an `os.stat_result`, or the scan's smaller record of one."""

    @property
    def st_ino(self) -> int: ...  # noqa: D102
    @property
    def st_size(self) -> int: ...  # noqa: D102
    @property
    def st_mtime_ns(self) -> int: ...  # noqa: D102
    @property
    def st_ctime_ns(self) -> int: ...  # noqa: D102
    @property
    def st_mode(self) -> int: ...  # noqa: D102


def file_state(st: StatLike) -> FileState:
    """Returns what tells that a file is unchanged since `st` was taken.

    The one definition of "unchanged" in worksnap: the stat cache, the listing cache
    (its first four fields), a file re-read while it was hashed and the memo of
    checked manifests all compare these. Any write moves mtime or ctime, a chmod
    moves ctime, a replacement moves the inode; only a change within one timestamp
    tick hides, which the capture's racy margin covers.
    """
    return packed_state((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))


Stamp = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns): a directory's or rule source's `file_state` without
its mode (a chmod moves the ctime)."""


def stamp_of(st: os.stat_result) -> Stamp:
    """The stamp of `st`: what tells that a listed directory or a rule file is unchanged."""
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def packed_state(fields: tuple[int, int, int, int, int]) -> FileState:
    """The state of these five fields (a stat cache written before states were packed)."""
    try:
        return _PACKED.pack(*fields)
    except struct.error:
        return fields


def state_fields(state: FileState) -> tuple[int, int, int, int, int]:
    """The five fields of a state, packed or not (what a message shows)."""
    if isinstance(state, bytes):
        return _PACKED.unpack(state)
    return state


COARSE_TICK_NS = 1_000_000_000
"""The tick of a file system whose times have no fraction of a second (FAT's mtime ticks in
2 s, but its ctime in 10 ms: a change moves one of them, so a second is enough)."""


def is_coarse(st: StatLike) -> bool:
    """True when both of a file's times are whole seconds: its file system ticks in seconds.

    Both, because a write moves ctime even where mtime is coarse (or was set by a tool
    such as `tar`): only when neither can move within a second does a change hide.
    """
    return st.st_mtime_ns % COARSE_TICK_NS == 0 and st.st_ctime_ns % COARSE_TICK_NS == 0


def is_coarse_stamp(stamp: tuple[int, int, int, int]) -> bool:
    """True when a listing's stamp (inode, size, mtime, ctime) has whole-second times."""
    return stamp[2] % COARSE_TICK_NS == 0 and stamp[3] % COARSE_TICK_NS == 0


def released_with(owner: object, release: Callable[..., object], *args: Any) -> Callable[[], Any]:
    """Returns what calls `release(*args)` now, once; it also runs when `owner` is dropped.

    For descriptors kept past a call, as a dropped file object closes its own: a
    runtime that makes a workspace per step and never closes it must not run out of
    descriptors. Never at interpreter exit: a thread may still use a descriptor then
    (a closed one's number is given to the next file opened), and exit closes them all.
    """
    release_now = weakref.finalize(owner, release, *args)
    release_now.atexit = False
    return release_now


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Writes the whole of `data` (`os.write` may take less than it is given).

    The views are released on the way out, even when `os.write` raises: a frame kept
    by a traceback (or a profiler) would otherwise keep `data` exported, and a
    bytearray could not be resized again (BufferError).
    """
    with memoryview(data) as whole:
        done = 0
        while done < len(whole):
            with whole[done:] as rest:
                done += os.write(fd, rest)


def fsync_dir(path: str) -> None:
    """Makes a rename or unlink inside `path` durable (a directory outside the store)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: str) -> None:
    """Makes everything written on the file system that holds `path` durable, at once.

    `syncfs(2)` on Linux (one journal commit instead of one per file); `sync(2)`, which
    flushes every file system, where the C library has no `syncfs`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        syncfs = _libc("syncfs")
        if syncfs is None:
            os.sync()
        elif (code := syncfs(fd)) != 0:
            raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)


def _libc(name: str) -> Callable[..., int] | None:
    """The C library's function `name` as a call returning 0, or its errno (None: no such).

    ctypes is loaded only here, on first use: only `restore --to` pays for it.
    """
    import ctypes

    function = getattr(ctypes.CDLL(None, use_errno=True), name, None)
    if function is None:
        return None

    def call(*args: object) -> int:
        return 0 if function(*args) == 0 else ctypes.get_errno()

    return call


def rename_noreplace(name: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
    """Renames `name` from one directory to the other, never over a name already there.

    `renameat2(2)` with `RENAME_NOREPLACE`: the kernel checks and renames in one step.
    Where the C library or the file system has no such flag (before glibc 2.28, some
    network file systems), a look first, then the rename: a name made between the two
    is replaced (the gap docs/safety.md lists for those).

    Raises:
        FileExistsError: `name` is taken in the destination.
        OSError: the rename failed otherwise.
    """
    renameat2 = _libc("renameat2")
    if renameat2 is not None:
        raw = os.fsencode(name)
        if (code := renameat2(src_dir_fd, raw, dst_dir_fd, raw, _RENAME_NOREPLACE)) == 0:
            return
        if code not in (errno.ENOSYS, errno.EINVAL):  # (EINVAL: a file system without it)
            raise OSError(code, os.strerror(code), name)
    try:
        os.stat(name, dir_fd=dst_dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(name, name, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    else:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name)


def write_atomic(path: str, data: bytes) -> None:
    """Replaces a file outside the store (an agent's settings) with `data`, durably.

    Readers see the old or the new bytes, never a mix: a temp file beside it, fsynced,
    renamed over it, then the directory fsynced. The file keeps its permission bits (a
    0600 settings file may hold secrets; a review found it made 0644). The store's own
    files never come here: they go through `storedir.StoreDir`, relative to its descriptor.
    """
    directory = os.path.dirname(path) or "."
    try:
        mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644 if mode is None else 0o600)  # a new one: the umask's
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class DirTree:
    """Directory descriptors under one root, opened one component at a time.

    At most `_KEEP` descriptors stay open besides the root's (least recently used
    ones are closed), so a restore of many directories never runs out of them,
    and the walk down is a loop, so no depth is too deep.
    """

    _KEEP = 64

    def __init__(self, root: str) -> None:
        self._root = os.open(root, _DIR_FLAGS)
        self._fds: OrderedDict[str, int] = OrderedDict()

    def dir_fd(self, directory: str) -> int:
        """Returns a descriptor on `directory` (relative wire path), never crossing a symlink."""
        if not directory:
            return self._root
        fd = self._fds.get(directory)
        if fd is not None:
            self._fds.move_to_end(directory)
            return fd
        parts = directory.split("/")
        start, fd = 0, self._root
        for depth in range(len(parts) - 1, 0, -1):
            cached = self._fds.get("/".join(parts[:depth]))
            if cached is not None:
                self._fds.move_to_end("/".join(parts[:depth]))
                start, fd = depth, cached
                break
        for depth in range(start, len(parts)):
            try:
                fd = os.open(fs_path(parts[depth]), _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = shown("/".join(parts[: depth + 1]))
                    raise OSError(exc.errno, f"{where} is not a directory (a symlink?)") from None
                raise
            self._fds["/".join(parts[: depth + 1])] = fd
            while len(self._fds) > self._KEEP:
                os.close(self._fds.popitem(last=False)[1])
        return fd

    def forget(self, directory: str) -> None:
        """Closes the descriptors of `directory` and below (it is about to be removed)."""
        for key in [k for k in self._fds if is_under(k, directory)]:
            os.close(self._fds.pop(key))

    def __enter__(self) -> DirTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes every descriptor."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        os.close(self._root)


def read_regular(
    path: str | os.PathLike[str] | bytes, limit: int, *, dir_fd: int | None = None
) -> bytes | None:
    """Up to `limit` bytes of a regular file; None if there is none.

    For the files git reads that a tree can hold or name (`.git` files, `commondir`,
    `info/exclude`, `.gitignore`): opened without blocking and checked, so that a FIFO
    there never hangs a command and a link to `/dev/zero` is never read without end.
    Links are followed, but for a name in `dir_fd`: a symlink there is no file.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags if dir_fd is None else flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_in_tree(root: str, rel: str, limit: int) -> bytes | None:
    """`read_regular` of the file at `rel` (wire path) below `root`, reached without a symlink."""
    parent, _, name = rel.rpartition("/")
    try:
        with DirTree(root) as tree:
            return read_regular(fs_path(name), limit, dir_fd=tree.dir_fd(parent))
    except OSError:
        return None
