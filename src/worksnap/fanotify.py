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

from worksnap.fsio import released_with

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
_STATFS = struct.Struct("=q48x8s")  # f_type, five counts and f_bsize, f_fsid (64-bit Linux)


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


def handle_of(fd: int) -> bytes | None:
    """The handle of the file open at `fd` (`O_PATH` will do), as `Fanotify.read` gives it.

    That is its file system's id, then the handle's type and bytes: two files on two
    file systems never compare equal. None: no handle to be had.
    """
    libc = _LIBC
    fs = file_system(fd)
    if libc is None or fs is None:
        return None
    fh = _FileHandle(handle_bytes=_MAX_HANDLE)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(fd, b"", ctypes.byref(fh), ctypes.byref(mount_id), _AT_EMPTY_PATH):
        return None
    return fs[0] + struct.pack("=i", fh.handle_type) + bytes(fh.f_handle[: fh.handle_bytes])


def file_system(fd: int) -> tuple[bytes, int] | None:
    """The id and `statfs` type of the file system holding what is open at `fd` (None: unknown)."""
    libc = _LIBC
    if libc is None or ctypes.sizeof(ctypes.c_long) != 8:
        return None  # `_STATFS` is the 64-bit layout
    buffer = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes
    if libc.fstatfs(fd, buffer) != 0:
        return None
    f_type, fsid = _STATFS.unpack_from(buffer.raw)
    return fsid, f_type & 0xFFFFFFFF


def inode_of(handle: bytes, fs: tuple[bytes, int]) -> int | None:
    """The inode number in `handle`, a handle of a file on file system `fs` (`file_system`).

    A handle's bytes are the file system's own, kept stable across reboots (NFS serves
    them): only the layouts read here are known. None: another file system, or a
    layout not known.
    """
    fsid, f_type = fs
    if len(handle) < 12 or handle[:8] != fsid:
        return None
    (kind,) = struct.unpack_from("=i", handle, 8)
    read = _INODES.get((f_type, kind, len(handle) - 12))
    return read(handle[12:]) if read is not None else None


def _ino32_gen(data: bytes) -> int:
    return int(struct.unpack_from("=I", data)[0])  # FILEID_INO32_GEN: inode, generation


def _shmem(data: bytes) -> int:
    low, high = struct.unpack_from("=II", data, 4)  # generation, inode (two halves)
    return int(low | high << 32)


_INODES = {
    # (statfs f_type, handle type, handle bytes): how to read the inode number.
    (0xEF53, 1, 8): _ino32_gen,  # ext2/3/4 (`generic_encode_ino32_fh`)
    (0x01021994, 1, 12): _shmem,  # tmpfs (`shmem_encode_fh`)
}


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
        self._closer = released_with(self, os.close, fd)

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
                    kind, _, size, fsid, count, handle_type = _INFO.unpack_from(data, at)
                    if kind == _INFO_FID:
                        start = at + _INFO.size
                        found.append(
                            fsid + struct.pack("=i", handle_type) + data[start : start + count]
                        )
                    at += max(size, _INFO.size)
                offset += max(length, _METADATA.size)

    def close(self) -> None:
        """Releases the group (and its marks)."""
        self._closer()
        self._fd = -1


_LIBC = _libc()
