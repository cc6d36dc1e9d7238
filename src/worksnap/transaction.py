"""Transaction: a restore that is all or nothing, and undoable; undo, redo and recovery.

plan (pure, see plan.py) -> under the exclusive lock: capture the current state once
(both what is planned from and the `pre-restore` snapshot), verify every object the
plan writes, save the pre-restore snapshot, write the journal, apply (apply.py). On
a failure the workspace is rolled back to the pre-restore snapshot; if the process
dies, the journal stays and the next command rolls back (`recover`).
"""

from __future__ import annotations

import builtins
import os
import socket
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from worksnap.apply import Result, apply_plan, remove_leftovers
from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import ConflictError, InputError, RestoreError, WorksnapError
from worksnap.history import CHECKPOINT, Frame, Sessions, checkpoint_target, undo_target
from worksnap.ignore import ignore_checker
from worksnap.lock import StoreLock
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Root, ancestors
from worksnap.plan import Plan, plan_restore, select_paths
from worksnap.progress import Reporter
from worksnap.store import Store
from worksnap.storedir import KIB, StoreDir


class ApplyPlan(Protocol):
    """`apply.apply_plan`: carries out a plan under a root; stops at the first failure."""

    def __call__(
        self,
        root: str,
        plan: Plan,
        read_object: Callable[[str], bytes],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Result:
        """Returns what was done, and where and why it stopped."""
        ...


class Journal(msgspec.Struct, frozen=True, kw_only=True):
    """The store's journal, present while a restore runs: what to roll back to."""

    target: str
    pre_restore: str
    pid: int
    host: str


class Restorer:
    """Restores, undo/redo and recovery for one workspace.

    Args:
        root: the workspace root.
        store: objects (read and verified) and snapshots.
        files: the store's directory (its lock and journal).
        capture: captures the current state.
        catalog: loads and saves snapshots.
        sessions: undo/redo stacks.
        report: where progress goes.
        apply_plan: carries out a plan (`apply.apply_plan`; tests wrap it to inject faults).
    """

    def __init__(
        self,
        root: Root,
        store: Store,
        *,
        files: StoreDir,
        capture: Capture,
        catalog: Catalog,
        sessions: Sessions,
        report: Reporter,
        apply_plan: ApplyPlan = apply_plan,
    ) -> None:
        self._root = root
        self._store = store
        self._files = files
        self._paths = files.paths
        self._capture = capture
        self._catalog = catalog
        self._sessions = sessions
        self._report = report
        self._apply_plan = apply_plan

    # -- planning -------------------------------------------------------------

    def plan(
        self,
        target: Manifest,
        *,
        paths: Sequence[str | os.PathLike[str]] | None,
        session: str,
    ) -> Plan:
        """Previews what restoring `target` would change; writes nothing but the stat cache."""
        self.recover_if_interrupted(session)  # never preview a half-restored tree
        selected = self._selection(paths)
        current = self._capture.capture(store_objects=False)
        return self._plan(current, self._full_target(current, target, session), selected)

    def _selection(
        self, paths: Sequence[str | os.PathLike[str]] | None
    ) -> builtins.list[str] | None:
        return None if paths is None else [self._root.named(p) for p in paths]

    def _full_target(self, current: Manifest, target: Manifest, session: str) -> Manifest:
        """Returns the whole tree a restore of `target` aims at (checkpoints are partial)."""
        if target.kind == CHECKPOINT:
            return checkpoint_target(current, self._catalog.later_checkpoints(target, session))
        return target

    def _plan(
        self, current: Manifest, target: Manifest, selected: builtins.list[str] | None = None
    ) -> Plan:
        gitignores: dict[str, bytes] = {}
        for entry in target.entries:
            if not entry.path.endswith(".gitignore"):
                continue  # the cheap test first: this loop sees every entry
            directory, _, name = entry.path.rpartition("/")
            if name == ".gitignore" and entry.type == "file" and entry.hash is not None:
                gitignores[directory] = self._store.read(entry.hash)
        ignored = ignore_checker(self._capture.rules(), gitignores)
        plan = plan_restore(current, target, ignored_by_target=ignored)
        return plan if selected is None else select_paths(plan, selected)

    # -- restoring ------------------------------------------------------------

    def restore(
        self, ref: str, *, paths: Sequence[str | os.PathLike[str]] | None, session: str
    ) -> Result:
        """Restores the snapshot `ref` names; the tree is walked once (see `Workspace.restore`)."""
        target = self._catalog.load(ref, session)
        selected = self._selection(paths)
        return self._restore(
            lambda current: target, kind="pre-restore", selected=selected, session=session
        )

    def _restore(
        self,
        choose: Callable[[Manifest], Manifest],
        *,
        kind: str,
        session: str,
        selected: builtins.list[str] | None = None,
        then: Callable[[Result], None] | None = None,
    ) -> Result:
        """Captures the current state once, plans to `choose(current)`, and applies.

        `choose` and `then` (given the result) run under the exclusive lock, so
        session state they read and write cannot change under them.
        """
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with StoreLock(self._files, exclusive=True):
            pre = self._capture.capture(store_objects=True)
            plan = self._plan(pre, self._full_target(pre, choose(pre), session), selected)
            if plan.changes:
                pre = msgspec.structs.replace(pre, kind=kind, session=session)
                result = self._run(plan, pre, session)
            else:
                result = Result(target=plan.target.id)
            if then is not None:
                then(result)
            return result

    def apply(self, plan: Plan, *, kind: str, session: str) -> Result:
        """Carries out a plan made earlier (see `Workspace.apply`).

        Raises:
            ConflictError: a path the plan touches changed since the plan was made.
            ObjectError: an object the plan needs is missing or damaged.
        """
        if not plan.changes:
            return Result(target=plan.target.id)
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with StoreLock(self._files, exclusive=True):
            pre = self._capture.capture(store_objects=True)
            pre = msgspec.structs.replace(pre, kind=kind, session=session)
            check_unchanged(plan, pre)
            return self._run(plan, pre, session)

    def _run(self, plan: Plan, pre: Manifest, session: str) -> Result:
        """Applies `plan` from state `pre` (the lock is held): verify, record, journal, apply."""
        for change in plan.changes:
            if change.entry is not None and change.entry.hash is not None:
                self._store.read(change.entry.hash)
        self._catalog.save(pre, session)
        journal = self._paths.journal
        self._files.write(
            journal,
            msgspec.json.encode(
                Journal(
                    target=plan.target.id,
                    pre_restore=pre.id,
                    pid=os.getpid(),
                    host=socket.gethostname(),
                )
            ),
        )
        try:
            result = self._apply_plan(
                self._root.path,
                plan,
                self._store.read,
                progress=lambda done, total: self._report("apply", done, total),
            )
        except BaseException as exc:
            # Interrupted (Ctrl-C, a bug): undo now rather than at the next command.
            failed = Result(target=plan.target.id, error=f"interrupted: {exc!r}")
            self._roll_back(pre, failed, plan.target)
            self._remove_journal()
            raise
        result.pre_restore = pre.id
        if not result.ok:
            self._roll_back(pre, result, plan.target)
        self._remove_journal()
        # The stat cache stays: every file apply writes is a new inode (temp file renamed
        # into place), so no cached digest can be taken for it.
        return result

    def _roll_back(self, pre: Manifest, result: Result, target: Manifest | None) -> Result:
        """Returns the workspace to `pre` after a failed apply (the lock is held).

        Returns:
            What the rollback changed.

        Raises:
            RestoreError: the rollback failed too (the journal stays for `recover`).
        """
        self._capture.forget_stat_table()  # the failed apply rewrote files
        dirs = [*pre.dirs, *(target.dirs if target is not None else ())]
        remove_leftovers(self._root.path, dirs)
        back = self._apply_plan(
            self._root.path,
            self._plan(self._capture.capture(store_objects=False), pre),
            self._store.read,
        )
        if not back.ok:
            raise RestoreError(
                f"restore failed ({result.error}) and so did the rollback ({back.error}); "
                f"the pre-restore snapshot {pre.id} holds the earlier state "
                "(run `worksnap recover` to try again)"
            )
        result.rolled_back = True
        return back

    # -- recovery -------------------------------------------------------------

    def recover_if_interrupted(self, session: str) -> Result | None:
        """Finishes the rollback of a restore that was killed part-way, if there was one."""
        if self._files.lstat(self._paths.journal) is None:
            return None
        return self.recover(session)

    def recover(self, session: str) -> Result | None:
        """Rolls back an interrupted restore to its pre-restore snapshot.

        Returns:
            The rollback's result, or None when no restore was interrupted.
        """
        journal = self._paths.journal
        if self._files.lstat(journal) is None:
            return None  # checked again under the lock: this only spares a missing store
        with StoreLock(self._files, exclusive=True):
            try:
                record = msgspec.json.decode(
                    self._files.read(journal, limit=64 * KIB), type=Journal
                )
            except FileNotFoundError:
                return None  # another process finished it while we waited for the lock
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                raise RestoreError(f"journal {journal} is damaged ({exc}); remove it") from None
            pre = self._catalog.load(record.pre_restore, session)
            try:
                target: Manifest | None = self._catalog.load(record.target, session)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            back = self._roll_back(pre, Result(target=record.target, error="interrupted"), target)
            self._remove_journal()
            return back

    def _remove_journal(self) -> None:
        """Removes the journal durably: once a restore is done, it must not come back."""
        self._files.unlink(self._paths.journal)
        self._files.fsync(self._files.path)

    # -- undo and redo --------------------------------------------------------

    def undo(self, session: str) -> Result:
        """Restores the newest snapshot of the session whose state differs from the current one.

        Raises:
            InputError: there is nothing to undo.
        """
        chosen: builtins.list[str] = []

        def choose(current: Manifest) -> Manifest:
            state = self._sessions.load(session)
            target_id = undo_target(self._catalog.list(session), current.tree, state)
            if target_id is None:
                raise InputError(f"nothing to undo in session {session!r}")
            chosen.append(target_id)
            return self._catalog.load(target_id, session)

        def record(result: Result) -> None:
            if result.ok and result.pre_restore is not None:
                state = self._sessions.load(session)
                state.redo.append(Frame(chosen[0], result.pre_restore))
                self._sessions.save(session, state)

        return self._restore(choose, kind="undo", then=record, session=session)

    def redo(self, session: str) -> Result:
        """Re-applies what the last `undo` undid (the state it left).

        Raises:
            InputError: nothing was undone, or a new snapshot cleared the redo stack.
        """
        nothing = InputError(
            f"nothing to redo in session {session!r} "
            "(only an undo can be redone, and a new snapshot clears redo)"
        )
        if not self._sessions.load(session).redo:
            raise nothing  # answered before the tree is walked; checked again under the lock
        frames: builtins.list[Frame] = []

        def choose(current: Manifest) -> Manifest:
            state = self._sessions.load(session)
            if not state.redo:
                raise nothing
            frames.append(state.redo[-1])
            return self._catalog.load(frames[0].left, session)

        def record(result: Result) -> None:
            state = self._sessions.load(session)
            if result.ok and state.redo and state.redo[-1] == frames[0]:
                state.redo.pop()
                self._sessions.save(session, state)

        return self._restore(choose, kind="redo", then=record, session=session)


def check_unchanged(plan: Plan, now: Manifest) -> None:
    """Refuses to apply a plan if anything it touches, or any directory above, changed since.

    A change above a touched path counts: a directory swapped for a symlink
    between plan and apply must stop the restore, not redirect it.

    Raises:
        ConflictError: names the first such path.
    """
    seen: dict[str, Entry | None] = dict.fromkeys(plan.current.dirs)
    seen.update((e.path, e) for e in plan.current.entries)
    present: dict[str, Entry | None] = dict.fromkeys(now.dirs)
    present.update((e.path, e) for e in now.entries)
    touched = {change.path for change in plan.changes}
    above = {a for path in touched for a in ancestors(path.rpartition("/")[0])}
    for path in sorted(seen.keys() | present.keys()):
        if (path in seen, seen.get(path)) != (path in present, present.get(path)) and (
            path in above or any(a in touched for a in ancestors(path))
        ):
            raise ConflictError(path)
