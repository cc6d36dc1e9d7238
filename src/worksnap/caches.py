"""Caches: the stat cache and the listing cache, what they are keyed on, and where they live.

Both only ever save work: the stat cache answers a file's digest when its
`fsio.file_state` is what it was when the digest was taken, the listing cache a
directory's classified children when the directory and its `.gitignore` are
unchanged under the same rules. Each is stored as one checksummed zstd frame
(`<store>/cache/stat`, `<store>/cache/dirs`); one that fails its checksum or does
not decode is dropped whole, so damage costs re-hashing and re-listing, never a
wrong answer. They are not fsynced: losing them costs time only. A save of the stat
cache appends the records that changed since the last save to `<store>/cache/stat.log`,
so a warm snapshot writes what changed, not every file's record;
the log is folded into a new base as the tree cache's is.

The tree cache (`<store>/cache/trees`, and appended to it `<store>/cache/trees.log`)
maps a directory's children (a digest of them) to the tree built from them, so a new
process takes an unchanged directory's tree without encoding it. It is keyed on
content only: an entry is right for any root and at any time, and is used only when
every object it names is still in the store. A save appends what the last capture
encoded (a few records, not the whole table); the log is folded into a new base
when it grows past an eighth of the base. A damaged record ends the log (what follows
is dropped).

Beside them, `<store>/cache/timestamps` records that the file system keeps coarse
times (whole seconds), so that the racy margin (see capture.py) covers a tick.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable
from stat import S_ISREG
from typing import Any, TypeVar

import msgspec

from worksnap.errors import StoreError
from worksnap.frames import MAX_UNPACKED, msgpack_map, pack, pack_pieces, unpack
from worksnap.fsio import FileState, Stamp, packed_state
from worksnap.storedir import StoreDir

StatRecord = tuple[FileState, str]
"""A file's stat cache record: (its state when hashed, its digest)."""

StatTable = dict[str, StatRecord]
"""The stat cache: path -> record."""

StatChanges = StatTable
"""A record of the stat cache's log: the records new or changed since the save before."""

TreeRecord = tuple[str, int, int, tuple[str, ...]]
"""A directory as built: (tree digest, files below, bytes below, every object it is made of)."""

TreeTable = dict[bytes, TreeRecord]
"""The tree cache: digest of a directory's children (`treebuild.key_digest`) -> its tree."""

TREE_CACHE_VERSION = 1
"""Of the tree cache's records (and of the key digests in them): another one is dropped.

Raise it whenever how a tree object is encoded changes without `tree.FORMAT` changing:
its records name trees by the encoding they were built with."""

MAX_LOG = 64 << 20
"""The most a cache's log may hold before it is read (more: dropped, and rebuilt)."""


_LENGTH = struct.Struct(">I")

_UNREAD_LOG = 1 << 62
"""The bytes `load_tree_table` reports for a log it did not read to its end (folded next)."""

SAVE_EVERY_SECONDS = 30.0
"""How often a long-lived (watched) workspace stores its caches; it also does on close."""

_encoder = msgspec.msgpack.Encoder()


class Listing(msgspec.Struct, array_like=True):
    """One directory's children as the last scan classified them."""

    stamp: Stamp
    ignore_file: Stamp | None
    children: list[tuple[str, str]]
    """(wire name, kind) in name order."""
    tracked_only: bool
    """Classified inside an ignored directory (everything ignored, as git sees it): such a
    listing is never taken for a directory entered normally, nor the other way round."""


class Listings(msgspec.Struct):
    """The per-directory cache: listings by directory, valid under rules with `base` key."""

    base: bytes = b""
    dirs: dict[str, Listing] = {}


FOLD_AT = 8
"""A cache's log (the tree cache's, the stat cache's) is folded into a new base when it
grows past 1/FOLD_AT of the base (and 64 KiB): the cache stays within 1.125 times its
base. A tree cache log allowed to grow to the base's size was half of what a 200-step
session added to the store (2.6 KB a step on the reference tree, against 3.8 KB of
snapshots)."""


LISTING_VERSION = 2
"""Of the listing cache's records; another one is dropped (1 did not say `tracked_only`)."""


