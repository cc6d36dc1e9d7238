"""What a sweep does with each pack: remove it at once, write its kept objects anew, or leave it.

A sweep keeps, of each object it keeps, the one copy the store's index reads
(`objectindex.used_copy`). A pack holding none of those holds nothing anyone needs once
the sweep is done, so it is removed before anything is written: on a full disk that is
the room the rest of the sweep needs (`gc` is what a person runs when the disk is full).
Except a pack holding a link of the base chain of an orphan (a kept object whose base
dies): the orphan is rebuilt through that chain to be stored again alone, so that pack
stays until the new pack is durable. A pack holding kept copies beside anything else
(dead objects, copies the index does not read) is written anew with the kept copies.

`plan_sweep` only decides; `DiskStore.sweep` does it (docs/format.md, "Packs").
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping

import msgspec

from worksnap.errors import SweepStopped
from worksnap.objectindex import Finder, used_copy
from worksnap.packcodec import Slot, geometric, sound_chain
from worksnap.storedir import StoreDir

Records = list[tuple[str, Slot]]
"""A pack's objects and their slots, in the order of its index."""


class SweptPack(msgspec.Struct, frozen=True):
    """A pack a sweep removes.

    Attributes:
        name: the pack's name.
        copies: the kept copies written anew from it first (in the order of its index).
        dead: the stored size of each dead object it holds (what removing it frees).
    """

    name: str
    copies: Records
    dead: list[int]


class Tally(msgspec.Struct):
    """What a sweep has removed so far.

    Attributes:
        removed: dead objects.
        freed: their bytes.
        indexes: the file names of the pack indexes removed.
    """

    removed: int = 0
    freed: int = 0
    indexes: set[str] = msgspec.field(default_factory=set)

    def add(self, removed: int, freed: int) -> None:
        """Counts `removed` more objects and `freed` more bytes."""
        self.removed += removed
        self.freed += freed


class SweepPlan(msgspec.Struct, frozen=True):
    """What a sweep does, pack by pack (packs it leaves as they are are in neither list).

    Attributes:
        first: the packs no kept copy is read from, nor an orphan rebuilt through:
            removed before anything is written.
        rewritten: the packs whose kept copies are written anew, and the packs an orphan
            is rebuilt through: removed once the new pack is durable.
        orphans: the kept objects whose base dies, stored again alone.
    """

    first: list[SweptPack]
    rewritten: list[SweptPack]
    orphans: set[str]

    def removes(self) -> tuple[int, int]:
        """How many dead objects the plan's packs hold, and their stored bytes.

        What `remove_packs` counts once the sweep is done: a dry run's answer.
        """
        packs = [*self.first, *self.rewritten]
        return sum(len(pack.dead) for pack in packs), sum(sum(pack.dead) for pack in packs)

    def needed(self) -> int:
        """About how many bytes the new pack takes: the kept copies, an orphan at its size."""
        return sum(
            slot.raw if digest in self.orphans else slot.stored
            for pack in self.rewritten
            for digest, slot in pack.copies
        )

    def stopped(self, path: str, reason: str, done: Tally) -> SweepStopped:
        """The error of a sweep that ran out of room once `done` was removed."""
        return SweepStopped(
            path,
            reason,
            removed=done.removed,
            freed=done.freed,
            left=len(self.rewritten),
            left_bytes=sum(sum(pack.dead) for pack in self.rewritten),
            needed=self.needed(),
        )


def plan_sweep(
    index: Mapping[str, Slot],
    find: Finder,
    packs: Iterable[tuple[str, Records]],
    live: set[str] | None,
    *,
    small: set[str],
) -> SweepPlan:
    """Decides what a sweep does with each of `packs` (those it may touch: no damaged one).

    Args:
        index: the store's index, read afresh (which copy of an object is read).
        find: its Finder (an object's base).
        packs: each pack's name and records.
        live: the objects to keep (None: every one, a merge).
        small: the packs a merge writes anew into one (`DiskStore._small_packs`).
    """

    def kept(digest: str) -> bool:
        return live is None or digest in live

    orphans = set() if live is None else {
        d for d in live if (s := index.get(d)) and (b := find.base_of(s)) and b not in live
    }  # fmt: skip
    # An orphan is rebuilt through its whole chain: the packs of its links stay until then.
    through = {slot.pack for orphan in orphans for _, slot in sound_chain(orphan, find)}
    first: list[SweptPack] = []
    rewritten: list[SweptPack] = []
    copied: set[str] = set()
    for name, records in packs:
        copies = [(d, s) for d, s in records
                  if kept(d) and d not in copied and used_copy(index, d, s)]  # fmt: skip
        copied.update(d for d, _ in copies)
        pack = SweptPack(name, copies, [s.stored for d, s in records if not kept(d)])
        if copies:
            again = any(d in orphans for d, _ in copies)  # stored again alone
            if again or len(copies) < len(records) or name in small:
                rewritten.append(pack)  # (else every object in it stays as it is)
        elif name in through:
            rewritten.append(pack)  # nothing kept in it, but an orphan is read through it
        elif records or name in small:
            first.append(pack)
    return SweepPlan(first, rewritten, orphans)


def remove_packs(files: StoreDir, packs: list[SweptPack], done: Tally) -> None:
    """Removes packs not removed yet, each index before its pack; counts them in `done`.

    Killed between the two, the pack left is a dead writer's (`StoreDir.remove_unpublished`).
    """
    for pack in packs:
        index = files.paths.pack_index(pack.name)
        if os.path.basename(index) in done.indexes:
            continue
        files.unlink(index)
        files.unlink(files.paths.pack(pack.name))
        done.indexes.add(os.path.basename(index))
        done.add(len(pack.dead), sum(pack.dead))


def announce(files: StoreDir, first: list[SweptPack], done: Tally) -> None:
    """Writes `generation` before a sweep's first object goes.

    Other processes may remember objects about to go: a long-lived store (the daemon's)
    would take one for stored (`DiskStore.sync`). On a disk too full for even that one
    block, the packs of `first` go before it, index first: a removed index is news to
    every process that read it (`sync` lists them, as after a merge, which writes no
    `generation`), and one that never read it knows nothing of its objects. That makes
    the room; then it is written, before any loose object or rewritten pack goes.
    """
    try:
        files.write(files.paths.generation, files.new_name().encode())
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not first:
            raise
    remove_packs(files, first, done)
    files.write(files.paths.generation, files.new_name().encode())


def small_packs(files: StoreDir, indexes: Iterable[str], below: int) -> set[str]:
    """The packs to merge (`packcodec.geometric`), of those of `indexes` under `below` bytes."""
    sizes: list[tuple[int, str]] = []
    for name in indexes:
        pack_name, _ = files.paths.pack_file(name)
        st = files.lstat(files.paths.pack(pack_name))
        if st is not None and st.st_size < below:
            sizes.append((st.st_size, pack_name))
    return geometric(sizes)
