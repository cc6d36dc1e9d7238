"""Caches: the stat cache and the listing cache, what they are keyed on, and where they live.

Both only ever save work: the stat cache answers a file's digest when its
`fsio.file_state` is what it was when the digest was taken, the listing cache a
directory's classified children when the directory and its `.gitignore` are
unchanged under the same rules. Each is stored as one checksummed zstd frame
(`<store>/cache/stat`, `<store>/cache/dirs`); one that fails its checksum or does
not decode is dropped whole, so damage costs re-hashing and re-listing, never a
wrong answer. They are not fsynced: losing them costs time only.

Beside them, `<store>/cache/timestamps` records that the file system keeps coarse
times (whole seconds), so that the racy margin (see capture.py) covers a tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from worksnap.errors import StoreError
from worksnap.frames import MAX_UNPACKED, pack, unpack
from worksnap.fsio import FileState
from worksnap.storedir import StoreDir

Stamp = tuple[int, int, int, int]
"""(inode, size, mtime_ns, ctime_ns): the first four fields of `fsio.file_state`."""

StatTable = dict[str, tuple[FileState, str]]
"""The stat cache: path -> (file state when hashed, digest)."""

SAVE_EVERY_SECONDS = 30.0
"""How often a long-lived (watched) workspace stores its caches; it also does on close."""

_encoder = msgspec.msgpack.Encoder()


class Listing(msgspec.Struct, array_like=True):
    """One directory's children as the last scan classified them."""

    stamp: Stamp
    ignore_file: Stamp | None
    children: list[tuple[str, str]]
    """(wire name, kind) in name order."""


class Listings(msgspec.Struct):
    """The per-directory cache: listings by directory, valid under rules with `base` key."""

    base: bytes = b""
    dirs: dict[str, Listing] = {}


def listing_key(rules_key: bytes, exclude: frozenset[str]) -> bytes:
    """Returns what listings are valid under: they hold ignore and exclusion decisions."""
    return rules_key + "\0".join(sorted(exclude)).encode("utf-8", "surrogatepass")


def _read(store: StoreDir, path: str) -> bytes | None:
    """A cache file's content (None: missing, damaged, or not a file: start afresh)."""
    try:
        data = store.read_optional(path, limit=MAX_UNPACKED)
        return None if data is None else unpack(data)
    except StoreError:
        raise  # a link or a FIFO in the store is refused, not ignored
    except (OSError, ValueError):
        return None


def load_stat_table(store: StoreDir, root: str) -> StatTable:
    """Returns the stat cache for `root` ({} if missing, damaged or for another root)."""
    data = _read(store, store.paths.stat_cache)
    try:
        cached_root, table = msgspec.msgpack.decode(
            data or b"", type=tuple[str, dict[str, tuple[tuple[int, int, int, int, int], str]]]
        )
    except ValueError:  # a damaged frame; msgspec.DecodeError is a ValueError
        return {}
    return table if cached_root == root else {}


def save_stat_table(store: StoreDir, root: str, table: StatTable) -> None:
    """Stores the stat cache; losing it only costs re-hashing, so it is not fsynced."""
    store.write(store.paths.stat_cache, pack(_encoder.encode((root, table))), durable=False)


def load_listings(store: StoreDir, root: str) -> Listings:
    """Returns the per-directory scan cache for `root` (empty if missing or damaged)."""
    data = _read(store, store.paths.listing_cache)
    try:
        cached_root, listings = msgspec.msgpack.decode(data or b"", type=tuple[str, Listings])
    except ValueError:  # a damaged frame; msgspec.DecodeError is a ValueError
        return Listings()
    return listings if cached_root == root else Listings()


def save_listings(store: StoreDir, root: str, listings: Listings) -> None:
    """Stores the per-directory scan cache; losing it only costs a full scan."""
    store.write(store.paths.listing_cache, pack(_encoder.encode((root, listings))), durable=False)


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
        self._store = store
        self._root = root
        self._store_exists = store_exists
        self._stat: StatTable | None = None
        self._listings: Listings | None = None
        self._tick: int | None = None
        self._unsaved = False  # changed since they were last stored
        self._saved_at = time.monotonic()

    def stat_table(self) -> StatTable:
        """The stat cache (read from the store the first time)."""
        if self._stat is None:
            self._stat = load_stat_table(self._store, self._root) if self._store_exists() else {}
        return self._stat

    def listings(self) -> Listings:
        """The listing cache (read from the store the first time); a scan updates it in place."""
        if self._listings is None:
            self._listings = (
                load_listings(self._store, self._root) if self._store_exists() else Listings()
            )
        return self._listings

    def replace_stat_table(self, table: StatTable) -> None:
        """Takes `table` as the stat cache (what the last capture could vouch for)."""
        self._unsaved |= table != self._stat
        self._stat = table

    def listings_changed(self) -> None:
        """Notes that a scan changed the listing cache."""
        self._unsaved = True

    def forget_all(self) -> None:
        """Drops both caches, in memory (the next save stores what is rebuilt)."""
        self._stat = {}
        self._listings = Listings()
        self._unsaved = True

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
            if self._stat is not None:
                save_stat_table(self._store, self._root, self._stat)
            if self._listings is not None:
                save_listings(self._store, self._root, self._listings)
        except OSError:
            return  # a full disk: losing a cache costs time, and must not fail a rollback
        self._unsaved = False
        self._saved_at = now

    def tick(self) -> int:
        """The timestamp tick recorded for the store's file system (0: fine, or not known)."""
        if self._tick is None:
            self._tick = load_tick(self._store) if self._store_exists() else 0
        return self._tick

    def record_tick(self, tick_ns: int) -> None:
        """Notes that the file system keeps times only to `tick_ns` (kept in the store)."""
        if tick_ns <= self.tick():
            return
        self._tick = tick_ns
        if self._store_exists():
            save_tick(self._store, tick_ns)

    def drop(self) -> None:
        """Deletes both caches, in memory and in the store (the store was rebound)."""
        for path in (self._store.paths.stat_cache, self._store.paths.listing_cache):
            self._store.unlink(path)
        self._stat = None
        self._listings = None
