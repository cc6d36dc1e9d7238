"""Plan: compare the working directory's state with a snapshot and list what a restore changes.

Pure: it reads two manifests and writes nothing. `apply` carries a plan out.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from worksnap.manifest import Entry, Manifest, parse_time
from worksnap.paths import ancestors, is_under


class Op(enum.Enum):
    """What a restore does to one path."""

    MODIFIED = "M"
    """Differs from the snapshot (content, mode, type or link target): restored."""
    ADDED = "A"
    """Exists now but not in the snapshot: removed."""
    DELETED = "D"
    """In the snapshot but missing now: recreated."""


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
class Unprotected:
    """A large file (over a size cap, so in no snapshot) that a restore leaves as it is.

    Attributes:
        path: relative wire-form path.
        why: "deleted" (the target left it out as large; it is gone now), "changed"
            (the same, and changed since the target was taken), "too-large" (the target
            holds it, but it is over the cap now), "added" (new since, over the cap).
        size: its size now (None when it is gone).
    """

    path: str
    why: str
    size: int | None


@dataclass(frozen=True, slots=True)
class Plan:
    """What restoring `target` would change, sorted by path, and the state it was made from.

    `unprotected` lists the large files the restore leaves as they are although they
    differ, or may differ, from the target (see `unprotected`): a preview shows them.
    """

    target: Manifest
    current: Manifest
    changes: list[Change]
    unprotected: list[Unprotected] = field(default_factory=list)

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

    changes: list[Change] = []
    for path, entry in then.items():
        if is_protected(path):
            continue
        if path in now:
            changes.append(Change(Op.MODIFIED, path, entry, was_dir=now[path] is None))
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
    it was selected.
    """
    chosen = list(paths)
    kept = [
        c
        for c in plan.changes
        if any(
            is_under(c.path, p) or (c.op is not Op.ADDED and is_under(p, c.path)) for p in chosen
        )
    ]
    return Plan(target=plan.target, current=plan.current, changes=kept)


Probe = Callable[[str], "tuple[int, int] | None"]
"""Returns a path's (size, newest of its mtime and ctime in ns) now, or None if it is gone."""


def unprotected(current: Manifest, target: Manifest, probe: Probe) -> list[Unprotected]:
    """Lists the large files a restore of `target` leaves as they are, sorted by path.

    A large file is in no snapshot, so the planner never touches it: one the target
    left out cannot be brought back if it is gone or changed since (changed: its mtime
    or ctime is newer than the target), and one over the cap now is neither restored
    nor removed. A person previewing a restore must see them.

    Args:
        current: the state the plan was made from.
        target: the snapshot restored.
        probe: what is on disk at a path now (see `Probe`).
    """
    since = int(parse_time(target.time).timestamp() * 1_000_000_000)
    held = {e.path for e in target.entries}
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
        rows.append(Unprotected(path, "too-large" if path in held else "added", size))
    rows.sort(key=lambda row: row.path)
    return rows
