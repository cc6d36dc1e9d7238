"""Tree objects read from a remote for a walk (pull, gc's mark, verify), a tree pack at a time.

Above `repository.py` (it reads through a `Repository`), beside it in the layers.
"""

from __future__ import annotations

from collections.abc import Callable

from worksnap.errors import RemoteError
from worksnap.paths import Digest
from worksnap.remote.repository import Location, Repository, index_key, pack_key

BATCH_OBJECT = 1 << 20
"""The largest object fetched along with a tree it was not asked for (unpacked bytes)."""
BATCH_RAW = 64 << 20
"""The most unpacked bytes one tree pack's batch holds."""


class TreeReader:
    """Reads tree objects from the remote for a walk, a tree pack's small objects at once.

    A tree pack holds the trees one push wrote, which a walk then reads one after
    another: one request per pack rather than one per tree. Fetched objects are
    kept (checked) in `fetched` (a neighbour that fails its check is not: only the object
    asked for raises); the objects `skip` says are local are left out, and so
    are those over `BATCH_OBJECT` unpacked, and any past `BATCH_RAW` in all: a small
    push's one pack holds file contents beside its trees, and a review saw three
    compressible 900 MB files, an 87 KB pack, take 2.8 GB to `remote gc` that way.
    """

    def __init__(
        self,
        repo: Repository,
        places: dict[str, Location],
        *,
        skip: Callable[[str], bool] = lambda digest: False,
    ) -> None:
        self.repo = repo
        self.places = places
        self.fetched: dict[str, bytes] = {}
        self.bytes = 0
        self._skip = skip
        self._packs: set[str] = set()

    def __call__(self, digest: Digest) -> bytes:
        """Returns a tree object's bytes, checked against their digest."""
        found = self.fetched.get(digest)
        if found is not None:
            return found
        where = self.place(digest)
        batch: list[tuple[str, Location]] = [(digest, where)]
        spare = set()
        if where.trees and where.pack not in self._packs:
            self._packs.add(where.pack)
            budget = BATCH_RAW - where.raw
            for d, w in self.places.items():
                if w.pack != where.pack or d == digest or w.raw > BATCH_OBJECT or self._skip(d):
                    continue
                if w.raw > budget:
                    break
                batch.append((d, w))
                spare.add(d)
                budget -= w.raw
        for got, data in self.repo.read_objects(batch, spare=spare):
            self.fetched[got] = data
        self.bytes += sum(w.length for _, w in batch)
        return self.fetched[digest]

    def place(self, digest: str) -> Location:
        """Where an object lies.

        Raises:
            RemoteError: in no indexed pack (a damaged or partial remote).
        """
        where = self.places.get(digest)
        if where is None:
            damaged = [f"{index_key(d)} damaged" for d in sorted(self.repo.damaged)]
            lost = sorted({pack_key(p) for p in self.repo.lost.values()})
            damaged += [f"{key} missing or cut short" for key in lost]
            if digest in {d for bad in self.repo.rotten.values() for d in bad}:
                damaged.insert(0, "marked damaged by verify")
            why = ", ".join(damaged[:3]) if damaged else "damaged or partial?"
            raise RemoteError(self.repo.url, f"object {digest} is in no pack ({why})")
        return where
