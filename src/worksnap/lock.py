"""Cross-process store locks: many snapshots at once, one restore or gc alone.

Built on `flock`, which the kernel releases when its holder dies, so a killed
process never leaves a lock behind. Writer-preferring: once a writer (an
exclusive holder) is waiting, no new reader (a shared holder) gets in; the
readers already inside finish and the writer goes next. Without it a stream of
overlapping snapshots kept a restore waiting until they happened to leave a gap.

Two files, both only ever `flock`ed:

- `lock`: readers hold it shared, a writer exclusively.
- `lock.gate`: a writer holds it exclusively from the moment it starts waiting
  until it lets go of `lock`; a reader holds it shared only for its attempt on
  `lock` (non-blocking), so a reader gets `lock` only while no writer waits.

Killed with SIGKILL at any point, a process loses every lock with its open file
descriptions (opened `O_CLOEXEC`, so no program it runs keeps them): a reader
killed at the gate or inside lets a waiting writer go on; a writer killed while
waiting frees the gate and the readers queued behind it; a writer killed while
holding frees both. Nothing is ever left to clean up.

The writer that holds the gate writes its pid and host (and what it is doing,
if told) beside the lock, so a waiting process can say who it waits for. A
writer killed leaves its note naming a dead process until the next writer
replaces it; a waiting process only reads the note when a gate holder is what
keeps it waiting, and that holder has written its own.

A third file, `lock.steps`, numbers steps (`StepLock`): held exclusively from reading
a session's last step until the snapshot that takes the next one is stored, so prompts
that arrive at once get distinct, consecutive steps. It is taken before the store lock
and never while holding it, and no writer takes it, so it cannot deadlock with them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from types import TracebackType

from worksnap.errors import LockError, StoreError
from worksnap.storedir import StoreDir

# Polling rather than a blocking flock, for the timeout: the first retries are
# quick (most waits are short), then every 50 ms.
_FIRST_POLL = 0.001
_LONGEST_POLL = 0.05


class StoreLock:
    """A shared or exclusive lock on one store, used as a context manager."""

    def __init__(
        self,
        store_dir: str | StoreDir,
        *,
        exclusive: bool,
        timeout: float = 60.0,
        purpose: str = "",
        on_wait: Callable[[str], None] | None = None,
        notice_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Prepares the lock; nothing is taken until `with`.

        Args:
            store_dir: the store whose lock this is (its files are opened through a
                `StoreDir`: never through a link).
            exclusive: a writer (restore, gc...) rather than a reader (snapshot).
            timeout: seconds to wait before giving up with LockError.
            purpose: what the holder does ("restore"), shown to processes waiting
                for an exclusive holder.
            on_wait: called once with a one-line message naming the holder when
                the wait has lasted `notice_after` seconds (default: silent).
            notice_after: seconds of waiting before `on_wait` is called.
            clock: monotonic seconds (replaceable, as `sleep` is, so that a test
                needs no real waiting).
            sleep: waits between attempts.
        """
        self._files = store_dir if isinstance(store_dir, StoreDir) else StoreDir(store_dir)
        self._store = self._files.path
        paths = self._files.paths
        self._path = paths.lock
        self._holder = paths.lock_holder
        self._gate = paths.lock_gate
        self._exclusive = exclusive
        self._timeout = timeout
        self._purpose = purpose
        self._on_wait = on_wait
        self._notice_after = notice_after
        self._clock = clock
        self._sleep = sleep
        self._fd: int | None = None
        self._gate_fd: int | None = None
        self._deadline = self._notice_at = 0.0
        self._noticed = False

    def _start(self) -> None:
        start = self._clock()
        self._deadline = start + self._timeout
        self._notice_at = start + self._notice_after
        self._noticed = self._on_wait is None

    def __enter__(self) -> StoreLock:
        self._start()
        gate = self._files.open_shared(self._gate)
        fd: int | None = None
        noted = False
        try:
            if self._exclusive:
                # From here on no new reader gets in: it would need the gate.
                self._wait(lambda: _try(gate, fcntl.LOCK_EX), self._who)
                self._write_note()
                noted = True
                fd = lock = self._files.open_shared(self._path)
                self._wait(lambda: _try(lock, fcntl.LOCK_EX), _readers_inside)
                self._gate_fd = gate
            else:
                fd = lock = self._files.open_shared(self._path)

                def attempt() -> bool:
                    if not _try(gate, fcntl.LOCK_SH):
                        return False  # a writer waits or holds: let it go first
                    try:
                        return _try(lock, fcntl.LOCK_SH)
                    finally:
                        fcntl.flock(gate, fcntl.LOCK_UN)

                self._wait(attempt, self._who)
                os.close(gate)
        except BaseException:
            if noted:
                self._remove_note()
            if fd is not None:
                os.close(fd)
            os.close(gate)
            raise
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            if self._exclusive:
                self._remove_note()
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._gate_fd is not None:
            # Last: readers stay out until the lock itself is free.
            os.close(self._gate_fd)
            self._gate_fd = None

    def _wait(self, attempt: Callable[[], bool], who: Callable[[], str]) -> None:
        """Calls `attempt` until it succeeds; says once who holds the lock; gives up in time."""
        pause = _FIRST_POLL
        while not attempt():
            now = self._clock()
            if now >= self._deadline:
                raise LockError(
                    f"store {self._store} is busy ({who()}); try again when it finishes"
                )
            if not self._noticed and now >= self._notice_at:
                self._noticed = True
                assert self._on_wait is not None
                self._on_wait(f"waiting for store {self._store} ({who()})")
            self._sleep(min(pause, self._deadline - now))
            pause = min(pause * 2, _LONGEST_POLL)

    def _write_note(self) -> None:
        doing = f": {self._purpose}" if self._purpose else ""
        # Atomic, so a waiting process never reads half a note; not fsynced,
        # as it only helps a waiting process explain itself.
        with contextlib.suppress(OSError):
            self._files.write(
                self._holder,
                f"pid {os.getpid()} on {os.uname().nodename}{doing}\n".encode(),
                durable=False,
            )

    def _remove_note(self) -> None:
        # A stale note would name a process that no longer holds the lock.
        with contextlib.suppress(OSError):
            self._files.unlink(self._holder)

    def _who(self) -> str:
        """Who holds the gate (or the lock), from its note: never blocks, reads 200 bytes."""
        return _holder(self._files)


