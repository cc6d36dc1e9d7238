"""The store: content-addressed objects, manifests, summaries and the stat cache.

Layout (see docs/format.md):

    <store>/.gitignore            "*": git never shows the store
    <store>/packs/<n>.pack        small objects appended back to back
    <store>/packs/<n>.idx         msgpack [[digest, offset, size], ...]; written last
    <store>/objects/<aa>/<rest>   objects of 1 MiB or more, one file each
    <store>/manifests/<id>.json   one manifest as a zstd frame of what `show --json` prints
    <store>/summaries/<id>.json   the few fields `list` shows, so listing never reads manifests
    <store>/cache/stat            stat cache, a zstd frame (may be deleted at any time)
    <store>/cache/dirs            listing cache, a zstd frame (may be deleted at any time)

Each pack is written by one process only and published by writing its index
last, so snapshots running side by side never see each other's half-written
objects and need no lock between them.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator

import msgspec
import zstandard
from blake3 import blake3

from worksnap.errors import ManifestError, ObjectError, SnapshotError
from worksnap.fsio import FileState, fsync_dir, write_atomic
from worksnap.hash import SMALL, hash_bytes
from worksnap.manifest import Manifest, Summary, decode_manifest, encode_manifest
from worksnap.paths import Digest, is_digest
from worksnap.scan import Listings

_ID_FILE = re.compile(r"([0-9a-f]{12})\.json\Z")
_idx_decoder = msgspec.msgpack.Decoder(list[tuple[str, int, int]])
_summary_decoder = msgspec.json.Decoder(Summary)
_encoder = msgspec.msgpack.Encoder()

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_UNPACKED = 1 << 30
"""The most a stored zstd frame may hold: a few bytes of hostile frame must not cost gigabytes."""


def _pack(data: bytes) -> bytes:
    """Returns `data` as one zstd frame: level 1, its size and a checksum of it in the frame."""
    # A compressor per call (~10 us): one instance must not be used by two threads at once.
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def _unpack(data: bytes) -> bytes:
    """Returns what a stored file holds: a zstd frame's content, any other bytes as they are.

    Files written before compression (plain JSON, msgpack) never start with the zstd magic.

    Raises:
        ValueError: the frame is damaged, lacks its size, or holds more than `MAX_UNPACKED`.
    """
    if not data.startswith(_ZSTD_MAGIC):
        return data
    try:
        # decompress() allocates the size the frame declares: check it first.
        size = zstandard.frame_content_size(data)
        if size < 0:
            raise ValueError("zstd frame without its content size (worksnap writes it)")
        if size > MAX_UNPACKED:
            raise ValueError(
                f"zstd frame declares {size} bytes, more than the {MAX_UNPACKED} allowed"
            )
        return zstandard.ZstdDecompressor().decompress(data, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise ValueError(f"damaged zstd frame ({exc})") from None


class _PackWriter:
    """Appends objects to one new pack file owned by this process.

    Small objects are gathered in memory and written 1 MiB at a time: one
    `write` per object cost a third of a cold snapshot.
    """

    _BUFFER = 1 << 20

    def __init__(self, packs_dir: str) -> None:
        self.name = secrets.token_hex(8)
        self.path = os.path.join(packs_dir, self.name + ".pack")
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


class Store:
    """One store directory. Cheap to create; reads its index on first use."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._packs = os.path.join(directory, "packs")
        self._objects = os.path.join(directory, "objects")
        self._manifests = os.path.join(directory, "manifests")
        self._summaries = os.path.join(directory, "summaries")
        self._index: dict[str, tuple[str, int, int]] | None = None
        self._writer: _PackWriter | None = None
        self._read_fds: dict[str, int] = {}
        self.added = 0
        """How many new objects this instance has stored."""
        self._generation: tuple[int, int] | None = None

    # -- layout --------------------------------------------------------------

    def create(self) -> None:
        """Creates the store's directories (idempotent)."""
        for path in (self._packs, self._objects, self._manifests, self._summaries):
            os.makedirs(path, exist_ok=True)
        os.makedirs(os.path.join(self.dir, "cache"), exist_ok=True)
        fsync_dir(self.dir)  # the new directories survive a crash with what goes in them
        gitignore = os.path.join(self.dir, ".gitignore")
        if not os.path.exists(gitignore):
            write_atomic(gitignore, b"*\n")

    def exists(self) -> bool:
        """True when a store has been created here."""
        return os.path.isdir(self._manifests)

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
        return os.path.join(self._objects, digest[:2], digest[2:])

    def _load_index(self) -> dict[str, tuple[str, int, int]]:
        if self._index is None:
            index: dict[str, tuple[str, int, int]] = {}
            try:
                names = os.listdir(self._packs)
            except FileNotFoundError:
                names = []
            for name in sorted(names):
                if name.endswith(".idx"):
                    pack = name[: -len(".idx")]
                    with open(os.path.join(self._packs, name), "rb") as f:
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
            st = os.stat(os.path.join(self.dir, "generation"))
            generation: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            generation = None
        if generation == self._generation:
            return False
        self._generation = generation
        self._index = None
        return True

    def index(self) -> dict[str, tuple[str, int, int]]:
        """Returns digest -> (pack, offset, size) of every packed object (objects < 1 MiB)."""
        return self._load_index()

    def has(self, digest: str) -> bool:
        """True when the object is stored (not checked against its digest; see `read`)."""
        return digest in self._load_index() or os.path.exists(self._loose_path(digest))

    def add(self, digest: Digest, data: bytes) -> bool:
        """Stores `data` under `digest` unless it is already there; True when it was new."""
        # A small object is never stored loose: the index alone answers for it.
        if digest in self._load_index() or (len(data) >= SMALL and self.has(digest)):
            return False
        self.added += 1
        if len(data) >= SMALL:
            write_atomic(self._loose_path_dir(digest), data)
            return True
        if self._writer is None:
            self._writer = _PackWriter(self._packs)
        offset, size = self._writer.append(digest, data)
        self._load_index()[digest] = (self._writer.name, offset, size)
        return True

    def _loose_path_dir(self, digest: str) -> str:
        path = self._loose_path(digest)
        if not os.path.isdir(os.path.dirname(path)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fsync_dir(self._objects)
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
        tmp = f"{target}.tmp-{secrets.token_hex(4)}"
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
        write_atomic(
            os.path.join(self._packs, writer.name + ".idx"), _encoder.encode(writer.records)
        )

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
                    fd = os.open(os.path.join(self._packs, pack + ".pack"), os.O_RDONLY)
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
        if os.path.isdir(self._objects):
            for sub in os.listdir(self._objects):
                for rest in os.listdir(os.path.join(self._objects, sub)):
                    if ".tmp-" not in rest:
                        yield sub + rest

    # -- manifests -----------------------------------------------------------

    def manifest_path(self, snapshot_id: str) -> str:
        """Returns where the manifest with this id is stored."""
        return os.path.join(self._manifests, snapshot_id + ".json")

    def save_manifest(self, manifest: Manifest, summary: Summary) -> None:
        """Stores a manifest and then its summary (a summary means a complete snapshot)."""
        self.flush()
        self.replace_manifest(manifest)
        write_atomic(
            os.path.join(self._summaries, manifest.id + ".json"), msgspec.json.encode(summary)
        )

    def replace_manifest(self, manifest: Manifest) -> None:
        """Writes a manifest (compressed) over any stored one with its id; not its summary.

        Raises:
            SnapshotError: the manifest is larger than a reader accepts.
        """
        data = encode_manifest(manifest)
        if len(data) > MAX_UNPACKED:
            raise SnapshotError("", f"manifest of {len(data)} bytes is over {MAX_UNPACKED}")
        write_atomic(self.manifest_path(manifest.id), _pack(data))

    def manifest_bytes(self, snapshot_id: str) -> bytes:
        """Returns a stored manifest's JSON (decompressed), what `show --json` prints.

        Raises:
            ManifestError: there is no readable manifest with that id.
        """
        try:
            with open(self.manifest_path(snapshot_id), "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ManifestError(snapshot_id, f"cannot read: {exc.strerror}") from None
        try:
            return _unpack(data)
        except ValueError as exc:
            raise ManifestError(snapshot_id, str(exc)) from None

    def load_manifest(self, snapshot_id: str) -> Manifest:
        """Reads and decodes a stored manifest (paths are checked by the caller)."""
        return decode_manifest(self.manifest_bytes(snapshot_id), snapshot_id)

    def ids(self) -> list[str]:
        """Returns the ids of every stored manifest."""
        try:
            names = os.listdir(self._manifests)
        except FileNotFoundError:
            return []
        return [m.group(1) for name in names if (m := _ID_FILE.match(name))]

    def summaries(self) -> tuple[list[Summary], list[str]]:
        """Returns the readable summaries, and one line for each damaged snapshot skipped."""
        found: list[Summary] = []
        problems: list[str] = []
        for snapshot_id in self.ids():
            path = os.path.join(self._summaries, snapshot_id + ".json")
            try:
                with open(path, "rb") as f:
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

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot: its summary first (so `list` stops showing it), then its manifest."""
        for path in (
            os.path.join(self._summaries, snapshot_id + ".json"),
            self.manifest_path(snapshot_id),
        ):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def sweep(self, live: set[str]) -> tuple[int, int]:
        """Deletes every object not in `live`, and leftovers of interrupted writes.

        Packs holding dead objects are rewritten with only their live ones. The
        caller holds the exclusive lock, so no pack is being written.

        Returns:
            How many objects were removed and how many bytes that freed.
        """
        self.close()
        removed = freed = 0
        names = set(os.listdir(self._packs)) if os.path.isdir(self._packs) else set()
        for name in sorted(names):
            path = os.path.join(self._packs, name)
            pack = name.rsplit(".", 1)[0]
            if name.endswith(".pack") and pack + ".idx" not in names:
                freed += os.path.getsize(path)  # never published: a writer died before its idx
                os.unlink(path)
            elif not name.endswith((".pack", ".idx")):
                os.unlink(path)  # a temp file of an interrupted idx write
        for name in sorted(n for n in names if n.endswith(".idx")):
            pack = name[: -len(".idx")]
            with open(os.path.join(self._packs, name), "rb") as f:
                records = _idx_decoder.decode(f.read())
            dead = [r for r in records if r[0] not in live]
            if not dead:
                continue
            kept = [r for r in records if r[0] in live]
            if kept:
                with open(os.path.join(self._packs, pack + ".pack"), "rb") as f:
                    for digest, offset, size in kept:
                        f.seek(offset)
                        self._writer = self._writer or _PackWriter(self._packs)
                        self._writer.append(digest, f.read(size))
                self.flush()  # the live copies are durable before the old pack goes
            os.unlink(os.path.join(self._packs, name))
            os.unlink(os.path.join(self._packs, pack + ".pack"))
            removed += len(dead)
            freed += sum(size for _, _, size in dead)
        if os.path.isdir(self._objects):
            for sub in os.listdir(self._objects):
                directory = os.path.join(self._objects, sub)
                for rest in os.listdir(directory):
                    if ".tmp-" in rest or sub + rest not in live:
                        path = os.path.join(directory, rest)
                        freed += os.path.getsize(path)
                        os.unlink(path)
                        removed += ".tmp-" not in rest
        self._index = None
        # Other processes may remember objects that are now gone: tell them.
        write_atomic(os.path.join(self.dir, "generation"), secrets.token_hex(8).encode())
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
            with open(os.path.join(self.dir, "pins.json"), "rb") as f:
                return set(msgspec.json.decode(f.read(), type=list[str]))
        except FileNotFoundError:
            return set()
        except (OSError, msgspec.DecodeError) as exc:
            raise ManifestError("pins.json", f"damaged ({exc})") from None

    def set_pins(self, pins: set[str]) -> None:
        """Stores the set of pinned snapshot ids."""
        write_atomic(os.path.join(self.dir, "pins.json"), msgspec.json.encode(sorted(pins)))

    # -- caches --------------------------------------------------------------

    def load_listings(self, root: str) -> Listings:
        """Returns the per-directory scan cache for `root` (empty if missing or damaged)."""
        try:
            with open(os.path.join(self.dir, "cache", "dirs"), "rb") as f:
                data = _unpack(f.read())
            cached_root, listings = msgspec.msgpack.decode(data, type=tuple[str, Listings])
        except (OSError, ValueError):  # a damaged frame; msgspec.DecodeError is a ValueError
            return Listings()
        return listings if cached_root == root else Listings()

    def save_listings(self, root: str, listings: Listings) -> None:
        """Stores the per-directory scan cache; losing it only costs a full scan."""
        write_atomic(
            os.path.join(self.dir, "cache", "dirs"),
            _pack(_encoder.encode((root, listings))),
            durable=False,
        )

    def load_stat_cache(self, root: str) -> dict[str, tuple[FileState, str]]:
        """Returns the stat cache for `root` ({} if missing, damaged or for another root)."""
        try:
            with open(os.path.join(self.dir, "cache", "stat"), "rb") as f:
                data = _unpack(f.read())
            cached_root, table = msgspec.msgpack.decode(
                data, type=tuple[str, dict[str, tuple[tuple[int, int, int, int, int], str]]]
            )
        except (OSError, ValueError):  # a damaged frame; msgspec.DecodeError is a ValueError
            return {}
        return table if cached_root == root else {}

    def save_stat_cache(self, root: str, table: dict[str, tuple[FileState, str]]) -> None:
        """Stores the stat cache; losing it only costs re-hashing, so it is not fsynced."""
        write_atomic(
            os.path.join(self.dir, "cache", "stat"),
            _pack(_encoder.encode((root, table))),
            durable=False,
        )
