"""Apply: carry out a plan, in a fixed order, without ever leaving the root.

Order: removals (deepest first), then directories (shallowest first), then
writes (those that free room first). It stops at the first failure. Every
operation walks down from a descriptor on the root one component at a time
with `O_NOFOLLOW`, so a symlinked parent can never lead outside the root, and
a link at the last component is replaced, never written through.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import msgspec
from blake3 import blake3

from worksnap.errors import ObjectError, SnapshotError, rolled_back_words, shown
from worksnap.fsio import DirTree, FileState, file_state, write_all
from worksnap.hash import read_file
from worksnap.manifest import Entry, Manifest, entry_at, size_problem
from worksnap.paths import fs_path, under_any
from worksnap.plan import Change, Op, Plan, Unprotected


class Result(msgspec.Struct):
    """What a restore did.

    Attributes:
        target: id of the snapshot restored.
        restored: paths changed, in the order they were changed.
        not_restored: the path that failed first and every planned path after it.
        blocked: paths the plan marked `Op.BLOCKED`: left as they are (a directory
            holding ignored, large or excluded files where the snapshot has a file).
        error: why it stopped, or None when every change was made.
        rolled_back: a failed restore was undone (the workspace is as before).
        pre_restore: id of the snapshot of the state before the restore (restore it to undo).
        changed: every path a step of the run changed, in order.
        conflict: it stopped at a path changed while it ran (`ChangedMeanwhile`): its
            rollback sets back `changed` only, so that edit, and any other made
            meanwhile, stays.
        edited: a rollback's (`keep_edits`): the paths it found changed while it ran and
            left as they are, the edit kept (what is below them too); also in `blocked`.
        left: after a rollback (`rolled_back`), the paths it left as they are (its own
            `blocked`, `edited` among them): the workspace is as before but for them.
        unprotected: the plan's files in no snapshot (large, or ignored or excluded now),
            left as they are although they may differ from the target (`Plan.unprotected`).
    """

    target: str
    restored: list[str] = msgspec.field(default_factory=list)
    not_restored: list[str] = msgspec.field(default_factory=list)
    blocked: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    rolled_back: bool = False
    pre_restore: str | None = None
    changed: list[str] = msgspec.field(default_factory=list)
    conflict: bool = False
    edited: list[str] = msgspec.field(default_factory=list)
    left: list[str] = msgspec.field(default_factory=list)
    unprotected: list[Unprotected] = msgspec.field(default_factory=list)

    @classmethod
    def of(cls, plan: Plan) -> Result:
        """The result of `plan` before any change: what it blocks and leaves unprotected."""
        blocked = [c.path for c in plan.blocked]
        return cls(target=plan.target.id, blocked=blocked, unprotected=list(plan.unprotected))

    @property
    def ok(self) -> bool:
        """True when every planned change was made."""
        return self.error is None

    def failure(self) -> str:
        """What a failed restore says in every front end: where it stopped, how it left the tree."""
        left = rolled_back_words(self.left) if self.rolled_back else ""
        return f"restore failed at {self.error}; {left or 'the workspace may be partly restored'}"


Step = tuple[str, Change]
"""One action of a run: ("remove" | "mkdir" | "write", the change it serves)."""


def order(plan: Plan) -> list[Step]:
    """Returns the steps `apply_plan` runs: removals, then directories, then writes.

    A change between a directory and a file or symlink takes two steps: the
    removal of what is there, then the making of what the snapshot has. A
    blocked change takes none. Writes that replace a file with a smaller one go
    first, the smallest first, then the rest in path order: on a nearly full disk a
    run stops only where its end state does not fit (a rollback grows back what its
    restore shrank, and shrinks back what it grew).
    """
    changes = [c for c in plan.changes if c.op is not Op.BLOCKED]
    removals = [
        c for c in changes
        if c.op is Op.ADDED or (c.op is Op.MODIFIED and (c.was_dir or c.entry is None))
    ]  # fmt: skip
    removals.sort(key=lambda c: c.path, reverse=True)
    steps: list[Step] = [("remove", c) for c in removals]
    steps += [("mkdir", c) for c in changes if c.entry is None and c.op is not Op.ADDED]
    writes = [c for c in changes if c.entry is not None]
    shrinking = _shrinking(plan.current.entries, writes)
    steps += [("write", c) for c in sorted(shrinking.values(), key=_new_size)]
    steps += [("write", c) for c in writes if c.path not in shrinking]
    return steps


def _shrinking(current: list[Entry], writes: list[Change]) -> dict[str, Change]:
    """The writes that replace a file of `current` (sorted by path) with a smaller one."""
    found: dict[str, Change] = {}
    for change in writes:
        now = entry_at(current, change.path)
        if now is not None and now.type == "file" and (now.size or 0) > _new_size(change):
            found[change.path] = change
    return found


def _new_size(change: Change) -> int:
    entry = change.entry
    return entry.size or 0 if entry is not None and entry.type == "file" else 0


Unchanged = Callable[[str, int, bytes], bool]
"""`unchanged(path, dir_fd, name)`: what is at `path` (`name` in `dir_fd`) is still what
the plan was made from. Asked right before a file or symlink is removed or replaced."""


_IN_THE_WAY = {("mkdir", errno.EEXIST), ("remove", errno.ENOTEMPTY), ("remove", errno.EEXIST)}
"""A directory to make that is there, one to remove that is not empty: changed meanwhile
(a file put where one is removed: `_removed`; one already gone is no change)."""


class ChangedMeanwhile(Exception):
    """A path the restore was about to remove or replace changed since its capture."""

    def __str__(self) -> str:
        return "changed while the restore ran: the restore stopped there"


def verified(
    plan: Plan,
    pre: Manifest,
    check: Callable[[str], int | None],
    record: Callable[[str], tuple[FileState, str] | None],
) -> Unchanged:
    """Checks the objects `plan` writes and those of what it replaces; `Unchanged` for it.

    `pre` is the capture the plan is applied from (the pre-restore snapshot). It names
    the objects the store held already unread: a damaged one would leave the file on
    disk the only sound copy, so `check` (`Store.check`: raises `ObjectError`) reads them
    all before anything changes.

    The guard asks only whether bytes would be lost. A file whose stat is not the
    capture's `record` (`Capture.stat_record`) is hashed again (touched but equal is
    unchanged); anything at a path that held nothing (a directory there was removed by
    an earlier step) is a change; nothing there, or a file with another name, is not.
    """
    # Looked up, not a pass over every entry: a restore's cost grows with what it changes.
    at = ((c.path, entry_at(pre.entries, c.path)) for c in plan.changes)
    entries = {path: entry for path, entry in at if entry is not None}
    for entry in [*(c.entry for c in plan.changes), *entries.values()]:
        if entry is not None and entry.hash is not None:
            size = check(entry.hash)  # a piece at a time: any size (None: not checked)
            if size is not None and (problem := size_problem(entry, size)) is not None:
                raise ObjectError(entry.hash, problem)

    def unchanged(path: str, fd: int, name: bytes) -> bool:
        entry = entries.get(path)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return True  # nothing there: nothing to lose
        if entry is None:
            return False
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return True  # its bytes live on under another name whatever happens to this one
        if entry.type == "symlink":
            return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=fd) == fs_path(
                entry.target or ""
            )
        if not stat.S_ISREG(st.st_mode) or (st.st_mode & 0o777, st.st_size) != (
            entry.mode,
            entry.size,
        ):
            return False
        found = record(path)
        if found is not None and found == (file_state(st), entry.hash):
            return True
        try:
            return read_file(name, path, keep=False, dir_fd=fd)[0] == entry.hash
        except SnapshotError:
            return False  # no longer a file to read

    return unchanged


def _removed(
    tree: DirTree, parent: str, name: bytes, change: Change, unchanged: Unchanged | None
) -> bool:
    """Removes what `change` removes; False when it (or its directory) was gone already.

    Gone is what the run wanted: no failure, and no change of its to set back.

    Raises:
        ChangedMeanwhile: what is there is not what the run was planned from.
    """
    try:
        fd = tree.dir_fd(parent)
        if change.was_dir:
            tree.forget(change.path)
            try:
                os.rmdir(name, dir_fd=fd)
            except NotADirectoryError:
                raise ChangedMeanwhile from None  # a file or a link put in its place
        else:
            if unchanged is not None and not unchanged(change.path, fd, name):
                raise ChangedMeanwhile
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    return True


def dir_modes(root: str, plan: Plan) -> dict[str, int]:
    """The permission bits of each directory `plan` removes (for `apply_plan`'s `modes`)."""
    modes: dict[str, int] = {}
    with DirTree(root) as tree:
        for change in plan.changes:
            if change.was_dir and change.op is not Op.BLOCKED:
                parent, _, name = change.path.rpartition("/")
                try:
                    st = os.stat(fs_path(name), dir_fd=tree.dir_fd(parent), follow_symlinks=False)
                except OSError:
                    continue  # gone: nothing to make again
                modes[change.path] = stat.S_IMODE(st.st_mode)
    return modes


class ApplyPlan(Protocol):
    """`apply.apply_plan`: carries out a plan under a root; stops at the first failure."""

    def __call__(
        self,
        root: str,
        plan: Plan,
        read_object: Callable[[str], Iterable[bytes]],
        *,
        progress: Callable[[int, int], None] | None = None,
        unchanged: Unchanged | None = None,
        modes: Mapping[str, int] | None = None,
        keep_edits: bool = False,
    ) -> Result:
        """Returns what was done, and where and why it stopped."""
        ...


def apply_plan(
    root: str,
    plan: Plan,
    read_object: Callable[[str], Iterable[bytes]],
    *,
    progress: Callable[[int, int], None] | None = None,
    sync_each: bool = True,
    unchanged: Unchanged | None = None,
    modes: Mapping[str, int] | None = None,
    keep_edits: bool = False,
) -> Result:
    """Carries out `plan` under `root`; stops at the first failure.

    Args:
        root: absolute path of the workspace.
        plan: what to change.
        read_object: yields an object's bytes by digest, a bounded piece at a time
            (`Store.read_chunks`); what is written is hashed and checked anyway.
        progress: called with (done, total) after each step.
        sync_each: fsync each file written and each directory touched (a restore in
            place: the tree is live). False leaves durability to the caller, which
            syncs the whole file system once (`restore --to` into a new directory,
            published by a rename only afterwards: one `syncfs` instead of one fsync
            per file, which was 13.6 s of a 23 s extraction of 52,730 paths).
        unchanged: asked before each file or symlink is removed or replaced; False stops
            the run there (`ChangedMeanwhile`): an edit made while it ran is never lost.
        modes: permission bits of directories it makes (a rollback: `dir_modes` of the
            restore), else the umask's.
        keep_edits: a rollback's: a conflict (a path `unchanged` finds changed, or
            something in a step's way) does not stop the run: that path, and what is
            below it, is left as it is (`edited`), and the run goes on. The newest edit wins.
    """
    steps = order(plan)
    result = Result.of(plan)
    failed_at = len(steps)
    try:
        tree = DirTree(root)
    except OSError as exc:
        result.error = f"{shown(root)}: {_describe(exc)}"
        result.not_restored = _unique_paths(steps)
        return result
    touched_dirs: set[str] = set()
    changed: dict[str, None] = {}
    edited: dict[str, None] = {}  # (`keep_edits`) left as they are, and what is below them
    try:
        for done, (action, change) in enumerate(steps):
            parent, _, name = change.path.rpartition("/")
            if edited and under_any(change.path, edited):
                edited[change.path] = None  # (its other step, or below what an edit holds)
                continue
            try:
                raw = fs_path(name)
                if action == "remove":
                    made = _removed(tree, parent, raw, change, unchanged)
                elif action == "mkdir":
                    os.mkdir(raw, 0o777, dir_fd=tree.dir_fd(parent))
                    changed[change.path] = None
                    if modes is not None and (mode := modes.get(change.path)) is not None:
                        os.fchmod(tree.dir_fd(change.path), mode)  # never through a link
                    made = True
                else:
                    _write(tree.dir_fd(parent), raw, change, read_object, sync=sync_each,
                           unchanged=unchanged)  # fmt: skip
                    made = True
                if made:  # (a path gone already, as the run wanted, is no change of its)
                    changed[change.path] = None
                    touched_dirs.add(parent)
            except (OSError, ObjectError, ChangedMeanwhile) as exc:
                # What a step finds in its way was put there while the run went on.
                conflict = isinstance(exc, ChangedMeanwhile) or (
                    isinstance(exc, OSError) and (action, exc.errno) in _IN_THE_WAY
                )
                if conflict and keep_edits:
                    edited[change.path] = None
                    continue
                result.error = f"{shown(change.path)}: {_describe(exc)}"
                result.conflict = conflict
                failed_at = done
                break
            if progress is not None:
                progress(done + 1, len(steps))
        # Make the renames, unlinks and mkdirs durable. A directory that is gone was
        # removed later in the run, and its parent's fsync covers that.
        for directory in sorted(touched_dirs) if sync_each else ():
            try:
                os.fsync(tree.dir_fd(directory))
            except OSError as exc:
                # fsync itself never fails with these: the directory is gone.
                gone = exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)
                if not gone and result.error is None:
                    where = shown(directory or ".")
                    result.error = f"{where}: cannot make changes durable: {_describe(exc)}"
    finally:
        tree.close()
    result.changed = list(changed)
    result.not_restored = _unique_paths(steps[failed_at:])
    if edited:
        result.edited, result.blocked = list(edited), sorted({*result.blocked, *edited})
    failed = {*result.not_restored, *edited}
    result.restored = [p for p in _unique_paths(steps[:failed_at]) if p not in failed]
    return result


