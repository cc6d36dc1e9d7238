"""Session: a runtime's agent session over a workspace, with numbered steps and rewind.

    with worksnap.Session(root, name="conv-8c1f", snapshots=True) as s:
        s.step(label=prompt, meta={"cut_len": "41"})   # step 1, 2, ... (step 0 on entry)
        s.rewind(1)

What `worksnap run --snapshots`, the Claude Code hooks and the MCP server number their
steps with: the next step of a session is one more than the highest step any snapshot
of it has (worksnap's own automatic snapshots do not count), 0 for a new session. The
number is read and its snapshot stored under the store's step lock (`lock.StepLock`),
so steps taken at once, by threads or processes, get distinct consecutive numbers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from worksnap.errors import api_errors
from worksnap.history import DEFAULT_SESSION, check_kind, check_session_name, is_automatic
from worksnap.manifest import check_meta
from worksnap.workspace import Workspace

if TYPE_CHECKING:
    from worksnap.apply import Result
    from worksnap.manifest import Manifest
    from worksnap.plan import Plan

STEP = "step"
"""The kind of a numbered step's snapshot."""


@api_errors
class Session:
    """One session of one workspace: `step()` takes the next numbered step, `rewind(n)`.

    Long-lived: keep it for the life of the agent's session, so its workspace's caches
    stay warm. With `snapshots=True`, entering it takes a step (the state the agent
    starts from) and leaving it takes another (the state it ended in, also after an
    exception: that is the state a person wants to see).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        snapshots: bool = False,
        store: str | os.PathLike[str] | None = None,
        exclude: tuple[str, ...] = (),
        watch: bool = False,
        workspace: Workspace | None = None,
    ) -> None:
        """Opens the session `name` of the workspace at `root` (or of `workspace`).

        Args:
            root: the workspace root (not needed with `workspace`).
            name: the session (default: `$WORKSNAP_SESSION`, else `default`).
            snapshots: take a step on entering and on leaving the `with` block.
            store: the store directory (default: as `Workspace` finds it).
            exclude: exclusion rules, as `Workspace` takes them.
            watch: keep an inotify watch (see `Workspace`).
            workspace: an open workspace to use instead (it stays open after `close`).

        Raises:
            InputError: a bad session name, or what `Workspace` refuses.
        """
        self.name = check_session_name(
            name or os.environ.get("WORKSNAP_SESSION") or DEFAULT_SESSION
        )
        self.snapshots = snapshots
        if workspace is None:
            if root is None:
                raise TypeError("Session needs a root or a workspace")
            workspace = Workspace(root, store=store, exclude=exclude, watch=watch)
            self._owned = True
        else:
            self._owned = False
        self.workspace = workspace

    def __enter__(self) -> Session:
        if self.snapshots:
            self.step(label="session start")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.snapshots:
                self.step(label="session end")
        finally:
            self.close()

    def close(self) -> None:
        """Closes the workspace this session opened (one handed in stays open)."""
        if self._owned:
            self.workspace.close()

    @contextlib.contextmanager
    def _ws(self) -> Iterator[Workspace]:
        """The workspace, set to this session for one call (it may serve several)."""
        previous = self.workspace.session
        self.workspace.session = self.name
        try:
            yield self.workspace
        finally:
            self.workspace.session = previous

    def last_step(self) -> int | None:
        """The highest step a snapshot of this session has (None: no step yet)."""
        with self._ws() as ws:
            summaries = ws.list()
        return max(
            (s.step for s in summaries if s.step is not None and not is_automatic(s.kind)),
            default=None,
        )

    def next_step(self) -> int:
        """The step number the next `step()` takes: one past the last, 0 at first."""
        last = self.last_step()
        return 0 if last is None else last + 1

    def step(
        self,
        *,
        label: str | None = None,
        meta: dict[str, str] | None = None,
        attach: dict[str, bytes] | None = None,
        kind: str = STEP,
        number: int | None = None,
    ) -> Manifest:
        """Snapshots the whole workspace as the next numbered step of this session.

        The next step is read and its snapshot stored under the store's step lock: steps
        taken at once (another process's, another thread's) wait for each other, and
        each gets its own number.

        Args:
            label: a short label (its first line is kept).
            meta: small string metadata (e.g. where to cut the conversation).
            attach: named attachments (e.g. the conversation so far).
            kind: the snapshot's kind (`step`; the hooks give tool calls `tool`).
            number: this step number instead of the next one (a tool call's snapshot
                belongs to the step of its prompt).
        """
        with self._ws() as ws:
            if number is not None:
                return ws.snapshot(kind=kind, step=number, label=label, meta=meta, attach=attach)
            check_kind(kind)  # refused before the store (where the lock is) is made
            check_meta(meta)
            ws.store.bind(ws.root)
            with ws.locks.steps():  # after a second, it says who holds it
                step = self.next_step()
                return ws.snapshot(kind=kind, step=step, label=label, meta=meta, attach=attach)

    def plan_rewind(self, step: int) -> Plan:
        """Previews what `rewind(step)` would change; changes nothing."""
        with self._ws() as ws:
            return ws.plan_restore(ws.load(f"step:{step}"))

    def rewind(self, step: int, *, plan: Plan | None = None) -> Result:
        """Restores the newest snapshot of `step` in this session (undoable with `undo`).

        With `plan` (from `plan_rewind`), applies exactly that plan.
        """
        with self._ws() as ws:
            return ws.apply(plan) if plan is not None else ws.rewind(step)
