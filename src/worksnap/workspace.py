"""Workspace: one root and its store, and the operations the API and the CLI offer on them.

This is the only module that strings the stages together:
scan -> hash -> store -> manifest for a snapshot, and
load -> plan -> (pre-restore snapshot, journal) -> apply for a restore.
"""

from __future__ import annotations

import builtins
import gc as cyclic_gc
import os
import socket
import stat
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import msgspec

from worksnap.apply import Result, apply_plan, remove_leftovers
from worksnap.caches import Caches
from worksnap.config import Retention, load_config
from worksnap.diff import FileChange, compare
from worksnap.errors import (
    ConflictError,
    InputError,
    LockError,
    ManifestError,
    ObjectError,
    RestoreError,
    SnapshotError,
    WorksnapError,
)
from worksnap.fsio import DirTree, FileState, file_state, fsync_dir, write_atomic
from worksnap.hash import SMALL, Prefetch, hash_bytes, read_file
from worksnap.history import (
    CHECKPOINT,
    DEFAULT_SESSION,
    UNDO_KINDS,
    Frame,
    SessionState,
    check_session_name,
    checkpoint_target,
    load_state,
    referenced_by_sessions,
    save_state,
    undo_target,
)
from worksnap.ignore import Rules, base_rules, ignore_checker
from worksnap.layout import store_location
from worksnap.lock import StoreLock
from worksnap.manifest import (
    VERSION,
    Entry,
    Manifest,
    Summary,
    check_manifest,
    new_id,
    now_rfc3339,
    tree_digest,
)
from worksnap.paths import ancestors, check_path, fs_path, is_git_name, is_under, wire_name
from worksnap.plan import Plan, differing, plan_restore, select_paths
from worksnap.retention import select_expired
from worksnap.scan import DirScan, scan_tree
from worksnap.store import DiskStore
from worksnap.watch import Watcher

DEFAULT_MAX_FILE_BYTES = 2 << 20
"""Files larger than this (2 MiB) are listed in `large` and not captured."""

# A cached digest is trusted only for a file whose times are older than the scan
# that recorded it by more than a filesystem timestamp tick: a file changed again
# within the same tick would otherwise keep its stat and its stale digest (racy git).
_RACY_MARGIN_NS = 100_000_000


