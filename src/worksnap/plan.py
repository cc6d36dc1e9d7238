"""Plan: compare the working directory's state with a snapshot and list what a restore changes.

Pure: it reads two manifests and writes nothing. `apply` carries a plan out.
"""

from __future__ import annotations

import enum
import functools
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable

import msgspec

from worksnap.differences import Differences, flat_differences
from worksnap.errors import ConflictError, InputError
from worksnap.exclusion import Exclusions
from worksnap.fsio import read_in_tree
from worksnap.ignore import Rules, ignore_checker
from worksnap.manifest import Entry, Manifest, entry_at, parse_time, tree_digest
from worksnap.paths import ancestors, is_under, under_any
from worksnap.sources import Tracked


class Op(enum.Enum):
    """What a restore does to one path."""

    MODIFIED = "M"
    """Differs from the snapshot (content, mode, type or link target): restored."""
    ADDED = "A"
    """Exists now but not in the snapshot: removed."""
    DELETED = "D"
    """In the snapshot but missing now: recreated."""
    BLOCKED = "B"
    """The snapshot has a file or symlink where a directory now holds what no restore
    touches (ignored, large or excluded files), or where a FIFO, socket or device is
    (never captured, so never removed); or a directory the command runs in, or one above
    it (`keep_standing`): left as it is, and reported."""


class Change(msgspec.Struct, frozen=True):
    """One path a restore will change.

    Attributes:
        op: what happens to it.
        path: relative wire-form path.
        entry: the snapshot's file or symlink at `path` (None when the snapshot has a directory
            there, or nothing, for `ADDED`).
        was_dir: there is a directory at `path` now.
    """

    op: Op
    path: str
    entry: Entry | None
    was_dir: bool


class Unprotected(msgspec.Struct, frozen=True):
    """A file in no snapshot (large, or ignored or excluded now) that a restore leaves as it is.

    Attributes:
        path: relative wire-form path.
        why: "deleted" (the target left it out as large; it is gone now), "changed"
            (the same, and changed since the target was taken), "too-large" (the target
            holds it, but it is over the cap now), "added" (new since, over the cap),
            "ignored" (added later: the target holds it, or has nothing there (`absent`,
            a checkpoint's), but today's ignore rules leave it out, and it changed since;
            never captured, so the restore leaves it), "excluded" (added later: the same,
            left out by today's exclusion rules).
        size: its size now (None when it is gone).
    """

    path: str
    why: str
    size: int | None


class Plan(msgspec.Struct, frozen=True):
    """What restoring `target` would change, sorted by path, and the state it was made from.

    `unprotected` lists the large files the restore leaves as they are although they
    differ, or may differ, from the target (see `unprotected`): a preview shows them.
    """

    target: Manifest
    current: Manifest
    changes: list[Change]
    unprotected: list[Unprotected] = msgspec.field(default_factory=list)

    @property
    def blocked(self) -> list[Change]:
        """The changes a restore cannot make and leaves out (see `Op.BLOCKED`)."""
        return [c for c in self.changes if c.op is Op.BLOCKED]

    @property
    def applies(self) -> bool:
        """Whether applying it changes anything: it holds a change that is not blocked."""
        return any(c.op is not Op.BLOCKED for c in self.changes)

    def counts(self) -> dict[str, int]:
        """Returns how many changes of each op the plan holds."""
        counts = {op.value: 0 for op in Op}
        for change in self.changes:
            counts[change.op.value] += 1
        return counts


