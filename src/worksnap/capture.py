"""Capture: the workspace's state now, as a manifest; hashes only what no cache vouches for.

scan (what is there) -> stat cache (is it unchanged?) -> hash and store (what is not)
-> an unsaved manifest of kind "current". A snapshot saves one (see catalog.py);
a plan compares one with its target (see transaction.py).

A cached digest is trusted only for a file whose times are older than the scan
that recorded it by more than a file system timestamp tick: a file changed again
within the same tick would otherwise keep its stat and its stale digest ("racy
git"). The margin is `RACY_MARGIN_NS` (tests may shrink it instead of sleeping),
plus the file system's tick once it is known to be coarse: a file or directory
whose mtime and ctime both have no fraction of a second is evidence (ext3, ext4
with 128-byte inodes, FAT, some network mounts), recorded in the store
(`caches.Caches.record_tick`). The same margin guards the listing cache's
directory stamps and `hash.read_file`'s double read of recently changed files.
"""

from __future__ import annotations

import gc as cyclic_gc
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from worksnap.caches import Caches, Listings, StatTable
from worksnap.errors import InputError, SnapshotError, shown
from worksnap.fsio import DirTree, file_state
from worksnap.hash import SMALL, Prefetch, read_file
from worksnap.ignore import Rules, base_rules
from worksnap.manifest import VERSION, Entry, Manifest, new_id, now_rfc3339, tree_digest
from worksnap.paths import Digest, Root, fs_path, wire_name
from worksnap.progress import Reporter
from worksnap.scan import DirScan, Scan, WalkStats, scan_tree
from worksnap.store import ObjectStore
from worksnap.watch import Events, Watcher

DEFAULT_MAX_FILE_BYTES = 2 << 20
"""Files larger than this (2 MiB) are listed in `large` and not captured."""

RACY_MARGIN_NS = 100_000_000
"""How much older than the scan a file's times must be for its digest to be cached (0.1 s)."""

COARSE_TICK_NS = 1_000_000_000
"""The tick of a file system whose times have no fraction of a second (FAT's mtime ticks in
2 s, but its ctime in 10 ms: a change moves one of them, so a second is enough)."""


def is_coarse(st: os.stat_result) -> bool:
    """True when both of a file's times are whole seconds: its file system ticks in seconds.

    Both, because a write moves ctime even where mtime is coarse (or was set by a tool
    such as `tar`): only when neither can move within a second does a change hide.
    """
    return st.st_mtime_ns % COARSE_TICK_NS == 0 and st.st_ctime_ns % COARSE_TICK_NS == 0


PREFETCH_AFTER = 64
"""Files hashed before the rest may be read ahead (a few changed files are not worth a thread)."""

SLOW_READ_SECONDS = 100e-6
"""Mean time per file over those above which the reads come from the disk, not the page
cache (cached: about 40 us). With the tree cached, the helper thread only costs: it takes
the GIL back and forth (a warm-cache cold snapshot went from 2.1 to 3.0 s with it)."""


class ReadFile(Protocol):
    """`hash.read_file`: reads and hashes one file safely against concurrent writes."""

    def __call__(
        self,
        path: str | bytes,
        rel: str,
        *,
        keep: bool,
        dir_fd: int | None = None,
        recent_ns: int = RACY_MARGIN_NS,
    ) -> tuple[Digest, bytes | None, os.stat_result]:
        """Returns the digest, the bytes (if kept) and the stat the file had while read."""
        ...


class ScanTree(Protocol):
    """`scan.scan_tree`: walks the root and sorts every path below it."""

    def __call__(
        self,
        root: str,
        rules: Rules,
        *,
        exclude: frozenset[str],
        max_file_bytes: int,
        listings: Listings | None = None,
        trust_before: int = 0,
        watcher: Watcher | None = None,
        memory: dict[str, DirScan] | None = None,
        dirty: dict[str, Events | None] | None = None,
        stats: WalkStats | None = None,
    ) -> Scan:
        """Returns what the walk found."""
        ...