_LEFTOVER = re.compile(r"\.worksnap-[0-9a-f]{12}\.tmp\Z")


def remove_leftovers(root: str, dirs: Iterable[str]) -> list[str]:
    """Removes the temp files an apply that was killed left behind; returns their paths.

    Only `dirs` (relative wire paths) and the root are looked at, never below a
    symlink; a temp file is only ever made in the directory of a path written.
    An ignored temp file (`*.tmp` in a `.gitignore`) would otherwise stay forever.
    """
    removed: list[str] = []
    try:
        tree = DirTree(root)
    except OSError:
        return removed
    try:
        for directory in sorted({"", *dirs}):
            try:
                fd = tree.dir_fd(directory)
                names = os.listdir(fd)
            except OSError:
                continue
            for name in names:
                if _LEFTOVER.match(name):
                    try:
                        os.unlink(name, dir_fd=fd)
                    except OSError:
                        continue
                    removed.append(f"{directory}/{name}" if directory else name)
    finally:
        tree.close()
    return removed


def _unique_paths(steps: list[Step]) -> list[str]:
    return list(dict.fromkeys(change.path for _, change in steps))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _write(
    fd: int,
    name: bytes,
    change: Change,
    read_object: Callable[[str], Iterable[bytes]],
    *,
    sync: bool,
    unchanged: Unchanged | None,
) -> None:
    """Writes a file or symlink to a temp name in its directory, then renames it over `name`.

    Only if what is there is `unchanged`: asked last, after a long write too.
    """
    entry = change.entry
    assert entry is not None
    tmp = b".worksnap-" + os.urandom(6).hex().encode() + b".tmp"
    if entry.type == "symlink":
        assert entry.target is not None
        os.symlink(fs_path(entry.target), tmp, dir_fd=fd)
    else:
        assert entry.hash is not None
        out = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=fd,
        )
        try:
            # Hash what is written, not what was meant to be: the two must agree.
            # A piece at a time, so a large file never sits in memory whole.
            hasher = blake3(max_threads=blake3.AUTO)
            for chunk in read_object(entry.hash):
                hasher.update(chunk)
                write_all(out, chunk)
            if hasher.hexdigest() != entry.hash:
                raise ObjectError(entry.hash, "damaged: its bytes do not match its digest")
            os.fchmod(out, entry.mode)
            if sync:
                os.fsync(out)
        except BaseException:
            os.close(out)
            os.unlink(tmp, dir_fd=fd)
            raise
        os.close(out)
    try:
        if unchanged is not None and not unchanged(change.path, fd, name):
            raise ChangedMeanwhile
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        os.unlink(tmp, dir_fd=fd)
        raise