Reader = Callable[[Entry], bytes]
"""Returns the bytes of a captured file."""


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a garbage collection removed."""

    snapshots: int = 0
    objects: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    """A report on long work: `done` of `total` units of `what` ("hash", "apply")."""

    what: str
    done: int
    total: int


class _Journal(msgspec.Struct, frozen=True, kw_only=True):
    target: str
    pre_restore: str
    pid: int
    host: str


class Workspace:
    """A workspace root and the store that records its snapshots.

    Long-lived: keep one per root in an agent runtime so that the stat cache
    and the store index stay in memory between snapshots.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        store: str | os.PathLike[str] | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        exclude: tuple[str, ...] = (),
        force: bool = False,
        session: str = DEFAULT_SESSION,
        watch: bool = False,
        progress: Callable[[Progress], None] | None = None,
    ) -> None:
        """Opens the workspace at `root` (nothing is written until the first snapshot).

        Args:
            root: the directory to snapshot.
            store: the store directory (default `<root>/.worksnap`).
            max_file_bytes: files larger than this are listed in `large`, not stored.
            exclude: paths (relative to the root, or absolute inside it) never captured
                nor touched; a directory excludes everything below it.
            force: allow `/` or the home directory as a root.
            session: the session new snapshots belong to; list, rewind, undo and redo
                look only at it.
            watch: keep an inotify watch on every captured directory (Linux), so that
                a snapshot reads only the directories where something happened. For a
                long-lived object; see docs/performance.md for what it cannot see.
            progress: called now and then during long work.

        Raises:
            InputError: the root is missing, not a directory, `/` or home without
                `force`, or an exclusion lies outside the root.
        """
        if not os.path.isdir(root):
            raise InputError(f"root {os.fspath(root)!r} is not a directory")
        self.root = os.path.realpath(root)
        if not force and self.root in ("/", os.path.realpath(os.path.expanduser("~"))):
            raise InputError(
                f"refusing to snapshot {self.root}: it is / or your home directory "
                "(pass --force if you really mean it)"
            )
        if max_file_bytes < 0:
            raise InputError("max_file_bytes must not be negative")
        self.store_dir = store_location(self.root, None if store is None else os.fspath(store))
        self.max_file_bytes = max_file_bytes
        self.session = check_session_name(session)
        self._last_full: Manifest | None = None
        self._checked: dict[tuple[str, Hashable], Manifest] = {}
        self._wire_root = wire_name(self.root)
        real_store = os.path.realpath(self.store_dir)
        if real_store == self.root or self.root.startswith(real_store.rstrip("/") + "/"):
            # A restore would treat the store's own files as workspace files.
            raise InputError(f"store {self.store_dir} must not be the root or contain it")
        store_rel = self._relative(real_store)
        self._store_rel = store_rel
        excluded = {self._inside(path, "exclusion") for path in exclude}
        if store_rel is not None:
            excluded.add(store_rel)
        self._exclude = frozenset(excluded)
        self.progress = progress
        """Called now and then during long work; may be replaced between calls."""
        self.store = DiskStore(self.store_dir)
        self._paths = self.store.paths
        self._caches = Caches(self._paths, self.root, self.store.exists)
        self._rules: Rules | None = None
        self.problems: builtins.list[str] = []
        """One line for each damaged snapshot the last `list` skipped."""
        # With a watcher: what the last capture saw, to reuse where nothing happened.
        self._watcher = Watcher() if watch else None
        if self._watcher is not None and not self._watcher.available:
            self._watcher = None
        self._memory: dict[str, DirScan] = {}
        self._entries: dict[str, tuple[os.stat_result, Entry]] = {}
        self._last_capture: Manifest | None = None
        self._last_stored = False

    # -- helpers -------------------------------------------------------------

    def _relative(self, path: str) -> str | None:
        """Returns `path` (absolute) relative to the root in wire form, or None if outside."""
        rel = os.path.relpath(path, self.root)
        if rel in {".", ".."} or rel.startswith("../"):
            return None
        return wire_name(rel)

    def _inside(self, path: str | os.PathLike[str], what: str) -> str:
        """Returns a path given relative to the root, or absolute, as a safe wire path inside it."""
        absolute = os.path.normpath(os.path.join(self.root, os.fspath(path)))
        rel = self._relative(absolute)
        if rel is None or check_path(rel, what) is not None:
            raise InputError(f"{what} {os.fspath(path)!r} is not a path inside {self.root}")
        return rel

    def _report(self, what: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(Progress(what, done, total))

    @property
    def watching(self) -> bool:
        """True while an inotify watch is kept (asked for with `watch=True`, and available)."""
        return self._watcher is not None

    def use(self, *, session: str, progress: Callable[[Progress], None] | None) -> None:
        """Points a long-lived workspace at another session and progress callback."""
        self.session = check_session_name(session)
        self.progress = progress

    def close(self) -> None:
        """Stores the caches, releases open files and the watcher; may be used again after."""
        self._caches.save(force=True)
        self.store.close()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._last_capture = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshot ------------------------------------------------------------

    def _base_rules(self) -> Rules:
        if self._rules is None:
            self._rules = base_rules(Path(self.root))
        return self._rules

    def _ensure_store(self) -> None:
        self.store.bind(self.root)

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
        scan_start = time.time_ns()
        trust_before = scan_start - _RACY_MARGIN_NS
        swept = self.store.sync() if store_objects else False
        dirty = self._watcher.drain() if self._watcher is not None else None
        last = self._last_capture if self._last_stored or not store_objects else None
        if dirty == {} and last is not None and not swept:
            # Not one event in any watched directory: the tree is as last captured.
            return msgspec.structs.replace(last, id=new_id(), time=now_rfc3339())
        listings = self._caches.listings()
        listed = listings.dirs
        found = scan_tree(
            self.root,
            self._base_rules(),
            exclude=self._exclude,
            max_file_bytes=self.max_file_bytes,
            listings=listings,
            trust_before=trust_before,
            watcher=self._watcher,
            memory=self._memory,
            dirty=dirty,
        )
        if listings.dirs != listed:
            self._caches.listings_changed()
        cache = self._caches.stat_table()
        fresh: dict[str, tuple[FileState, str]] = {}
        packed = self.store.indexed()
        entries: list[Entry] = []
        total = len(found.files)
        remembered = self._entries
        kept: dict[str, tuple[os.stat_result, Entry]] = {}
        watching = self._watcher is not None
        misses = 0
        first_reads = 0.0  # when the first file missing from the cache began to be read
        with DirTree(self.root) as tree, Prefetch() as prefetch:
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
                    and (not store_objects or hit[1] in packed or self.store.has(hit[1]))
                ):
                    digest = hit[1]
                    fresh[rel] = hit  # trusted when cached, and unchanged since
                else:
                    misses += 1
                    if misses == 1:
                        first_reads = time.perf_counter()
                    elif misses == _PREFETCH_AFTER and (
                        time.perf_counter() - first_reads > _PREFETCH_AFTER * _SLOW_READ_SECONDS
                    ):
                        # Many files to read, and the disk is serving them: read ahead.
                        prefetch.start(_unhashed(self.root, found.files[done + 1 :], cache))
                    digest, st = self._hash_and_store(rel, store_objects=store_objects, tree=tree)
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
            root=self._wire_root,
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

    def _hash_and_store(
        self, rel: str, *, store_objects: bool, tree: DirTree
    ) -> tuple[str, os.stat_result]:
        """Hashes (and stores) one file, reached from the root without crossing a symlink."""
        parent, _, name = rel.rpartition("/")
        try:
            dir_fd = tree.dir_fd(parent)
        except OSError as exc:
            raise SnapshotError(rel, f"changed while the snapshot ran ({exc.strerror})") from None
        raw = fs_path(name)
        digest, data, st = read_file(raw, rel, keep=store_objects, dir_fd=dir_fd)
        if store_objects:
            if data is not None:
                self.store.add(digest, data)
            elif st.st_size >= SMALL:
                self.store.add_file(digest, raw, rel, dir_fd=dir_fd)
        return digest, st

    def snapshot(
        self,
        *,
        kind: str = "manual",
        step: int | None = None,
        label: str | None = None,
        meta: dict[str, str] | None = None,
        attach: dict[str, bytes] | None = None,
    ) -> Manifest:
        """Captures the whole workspace and stores it as a new snapshot of this session.

        Every call records a new snapshot with its own id, even when nothing
        changed (then no new object is written). A new snapshot clears the
        session's redo stack (unless undo or redo itself took it).

        Args:
            kind: what the snapshot is for (`manual`, `step`, ...).
            step: the agent step it belongs to.
            label: a short label; its first line is kept, at most 200 bytes.
            meta: small string metadata (e.g. a conversation cut point).
            attach: named attachments (e.g. `messages.json`), stored content-addressed.

        Raises:
            SnapshotError: a file could not be read or the store not written.
        """
        self._check_step(step)
        self._recover_if_interrupted()
        try:
            self._ensure_store()
            with StoreLock(self.store_dir, exclusive=False):
                current = self.capture(store_objects=True)
                manifest = msgspec.structs.replace(
                    current,
                    kind=kind,
                    step=step,
                    label=_one_line(label),
                    session=self.session,
                    meta=dict(meta or {}),
                    attachments=self._store_attachments(attach),
                )
                self._save(manifest)
        except OSError as exc:
            raise SnapshotError("", f"cannot write the store {self.store_dir}: {exc}") from None
        self._apply_configured_retention()
        return manifest

    def _check_step(self, step: int | None) -> None:
        if step is not None and step < 0:
            raise InputError("step must not be negative")

    def _store_attachments(self, attach: dict[str, bytes] | None) -> dict[str, str]:
        stored: dict[str, str] = {}
        for name, data in (attach or {}).items():
            if not name or "/" in name or "\x00" in name:
                raise InputError(f"bad attachment name {name!r}")
            digest = hash_bytes(data)
            self.store.add(digest, data)
            stored[name] = digest
        return stored

    def _save(self, manifest: Manifest) -> None:
        """Stores a new snapshot of this session, with the count of paths changed since the last."""
        self.store.save_manifest(manifest, _summarize(manifest, changed=self._changed(manifest)))
        if manifest.kind != CHECKPOINT:
            self._last_full = manifest
        if manifest.kind not in UNDO_KINDS:
            state = load_state(self._paths, self.session)
            if state.redo:
                state.redo.clear()
                save_state(self._paths, self.session, state)

    def _changed(self, manifest: Manifest) -> int | None:
        """Counts the paths changed since the session's previous full snapshot (None: no such)."""
        if manifest.kind == CHECKPOINT:
            return None
        previous = self._last_full
        if previous is None or previous.session != self.session:
            summary = next((s for s in self.list() if s.kind != CHECKPOINT), None)
            if summary is None:
                return None
            if summary.tree == manifest.tree:
                return 0  # the summary says enough: no manifest to read
            try:
                previous = self.store.load_manifest(summary.id)
            except ManifestError:
                return None
        if previous.tree == manifest.tree:
            return 0
        return _count_changes(previous, manifest)

    # -- reading snapshots ---------------------------------------------------

    def list(self, *, all_sessions: bool = False) -> builtins.list[Summary]:
        """Returns this session's snapshots (or every session's), newest first.

        Damaged snapshots are skipped; `problems` then holds one line for each.
        """
        summaries, self.problems = self.store.summaries()
        if not all_sessions:
            summaries = [s for s in summaries if s.session == self.session]
        summaries.sort(key=lambda s: (s.time, s.id), reverse=True)
        return summaries

    def resolve(self, ref: str) -> str:
        """Returns the snapshot id a ref names: an id, a unique id prefix, `latest`, `step:N`.

        `latest` and `step:N` look in this session only; ids name any snapshot.

        Raises:
            InputError: the ref names no snapshot, or more than one.
        """
        if ref == "latest" or ref.startswith("step:"):
            summaries = self.list()
            if ref != "latest":
                try:
                    wanted = int(ref[len("step:") :])
                except ValueError:
                    raise InputError(f"bad ref {ref!r}: step:N needs a number") from None
                summaries = [s for s in summaries if s.step == wanted]
            if not summaries:
                raise InputError(f"no snapshot matches {ref!r} in session {self.session!r}")
            return summaries[0].id
        matches = [i for i in self.store.ids() if i.startswith(ref.lower())] if ref else []
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise InputError(f"no snapshot matches {ref!r}")
        raise InputError(f"ref {ref!r} is ambiguous: it matches {len(matches)} snapshots")

    def load(self, ref: str) -> Manifest:
        """Loads and checks a snapshot: it must be intact, safe, and of this root.

        Raises:
            InputError: unknown ref; ManifestError: unreadable, hostile or for another root.
        """
        snapshot_id = self.resolve(ref)
        # Checking a large manifest costs more than reading it: remember the last few
        # checked ones, keyed by the file's identity so an edited file is checked again.
        stamp = self.store.manifest_stamp(snapshot_id)
        identity = None if stamp is None else (snapshot_id, stamp)
        checked = self._checked.get(identity) if identity is not None else None
        if checked is not None:
            return checked
        manifest = self.store.load_manifest(snapshot_id)
        if manifest.id != snapshot_id:
            raise ManifestError(snapshot_id, f"file holds snapshot {manifest.id!r}")
        check_manifest(
            manifest, root=self._wire_root, store_rel=self._store_rel, source=snapshot_id
        )
        if identity is not None:
            self._checked[identity] = manifest
            while len(self._checked) > 4:
                del self._checked[next(iter(self._checked))]
        return manifest

    def show_bytes(self, ref: str) -> bytes:
        """Returns a snapshot's manifest exactly as stored (after the checks `load` makes)."""
        self.load(ref)
        return self.store.manifest_bytes(self.resolve(ref))

    def verify(self, ref: str | None = None) -> builtins.list[str]:
        """Checks that every object the snapshot (or every snapshot) needs is present and intact.

        Returns:
            One line for each problem found; empty when all is well.
        """
        problems: builtins.list[str] = []
        ids = [self.resolve(ref)] if ref is not None else self.store.ids()
        checked: dict[str, str | None] = {}
        for snapshot_id in ids:
            try:
                manifest = self.load(snapshot_id)
            except ManifestError as exc:
                problems.append(str(exc))
                continue
            for entry in manifest.entries:
                if entry.hash is None:
                    continue
                if entry.hash not in checked:
                    try:
                        self.store.read(entry.hash)
                        checked[entry.hash] = None
                    except ObjectError as exc:
                        checked[entry.hash] = exc.reason
                reason = checked[entry.hash]
                if reason is not None:
                    problems.append(f"{snapshot_id}: {entry.path}: object {entry.hash} {reason}")
        return problems

    # -- restore -------------------------------------------------------------

    def plan_restore(
        self, target: Manifest, *, paths: Sequence[str | os.PathLike[str]] | None = None
    ) -> Plan:
        """Previews what restoring `target` would change; writes nothing but the stat cache.

        For a checkpoint, the target is every path captured in it or in a later
        checkpoint of its session, at its earliest before-image; nothing else.

        Args:
            target: the snapshot to restore.
            paths: restore only these paths (relative to the root, or absolute inside
                it) and what lies below them.
        """
        self._recover_if_interrupted()  # never preview a half-restored tree
        selected = self._selection(paths)
        current = self.capture(store_objects=False)
        return self._plan(current, self._full_target(current, target), selected)

    def _selection(
        self, paths: Sequence[str | os.PathLike[str]] | None
    ) -> builtins.list[str] | None:
        return None if paths is None else [self._named_path(p) for p in paths]

    def _full_target(self, current: Manifest, target: Manifest) -> Manifest:
        """Returns the whole tree a restore of `target` aims at (checkpoints are partial)."""
        if target.kind == CHECKPOINT:
            return checkpoint_target(current, self._later_checkpoints(target))
        return target

    def _plan(
        self, current: Manifest, target: Manifest, selected: builtins.list[str] | None = None
    ) -> Plan:
        gitignores: dict[str, bytes] = {}
        for entry in target.entries:
            if not entry.path.endswith(".gitignore"):
                continue  # the cheap test first: this loop sees every entry
            directory, _, name = entry.path.rpartition("/")
            if name == ".gitignore" and entry.type == "file" and entry.hash is not None:
                gitignores[directory] = self.store.read(entry.hash)
        ignored = ignore_checker(self._base_rules(), gitignores)
        plan = plan_restore(current, target, ignored_by_target=ignored)
        return plan if selected is None else select_paths(plan, selected)

    def restore(self, ref: str, *, paths: Sequence[str | os.PathLike[str]] | None = None) -> Result:
        """Restores the snapshot `ref` names, with every guarantee of `apply`.

        The state captured for the pre-restore snapshot is the one planned from,
        so the tree is walked once.

        Args:
            ref: the snapshot.
            paths: restore only these paths and what lies below them.
        """
        target = self.load(ref)
        selected = self._selection(paths)
        return self._restore(lambda current: target, kind="pre-restore", selected=selected)

    def _restore(
        self,
        choose: Callable[[Manifest], Manifest],
        *,
        kind: str,
        selected: builtins.list[str] | None = None,
        then: Callable[[Result], None] | None = None,
    ) -> Result:
        """Captures the current state once, plans to `choose(current)`, and applies.

        `choose` and `then` (given the result) run under the exclusive lock, so
        session state they read and write cannot change under them.
        """
        self._recover_if_interrupted()
        self._ensure_store()
        with StoreLock(self.store_dir, exclusive=True):
            pre = self.capture(store_objects=True)
            plan = self._plan(pre, self._full_target(pre, choose(pre)), selected)
            if plan.changes:
                pre = msgspec.structs.replace(pre, kind=kind, session=self.session)
                result = self._run(plan, pre)
            else:
                result = Result(target=plan.target.id)
            if then is not None:
                then(result)
            return result

    def apply(self, plan: Plan, *, kind: str = "pre-restore") -> Result:
        """Carries out a plan: all or nothing, and undoable.

        Before the first change: every object the plan writes is verified, the
        current state is stored as a `pre-restore` snapshot (and checked against
        what the plan saw), and a journal is written. If a change fails, the
        workspace is rolled back to the pre-restore snapshot.

        Raises:
            ConflictError: a path the plan touches changed since the plan was made.
            ObjectError: an object the plan needs is missing or damaged.
        """
        if not plan.changes:
            return Result(target=plan.target.id)
        self._recover_if_interrupted()
        self._ensure_store()
        with StoreLock(self.store_dir, exclusive=True):
            pre = self.capture(store_objects=True)
            pre = msgspec.structs.replace(pre, kind=kind, session=self.session)
            _check_unchanged(plan, pre)
            return self._run(plan, pre)

    def _run(self, plan: Plan, pre: Manifest) -> Result:
        """Applies `plan` from state `pre` (the lock is held): verify, record, journal, apply."""
        for change in plan.changes:
            if change.entry is not None and change.entry.hash is not None:
                self.store.read(change.entry.hash)
        self._save(pre)
        journal = self._paths.journal
        write_atomic(
            journal,
            msgspec.json.encode(
                _Journal(
                    target=plan.target.id,
                    pre_restore=pre.id,
                    pid=os.getpid(),
                    host=socket.gethostname(),
                )
            ),
        )
        try:
            result = apply_plan(
                self.root,
                plan,
                self.store.read,
                progress=lambda done, total: self._report("apply", done, total),
            )
        except BaseException as exc:
            # Interrupted (Ctrl-C, a bug): undo now rather than at the next command.
            failed = Result(target=plan.target.id, error=f"interrupted: {exc!r}")
            self._roll_back(pre, failed, plan.target)
            _remove_journal(journal)
            raise
        result.pre_restore = pre.id
        if not result.ok:
            self._roll_back(pre, result, plan.target)
        _remove_journal(journal)
        # The stat cache stays: every file apply writes is a new inode (temp file renamed
        # into place), so no cached digest can be taken for it.
        return result

    def _roll_back(self, pre: Manifest, result: Result, target: Manifest | None) -> Result:
        """Returns the workspace to `pre` after a failed apply (the lock is held).

        Returns:
            What the rollback changed.

        Raises:
            RestoreError: the rollback failed too (the journal stays for `recover`).
        """
        self._caches.forget_stat_table()  # the failed apply rewrote files: trust fresh stats only
        dirs = [*pre.dirs, *(target.dirs if target is not None else ())]
        remove_leftovers(self.root, dirs)
        back = apply_plan(
            self.root, self._plan(self.capture(store_objects=False), pre), self.store.read
        )
        if not back.ok:
            raise RestoreError(
                f"restore failed ({result.error}) and so did the rollback ({back.error}); "
                f"the pre-restore snapshot {pre.id} holds the earlier state "
                "(run `worksnap recover` to try again)"
            )
        result.rolled_back = True
        return back

    def _recover_if_interrupted(self) -> Result | None:
        """Finishes the rollback of a restore that was killed part-way, if there was one."""
        journal = self._paths.journal
        if not os.path.exists(journal):
            return None
        return self.recover()

    def recover(self) -> Result | None:
        """Rolls back an interrupted restore to its pre-restore snapshot.

        Returns:
            The rollback's result, or None when no restore was interrupted.
        """
        journal = self._paths.journal
        if not os.path.exists(journal):
            return None  # checked again under the lock: this only spares a missing store
        with StoreLock(self.store_dir, exclusive=True):
            try:
                with open(journal, "rb") as f:
                    record = msgspec.json.decode(f.read(), type=_Journal)
            except FileNotFoundError:
                return None  # another process finished it while we waited for the lock
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                raise RestoreError(f"journal {journal} is damaged ({exc}); remove it") from None
            pre = self.load(record.pre_restore)
            try:
                target: Manifest | None = self.load(record.target)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            back = self._roll_back(pre, Result(target=record.target, error="interrupted"), target)
            _remove_journal(journal)
            return back

    # -- steps, undo and redo ------------------------------------------------

    def rewind(self, step: int) -> Result:
        """Restores the newest snapshot (or checkpoint) of this session taken at `step`."""
        return self.restore(f"step:{step}")

    def undo(self) -> Result:
        """Restores the newest snapshot of this session whose state differs from the current one.

        Right after a restore that is its pre-restore snapshot (so undo reverses
        the restore); otherwise it discards the edits made since the last
        snapshot. The state undo leaves is kept for `redo`; repeated undo walks
        further back.

        Raises:
            InputError: there is nothing to undo.
        """
        chosen: builtins.list[str] = []

        def choose(current: Manifest) -> Manifest:
            state = load_state(self._paths, self.session)
            target_id = undo_target(self.list(), current.tree, state)
            if target_id is None:
                raise InputError(f"nothing to undo in session {self.session!r}")
            chosen.append(target_id)
            return self.load(target_id)

        def record(result: Result) -> None:
            if result.ok and result.pre_restore is not None:
                state = load_state(self._paths, self.session)
                state.redo.append(Frame(chosen[0], result.pre_restore))
                save_state(self._paths, self.session, state)

        return self._restore(choose, kind="undo", then=record)

    def redo(self) -> Result:
        """Re-applies what the last `undo` undid (the state it left).

        Raises:
            InputError: nothing was undone, or a new snapshot cleared the redo stack.
        """
        nothing = InputError(
            f"nothing to redo in session {self.session!r} "
            "(only an undo can be redone, and a new snapshot clears redo)"
        )
        if not load_state(self._paths, self.session).redo:
            raise nothing  # answered before the tree is walked; checked again under the lock
        frames: builtins.list[Frame] = []

        def choose(current: Manifest) -> Manifest:
            state = load_state(self._paths, self.session)
            if not state.redo:
                raise nothing
            frames.append(state.redo[-1])
            return self.load(frames[0].left)

        def record(result: Result) -> None:
            state = load_state(self._paths, self.session)
            if result.ok and state.redo and state.redo[-1] == frames[0]:
                state.redo.pop()
                save_state(self._paths, self.session, state)

        return self._restore(choose, kind="redo", then=record)

    # -- per-file checkpoints ------------------------------------------------

    def begin(
        self,
        *,
        step: int | None = None,
        label: str | None = None,
        meta: dict[str, str] | None = None,
        attach: dict[str, bytes] | None = None,
    ) -> Manifest:
        """Opens a light checkpoint for a turn without scanning the tree.

        Files named to `capture_before` until the next `begin` record their
        before-image in it.
        """
        self._check_step(step)
        self._ensure_store()
        with StoreLock(self.store_dir, exclusive=False):
            checkpoint = Manifest(
                version=VERSION,
                id=new_id(),
                root=self._wire_root,
                kind=CHECKPOINT,
                step=step,
                time=now_rfc3339(),
                max_file_bytes=self.max_file_bytes,
                tree=tree_digest([], []),
                label=_one_line(label),
                session=self.session,
                entries=[],
                dirs=[],
                ignored=[],
                large=[],
                excluded=[],
                meta=dict(meta or {}),
                attachments=self._store_attachments(attach),
            )
            self._save(checkpoint)
            state = load_state(self._paths, self.session)
            state.checkpoint = checkpoint.id
            save_state(self._paths, self.session, state)
        return checkpoint

    def capture_before(self, paths: Iterable[str | os.PathLike[str]]) -> Manifest:
        """Records the before-image of each named file in the open checkpoint.

        The first capture of a path in a checkpoint wins; a file that does not
        exist is recorded as absent (a rewind removes it). Costs what the named
        files cost, never a tree scan.

        Raises:
            InputError: no checkpoint is open, or a path is outside the root,
                inside `.git` or the store, or a directory.
        """
        state = load_state(self._paths, self.session)
        if state.checkpoint is None:
            raise InputError(
                f"no open checkpoint in session {self.session!r}: run `worksnap begin` first"
            )
        # Exclusive: captures from parallel tool calls (threads or processes) each
        # rewrite the checkpoint, and none may lose another's before-images.
        with StoreLock(self.store_dir, exclusive=True):
            checkpoint = self.load(state.checkpoint)
            entries = {e.path: e for e in checkpoint.entries}
            absent = set(checkpoint.absent)
            large = set(checkpoint.large)
            dirs = set(checkpoint.dirs)
            for path in paths:
                rel = self._named_path(path)
                if rel in entries or rel in absent or rel in large:
                    continue
                entry = self._before_image(rel)
                if entry is None:
                    absent.add(rel)
                elif entry == "large":
                    large.add(rel)
                else:
                    entries[rel] = entry
                    dirs.update(ancestors(rel.rpartition("/")[0]))
            ordered = sorted(entries.values(), key=lambda e: e.path)
            updated = msgspec.structs.replace(
                checkpoint,
                entries=ordered,
                dirs=sorted(dirs),
                absent=sorted(absent),
                large=sorted(large),
                tree=tree_digest(ordered, sorted(dirs)),
            )
            self.store.save_manifest(updated, _summarize(updated))
        return updated

    def _named_path(self, path: str | os.PathLike[str]) -> str:
        """Returns a path a caller named, inside the root and outside what is never captured."""
        rel = self._inside(path, "path")
        # Every spelling of .git the scan leaves out, not only the exact name.
        if any(is_under(rel, excluded) for excluded in self._exclude) or any(
            is_git_name(part) for part in rel.split("/")
        ):
            raise InputError(f"{rel!r} is excluded (the store, .git, or --exclude)")
        return rel

    def _before_image(self, rel: str) -> Entry | Literal["large"] | None:
        """Stores and returns a path's current file or symlink.

        Returns None when nothing is there, "large" for a file over the size cap.
        """
        path = os.path.join(self.root, os.fsdecode(fs_path(rel)))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return Entry(
                path=rel, type="symlink", mode=st.st_mode & 0o777,
                target=wire_name(os.readlink(path)),
            )  # fmt: skip
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{rel!r} is not a file or symlink")
        if st.st_size > self.max_file_bytes:
            return "large"
        with DirTree(self.root) as tree:
            digest, st = self._hash_and_store(rel, store_objects=True, tree=tree)
        self.store.flush()
        return Entry(path=rel, type="file", mode=st.st_mode & 0o777, hash=digest, size=st.st_size)

    def _later_checkpoints(self, first: Manifest) -> builtins.list[Manifest]:
        """Returns `first` and every later checkpoint of its session, oldest first."""
        later = [
            s for s in self.list()
            if s.kind == CHECKPOINT and (s.time, s.id) > (first.time, first.id)
        ]  # fmt: skip
        later.sort(key=lambda s: (s.time, s.id))
        return [first, *(self.load(s.id) for s in later)]

    # -- attachments ---------------------------------------------------------

    def attachment(self, ref: str, name: str) -> bytes:
        """Returns the bytes of a snapshot's named attachment."""
        manifest = self.load(ref)
        digest = manifest.attachments.get(name)
        if digest is None:
            names = ", ".join(sorted(manifest.attachments)) or "none"
            raise InputError(f"snapshot {manifest.id} has no attachment {name!r} (has: {names})")
        return self.store.read(digest)

    # -- retention -----------------------------------------------------------

    def pin(self, ref: str, *, pinned: bool = True) -> str:
        """Pins a snapshot so gc never drops it (or unpins it); returns its id."""
        snapshot_id = self.resolve(ref)
        self._ensure_store()
        with StoreLock(self.store_dir, exclusive=True):
            pins = self.store.pins()
            if pinned:
                pins.add(snapshot_id)
            else:
                pins.discard(snapshot_id)
            self.store.set_pins(pins)
        return snapshot_id

    def gc(
        self,
        policy: Retention | None = None,
        *,
        wait: bool = True,
        drop_session: str | None = None,
    ) -> GcReport:
        """Drops the snapshots a retention policy expires and sweeps unreferenced objects.

        Pinned snapshots and snapshots a redo stack or open checkpoint needs are
        kept (keep-last and max-bytes also keep each session's newest). Safe while
        other processes snapshot: it waits for them and they wait for it.

        Args:
            policy: the limits; None uses the store's configured retention.
            wait: wait for the store lock (False: give up at once if it is busy).
            drop_session: also drop every unpinned snapshot of this session and its
                undo/redo state, freeing what only it needed.

        Raises:
            ManifestError: a manifest is unreadable, so what it needs is unknown;
                nothing was removed.
        """
        policy = policy if policy is not None else self.configured_retention()
        if not self.store.exists():
            return GcReport()
        with StoreLock(self.store_dir, exclusive=True, timeout=60.0 if wait else 0.0):
            summaries, _ = self.store.summaries()
            pins = self.store.pins()
            if drop_session is not None:
                save_state(self._paths, check_session_name(drop_session), SessionState())
            keep = pins | referenced_by_sessions(self._paths)
            dropped = select_expired(
                summaries,
                policy,
                keep=keep,
                now=datetime.now(timezone.utc),
                object_sizes=self._object_sizes,
            )
            dropped += [
                s.id
                for s in summaries
                if s.session == drop_session and s.id not in pins and s.id not in dropped
            ]
            live: set[str] = set()
            for snapshot_id in set(self.store.ids()) - set(dropped):
                # Before anything is removed: an unreadable manifest stops the gc here.
                live.update(self._object_sizes(snapshot_id))
            for snapshot_id in dropped:
                self.store.delete_snapshot(snapshot_id)
            removed, freed = self.store.sweep(live)
        self._last_full = None
        return GcReport(snapshots=len(dropped), objects=removed, bytes=freed)

    def _object_sizes(self, snapshot_id: str) -> dict[str, int]:
        """Returns {digest: size} of every object a snapshot needs (its attachments included)."""
        manifest = self.store.load_manifest(snapshot_id)
        sizes = {e.hash: e.size or 0 for e in manifest.entries if e.hash}
        for digest in manifest.attachments.values():
            sizes.setdefault(digest, 0)
        return sizes

    def configured_retention(self) -> Retention:
        """Returns the retention policy in the store's config (none when absent)."""
        return load_config(self._paths).retention

    def _apply_configured_retention(self) -> None:
        """Runs the configured retention after a snapshot, unless another process is busy."""
        policy = self.configured_retention()
        if policy.is_empty():
            return
        try:
            self.gc(policy, wait=False)
        except LockError:
            pass  # another process holds the store; the next snapshot will try again

    def du(self) -> dict[str, tuple[int, int]]:
        """Returns, per session, (snapshots, bytes of the distinct objects they reference)."""
        per_session: dict[str, tuple[int, dict[str, int]]] = {}
        summaries, _ = self.store.summaries()
        for summary in summaries:
            count, objects = per_session.get(summary.session, (0, {}))
            try:
                objects.update(self._object_sizes(summary.id))
            except ManifestError:
                pass  # damaged: counted, not sized (verify reports it)
            per_session[summary.session] = (count + 1, objects)
        return {
            session: (count, sum(objects.values()))
            for session, (count, objects) in sorted(per_session.items())
        }

    # -- moving workspaces ---------------------------------------------------

    def rebind(self) -> int:
        """Binds the store to this root (after the project moved); returns snapshots rebound.

        Every manifest's `root` is rewritten; the stat cache is dropped.
        """
        if not self.store.exists():
            raise InputError(f"no store at {self.store_dir} to rebind")
        with StoreLock(self.store_dir, exclusive=True):
            count = 0
            for snapshot_id in self.store.ids():
                try:
                    manifest = self.store.load_manifest(snapshot_id)
                except ManifestError:
                    continue  # left as it is; verify and list report it
                if manifest.id != snapshot_id:
                    continue  # misfiled: rewriting it would overwrite the snapshot it names
                if manifest.root != self._wire_root:
                    moved = msgspec.structs.replace(manifest, root=self._wire_root)
                    self.store.replace_manifest(moved)
                    count += 1
            self.store.rebind(self.root)
            self._caches.drop()
        return count

    # -- diff ----------------------------------------------------------------

    def diff(self, ref: str, ref2: str | None = None) -> tuple[builtins.list[FileChange], Reader]:
        """Compares snapshot `ref` with `ref2` (default: the workspace now).

        Returns:
            The changes, and a function that reads an entry's bytes (from the
            store, or from disk for the current state).
        """
        old = self.load(ref)
        new = self.load(ref2) if ref2 is not None else self.capture(store_objects=False)

        def read(entry: Entry) -> bytes:
            if entry.hash is None:
                return b""
            if self.store.has(entry.hash):
                return self.store.read(entry.hash)
            with open(os.path.join(self.root, os.fsdecode(fs_path(entry.path))), "rb") as f:
                return f.read()

        return compare(old, new), read


