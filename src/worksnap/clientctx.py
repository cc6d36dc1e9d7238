"""Client context: what each command the daemon runs sees as its own process state.

The daemon runs each client's command in a thread of its own; these stand-ins make
process-wide state per thread: `os.environ` (`ThreadEnviron`), `sys.stdin`,
`sys.stdout`, `sys.stderr` (`ThreadStream`), and the working directory and umask
(`private_fs`: Linux `unshare(CLONE_FS)`). `ClientInput` reads the client's stdin
only while the client is still connected. `RWLock` lets commands that only read
share a workspace.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

from worksnap.stopsignals import NAMES, SIGINT, came

_CLONE_FS = 0x00000200


class ThreadEnviron(MutableMapping[str, str]):
    """`os.environ` in the daemon: each command thread reads and writes its client's copy."""

    def __init__(self, base: MutableMapping[str, str]) -> None:
        self._base = base
        self._local = threading.local()

    def _map(self) -> MutableMapping[str, str]:
        env: MutableMapping[str, str] | None = getattr(self._local, "env", None)
        return self._base if env is None else env

    def use(self, env: dict[str, str] | None) -> None:
        """Gives this thread its own environment (None: the daemon's again)."""
        self._local.env = env

    def __getitem__(self, key: str) -> str:
        return self._map()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._map()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._map()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._map()))

    def __len__(self) -> int:
        return len(self._map())

    def copy(self) -> dict[str, str]:
        """A plain copy, as `os.environ.copy()` gives."""
        return dict(self._map())


class ThreadStream:
    """`sys.stdin`/`stdout`/`stderr` in the daemon: each command thread's client stream."""

    def __init__(self, default: Any) -> None:
        self._default = default
        self._local = threading.local()

    def use(self, stream: Any) -> None:
        """Points this thread at `stream` (None: the daemon's own again)."""
        self._local.stream = stream

    def target(self) -> Any:
        """The stream this thread writes to."""
        stream = getattr(self._local, "stream", None)
        return self._default if stream is None else stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target(), name)


class ClientInput(io.RawIOBase):
    """The client's stdin, read only while the client is still there.

    Each read waits for the terminal (or pipe) and for the client's connection at
    once: when the client goes away (Ctrl-C at a confirmation), the read ends
    with KeyboardInterrupt at once, so the daemon never takes the user's next line.
    """

    def __init__(self, fd: int, conn: socket.socket) -> None:
        super().__init__()
        self._fd = fd
        self._conn = conn

    def readable(self) -> bool:
        """It is."""
        return True

    def fileno(self) -> int:
        """The client's descriptor."""
        return self._fd

    def isatty(self) -> bool:
        """Whether the client's stdin is a terminal (`restore` asks only then)."""
        return os.isatty(self._fd)

    def readinto(self, buffer: Any) -> int:
        """Reads what the client's stdin has; KeyboardInterrupt once the client is gone."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN | select.POLLHUP)
        poller.register(self._conn.fileno(), select.POLLIN | select.POLLHUP)
        while True:
            ready = dict(poller.poll())
            if self._conn.fileno() in ready and (signum := stopped_by(self._conn)) is not None:
                raise came(signum)
            if self._fd in ready:
                data = os.read(self._fd, len(buffer))
                buffer[: len(data)] = data
                return len(data)

    def close(self) -> None:
        """Closes the client's descriptor."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        super().close()


class ClientOutput(io.RawIOBase):
    """The client's stdout or stderr, written only while the client is still there.

    Once the client has gone (a second Ctrl-C: it stopped waiting and said so), what the
    command still writes (its rollback's "interrupted" line, progress) is dropped: the
    terminal is the user's again. A review found the daemon's line under the next prompt.
    A client that only closed its end for writing (a first Ctrl-C) is still there.
    """

    def __init__(self, fd: int, conn: socket.socket) -> None:
        super().__init__()
        self._fd = fd
        self._conn = conn

    def writable(self) -> bool:
        """It is."""
        return True

    def fileno(self) -> int:
        """The client's descriptor."""
        return self._fd

    def isatty(self) -> bool:
        """Whether the client's stream is a terminal (progress is drawn only then)."""
        return os.isatty(self._fd)

    def write(self, data: Any) -> int | None:
        """Writes `data` to the client's descriptor; drops it once the client is gone."""
        if gone(self._conn):
            return len(memoryview(data))
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return None  # as a FileIO says it (a non-blocking descriptor that is full)

    def close(self) -> None:
        """Closes the client's descriptor."""
        with contextlib.suppress(OSError):
            os.close(self._fd)
        super().close()


