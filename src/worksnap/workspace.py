"""Workspace: one root and its store, and every operation the API and the CLI offer on them.

A thin facade. The work is done by one object per responsibility, built here and
handed to each other explicitly:

    Capture      capture.py       scan, caches, hash and store: the state now
    Catalog      catalog.py       list, resolve refs, load safely, save, verify
    Restorer     transaction.py   plan, journal, apply, roll back, recover, undo/redo
    Checkpoints  checkpoints.py   begin / capture_before
    Maintenance  maintenance.py   pin, gc and retention, du, rebind

`Seams` lets a test (or a benchmark) swap a part: the function that hashes a file,
the scan, the read-ahead, the applier, the store; and the racy margin.
"""

from __future__ import annotations

import builtins
import copy
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from worksnap import config as settings
from worksnap.apply import ApplyPlan, Result, apply_plan
from worksnap.caches import Caches
from worksnap.capture import (
    DEFAULT_MAX_FILE_BYTES,
    RACY_MARGIN_NS,
    SLOW_READ_SECONDS,
    Capture,
    ReadFile,
    ScanTree,
)
from worksnap.catalog import Catalog
from worksnap.checkpoints import Checkpoints
from worksnap.config import Config, Retention, configured_exclusions, load_config
from worksnap.diskstore import DiskStore
from worksnap.errors import InputError, ObjectError, SnapshotError, WorksnapError, api_errors
from worksnap.exclusion import exclusion_root
from worksnap.extract import extract, plan_extract
from worksnap.hash import Prefetch, read_file
from worksnap.history import DEFAULT_SESSION, Sessions, check_kind, check_session_name
from worksnap.layout import store_location
from worksnap.lock import Locks
from worksnap.maintenance import GcReport, Maintenance
from worksnap.manifest import Entry, Manifest, Summary, check_meta, check_step, one_line
from worksnap.migration import UpgradeReport
from worksnap.paths import fs_path, real_root, relative_to
from worksnap.plan import Plan
from worksnap.progress import Progress, Reporter
from worksnap.scan import scan_tree
from worksnap.storeplace import resolve_store
from worksnap.transaction import Restorer
from worksnap.watch import Watcher

if TYPE_CHECKING:
    from worksnap.diff import FileChange

__all__ = ["DEFAULT_MAX_FILE_BYTES", "GcReport", "Progress", "Reader", "Seams", "Workspace"]

Reader = Callable[[Entry], bytes]
"""Returns the bytes of a captured file."""
PathArg = str | os.PathLike[str]  # a path given relative to the root, or absolute inside it


@dataclass(frozen=True, slots=True, kw_only=True)
class Seams:
    """The parts of a workspace a test or a benchmark may swap; the defaults are production's.

    Attributes:
        racy_margin_ns: how much older than a scan a file must be for its digest to be
            cached (`capture.RACY_MARGIN_NS`); a test sets 0 instead of sleeping.
        read_file, scan_tree: read and hash one file, walk the tree (`hash`, `scan`).
        last_capture: False: every plain capture walks (`lastcapture.py`; tests of a walk).
        prefetch: makes the read-ahead helper (`hash.Prefetch`).
        slow_read_seconds: mean read time per file above which reading ahead starts.
        apply_plan: carries out a plan (`apply.apply_plan`).
        open_store: opens the store directory (`diskstore.DiskStore`).
        watcher: makes a watched workspace's change source (`watch.Watcher`).
    """

    racy_margin_ns: int = RACY_MARGIN_NS
    read_file: ReadFile = read_file
    scan_tree: ScanTree = scan_tree
    last_capture: bool = True
    prefetch: Callable[[], Prefetch] = Prefetch
    slow_read_seconds: float = SLOW_READ_SECONDS
    apply_plan: ApplyPlan = apply_plan
    open_store: Callable[[str], DiskStore] = DiskStore
    watcher: Callable[[], Watcher] = Watcher


