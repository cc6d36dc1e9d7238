"""Cross-process store locks: many snapshots at once, one restore or gc alone.

Built on `flock`, which the kernel releases when its holder dies, so a killed
process never leaves a lock behind. The holder's pid and host are written
beside the lock so a waiting process can say who it is waiting for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from types import TracebackType

from worksnap.errors import LockError
from worksnap.fsio import write_atomic
from worksnap.layout import StorePaths


class StoreLock:
    """A shared or exclusive lock on one store, used as a context manager."""

    def __init__(self, store_dir: str, *, exclusive: bool, timeout: float = 60.0) -> None:
        paths = StorePaths(store_dir)
        self._path = paths.lock
        self._holder = paths.lock_holder
        self._exclusive = exclusive
        self._timeout = timeout
        self._fd: int | None = None

    def __enter__(self) -> StoreLock:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        mode = fcntl.LOCK_EX if self._exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise LockError(
                        f"store {os.path.dirname(self._path)} is busy ({self._who()}); "
                        "try again when it finishes"
                    ) from None
                time.sleep(0.05)
        self._fd = fd
        if self._exclusive:
            # Atomic, so a waiting process never reads half a note; not fsynced,
            # as it only helps a waiting process explain itself.
            with contextlib.suppress(OSError):
                write_atomic(
                    self._holder,
                    f"pid {os.getpid()} on {socket.gethostname()}\n".encode(),
                    durable=False,
                )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            if self._exclusive:
                # A stale note would name a process that no longer holds the lock.
                with contextlib.suppress(OSError):
                    os.unlink(self._holder)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def _who(self) -> str:
        try:
            with open(self._holder, encoding="utf-8") as note:
                return "held by " + note.read().strip()
        except OSError:
            return "held by another process"
