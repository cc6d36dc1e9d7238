"""Differences: what differs between two manifests, the whole of what a plan looks at.

From their flat views (every entry compared, in one merge walk), or from their trees
(only the subtrees whose digests differ are read); `LastDifferences` keeps the last
short answer. `plan.plan_restore` plans from these; `catalog` counts changes with
`differing`.
"""

from __future__ import annotations

import msgspec

from worksnap.errors import ObjectError
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Digest
from worksnap.tree import Dir, Read
from worksnap.treewalk import diff_trees, entry_of

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


class Differences(msgspec.Struct, frozen=True):
    """All a plan looks at: what differs between the workspace's state and a target."""

    only_now: tuple[Entry, ...]
    """Files and symlinks now that the target lacks or holds otherwise."""
    only_then: tuple[Entry, ...]
    """The target's files and symlinks that are not so now."""
    dirs_now: frozenset[str]
    """Directories now that are not directories in the target."""
    dirs_then: frozenset[str]
    """The target's directories that are not directories now."""


def flat_differences(current: Manifest, target: Manifest) -> Differences:
    """The differences of two flat views (every entry compared)."""
    only_now, only_then = differing(current.entries, target.entries)
    now_dirs, then_dirs = frozenset(current.dirs), frozenset(target.dirs)
    return Differences(
        tuple(only_now), tuple(only_then), now_dirs - then_dirs, then_dirs - now_dirs
    )


def tree_differences(current: Manifest, target: Manifest, read: Read) -> Differences:
    """`flat_differences` from the two snapshots' trees, reading only the subtrees that differ.

    Raises:
        ManifestError: a tree object read is damaged or hostile.
        ObjectError: a tree is not in the store (a capture that stored nothing).
    """
    only_now: list[Entry] = []
    only_then: list[Entry] = []
    dirs_now: set[str] = set()
    dirs_then: set[str] = set()
    # All are collected before any is used: a bad object raises before a plan exists.
    for difference in diff_trees(Digest(current.tree), Digest(target.tree), read):
        for child, entries, dirs in (
            (difference.old, only_now, dirs_now),
            (difference.new, only_then, dirs_then),
        ):
            if type(child) is Dir:
                dirs.add(difference.path)  # (never a directory on both sides)
            elif child is not None and (entry := entry_of(difference.path, child)) is not None:
                entries.append(entry)
    return Differences(tuple(only_now), tuple(only_then), frozenset(dirs_now), frozenset(dirs_then))


class LastDifferences:
    """`tree_differences` where both trees are stored, else `flat_differences`.

    A capture that stored nothing (a preview after edits), a checkpoint's or a
    rollback's target, and a format 1 manifest name trees that are not in the store.
    What two stored trees' digests name never changes, so the last short answer is
    kept: a restore after its preview, or a preview asked again, compares nothing.
    """

    def __init__(self, read: Read) -> None:
        self._read = read
        self._last: tuple[tuple[str, str], Differences] | None = None

    def __call__(self, current: Manifest, target: Manifest) -> Differences:
        """What differs between the workspace's state `current` and `target`.

        Raises:
            ManifestError: a tree object read is damaged or hostile.
        """
        pair = (current.tree, target.tree)
        last = self._last
        if last is not None and last[0] == pair:
            return last[1]
        try:
            found = tree_differences(current, target, self._read)
        except ObjectError:
            return flat_differences(current, target)
        if len(found.only_now) + len(found.only_then) <= _KEEP_DIFFERENCES:
            self._last = (pair, found)
        return found


_KEEP_DIFFERENCES = 4096
"""The most differing entries `LastDifferences` keeps (memory, not time)."""
