"""Transaction: a restore that is all or nothing, and undoable; undo, redo and recovery.

plan (pure, see plan.py) -> under the exclusive lock: capture the current state once
(both what is planned from and the `pre-restore` snapshot), verify every object the
plan writes, save the pre-restore snapshot, write the journal (with every path the
plan touches), apply (apply.py). On a failure the touched paths are rolled back to
the pre-restore snapshot; if the process dies, the journal stays.

Recovery never destroys bytes that are not in the store: it first stores the tree as
it is (a `pre-recover` snapshot, which `undo` restores), then rolls back only the
paths the journal lists, so edits made since the restore was killed stay where they
are. Commands that change the tree or record it whole (restore, rewind, undo, redo,
snapshot, recover) recover first; `plan` refuses to preview a half-restored tree and
says to run `worksnap recover`; other commands only read, and the CLI notes the
pending recovery.
"""

from __future__ import annotations

import builtins
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import msgspec

from worksnap.apply import Result, apply_plan, remove_leftovers
from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import (
    ChangedError,
    ConflictError,
    InputError,
    RecoveryError,
    RestoreError,
    StoreError,
    WorksnapError,
)
from worksnap.frames import MAX_UNPACKED
from worksnap.history import CHECKPOINT, Frame, Sessions, checkpoint_target, undo_target
from worksnap.ignore import ignore_checker
from worksnap.lock import Locks
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Root, ancestors
from worksnap.plan import Op, Plan, plan_restore, rollback_target, select_paths
from worksnap.progress import Reporter
from worksnap.store import Store
from worksnap.storedir import StoreDir

PRE_RECOVER = "pre-recover"
"""Kind of the snapshot a recovery takes of the tree before it rolls anything back."""