def plan_restore(
    current: Manifest,
    target: Manifest,
    *,
    ignored_by_target: Callable[[str, bool], bool],
    differences: Differences | None = None,
    special: Callable[[str], bool] = lambda path: False,
    ruled_out: Callable[[str], bool] = lambda path: True,
) -> Plan:
    """Lists what restoring `target` changes in a workspace whose state is `current`.

    Never touched: what either manifest left out (ignored, large, excluded, and
    anything below those), and anything the ignore rules the restore leaves in force
    would ignore (so restoring a `.gitignore` never turns files into deletions).
    Where the target has a file or symlink and the workspace a directory holding
    such untouchable paths, or a FIFO, socket or device (`special`: excluded, never
    captured), the change is `Op.BLOCKED`: listed, never applied.

    Args:
        current: the workspace's state now (a capture with the same options).
        target: the snapshot to restore.
        ignored_by_target: `ignored(path, is_dir)` under the rules the restore leaves in
            force (`target_ignores`: the target's `.gitignore` files, or those it leaves).
        differences: what differs between the two (default: `flat_differences`).
        special: whether a FIFO, socket or device is at a path now (`Root.special`).
        ruled_out: whether a path the target lists as excluded was left out by a rule
            (the target's, today's, a `.git` name) rather than for its type (a FIFO,
            socket or device then): what is at the latter now is no more protected than
            anything else the target lacks, since it is in no snapshot (default: every
            one by a rule).
    """
    if current.tree == target.tree:
        return Plan(target=target, current=current, changes=[])  # same entries and dirs
    kept_out = [p for p in target.excluded if ruled_out(p)]
    protected = {
        *current.ignored, *current.large, *current.excluded,
        *target.ignored, *target.large, *kept_out,
    }  # fmt: skip

    # Only what differs matters: an unchanged path is never touched, and nothing
    # unchanged can lie below a directory the target lacks.
    found = differences or flat_differences(current, target)
    now: dict[str, Entry | None] = dict.fromkeys(found.dirs_now)
    now.update((e.path, e) for e in found.only_now)
    then: dict[str, Entry | None] = dict.fromkeys(found.dirs_then)
    then.update((e.path, e) for e in found.only_then)

    # What the workspace has and the target lacks goes, unless the rules in force after
    # the restore ignore it (restoring a `.gitignore` never turns files into deletions).
    leaving = {p: now[p] is None for p in now if p not in then and not under_any(p, protected)}
    removed = {p for p, is_dir in leaving.items() if not ignored_by_target(p, is_dir)}
    # Sorted on first use, to ask what lies below a directory: most plans never ask.
    # (Each manifest's lists are sorted: concatenated, they sort in linear time.)
    protected_paths = _Sorted(lambda: [
        *current.ignored, *current.large, *current.excluded,
        *target.ignored, *target.large, *kept_out,
    ])  # fmt: skip
    left = _Sorted(lambda: (p for p in leaving if p not in removed))
    staying = _Sorted(lambda: (p for p in now if p not in removed))

    changes: list[Change] = []
    excluded_now = set(current.excluded)
    for path, entry in then.items():
        if under_any(path, protected):
            if path in excluded_now and special(path):  # (what the target has below: too)
                changes.append(Change(Op.BLOCKED, path, entry, was_dir=False))
            continue
        if path in now:
            was_dir = now[path] is None
            # A directory that holds what no restore touches can never be removed: it
            # blocks turning it into a file or symlink (its rmdir would fail every time).
            blocked = (
                was_dir
                and entry is not None
                and (protected_paths.any_below(path) or left.any_below(path))
            )
            op = Op.BLOCKED if blocked else Op.MODIFIED
            changes.append(Change(op, path, entry, was_dir=was_dir))
        else:
            changes.append(Change(Op.DELETED, path, entry, was_dir=False))

    # A directory goes only once everything in it goes: what stays keeps its parents.
    # (Nothing protected is removed: what stays is that and the rest of `now`.)
    for path in removed:
        if not protected_paths.any_below(path) and not staying.any_below(path):
            changes.append(Change(Op.ADDED, path, None, was_dir=now[path] is None))
    changes.sort(key=lambda c: c.path)
    return Plan(target=target, current=current, changes=changes)


