"""The packed copies `verify --repair` found damaged (`damaged-copies`, docs/format.md).

A copy of an object whose bytes no longer match its digest (bit rot inside a pack)
is recorded here as its digest and its pack. The store's index then reads another
copy when one is packed, and takes the object as not stored: the next snapshot stores
again what is still on disk instead of naming the damaged copy. A line each,
`<digest> <pack>`; a line that is not one is ignored. A damaged loose copy (an object
of 1 MiB or more) is removed instead: nothing can read it as its object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from worksnap.paths import is_digest
from worksnap.storedir import StoreDir

_MAX = 64 * 1024 * 1024  # 82 bytes a line: some 800k copies

Copy = tuple[str, str]
"""(digest, pack name): one packed copy of an object."""


def read_damaged(files: StoreDir) -> set[Copy]:
    """The copies recorded as damaged (none when the file is absent)."""
    data = files.read_optional(files.paths.damaged_copies, limit=_MAX) or b""
    copies = (line.split(" ") for line in data.decode("ascii", "replace").splitlines())
    return {(c[0], c[1]) for c in copies if len(c) == 2 and is_digest(c[0])}


def record_damaged(files: StoreDir, copies: Iterable[Copy], packs: Iterable[str]) -> None:
    """Adds `copies` to the record, keeping of those there the ones whose pack is in `packs`.

    The caller holds the store's exclusive lock (no sweep renames a pack meanwhile).
    Nothing is written when `copies` is empty.
    """
    new = set(copies)
    if not new:
        return
    listed = set(packs)
    kept = {(digest, pack) for digest, pack in read_damaged(files) if pack in listed}
    lines = sorted(kept | new)
    files.write(files.paths.damaged_copies, "".join(f"{d} {p}\n" for d, p in lines).encode())


def take_as_not_stored(
    files: StoreDir, digests: Iterable[str], packed: Mapping[str, str], packs: Iterable[str]
) -> int:
    """Takes the copies read of `digests` (found damaged) as not stored: how many.

    Args:
        files: the store.
        digests: the objects whose copy read was found damaged.
        packed: the pack of each one read from a pack (its copy is recorded); the
            others were read loose (their file is removed).
        packs: the store's packs (records of copies in packs gone since are dropped).

    The caller holds the store's exclusive lock.
    """
    loose = (d for d in digests if d not in packed and is_digest(d))
    removed = [d for d in loose if files.unlink(files.paths.loose(d))]
    record_damaged(files, packed.items(), packs)
    return len(packed) + len(removed)
