"""Durable file writes: temp file in the same directory, fsync, rename, fsync the directory."""

from __future__ import annotations

import os
import secrets


def fsync_dir(path: str) -> None:
    """Makes a rename or unlink inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replaces `path` with `data` so that readers see the old or the new bytes, never a mix.

    Args:
        path: the file to write.
        data: its new content.
        durable: fsync the file and its directory (off only for caches that may be lost).
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    if durable:
        fsync_dir(directory)