def _remove_journal(journal: str) -> None:
    """Removes the journal durably: once a restore is done, it must not come back."""
    os.unlink(journal)
    fsync_dir(os.path.dirname(journal))


def _one_line(label: str | None) -> str | None:
    """Returns the first line of a label, trimmed, at most 200 bytes (None if empty)."""
    if label is None:
        return None
    first = label.strip().split("\n", 1)[0].strip()
    cut = first.encode("utf-8", "surrogatepass")[:200].decode("utf-8", "ignore")
    return cut or None


def _count_changes(old: Manifest, new: Manifest) -> int:
    """Counts the paths (files, links, dirs) that differ between two full snapshots."""
    only_old, only_new = differing(old.entries, new.entries)
    paths = {e.path for e in only_old}
    paths.update(e.path for e in only_new)
    paths.update(set(old.dirs).symmetric_difference(new.dirs))
    return len(paths)


_PREFETCH_AFTER = 64
"""Files hashed before the rest may be read ahead (a few changed files are not worth a thread)."""
_SLOW_READ_SECONDS = 100e-6
"""Mean time per file over those above which the reads come from the disk, not the page
cache (cached: about 40 us). With the tree cached, the helper thread only costs: it takes
the GIL back and forth (a warm-cache cold snapshot went from 2.1 to 3.0 s with it)."""


