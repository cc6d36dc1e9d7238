"""A store in memory, for tests: the same contract (store.Store) as the one on disk."""

from __future__ import annotations

import os
from collections.abc import Container, Hashable, Iterable, Iterator, Sequence

import msgspec

from worksnap.errors import InputError, ManifestError, ObjectError, SnapshotError
from worksnap.frames import MAX_UNPACKED
from worksnap.hash import hash_bytes
from worksnap.layout import belongs_elsewhere
from worksnap.manifest import Manifest, Summary, decode_manifest, encode_manifest
from worksnap.paths import Digest
from worksnap.record import Record, decode_record, encode_record, summary_of

_summary_decoder = msgspec.json.Decoder(Summary)


class MemoryStore:
    """A store in dictionaries, for tests: the same contract as `DiskStore`.

    `objects`, `records`, `manifests` and `summary_bytes` are plain dictionaries a test
    may damage (objects are checked on every read, records, manifests and summaries
    decoded). `manifests` and `summary_bytes` hold format 1 snapshots (an old store).
    """

    def __init__(self, *, max_unpacked: int = MAX_UNPACKED) -> None:
        self.max_unpacked = max_unpacked
        self.objects: dict[str, bytes] = {}
        self.records: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}
        self.summary_bytes: dict[str, bytes] = {}
        self.pinned: set[str] = set()
        self.dropped_ids: set[str] = set()
        self.added = 0
        self.created = False
        self.root: str | None = None
        self._versions: dict[str, int] = {}
        self._sweeps = 0
        self._dropped = 0
        self._synced = 0

    def create(self) -> None:
        """Marks the store created."""
        self.created = True

    def exists(self) -> bool:
        """True once created."""
        return self.created

    def bind(self, root: str) -> None:
        """Creates the store if needed and binds it to `root`."""
        self.created = True
        if self.root is None:
            self.root = root
        elif self.root != root:
            raise InputError(f"store in memory {belongs_elsewhere(self.root, root)}")

    def rebind(self, root: str) -> None:
        """Binds the store to `root`."""
        self.root = root

    def bound(self) -> str | None:
        """The root this store belongs to (None: none yet)."""
        return self.root

    def close(self) -> None:
        """Nothing to release."""

    def size(self) -> int:
        """Returns the bytes held."""
        return sum(map(len, (*self.objects.values(), *self.manifests.values())))

    # -- objects --------------------------------------------------------------

    def has(self, digest: str) -> bool:
        """True when the object is held."""
        return digest in self.objects

    def indexed(self) -> Container[str]:
        """Every held digest."""
        return self.objects.keys()

    def add(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Holds `data` under `digest` unless it is already there; True when it was new.

        `base` (a similar object) is a hint for compression, which this store has none of.
        """
        del base
        if self.add_tree(digest, data):
            self.added += 1
            return True
        return False

    def add_tree(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Holds a tree object as `add` does, without counting it in `added`."""
        del base
        if digest in self.objects:
            return False
        self.objects[digest] = bytes(data)
        return True

    def add_file(self, digest: Digest, path: str | bytes, rel: str, *, dir_fd: int | None) -> bool:
        """Reads the file again (never through a symlink) and holds it if it still has `digest`."""
        if digest in self.objects:
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            with open(fd, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise SnapshotError(rel, f"cannot store: {exc.strerror}") from None
        if hash_bytes(data) != digest:
            raise SnapshotError(rel, "changed while it was being stored")
        return self.add(digest, data)

    def read(self, digest: str) -> bytes:
        """Returns an object's bytes after checking them against the digest."""
        data = self.objects.get(digest)
        if data is None:
            raise ObjectError(digest, "missing from the store")
        if hash_bytes(data) != digest:
            raise ObjectError(digest, "damaged: its bytes do not match its digest")
        return data

    def read_chunks(self, digest: str) -> Iterator[bytes]:
        """Yields an object's bytes (held whole anyway), checked first."""
        yield self.read(digest)

    def check(self, digest: str) -> int:
        """Checks an object against its digest; returns its size."""
        return len(self.read(digest))

    def flush(self) -> None:
        """Everything held is visible at once."""

    def discard(self) -> None:
        """Nothing is ever unpublished."""

    def sweep_abandoned(self) -> int:
        """Nothing is ever abandoned."""
        return 0

    def reading_few(self) -> None:
        """Every object is at hand already."""

    def problems(self) -> list[str]:
        """A store in memory has no damaged parts besides its objects and manifests."""
        return []

    def record_damaged(self, digests: Iterable[str]) -> int:
        """Drops the objects (found damaged): the next snapshot stores them again."""
        dropped = sum(self.objects.pop(digest, None) is not None for digest in digests)
        self._dropped += dropped
        return dropped

    def digests(self) -> Iterator[str]:
        """Yields every held digest."""
        yield from list(self.objects)

    def sync(self) -> bool:
        """True when a sweep ran since the last call."""
        swept, self._synced = self._sweeps != self._synced, self._sweeps
        return swept

    def witness(self) -> bytes:
        """Changes with every sweep, and every object dropped as damaged."""
        return b"%d %d" % (self._sweeps, self._dropped)

    def sweep(
        self, live: set[str] | None, *, merge: bool = False, dry_run: bool = False
    ) -> tuple[int, int]:
        """Drops every object not in `live` (None: none); there are no packs to merge.

        With `dry_run`, drops nothing and says what it would.
        """
        dead = [digest for digest in self.objects if live is not None and digest not in live]
        freed = sum(len(self.objects[digest]) for digest in dead)
        if not dry_run:
            for digest in dead:
                del self.objects[digest]
            self._sweeps += 1
        return len(dead), freed

    def pack_count(self) -> int:
        """Objects are held one by one: no packs."""
        return 0

    # -- snapshots ------------------------------------------------------------

    def save_manifest(self, manifest: Manifest, summary: Summary) -> None:
        """Holds a manifest and then its summary."""
        self.replace_manifest(manifest)
        self.summary_bytes[manifest.id] = msgspec.json.encode(summary)

    def replace_manifest(self, manifest: Manifest) -> None:
        """Holds a manifest over any held one with its id."""
        data = encode_manifest(manifest)
        if len(data) > self.max_unpacked:
            raise SnapshotError("", f"manifest of {len(data)} bytes is over {self.max_unpacked}")
        self.manifests[manifest.id] = data
        self._versions[manifest.id] = self._versions.get(manifest.id, 0) + 1

    def manifest_bytes(self, snapshot_id: str) -> bytes:
        """Returns a held manifest's canonical JSON."""
        data = self.manifests.get(snapshot_id)
        if data is None:
            raise ManifestError(snapshot_id, "cannot read: No such file or directory")
        return data

    def load_manifest(self, snapshot_id: str) -> Manifest:
        """Decodes a held manifest."""
        return decode_manifest(self.manifest_bytes(snapshot_id), snapshot_id)

    def manifest_stamp(self, snapshot_id: str) -> Hashable | None:
        """Returns how often the snapshot was written (None: not held)."""
        held = snapshot_id in self.records or snapshot_id in self.manifests
        return self._versions.get(snapshot_id) if held else None

    def save_record(self, record: Record) -> None:
        """Holds a snapshot's record."""
        self.records[record.id] = encode_record(record)
        self._versions[record.id] = self._versions.get(record.id, 0) + 1

    def load_record(self, snapshot_id: str) -> Record | None:
        """Decodes a held record (None: none held)."""
        data = self.records.get(snapshot_id)
        return None if data is None else decode_record(data, snapshot_id)

    def ids(self) -> list[str]:
        """Returns the ids of every held snapshot."""
        return list(dict.fromkeys([*self.records, *self.manifests]))

    def legacy_ids(self) -> list[str]:
        """Returns the ids that still have a format 1 manifest."""
        return list(self.manifests)

    def summaries(self) -> tuple[list[Summary], list[str]]:
        """Returns the readable summaries, and one line for each damaged snapshot skipped."""
        found: list[Summary] = []
        problems: list[str] = []
        for snapshot_id in list(self.records):
            try:
                record = self.load_record(snapshot_id)
            except ManifestError as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable record ({exc}); skipped")
                continue
            if record is None:
                continue
            if record.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: record names {record.id}; skipped")
                continue
            found.append(summary_of(record))
        for snapshot_id in self.manifests:
            raw = self.summary_bytes.get(snapshot_id)
            if raw is None or snapshot_id in self.records:
                continue
            try:
                summary = _summary_decoder.decode(raw)
            except (msgspec.DecodeError, RecursionError) as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable summary ({exc}); skipped")
                continue
            if summary.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: summary names {summary.id}; skipped")
                continue
            found.append(summary)
        return found, problems

    def delete_legacy(self, snapshot_id: str) -> None:
        """Drops a snapshot's format 1 summary, then its manifest."""
        self.summary_bytes.pop(snapshot_id, None)
        self.manifests.pop(snapshot_id, None)

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Drops a snapshot: its record, then any format 1 summary and manifest."""
        self.records.pop(snapshot_id, None)
        self.delete_legacy(snapshot_id)

    def stop_older_sweeps(self) -> None:
        """Nothing to do: no older worksnap reads memory."""

    def note_dropped(self, snapshot_ids: Sequence[str]) -> None:
        """Remembers the ids a gc dropped."""
        self.dropped_ids.update(snapshot_ids)

    def dropped(self) -> set[str]:
        """The ids a gc dropped."""
        return set(self.dropped_ids)

    def pins(self) -> set[str]:
        """Returns the pinned ids."""
        return set(self.pinned)

    def set_pins(self, pins: set[str]) -> None:
        """Holds the set of pinned ids."""
        self.pinned = set(pins)