def keep_standing(plan: Plan, here: str | None) -> Plan:
    """`plan` with the removal of `here`, and of each directory above it, blocked.

    What they hold still goes: they are left empty, as git (2.36 and later) leaves the
    directory it runs in, so that a shell standing there is not left in a removed one.
    """
    changes = [
        Change(Op.BLOCKED, c.path, c.entry, was_dir=True)
        if c.was_dir and here and is_under(here, c.path) and c.op in (Op.ADDED, Op.MODIFIED)
        else c
        for c in plan.changes
    ]
    return plan if changes == plan.changes else msgspec.structs.replace(plan, changes=changes)


class _Sorted:
    """Paths, sorted when first asked about (`paths` gives them)."""

    __slots__ = ("_paths", "_sorted")

    def __init__(self, paths: Callable[[], Iterable[str]]) -> None:
        self._paths = paths
        self._sorted: list[str] | None = None

    def any_below(self, directory: str) -> bool:
        """Whether any of the paths lies below `directory`: those sort side by side."""
        if self._sorted is None:
            self._sorted = sorted(self._paths())
        below = directory + "/"
        at = bisect_left(self._sorted, below)
        return at < len(self._sorted) and self._sorted[at].startswith(below)


def select_paths(plan: Plan, paths: Iterable[str]) -> Plan:
    """Returns the part of `plan` that concerns `paths` (relative wire paths) and below.

    Directories a kept change needs are kept too (a missing parent is made), but
    a removal is kept only inside the selection: a directory goes only if all of
    it was selected. A file or symlink of the snapshot above a selected path is not
    such a parent: it would replace a directory that holds what was not selected.
    """
    chosen = list(paths)
    kept = [
        c
        for c in plan.changes
        if any(
            is_under(c.path, p)
            or (c.op is not Op.ADDED and c.entry is None and is_under(p, c.path))
            for p in chosen
        )
    ]
    return Plan(target=plan.target, current=plan.current, changes=kept)


def rollback_target(current: Manifest, pre: Manifest, touched: Iterable[str]) -> Manifest:
    """Returns what a rollback aims at: `current`, with the `touched` paths set back to `pre`.

    A restore changes only the paths its plan lists (`touched`); every other path
    is as the user left it, edits made after a restore was killed included, and
    stays so. Where the state of a touched path needs room (a file of `pre` where a
    directory is now, a directory of `pre` where a file is now, on the way to it),
    what is in the way goes: the caller keeps it in a snapshot first.

    Args:
        current: the workspace's state now.
        pre: the state before the restore (its pre-restore snapshot).
        touched: the paths the restore's plan listed.
    """
    entries = {e.path: e for e in current.entries}
    dirs = set(current.dirs)
    before = {e.path: e for e in pre.entries}
    before_dirs = set(pre.dirs)
    gone: list[str] = []

    def clear_below(path: str) -> None:
        prefix = path + "/"
        for below in [p for p in entries if p.startswith(prefix)]:
            del entries[below]
        dirs.difference_update([d for d in dirs if d.startswith(prefix)])

    def make_parents(path: str) -> None:
        for parent in ancestors(path.rpartition("/")[0]):
            entries.pop(parent, None)  # a file where a directory must be
            dirs.add(parent)

    for path in sorted(set(touched)):
        entry = before.get(path)
        if entry is not None:
            clear_below(path)
            dirs.discard(path)
            entries[path] = entry
            make_parents(path)
        elif path in before_dirs:
            entries.pop(path, None)
            dirs.add(path)
            make_parents(path)
        else:
            entries.pop(path, None)
            if path in dirs:
                gone.append(path)
    # A directory the restore made goes, unless something that stays is inside it.
    staying = {
        parent
        for path in (*entries, *(dirs - set(gone)))
        for parent in ancestors(path.rpartition("/")[0])
    }
    dirs.difference_update(d for d in gone if d not in staying)
    ordered = sorted(entries.values(), key=lambda e: e.path)
    return Manifest(
        version=current.version,
        id=pre.id,
        root=current.root,
        kind=pre.kind,
        step=pre.step,
        time=pre.time,
        max_file_bytes=current.max_file_bytes,
        tree=tree_digest(ordered, sorted(dirs)),
        label=pre.label,
        session=pre.session,
        entries=ordered,
        dirs=sorted(dirs),
        ignored=sorted({*current.ignored, *pre.ignored}),
        large=sorted({*current.large, *pre.large}),
        excluded=sorted({*current.excluded, *pre.excluded}),
    )