class ApplyPlan(Protocol):
    """`apply.apply_plan`: carries out a plan under a root; stops at the first failure."""

    def __call__(
        self,
        root: str,
        plan: Plan,
        read_object: Callable[[str], Iterable[bytes]],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Result:
        """Returns what was done, and where and why it stopped."""
        ...


class Journal(msgspec.Struct, frozen=True, kw_only=True):
    """The store's journal, present while a restore runs: what to roll back, and to what."""

    target: str
    pre_restore: str
    pid: int
    host: str
    session: str | None = None
    """The session of the restore (None: a journal written before it was recorded)."""
    paths: list[str] | None = None
    """Every path the restore's plan touches (None: written before they were recorded,
    and a recovery then rolls back every path that differs)."""


def _purpose(kind: str) -> str:
    """What a restore of `kind` says it is doing to a process waiting for the store."""
    return "restore" if kind == "pre-restore" else kind


def journal_snapshots(files: StoreDir) -> set[str]:
    """The snapshots a pending journal needs (a recovery rolls back to them): gc keeps them."""
    try:
        record = msgspec.json.decode(
            files.read(files.paths.journal, limit=MAX_UNPACKED), type=Journal
        )
    except FileNotFoundError:
        return set()
    except (OSError, msgspec.DecodeError, RecursionError):
        return set()  # damaged: only `recover --discard` can act on it, and needs neither
    return {record.pre_restore, record.target}


_DISCARD = (
    "run `worksnap recover --discard` to keep the tree as it is (a snapshot of it is "
    "taken first) and drop the journal"
)


class Restorer:
    """Restores, undo/redo and recovery for one workspace.

    Args:
        root: the workspace root.
        store: objects (read and verified) and snapshots.
        files: the store's directory (its journal).
        locks: the store's locks.
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
        locks: Locks,
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
        self._locks = locks
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
        """Previews what restoring `target` would change; writes nothing but the stat cache.

        Raises:
            RecoveryError: a restore was interrupted: the tree may be half-restored,
                and a preview must neither show that nor change it.
        """
        pending = self.pending()
        if pending is not None:
            raise RecoveryError(f"{pending}; a plan would describe a half-restored tree")
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
            lambda current: self._still_stored(target),
            kind="pre-restore",
            selected=selected,
            session=session,
        )

    def _still_stored(self, target: Manifest) -> Manifest:
        """Returns `target` if it is still in the store (the lock is held).

        It was loaded before the lock was taken: a gc may have dropped it, and its
        objects, while this restore waited.

        Raises:
            ChangedError: it is gone; nothing was changed.
        """
        if self._store.manifest_stamp(target.id) is None:
            raise ChangedError(
                f"snapshot {target.id} was removed from the store (by a gc) while this "
                "command waited for it; nothing was changed underneath: retry"
            )
        return target

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
        with self._locks.exclusive(_purpose(kind)):
            pre = self._capture.capture(store_objects=True)
            plan = self._plan(pre, self._full_target(pre, choose(pre), session), selected)
            if plan.changes and len(plan.blocked) < len(plan.changes):
                pre = msgspec.structs.replace(pre, kind=kind, session=session)
                result = self._run(plan, pre, session)
            else:
                result = Result(target=plan.target.id, blocked=[c.path for c in plan.blocked])
            if then is not None:
                then(result)
            return result

    def apply(self, plan: Plan, *, kind: str, session: str) -> Result:
        """Carries out a plan made earlier (see `Workspace.apply`).

        Raises:
            ConflictError: a path the plan touches changed since the plan was made.
            ChangedError: the plan's target left the store since (a gc).
            ObjectError: an object the plan needs is missing or damaged.
        """
        if len(plan.blocked) == len(plan.changes):
            return Result(target=plan.target.id, blocked=[c.path for c in plan.blocked])
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with self._locks.exclusive(_purpose(kind)):
            self._still_stored(plan.target)
            pre = self._capture.capture(store_objects=True)
            pre = msgspec.structs.replace(pre, kind=kind, session=session)
            check_unchanged(plan, pre)
            return self._run(plan, pre, session)

    def _run(self, plan: Plan, pre: Manifest, session: str) -> Result:
        """Applies `plan` from state `pre` (the lock is held): verify, record, journal, apply."""
        for change in plan.changes:
            if change.entry is not None and change.entry.hash is not None:
                self._store.check(change.entry.hash)  # a piece at a time: any size
        self._catalog.save(pre, session)
        touched = [c.path for c in plan.changes]
        journal = Journal(
            target=plan.target.id,
            pre_restore=pre.id,
            pid=os.getpid(),
            host=socket.gethostname(),
            session=session,
            paths=touched,
        )
        self._files.write(self._paths.journal, msgspec.json.encode(journal))
        try:
            result = self._apply_plan(
                self._root.path,
                plan,
                self._store.read_chunks,
                progress=lambda done, total: self._report("apply", done, total),
            )
        except BaseException as exc:
            # Interrupted (Ctrl-C, a bug): undo now rather than at the next command.
            failed = Result(target=plan.target.id, error=f"interrupted: {exc!r}")
            self._roll_back(pre, None, failed, plan.target, session=session)
            self._remove_journal()
            raise
        result.pre_restore = pre.id
        if not result.ok:
            self._roll_back(pre, None, result, plan.target, session=session)
        self._remove_journal()
        # The stat cache stays: every file apply writes is a new inode (temp file renamed
        # into place), so no cached digest can be taken for it.
        return result

    def _roll_back(
        self,
        pre: Manifest,
        touched: builtins.list[str] | None,
        result: Result,
        target: Manifest | None,
        *,
        session: str,
        recovering: bool = False,
    ) -> Result:
        """Sets the workspace back to `pre` after a failed apply (the lock is held).

        Bytes that are in no snapshot are never destroyed: the tree as it is is stored
        first (a `pre-recover` snapshot, which `undo` restores) whenever the rollback
        would overwrite or remove something neither `pre` nor `target` holds.

        Args:
            pre: the state before the restore.
            touched: only these paths are set back (a recovery: the paths the journal
                lists; edits made since the restore was killed stay); None: all.
            result: the failed restore's result (marked rolled back on success).
            target: the snapshot it restored, if known (its directories may hold
                temp files the restore left, and its bytes are stored).
            session: the session the kept snapshot belongs to.
            recovering: keep the tree as it is whenever anything changes (a recovery
                runs long after the restore, and its undo must bring the tree back).

        Returns:
            What the rollback changed (its `pre_restore`: the snapshot kept, if any).

        Raises:
            RestoreError: the rollback failed too (the journal stays for `recover`).
        """
        self._capture.forget_stat_table()  # the failed apply rewrote files
        dirs = [*pre.dirs, *(target.dirs if target is not None else ())]
        remove_leftovers(self._root.path, dirs)
        # Nothing is stored unless it must be: a rollback often follows a full disk.
        current = self._capture.capture(store_objects=recovering)
        aim = pre if touched is None else rollback_target(current, pre, touched)
        plan = self._plan(current, aim)
        kept: str | None = None
        if plan.changes and (recovering or _destroys_unstored(plan, (pre, target))):
            if not recovering:
                current = self._capture.capture(store_objects=True)
                plan = self._plan(current, aim)
            kept_state = msgspec.structs.replace(current, kind=PRE_RECOVER, session=session)
            self._catalog.save(kept_state, session)
            kept = kept_state.id
        back = self._apply_plan(self._root.path, plan, self._store.read_chunks)
        back.pre_restore = kept
        if not back.ok:
            raise RestoreError(
                f"restore failed ({result.error}) and so did the rollback ({back.error}); "
                f"the pre-restore snapshot {pre.id} holds the earlier state "
                "(run `worksnap recover` to try again)"
            )
        result.rolled_back = True
        return back

    # -- recovery -------------------------------------------------------------

    def pending(self) -> str | None:
        """One line saying that a restore was interrupted and what to run, or None."""
        if self._files.lstat(self._paths.journal) is None:
            return None
        return (
            f"a restore was interrupted (journal {self._paths.journal}): the workspace may be "
            "partly restored; run `worksnap recover` (it keeps the tree as it is in a snapshot "
            "first, for `worksnap undo`)"
        )

    def recover_if_interrupted(self, session: str) -> Result | None:
        """Finishes the rollback of a restore that was killed part-way, if there was one."""
        if self._files.lstat(self._paths.journal) is None:
            return None
        return self.recover(session)

    def recover(self, session: str, *, discard: bool = False) -> Result | None:
        """Rolls back an interrupted restore; the tree as it was is kept as a snapshot first.

        Args:
            session: the session to record the kept snapshot in, if the journal
                does not name the restore's own.
            discard: roll nothing back: keep the tree as it is (stored as a snapshot)
                and drop the journal. For a journal that cannot be acted on.

        Returns:
            The rollback's result (`pre_restore`: the snapshot of the tree before it,
            None when nothing had to change), or None when no restore was interrupted.

        Raises:
            RecoveryError: the journal is damaged, or names a snapshot that is gone:
                the message says how to clear it (`--discard`).
        """
        journal = self._paths.journal
        if self._files.lstat(journal) is None:
            return None  # checked again under the lock: this only spares a missing store
        with self._locks.exclusive("recover"):
            try:
                record: Journal | None = msgspec.json.decode(
                    self._files.read(journal, limit=MAX_UNPACKED), type=Journal
                )
            except FileNotFoundError:
                return None  # another process finished it while we waited for the lock
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                if not discard:
                    raise RecoveryError(
                        f"the journal of an interrupted restore ({journal}) is damaged "
                        f"({exc}); the workspace may be partly restored: {_DISCARD}"
                    ) from None
                record = None
            keep = record.session if record is not None and record.session else session
            if discard:
                return self._discard(record, keep)
            assert record is not None
            try:
                pre = self._catalog.load(record.pre_restore, keep)
            except (InputError, StoreError) as exc:
                raise RecoveryError(
                    f"an interrupted restore left a journal ({journal}) that rolls back to "
                    f"snapshot {record.pre_restore}, which cannot be loaded ({exc}); the "
                    f"workspace may be partly restored: {_DISCARD}"
                ) from None
            try:
                target: Manifest | None = self._catalog.load(record.target, keep)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            interrupted = Result(target=record.target, error="interrupted")
            back = self._roll_back(
                pre, record.paths, interrupted, target, session=keep, recovering=True
            )
            self._remove_journal()
            return back

    def _discard(self, record: Journal | None, session: str) -> Result:
        """Drops the journal, the tree left as it is and stored as a snapshot first."""
        self._store.bind(self._root.path)
        current = self._capture.capture(store_objects=True)
        kept = msgspec.structs.replace(current, kind=PRE_RECOVER, session=session)
        self._catalog.save(kept, session)
        self._remove_journal()
        target = record.target if record is not None else ""
        return Result(target=target, pre_restore=kept.id)

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


def _destroys_unstored(plan: Plan, stored: Iterable[Manifest | None]) -> bool:
    """True when a plan overwrites or removes a file or link that no `stored` manifest holds.

    Only such a file's bytes would be lost: anything else is in a snapshot.
    """
    known = {(e.path, e) for m in stored if m is not None for e in m.entries}
    now = {e.path: e for e in plan.current.entries}
    for change in plan.changes:
        if change.op is Op.BLOCKED:
            continue
        entry = now.get(change.path)
        if entry is not None and (change.path, entry) not in known:
            return True
    return False


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
