"""The store's index of packed objects: where each is, and which copy of a twin is read.

`ObjectIndex` answers a `Slot` for every packed object: one read from a pack index has
its own; one this process wrote is answered by its `PackWriter`, which keeps its objects
as columns (a cold snapshot of 200k files writes 200k objects). `Finder` also finds an
object by the prefix an index entry names its base by. `join_indexes` makes one index of
every pack's; `used_copy` says which copy of an object it reads.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, KeysView, Mapping
from typing import TypeVar, overload

from worksnap.packcodec import BASE_PREFIX, PackWriter, Slot, sound_chain


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
    indexes: Iterable[list[tuple[str, Slot]]], *, prune: bool = False
) -> tuple[ObjectIndex, Finder]:
    """The packs' indexes as one, and its Finder; of an object's twins, one that reads.

    Snapshots side by side may store one object twice, each against its own base, and
    a sweep killed part-way leaves an old copy whose base it already removed beside the
    copy it wrote alone: the index keeps the last copy whose chain is whole.

    `prune` (a pack index is damaged): objects whose chain is not whole are left out,
    so that a snapshot stores again what is on disk instead of naming them.
    """
    entries: dict[str, Slot | PackWriter] = {}
    index = ObjectIndex(entries)  # a view: it sees the changes made to `entries` below
    twins: dict[str, list[Slot]] = {}
    for records in indexes:
        for digest, slot in records:
            if digest in entries:
                twins.setdefault(digest, [index[digest]]).append(slot)
            entries[digest] = slot
    find = Finder(index)
    for _ in range(2):  # a twin's chain may go through another twin
        for digest, slots in twins.items():
            for slot in reversed(slots):
                entries[digest] = slot
                if sound_chain(digest, find):
                    break
            else:
                entries[digest] = slots[-1]
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


class ObjectIndex(Mapping[str, Slot]):
    """Where each packed object of the store is: the store's index of every pack.

    An object read from a pack index has its `Slot`; one this process wrote has its
    `PackWriter`, which makes the Slot when asked (no object of its own per digest: a
    cold snapshot of 200k files writes 200k objects). Consumers only ever see Slots.
    A writer stays here after its pack is published (its descriptor closed), so that a
    long-lived store (the daemon's) keeps answering for what it wrote.

    `in` and `keys()` go straight to the dict: the capture tests every file's digest.
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: dict[str, Slot | PackWriter] | None = None) -> None:
        self._entries = {} if entries is None else entries

    def add(self, digest: str, writer: PackWriter) -> None:
        """Records an object `writer` has just appended."""
        self._entries[digest] = writer

    def __getitem__(self, digest: str) -> Slot:
        found = self._entries[digest]
        return found.slot_of(digest) if isinstance(found, PackWriter) else found

    @overload
    def get(self, digest: str, /) -> Slot | None: ...
    @overload
    def get(self, digest: str, /, default: Slot | _T) -> Slot | _T: ...
    def get(self, digest: str, /, default: object = None) -> object:
        """The Slot of `digest`, or `default` (without raising: a miss is common)."""
        found = self._entries.get(digest)
        if found is None:
            return default
        return found.slot_of(digest) if isinstance(found, PackWriter) else found

    def __contains__(self, digest: object) -> bool:
        return digest in self._entries

    def keys(self) -> KeysView[str]:
        """The digests, as a live view of the dict (a C-speed `in`)."""
        return self._entries.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