Probe = Callable[[str], "tuple[int, int] | None"]
"""Returns a path's (size, newest of its mtime and ctime in ns) now, or None if it is gone."""


def target_ignores(
    target: Manifest,
    rules: Rules,
    tracked: Tracked | None,
    read: Callable[[Entry], bytes],
    *,
    current: Manifest,
    root: str,
    left: Iterable[Exclusions] = (),
    selected: Collection[str] | None = None,
) -> Callable[[str, bool], bool]:
    """`ignored(path, is_dir)` under the rules a restore of `target` leaves in force.

    (`plan_restore`'s, less exclusions.) The `.gitignore` files the tree will have over
    the rules read now (`rules`): the target's, but where the restore leaves a
    `.gitignore` as it is now, that one: `current`'s entry, or else the file below `root`
    now, read whole as a scan reads it (none: no rules there). A restore leaves what
    either manifest left out (over the size cap, ignored, excluded), what the exclusion
    rules `left` cover (the target's and today's), and what lies outside the `selected`
    paths. And git's index now (`tracked`): a directory git tracks whole (a gitlink) that
    the target captured is entered as the scan entered it, so the target holds everything
    that was in it and what is there now and not in the target came since. What the
    target lists as ignored is ignored (entered for git's files only when it was taken,
    such a directory's other children are there). `read` returns a file's bytes: a target
    made from the tree now (a checkpoint's rewind, a rollback's) has its files, which a
    preview did not store.
    """
    entries = target.entries
    rules_left = tuple(left)

    @functools.cache
    def left_out(now: bool) -> frozenset[str]:  # the `.gitignore` files a side left out
        side = current if now else target
        lists = (side.large, side.ignored, side.excluded)
        return frozenset(p for paths in lists for p in paths if p.endswith(".gitignore"))

    def stays(path: str) -> bool:
        return (
            path in left_out(True)
            or path in left_out(False)
            or any(exclusions.covers(path, is_dir=False) for exclusions in rules_left)
            or (selected is not None and not any(is_under(path, p) for p in selected))
        )

    def gitignore(directory: str) -> bytes | None:
        path = f"{directory}/.gitignore" if directory else ".gitignore"
        entry, now = entry_at(entries, path), entry_at(current.entries, path)
        left_as_is = entry == now or stays(path)  # (equal: the same either way)
        if left_as_is and now is None:
            # Left out now, it is read where it is; else the scan found none there.
            return read_in_tree(root, path, _WHOLE) if path in left_out(True) else None
        entry = now if left_as_is else entry
        if entry is None or entry.type != "file" or not entry.hash:
            return None
        return read(entry)

    # git walks a directory its index tracks something in as its own, `.git` or not.
    nested = None if tracked is None else (lambda directory: not tracked.holds(directory))
    if tracked is None or not tracked.enters_any:
        return ignore_checker(rules, gitignore, None, nested)
    dirs: frozenset[str] | None = None

    def whole(directory: str) -> bool:
        nonlocal dirs
        if not tracked.enters_whole(directory):
            return False
        dirs = frozenset(target.dirs) if dirs is None else dirs
        return directory in dirs

    ignored = ignore_checker(rules, gitignore, whole, nested)
    listed = frozenset(target.ignored)
    return lambda path, is_dir: path in listed or ignored(path, is_dir)


_WHOLE = 1 << 62
"""No bound but the file's: a regular file, never a FIFO nor a link (`read_in_tree`)."""


