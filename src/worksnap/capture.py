"""Capture: the workspace's state now, as a manifest; hashes only what no cache vouches for.

scan (what is there) -> stat cache (is it unchanged?) -> hash and store (what is not)
-> an unsaved manifest of kind "current". A snapshot saves one (see catalog.py);
a plan compares one with its target (see transaction.py). Without a watcher, the last
snapshot's capture is taken again when nothing it rested on moved (`lastcapture.py`).

A cached digest is trusted only for a file whose times are older than the scan
that recorded it by more than a file system timestamp tick: a file changed again
within the same tick would otherwise keep its stat and its stale digest ("racy
git"). The margin is `RACY_MARGIN_NS` (tests may shrink it), plus the tick of a
file system seen to be coarse (`fsio.is_coarse`, recorded by `Caches.record_tick`);
it also guards the listing cache's stamps and `hash.read_file`'s double read.
"""

from __future__ import annotations

import functools
import gc as cyclic_gc
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Protocol

import msgspec

from worksnap.audit import audit_memory
from worksnap.caches import Caches, Listings, StatRecord, StatTable
from worksnap.carry import Kept, carried_stats, records, renewed, resorted
from worksnap.errors import ConflictError, SnapshotError, Vanished
from worksnap.fsio import (
    COARSE_TICK_NS,
    MODES,
    DirTree,
    StatLike,
    file_state,
    is_coarse,
    is_coarse_stamp,
)
from worksnap.hash import SMALL, Prefetch, hash_bytes, read_file
from worksnap.ignore import Rules, base_rules
from worksnap.lastcapture import Keeper, settled
from worksnap.manifest import VERSION, Entry, Manifest, new_id, now_rfc3339
from worksnap.paths import Digest, Root, fs_path
from worksnap.progress import Reporter
from worksnap.scan import DirScan, Scan, WalkStats, scan_tree
from worksnap.scanparts import Seen
from worksnap.sources import RACY_SOURCE_NS, Tracked, index_file, source_stamp, tracked_below
from worksnap.store import ObjectStore
from worksnap.treebuild import CaptureTrees, unchanged_dirs
from worksnap.treewalk import Flat, Nodes, Subtrees, subtrees_of
from worksnap.watch import Changes, Watcher

DEFAULT_MAX_FILE_BYTES = 2 << 20
"""Files larger than this (2 MiB) are listed in `large` and not captured."""

RACY_MARGIN_NS = 100_000_000
"""How much older than the scan a file's times must be for its digest to be cached (0.1 s)."""

PREFETCH_AFTER = 64
"""Files hashed before the rest may be read ahead (a few changed files are not worth a thread)."""

SLOW_READ_SECONDS = 100e-6
"""Mean time per file above which reads come from the disk, not the page cache (about 40 us):
a read-ahead thread on a cached tree costs the GIL (a cold snapshot: 2.1 s to 3.0 s with it)."""

