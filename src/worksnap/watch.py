"""Watch: which directories changed since the last look (Linux inotify, through libc).

A long-lived `Workspace` can keep one so that a snapshot of an unchanged tree
needs no `lstat` of every file: only directories with events are scanned again.
Anything the watcher cannot vouch for (overflow, an unwatchable directory, a
platform without inotify) makes it answer "unknown", and the caller scans
everything, exactly as without a watcher.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

_MASK = (
    _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
    | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW
)  # fmt: skip
_EVENT = struct.Struct("iIII")
_IN_IN_PLACE = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


class Events:
    """What happened in one watched directory: the names touched, and whether its listing moved."""

    __slots__ = ("listing", "names")

    def __init__(self) -> None:
        self.names: set[bytes] = set()
        """Every child named by an event (written, chmod-ed, created, removed, renamed)."""
        self.listing = False
        """True when a child was created, removed or renamed, or the directory itself changed."""


class Watcher:
    """Directories under one root that may have changed since the last `drain`.

    Usage: `watch` every directory a scan visits; before the next scan, `drain`
    returns the set of directories (relative wire paths) with any event, or
    None when the answer is unknown and everything must be scanned.
    """

    def __init__(self) -> None:
        self._libc = _libc()
        self._fd = -1
        if self._libc is not None:
            self._fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        self._dirs: dict[int, str] = {}
        self._by_dir: dict[str, int] = {}
        self._lost = self._fd < 0  # nothing is vouched for until the first full scan

    @property
    def available(self) -> bool:
        """True when this platform has inotify and the watcher could start."""
        return self._fd >= 0

    def watch(self, directory: str, path: bytes) -> None:
        """Starts watching `path`, known as `directory`; a failure makes the next answer unknown."""
        if self._fd < 0 or directory in self._by_dir:
            return
        assert self._libc is not None
        wd = self._libc.inotify_add_watch(self._fd, path, _MASK)
        if wd < 0:
            self._lost = True  # e.g. ENOSPC: max_user_watches reached
            return
        self._dirs[wd] = directory
        self._by_dir[directory] = wd

    def forget(self, directory: str) -> None:
        """Stops watching `directory` (it was removed or is now ignored)."""
        wd = self._by_dir.pop(directory, None)
        if wd is not None and self._libc is not None:
            self._dirs.pop(wd, None)
            self._libc.inotify_rm_watch(self._fd, wd)

    def drain(self) -> dict[str, Events | None] | None:
        """Returns what changed since the last call, or None if that is unknown.

        Maps each directory with events to its `Events`: any child not named there
        is as the last scan saw it. None for a directory means nothing is known
        about it (a child directory of it was removed or moved away).
        """
        if self._fd < 0:
            return None
        dirty: dict[str, Events | None] = {}
        lost = self._lost
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    lost = True
                    continue
                directory = self._dirs.get(wd)
                if directory is None:
                    continue
                events = dirty.setdefault(directory, Events())
                if events is not None:
                    if name:
                        events.names.add(name)
                    if not name or mask & ~_IN_IN_PLACE:
                        events.listing = True  # not only written or chmod-ed in place
                if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
                    self._by_dir.pop(directory, None)
                    self._dirs.pop(wd, None)
                    dirty[directory.rpartition("/")[0]] = None
        self._lost = False
        return None if lost else dirty

    def close(self) -> None:
        """Releases the inotify descriptor."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._dirs.clear()
        self._by_dir.clear()