def listing_key(rules_key: bytes, exclude: frozenset[str]) -> bytes:
    """Returns what listings are valid under: they hold ignore and exclusion decisions."""
    return (
        b"%d\0" % LISTING_VERSION
        + rules_key
        + "\0".join(sorted(exclude)).encode("utf-8", "surrogatepass")
    )


def _read(store: StoreDir, path: str) -> bytes | None:
    """A cache file's content (None: missing, damaged, or not a file: start afresh)."""
    try:
        data = store.read_optional(path, limit=MAX_UNPACKED)
        return None if data is None else unpack(data)
    except StoreError:
        raise  # a link or a FIFO in the store is refused, not ignored
    except (OSError, ValueError):
        return None


def _stat_records(data: bytes | None, root: str, kind: Any) -> Any:
    """The stat cache's base or one log record, decoded as `kind` (None: damaged, another root)."""
    try:
        cached_root, table = msgspec.msgpack.decode(unpack(data or b""), type=tuple[str, kind])
    except ValueError:  # a damaged frame; msgspec.DecodeError is a ValueError
        return None
    return table if cached_root == root else None


def load_stat_table(store: StoreDir, root: str) -> tuple[StatTable, int, int]:
    """Returns the stat cache for `root`, the bytes of its base and those of its log.

    The base missing, damaged or for another root: an empty table, and its log is not
    read (it holds changes to that base). The log is read as the tree cache's is.

    Raises:
        StoreError: a link, FIFO or folder is where a cache file belongs.
    """
    base = store.read_optional(store.paths.stat_cache, limit=MAX_UNPACKED)
    table: StatTable | None = _stat_records(base, root, StatTable)
    if table is None:
        return {}, 0, 0
    if table and isinstance(next(iter(table.values()))[0], tuple):
        # Written before states were packed: the same states, in the form compared now.
        table = {rel: (packed_state(state), digest)  # type: ignore[arg-type]
                 for rel, (state, digest) in table.items()}  # fmt: skip

    def changes(data: bytes) -> StatChanges | None:
        found: _LoggedChanges | None = _stat_records(data, root, _LoggedChanges)
        if found is None or any(len(digest) != 32 for _, digest in found.values()):
            return None  # damaged: the log is read no further
        return {rel: (state, digest.hex()) for rel, (state, digest) in found.items()}

    log_bytes = _read_log(store, store.paths.stat_cache_log, changes, table.update)
    return table, len(base or b""), log_bytes


def save_stat_table(store: StoreDir, root: str, table: StatTable) -> int:
    """Writes the stat cache's base afresh and drops its log; returns the base's bytes.

    Encoded and compressed a piece at a time: at 200k files the whole encoding is 34 MB.
    """
    head = _encoder.encode((root, {}))[:-1]  # less the empty map's header
    data = pack_pieces(lambda: itertools.chain([head], msgpack_map(_encoder, table)))
    written = store.write(store.paths.stat_cache, data, durable=False)
    store.unlink(store.paths.stat_cache_log)
    return written


_LoggedChanges = dict[str, tuple[FileState, bytes]]
"""A log record as stored: each digest as its 32 bytes (random: hex only doubles them)."""


def append_stat_changes(store: StoreDir, root: str, changes: StatChanges) -> int:
    """Appends changed records to the stat cache's log; returns the bytes appended."""
    logged: _LoggedChanges = {
        rel: (state, bytes.fromhex(digest)) for rel, (state, digest) in changes.items()
    }
    return _append_log(store, store.paths.stat_cache_log, _encoder.encode((root, logged)))


def stat_changes(saved: StatTable, table: StatTable) -> StatChanges:
    """What a log record holds: the records of `table` that `saved` lacks or holds otherwise.

    A record kept from `saved` is the same object (a capture keeps it when the file is
    unchanged): only the others are compared. A path `table` no longer holds is not
    removed: a record vouches only for a file in exactly its state, so one left behind is
    never taken for another file, and the next fold drops it. (Removing them doubled the
    log: a file modified within the racy margin left the table, then came back.)
    """
    return {rel: record for rel, record in table.items()
            if (was := saved.get(rel)) is not record and was != record}  # fmt: skip