LOOKS = 3  # how many times a capture looks at a tree that changes under it, at most


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
        changes: Changes | None = None,
        remember: dict[str, DirScan] | None = None,
        tracked: Tracked | None = None,
        stats: WalkStats | None = None,
        check: Callable[[], None] | None = None,
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
        watcher: says which directories had events since the last capture (None: no watch).
        report: where progress goes.
        read_file, scan_tree, prefetch: `hash.read_file`, `scan.scan_tree`, `hash.Prefetch`.
        last_capture: take the last snapshot's capture again if nothing it rested on moved.
        slow_read_seconds: mean read time per file above which reading ahead starts.
        racy_margin_ns: see `RACY_MARGIN_NS` (tests: 0, fresh files cached at once).
        nodes: a watched capture's new tree nodes, kept for later comparisons (`CaptureTrees`).
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
        last_capture: bool = True,
        prefetch: Callable[[], Prefetch] = Prefetch,
        slow_read_seconds: float = SLOW_READ_SECONDS,
        racy_margin_ns: int = RACY_MARGIN_NS,
        nodes: Nodes | None = None,
    ) -> None:
        self._root, self._store, self._caches = root, store, caches
        self.max_file_bytes, self._report = max_file_bytes, report
        self._read_file, self._scan_tree, self._prefetch = read_file, scan_tree, prefetch
        self._slow_read_seconds, self._racy_margin_ns = slow_read_seconds, racy_margin_ns
        self._rules: Rules | None = None
        self._tracked: _IndexRead | None = None
        self._used: tuple[Rules, Tracked | None] | None = None  # the last look's (`decided_by`)
        self._watcher = watcher
        if watcher is not None:
            watcher.bind(root.path)  # what inotify cannot hear: the root moved, mounts
        # With a watcher: what the last committed capture saw, to reuse where nothing
        # happened, and what it was decided under.
        self._memory: dict[str, DirScan] = {}
        self._memory_key: bytes | None = None
        self._memory_tracked: Tracked | None = None
        self._has_links = False
        self._kept: dict[str, Kept] = {}  # per directory: its files' entries, as last made
        self._carried: StatTable | None = None  # the stat table made of them all, if one is
        self._links: list[str] = []  # the paths of the last capture's symlinks
        self.carried_over = (False, False)
        """Whether the last look carried over the stat table, and the entries' order."""
        self._last_capture: Manifest | None = None
        self._last_stored = False
        self._subtrees: Subtrees = lambda path, digest: None  # the last committed capture's
        # The root tree as stored (undo compares). Each directory's children are kept
        # only for a watcher, which takes a clean directory's whole.
        self.trees = CaptureTrees(store, caches, children=watcher is not None, nodes=nodes)
        self._last_cap = max_file_bytes
        self.last = Keeper(caches.files, store, root, self.trees, enabled=last_capture)
        """The last snapshot's capture, taken again when nothing it rested on moved."""

    @property
    def watching(self) -> bool:
        """True while an inotify watch is kept (asked for, and available)."""
        return self._watcher is not None

    def rules(self) -> Rules:
        """The rules at the root before its `.gitignore`; read again when a source changed."""
        rules = self._rules
        if rules is None or rules.sources is None or not rules.sources.unchanged():
            rules = self._rules = base_rules(Path(self._root.path))
        return rules

    def decided_by(self) -> tuple[Rules, Tracked | None]:
        """The rules and git's index the last capture classified by: a plan of it decides as it."""
        return self._used or (rules := self.rules(), self.tracked(rules))

    def tracked(self, rules: Rules | None = None) -> Tracked | None:
        """What git tracks below the root (None outside one), read again when it changed.

        `rules`: what `rules()` just returned (None: ask), as a repository changes those.
        """
        rules = self.rules() if rules is None else rules
        known = self._tracked
        if known is not None and known.rules is rules:
            if known.index is None:
                return None  # outside a repository, and none appeared (the rules would say)
            stamp = source_stamp(known.index)
            if stamp == known.stamp and (stamp is None or max(stamp[2:]) < known.racy_before):
                return known.tracked
        root = Path(self._root.path)
        read_at = time.time_ns()
        index = index_file(root)
        # Stamped before it is read: a change while reading shows at the next check.
        stamp = None if index is None else source_stamp(index)
        found = tracked_below(root) if index is not None else None
        self._tracked = _IndexRead(found, index, stamp, read_at - RACY_SOURCE_NS, rules)
        return found

    def close(self) -> None:
        """Stores the caches and releases the watcher; captures scan everything after."""
        self._caches.save(force=True)
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._last_capture = None
        self._memory = {}

    def stat_record(self, rel: str) -> StatRecord | None:
        """The stat record the last capture kept for `rel` (None: it vouched for none)."""
        return self._caches.stat_table().get(rel)

    def forget_stat_table(self) -> None:
        """Trusts no cached digest until files are stat-ed again (they were rewritten)."""
        self._caches.forget_stat_table()
        self._kept = {}

    def read_now(self, entry: Entry) -> bytes:
        """A file's bytes: from the store, or from the tree when a capture kept none.

        (A preview stores nothing; a checkpoint's rewind or a rollback targets files of the
        tree now.) Never through a symlink, never waiting on a FIFO. ConflictError: the
        file is no longer as the capture found it.
        """
        if self._store.has(digest := entry.hash or ""):
            return self._store.read(digest)
        parent, _, name = entry.path.rpartition("/")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with DirTree(self._root.path) as tree:
            try:
                with open(os.open(fs_path(name), flags, dir_fd=tree.dir_fd(parent)), "rb") as f:
                    data = f.read()
            except OSError:
                raise ConflictError(entry.path) from None
        if hash_bytes(data) != digest:
            raise ConflictError(entry.path)
        return data

    def subtree(self, path: str, digest: Digest) -> Flat | None:
        """The flat view below `path` in the last committed capture (`treewalk.subtrees_of`)."""
        return self._subtrees(path, digest)

    def capture(self, *, store_objects: bool, max_file_bytes: int | None = None) -> Manifest:
        """Records the workspace's current state as an unsaved manifest (kind "current").

        Args:
            store_objects: also store every file's bytes (what a snapshot does);
                without it only digests are computed, and nothing is written
                except the caches.
            max_file_bytes: the size cap of this capture (default: the engine's). A
                restore captures with at least its target's cap, so that every file
                the target holds is compared, restored, and kept for undo.
        """
        cap = self.max_file_bytes if max_file_bytes is None else max_file_bytes
        if cap != self._last_cap:
            # What the watcher lets us reuse was sorted into files and large by another cap.
            self._memory = {}
            self._kept = {}
            self._last_capture = None
            self._last_cap = cap
        # Few of the objects made per file are freed: the cyclic collector would re-walk them.
        collecting = cyclic_gc.isenabled()
        cyclic_gc.disable()
        looks = 1
        try:
            while True:
                try:
                    return self._capture(store_objects=store_objects, cap=cap, final=looks == LOOKS)
                except SnapshotError as exc:
                    # A path gone or of another kind since it was listed: the tree changes
                    # under the capture, which looks again (a coherent look, once it settles).
                    if not exc.changing or looks == LOOKS:
                        raise
                    looks += 1
        finally:
            if collecting:
                cyclic_gc.enable()

    def _capture(self, *, store_objects: bool, cap: int, final: bool) -> Manifest:
        tick = self._caches.tick()
        if not tick and is_coarse(os.stat(self._root.path)):
            tick = self._learn_tick()  # the root's own times: known before anything is trusted
        look = functools.partial(self._look, store_objects=store_objects, cap=cap, final=final)
        try:
            current = look(tick=tick)
        finally:
            # Coarse times below the root (another file system mounted there) found by a
            # look that trusted stamps within a tick: forget them (even if it raised).
            learnt = self._caches.tick() != tick
            tick = self._learn_tick() if learnt else tick
        return look(tick=tick) if learnt else current  # (having learnt: capture again)

    def _learn_tick(self) -> int:
        """Records that the tree ticks in seconds; trusts no cache, nor watched memory, before."""
        self._caches.record_tick(COARSE_TICK_NS)
        self._caches.forget_all()
        self.forget_memory()
        self._kept = {}
        return COARSE_TICK_NS

    def _look(self, *, store_objects: bool, cap: int, tick: int, final: bool) -> Manifest:
        scan_start = time.time_ns()
        margin = self._racy_margin_ns + tick
        trust_before = scan_start - margin
        swept = self._store.sync() if store_objects else False
        rules = self.rules()
        if self._watcher is None and (taken := self.last.take(
                rules.key, store_objects=store_objects, cap=cap, tick=tick, margin=margin,
                trust_before=trust_before, hash_file=self.hash_and_store)):  # fmt: skip
            self._used = None  # (`decided_by` reads them again)
            return msgspec.structs.replace(taken, id=new_id(), time=now_rfc3339(scan_start))
        tracked = self.tracked(rules)
        self._used = (rules, tracked)
        watcher = self._watcher
        changes = watcher.take() if watcher is not None else None
        if changes is not None:
            # Taken: consumed only by the commit at the end (a failure leaves them pending).
            self._changes_since_memory(changes, rules, tracked)
        last = self._last_capture if self._last_stored or not store_objects else None
        if (
            changes is not None
            and changes.quiet
            and last is not None
            and not swept
            and not self._has_links
        ):
            # Not one event in any watched directory, same rules, same tracked files:
            # the tree is as last captured.
            assert watcher is not None
            watcher.commit()
            return msgspec.structs.replace(last, id=new_id(), time=now_rfc3339(scan_start))
        listings = self._caches.listings()
        listed = listings.dirs
        remember: dict[str, DirScan] | None = {} if watcher is not None else None
        found = self._scan_tree(
            self._root.path,
            rules,
            exclude=self._root.exclude,
            max_file_bytes=cap,
            listings=listings,
            trust_before=trust_before,
            watcher=watcher,
            memory=self._memory,
            changes=changes,
            remember=remember,
            tracked=tracked,
        )
        if listings.dirs != listed:
            self._caches.listings_changed()
            fresh_stamps = (d.stamp for n, d in listings.dirs.items() if listed.get(n) is not d)
            if not tick and any(is_coarse_stamp(stamp) for stamp in fresh_stamps):
                self._caches.record_tick(COARSE_TICK_NS)  # the caller captures again
        cache = self._caches.stat_table()
        packed = self._store.indexed()
        entries, total, before = list[Entry](), len(found.files), self._kept
        # A directory the scan took whole from memory keeps its entries and stat records,
        # unless a sweep may have taken their objects (or the last capture stored none).
        whole = not swept and (self._last_stored or not store_objects)
        # Their records are carried in the last table, the others' taken out (and made
        # below, as without it), when the table is the one their `Kept`s were made with.
        carried = (
            carried_stats(cache, before, remember)
            if whole and remember is not None and cache is self._carried
            else None
        )
        fresh: StatTable = carried if carried is not None else {}
        kept: dict[str, Kept] = {}
        parts = remember.items() if remember is not None else ()
        groups = [(d, part.found.files) for d, part in parts] or [("", found.files)]
        # The entries made anew, when every path is one of the last capture's (`resorted`).
        same_dirs = carried is not None and len(groups) == len(before)
        renewals: list[Entry] | None = [] if same_dirs else None
        dirty, made, whole_dirs = set[str](), list[Entry](), set[str]()
        # (where entries were made again, and those; the directories taken whole)
        done = misses = 0
        first_reads = 0.0  # when the first file missing from the cache began to be read
        with DirTree(self._root.path) as tree, self._prefetch() as prefetch:
            for group, (d, files) in enumerate(groups):
                was = before.get(d)
                if remember is not None and was is not None and was.part is remember[d] and whole:
                    entries += was.entries
                    if carried is None:
                        fresh.update(was.stats)
                    kept[d] = was
                    whole_dirs.add(d)
                    done += len(files)
                    continue
                reusable = was.reusable() if was else {}
                mine: list[Entry] = []
                for i, (rel, seen) in enumerate(files):
                    done += 1
                    prev = reusable.get(rel)
                    if (
                        prev is not None
                        and prev[0] is seen
                        and (not store_objects or prev[1].hash in packed)
                    ):
                        # The very stat of the last capture: a watched, quiet file.
                        mine.append(prev[1])
                        if (hit := cache.get(rel)) is not None:
                            fresh[rel] = hit
                        continue
                    dirty.add(d)  # its tree is built again (a group is one directory, if watched)
                    st: StatLike = seen
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
                            time.perf_counter() - first_reads
                            > PREFETCH_AFTER * self._slow_read_seconds
                        ):
                            # Many files to read, and the disk is serving them: read ahead.
                            later = (f for _, g in groups[group + 1 :] for f in g)
                            rest = itertools.chain(files[i + 1 :], later)
                            prefetch.start(_unhashed(self._root.path, rest, cache))
                        try:
                            digest, st = self.hash_and_store(
                                rel, store_objects=store_objects, tree=tree, recent_ns=margin,
                                base=hit[1] if hit else self.trees.previous(rel))  # fmt: skip
                        except Vanished:
                            if not final:
                                raise
                            continue  # on the final look: not part of it, as in a listing
                        if not tick and is_coarse(st):
                            tick = COARSE_TICK_NS
                            self._caches.record_tick(tick)  # the caller captures again
                        if st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before:
                            fresh[rel] = (file_state(st), digest)
                    mine.append(Entry(path=rel, type="file", mode=MODES[st.st_mode & 0o777],
                                      hash=digest, size=st.st_size))  # fmt: skip
                    if done % 4096 == 0:
                        self._report("hash", done, total)
                entries += mine
                made += mine
                if renewals is not None:
                    renewals = renewed(mine, was, renewals)
                if remember is not None and len(mine) == len(files):  # (Kept: one per file)
                    kept[d] = Kept(remember[d], mine, records(files, fresh))
        links = [Entry(path=rel, type="symlink", mode=mode, target=target)
                 for rel, target, mode in found.symlinks]  # fmt: skip
        entries += links
        again = (
            resorted(self._last_capture.entries, renewals + links)
            if renewals is not None
            and self._last_capture is not None
            and [e.path for e in links] == self._links
            else None
        )
        if again is None:
            entries.sort(key=attrgetter("path"))
        entries = again or entries
        self.carried_over = (carried is not None, again is not None)
        found.files.clear()  # its stats are done with (a group may hold it): memory at 200k
        flat = Flat(entries, sorted(found.dirs), sorted(found.ignored), sorted(found.large),
                    sorted(found.excluded))  # fmt: skip
        clean = unchanged_dirs(self._memory, remember, dirty)  # for the trees: see there
        same = carried is not None and len(whole_dirs) == len(groups) == len(before)
        self._caches.replace_stat_table(fresh, changed=None if carried is None else not same)
        current = Manifest(
            version=VERSION,
            id=new_id(),
            root=self._root.wire,
            kind="current",
            step=None,
            time=now_rfc3339(scan_start),  # begun later, newer: saw what ended before
            max_file_bytes=cap,
            tree=self.trees.build(
                flat, store_objects, swept, clean=clean, changed=(made + links, whole_dirs)
            ),
            entries=entries,
            dirs=flat.dirs,
            ignored=flat.ignored,
            large=flat.large,
            excluded=flat.excluded,
            exclude=sorted(self._root.exclude - {self._root.store_rel or ""}),
        )
        self._caches.save(force=self._watcher is None)  # after the build: its trees too
        if watcher is None and store_objects:
            index = settled(t.index, t.stamp, t.racy_before) if (t := self._tracked) else None
            self.last.walked(current, listings.dirs, fresh, rules.key, cap=cap, tick=tick,
                             index=index)  # fmt: skip
        if watcher is not None and remember is not None:
            # Commit: from here on the events taken are consumed and the memory is this scan's.
            self._memory = remember
            self._memory_key = rules.key
            self._memory_tracked = tracked
            self._has_links = any(part.linked for part in remember.values())
            self._kept = kept
            self._links = [e.path for e in links]
            self._carried = fresh if len(kept) == len(groups) else None  # (all its records)
            self._last_capture = current
            self._last_stored = store_objects  # a preview's digests may have no objects
            self._subtrees = subtrees_of(current, self.trees.memo.digests())
            watcher.commit(alive=set(remember))
        return current

    def _changes_since_memory(
        self, changes: Changes, rules: Rules, tracked: Tracked | None
    ) -> None:
        """Adds to `changes` what the rules and git's index changed since the memory was made."""
        if rules.key != self._memory_key:
            changes.everything = True  # every ignore decision may differ
            return
        changes.note_index(tracked, self._memory_tracked)

    def audit(self, *, check: Callable[[], None] | None = None) -> list[str]:
        """What the watcher vouches for that a plain scan now does not find (`audit_memory`).

        One line per difference (none without a watcher); then the memory is dropped, so
        the next capture reads everything afresh. `check` is called at every directory; it
        may raise to abandon the audit (a command is waiting).
        """
        watcher = self._watcher
        if watcher is None or not self._memory:
            return []
        missed = audit_memory(
            self._root, watcher, self._memory, self._memory_key, self._memory_tracked,
            captured=self._last_capture, max_file_bytes=self.max_file_bytes, check=check,
            settled_before=time.time_ns() - self._racy_margin_ns - self._caches.tick(),
        )  # fmt: skip
        if missed:
            self.forget_memory()
        return missed

    def forget_memory(self) -> None:
        """Vouches for nothing the watcher saw: the next capture reads everything afresh."""
        self._memory = {}
        self._memory_key = None
        self._last_capture = None
        if self._watcher is not None:
            self._watcher.forget_all()

    def hash_and_store(
        self, rel: str, *, store_objects: bool, tree: DirTree, recent_ns: int | None = None,
        base: str | None = None) -> tuple[str, os.stat_result]:  # fmt: skip
        """Hashes (and stores) one file reached without a symlink; read twice if recent."""
        parent, _, name = rel.rpartition("/")
        try:
            dir_fd = tree.dir_fd(parent)
        except OSError as exc:
            raise SnapshotError(
                rel, f"changed while the snapshot ran ({exc.strerror})", changing=True
            ) from None
        raw = fs_path(name)
        recent = recent_ns if recent_ns is not None else self._racy_margin_ns + self._caches.tick()
        digest, data, st = self._read_file(
            raw, rel, keep=store_objects, dir_fd=dir_fd, recent_ns=max(recent, RACY_MARGIN_NS)
        )
        if store_objects and data is not None:
            self._store.add(digest, data, base=base)
        elif store_objects and st.st_size >= SMALL:
            self._store.add_file(digest, raw, rel, dir_fd=dir_fd)
        return digest, st


class _IndexRead(msgspec.Struct, frozen=True):
    """What git's index said, and what tells that it still says so."""

    tracked: Tracked | None
    index: str | None
    stamp: tuple[int, ...] | None
    racy_before: int
    """An index changed at or after this (ns) may have changed again unseen: read it again."""
    rules: Rules
    """The base rules it was read with (new ones may mean another repository)."""


def _unhashed(root: str, files: Iterable[tuple[str, Seen]], cache: StatTable) -> Iterator[bytes]:
    """The absolute paths of the files whose cached digest cannot be used: what will be read."""
    base = os.fsencode(root) + b"/"
    for rel, st in files:
        hit = cache.get(rel)
        if hit is None or hit[0] != file_state(st):
            yield base + fs_path(rel)