def unprotected(
    current: Manifest, target: Manifest, probe: Probe, changed: Iterable[Entry],
    excluded: Exclusions,
) -> list[Unprotected]:  # fmt: skip
    """Lists the large files a restore of `target` leaves as they are, sorted by path.

    A large file is in no snapshot, so the planner never touches it: one the target
    left out cannot be brought back if it is gone or changed since (changed: its mtime
    or ctime is newer than the target), and one over the cap now is neither restored
    nor removed. A person previewing a restore must see them, and each file the target
    holds that today's ignore or `excluded` rules leave out (never captured now, so
    never touched), unless it is as the target has it (the same size, and older than
    the target).

    Args:
        current: the state the plan was made from.
        target: the snapshot restored.
        probe: what is on disk at a path now (see `Probe`).
        changed: the target's entries that are not so now (`Differences.only_then`).
            Those below what is ignored now are among them: a scan captures nothing at
            or below a path it lists as ignored.
        excluded: today's exclusion rules (the configured ones and the command's).
    """
    since = int(parse_time(target.time).timestamp() * 1_000_000_000)
    held: set[str] | None = None  # the target's paths: made only if a large file asks
    rows: list[Unprotected] = []
    for path in target.large:
        found = probe(path)
        if found is None:
            rows.append(Unprotected(path, "deleted", None))
        elif found[1] >= since:
            rows.append(Unprotected(path, "changed", found[0]))
    target_large = set(target.large)
    for path in current.large:
        if path in target_large:
            continue
        found = probe(path)
        size = found[0] if found is not None else None
        held = {e.path for e in target.entries} if held is None else held
        rows.append(Unprotected(path, "too-large" if path in held else "added", size))
    ignored_now = set(current.ignored)

    def left_now(path: str) -> str | None:
        """Why today's capture leaves `path` out, if it does: "ignored" or "excluded"."""
        if under_any(path, ignored_now):
            return "ignored"
        return "excluded" if excluded.covers(path, is_dir=False) else None

    for entry in changed:
        if (why := left_now(entry.path)) is None:
            continue
        found = probe(entry.path)
        if found is None:
            rows.append(Unprotected(entry.path, why, None))
        elif found[1] >= since or (entry.type == "file" and found[0] != entry.size):
            rows.append(Unprotected(entry.path, why, found[0]))
    for path in target.absent:  # (a checkpoint's: nothing was there)
        if (why := left_now(path)) is not None and (found := probe(path)):
            rows.append(Unprotected(path, why, found[0]))
    rows.sort(key=lambda row: row.path)
    return rows


def destroys_unstored(plan: Plan, stored: Iterable[Manifest | None]) -> bool:
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
            path in above or under_any(path, touched)
        ):
            raise ConflictError(path)


def check_selected(
    selected: list[str],
    current: Manifest | None,
    target: Manifest,
    *,
    in_workspace: Callable[[str], bool] | None = None,
) -> None:
    """Refuses a path no restore of `target` reaches: a typo restores nothing.

    One that neither the target nor the workspace has; one the target left out as
    ignored or excluded (in `cat`'s words: no restore brings it, nor touches it); one
    below a symbolic link of either (never followed). `current` None: a restore into
    another directory, which writes only what the target holds (`in_workspace` says
    whether the workspace has a path, for the message).

    Raises:
        InputError: names the first such path.
    """
    links = {e.path for s in (target, current) if s for e in s.entries if e.type == "symlink"}
    for wanted in selected:
        if any(is_under(p, wanted) for p in [*target.dirs, *(e.path for e in target.entries)]):
            continue
        for name in ("ignored", "excluded"):
            if any(is_under(wanted, p) for p in getattr(target, name)):
                raise InputError(
                    f"{wanted!r} is not in snapshot {target.id}: it left that out ({name})"
                )
        link = next((p for p in ancestors(wanted.rpartition("/")[0]) if p in links), None)
        if link is not None:
            raise InputError(
                f"{wanted!r} is reached through the symbolic link {link!r} (a restore never "
                "follows one): name the path it points to"
            )
        if _holds(target, wanted) or (current is not None and _holds(current, wanted)):
            continue
        if in_workspace is not None and in_workspace(wanted):
            raise InputError(
                f"{wanted!r} is not in snapshot {target.id} (the workspace has it, but "
                "--to writes only what the snapshot holds)"
            )
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