@api_errors
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
        max_file_bytes: int | None = None,
        exclude: tuple[str, ...] = (),
        force: bool = False,
        session: str = DEFAULT_SESSION,
        watch: bool = False,
        progress: Callable[[Progress], None] | None = None,
        seams: Seams | None = None,
    ) -> None:
        """Opens the workspace at `root` (nothing is written until the first snapshot).

        Args:
            root: the directory to snapshot.
            store: the store directory (default: the root's existing store, else
                `<git-dir>/worksnap` in a git work tree, else `<root>/.worksnap`;
                see `layout.store_location`).
            max_file_bytes: files larger than this are listed in `large`, not stored
                (default: the store's setting, see `set_config`, else 2 MiB).
            exclude: paths (relative to the root, or absolute inside it) never captured
                nor touched (a directory: everything below it), and .gitignore-style
                patterns (with `*`, `?` or `[`, or a name and `/`); the store's configured rules
                apply too, and each rule takes SQLite's `-wal`, `-shm`, `-journal`
                files with it (see `exclusion.py`).
            force: allow `/` or the home directory as a root.
            session: the session new snapshots belong to; list, rewind, undo and redo
                look only at it.
            watch: keep an inotify watch on every captured directory (Linux), so that
                a snapshot reads only the directories where something happened. For a
                long-lived object; see docs/performance.md for what it cannot see.
            progress: called now and then during long work.
            seams: parts to swap, for tests and benchmarks (default: none swapped).

        Raises:
            InputError: the root is missing, not a directory, `/` or home without
                `force`, its path is not valid UTF-8, or an exclusion lies outside the root.
        """
        seams = seams if seams is not None else Seams()
        self.root = real_root(root, force=force)
        if max_file_bytes is not None and max_file_bytes < 0:
            raise InputError("max_file_bytes must not be negative")
        self.store_dir = store_location(self.root, None if store is None else os.fspath(store))
        self._max_file_bytes = max_file_bytes
        self.warnings: builtins.list[str] = []
        """Problems the last snapshot met after it was stored (its retention); it stands."""
        self.session = check_session_name(session)
        self.problems: builtins.list[str] = []
        """One line for each damaged snapshot the last `list` skipped."""
        # Resolved once: every later access goes through the descriptor of this directory.
        real_store, self._taken = resolve_store(self.root, os.path.abspath(self.store_dir))
        self._store_rel = relative_to(self.root, real_store)
        self._exclude = tuple(exclude)
        self._reporter = Reporter(progress)
        self._seams, self._watch = seams, watch
        self.store = seams.open_store(real_store)
        files = self.store.files
        self.locks = Locks(files, on_wait=lambda note: self._reporter.notice("wait", note))
        self._wire(configured_exclusions(files))

    def _wire(self, configured: builtins.list[str]) -> None:
        """Builds the parts under the exclusion rules given and configured (again on a change)."""
        seams, files, locks = self._seams, self.store.files, self.locks
        self._configured = list(configured)
        self._root = exclusion_root(
            self.root, self._store_rel, self._exclude, configured, taken=self._taken
        )
        sessions = Sessions(files)
        caches = Caches(files, self.root, self.store.exists)
        watcher, cap = self._seams.watcher() if self._watch else None, self._max_file_bytes
        self._catalog = Catalog(self.store, self._root, sessions, locks=locks, lean=self._watch)
        self._capture = Capture(
            self._root,
            self.store,
            caches,
            max_file_bytes=DEFAULT_MAX_FILE_BYTES if cap is None else cap,
            watcher=watcher if watcher is not None and watcher.available else None,
            report=self._reporter,
            read_file=seams.read_file,
            scan_tree=seams.scan_tree,
            last_capture=seams.last_capture,
            prefetch=seams.prefetch,
            slow_read_seconds=seams.slow_read_seconds,
            racy_margin_ns=seams.racy_margin_ns,
            nodes=self._catalog.nodes,  # the trees it builds are those plans compare next
        )
        self._catalog.known = self._capture.subtree if self._watch else None
        self._restorer = Restorer(
            self._root,
            self.store,
            files=files,
            locks=self.locks,
            capture=self._capture,
            catalog=self._catalog,
            sessions=sessions,
            report=self._reporter,
            apply_plan=seams.apply_plan,
        )
        self._checkpoints = Checkpoints(
            self._root, self.store, files=files, locks=self.locks, capture=self._capture,
            catalog=self._catalog, sessions=sessions,
        )  # fmt: skip
        self._maintenance = Maintenance(
            self._root, self.store, files=files, locks=self.locks, catalog=self._catalog,
            sessions=sessions, caches=caches,
        )  # fmt: skip

    # -- the object ----------------------------------------------------------

    @property
    def progress(self) -> Callable[[Progress], None] | None:
        """Called now and then during long work; may be replaced between calls."""
        return self._reporter.callback

    @progress.setter
    def progress(self, callback: Callable[[Progress], None] | None) -> None:
        self._reporter.callback = callback

    @property
    def watching(self) -> bool:
        """True while an inotify watch is kept (asked for with `watch=True`, and available)."""
        return self._capture.watching

    @property
    def objects_added(self) -> int:
        """How many new objects this workspace has stored so far."""
        return self.store.added

    def audit(self, *, check: Callable[[], None] | None = None) -> builtins.list[str]:
        """A line per path the watcher missed (and its events): `Capture.audit`."""
        return self._capture.audit(check=check)

    def use(self, *, session: str, progress: Callable[[Progress], None] | None) -> None:
        """Points a long-lived workspace at another session and progress callback."""
        self.session = check_session_name(session)
        self.progress = progress

    def view(self, *, session: str, progress: Callable[[Progress], None] | None) -> Workspace:
        """This engine with its own session, progress and `problems` (a reading thread's)."""
        view = copy.copy(self)
        view.session, view._reporter = check_session_name(session), Reporter(progress)
        return view

    def close(self) -> None:
        """Stores the caches, releases open files and the watcher; may be used again after."""
        self._capture.close()
        self.store.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- settings ------------------------------------------------------------

    @property
    def max_file_bytes(self) -> int:
        """The size cap of new snapshots: the one given, else the store's, else 2 MiB."""
        return self._settings()[1]

    def _settings(self) -> tuple[Config, int]:
        """Reads the store's config (InputError if invalid) and sets the capture's cap."""
        config = load_config(self.store.files)
        if config.exclude != self._configured:  # `worksnap config exclude` since we opened
            self._capture.close()
            self._wire(config.exclude)
        cap = config.cap() if self._max_file_bytes is None else self._max_file_bytes
        self._capture.max_file_bytes = DEFAULT_MAX_FILE_BYTES if cap is None else cap
        return config, self._capture.max_file_bytes

    def config(self) -> Config:
        """Returns the store's settings (the defaults when it has none)."""
        return load_config(self.store.files)

    def set_config(self, key: str, value: str) -> Config:
        """Sets one setting (`config.SETTINGS`) as a person types it (`64M`, `30d`, `none`)."""
        return self.change_config(lambda config: settings.with_setting(config, key, value))

    def change_config(self, change: Callable[[Config], Config]) -> Config:
        """Saves the settings `change` makes of the store's (creating it); returns them."""
        change(self.config()).check()  # bad input leaves no store behind (exit 2: nothing changed)
        self.store.bind(self.root)
        with self.locks.exclusive("config"):
            return settings.save_config(self.store.files, change(self.config()))

    # -- snapshot ------------------------------------------------------------

    def capture(self, *, store_objects: bool) -> Manifest:
        """Records the workspace's current state as an unsaved manifest (kind "current").

        `store_objects`: also store every file's bytes (what a snapshot does); without it
        only digests are computed, and nothing is written except the caches.
        """
        self._settings()
        return self._capture.capture(store_objects=store_objects)

    def snapshot(
        self,
        *,
        kind: str = "manual",
        step: int | None = None,
        label: str | None = None,
        meta: dict[str, str] | None = None,
        attach: dict[str, bytes] | None = None,
        automatic: bool = False,
    ) -> Manifest:
        """Captures the whole workspace and stores it as a new snapshot of this session.

        Every call records a new snapshot with its own id, even when nothing changed (then
        no new object is written), and clears the session's redo stack (unless undo or redo
        took it). An invalid store config refuses it before anything is stored; if the
        configured retention fails after it, the snapshot stands and `warnings` says why.

        Args:
            kind: what the snapshot is for (`manual`, `step`, ...); not one of the
                kinds worksnap gives its own snapshots (`history.check_kind`).
            automatic: one `worksnap run` takes: a kind in `history.RUN_KINDS` is allowed.
            step: the agent step it belongs to.
            label: a short label; its first line is kept, at most 200 bytes.
            meta: small string metadata (e.g. a conversation cut point).
            attach: named attachments (e.g. `messages.json`), stored content-addressed.

        Raises:
            SnapshotError: a file could not be read or the store not written.
            InputError: a reserved kind, a bad step, an invalid config.
        """
        check_step(step)
        check_meta(meta)
        check_kind(kind, automatic=automatic)
        config, _ = self._settings()
        self.warnings = []
        self._restorer.recover_if_interrupted(self.session)
        try:
            self.store.bind(self.root)
            with self.locks.shared("snapshot"):
                try:
                    current = self._capture.capture(store_objects=True)
                    manifest = msgspec.structs.replace(
                        current,
                        kind=kind,
                        step=step,
                        label=one_line(label),
                        session=self.session,
                        meta=dict(meta or {}),
                        attachments=self._catalog.store_attachments(attach),
                    )
                    trees = self._capture.trees.stored(current)  # none to build again
                    manifest = self._catalog.save(manifest, self.session, built=trees)
                except BaseException:
                    self.store.discard()  # a full disk must not stay full of a half pack
                    raise
                self.store.sweep_abandoned()  # packs of snapshots killed before publishing
                self._capture.last.keep()  # under the lock: no sweep since the save
        except OSError as exc:
            raise SnapshotError.unwritable(self.store_dir, exc) from None
        try:
            self._maintenance.apply_configured_retention(config.retention, self.warnings.append)
        except (WorksnapError, OSError) as exc:
            self.warnings.append(f"the configured retention did not run: {exc}")
        try:
            self._maintenance.merge_packs_if_many()
        except (WorksnapError, OSError) as exc:
            self.warnings.append(f"the small packs were not merged: {exc}")
        return manifest

    def large_files(self, manifest: Manifest) -> builtins.list[tuple[str, int | None]]:
        """Returns the files `manifest` left out as large, largest first, with their size now."""
        sizes: builtins.list[tuple[str, int | None]] = []
        for path in manifest.large:
            try:
                size: int | None = os.lstat(self._disk_path(path)).st_size
            except OSError:
                size = None
            sizes.append((path, size))
        return sorted(sizes, key=lambda item: (-(item[1] or 0), item[0]))

    def selection(self, paths: Iterable[str | os.PathLike[str]]) -> builtins.list[str] | None:
        """Returns paths (relative to the root, or absolute inside it) in wire form.

        None (the whole tree) when one of them is the root itself (`paths.Root.selection`).
        """
        return self._root.selection(paths, named=False)

    def _disk_path(self, rel: str) -> str:
        return os.path.join(self.root, os.fsdecode(fs_path(rel)))

    # -- reading snapshots ---------------------------------------------------

    def list(self, *, all_sessions: bool = False) -> builtins.list[Summary]:
        """Returns this session's (or every session's) snapshots, newest first; see `problems`."""
        summaries, self.problems = self._catalog.listing(None if all_sessions else self.session)
        return summaries

    def resolve(self, ref: str) -> str:
        """Returns the snapshot id a ref names (see `catalog.Catalog.resolve`).

        A full id, a unique id prefix of 4+ characters, `latest` (the newest snapshot not
        taken automatically), `latest~N`, or `step:N`; all but ids within this session.
        InputError: the ref names no snapshot, or more than one.
        """
        return self._catalog.resolve(ref, self.session)

    def load(self, ref: str) -> Manifest:
        """Loads and checks a snapshot: it must be intact, safe, and of this root.

        Raises:
            InputError: unknown ref; ManifestError: unreadable, hostile or for another root.
        """
        return self._catalog.load(ref, self.session)

    def show_bytes(self, ref: str) -> bytes:
        """Returns a snapshot's flat manifest JSON, what `show --json` prints (after `load`)."""
        return self._catalog.show_bytes(ref, self.session)

    def total_bytes(self, manifest: Manifest) -> int:
        """The bytes of a snapshot's files, summed once per root tree (`Catalog.total_bytes`)."""
        return self._catalog.total_bytes(manifest)

    def pinned(self) -> set[str]:
        """Returns the ids of the pinned snapshots."""
        return self.store.pins() if self.store.exists() else set()

    def file_bytes(self, ref: str, path: str | os.PathLike[str]) -> tuple[Entry, bytes]:
        """Returns a file (or symlink) of a snapshot and its bytes (a symlink: its target).

        Raises:
            InputError: the snapshot holds no file or symlink at `path`.
        """
        entry = self._catalog.entry(ref, self._root.inside(path, "path"), self.session)
        if entry.type == "symlink":
            return entry, fs_path(entry.target or "")
        return entry, self.store.read(entry.hash or "")

    def verify(self, ref: str | None = None, *, repair: bool = False) -> builtins.list[str]:
        """Checks every object (trees too) the snapshot or all need; a line per problem found."""
        if not os.path.isdir(self.store_dir):  # never "intact" where none is (a `--store` typo)
            raise InputError(f"no store at {self.store_dir}: nothing to verify (none made yet)")
        where, report = self._maintenance.record_file, self._reporter
        return self._catalog.verify(ref, self.session, report=report, repair=repair, where=where)

    def attachment(self, ref: str, name: str) -> bytes:
        """Returns the bytes of a snapshot's named attachment."""
        return self._catalog.attachment(ref, name, self.session)

    def diff(
        self, ref: str = "latest", ref2: str | None = None, *, now: Manifest | None = None
    ) -> tuple[builtins.list[FileChange], Reader]:
        """Changes from `ref` to `ref2`, or to the tree now (`now`) that restoring `ref` undoes."""
        from worksnap.diff import compare, compare_trees, restored  # difflib: only `diff`'s

        def read(entry: Entry) -> bytes:
            if entry.hash is None:
                return b""
            try:
                return self.store.read(entry.hash)
            except ObjectError:  # not stored: a capture of the tree now
                if self.store.has(entry.hash):
                    raise  # stored, but damaged: never the file on disk in its place
            with open(self._disk_path(entry.path), "rb") as f:
                return f.read()

        if (trees := self._catalog.root_trees(ref, ref2, self.session)) is not None:
            return compare_trees(*trees, self.store.read), read  # skips equal subtrees
        if ref2 is None:
            now = now or self.capture(store_objects=False)
            return restored(self.plan_restore(self.load(ref), now=now)), read
        return compare(*self._catalog.whole(self.load(ref), self.load(ref2))), read

    # -- restore -------------------------------------------------------------

    def plan_restore(
        self, target: Manifest, *, paths: Sequence[PathArg] | None = None,
        to: PathArg | None = None, now: Manifest | None = None,
    ) -> Plan:  # fmt: skip
        """Previews what restoring `target` would change; writes nothing but the stat cache.

        For a checkpoint, the target is every path captured in it or in a later
        checkpoint of its session, at its earliest before-image; nothing else.
        `Plan.unprotected` lists the large files the restore leaves as they are.

        Args:
            target: the snapshot to restore.
            paths: restore only these paths (relative to the root, or absolute inside
                it) and what lies below them.
            to: preview `restore_to(target, to)`: what it writes (every change `D`),
                refusing what it refuses (`extract.plan_extract`).
            now: the tree to compare with (a `capture`): then never refused, as `diff` is not.

        Raises:
            InputError: a path that neither the target nor the workspace has.
        """
        if to is not None:
            return plan_extract(target, os.fspath(to), root=self._root, store_dir=self.store_dir,
                                paths=paths)[0]  # fmt: skip
        self._settings()
        return self._restorer.plan(target, paths=paths, session=self.session, current=now)

    def restore(self, ref: str, *, paths: Sequence[str | os.PathLike[str]] | None = None) -> Result:
        """Restores the snapshot `ref` names (only `paths` and below), as `apply` does.

        The state captured for the pre-restore snapshot is the one planned from, so the
        tree is walked once, with at least the target's size cap: every file the target
        holds is restored, and kept for `undo`.
        """
        self._settings()
        return self._restorer.restore(ref, paths=paths, session=self.session)

    def restore_to(
        self, ref: str, directory: PathArg, *, paths: Sequence[PathArg] | None = None
    ) -> Result:
        """Writes snapshot `ref` into `directory`, touching nothing in the workspace.

        `directory` must be new (its parent existing) or empty (then filled in place),
        outside the root and the store; a failure leaves nothing there (`extract.extract`).
        """
        return extract(
            self.load(ref),
            os.fspath(directory),
            root=self._root,
            store_dir=self.store_dir,
            read_object=self.store.read_chunks,
            paths=paths,
            progress=lambda done, total: self._reporter("write", done, total),
        )

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
        self._settings()
        return self._restorer.apply(plan, kind=kind, session=self.session)

    def plan_recover(self) -> Plan | None:
        """Previews what `recover` would change (None: no restore was interrupted)."""
        return self._restorer.plan_recover(self.session)

    def recover(self, *, discard: bool = False) -> Result | None:
        """Sets back what an interrupted restore touched, the tree kept first (`discard`: not)."""
        return self._restorer.recover(self.session, discard=discard)

    def recovery_pending(self) -> str | None:
        """One line: an interrupted restore awaits `recover` (or one runs elsewhere); or None."""
        return self._restorer.pending()

    # -- steps, undo and redo ------------------------------------------------

    def rewind(self, step: int) -> Result:
        """Restores the newest snapshot (or checkpoint) of this session taken at `step`."""
        return self.restore(f"step:{step}")

    def plan_undo(self) -> Plan:
        """Previews what `undo` would change (pass it to `undo` to apply just that plan)."""
        self._settings()
        return self._restorer.plan_undo(self.session)

    def undo(self, plan: Plan | None = None) -> Result:
        """Restores the newest snapshot of this session whose state differs from the current one.

        Right after a restore that is its pre-restore snapshot (so undo reverses
        the restore); otherwise it discards the edits made since the last
        snapshot. The state undo leaves is kept for `redo`; repeated undo walks
        further back. With `plan` (from `plan_undo`), applies exactly that plan.

        Raises:
            InputError: there is nothing to undo, or it would now go elsewhere than `plan`.
            ConflictError: a path `plan` touches changed since it was made.
        """
        self._settings()
        return self._restorer.undo(self.session, expected=plan)

    def plan_redo(self) -> Plan:
        """Previews what `redo` would change (pass it to `redo` to apply just that plan)."""
        self._settings()
        return self._restorer.plan_redo(self.session)

    def redo(self, plan: Plan | None = None) -> Result:
        """Re-applies what the last `undo` undid (the state it left).

        With `plan` (from `plan_redo`), applies exactly that plan.

        Raises:
            InputError: nothing was undone, or a new snapshot cleared the redo stack.
            ConflictError: a path `plan` touches changed since it was made.
        """
        self._settings()
        return self._restorer.redo(self.session, expected=plan)

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
        self._settings()  # the store's size cap, which the checkpoint records
        return self._checkpoints.begin(
            step=step, label=label, meta=meta, attach=attach, session=self.session
        )

    def capture_before(self, paths: Iterable[str | os.PathLike[str]]) -> Manifest:
        """Records the before-image of each named file in the open checkpoint.

        The first capture of a path in a checkpoint wins; a file that does not exist is recorded as
        absent (a rewind removes it). Costs what the named files cost, never a tree scan.

        Raises:
            InputError: no checkpoint is open, or a path is outside the root,
                inside `.git` or the store, or a directory.
        """
        self._settings()
        return self._checkpoints.capture_before(paths, self.session)

    # -- retention -----------------------------------------------------------

    def pin(self, ref: str, *, pinned: bool = True) -> str:
        """Pins a snapshot so gc never drops it (or unpins it); returns its id."""
        return self._maintenance.pin(ref, pinned=pinned, session=self.session)

    def gc(
        self,
        policy: Retention | None = None,
        *,
        wait: bool = True,
        drop_session: str | None = None,
        everything: bool = False,
        dry_run: bool = False,
        drop: Sequence[str] = (),
    ) -> GcReport:
        """Drops the snapshots a retention policy expires and sweeps unreferenced objects.

        See `retention.select_expired` for what is kept; `GcReport.unswept` for a damaged
        snapshot that stays. Safe while others snapshot: it waits for them, they for it.

        Args:
            policy: the limits; None uses the store's configured retention.
            wait: wait for the store lock (False: give up at once if it is busy).
            drop_session: also drop this session's unpinned snapshots and undo/redo state.
            everything: a `keep_last` of 0 drops each session's newest too.
            dry_run: only report what would go.
            drop: refs of snapshots to drop too, pinned or not, readable or not.

        Raises:
            InputError (nothing removed): no `drop_session`, a tree unreadable, a recovery's named.
        """
        ids = frozenset(self.resolve(ref) for ref in drop)
        return self._maintenance.gc(policy, wait=wait, drop_session=drop_session,
                                    everything=everything, dry_run=dry_run, drop=ids)  # fmt: skip

    def drop(self, snapshot_id: str) -> None:
        """Removes one snapshot at once (its objects go at the next gc)."""
        self._maintenance.drop(self.resolve(snapshot_id))

    def configured_retention(self) -> Retention:
        """Returns the retention policy in the store's config (none when absent)."""
        return self._maintenance.configured_retention()

    def du(self) -> dict[str, tuple[int, int]]:
        """Returns, per session, (snapshots, bytes of the distinct objects they reference)."""
        return self._maintenance.du()

    def store_size(self) -> int:
        """Returns the bytes the store takes on disk (0 before the first snapshot)."""
        return self._maintenance.store_size()

    def upgrade(self, *, dry_run: bool = False) -> UpgradeReport:
        """Migrates a format 1 store in place (each write command does it first; migration.py)."""
        return self._catalog.upgrade(dry_run=dry_run, report=self._reporter)

    # -- moving workspaces ---------------------------------------------------

    def rebind(self) -> int:
        """Binds the store to this root (after the project moved); returns snapshots rebound.

        Every manifest's `root` is rewritten; the stat cache is dropped.
        """
        return self._maintenance.rebind()
