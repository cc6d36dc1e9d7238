"""What a watched capture carries over from the last one, per directory it takes whole.

`Kept` is one directory's file entries and stat records as the last capture made them;
`carried_stats` is the last capture's stat table less the records of every directory
the next one looks at again (its records are made afresh, as a capture without a
watcher makes them all): a copy of a 47k-record table and a few deletions, where
rebuilding it from each directory's records cost 18 ms. `renewed` and `resorted` give
the entries in path order from the last capture's when the paths are the same (sorting
47k entries again cost 10 ms).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from operator import attrgetter

import msgspec

from worksnap.caches import StatRecord, StatTable
from worksnap.manifest import Entry
from worksnap.scanparts import DirScan, Seen


class Kept(msgspec.Struct, frozen=True):
    """What a watched capture made of one directory's files, taken whole while its scan is."""

    part: DirScan
    """The directory's scan they were made from: the very object while nothing changed there."""
    entries: list[Entry]
    """One per file of `part.found.files`, in that order."""
    stats: list[tuple[str, StatRecord]]  # the stat cache records of those that had one

    def reusable(self) -> dict[str, tuple[Seen, Entry]]:
        """Each file's stat and entry by path."""
        return {
            rel: (seen, entry)
            for (rel, seen), entry in zip(self.part.found.files, self.entries, strict=True)
        }


def records(files: list[tuple[str, Seen]], fresh: StatTable) -> list[tuple[str, StatRecord]]:
    """The stat records of `files` in `fresh`, in their order."""
    return [(rel, record) for rel, _ in files if (record := fresh.get(rel)) is not None]


def carried_stats(
    table: StatTable, kept: Mapping[str, Kept], remember: Mapping[str, DirScan]
) -> StatTable | None:
    """`table` less the records of each directory of `kept` that `remember` does not hold as is.

    `table` must be exactly the records of `kept`, every one of them (the stat table of
    a capture that made a `Kept` of every directory it saw). Those of a directory that
    `remember` holds as the very scan its `Kept` was made from stay; the others, and
    those of a directory gone, are taken out. None when a record to take out is not
    there (the table is not the one `kept` was made with: the caller builds it anew).
    """
    fresh = dict(table)
    for d, was in kept.items():
        if remember.get(d) is not was.part:
            for rel, _ in was.stats:
                if fresh.pop(rel, None) is None:
                    return None
    return fresh


def renewed(mine: list[Entry], was: Kept | None, into: list[Entry]) -> list[Entry] | None:
    """`into` and each entry of `mine` that `was` does not hold; None if their paths differ.

    `mine`: a directory's file entries made again, in its files' order, as `was.entries`.
    """
    if was is None or len(mine) != len(was.entries):
        return None
    for entry, old in zip(mine, was.entries, strict=True):
        if entry is not old:
            if entry.path != old.path:
                return None
            into.append(entry)
    return into


def resorted(last: list[Entry], changed: list[Entry]) -> list[Entry] | None:
    """`last` (in path order) with each of `changed` where the entry of its path is.

    None when one of them has a path `last` does not hold (the caller sorts instead).
    """
    entries = list(last)
    for entry in changed:
        at = bisect.bisect_left(entries, entry.path, key=_path)
        if at == len(entries) or entries[at].path != entry.path:
            return None
        entries[at] = entry
    return entries


_path = attrgetter("path")
