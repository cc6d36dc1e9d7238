"""The daemon's workspaces: long-lived and watched, one command at a time each.

A command that captures or writes gets the watched workspace for its options to
itself (a write lock per workspace); commands that only read share an unwatched
one and run side by side. Between commands, a settle round reads each idle
workspace's events as they come (`Workspace.settle`), so that a file another
program writes and then removes is checked while it is still there.
"""

from __future__ import annotations

import copy
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worksnap.clientctx import RWLock, hung_up
from worksnap.layout import store_location

if TYPE_CHECKING:
    from worksnap.workspace import Workspace

__all__ = ["READERS", "WorkspacePool"]

_MAX_WORKSPACES = 4

READERS = frozenset({"list", "show", "du", "attachment", "verify", "cat"})
"""Commands that neither capture nor write: they run side by side."""


class WorkspacePool:
    """Long-lived watched workspaces, by everything a command opens them with but the session."""

    def __init__(self) -> None:
        self.workspaces: dict[tuple[Any, ...], Workspace] = {}
        self.readers: dict[tuple[Any, ...], Workspace] = {}
        self._locks: dict[int, RWLock] = {}
        self._guard = threading.Lock()
        self._local = threading.local()
        self.report: Callable[[], dict[str, Any]] = lambda: {"pid": os.getpid()}
        """What the serving daemon says of itself (set by it; its `status` answer)."""

    def status(self) -> dict[str, Any]:
        """The serving daemon's `status` answer, for a command it runs (`worksnap status`)."""
        return self.report()

    def start_command(self, command: str, conn: socket.socket | None) -> None:
        """Notes what this thread runs (a reader or not) and for which client."""
        self._local.reader = command in READERS
        self._local.conn = conn
        self._local.held = []

    def end_command(self) -> None:
        """Releases every workspace this thread's command opened."""
        for lock, write in getattr(self._local, "held", []):
            lock.release(write=write)
        self._local.held = []

    def open(self, root: str, store: str | None, options: dict[str, Any]) -> Workspace:
        """The workspace for these options (opened and watched on first use), for this command.

        A command that only reads gets a view with its own session of an unwatched
        workspace shared by all such commands; any other gets the watched workspace
        to itself until it ends.
        """
        from worksnap.workspace import Workspace

        session = options.pop("session")
        progress = options.pop("progress")
        options.setdefault("exclude", ())
        options.setdefault("max_file_bytes", None)  # the store's setting, read per command
        options.setdefault("force", False)
        key = (
            os.path.realpath(root),
            store_location(os.path.realpath(root), store),
            *sorted(options.items()),
        )
        reader = getattr(self._local, "reader", False)
        with self._guard:
            if reader:
                # Commands that only read share an unwatched workspace of their own: they
                # never wait for a snapshot or restore (one may sit at its prompt).
                shared = self.readers.get(key)
                if shared is None:
                    shared = Workspace(root, store=store, session=session, **options)
                    self.readers[key] = shared
                view = copy.copy(shared)  # the same engine; only the session is this command's
                view.session = session
                return view
            ws = self.workspaces.pop(key, None)
            if ws is None:
                ws = Workspace(root, store=store, watch=True, session=session, **options)
                self._locks[id(ws)] = RWLock()
                if len(self.workspaces) >= _MAX_WORKSPACES:
                    self._retire(next(iter(self.workspaces)))
            self.workspaces[key] = ws  # most recently used last
            lock = self._locks[id(ws)]
        lock.acquire(write=True)
        self._local.held = [*getattr(self._local, "held", []), (lock, True)]
        ws.use(session=session, progress=self._interruptible(progress))
        return ws

    def _retire(self, key: tuple[Any, ...]) -> None:
        ws = self.workspaces.pop(key)
        lock = self._locks.pop(id(ws))
        lock.acquire(write=True)  # let the commands using it finish
        try:
            ws.close()
        finally:
            lock.release(write=True)

    def _interruptible(self, progress: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """Wraps a progress callback so that a client gone (Ctrl-C) interrupts the command.

        The command then stops as it would on Ctrl-C in the client's own process (a
        restore rolls back).
        """
        client = getattr(self._local, "conn", None)

        def report(done: Any) -> None:
            if client is not None and hung_up(client):
                raise KeyboardInterrupt
            if progress is not None:
                progress(done)

        return report

    def audit(
        self, check: Callable[[], None], log: Callable[[str], None], *, wait: bool = False
    ) -> tuple[int, int]:
        """Audits every idle workspace; returns (workspaces audited, differences found).

        With `wait`, a workspace a command holds is audited once the command ends.
        """
        audited = found = 0
        with self._guard:
            workspaces = [(ws, self._locks[id(ws)]) for ws in self.workspaces.values()]
        for ws, lock in workspaces:
            if not ws.watching or not lock.acquire(write=True, blocking=wait):
                continue
            try:
                missed = ws.audit(check=check)
            finally:
                lock.release(write=True)
            audited += 1
            found += len(missed)
            for line in missed:
                log(f"audit: the watcher missed {line}; the watched state was rebuilt")
        return audited, found

    @property
    def watching(self) -> bool:
        """True when a workspace of the pool keeps an inotify watch."""
        with self._guard:
            return any(ws.watching for ws in self.workspaces.values())

    def settle(self, timeout: float) -> bool:
        """Waits up to `timeout` for events in a watched workspace, and settles each idle one.

        Returns:
            True when events were waiting (settled, or left to the command holding the
            workspace); the caller pauses a little before the next round.
        """
        with self._guard:
            watched = {ws.events_fd: (ws, self._locks[id(ws)]) for ws in self.workspaces.values()}
        watched.pop(-1, None)
        try:
            ready = select.select(list(watched), [], [], timeout)[0] if watched else []
        except (OSError, ValueError):
            return True  # a workspace was closed meanwhile: look again
        for fd in ready:
            ws, lock = watched[fd]
            if lock.acquire(write=True, blocking=False):  # else a command reads the events
                try:
                    ws.settle()
                finally:
                    lock.release(write=True)
        return bool(ready)

    def drop_all(self) -> None:
        """Closes every workspace (storing their caches)."""
        with self._guard:
            for key in list(self.workspaces):
                self._retire(key)
            for ws in self.readers.values():
                ws.close()
            self.readers.clear()