def _unhashed(
    root: str,
    files: list[tuple[str, os.stat_result]],
    cache: dict[str, tuple[FileState, str]],
) -> Iterator[bytes]:
    """The absolute paths of the files whose cached digest cannot be used: what will be read."""
    base = os.fsencode(root) + b"/"
    for rel, st in files:
        hit = cache.get(rel)
        if hit is None or hit[0] != file_state(st):
            yield base + fs_path(rel)


def _summarize(manifest: Manifest, *, changed: int | None = None) -> Summary:
    return Summary(
        id=manifest.id,
        step=manifest.step,
        kind=manifest.kind,
        time=manifest.time,
        label=manifest.label,
        session=manifest.session,
        tree=manifest.tree,
        files=len(manifest.entries),
        bytes=sum(e.size or 0 for e in manifest.entries),
        changed=changed,
    )


def _check_unchanged(plan: Plan, now: Manifest) -> None:
    """Refuses to apply a plan if anything it touches, or any directory above, changed since.

    A change above a touched path counts: a directory swapped for a symlink
    between plan and apply must stop the restore, not redirect it.
    """
    seen: dict[str, Entry | None] = dict.fromkeys(plan.current.dirs)
    seen.update((e.path, e) for e in plan.current.entries)
    present: dict[str, Entry | None] = dict.fromkeys(now.dirs)
    present.update((e.path, e) for e in now.entries)
    touched = {change.path for change in plan.changes}
    above = {a for path in touched for a in ancestors(path.rpartition("/")[0])}
    for path in sorted(seen.keys() | present.keys()):
        if (path in seen, seen.get(path)) != (path in present, present.get(path)) and (
            path in above or any(a in touched for a in ancestors(path))
        ):
            raise ConflictError(path)
