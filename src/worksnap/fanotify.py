"""Which files were written: fanotify, reporting each file by its handle (Linux >= 5.13).

inotify says where a write was heard, not which file it went to: a descriptor opened
on a file by a name that then went (removed, or another file renamed onto it) writes
under that name for as long as it stays open, while the file lives on under another
name. fanotify, marking the same directories with `FAN_REPORT_FID`, names the file
itself: its file handle (`name_to_handle_at`), which for a local file system holds
the inode number and its generation. The watcher compares the handles written with
those of the files now at the names inotify heard (`written.py`).

Only what this needs is bound: a group reporting the handle of each file written,
marks on directories (their files' writes and attribute changes),
reading events, and a file's handle. Unprivileged use needs Linux 5.13; where the
group cannot be made (an older kernel, a seccomp filter) `Fanotify.open` returns None.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

_FAN_CLOEXEC = 0x1
_FAN_NONBLOCK = 0x2
_FAN_REPORT_FID = 0x200
_FAN_MARK_ADD = 0x1
_FAN_MODIFY = 0x2
_FAN_ATTRIB = 0x4
_FAN_Q_OVERFLOW = 0x4000
_FAN_EVENT_ON_CHILD = 0x08000000
_MASK = _FAN_MODIFY | _FAN_ATTRIB | _FAN_EVENT_ON_CHILD  # no FAN_ONDIR: files only
_AT_EMPTY_PATH = 0x1000
_INFO_FID = 1

_METADATA = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_INFO = struct.Struct("=BBH8sIi")  # info_type, pad, len, fsid, handle_bytes, handle_type
_MAX_HANDLE = 128


class _FileHandle(ctypes.Structure):
    _fields_ = (
        ("handle_bytes", ctypes.c_uint),
        ("handle_type", ctypes.c_int),
        ("f_handle", ctypes.c_ubyte * _MAX_HANDLE),
    )


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - every Linux libc can be loaded
        return None


def handle_of(name: bytes, dir_fd: int) -> bytes | None:
    """The handle of the file at `name` relative to `dir_fd` (a symlink not followed).

    b"" names the directory itself. None: nothing there, or no handle to be had.
    """
    libc = _LIBC
    if libc is None:
        return None
    fh = _FileHandle(handle_bytes=_MAX_HANDLE)
    mount_id = ctypes.c_int()
    flags = _AT_EMPTY_PATH if not name else 0
    if libc.name_to_handle_at(dir_fd, name, ctypes.byref(fh), ctypes.byref(mount_id), flags):
        return None
    return struct.pack("=i", fh.handle_type) + bytes(fh.f_handle[: fh.handle_bytes])


def available() -> bool:
    """True when fanotify can report here which file a write went to."""
    group = Fanotify.open()
    if group is None:
        return False
    group.close()
    return True


class Fanotify:
    """A fanotify group marking directories; reads which files were written in them."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def open(cls) -> Fanotify | None:
        """A new group, or None where fanotify cannot report file handles here."""
        libc = _LIBC
        if libc is None:
            return None
        flags = _FAN_CLOEXEC | _FAN_NONBLOCK | _FAN_REPORT_FID
        fd = libc.fanotify_init(flags, os.O_RDONLY | os.O_CLOEXEC)
        return cls(fd) if fd >= 0 else None

    def mark(self, dir_fd: int) -> bool:
        """Reports the writes to the files of the directory open at `dir_fd` (False: failed)."""
        assert _LIBC is not None
        done = _LIBC.fanotify_mark(self._fd, _FAN_MARK_ADD, ctypes.c_uint64(_MASK), dir_fd, None)
        return int(done) == 0

    def read(self) -> tuple[list[bytes], bool]:
        """The handles of the files written, and whether the queue overflowed (some lost)."""
        found: list[bytes] = []
        overflowed = False
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return found, overflowed
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, _, _, meta, mask, _, _ = _METADATA.unpack_from(data, offset)
                if mask & _FAN_Q_OVERFLOW:
                    overflowed = True
                at, end = offset + meta, offset + length
                while at + _INFO.size <= end:
                    kind, _, size, _, count, handle_type = _INFO.unpack_from(data, at)
                    if kind == _INFO_FID:
                        start = at + _INFO.size
                        found.append(struct.pack("=i", handle_type) + data[start : start + count])
                    at += max(size, _INFO.size)
                offset += max(length, _METADATA.size)

    def close(self) -> None:
        """Releases the group (and its marks)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_LIBC = _libc()
