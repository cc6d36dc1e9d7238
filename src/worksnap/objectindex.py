"""The store's index of packed objects: where each is, and which copy of a twin is read.

`ObjectIndex` answers a `Slot` for every packed object, made when asked from the columns
its pack's rows are kept in (`PackRows`): a pack index read back, or the `PackWriter` of
a pack this process writes (a cold snapshot of 200k files writes 200k objects). `Finder`
also finds an object by the prefix an index entry names its base by. `join_indexes` makes
one index of every pack's; `used_copy` says which copy of an object it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, KeysView, Mapping
from collections.abc import Set as AbstractSet
from itertools import compress
from operator import itemgetter
from typing import TypeVar, overload

from worksnap.packcodec import BASE_PREFIX, PackRows, PackWriter, Slot, sound_chain


class Finder:
    """Finds packed objects by digest, or by the prefix an index entry names its base by.

    The prefixes are resolved all at once, when one is first asked for: one pass over the
    digests keeps those whose first half an entry of `packs` names (200k digests: 16 ms;
    sorting them all took 54). A prefix no entry names (none is asked for today) costs a
    pass of its own. Objects added after that are remembered beside them.
    """

    def __init__(self, index: Mapping[str, Slot], packs: Iterable[PackRows] = ()) -> None:
        self._index = index
        self._packs = packs
        self._found: dict[str, list[str]] | None = None  # prefix -> digests holding it
        self._added: dict[str, list[str]] = {}

    def added(self, digest: str) -> None:
        """Takes note of an object added to the index since it was loaded."""
        if self._found is not None:
            self._added.setdefault(digest[: 2 * BASE_PREFIX], []).append(digest)

    def __call__(self, key: str) -> tuple[str, Slot] | None:
        """(digest, slot) of the object `key` names; None if none is packed.

        Raises:
            ValueError: `key` is a prefix that names more than one packed object.
        """
        if len(key) != 2 * BASE_PREFIX:
            slot = self._index.get(key)
            return None if slot is None else (key, slot)
        if self._found is None:
            wanted = {base for rows in self._packs for base in rows.bases.values()}
            self._found = _holding(self._index.keys(), wanted)
        if (held := self._found.get(key)) is None:
            held = self._found[key] = [d for d in self._index if d.startswith(key)]
        added = self._added.get(key)
        if added is None and len(held) == 1:  # (asked at every link of every chain)
            return held[0], self._index[held[0]]
        found = {*held, *(added or ())}
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


def _holding(digests: Iterable[str], prefixes: set[str]) -> dict[str, list[str]]:
    """The digests that begin with each of `prefixes` (hex, `BASE_PREFIX` bytes)."""
    found: dict[str, list[str]] = {prefix: [] for prefix in prefixes}
    keys = list(digests)
    first_half = map(itemgetter(slice(0, 2 * BASE_PREFIX)), keys)
    for digest in compress(keys, map(prefixes.__contains__, first_half)):  # at C speed
        found[digest[: 2 * BASE_PREFIX]].append(digest)
    return found


def join_indexes(
    indexes: Iterable[tuple[list[str], PackRows]],
    *,
    damaged: AbstractSet[tuple[str, str]] = frozenset(),
    at_once: bool = True,
) -> tuple[ObjectIndex, Finder]:
    """The packs' indexes as one, and its Finder; of an object's twins, one that reads.

    Snapshots side by side may store one object twice, each against its own base, and
    a sweep killed part-way leaves an old copy whose base it already removed beside the
    copy it wrote alone: the index keeps the last copy whose chain is whole, and not
    one of the `damaged` copies, (digest, pack) (`damagedcopies`: `verify --repair`).

    `at_once` False joins every pack one digest at a time: the obvious version of the
    same answer, which tests hold `_joined_at_once` to.
    """
    entries: dict[str, int | PackWriter] = {}
    packs: list[PackRows] = []
    index = ObjectIndex(entries, packs)  # a view: it sees the changes made below
    twins: dict[str, list[int]] = {}
    read: list[tuple[list[str], PackRows]] = []
    for digests, rows in indexes:
        pack = len(packs) << _ROW_BITS
        packs.append(rows)
        read.append((digests, rows))
        if at_once and _joined_at_once(entries, digests, pack):
            continue
        for row, digest in enumerate(digests):
            if (was := entries.get(digest)) is not None:
                assert not isinstance(was, PackWriter)  # none is written yet
                twins.setdefault(digest, [was]).append(pack | row)
            entries[digest] = pack | row
    find = Finder(index, packs)
    for _ in range(2):  # a twin's chain may go through another twin
        for digest, places in twins.items():
            for place in reversed(places):
                entries[digest] = place
                if _whole(digest, find, damaged):
                    break
            else:
                entries[digest] = places[-1]
    # An object whose chain is broken (a base packed nowhere: its pack's index damaged, or
    # the pack moved out as `verify` advises; a damaged copy) stays readable, to be named,
    # but is not `present`: a snapshot stores it again. Only an object with a base (or a
    # damaged copy) is looked at, through the index alone, when `present` is first asked
    # about it: walking every chain at each load cost the reference store 15 ms (the
    # base prefixes resolved), most loads ask about none.
    suspects = {digests[row] for digests, rows in read for row in rows.bases}
    suspects.update(d for d, _ in damaged if d in entries)
    index.suspects(suspects, lambda digest: _whole(digest, find, damaged))
    return index, find


def _whole(digest: str, find: Finder, damaged: Container[tuple[str, str]]) -> bool:
    """True when the copy of `digest` read and its chain are packed, none a damaged copy."""
    links = sound_chain(digest, find)
    return bool(links) and not any((name, slot.pack) in damaged for name, slot in links)


def _joined_at_once(entries: dict[str, int | PackWriter], digests: list[str], pack: int) -> bool:
    """Adds a pack's digests in one `dict.update` when none is a twin; False: none added.

    The common case (every pack of a store that is not being swept), at C speed: the
    loop of `join_indexes` took 50 ms of a new process's 200k-object index.
    """
    before = len(entries)
    if before and not entries.keys().isdisjoint(digests):
        return False  # a twin of an object of an earlier pack
    entries.update(zip(digests, range(pack, pack + len(digests)), strict=True))
    if len(entries) == before + len(digests):
        return True
    for digest in digests:  # one repeats within this pack: back out, the loop says which
        entries.pop(digest, None)
    return False


def used_copy(index: Mapping[str, Slot], digest: str, slot: Slot) -> bool:
    """True when `slot` is the copy of `digest` that `index` reads.

    Its base may be named by a whole digest in memory, by a prefix on disk: the place
    says which copy.
    """
    found = index.get(digest)
    return found is not None and (found.pack, found.offset) == (slot.pack, slot.offset)


_T = TypeVar("_T")


class _Present(Container[str]):
    """`ObjectIndex.present`: the digests packed, less those whose chain is broken."""

    __slots__ = ("_entries", "_index")

    def __init__(self, entries: Container[str], index: ObjectIndex) -> None:
        self._entries, self._index = entries, index

    def __contains__(self, digest: object) -> bool:
        return digest in self._entries and (
            digest not in self._index._suspects or self._index._whole(str(digest))
        )


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
    `present` leaves out the objects whose copy read has a broken chain (`suspects`),
    until one is added again.
    """

    __slots__ = ("_chain_whole", "_entries", "_packs", "_suspects", "_whole_memo", "_written")

    def __init__(
        self,
        entries: dict[str, int | PackWriter] | None = None,
        packs: list[PackRows] | None = None,
    ) -> None:
        self._entries = {} if entries is None else entries
        self._packs = [] if packs is None else packs
        self._written = False
        self._suspects: set[str] = set()
        self._chain_whole: Callable[[str], bool] = bool
        self._whole_memo: dict[str, bool] = {}

    def suspects(self, digests: set[str], whole: Callable[[str], bool]) -> None:
        """Notes the objects whose chain may be broken, and how to tell (`join_indexes`)."""
        self._suspects, self._chain_whole = digests, whole

    def _whole(self, digest: str) -> bool:
        if (known := self._whole_memo.get(digest)) is None:
            known = self._whole_memo[digest] = self._chain_whole(digest)
        return known

    def _slot(self, digest: str, found: int | PackWriter) -> Slot:
        if isinstance(found, PackWriter):
            return found.slot_of(digest)
        return self._packs[found >> _ROW_BITS].slot(found & _ROW_MASK)

    def add(self, digest: str, writer: PackWriter) -> None:
        """Records an object `writer` has just appended."""
        self._entries[digest] = writer
        self._written = True
        self._suspects.discard(digest)

    def present(self) -> Container[str]:
        """The digests that can be read, as far as the index knows: a live view (see `keys`)."""
        return self._entries.keys() if not self._suspects else _Present(self._entries, self)

    def pack_rows(self) -> list[PackRows]:
        """The packs read, in the order `places` numbers them."""
        return self._packs

    def places(self) -> Mapping[str, int]:
        """Each object's pack (in `pack_rows`) and row there, as `pack << 32 | row`.

        Only for an index read from pack indexes, nothing added since.
        """
        if self._written:
            raise ValueError("objects were added to this index since it was read")
        return self._entries  # type: ignore[return-value]  # (no writer: every value an int)

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
