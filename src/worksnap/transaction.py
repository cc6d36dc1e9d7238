"""Transaction: a restore that is all or nothing, and undoable; undo, redo and recovery.

plan (pure, see plan.py) -> under the exclusive lock: capture the current state once
(both what is planned from and the `pre-restore` snapshot), verify every object the
plan writes, save the pre-restore snapshot, write the journal (with every path the
plan touches), apply (apply.py). On a failure the touched paths are rolled back to
the pre-restore snapshot; if the process dies, the journal stays.

Recovery never destroys bytes that are not in the store: it first stores the tree as
it is (a `pre-recover` snapshot, which `undo` restores), then rolls back only the
paths the journal lists (journal.py), so edits made since the restore was killed stay.
Commands that change the tree or record it whole recover first; previews refuse.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Callable, Sequence

import msgspec

from worksnap.apply import ApplyPlan, Result, apply_plan, dir_modes, remove_leftovers, verified
from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.differences import LastDifferences
from worksnap.errors import InputError, Interrupted, RecoveryError, RestoreError, WorksnapError
from worksnap.exclusion import by_rule, compile_rules
from worksnap.history import CHECKPOINT, Frame, Sessions, checkpoint_rewind, undo_target
from worksnap.journal import (
    Journal,
    on_interrupt,
    pending,
    read_journal,
    refuse_preview,
    remove_journal,
    rollback_snapshot,
    rolled_back_first,
)
from worksnap.lock import Locks
from worksnap.manifest import Manifest
from worksnap.paths import Root, is_under
from worksnap.plan import (
    Change,
    Op,
    Plan,
    check_selected,
    check_unchanged,
    destroys_unstored,
    keep_standing,
    plan_restore,
    rollback_target,
    select_paths,
    target_ignores,
    unprotected,
)
from worksnap.progress import Reporter
from worksnap.store import Store
from worksnap.storedir import StoreDir

PRE_RECOVER = "pre-recover"
"""Kind of the snapshot a recovery takes of the tree before it rolls anything back."""


def _purpose(kind: str) -> str:
    return "restore" if kind == "pre-restore" else kind  # (to a process waiting for the store)


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
        self._nodes = catalog.nodes  # the trees plans compare, read once
        self._differences = LastDifferences(self._nodes)
        self._files, self._paths = files, files.paths
        self._locks = locks
        self._capture = capture
        self._catalog = catalog
        self._sessions = sessions
        self._report = report
        self._apply_plan = apply_plan
        self._changes = 0  # restores and recoveries finished: did one come before a Ctrl-C?

    def _interrupts(self) -> contextlib.AbstractContextManager[None]:  # `on_interrupt`
        return on_interrupt(self._files, lambda: self._changes)

    # -- planning -------------------------------------------------------------

    def plan(
        self,
        target: Manifest,
        *,
        paths: Sequence[str | os.PathLike[str]] | None,
        session: str,
        current: Manifest | None = None,
    ) -> Plan:
        """Previews what restoring `target` would change; writes nothing but the stat cache.

        `current`: the tree now, to compare with (`diff`, `status`: never refused, and
        nothing kept for where it runs: `plan.keep_standing`).

        Raises:
            RecoveryPending: a restore was interrupted: never preview a half-restored tree.
        """
        if current is None:
            refuse_preview(self._files)
        here = self._root.here() if current is None else None  # (a comparison: all of it)
        selected = self._root.selection(paths)  # the root named: the whole tree, as no paths
        if current is None or current.max_file_bytes != self._cap(target):
            current = self._capture.capture(store_objects=False, max_file_bytes=self._cap(target))
        plan = self._plan(current, *self._full_target(current, target, session), selected)
        return keep_standing(plan, here)

    def _cap(self, target: Manifest) -> int:
        """The cap a restore of `target` captures with: at least its own (all it holds kept)."""
        return max(self._capture.max_file_bytes, target.max_file_bytes)

    def _full_target(
        self, current: Manifest, target: Manifest, session: str
    ) -> tuple[Manifest, builtins.list[Change], frozenset[str] | None]:
        """The tree a restore of `target` aims at, what it leaves, what its rows are about."""
        if target.kind == CHECKPOINT:  # partial: see `history.checkpoint_rewind`
            return checkpoint_rewind(current, self._catalog.later_checkpoints(target, session))
        return target, [], None

    def _plan(
        self,
        current: Manifest,
        target: Manifest,
        blocked: Sequence[Change] = (),
        known: frozenset[str] | None = None,
        selected: builtins.list[str] | None = None,
    ) -> Plan:
        rules, tracked = self._capture.decided_by()  # as `current` was: no source read again
        # Never touched: what the target's exclusions (paths appeared since) or today's (paths
        # gone since) exclude; what is excluded now was never captured: the planner leaves it.
        then, now = compile_rules(frozenset(target.exclude)), compile_rules(self._root.exclude)
        ignored = target_ignores(target, rules, tracked, self._capture.read_now, current=current,
                                 root=self._root.path, left=(then, now),
                                 selected=selected)  # fmt: skip
        plan = plan_restore(
            current,
            target,
            ignored_by_target=lambda p, d: then.covers(p, is_dir=d) or ignored(p, d),
            differences=(found := self._differences(current, target)),
            special=lambda p: self._root.special(p) and not now.covers(p, is_dir=False),
            ruled_out=lambda p: by_rule(p, then, now),
        )
        kept = [c for c in plan.changes if (
            c.op is not Op.DELETED or not now.covers(c.path, is_dir=c.entry is None)
        )]  # fmt: skip
        kept = sorted([*kept, *blocked], key=lambda c: c.path) if blocked else kept
        plan = msgspec.structs.replace(plan, changes=kept)
        if selected is not None:
            check_selected(selected, current, target)
            plan = select_paths(plan, selected)
        rows = [r for r in unprotected(current, target, self._root.probe, found.only_then, now) if (
            (known is None or r.path in known)  # a checkpoint's: only what it knows
            and (selected is None or any(is_under(r.path, p) for p in selected))
        )]  # fmt: skip
        return msgspec.structs.replace(plan, unprotected=rows)

    # -- restoring ------------------------------------------------------------

    def restore(
        self, ref: str, *, paths: Sequence[str | os.PathLike[str]] | None, session: str
    ) -> Result:
        """Restores the snapshot `ref` names; the tree is walked once (see `Workspace.restore`)."""
        target = self._catalog.load(ref, session)
        selected = self._root.selection(paths)  # the root named: the whole tree, as no paths
        return self._restore(
            lambda current: self._catalog.still_stored(target),
            kind="pre-restore",
            selected=selected,
            session=session,
            cap=self._cap(target),
        )

    def _choose_and_plan(
        self,
        choose: Callable[[Manifest], Manifest],
        *,
        store_objects: bool,
        session: str,
        selected: builtins.list[str] | None = None,
        cap: int | None = None,
    ) -> Plan:
        """Captures the current state, picks the target from it, and plans.

        The capture is taken again with the target's cap when that is higher (`_cap`);
        `cap`, when the target is known before, spares that second walk.
        """
        current = self._capture.capture(store_objects=store_objects, max_file_bytes=cap)
        target = choose(current)
        if self._cap(target) != current.max_file_bytes:
            current = self._capture.capture(
                store_objects=store_objects, max_file_bytes=self._cap(target)
            )
        plan = self._plan(current, *self._full_target(current, target, session), selected)
        return keep_standing(plan, self._root.here())  # (as git keeps the directory it runs in)

    def _restore(
        self,
        choose: Callable[[Manifest], Manifest],
        *,
        kind: str,
        session: str,
        selected: builtins.list[str] | None = None,
        then: Callable[[Result], None] | None = None,
        expected: Plan | None = None,
        cap: int | None = None,
    ) -> Result:
        """Captures the current state once, plans to `choose(current)`, and applies.

        `choose` and `then` (given the result) run under the exclusive lock, so
        session state they read and write cannot change under them. With `expected`
        (a preview a person confirmed), that very plan is applied, provided the target
        is the same and nothing it touches changed since (else ConflictError).
        """
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with self._interrupts(), self._locks.exclusive(_purpose(kind)):
            if expected is None:
                plan = self._choose_and_plan(
                    choose, store_objects=True, session=session, selected=selected, cap=cap
                )
                pre = plan.current
            else:
                pre = self._capture.capture(
                    store_objects=True, max_file_bytes=expected.current.max_file_bytes
                )
                chosen = choose(pre).id
                if chosen != expected.target.id:
                    raise InputError(
                        f"the workspace changed since the preview: this would now go to "
                        f"snapshot {chosen}, not {expected.target.id}; nothing was changed"
                    )
                check_unchanged(expected, pre)
                plan = expected
            if plan.applies:
                pre = msgspec.structs.replace(pre, kind=kind, session=session)
                result = self._run(plan, pre, session)
            else:
                result = Result.of(plan)
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
        if not plan.applies:
            return Result.of(plan)
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with self._interrupts(), self._locks.exclusive(_purpose(kind)):
            self._catalog.still_stored(plan.target)
            # The cap the plan was made with: else files would move between captured
            # and large, and look changed.
            pre = self._capture.capture(
                store_objects=True, max_file_bytes=plan.current.max_file_bytes
            )
            pre = msgspec.structs.replace(pre, kind=kind, session=session)
            check_unchanged(plan, pre)
            return self._run(plan, pre, session)

    def _run(self, plan: Plan, pre: Manifest, session: str) -> Result:
        """Applies `plan` from state `pre` (the lock is held): verify, record, journal, apply."""
        unchanged = verified(plan, pre, self._store.check, self._capture.stat_record)
        pre = self._catalog.save(pre, session, built=self._capture.trees.stored(pre))
        journal = Journal(target=plan.target.id, pre_restore=pre.id, pid=os.getpid(),
                          host=os.uname().nodename, session=session, kind=pre.kind,
                          paths=[c.path for c in plan.changes],
                          modes=dir_modes(self._root.path, plan))  # fmt: skip
        self._files.write(self._paths.journal, msgspec.json.encode(journal))
        try:
            result = self._apply_plan(
                self._root.path,
                plan,
                self._store.read_chunks,
                progress=lambda done, total: self._report("apply", done, total),
                unchanged=unchanged,
            )
        except BaseException as exc:
            # Interrupted (Ctrl-C, a bug): undo now rather than at the next command.
            ctrl_c = isinstance(exc, KeyboardInterrupt)
            why = "interrupted" if ctrl_c else f"interrupted: {exc!r}"
            failed = Result(target=plan.target.id, error=why)
            try:
                back = self._roll_back(pre, None, failed, plan.target, session=session)
            except RestoreError as error:  # the journal stays, for `recover`
                if ctrl_c:
                    raise Interrupted(str(error)) from None
                raise
            remove_journal(self._files)
            if ctrl_c:  # says how that went (Ctrl-C again stops it too: `on_interrupt`)
                raise Interrupted.rolled_back(back.pre_restore, back.blocked) from None
            raise
        self._changes += 1
        result.pre_restore = pre.id
        if not result.ok:  # after a conflict, what it changed goes back; the edits stay
            touched = result.changed if result.conflict else None
            if touched is not None:  # a kill during the rollback recovers just as much
                journal = msgspec.structs.replace(journal, paths=touched)
                self._files.write(self._paths.journal, msgspec.json.encode(journal))
            back = self._roll_back(pre, touched, result, plan.target, session=session)
            if back.pre_restore:
                result.error = (
                    f"{result.error}; the tree as it was is kept in snapshot {back.pre_restore}"
                )
        remove_journal(self._files)
        return result  # the stat cache stays: no cached digest holds for a new inode

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

        Bytes in no snapshot are never destroyed: the tree as it is is stored first (a
        `pre-recover` snapshot, for `undo`) whenever the rollback would overwrite or remove
        something neither `pre` nor `target` holds, and always when `recovering` (it runs
        long after the restore: its undo must bring the tree back); a path edited after
        that look keeps the edit (`edited`). Only the `touched` paths are set back (a
        recovery: the journal's; an apply stopped by a conflict: those it changed; None:
        all); `target`, if known, says where temp files may be left. Returns what the
        rollback changed (`pre_restore`: the snapshot kept, if any); raises RestoreError
        if it fails too (the journal stays for `recover`).
        """
        self._capture.forget_stat_table()  # the failed apply rewrote files
        remove_leftovers(self._root.path, [*pre.dirs, *(target.dirs if target else ())])
        # Nothing is stored unless it must be: a rollback often follows a full disk. One
        # that sets back some paths only aims at the rest as it is: that is stored.
        # The cap of `pre` (at least the target's): a large file the restore wrote is compared.
        cap, stored = self._cap(pre), recovering or touched is not None
        current = self._capture.capture(store_objects=stored, max_file_bytes=cap)
        aim = pre if touched is None else rollback_target(current, pre, touched)
        plan = self._plan(current, aim)
        kept: str | None = None
        if plan.changes and (recovering or destroys_unstored(plan, (pre, target))):
            if not stored:
                current = self._capture.capture(store_objects=True, max_file_bytes=cap)
                plan = self._plan(current, aim)
            kept_state = msgspec.structs.replace(current, kind=PRE_RECOVER, session=session)
            self._catalog.save(kept_state, session)
            kept = kept_state.id
        modes = record.modes if (record := read_journal(self._files)) is not None else {}
        guard = verified(plan, current, lambda _: None, self._capture.stat_record)
        back = self._apply_plan(self._root.path, plan, self._store.read_chunks, modes=modes,
                                unchanged=guard, keep_edits=True)  # fmt: skip
        back.pre_restore = kept
        if not back.ok:
            raise RestoreError(
                f"restore failed ({result.error}) and so did the rollback ({back.error}); "
                f"the pre-restore snapshot {pre.id} holds the earlier state "
                "(run `worksnap recover` to try again)"
            )
        result.rolled_back, result.blocked = True, sorted({*result.blocked, *back.blocked})
        result.edited, result.left = back.edited, back.blocked  # (edits made while it ran)
        return back

    # -- recovery -------------------------------------------------------------

    def pending(self) -> str | None:
        """One line saying that a restore was interrupted and what to run (or runs), or None."""
        return pending(self._files)

    def recover_if_interrupted(self, session: str, *, say: bool = True) -> Result | None:
        """Before a write, finishes what killed processes left (a migration, a restore).

        A rollback is told (`Reporter.notice`, unless not `say`): no one asked for it.
        """
        self._catalog.upgrade_if_needed()  # a format 1 store (or a migration killed part-way)
        back = None if self._files.lstat(self._paths.journal) is None else self.recover(session)
        if say and back is not None and back.pre_restore:
            self._report.notice("recover", rolled_back_first(len(back.restored), back.pre_restore))
        return back

    def recover(self, session: str, *, discard: bool = False) -> Result | None:
        """Rolls back an interrupted restore; the tree as it was is kept as a snapshot first.

        Args:
            session: the session of the kept snapshot, if the journal names none.
            discard: roll nothing back: keep the tree as it is (stored as a snapshot)
                and drop the journal. For a journal that cannot be acted on.

        Returns:
            The rollback's result (`pre_restore`: the snapshot of the tree before it,
            None when nothing had to change), or None when no restore was interrupted.

        Raises:
            RecoveryError: the journal is damaged, or names a snapshot that is gone:
                the message says how to clear it (`--discard`).
        """
        if self._files.lstat(self._paths.journal) is None:
            return None  # checked again under the lock: this only spares a missing store
        with self._interrupts(), self._locks.exclusive("recover"):
            try:
                record = read_journal(self._files)
            except RecoveryError:
                if not discard:
                    raise
                record = None  # damaged: only discarding can act on it
            else:
                if record is None:
                    return None  # another process finished it while we waited for the lock
            keep = record.session if record is not None and record.session else session
            if discard:
                return self._discard(record, keep)
            assert record is not None
            pre = rollback_snapshot(self._files, record, self._catalog.load, session)
            try:
                target: Manifest | None = self._catalog.load(record.target, keep)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            failed = Result(target=record.target, error="interrupted")
            back = self._roll_back(pre, record.paths, failed, target, session=keep, recovering=True)
            remove_journal(self._files)
            self._changes += 1
            return back

    def _discard(self, record: Journal | None, session: str) -> Result:
        """Drops the journal, the tree left as it is and stored as a snapshot first."""
        self._store.bind(self._root.path)
        current = self._capture.capture(store_objects=True)
        kept = msgspec.structs.replace(current, kind=PRE_RECOVER, session=session)
        self._catalog.save(kept, session)
        remove_journal(self._files)
        return Result(target=record.target if record is not None else "", pre_restore=kept.id)

    def plan_recover(self, session: str) -> Plan | None:
        """Previews what `recover` would change (None: no restore was interrupted).

        Raises:
            RecoveryError: the journal is damaged or names a snapshot that is gone.
        """
        record = read_journal(self._files)
        if record is None:
            return None
        pre = rollback_snapshot(self._files, record, self._catalog.load, session)
        now = self._capture.capture(store_objects=False, max_file_bytes=self._cap(pre))
        aim = pre if record.paths is None else rollback_target(now, pre, record.paths)
        return self._plan(now, aim)

    # -- undo and redo --------------------------------------------------------

    def _undo_choice(self, session: str, skip: str | None = None) -> Callable[[Manifest], Manifest]:
        """Picks what undo restores, given the current state (see `history.undo_target`).

        `skip`: a snapshot never to pick (the half-done tree a recovery just kept).
        """
        if not self._store.exists():
            raise InputError(f"nothing to undo in session {session!r} (no snapshots yet)")

        def choose(current: Manifest) -> Manifest:
            if current.max_file_bytes != self._capture.max_file_bytes:  # a confirmed plan's
                current = self._capture.capture(store_objects=False)  # as its preview chose
            history = [s for s in self._catalog.list(session) if s.id != skip]
            # (load_id is cached: the target found is loaded once)
            target_id = undo_target(
                history, current, self._sessions.load(session), load=self._catalog.load_id,
                flat_tree=self._catalog.legacy_digest(current), checkpoints=True,
                capture=lambda cap: self._capture.capture(store_objects=False, max_file_bytes=cap),
                restores=lambda now, target: self._plan(now, target).applies,
            )  # fmt: skip
            if target_id is None:
                raise InputError(f"nothing to undo in session {session!r}")
            return self._catalog.load(target_id, session)

        return choose

    def plan_undo(self, session: str) -> Plan:
        """Previews what `undo` would change (nothing is written but the stat cache).

        Raises:
            InputError: there is nothing to undo.
        """
        refuse_preview(self._files)
        choose = self._undo_choice(session)
        return self._choose_and_plan(choose, store_objects=False, session=session)

    def undo(self, session: str, *, expected: Plan | None = None) -> Result:
        """Restores the newest snapshot of the session whose state differs from the current one.

        With `expected` (from `plan_undo`, confirmed by a person), applies that very plan.

        Raises:
            InputError: there is nothing to undo, or it would now go elsewhere than `expected`.
            ConflictError: a path `expected` touches changed since.
        """
        killed = read_journal(self._files) if expected is None else None
        undone = killed is not None and killed.kind in ("pre-restore", None)
        recovered = self.recover_if_interrupted(session, say=not undone) if killed else None
        kept = recovered.pre_restore if recovered is not None else None
        if killed and undone and recovered and kept:
            # A killed restore rolled back is the undo; a redo brings its tree back.
            self._sessions.push_redo(killed.session or session, Frame(recovered.target, kept))
            return recovered
        pick = self._undo_choice(session, skip=kept)  # never the tree its recovery kept
        chosen: builtins.list[str] = []

        def choose(current: Manifest) -> Manifest:
            target = pick(current)
            chosen.append(target.id)
            return target

        def record(result: Result) -> None:
            if result.ok and result.pre_restore is not None:
                self._sessions.push_redo(session, Frame(chosen[0], result.pre_restore))

        return self._restore(choose, kind="undo", then=record, session=session, expected=expected)

    def _redo_choice(
        self, session: str, frames: builtins.list[Frame]
    ) -> Callable[[Manifest], Manifest]:
        """Picks what redo restores: the state the last undo left (its frame goes to `frames`)."""
        nothing = InputError(
            f"nothing to redo in session {session!r} "
            "(only an undo can be redone, and a new snapshot clears redo)"
        )
        if not self._store.exists() or not self._sessions.load(session).redo:
            raise nothing  # answered before the tree is walked; checked again under the lock

        def choose(current: Manifest) -> Manifest:
            state = self._sessions.load(session)
            if not state.redo:
                raise nothing
            frames.append(state.redo[-1])
            return self._catalog.load(frames[0].left, session)

        return choose

    def plan_redo(self, session: str) -> Plan:
        """Previews what `redo` would change (nothing is written but the stat cache).

        Raises:
            InputError: nothing was undone, or a new snapshot cleared the redo stack.
        """
        refuse_preview(self._files)
        choose = self._redo_choice(session, [])
        return self._choose_and_plan(choose, store_objects=False, session=session)

    def redo(self, session: str, *, expected: Plan | None = None) -> Result:
        """Re-applies what the last `undo` undid (the state it left).

        With `expected` (from `plan_redo`, confirmed by a person), applies that very plan.

        Raises:
            InputError: nothing was undone, or a new snapshot cleared the redo stack.
            ConflictError: a path `expected` touches changed since.
        """
        frames: builtins.list[Frame] = []
        choose = self._redo_choice(session, frames)

        def record(result: Result) -> None:
            state = self._sessions.load(session)
            if result.ok and state.redo and state.redo[-1] == frames[0]:
                state.redo.pop()
                self._sessions.save(session, state)

        return self._restore(choose, kind="redo", then=record, session=session, expected=expected)
