"""Plan: compare the working directory's state with a snapshot and list what a restore changes.

Pure: it reads two manifests and writes nothing. `apply` carries a plan out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from worksnap.manifest import Entry, Manifest, tree_digest
from worksnap.paths import ancestors, is_under


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
    touches (ignored, large or excluded files): left as it is, and reported."""


@dataclass(frozen=True, slots=True)
class Change:
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


@dataclass(frozen=True, slots=True)
class Plan:
    """What restoring `target` would change, sorted by path, and the state it was made from."""

    target: Manifest
    current: Manifest
    changes: list[Change]

    @property
    def blocked(self) -> list[Change]:
        """The changes a restore cannot make and leaves out (see `Op.BLOCKED`)."""
        return [c for c in self.changes if c.op is Op.BLOCKED]

    def counts(self) -> dict[str, int]:
        """Returns how many changes of each op the plan holds."""
        counts = {op.value: 0 for op in Op}
        for change in self.changes:
            counts[change.op.value] += 1
        return counts


_RUN = 256  # entries compared at once while the two lists agree


def differing(old: list[Entry], new: list[Entry]) -> tuple[list[Entry], list[Entry]]:
    """Returns the entries only in `old` and only in `new` (compared by value).

    Both lists are sorted by path (manifests are; `check_manifest` insists), so
    one merge walk finds them. Runs of equal entries, nearly all of two snapshots
    of one tree, are compared a slice at a time, in C; the slice halves down to
    the first difference and grows again after it.
    """
    only_old: list[Entry] = []
    only_new: list[Entry] = []
    i = j = 0
    run = _RUN
    while i < len(old) and j < len(new):
        if old[i : i + run] == new[j : j + run]:
            i += run
            j += run
            run = min(run * 2, _RUN)
            continue
        if run > 1:
            run //= 2  # narrow down to the first entry that differs
            continue
        a, b = old[i], new[j]
        if a.path == b.path:
            only_old.append(a)
            only_new.append(b)
            i += 1
            j += 1
        elif a.path < b.path:
            only_old.append(a)
            i += 1
        else:
            only_new.append(b)
            j += 1
    only_old.extend(old[i:])
    only_new.extend(new[j:])
    return only_old, only_new


def plan_restore(
    current: Manifest,
    target: Manifest,
    *,
    ignored_by_target: Callable[[str, bool], bool],
) -> Plan:
    """Lists what restoring `target` changes in a workspace whose state is `current`.

    Never touched: what either manifest left out (ignored, large, excluded, and
    anything below those), and anything the target's own `.gitignore` files
    would ignore (so restoring a `.gitignore` never turns files into deletions).
    Where the target has a file or symlink and the workspace a directory holding
    such untouchable paths, the change is `Op.BLOCKED`: listed, never applied.

    Args:
        current: the workspace's state now (a capture with the same options).
        target: the snapshot to restore.
        ignored_by_target: `ignored(path, is_dir)` under the target's ignore rules.
    """
    if current.tree == target.tree:
        return Plan(target=target, current=current, changes=[])  # same entries and dirs
    protected = {
        *current.ignored, *current.large, *current.excluded,
        *target.ignored, *target.large, *target.excluded,
    }  # fmt: skip

    def is_protected(path: str) -> bool:
        return any(p in protected for p in ancestors(path))

    # Only what differs matters: an unchanged path is never touched, and nothing
    # unchanged can lie below a directory the target lacks.
    only_now, only_then = differing(current.entries, target.entries)
    now_dirs, then_dirs = set(current.dirs), set(target.dirs)
    now: dict[str, Entry | None] = dict.fromkeys(now_dirs - then_dirs)
    now.update((e.path, e) for e in only_now)
    then: dict[str, Entry | None] = dict.fromkeys(then_dirs - now_dirs)
    then.update((e.path, e) for e in only_then)

    # A directory that holds something no restore touches can never be removed: it
    # blocks turning it into a file or symlink (its rmdir would fail every time).
    holding = {a for p in protected for a in ancestors(p.rpartition("/")[0])}

    changes: list[Change] = []
    for path, entry in then.items():
        if is_protected(path):
            continue
        if path in now:
            was_dir = now[path] is None
            op = Op.BLOCKED if was_dir and entry is not None and path in holding else Op.MODIFIED
            changes.append(Change(op, path, entry, was_dir=was_dir))
        else:
            changes.append(Change(Op.DELETED, path, entry, was_dir=False))

    removed = {
        path
        for path, present in now.items()
        if path not in then
        and path not in then_dirs
        and not is_protected(path)
        and not ignored_by_target(path, present is None)
    }
    # A directory goes only once everything in it goes: what stays keeps its parents.
    staying = {
        parent
        for path in (*now, *protected)
        if path not in removed
        for parent in ancestors(path.rpartition("/")[0])
    }
    for path in removed:
        if path not in staying:
            changes.append(Change(Op.ADDED, path, None, was_dir=now[path] is None))
    changes.sort(key=lambda c: c.path)
    return Plan(target=target, current=current, changes=changes)


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
