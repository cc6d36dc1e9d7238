"""Transaction: a restore that is all or nothing, and undoable; undo, redo and recovery.

plan (pure, see plan.py) -> under the exclusive lock: capture the current state once
(both what is planned from and the `pre-restore` snapshot), verify every object the
plan writes, save the pre-restore snapshot, write the journal, apply (apply.py). On
a failure the workspace is rolled back to the pre-restore snapshot; if the process
dies, the journal stays and the next command rolls back (`recover`).
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import socket
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from worksnap.apply import Result, apply_plan, remove_leftovers
from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import ConflictError, InputError, RestoreError, WorksnapError
from worksnap.exclusion import compile_rules
from worksnap.fsio import fsync_dir, write_atomic
from worksnap.history import CHECKPOINT, Frame, Sessions, checkpoint_target, undo_target
from worksnap.ignore import ignore_checker
from worksnap.layout import StorePaths
from worksnap.lock import StoreLock
from worksnap.manifest import Entry, Manifest, tree_digest
from worksnap.paths import Root, ancestors, fs_path, is_under
from worksnap.plan import Op, Plan, plan_restore, select_paths, unprotected
from worksnap.progress import Reporter
from worksnap.store import Store


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
        paths: the store's files (its lock and journal).
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
        paths: StorePaths,
        capture: Capture,
        catalog: Catalog,
        sessions: Sessions,
        report: Reporter,
        apply_plan: ApplyPlan = apply_plan,
    ) -> None:
        self._root = root
        self._store = store
        self._paths = paths
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
        current = self._capture.capture(store_objects=False, max_file_bytes=self._cap(target))
        return self._plan(current, self._full_target(current, target, session), selected)

    def _cap(self, target: Manifest) -> int:
        """The size cap a restore of `target` captures with: never below the target's own.

        Else a file the target holds, over the engine's cap now, would be neither
        compared nor restored, nor kept by the pre-restore snapshot for undo.
        """
        return max(self._capture.max_file_bytes, target.max_file_bytes)

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
        # Never touched: what the target's exclusions (paths that appeared since) or the
        # current ones (paths gone since) exclude; what exists and is excluded now was
        # never captured, so the planner leaves it alone already.
        then, now = compile_rules(frozenset(target.exclude)), compile_rules(self._root.exclude)
        plan = plan_restore(
            current,
            target,
            ignored_by_target=lambda p, d: then.covers(p, is_dir=d) or ignored(p, d),
        )
        kept = [
            c
            for c in plan.changes
            if c.op is not Op.DELETED or not now.covers(c.path, is_dir=c.entry is None)
        ]
        plan = dataclasses.replace(plan, changes=kept)
        if selected is not None:
            _check_selected(selected, current, target)
            plan = select_paths(plan, selected)
        rows = unprotected(plan.current, plan.target, self._probe)
        if selected is not None:
            rows = [r for r in rows if any(is_under(r.path, p) for p in selected)]
        return dataclasses.replace(plan, unprotected=rows)

    def _probe(self, rel: str) -> tuple[int, int] | None:
        """A large file's size and newest time now (None: gone); for `plan.unprotected`."""
        try:
            st = os.lstat(os.path.join(self._root.path, os.fsdecode(fs_path(rel))))
        except OSError:
            return None
        return st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)

    # -- restoring ------------------------------------------------------------

    def restore(
        self, ref: str, *, paths: Sequence[str | os.PathLike[str]] | None, session: str
    ) -> Result:
        """Restores the snapshot `ref` names; the tree is walked once (see `Workspace.restore`)."""
        target = self._catalog.load(ref, session)
        selected = self._selection(paths)
        return self._restore(
            lambda current: target,
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
        return self._plan(current, self._full_target(current, target, session), selected)

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
        self._catalog.upgrade_if_needed()  # a format 1 store is migrated before any write
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with StoreLock(self._paths.dir, exclusive=True):
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
        self._catalog.upgrade_if_needed()
        self.recover_if_interrupted(session)
        self._store.bind(self._root.path)
        with StoreLock(self._paths.dir, exclusive=True):
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
        for change in plan.changes:
            if change.entry is not None and change.entry.hash is not None:
                self._store.read(change.entry.hash)
        pre = self._catalog.save(pre, session, built=self._capture.stored_trees(pre))
        journal = self._paths.journal
        write_atomic(
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
            _remove_journal(journal)
            raise
        result.pre_restore = pre.id
        if not result.ok:
            self._roll_back(pre, result, plan.target)
        _remove_journal(journal)
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
        now = self._capture.capture(store_objects=False, max_file_bytes=self._cap(pre))
        back = self._apply_plan(self._root.path, self._plan(now, pre), self._store.read)
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
        if not os.path.exists(self._paths.journal):
            return None
        return self.recover(session)

    def recover(self, session: str) -> Result | None:
        """Rolls back an interrupted restore to its pre-restore snapshot.

        Returns:
            The rollback's result, or None when no restore was interrupted.
        """
        journal = self._paths.journal
        if not os.path.exists(journal):
            return None  # checked again under the lock: this only spares a missing store
        self._catalog.upgrade_if_needed()
        with StoreLock(self._paths.dir, exclusive=True):
            record = _load_journal(journal)
            if record is None:
                return None  # another process finished it while we waited for the lock
            pre = self._catalog.load(record.pre_restore, session)
            try:
                target: Manifest | None = self._catalog.load(record.target, session)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            back = self._roll_back(pre, Result(target=record.target, error="interrupted"), target)
            _remove_journal(journal)
            return back

    def _refuse_if_interrupted(self) -> None:
        """A preview never changes the tree: with a restore to recover, it says so instead.

        Raises:
            InputError: a journal is there.
        """
        if os.path.exists(self._paths.journal):
            raise InputError(
                "a restore was interrupted and the tree may be half-restored: "
                "run `worksnap recover` first (`worksnap recover --dry-run` shows what it does)"
            )

    def plan_recover(self, session: str) -> Plan | None:
        """Previews what `recover` would change (None: no restore was interrupted)."""
        record = _load_journal(self._paths.journal)
        if record is None:
            return None
        pre = self._catalog.load(record.pre_restore, session)
        now = self._capture.capture(store_objects=False, max_file_bytes=self._cap(pre))
        return self._plan(now, pre)

    # -- undo and redo --------------------------------------------------------

    def _undo_choice(self, session: str) -> Callable[[Manifest], Manifest]:
        """Picks what undo restores, given the current state (see `history.undo_target`)."""
        if not self._store.exists():
            raise InputError(f"nothing to undo in session {session!r} (no snapshots yet)")

        def choose(current: Manifest) -> Manifest:
            state = self._sessions.load(session)
            history = self._catalog.list(session)
            # A store not migrated yet holds format 1 digests: compare in that form too.
            legacy = self._catalog.has_legacy()
            flat = tree_digest(current.entries, current.dirs) if legacy else None
            target_id = undo_target(history, current.tree, state, flat_tree=flat)
            if target_id is None:
                raise InputError(f"nothing to undo in session {session!r}")
            return self._catalog.load(target_id, session)

        return choose

    def plan_undo(self, session: str) -> Plan:
        """Previews what `undo` would change (nothing is written but the stat cache).

        Raises:
            InputError: there is nothing to undo.
        """
        self._refuse_if_interrupted()
        return self._choose_and_plan(
            self._undo_choice(session), store_objects=False, session=session
        )

    def undo(self, session: str, *, expected: Plan | None = None) -> Result:
        """Restores the newest snapshot of the session whose state differs from the current one.

        With `expected` (from `plan_undo`, confirmed by a person), applies that very plan.

        Raises:
            InputError: there is nothing to undo, or it would now go elsewhere than `expected`.
            ConflictError: a path `expected` touches changed since.
        """
        pick = self._undo_choice(session)
        chosen: builtins.list[str] = []

        def choose(current: Manifest) -> Manifest:
            target = pick(current)
            chosen.append(target.id)
            return target

        def record(result: Result) -> None:
            if result.ok and result.pre_restore is not None:
                state = self._sessions.load(session)
                state.redo.append(Frame(chosen[0], result.pre_restore))
                self._sessions.save(session, state)

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
        self._refuse_if_interrupted()
        return self._choose_and_plan(
            self._redo_choice(session, []), store_objects=False, session=session
        )

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


def _load_journal(journal: str) -> Journal | None:
    """Reads the journal (None: there is none).

    Raises:
        RestoreError: it is damaged.
    """
    try:
        with open(journal, "rb") as f:
            return msgspec.json.decode(f.read(), type=Journal)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, RecursionError) as exc:
        raise RestoreError(f"journal {journal} is damaged ({exc}); remove it") from None


def _remove_journal(journal: str) -> None:
    """Removes the journal durably: once a restore is done, it must not come back."""
    os.unlink(journal)
    fsync_dir(os.path.dirname(journal))


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


def _check_selected(selected: builtins.list[str], current: Manifest, target: Manifest) -> None:
    """Refuses a path that neither the target nor the workspace has (a typo restores nothing).

    Raises:
        InputError: names the first such path.
    """
    for wanted in selected:
        for state in (target, current):
            if _holds(state, wanted):
                break
        else:
            raise InputError(
                f"{wanted!r} is not in snapshot {target.id}, nor in the workspace "
                "(nothing to restore there)"
            )


def _holds(state: Manifest, wanted: str) -> bool:
    """True when `state` has something at or below `wanted`, or left out what holds it."""
    kept = ([e.path for e in state.entries], state.dirs)
    left_out = (state.large, state.ignored, state.excluded)
    return any(is_under(path, wanted) for names in (*kept, *left_out) for path in names) or any(
        is_under(wanted, path) for names in left_out for path in names
    )
