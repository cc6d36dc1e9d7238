"""The store's index of packed objects: where each is, and which copy of a twin is read.

`ObjectIndex` answers a `Slot` for every packed object, made when asked from the columns
its pack's rows are kept in (`PackRows`): a pack index read back, or the `PackWriter` of
a pack this process writes (a cold snapshot of 200k files writes 200k objects). `Finder`
also finds an object by the prefix an index entry names its base by. `join_indexes` makes
one index of every pack's; `used_copy` says which copy of an object it reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, KeysView, Mapping
from typing import TypeVar, overload

from worksnap.packcodec import BASE_PREFIX, PackRows, PackWriter, Slot, sound_chain


class Finder:
    """Finds packed objects by digest, or by the prefix an index entry names its base by.

    The digests are sorted once, when a prefix is first asked for (47k digests: 8 ms);
    objects added after that are remembered beside them.
    """

    def __init__(self, index: Mapping[str, Slot]) -> None:
        self._index = index
        self._sorted: list[str] | None = None
        self._added: dict[str, list[str]] = {}

    def added(self, digest: str) -> None:
        """Takes note of an object added to the index since it was loaded."""
        if self._sorted is not None:
            self._added.setdefault(digest[: 2 * BASE_PREFIX], []).append(digest)

    def __call__(self, key: str) -> tuple[str, Slot] | None:
        """(digest, slot) of the object `key` names; None if none is packed.

        Raises:
            ValueError: `key` is a prefix that names more than one packed object.
        """
        if len(key) != 2 * BASE_PREFIX:
            slot = self._index.get(key)
            return None if slot is None else (key, slot)
        if self._sorted is None:
            self._sorted = sorted(self._index)
        found = set(self._added.get(key, ()))
        at = bisect.bisect_left(self._sorted, key)
        while at < len(self._sorted) and self._sorted[at].startswith(key):
            found.add(self._sorted[at])
            at += 1
        if len(found) > 1:
            raise ValueError(f"its base prefix {key} names more than one object")
        return (digest := found.pop(), self._index[digest]) if found else None

    def base_of(self, slot: Slot) -> str | None:
        """The digest of the base `slot` names (None: it has none, or none can be found)."""
        try:
            found = self(slot.base) if slot.base is not None else None
        except ValueError:
            return None
        return None if found is None else found[0]


def join_indexes(
    indexes: Iterable[tuple[list[str], PackRows]], *, prune: bool = False
) -> tuple[ObjectIndex, Finder]:
    """The packs' indexes as one, and its Finder; of an object's twins, one that reads.

    Snapshots side by side may store one object twice, each against its own base, and
    a sweep killed part-way leaves an old copy whose base it already removed beside the
    copy it wrote alone: the index keeps the last copy whose chain is whole.

    `prune` (a pack index is damaged): objects whose chain is not whole are left out,
    so that a snapshot stores again what is on disk instead of naming them.
    """
    entries: dict[str, int | PackWriter] = {}
    packs: list[PackRows] = []
    index = ObjectIndex(entries, packs)  # a view: it sees the changes made below
    twins: dict[str, list[int]] = {}
    for digests, rows in indexes:
        pack = len(packs) << _ROW_BITS
        packs.append(rows)
        for row, digest in enumerate(digests):
            if (was := entries.get(digest)) is not None:
                assert not isinstance(was, PackWriter)  # none is written yet
                twins.setdefault(digest, [was]).append(pack | row)
            entries[digest] = pack | row
    find = Finder(index)
    for _ in range(2):  # a twin's chain may go through another twin
        for digest, places in twins.items():
            for place in reversed(places):
                entries[digest] = place
                if sound_chain(digest, find):
                    break
            else:
                entries[digest] = places[-1]
    if prune:
        for digest in [d for d in entries if not sound_chain(d, find)]:
            del entries[digest]
        find = Finder(index)
    return index, find


def used_copy(index: Mapping[str, Slot], digest: str, slot: Slot) -> bool:
    """True when `slot` is the copy of `digest` that `index` reads.

    Its base may be named by a whole digest in memory, by a prefix on disk: the place
    says which copy.
    """
    found = index.get(digest)
    return found is not None and (found.pack, found.offset) == (slot.pack, slot.offset)


_T = TypeVar("_T")


_ROW_BITS = 32
_ROW_MASK = (1 << _ROW_BITS) - 1


class ObjectIndex(Mapping[str, Slot]):
    """Where each packed object of the store is: the store's index of every pack.

    An object read from a pack index has one int, its pack's place in `packs` and its
    row there; one this process wrote has its `PackWriter` (no object of its own per
    digest: a cold snapshot of 200k files writes 200k objects). Either makes the Slot
    when asked; consumers only ever see Slots. A writer stays here after its pack is
    published (its descriptor closed), so that a long-lived store (the daemon's) keeps
    answering for what it wrote.

    `in` and `keys()` go straight to the dict: the capture tests every file's digest.
    """

    __slots__ = ("_entries", "_packs")

    def __init__(
        self,
        entries: dict[str, int | PackWriter] | None = None,
        packs: list[PackRows] | None = None,
    ) -> None:
        self._entries = {} if entries is None else entries
        self._packs = [] if packs is None else packs

    def _slot(self, digest: str, found: int | PackWriter) -> Slot:
        if isinstance(found, PackWriter):
            return found.slot_of(digest)
        return self._packs[found >> _ROW_BITS].slot(found & _ROW_MASK)

    def add(self, digest: str, writer: PackWriter) -> None:
        """Records an object `writer` has just appended."""
        self._entries[digest] = writer

    def __getitem__(self, digest: str) -> Slot:
        return self._slot(digest, self._entries[digest])

    @overload
    def get(self, digest: str, /) -> Slot | None: ...
    @overload
    def get(self, digest: str, /, default: Slot | _T) -> Slot | _T: ...
    def get(self, digest: str, /, default: object = None) -> object:
        """The Slot of `digest`, or `default` (without raising: a miss is common)."""
        found = self._entries.get(digest)
        return default if found is None else self._slot(digest, found)

    def __contains__(self, digest: object) -> bool:
        return digest in self._entries

    def keys(self) -> KeysView[str]:
        """The digests, as a live view of the dict (a C-speed `in`)."""
        return self._entries.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
