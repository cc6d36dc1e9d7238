"""The store on disk: a store directory (see layout.py and docs/format.md).

Objects under 1 MiB are appended to packs, larger ones are one file each; every
read checks the bytes against their digest. Each pack is written by one process
only and published by writing its index last, so snapshots running side by side
never see each other's half-written objects and need no lock between them.
A snapshot (format 2) is its tree objects, stored like any object, and then its
record (`snapshots/<id>.json`, plain JSON) once they are flushed: a record's presence
means the snapshot is complete. A store written by an older worksnap holds format 1
manifests (zstd frames, frames.py) and their summaries instead, read as they are until
the migration (migration.py) turns each into trees and a record; when both exist for
one id, the record wins.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Container, Hashable, Iterator

import msgspec
from blake3 import blake3

from worksnap.errors import InputError, ManifestError, ObjectError, SnapshotError
from worksnap.frames import MAX_UNPACKED, pack, unpack
from worksnap.fsio import file_state, fsync_dir, write_atomic
from worksnap.hash import SMALL, hash_bytes
from worksnap.layout import TEMP_MARK, StorePaths
from worksnap.manifest import Manifest, Summary, decode_manifest, encode_manifest
from worksnap.paths import Digest, is_digest
from worksnap.record import Record, decode_record, encode_record, summary_of

_idx_decoder = msgspec.msgpack.Decoder(list[tuple[str, int, int]])
_summary_decoder = msgspec.json.Decoder(Summary)
_encoder = msgspec.msgpack.Encoder()

_RECORD_MAX_BYTES = 1 << 24
"""The largest record read (16 MiB): a few hundred bytes, unless it holds many loose paths."""


class _PackWriter:
    """Appends objects to one new pack file owned by this process.

    Small objects are gathered in memory and written 1 MiB at a time: one
    `write` per object cost a third of a cold snapshot.
    """

    _BUFFER = 1 << 20

    def __init__(self, paths: StorePaths) -> None:
        self.name = secrets.token_hex(8)
        self.path = paths.pack(self.name)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        self.offset = 0
        self.pending = bytearray()
        self.records: list[tuple[str, int, int]] = []

    def append(self, digest: str, data: bytes) -> tuple[int, int]:
        where = (self.offset, len(data))
        self.pending += data
        self.records.append((digest, *where))
        self.offset += len(data)
        if len(self.pending) >= self._BUFFER:
            self.drain()
        return where

    def drain(self) -> None:
        """Writes the gathered objects to the pack file."""
        view = memoryview(self.pending)
        while view:
            view = view[os.write(self.fd, view) :]
        view.release()
        self.pending.clear()


class DiskStore:
    """One store directory. Cheap to create; reads its index on first use.

    Args:
        directory: the store directory.
        max_unpacked: the largest manifest written or read (`frames.MAX_UNPACKED`;
            smaller only in tests).
    """

    def __init__(self, directory: str, *, max_unpacked: int = MAX_UNPACKED) -> None:
        self.dir = directory
        self.paths = StorePaths(directory)
        self.max_unpacked = max_unpacked
        self._index: dict[str, tuple[str, int, int]] | None = None
        self._writer: _PackWriter | None = None
        self._read_fds: dict[str, int] = {}
        self.added = 0
        """How many new objects this instance has stored."""
        self._generation: tuple[int, int] | None = None

    # -- the directory -------------------------------------------------------

    def create(self) -> None:
        """Creates the store's directories (idempotent)."""
        paths = self.paths
        for path in (paths.packs, paths.objects, paths.snapshots, paths.manifests):
            os.makedirs(path, exist_ok=True)
        os.makedirs(paths.cache, exist_ok=True)
        fsync_dir(self.dir)  # the new directories survive a crash with what goes in them
        if not os.path.exists(paths.gitignore):
            write_atomic(paths.gitignore, b"*\n")

    def exists(self) -> bool:
        """True when a store has been created here."""
        return os.path.isdir(self.paths.snapshots) or os.path.isdir(self.paths.manifests)

    def bind(self, root: str) -> None:
        """Creates the store if needed and binds it to `root`, the one root it serves.

        Raises:
            InputError: the store belongs to another root.
        """
        if not self.exists():
            self.create()
        try:
            with open(self.paths.root, encoding="utf-8", errors="surrogateescape") as f:
                bound = f.read().rstrip("\n")
        except FileNotFoundError:
            self.rebind(root)
            return
        if bound != root:
            raise InputError(
                f"store {self.dir} belongs to {bound}, not {root} "
                "(if the project moved, run `worksnap rebind`)"
            )

    def rebind(self, root: str) -> None:
        """Records `root` as the root this store belongs to."""
        write_atomic(self.paths.root, os.fsencode(root) + b"\n")

    def close(self) -> None:
        """Closes open pack files (an unflushed pack is left for gc to sweep)."""
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()
        if self._writer is not None:
            os.close(self._writer.fd)
            self._writer = None

    # -- objects -------------------------------------------------------------

    def _loose_path(self, digest: str) -> str:
        if not is_digest(digest):
            raise ObjectError(digest, "not a digest")
        return self.paths.loose(digest)

    def _load_index(self) -> dict[str, tuple[str, int, int]]:
        if self._index is None:
            index: dict[str, tuple[str, int, int]] = {}
            try:
                names = os.listdir(self.paths.packs)
            except FileNotFoundError:
                names = []
            for name in sorted(names):
                pack, kind = self.paths.pack_file(name)
                if kind == "index":
                    with open(self.paths.pack_index(pack), "rb") as f:
                        records = _idx_decoder.decode(f.read())
                    for digest, offset, size in records:
                        index[digest] = (pack, offset, size)
            self._index = index
        return self._index

    def sync(self) -> bool:
        """Forgets the remembered index if a gc has swept objects since it was read.

        A long-lived instance would otherwise take a swept object for present and
        record a snapshot that needs it. Call under the store lock.

        Returns:
            True when a sweep happened since the last call.
        """
        try:
            st = os.stat(self.paths.generation)
            generation: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            generation = None
        if generation == self._generation:
            return False
        self._generation = generation
        self._index = None
        return True

    def indexed(self) -> Container[str]:
        """Digests known to be stored without a system call (packed objects, < 1 MiB).

        A live view: objects added later are in it too.
        """
        return self._load_index().keys()

    def has(self, digest: str) -> bool:
        """True when the object is stored (not checked against its digest; see `read`)."""
        return digest in self._load_index() or os.path.exists(self._loose_path(digest))

    def add(self, digest: Digest, data: bytes) -> bool:
        """Stores `data` under `digest` unless it is already there; True when it was new."""
        if self.add_tree(digest, data):
            self.added += 1
            return True
        return False

    def add_tree(self, digest: Digest, data: bytes) -> bool:
        """Stores a tree object as `add` does, without counting it in `added`."""
        # A small object is never stored loose: the index alone answers for it.
        if digest in self._load_index() or (len(data) >= SMALL and self.has(digest)):
            return False
        if len(data) >= SMALL:
            write_atomic(self._loose_path_dir(digest), data)
            return True
        if self._writer is None:
            self._writer = _PackWriter(self.paths)
        offset, size = self._writer.append(digest, data)
        self._load_index()[digest] = (self._writer.name, offset, size)
        return True

    def _loose_path_dir(self, digest: str) -> str:
        path = self._loose_path(digest)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fsync_dir(self.paths.objects)
        return path

    def add_file(self, digest: Digest, path: str | bytes, rel: str, *, dir_fd: int | None) -> bool:
        """Stores a large file by streaming it; True when it was new.

        Args:
            digest: what the file was hashed to.
            path: the file (a name relative to `dir_fd` when given); never followed.
            rel: its path relative to the root, for errors.
            dir_fd: a descriptor on the file's directory, or None.

        Raises:
            SnapshotError: the file no longer has the digest it was hashed to.
        """
        if self.has(digest):
            return False
        self.added += 1
        target = self._loose_path_dir(digest)
        tmp = f"{target}{TEMP_MARK}{secrets.token_hex(4)}"
        hasher = blake3(max_threads=blake3.AUTO)
        try:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    hasher.update(chunk)
                    dst.write(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            if hasher.hexdigest() != digest:
                raise SnapshotError(rel, "changed while it was being stored")
            os.replace(tmp, target)
        except OSError as exc:
            raise SnapshotError(rel, f"cannot store: {exc.strerror}") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fsync_dir(os.path.dirname(target))
        return True

    def flush(self) -> None:
        """Makes every object added so far durable and visible to other processes."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.drain()
            os.fsync(writer.fd)
        finally:
            os.close(writer.fd)
        # The index is written last: a pack without one is invisible and swept by gc.
        write_atomic(self.paths.pack_index(writer.name), _encoder.encode(writer.records))

    def read(self, digest: str) -> bytes:
        """Returns an object's bytes after checking them against the digest.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        located = self._load_index().get(digest)
        loose = self._loose_path(digest)
        if located is None and self._writer is None and not os.path.exists(loose):
            self._index = None  # another process may have published a pack since we looked
            located = self._load_index().get(digest)
        try:
            if located is None:
                with open(loose, "rb") as f:
                    data = f.read()
            else:
                pack, offset, size = located
                if self._writer is not None and pack == self._writer.name:
                    self._writer.drain()  # it may still be in the write buffer
                fd = self._read_fds.get(pack)
                if fd is None:
                    fd = os.open(self.paths.pack(pack), os.O_RDONLY)
                    self._read_fds[pack] = fd
                data = os.pread(fd, size, offset)
        except FileNotFoundError:
            raise ObjectError(digest, "missing from the store") from None
        except OSError as exc:
            raise ObjectError(digest, f"unreadable: {exc.strerror}") from None
        if hash_bytes(data) != digest:
            raise ObjectError(digest, "damaged: its bytes do not match its digest")
        return data

    def digests(self) -> Iterator[str]:
        """Yields the digest of every stored object."""
        yield from self._load_index()
        if os.path.isdir(self.paths.objects):
            for sub in os.listdir(self.paths.objects):
                for rest in os.listdir(os.path.join(self.paths.objects, sub)):
                    if not self.paths.is_temp(rest):
                        yield sub + rest

    # -- snapshots -----------------------------------------------------------

    def manifest_stamp(self, snapshot_id: str) -> Hashable | None:
        """Returns what changes whenever the stored snapshot changes (None: unknown)."""
        for path in (self.paths.record(snapshot_id), self.paths.manifest(snapshot_id)):
            try:
                return (path, file_state(os.stat(path)))
            except FileNotFoundError:
                continue
            except OSError:
                return None
        return None

    def save_record(self, record: Record) -> None:
        """Stores a snapshot's record once its objects are durable (a record means complete)."""
        self.flush()
        os.makedirs(self.paths.snapshots, exist_ok=True)
        write_atomic(self.paths.record(record.id), encode_record(record))

    def load_record(self, snapshot_id: str) -> Record | None:
        """Reads and decodes a snapshot's record (None: it has none; checked by the caller).

        Raises:
            ManifestError: the record is unreadable, not canonical, or of a newer version.
        """
        try:
            with open(self.paths.record(snapshot_id), "rb") as f:
                data = f.read(_RECORD_MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ManifestError(snapshot_id, f"cannot read its record: {exc.strerror}") from None
        if len(data) > _RECORD_MAX_BYTES:
            raise ManifestError(snapshot_id, f"record over {_RECORD_MAX_BYTES} bytes")
        return decode_record(data, snapshot_id)

    def save_manifest(self, manifest: Manifest, summary: Summary) -> None:
        """Stores a format 1 snapshot: its manifest, then its summary (tests of old stores)."""
        self.flush()
        os.makedirs(self.paths.summaries, exist_ok=True)
        self.replace_manifest(manifest)
        write_atomic(self.paths.summary(manifest.id), msgspec.json.encode(summary))

    def replace_manifest(self, manifest: Manifest) -> None:
        """Writes a format 1 manifest (compressed) over any stored one with its id.

        Raises:
            SnapshotError: the manifest is larger than a reader accepts.
        """
        data = encode_manifest(manifest)
        if len(data) > self.max_unpacked:
            raise SnapshotError("", f"manifest of {len(data)} bytes is over {self.max_unpacked}")
        write_atomic(self.paths.manifest(manifest.id), pack(data))

    def manifest_bytes(self, snapshot_id: str) -> bytes:
        """Returns a stored format 1 manifest's JSON (decompressed).

        Raises:
            ManifestError: there is no readable manifest with that id.
        """
        try:
            with open(self.paths.manifest(snapshot_id), "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ManifestError(snapshot_id, f"cannot read: {exc.strerror}") from None
        try:
            return unpack(data, limit=self.max_unpacked)
        except ValueError as exc:
            raise ManifestError(snapshot_id, str(exc)) from None

    def load_manifest(self, snapshot_id: str) -> Manifest:
        """Reads and decodes a stored format 1 manifest (paths are checked by the caller)."""
        return decode_manifest(self.manifest_bytes(snapshot_id), snapshot_id)

    def _named(self, directory: str) -> list[str]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return [i for name in names if (i := self.paths.snapshot_id(name)) is not None]

    def ids(self) -> list[str]:
        """Returns the ids of every stored snapshot (records and format 1 manifests)."""
        return list(dict.fromkeys(self._named(self.paths.snapshots) + self.legacy_ids()))

    def legacy_ids(self) -> list[str]:
        """Returns the ids that still have a format 1 manifest (a record may exist too)."""
        return self._named(self.paths.manifests)

    def summaries(self) -> tuple[list[Summary], list[str]]:
        """Returns the readable summaries, and one line for each damaged snapshot skipped."""
        found: list[Summary] = []
        problems: list[str] = []
        recorded = self._named(self.paths.snapshots)
        for snapshot_id in recorded:
            try:
                record = self.load_record(snapshot_id)
            except ManifestError as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable record ({exc}); skipped")
                continue
            if record is None:
                continue  # dropped since the listing
            if record.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: record names {record.id}; skipped")
                continue
            found.append(summary_of(record))
        for snapshot_id in set(self.legacy_ids()).difference(recorded):
            try:
                with open(self.paths.summary(snapshot_id), "rb") as f:
                    summary = _summary_decoder.decode(f.read())
            except FileNotFoundError:
                continue  # still being written, or its snapshot failed half-way
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable summary ({exc}); skipped")
                continue
            if summary.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: summary names {summary.id}; skipped")
                continue
            found.append(summary)
        return found, problems

    def delete_legacy(self, snapshot_id: str) -> None:
        """Removes a snapshot's format 1 files: its summary first, then its manifest."""
        for path in (self.paths.summary(snapshot_id), self.paths.manifest(snapshot_id)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot: its record, then any format 1 summary and manifest."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.paths.record(snapshot_id))
        self.delete_legacy(snapshot_id)

    def sweep(self, live: set[str]) -> tuple[int, int]:
        """Deletes every object not in `live`, and leftovers of interrupted writes.

        Packs holding dead objects are rewritten with only their live ones. The
        caller holds the exclusive lock, so no pack is being written.

        Returns:
            How many objects were removed and how many bytes that freed.
        """
        self.close()
        removed = freed = 0
        packs = self.paths.packs
        names = set(os.listdir(packs)) if os.path.isdir(packs) else set()
        indexed = set()
        for name in sorted(names):
            pack_name, kind = self.paths.pack_file(name)
            if kind == "index":
                indexed.add(pack_name)
        for name in sorted(names):
            path = os.path.join(packs, name)
            pack_name, kind = self.paths.pack_file(name)
            if kind == "pack" and pack_name not in indexed:
                freed += os.path.getsize(path)  # never published: a writer died before its idx
                os.unlink(path)
            elif kind == "other":
                os.unlink(path)  # a temp file of an interrupted idx write
        for pack_name in sorted(indexed):
            with open(self.paths.pack_index(pack_name), "rb") as f:
                records = _idx_decoder.decode(f.read())
            dead = [r for r in records if r[0] not in live]
            if not dead:
                continue
            kept = [r for r in records if r[0] in live]
            if kept:
                with open(self.paths.pack(pack_name), "rb") as f:
                    for digest, offset, size in kept:
                        f.seek(offset)
                        self._writer = self._writer or _PackWriter(self.paths)
                        self._writer.append(digest, f.read(size))
                self.flush()  # the live copies are durable before the old pack goes
            os.unlink(self.paths.pack_index(pack_name))
            os.unlink(self.paths.pack(pack_name))
            removed += len(dead)
            freed += sum(size for _, _, size in dead)
        if os.path.isdir(self.paths.objects):
            for sub in os.listdir(self.paths.objects):
                directory = os.path.join(self.paths.objects, sub)
                for rest in os.listdir(directory):
                    temp = self.paths.is_temp(rest)
                    if temp or sub + rest not in live:
                        path = os.path.join(directory, rest)
                        freed += os.path.getsize(path)
                        os.unlink(path)
                        removed += not temp
        self._index = None
        # Other processes may remember objects that are now gone: tell them.
        write_atomic(self.paths.generation, secrets.token_hex(8).encode())
        return removed, freed

    def size(self) -> int:
        """Returns the bytes the store takes on disk."""
        total = 0
        for directory, _, files in os.walk(self.dir):
            for name in files:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_size
                except FileNotFoundError:
                    continue
        return total

    def pins(self) -> set[str]:
        """Returns the ids of pinned snapshots (never dropped by gc)."""
        try:
            with open(self.paths.pins, "rb") as f:
                return set(msgspec.json.decode(f.read(), type=list[str]))
        except FileNotFoundError:
            return set()
        except (OSError, msgspec.DecodeError) as exc:
            raise ManifestError(os.path.basename(self.paths.pins), f"damaged ({exc})") from None

    def set_pins(self, pins: set[str]) -> None:
        """Stores the set of pinned snapshot ids."""
        write_atomic(self.paths.pins, msgspec.json.encode(sorted(pins)))
