"""The local side of push and pull over a format 2 `Store` (what the CLI will hand `sync`).

A pulled record names the pushing machine's root; it is saved bound to this store's
root, as `worksnap rebind` binds a moved project's records (the remote keeps the
pushed bytes, and its ref their digest). So a snapshot pushed from another machine
restores into the root of the store that pulled it; sessions and steps are kept.
"""

from __future__ import annotations

import msgspec

from worksnap.errors import ManifestError
from worksnap.history import CHECKPOINT
from worksnap.paths import Digest
from worksnap.record import Record
from worksnap.store import Store


class StoreSide:
    """`sync.LocalSide` over a store bound to the root `root` (wire form)."""

    def __init__(self, store: Store, root: str, *, hold_open: bool = False) -> None:
        self.store = store
        self.root = root
        self.hold_open = hold_open
        """Leave the session's newest checkpoint out of `records`: the open one (or one a
        `begin` is opening now), which its turn may still rewrite, and a remote record
        never changes (a review saw the empty checkpoint pushed at `begin` stay so)."""
        self.held: list[str] = []
        """What `records` left out for that (its id)."""

    def records(self, session: str) -> list[Record]:
        """The session's records (a damaged one is left out: `verify` reports it)."""
        found = []
        for snapshot_id in self.store.ids():
            try:
                record = self.store.load_record(snapshot_id)
            except ManifestError:
                continue
            if record is not None and record.session == session:
                found.append(record)
        # Only `begin` closes a checkpoint, by opening the next: the newest is open.
        turns = [r for r in found if r.kind == CHECKPOINT] if self.hold_open else []
        if turns:
            newest = max(turns, key=lambda r: (r.time, r.id))
            found.remove(newest)
            self.held = [newest.id]
        return found

    def has_record(self, snapshot_id: str) -> bool:
        """Whether the snapshot is here (a damaged record counts: a pull never replaces it)."""
        try:
            return self.store.load_record(snapshot_id) is not None
        except ManifestError:
            return True

    def dropped(self) -> set[str]:
        """The ids a local gc dropped (`dropped`)."""
        return self.store.dropped()

    def record(self, snapshot_id: str) -> Record | None:
        """The snapshot's record here (None: none, or damaged)."""
        try:
            return self.store.load_record(snapshot_id)
        except ManifestError:
            return None

    def read(self, digest: Digest) -> bytes:
        """An object's bytes, checked against its digest."""
        return self.store.read(digest)

    def has(self, digest: str) -> bool:
        """Whether the object is stored."""
        return self.store.has(digest)

    def add(self, digest: Digest, data: bytes) -> None:
        """Stores an object (checked by the caller)."""
        self.store.add(digest, data)

    def flush(self) -> None:
        """Makes the objects added durable and visible."""
        self.store.flush()

    def save_record(self, record: Record) -> None:
        """Stores a pulled record, bound to this store's root."""
        if record.root != self.root:
            record = msgspec.structs.replace(record, root=self.root)
        self.store.save_record(record)