class Capture:
    """The capture engine of one workspace: its caches, its watcher, and what it last saw.

    Args:
        root: the workspace root and what is never captured.
        store: where file contents go.
        caches: the stat and listing caches.
        max_file_bytes: larger files are listed in `large`, not captured.
        watcher: the change source that says which directories had events since
            the last capture (None: every capture scans the whole tree).
        report: where progress goes.
        read_file: reads and hashes one file (`hash.read_file`).
        scan_tree: walks the tree (`scan.scan_tree`).
        prefetch: makes the read-ahead helper (`hash.Prefetch`).
        slow_read_seconds: mean read time per file above which reading ahead starts.
        racy_margin_ns: see `RACY_MARGIN_NS`; tests set 0 so that fresh files are
            cached at once instead of waiting the margin out.
    """

    def __init__(
        self,
        root: Root,
        store: ObjectStore,
        caches: Caches,
        *,
        max_file_bytes: int,
        watcher: Watcher | None,
        report: Reporter,
        read_file: ReadFile = read_file,
        scan_tree: ScanTree = scan_tree,
        prefetch: Callable[[], Prefetch] = Prefetch,
        slow_read_seconds: float = SLOW_READ_SECONDS,
        racy_margin_ns: int = RACY_MARGIN_NS,
    ) -> None:
        self._root = root
        self._store = store
        self._caches = caches
        self.max_file_bytes = max_file_bytes
        self._report = report
        self._read_file = read_file
        self._scan_tree = scan_tree
        self._prefetch = prefetch
        self._slow_read_seconds = slow_read_seconds
        self._racy_margin_ns = racy_margin_ns
        self._rules: Rules | None = None
        self._watcher = watcher
        # With a watcher: what the last capture saw, to reuse where nothing happened.
        self._memory: dict[str, DirScan] = {}
        self._entries: dict[str, tuple[os.stat_result, Entry]] = {}
        self._last_capture: Manifest | None = None
        self._last_stored = False

    @property
    def watching(self) -> bool:
        """True while an inotify watch is kept (asked for, and available)."""
        return self._watcher is not None

    def rules(self) -> Rules:
        """The ignore rules in force at the root before its own `.gitignore` (read once)."""
        if self._rules is None:
            self._rules = base_rules(Path(self._root.path))
        return self._rules

    def close(self) -> None:
        """Stores the caches and releases the watcher; captures scan everything after."""
        self._caches.save(force=True)
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._last_capture = None

    def forget_stat_table(self) -> None:
        """Trusts no cached digest until files are stat-ed again (they were rewritten)."""
        self._caches.forget_stat_table()

    def capture(self, *, store_objects: bool) -> Manifest:
        """Records the workspace's current state as an unsaved manifest (kind "current").

        Args:
            store_objects: also store every file's bytes (what a snapshot does);
                without it only digests are computed, and nothing is written
                except the caches.
        """
        # A capture allocates a few objects per file and frees few of them: the cyclic
        # collector would keep re-walking them all (a quarter of a warm snapshot).
        collecting = cyclic_gc.isenabled()
        cyclic_gc.disable()
        try:
            return self._capture(store_objects=store_objects)
        finally:
            if collecting:
                cyclic_gc.enable()

    def _capture(self, *, store_objects: bool) -> Manifest:
        tick = self._caches.tick()
        if not tick and is_coarse(os.stat(self._root.path)):
            tick = self._learn_tick()  # the root's own times: known before anything is trusted
        current = self._capture_with(store_objects=store_objects, tick=tick)
        if self._caches.tick() != tick:
            # Coarse times turned up below the root (another file system mounted there)
            # after this capture had trusted stamps within a tick: forget what it
            # recorded, and capture again with the tick.
            current = self._capture_with(store_objects=store_objects, tick=self._learn_tick())
        return current

    def _learn_tick(self) -> int:
        """Records that the tree's file system ticks in seconds; trusts no cache made before."""
        self._caches.record_tick(COARSE_TICK_NS)
        self._caches.forget_all()
        self._entries = {}
        self._last_capture = None
        return COARSE_TICK_NS

    def _capture_with(self, *, store_objects: bool, tick: int) -> Manifest:
        scan_start = time.time_ns()
        margin = self._racy_margin_ns + tick
        trust_before = scan_start - margin
        swept = self._store.sync() if store_objects else False
        dirty = self._watcher.drain() if self._watcher is not None else None
        last = self._last_capture if self._last_stored or not store_objects else None
        if dirty == {} and last is not None and not swept:
            # Not one event in any watched directory: the tree is as last captured.
            return msgspec.structs.replace(last, id=new_id(), time=now_rfc3339())
        listings = self._caches.listings()
        listed = listings.dirs
        found = self._scan_tree(
            self._root.path,
            self.rules(),
            exclude=self._root.exclude,
            max_file_bytes=self.max_file_bytes,
            listings=listings,
            trust_before=trust_before,
            watcher=self._watcher,
            memory=self._memory,
            dirty=dirty,
        )
        if listings.dirs != listed:
            self._caches.listings_changed()
            if not tick and any(
                _whole_seconds(listing.stamp)
                for name, listing in listings.dirs.items()
                if listed.get(name) is not listing
            ):
                self._caches.record_tick(COARSE_TICK_NS)  # the caller captures again
        cache = self._caches.stat_table()
        fresh: StatTable = {}
        packed = self._store.indexed()
        entries: list[Entry] = []
        total = len(found.files)
        remembered = self._entries
        kept: dict[str, tuple[os.stat_result, Entry]] = {}
        watching = self._watcher is not None
        misses = 0
        first_reads = 0.0  # when the first file missing from the cache began to be read
        with DirTree(self._root.path) as tree, self._prefetch() as prefetch:
            for done, (rel, seen) in enumerate(found.files):
                prev = remembered.get(rel)
                if (
                    prev is not None
                    and prev[0] is seen  # the very stat of the last capture: a watched, quiet dir
                    and (not store_objects or prev[1].hash in packed)
                ):
                    entries.append(prev[1])
                    kept[rel] = prev
                    if (hit := cache.get(rel)) is not None:
                        fresh[rel] = hit
                    continue
                st = seen
                hit = cache.get(rel)
                if (
                    hit is not None
                    and hit[0] == file_state(st)
                    and (not store_objects or hit[1] in packed or self._store.has(hit[1]))
                ):
                    digest = hit[1]
                    fresh[rel] = hit  # trusted when cached, and unchanged since
                else:
                    misses += 1
                    if misses == 1:
                        first_reads = time.perf_counter()
                    elif misses == PREFETCH_AFTER and (
                        time.perf_counter() - first_reads > PREFETCH_AFTER * self._slow_read_seconds
                    ):
                        # Many files to read, and the disk is serving them: read ahead.
                        prefetch.start(_unhashed(self._root.path, found.files[done + 1 :], cache))
                    digest, st = self.hash_and_store(
                        rel, store_objects=store_objects, tree=tree, recent_ns=margin
                    )
                    if not tick and is_coarse(st):
                        tick = COARSE_TICK_NS
                        self._caches.record_tick(tick)  # the caller captures again
                    if st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before:
                        fresh[rel] = (file_state(st), digest)
                entry = Entry(
                    path=rel, type="file", mode=st.st_mode & 0o777, hash=digest, size=st.st_size
                )
                entries.append(entry)
                if watching:
                    kept[rel] = (seen, entry)
                if done % 4096 == 4095:
                    self._report("hash", done + 1, total)
        entries.extend(
            Entry(path=rel, type="symlink", mode=mode, target=target)
            for rel, target, mode in found.symlinks
        )
        entries.sort(key=lambda e: e.path)
        dirs = sorted(found.dirs)
        self._caches.replace_stat_table(fresh)
        self._caches.save(force=self._watcher is None)
        self._entries = kept
        current = Manifest(
            version=VERSION,
            id=new_id(),
            root=self._root.wire,
            kind="current",
            step=None,
            time=now_rfc3339(),
            max_file_bytes=self.max_file_bytes,
            tree=tree_digest(entries, dirs),
            entries=entries,
            dirs=dirs,
            ignored=sorted(found.ignored),
            large=sorted(found.large),
            excluded=sorted(found.excluded),
        )
        if self._watcher is not None:
            self._last_capture = current
            self._last_stored = store_objects  # a preview's digests may have no objects
        return current

    def hash_and_store(
        self, rel: str, *, store_objects: bool, tree: DirTree, recent_ns: int | None = None
    ) -> tuple[str, os.stat_result]:
        """Hashes (and stores) one file, reached from the root without crossing a symlink.

        `recent_ns`: a file changed within this long is read twice (default: the margin).
        """
        parent, _, name = rel.rpartition("/")
        try:
            dir_fd = tree.dir_fd(parent)
        except OSError as exc:
            raise SnapshotError(rel, f"changed while the snapshot ran ({exc.strerror})") from None
        raw = fs_path(name)
        recent = recent_ns if recent_ns is not None else self._racy_margin_ns + self._caches.tick()
        digest, data, st = self._read_file(
            raw, rel, keep=store_objects, dir_fd=dir_fd, recent_ns=max(recent, RACY_MARGIN_NS)
        )
        if store_objects:
            if data is not None:
                self._store.add(digest, data)
            elif st.st_size >= SMALL:
                self._store.add_file(digest, raw, rel, dir_fd=dir_fd)
        return digest, st

    def before_image(self, rel: str) -> Entry | Literal["large"] | None:
        """Stores and returns a path's current file or symlink (a checkpoint's before-image).

        Returns None when nothing is there, "large" for a file over the size cap.

        Raises:
            InputError: something other than a file or symlink is there.
        """
        parent, _, name = rel.rpartition("/")
        raw = fs_path(name)
        with DirTree(self._root.path) as tree:
            # Through a descriptor walked down from the root: never through a symlinked
            # parent, and no depth is too deep (no absolute path is built).
            try:
                dir_fd = tree.dir_fd(parent)
                st = os.stat(raw, dir_fd=dir_fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                raise InputError(f"{shown(rel)!r}: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                return Entry(
                    path=rel, type="symlink", mode=st.st_mode & 0o777,
                    target=wire_name(os.fsdecode(os.readlink(raw, dir_fd=dir_fd))),
                )  # fmt: skip
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{shown(rel)!r} is not a file or symlink")
            if st.st_size > self.max_file_bytes:
                return "large"
            digest, st = self.hash_and_store(rel, store_objects=True, tree=tree)
        self._store.flush()
        return Entry(path=rel, type="file", mode=st.st_mode & 0o777, hash=digest, size=st.st_size)


def _whole_seconds(stamp: tuple[int, int, int, int]) -> bool:
    """True when a listing's stamp (inode, size, mtime, ctime) has whole-second times."""
    return stamp[2] % COARSE_TICK_NS == 0 and stamp[3] % COARSE_TICK_NS == 0


def _unhashed(
    root: str, files: list[tuple[str, os.stat_result]], cache: StatTable
) -> Iterator[bytes]:
    """The absolute paths of the files whose cached digest cannot be used: what will be read."""
    base = os.fsencode(root) + b"/"
    for rel, st in files:
        hit = cache.get(rel)
        if hit is None or hit[0] != file_state(st):
            yield base + fs_path(rel)