def load_listings(store: StoreDir, root: str) -> Listings:
    """Returns the per-directory scan cache for `root` (empty if missing or damaged)."""
    data = _read(store, store.paths.listing_cache)
    try:
        cached_root, listings = msgspec.msgpack.decode(data or b"", type=tuple[str, Listings])
    except ValueError:  # a damaged frame; msgspec.DecodeError is a ValueError
        return Listings()
    return listings if cached_root == root else Listings()


def save_listings(store: StoreDir, root: str, listings: Listings) -> None:
    """Stores the per-directory scan cache; losing it only costs a full scan.

    Encoded and compressed a piece at a time, as the stat cache is.
    """
    head = _encoder.encode((root, Listings(listings.base)))[:-1]  # less `dirs`' empty map
    data = pack_pieces(lambda: itertools.chain([head], msgpack_map(_encoder, listings.dirs)))
    store.write(store.paths.listing_cache, data, durable=False)


_TreeFile = tuple[int, str, TreeTable]


_T = TypeVar("_T")


def _tree_records(data: bytes | None, root: str) -> TreeTable | None:
    """One base or log record of the tree cache (None: damaged, or another root or version)."""
    if data is None:
        return None
    try:
        version, cached_root, table = msgspec.msgpack.decode(unpack(data), type=_TreeFile)
    except ValueError:  # a damaged frame; msgspec.DecodeError is a ValueError
        return None
    if version != TREE_CACHE_VERSION or cached_root != root:
        return None
    return {key: (digest, files, size, tuple(objects)) for key, (digest, files, size, objects)
            in table.items()}  # fmt: skip


def _read_log(
    store: StoreDir,
    path: str,
    decode: Callable[[bytes], _T | None],
    use: Callable[[_T], None],
) -> int:
    """Reads a cache's log: each record after its length (4 bytes, big-endian); the bytes.

    The log is read up to its first record that is short, damaged, or for another root
    (a save killed part-way leaves at most a short last one). A log not read to its end
    (or too long to read) counts as longer than any base: records appended after the
    one that stopped the read would never be read, so the next save writes a new base.
    """
    found = store.lstat(path)
    # Too long to be worth reading: dropped (the next save writes a new base). Anything
    # but a regular file is refused by the read, as every store file is.
    too_long = found is not None and S_ISREG(found.st_mode) and found.st_size > MAX_LOG
    log = None if too_long else store.read_optional(path, limit=MAX_LOG)
    view = memoryview(log or b"")
    at = 0
    while at + _LENGTH.size <= len(view):
        (length,) = _LENGTH.unpack_from(view, at)
        end = at + _LENGTH.size + length
        records = decode(bytes(view[at + _LENGTH.size : end]))
        if end > len(view) or records is None:
            break
        use(records)
        at = end
    whole = not too_long and at == len(view)
    return len(view) if whole else _UNREAD_LOG


def _append_log(store: StoreDir, path: str, encoded: bytes) -> int:
    """Appends one record to a cache's log; returns the bytes appended."""
    frame = pack(encoded)
    data = _LENGTH.pack(len(frame)) + frame
    store.append(path, data)
    return len(data)


def load_tree_table(store: StoreDir, root: str) -> tuple[TreeTable, int, int]:
    """Returns the tree cache for `root`, the bytes of its base and those of its log.

    Raises:
        StoreError: a link, FIFO or folder is where a cache file belongs.
    """
    table: TreeTable = {}
    base = store.read_optional(store.paths.tree_cache, limit=MAX_UNPACKED)
    table.update(_tree_records(base, root) or {})
    log_bytes = _read_log(
        store, store.paths.tree_cache_log, lambda data: _tree_records(data, root), table.update
    )
    return table, len(base or b""), log_bytes


def save_tree_table(store: StoreDir, root: str, table: TreeTable) -> int:
    """Writes the tree cache's base afresh and drops its log; returns the base's bytes."""
    data = pack(_encoder.encode((TREE_CACHE_VERSION, root, table)))
    store.write(store.paths.tree_cache, data, durable=False)
    store.unlink(store.paths.tree_cache_log)
    return len(data)