def client_output(fd: int, conn: socket.socket, encoding: str, errors: str) -> io.TextIOWrapper:
    """The client's stdout or stderr as a text stream: line-buffered on a terminal, as `open`."""
    raw = ClientOutput(fd, conn)
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=raw.isatty()
    )


def gone(sock: socket.socket) -> bool:
    """True when the client closed its connection altogether (POLLHUP), not only for writing."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLHUP)
    return any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(0))


def stopped_by(sock: socket.socket) -> int | None:
    """The signal that stopped the client (None: none came), as it relays one.

    While its command runs a client sends nothing but, at a stop, the signal's number in
    one byte, then closes its end for writing (`client._relay_stops`): the end alone
    (or an error) is Ctrl-C's.
    """
    try:
        sent = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None
    except OSError:
        return SIGINT
    return sent[0] if sent and sent[0] in NAMES else SIGINT


def private_fs() -> bool:
    """Gives the calling thread its own working directory and umask (Linux `unshare`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.unshare(_CLONE_FS) == 0)
    except (OSError, AttributeError):
        return False


class Context:
    """The process-wide state the daemon gives each command thread a copy of."""

    def __init__(self) -> None:
        self.environ = ThreadEnviron(os.environ)
        self.streams = tuple(ThreadStream(s) for s in (sys.stdin, sys.stdout, sys.stderr))
        # Without a private working directory and umask per thread, commands take turns.
        self.serial = threading.Lock()

    def install(self) -> None:
        """Puts the per-thread stand-ins in place of os.environ and sys.std*."""
        os.environ = self.environ  # type: ignore[assignment]  # noqa: B003 - on purpose
        sys.stdin, sys.stdout, sys.stderr = self.streams


class RWLock:
    """Readers side by side, one writer alone; a waiting writer keeps new readers out."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    def acquire(self, *, write: bool, blocking: bool = True, timeout: float | None = None) -> bool:
        """Takes the lock to read (shared) or write (alone).

        False if not `blocking` and busy, or still busy after `timeout` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout

        def wait() -> bool:  # False: give up
            left = None if deadline is None else deadline - time.monotonic()
            return blocking and (left is None or left > 0) and (self._cond.wait(left) or True)

        with self._cond:
            if write:
                self._waiting += 1
                try:
                    while self._writer or self._readers:
                        if not wait():
                            self._cond.notify_all()  # readers this writer kept out may go
                            return False
                    self._writer = True
                finally:
                    self._waiting -= 1
            else:
                while self._writer or self._waiting:
                    if not wait():
                        return False
                self._readers += 1
            return True

    def take_to_write(self, *, hook: bool) -> None:
        """Takes it to write (a daemon's workspace); a hook only until it must say it gave up.

        An agent kills its hook after a while (`hooks.TIMEOUT_SECONDS`): it gives up in time
        to say so, as on the store's lock, never held for ever by a restore at its question.

        Raises:
            LockError: (a hook) another command still has the workspace.
        """
        from worksnap.errors import LockError
        from worksnap.hooks import LOCK_WAIT_SECONDS

        if not self.acquire(write=True, timeout=LOCK_WAIT_SECONDS if hook else None):
            raise LockError(
                "the daemon is running another command on this workspace (a restore may be "
                "waiting at its question)"
            )

    def release(self, *, write: bool) -> None:
        """Lets go of what `acquire` took."""
        with self._cond:
            if write:
                self._writer = False
            else:
                self._readers -= 1
            self._cond.notify_all()
