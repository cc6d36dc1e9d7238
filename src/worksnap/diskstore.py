"""The store on disk: a store directory (see layout.py and docs/format.md).

Objects under 1 MiB are appended to packs, larger ones are one file each; every
read checks the bytes against their digest. Each pack is written by one process
only and published by writing its index last, so snapshots running side by side
never see each other's half-written objects and need no lock between them.
A snapshot (format 2) is its tree objects, stored like any object, and then its
record (`snapshots/<id>.json`, plain JSON; diskrecords.py) once they are flushed: a record's
presence means the snapshot is complete. Format 1 manifests last until migration.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Container, Iterable, Iterator

from blake3 import blake3

from worksnap.damagedcopies import read_damaged, take_as_not_stored
from worksnap.diskrecords import SnapshotFiles
from worksnap.errors import InputError, ObjectError, SnapshotError, StoreError
from worksnap.frames import MAX_UNPACKED
from worksnap.fsio import write_all
from worksnap.hash import SMALL, hash_bytes
from worksnap.layout import STORE_FORMAT, TEMP_MARK, StorePaths, belongs_elsewhere
from worksnap.multipack import Quick, StaleIndex, refresh
from worksnap.objectindex import Finder, ObjectIndex, join_indexes
from worksnap.packcodec import (
    MAX_CHAIN,
    NEWER_VERSION,
    OpenPacks,
    PackRows,
    PackWriter,
    Recent,
    Slot,
    base_bytes,
    compress,
    decode_rows,
    format_problem,
    moved,
    rebuild,
    slots,
    sound_chain,
)
from worksnap.packsweep import SweepPlan, Tally, announce, plan_sweep, remove_packs, small_packs
from worksnap.paths import Digest, is_digest
from worksnap.storedir import KIB, MIB, StoreDir

CHUNK = MIB
"""Objects are read, checked and written this many bytes at a time: memory never grows
with the size of a file (a 3 GB file once cost a 3.1 GB peak)."""

# The most each kind of store file may hold: a hostile store cannot make a read eat memory.
MERGE_BELOW = 16 * MIB
"""A pack smaller than this is merged with the others (`sweep`); a first snapshot's stays."""

_MAX_INDEX = 256 * MIB  # 80 bytes per object: over 3 million objects in one pack
_MAX_ROOT = 64 * KIB
_DAMAGED = "damaged: its bytes do not match its digest"