def append_tree_records(store: StoreDir, root: str, records: TreeTable) -> int:
    """Appends records to the tree cache's log; returns the bytes appended."""
    return _append_log(store, store.paths.tree_cache_log,
                       _encoder.encode((TREE_CACHE_VERSION, root, records)))  # fmt: skip


def _fold(base: int, log: int) -> bool:
    """Whether a cache's next save writes a new base (none yet, or its log is long)."""
    return not base or log > max(base // FOLD_AT, 64 << 10)


def load_tick(store: StoreDir) -> int:
    """Returns the timestamp tick recorded for the store's file system (0: fine, or unknown)."""
    try:
        data = store.read_optional(store.paths.timestamps, limit=64)
        return max(0, int(data or b"0"))
    except ValueError:
        return 0


def save_tick(store: StoreDir, tick_ns: int) -> None:
    """Records the file system's timestamp tick (durably: it is written once per store)."""
    store.write(store.paths.timestamps, b"%d\n" % tick_ns)


class Caches:
    """Both caches of one workspace, in memory, read from the store on first use.

    Args:
        store: the store's directory.
        root: the workspace root they are for (a cache for another root is not used).
        store_exists: whether the store has been created (caches are never the
            first thing written to a store).
    """

    def __init__(self, store: StoreDir, root: str, store_exists: Callable[[], bool]) -> None:
        self.files = store
        """The store's directory."""
        self._root = root
        self._store_exists = store_exists
        self._stat: StatTable | None = None
        self._stat_saved: StatTable | None = None  # what the stored base and log hold
        self._stat_read: StatTable | None = None  # as read, until the first capture replaces it
        self._stat_bytes = (0, 0)  # of the stored base and log
        self._listings: Listings | None = None
        self._tick: int | None = None
        self._trees: TreeTable | None = None
        self._trees_new: TreeTable = {}  # built since the tree cache was last stored
        self._trees_current: Callable[[], TreeTable] | None = None
        self._trees_bytes = (0, 0)  # of the stored base and log
        self._unsaved = False  # changed since they were last stored
        self._saved_at = time.monotonic()
        self._finer = False  # the stat and listing caches trusted times under a finer tick

    def stat_table(self) -> StatTable:
        """The stat cache (read from the store the first time)."""
        if self._stat is None:
            if self._store_exists():
                self._stat, *sizes = load_stat_table(self.files, self._root)
                self._stat_bytes = (sizes[0], sizes[1])
                self._stat_saved = self._stat_read = self._stat
            else:
                self._stat = {}
        return self._stat

    def listings(self) -> Listings:
        """The listing cache (read from the store the first time); a scan updates it in place."""
        if self._listings is None:
            self._listings = (
                load_listings(self.files, self._root) if self._store_exists() else Listings()
            )
        return self._listings

    def tree_table(self) -> TreeTable:
        """The tree cache (read from the store the first time)."""
        if self._trees is None:
            if self._store_exists():
                self._trees, *sizes = load_tree_table(self.files, self._root)
                self._trees_bytes = (sizes[0], sizes[1])
            else:
                self._trees = {}
        return self._trees

    def add_trees(self, new: TreeTable, current: Callable[[], TreeTable], size: int) -> None:
        """Adds the records of the directories a build encoded to the tree cache.

        Args:
            new: those records.
            current: the records of every directory of that build (what a new base holds).
            size: how many directories that build had: a long-lived process's table is
                cut back to `current()` when it grows past twice that.
        """
        self._trees_current = current
        if not new:
            return
        table = self.tree_table()
        table.update(new)
        if len(table) > 2 * size + 1024:
            self._trees = current()
        self._trees_new.update(new)
        self._unsaved = True

    def replace_stat_table(self, table: StatTable, *, changed: bool | None = None) -> None:
        """Takes `table` as the stat cache (what the last capture could vouch for).

        `changed`: whether it differs from the one it replaces, when the caller knows
        (else it is compared, record by record).
        """
        self._unsaved |= table != self._stat if changed is None else changed
        read, self._stat_read = self._stat_read, None
        if read is not None and self._stat_saved is read and not stat_changes(read, table):
            # Nothing for a log record: what is stored but the records of paths gone, and
            # keyed by the scan's own path strings. The table as read, a second copy of
            # every path, is dropped (7 MB at 47k files in the daemon).
            self._stat_saved = table
        self._stat = table

    def listings_changed(self) -> None:
        """Notes that a scan changed the listing cache."""
        self._unsaved = True

    def forget_all(self) -> None:
        """Drops both caches, in memory (the next save stores what is rebuilt)."""
        self._stat = {}
        self._stat_saved = None  # the next save writes a new base
        self._listings = Listings()
        self._finer = False  # what is rebuilt now is trusted under the tick recorded
        self._unsaved = True  # (the tree cache stays: it is keyed on content, not on times)

    def forget_stat_table(self) -> None:
        """Drops the stat cache from memory (files were rewritten: trust only fresh stats)."""
        self._stat = None

    def save(self, *, force: bool) -> None:
        """Stores both caches for the next process, if they changed.

        Args:
            force: store now; otherwise at most every `SAVE_EVERY_SECONDS` (a
                watched workspace is long-lived and rarely needs them).
        """
        if not self._unsaved or not self._store_exists():
            return
        now = time.monotonic()
        if not force and now - self._saved_at < SAVE_EVERY_SECONDS:
            return
        try:
            if self._stat is not None and not self._finer:
                self._save_stat(self._stat)
            if self._listings is not None and not self._finer:
                save_listings(self.files, self._root, self._listings)
            if self._trees_new:
                self._save_trees()
        except OSError:
            return  # a full disk: losing a cache costs time, and must not fail a rollback
        self._unsaved = False
        self._saved_at = now

    def _save_stat(self, table: StatTable) -> None:
        """Appends what changed since the last save; folds the log into a new base when long."""
        base, log = self._stat_bytes
        if self._stat_saved is None or _fold(base, log):
            self._stat_bytes = (save_stat_table(self.files, self._root, table), 0)
        elif changes := stat_changes(self._stat_saved, table):
            self._stat_bytes = (base, log + append_stat_changes(self.files, self._root, changes))
        self._stat_saved = table

    def _save_trees(self) -> None:
        """Appends what was built since the last save; folds the log into a new base when long."""
        base, log = self._trees_bytes
        if _fold(base, log):
            # The last build's directories, and what was built since the last save.
            table = {**(self._trees_current() if self._trees_current else {}), **self._trees_new}
            self._trees_bytes = (save_tree_table(self.files, self._root, table), 0)
        else:
            added = append_tree_records(self.files, self._root, self._trees_new)
            self._trees_bytes = (base, log + added)
        self._trees_new = {}

    def tick(self) -> int:
        """The timestamp tick recorded for the store's file system (0: fine, or not known)."""
        if self._tick is None:
            self._tick = load_tick(self.files) if self._store_exists() else 0
        return self._tick

    def record_tick(self, tick_ns: int) -> None:
        """Notes that the file system keeps times only to `tick_ns` (kept in the store).

        What the stat and listing caches hold was trusted under a finer tick: they are
        deleted from the store before the tick is recorded there, and not stored again
        until `forget_all` (a process killed in between leaves none that the next one
        would trust), while the tree cache, keyed on content, stays.
        """
        if tick_ns <= self.tick():
            return
        self._tick = tick_ns
        self._finer = True
        if self._store_exists():
            paths = self.files.paths
            for path in (paths.stat_cache, paths.stat_cache_log, paths.listing_cache):
                self.files.unlink(path)
            self._stat_saved, self._stat_bytes = None, (0, 0)  # (the next base is whole)
            save_tick(self.files, tick_ns)

    def drop(self) -> None:
        """Deletes both caches, in memory and in the store (the store was rebound)."""
        paths = self.files.paths
        for path in (paths.stat_cache, paths.stat_cache_log, paths.listing_cache,
                     paths.tree_cache, paths.tree_cache_log):  # fmt: skip
            self.files.unlink(path)
        self._stat = None
        self._stat_saved = None
        self._stat_bytes = (0, 0)
        self._listings = None
        self._finer = False
        self._trees = None
        self._trees_new = {}
        self._trees_current = None
        self._trees_bytes = (0, 0)
