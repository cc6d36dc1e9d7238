"""The store's contract: what the rest of worksnap needs from wherever snapshots are kept.

Two small `Protocol`s: `ObjectStore` (objects by digest: what a capture writes and a
restore reads) and `SnapshotStore` (manifests, their summaries, pins: the catalog of
snapshots); `Store` is both, with a lifecycle and the one root it serves.

Implementations: `diskstore.DiskStore` (a store directory, docs/format.md) and
`memstore.MemoryStore` (dictionaries, for tests). One contract suite
(tests/test_store_contract.py) runs against every implementation; a new backend
(say, an S3 bucket) is a new module that passes it.
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterable, Iterator, Sequence
from typing import Protocol

from worksnap.manifest import Manifest, Summary
from worksnap.paths import Digest
from worksnap.record import Record


class ObjectStore(Protocol):
    """Objects by the BLAKE3 digest of their bytes."""

    @property
    def added(self) -> int:
        """How many new objects this instance has stored (file contents and attachments)."""
        ...

    def exists(self) -> bool:
        """True when the store has been created."""
        ...

    def has(self, digest: str) -> bool:
        """True when the object is stored (not checked against its digest; see `read`)."""
        ...

    def indexed(self) -> Container[str]:
        """Digests known to be stored without asking the disk (a subset of `has`)."""
        ...

    def add(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Stores `data` under `digest` unless it is already there; True when it was new.

        `base` is a hint: the digest of an object `data` is likely close to (the previous
        version of the file or directory), which a store may compress it against. A
        read never depends on it being right, present, or given.
        """
        ...

    def add_tree(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Stores a tree object as `add` does, without counting it in `added` (file contents)."""
        ...

    def add_file(self, digest: Digest, path: str | bytes, rel: str, *, dir_fd: int | None) -> bool:
        """Stores a file hashed to `digest` by reading it again; True when it was new.

        Raises:
            SnapshotError: the file no longer has that digest, or cannot be read.
        """
        ...

    def read(self, digest: str) -> bytes:
        """Returns an object's bytes after checking them against the digest.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        ...

    def read_chunks(self, digest: str) -> Iterator[bytes]:
        """Yields an object's bytes a bounded piece at a time, and checks them at the end.

        Memory does not grow with the object's size. The bytes may be used only once
        the iteration ends without an error.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        ...

    def check(self, digest: str) -> int:
        """Reads an object through and checks it against its digest, in bounded memory: its size.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        ...

    def flush(self) -> None:
        """Makes every object added so far durable and visible to other processes.

        On a failure nothing unpublished is left behind.
        """
        ...

    def discard(self) -> None:
        """Drops what was added and not yet flushed (a snapshot failed)."""
        ...

    def sweep_abandoned(self) -> int:
        """Removes what writers that died left behind; returns the bytes freed."""
        ...

    def reading_few(self) -> None:
        """Says the command reads a few objects and writes none (`diff`, `show`, `cat`).

        A store may then find them without reading its whole index (multipack.py).
        """
        ...

    def problems(self) -> list[str]:
        """One line for each damaged part of the store that commands work around."""
        ...

    def record_damaged(self, digests: Iterable[str]) -> int:
        """Takes the stored copies of `digests` (found damaged) as not stored: how many.

        Under the exclusive lock (`verify --repair`). The next snapshot stores them again.
        """
        ...

    def digests(self) -> Iterator[str]:
        """Yields the digest of every stored object."""
        ...

    def sync(self) -> bool:
        """Forgets what it remembers if a sweep ran since the last call; True if one did."""
        ...

    def witness(self) -> bytes:
        """Bytes that change whenever an object stored now may be gone: compared, not parsed."""
        ...

    def sweep(
        self, live: set[str] | None, *, merge: bool = False, dry_run: bool = False
    ) -> tuple[int, int]:
        """Deletes every object not in `live` (None: none): (objects removed, bytes freed).

        With `merge`, small packs become one (see `DiskStore.sweep`). With `dry_run`,
        nothing is written or removed: the answer is what the run would return (the
        same plan, counted), unless the store changes in between.

        Raises:
            SweepStopped: the disk filled up part-way; what went before stays gone.
        """
        ...

    def pack_count(self) -> int:
        """How many packs hold the objects (each one's index is read by a new process)."""
        ...


class SnapshotStore(Protocol):
    """Snapshot records (format 2), format 1 manifests and summaries, and the pins gc honours.

    A record names its root tree, an object like any other; a store written by an
    older worksnap holds format 1 manifests until it is migrated (migration.py).
    """

    def save_record(self, record: Record) -> None:
        """Makes every object added durable, then stores the record (a record means complete)."""
        ...

    def load_record(self, snapshot_id: str) -> Record | None:
        """Reads a snapshot's record (None: it has none; checked by the caller).

        Raises:
            ManifestError: the record is unreadable, not canonical, or of a newer version.
        """
        ...

    def legacy_ids(self) -> list[str]:
        """Returns the ids that still have a format 1 manifest (a record may exist too)."""
        ...

    def delete_legacy(self, snapshot_id: str) -> None:
        """Removes a snapshot's format 1 summary, then its manifest."""
        ...

    def save_manifest(self, manifest: Manifest, summary: Summary) -> None:
        """Stores a format 1 manifest and then its summary (tests of old stores)."""
        ...

    def replace_manifest(self, manifest: Manifest) -> None:
        """Writes a manifest over any stored one with its id; not its summary."""
        ...

    def manifest_bytes(self, snapshot_id: str) -> bytes:
        """Returns a stored manifest's canonical JSON (what `show --json` prints).

        Raises:
            ManifestError: there is no readable manifest with that id.
        """
        ...

    def load_manifest(self, snapshot_id: str) -> Manifest:
        """Reads and decodes a stored manifest (paths are checked by the caller)."""
        ...

    def manifest_stamp(self, snapshot_id: str) -> Hashable | None:
        """Returns what changes whenever the stored manifest changes (None: unknown)."""
        ...

    def ids(self) -> list[str]:
        """Returns the ids of every stored snapshot (records and format 1 manifests)."""
        ...

    def summaries(self) -> tuple[list[Summary], list[str]]:
        """Returns the readable summaries, and one line for each damaged snapshot skipped."""
        ...

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot: its record, then any format 1 summary and manifest."""
        ...

    def stop_older_sweeps(self) -> None:
        """Makes sure a worksnap older than format 2 sweeps nothing here (before a migration)."""
        ...

    def note_dropped(self, snapshot_ids: Sequence[str]) -> None:
        """Notes that a local gc dropped these snapshots (a plain pull leaves them out)."""
        ...

    def dropped(self) -> set[str]:
        """The ids of snapshots a local gc dropped, as far as the store remembers."""
        ...

    def pins(self) -> set[str]:
        """Returns the ids of pinned snapshots (never dropped by gc)."""
        ...

    def set_pins(self, pins: set[str]) -> None:
        """Stores the set of pinned snapshot ids."""
        ...


class Store(ObjectStore, SnapshotStore, Protocol):
    """Objects and snapshots in one place, created on first write, for one root."""

    def create(self) -> None:
        """Creates the store (idempotent)."""
        ...

    def bind(self, root: str) -> None:
        """Creates the store if needed and binds it to `root`, the one root it serves.

        Raises:
            InputError: the store belongs to another root.
        """
        ...

    def rebind(self, root: str) -> None:
        """Records `root` as the root this store belongs to (after the project moved)."""
        ...

    def bound(self) -> str | None:
        """The root this store belongs to (None: none recorded yet); reads only."""
        ...

    def close(self) -> None:
        """Releases open files; the store may be used again after."""
        ...

    def size(self) -> int:
        """Returns the bytes the store takes."""
        ...