class DiskStore(SnapshotFiles):
    """One store directory. Cheap to create; reads its index on first use.

    Every file of the store is reached through one `storedir.StoreDir`: never
    through a link, never a FIFO or a device, every read bounded.

    Args:
        directory: the store directory (resolved: no symlink is followed inside it).
        max_unpacked: the largest manifest written or read (`frames.MAX_UNPACKED`;
            smaller only in tests).
    """

    def __init__(self, directory: str, *, max_unpacked: int = MAX_UNPACKED) -> None:
        self.dir = directory
        self.files = StoreDir(directory)
        self.paths: StorePaths = self.files.paths
        self.max_unpacked = max_unpacked
        self._index: ObjectIndex | None = None
        self._quick = Quick(self.files, self._listed)  # until the index is read
        self._damaged: dict[str, str] = {}
        self._writer: PackWriter | None = None
        self._recent = Recent()
        self._format_known = False
        self._read_fds = OpenPacks()
        self._lock = threading.RLock()  # the index, packs, bases: reading threads share them
        self.added = 0
        """How many new objects this instance has stored."""
        self._generation: bytes | None = None  # what `sync` last read from `generation`
        self._indexes: set[str] = set()  # the pack indexes `_index` was read from

    # -- the directory -------------------------------------------------------

    def create(self) -> None:
        """Makes the store's folders, not format 1's `manifests/` (`StoreDir.refuse_foreign`)."""
        paths = self.paths
        self.files.refuse_foreign()
        for path in (paths.packs, paths.objects, paths.snapshots, paths.cache):
            self.files.makedirs(path)
        self.files.fsync(self.dir)  # the new directories survive a crash with what goes in them
        if self.files.lstat(paths.gitignore) is None:
            self.files.write(paths.gitignore, b"*\n")

    def exists(self) -> bool:
        """True when a store has been created here; a newer worksnap's is refused here."""
        self.files.refresh()
        found = self.files.is_dir(self.paths.snapshots) or self.files.is_dir(self.paths.manifests)
        if found and not self._format_known:  # (a review saw a format 4 store's pins rewritten)
            self._check_format()
        return found

    def bind(self, root: str) -> None:
        """Creates the store if needed and binds it to `root`, the one root it serves.

        Raises:
            InputError: the store belongs to another root.
        """
        if not self.exists():
            self.create()
        bound = self.bound()
        if bound is None:
            self.rebind(root)
            return
        if bound != root:
            raise InputError(f"store {self.dir} {belongs_elsewhere(bound, root)}")

    def rebind(self, root: str) -> None:
        """Records `root` as the root this store belongs to."""
        self.files.write(self.paths.root, os.fsencode(root) + b"\n")

    def bound(self) -> str | None:
        """The root this store belongs to (None: none recorded yet); reads only."""
        data = self.files.read_optional(self.paths.root, limit=_MAX_ROOT) or b""
        return os.fsdecode(data).rstrip("\n") or None

    def close(self) -> None:
        """Closes open files; an unpublished pack is removed (see `discard`)."""
        with self._lock:
            self._read_fds.close()
            self._quick.drop()
        self.discard()
        self.files.close()

    def discard(self) -> None:
        """Removes what this instance wrote and has not published: its pack, if any.

        A failed snapshot (a full disk) calls it: its half-written pack must not fill the disk
        until a gc. Published objects stay (others may use them); the next `sync` says True.
        """
        writer, self._writer = self._writer, None
        if writer is None:
            return
        self._generation = b"\0"  # no sweep writes it: the next `sync` says True
        os.close(writer.fd)
        self.files.unlink(writer.path)
        self._index = None  # it held this pack's records

    # -- objects -------------------------------------------------------------

    def _loose_path(self, digest: str) -> str:
        if not is_digest(digest):
            raise ObjectError(digest, "not a digest")
        return self.paths.loose(digest)

    def _load_index(self) -> ObjectIndex:
        with self._lock:
            return self._read_indexes() if self._index is None else self._index

    def _check_format(self) -> None:
        data = self.files.read_optional(self.paths.format, limit=_MAX_ROOT)
        if data is not None and (reason := format_problem(data)) is not None:
            raise StoreError(self.paths.format, reason)  # a newer worksnap's store
        self._format_known = data is not None

    def _read_indexes(self) -> ObjectIndex:
        self._check_format()
        self._find = Finder({})  # the old index goes before the new one is made
        self._quick.drop()
        for _ in range(16):  # a merge removed an index listed (its objects are in a new one)
            damaged: dict[str, str] = {}
            packs = self._listed()
            read = [self._read_index(p, damaged) for p in packs]
            if None not in read:
                break
        indexes = {os.path.basename(self.paths.pack_index(p)) for p in packs}
        if self._indexes - indexes:
            # A pack read before is gone (a sweep, or moved out as `verify` advises):
            # the next `sync` must say so, though this listing no longer names it.
            self._generation = b"\0"
        self._indexes = indexes
        index, self._find = join_indexes([r for r in read if r], damaged=read_damaged(self.files))
        if not damaged and None not in read:
            refresh(self.files, self.paths.multi_pack_index, packs, index)
        if self._writer is not None:  # its objects, not published yet, are still here
            for digest in self._writer.digests:
                index.add(digest, self._writer)
                self._find.added(digest)
        self._index, self._damaged = index, damaged
        self._recent.clear()  # a copy checked before may be found damaged since (a repair)
        return index

    def reading_few(self) -> None:
        """Reads through the multi-pack index from now on, until the pack indexes are read."""
        if self._index is None:
            self._check_format()  # as reading the pack indexes does
            self._quick.allow()

    def _listed(self) -> list[str]:
        """The names of the packs whose index is published, sorted (the order they join in)."""
        names = sorted(self.files.listdir(self.paths.packs))
        return [p for p, kind in map(self.paths.pack_file, names) if kind == "index"]

    def _read_index(self, name: str, damaged: dict[str, str]) -> tuple[list[str], PackRows] | None:
        """A pack's index; empty (and a note in `damaged`) if damaged; None if swept since."""
        try:
            return decode_rows(self.files.read(self.paths.pack_index(name), limit=_MAX_INDEX), name)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            damaged[name] = str(exc)
        return [], PackRows(name, framed=True)

    def _readable(self, digest: str) -> bytes | None:
        """An object's checked bytes, or None if it cannot be read."""
        with contextlib.suppress(ObjectError):
            return self.read(digest)
        return None

    def problems(self) -> list[str]:
        """A line for each pack index that does not decode (snapshots store again its objects)."""
        self._load_index()
        return [
            f"pack index {self.paths.pack_index(name)} is damaged ({reason}): the objects "
            f"of {self.paths.pack(name)} cannot be read"
            + ("" if reason.endswith(NEWER_VERSION) else "; move both files out of the store "
               "(a snapshot stores again what is still on disk)")
            for name, reason in sorted(self._damaged.items())
        ]  # fmt: skip

    def record_damaged(self, digests: Iterable[str]) -> int:
        """Takes the copies read of `digests` as not stored (`damagedcopies`): how many."""
        index, wanted = self._load_index(), list(digests)
        packed = {d: slot.pack for d in wanted if (slot := index.get(d)) is not None}
        count = take_as_not_stored(self.files, wanted, packed, self._listed())
        self.files.write(self.paths.generation, self.files.new_name().encode())  # anew (`sync`)
        self._index = None  # read again: those copies are no longer `present`
        return count

    def sync(self) -> bool:
        """True (the index forgotten) if objects may be gone since it was read; under the lock."""
        generation = self.files.read_optional(self.paths.generation, limit=256)
        gone = self._indexes.difference(self.files.listdir(self.paths.packs))
        if generation == self._generation and not gone:
            return False
        with self._lock:
            self._generation, self._index = generation, None
            self._quick.drop()
            self._read_fds.close()  # swept packs' space is freed only once no one holds them
        return True

    def witness(self) -> bytes:
        """`generation`, the published packs' indexes and the loose objects' folders."""
        return self.files.objects_witness(self._listed())

    def indexed(self) -> Container[str]:
        """Packed digests known to be stored, without a system call: a live view (`present`)."""
        return self._load_index().present()

    def has(self, digest: str) -> bool:
        """True when the object is stored (not checked against its digest; see `read`)."""
        if digest in self._load_index().present():
            return True
        st = self.files.lstat(self._loose_path(digest))
        return st is not None

    def add(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Stores `data` under `digest` unless it is there; True when new (`base`: a hint)."""
        if self.add_tree(digest, data, base=base):
            self.added += 1
            return True
        return False

    def add_tree(self, digest: Digest, data: bytes, *, base: str | None = None) -> bool:
        """Stores a tree object as `add` does, without counting it in `added`."""
        index = self._load_index()  # (a small object is never loose: the index answers)
        if digest in index.present() or (len(data) >= SMALL and self.has(digest)):
            return False
        if len(data) >= SMALL:
            self.files.write(self._loose_path(digest), data)
            return True
        base, base_data = self._base_for(digest, base)
        frame, used = compress(data, base_data)
        self._writer = self._writer or PackWriter(self.files)
        self._writer.append(digest, frame, len(data), base if used else None)
        index.add(digest, self._writer)
        self._find.added(digest)
        if base is not None:  # a version of something: the next one may stand on it
            self._recent.put(digest, data)
        return True

    def _base_for(self, digest: str, base: str | None) -> tuple[str | None, bytes | None]:
        """A new object's base (a full chain's middle: as close, and half as deep), its bytes."""
        links = sound_chain(base, self._find) if base is not None and base != digest else []
        if not links:
            return None, None  # not packed, or its chain is damaged (verify's to report)
        links = links[: len(links) // 2 + 1] if len(links) > MAX_CHAIN else links
        with self._lock:  # (as `read` does, from the chain just walked)
            data = base_bytes(links, self._find, self._stored, self._recent)
        return (links[-1][0], data) if data is not None else (None, None)

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
        target = self._loose_path(digest)
        tmp = f"{target}{TEMP_MARK}{self.files.new_name()}"
        hasher = blake3(max_threads=blake3.AUTO)
        try:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                out = self.files.create(tmp)
                try:
                    while chunk := os.read(source, CHUNK):
                        hasher.update(chunk)
                        write_all(out, chunk)
                    os.fsync(out)
                finally:
                    os.close(out)
            finally:
                os.close(source)
            if hasher.hexdigest() != digest:
                raise SnapshotError(rel, "changed while it was being stored")
            self.files.rename(tmp, target)
        except OSError as exc:
            raise SnapshotError(rel, f"cannot store: {exc.strerror}") from None
        finally:
            self.files.unlink(tmp)
        return True

    def flush(self) -> None:
        """Makes every object added so far durable and visible to other processes.

        On a failure (a full disk) the pack is removed: nothing of it was visible.
        """
        writer = self._writer
        if writer is None:
            return
        try:
            writer.drain()
            os.fsync(writer.fd)
            # The index is written last: a pack without one is invisible, and swept
            # once its writer is gone.
            if not self._format_known and self.files.lstat(self.paths.format) is None:
                self.files.write(self.paths.format, f"{STORE_FORMAT}\n".encode())
            self._format_known = True  # before the index: a store of packs says its format
            self.files.write(index := self.paths.pack_index(writer.name), writer.index())
            self._indexes.add(os.path.basename(index))
        except BaseException:
            self.discard()
            raise
        self._writer = None
        os.close(writer.fd)  # unlocks it: published, it is no longer a leftover

    def read(self, digest: str) -> bytes:
        """Returns an object's bytes after checking them against the digest.

        For large objects prefer `read_chunks`, which never holds more than `CHUNK`.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        return b"".join(self.read_chunks(digest))

    def read_chunks(self, digest: str, *, recent: Recent | None = None) -> Iterator[bytes]:
        """Yields an object's bytes `CHUNK` at a time; checks them once all are read.

        A caller may use the bytes only after the iteration ended without an error
        (apply writes them to a temp file and renames it only then).

        `recent`: the bases at hand (a check passes an empty one: every byte from disk).

        Raises:
            ObjectError: the object is missing, unreadable or damaged (at the end).
        """
        recent = self._recent if recent is None else recent
        try:
            with self._lock:
                data = self._packed(digest, recent)
            if data is not None:
                yield data
                return
            hasher = blake3(max_threads=blake3.AUTO)
            fd = self.files.open_file(self._loose_path(digest))
            try:
                while chunk := os.read(fd, CHUNK):
                    hasher.update(chunk)
                    yield chunk
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise ObjectError(digest, self._missing()) from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # (writing out the buffer, to read)
                raise  # a full disk, said as such: nothing read is damaged
            raise ObjectError(digest, f"unreadable: {exc.strerror}") from None
        if hasher.hexdigest() != digest:
            raise ObjectError(digest, _DAMAGED)

    def _packed(self, digest: str, recent: Recent) -> bytes | None:
        """A packed object's checked bytes; None when no pack holds it. Under `_lock`."""
        if self._index is None and self._writer is None and self._quick.usable:
            with contextlib.suppress(StaleIndex):  # (else the pack indexes answer, below)
                return self._quick.read(digest, self._stored, recent)
        located = self._load_index().get(digest)
        if located is None and not self.has(digest):
            self._index = None  # another process may have published a pack since we looked
            located = self._load_index().get(digest)
        if located is None:
            return None
        data = self._read_packed_again(digest, located, recent)
        if hash_bytes(data) != digest:
            raise ObjectError(digest, _DAMAGED)
        recent.put(digest, data)  # the next version may stand on it
        return data

    def _read_packed(self, digest: str, slot: Slot, recent: Recent) -> bytes:
        """A packed object's bytes: raw (version 1), or rebuilt from its frame and bases.

        Raises:
            ObjectError: a frame or the chain is damaged (a base missing, loose, a cycle).
        """
        if not slot.framed:
            return self._stored(slot)
        try:
            return rebuild(digest, self._find, self._stored, recent)
        except ValueError as exc:
            raise ObjectError(digest, str(exc)) from None

    def _read_packed_again(self, digest: str, slot: Slot, recent: Recent) -> bytes:
        """`_read_packed`, with the index read anew while a pack it names is gone (moved on)."""
        for _ in range(16):  # a merge in progress may list a copy in a pack it removes next
            try:
                return self._read_packed(digest, slot, recent)
            except FileNotFoundError:
                self._index = None
                self._read_fds.close()
                found = self._load_index().get(digest)
                if found is None:
                    raise
                slot = found
        return self._read_packed(digest, slot, recent)

    def _stored(self, slot: Slot) -> bytes:
        if self._writer is not None and slot.pack == self._writer.name:
            self._writer.drain()  # it may still be in the write buffer
        fd = self._read_fds.get(slot.pack, lambda: self.files.open_file(self.paths.pack(slot.pack)))
        return os.pread(fd, slot.stored, slot.offset)

    def _missing(self) -> str:
        if not self._damaged:
            return "missing from the store"
        names = ", ".join(self.paths.pack_index(n) for n in sorted(self._damaged))
        return f"missing from the store (the damaged pack index {names} may have held it)"

    def check(self, digest: str) -> int:
        """Reads an object through and checks it, holding at most `CHUNK` of it: its size.

        Raises:
            ObjectError: the object is missing or damaged.
        """
        return sum(len(chunk) for chunk in self.read_chunks(digest, recent=Recent()))

    def digests(self) -> Iterator[str]:
        """Yields the digest of every stored object."""
        yield from self._load_index()
        for sub in self.files.listdir(self.paths.objects):
            for rest in self.files.listdir(os.path.join(self.paths.objects, sub)):
                if not self.paths.is_temp(rest):
                    yield sub + rest

    def sweep_abandoned(self) -> int:
        """Removes dead writers' leftovers (`StoreDir.remove_unpublished`): bytes freed."""
        return self.files.remove_unpublished()

    def sweep(
        self, live: set[str] | None, *, merge: bool = False, dry_run: bool = False
    ) -> tuple[int, int]:
        """Deletes every object not in `live`, and leftovers of interrupted writes.

        First, before anything is written, go the packs no kept object is read from
        and the dead loose objects: on a full disk that is the room the rest needs.
        Then the packs holding dead objects beside kept ones are rewritten with only
        their kept ones, a live object whose base dies stored again alone, so no kept
        object loses a base (`packsweep.plan_sweep`); the new pack is durable before
        the old go. The caller holds the exclusive lock (a dry run, the shared one), so
        no pack is being written. A pack whose index is damaged is left as it is.

        Args:
            live: the objects to keep; None keeps every one.
            merge: the small packs (`_small_packs`) are rewritten too, into one, as
                git's automatic gc packs its packs: each snapshot that stores something
                writes a pack, and every new process reads every pack's index.
            dry_run: write and remove nothing; count what the run would, from the
                same plan (its answer, unless the store changes in between).

        Returns:
            (objects removed, bytes freed: their stored bytes and the leftovers' files)

        Raises:
            SweepStopped: the disk filled up part-way; what went before stays gone.
        """
        if live is None and not self._small_packs():  # nothing to merge: no index read
            return 0, self.files.remove_unpublished(dry_run=dry_run)  # dead leftovers only
        if not dry_run:
            self.close()
        self._index = None  # read afresh under the lock: others may have published packs
        done = Tally(0, self.files.remove_unpublished(dry_run=dry_run))
        index = self._load_index()
        if live is None and self._damaged:
            return 0, done.freed  # what a damaged pack holds is unknown: nothing else is moved
        small = self._small_packs() if merge else set()
        # A kept copy `verify --repair` found damaged stays where its record names it.
        held = {p for d, p in read_damaged(self.files) if live is None or d in live}
        held |= self._damaged.keys()
        packs = [  # (a merge reads only the packs it merges)
            (name, slots(*rows) if (rows := self._read_index(name, {})) else [])
            for name in self._listed()
            if name not in held and (live is not None or name in small)
        ]
        plan = plan_sweep(index, self._find, packs, live, small=small)
        if live is None and not plan.first and not plan.rewritten:
            return 0, done.freed  # nothing to merge: no pack written, no `generation` either
        if dry_run:
            done.add(*plan.removes())
            done.add(*self.files.sweep_loose(live, dry_run=True) if live is not None else (0, 0))
            return done.removed, done.freed
        try:
            if live is not None:  # a merge removes no object, only copies no one reads
                announce(self.files, plan.first, done)
            remove_packs(self.files, plan.first, done)
            if live is not None:  # loose objects are each a file: a merge leaves them be
                done.add(*self.files.sweep_loose(live))
            self._rewrite(plan)
            remove_packs(self.files, plan.rewritten, done)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise plan.stopped(self.dir, exc.strerror or str(exc), done) from None
        finally:
            self._indexes -= done.indexes  # (else its own next `sync` would say True)
            self._index = None
        return done.removed, done.freed

    def _rewrite(self, plan: SweepPlan) -> None:
        """Writes the kept copies of `plan.rewritten` into one new pack and publishes it."""
        try:
            for pack in (pack for pack in plan.rewritten if pack.copies):
                fd = self.files.open_file(self.paths.pack(pack.name))
                try:
                    for digest, slot in pack.copies:
                        self._writer = self._writer or PackWriter(self.files)
                        stored = os.pread(fd, slot.stored, slot.offset)
                        alone = self._readable(digest) if digest in plan.orphans else None
                        self._writer.append(digest, *moved(stored, slot, alone))
                finally:
                    os.close(fd)
            self.flush()  # every live copy is durable before any old pack goes
        except BaseException:
            # A full disk part-way: the half-written pack must not stay this instance's
            # writer (its next snapshot would publish it, offsets and all).
            self.discard()
            raise

    def pack_count(self) -> int:
        """How many packs are published (see `sweep`'s `merge`): listed, no index is read."""
        return len(self._listed())

    def _small_packs(self) -> set[str]:
        """The packs to merge (`packcodec.geometric`), of those under `MERGE_BELOW`."""
        self._load_index()  # (the packs it was read from)
        return small_packs(self.files, self._indexes, MERGE_BELOW)

    def size(self) -> int:
        """Returns the bytes the store takes on disk."""
        return self.files.walk_sizes()