def _holder(files: StoreDir) -> str:
    """Who holds the gate (or the lock), from its note: never blocks, reads 200 bytes."""
    try:
        note = files.read(files.paths.lock_holder, limit=200).strip()
    except (OSError, StoreError):
        return "held by another process"
    if note:
        return "held by " + note.decode("utf-8", "replace")
    return "held by another process"


def writer_inside(files: StoreDir) -> str | None:
    """Who holds the store alone right now (a restore, a recovery, gc), or None: no one.

    Looks without waiting and keeps nothing: a shared attempt on the lock, let go at once
    (a writer trying for it at that moment tries again, as after a reader). Tells a
    restore running in another process from one whose process is gone (the kernel
    freed its lock).
    """
    try:
        fd = files.open_shared(files.paths.lock)
    except (OSError, StoreError):
        return None  # no lock to look at (a store read-only to us): no one known inside
    try:
        return None if _try(fd, fcntl.LOCK_SH) else _holder(files)
    finally:
        os.close(fd)  # (lets go of the shared lock, if taken)


class StepLock(StoreLock):
    """Numbered steps of a store, one at a time (see the module's docstring).

    One lock for the store, not one per session: a file per session would stay behind
    it, and steps of two sessions rarely come at once (each holds it for one snapshot).
    """

    def __init__(
        self,
        store_dir: str | StoreDir,
        *,
        timeout: float = 60.0,
        on_wait: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Not `exclusive` as a store writer is: it writes no holder note, so it removes none.
        super().__init__(
            store_dir, exclusive=False, timeout=timeout, on_wait=on_wait, clock=clock, sleep=sleep
        )

    def __enter__(self) -> StepLock:
        self._start()
        fd = self._files.open_shared(self._files.paths.lock_steps)
        try:
            self._wait(lambda: _try(fd, fcntl.LOCK_EX), _numbering)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self


def _numbering() -> str:
    return "another step of a session is being numbered"


def _readers_inside() -> str:
    # A writer holding the gate waits only for readers that got in before it.
    return "shared by snapshots in progress"


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class Locks:
    """The store locks of one workspace: each says what it is for; a long wait is reported.

    Args:
        files: the store directory.
        on_wait: called with one line naming the holder when a lock has been waited
            for a second (None: waits are silent).
    """

    def __init__(self, files: StoreDir, on_wait: Callable[[str], None] | None = None) -> None:
        self._files = files
        self._on_wait = on_wait
        self._deadline: float | None = None

    @contextlib.contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Every lock taken inside waits only until `seconds` from now, all waits together.

        For a caller that is itself killed after a time (an agent's hook): it gives up
        with LockError in time to say so, rather than die waiting.
        """
        outer = self._deadline
        self._deadline = time.monotonic() + seconds
        if outer is not None:
            self._deadline = min(self._deadline, outer)
        try:
            yield
        finally:
            self._deadline = outer

    def _timeout(self, timeout: float) -> float:
        """`timeout`, cut to what is left before the deadline of `within` (0: one attempt)."""
        if self._deadline is None:
            return timeout
        return max(0.0, min(timeout, self._deadline - time.monotonic()))

    def shared(self, purpose: str, *, timeout: float = 60.0) -> StoreLock:
        """A reader's lock (a snapshot): many at once, none while a writer waits or holds."""
        return StoreLock(
            self._files,
            exclusive=False,
            timeout=self._timeout(timeout),
            purpose=purpose,
            on_wait=self._on_wait,
        )

    def exclusive(self, purpose: str, *, timeout: float = 60.0) -> StoreLock:
        """A writer's lock (restore, gc...): alone."""
        return StoreLock(
            self._files,
            exclusive=True,
            timeout=self._timeout(timeout),
            purpose=purpose,
            on_wait=self._on_wait,
        )

    def steps(self, *, timeout: float = 60.0) -> StepLock:
        """The lock a numbered step is taken under (before the store lock, never inside)."""
        return StepLock(self._files, timeout=self._timeout(timeout), on_wait=self._on_wait)
