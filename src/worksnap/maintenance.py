"""Maintenance: pins, garbage collection and its configured retention, disk use, rebinding.

gc is mark and sweep under the exclusive lock: every snapshot that stays is read
before anything is removed, then the dropped snapshots go, then every object no remaining
snapshot needs. While the record of one that stays is unreadable, what it needs is
unknown: no object is removed, and the report names it and the command that drops it
(`gc --drop ID`); an unreadable tree object stops the gc with nothing removed. Marking
walks the trees of all remaining snapshots at once (`treewalk.reachable`): a tree object
many snapshots share is read once.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from datetime import datetime, timezone

import msgspec

from worksnap.caches import Caches
from worksnap.catalog import Catalog
from worksnap.config import Retention, load_config
from worksnap.errors import (
    FileSystemError,
    InputError,
    LockError,
    ManifestError,
    ObjectError,
    SweepStopped,
)
from worksnap.history import Sessions, SessionState, check_session_name
from worksnap.journal import journal_snapshots
from worksnap.layout import store_location
from worksnap.lock import Locks
from worksnap.manifest import Summary
from worksnap.paths import Digest, Root
from worksnap.record import loose_of
from worksnap.retention import select_expired
from worksnap.store import Store
from worksnap.storedir import StoreDir
from worksnap.treewalk import flatten, reachable
from worksnap.verifying import drop_advice

AUTO_MERGE = 50
"""A snapshot merges the small packs once there are more than this many (git's
`gc.autoPackLimit`): each snapshot that stores something writes a pack, and every new
process reads every pack's index (benchmarks/many_packs.py)."""

_NAMED = 10
"""How many sessions the error for a session that does not exist names."""


class GcReport(msgspec.Struct, frozen=True):
    """What a garbage collection removed (or, for a dry run, would remove).

    Attributes:
        snapshots: how many snapshots were dropped.
        objects: how many objects were deleted: those only dropped snapshots needed,
            and leftovers no snapshot ever named.
        bytes: the bytes that freed: the objects' stored (compressed) bytes, and the
            files of writes killed part-way. A dry run counts the run's own plan
            (`Store.sweep`), so its three numbers are those the run then reports,
            unless the store changes in between.
        dropped: the ids of the snapshots dropped, newest first.
        dry_run: nothing was removed.
        estimate: a dry run's objects and bytes are about, not the run's: the store
            holds format 1 snapshots, which gc migrates first, writing their trees, and
            the trees it writes for dropped snapshots go too, uncounted here.
        unswept: why no object was removed (None when the sweep ran): a snapshot that
            stays is unreadable, so what it needs is unknown; the line names it and the
            command that drops it.
    """

    snapshots: int = 0
    objects: int = 0
    bytes: int = 0
    dropped: tuple[str, ...] = ()
    dry_run: bool = False
    estimate: bool = False
    unswept: str | None = None


class Maintenance:
    """Keeping one store in shape: what to keep, what to drop, where it belongs."""

    def __init__(
        self,
        root: Root,
        store: Store,
        *,
        files: StoreDir,
        locks: Locks,
        catalog: Catalog,
        sessions: Sessions,
        caches: Caches,
    ) -> None:
        self._root = root
        self._store = store
        self._files = files
        self._locks = locks
        self._paths = files.paths
        self._catalog = catalog
        self._sessions = sessions
        self._caches = caches

    def pin(self, ref: str, *, pinned: bool, session: str) -> str:
        """Pins a snapshot so gc never drops it (or unpins it); returns its id."""
        snapshot_id = self._catalog.resolve(ref, session)
        self._store.bind(self._root.path)
        self._catalog.upgrade_if_needed()
        with self._locks.exclusive("pin"):
            pins = self._store.pins()
            if pinned:
                pins.add(snapshot_id)
            else:
                pins.discard(snapshot_id)
            self._store.set_pins(pins)
        return snapshot_id

    def configured_retention(self) -> Retention:
        """Returns the retention policy in the store's config (none when absent)."""
        return load_config(self._files).retention

    def gc(
        self,
        policy: Retention | None,
        *,
        wait: bool,
        drop_session: str | None,
        everything: bool = False,
        dry_run: bool = False,
        drop: frozenset[str] = frozenset(),
    ) -> GcReport:
        """Drops what a retention policy expires and sweeps unreferenced objects.

        See `Workspace.gc`. `drop`: ids of snapshots to drop too, pinned or not,
        readable or not (the way past a damaged one).

        Raises:
            ManifestError: a tree object is unreadable, so what the snapshots need is
                unknown; nothing was removed.
            InputError: `drop_session` names no session of the store; nothing was removed.
        """
        policy = policy if policy is not None else self.configured_retention()
        if drop_session is not None:
            check_session_name(drop_session)
        if not self._store.exists():
            if drop_session is not None:
                self._known_session(drop_session, [])
            return GcReport(dry_run=dry_run)
        if not dry_run:
            self._upgrade_unless_full()
        timeout = 60.0 if wait else 0.0
        with (
            self._locks.shared("gc --dry-run", timeout=timeout)
            if dry_run
            else self._locks.exclusive("gc", timeout=timeout)
        ):
            summaries, _ = self._store.summaries()
            if drop_session is not None:
                self._known_session(drop_session, summaries)
            pins = self._store.pins()
            keep = pins | self._sessions.referenced(without=drop_session)
            # A pending recovery rolls back to its pre-restore snapshot: it must stay, also
            # when named (a review: `--drop` of it left only `recover --discard`).
            pending = journal_snapshots(self._files)
            keep |= pending
            named = pending & {*drop, *(s.id for s in summaries if s.session == drop_session)}
            if named:
                raise InputError(
                    f"snapshot {min(named)} is needed by an interrupted restore (to recover): run "
                    "`worksnap recover` first (or `worksnap recover --discard`); nothing removed"
                )
            dropped = select_expired(
                summaries,
                policy,
                keep=keep,
                now=datetime.now(timezone.utc),
                object_sizes=self.object_sizes,
                everything=everything,
            )
            dropped += [
                s.id
                for s in summaries
                if s.session == drop_session and s.id not in pins and s.id not in dropped
            ]
            dropped += sorted(drop.difference(dropped))
            order = {s.id: (s.time, s.id) for s in summaries}
            dropped.sort(key=lambda i: order.get(i, ("", i)), reverse=True)
            # Before anything is removed: an unreadable snapshot that stays stops the sweep.
            live, damaged = self.live_objects(set(self._store.ids()) - set(dropped))
            if not dry_run:  # first: it refuses a `dropped` that is no file, changing nothing
                self._store.note_dropped(dropped)  # (and a pull must not bring them back)
            if drop_session is not None and not dry_run:
                self._sessions.save(check_session_name(drop_session), SessionState())
            if drop & pins and not dry_run:
                self._store.set_pins(pins - drop)
            for snapshot_id in dropped if not dry_run else ():
                self._store.delete_snapshot(snapshot_id)
            unswept = self._unswept(damaged) if damaged else None
            try:
                if unswept is not None:
                    removed, freed_bytes = 0, 0  # the snapshots only: never what it may need
                else:
                    # A dry run counts the same sweep's plan: its numbers are the run's.
                    removed, freed_bytes = self._store.sweep(live, merge=True, dry_run=dry_run)
            except SweepStopped as stop:
                if stop.left_bytes:  # (else only small packs stay unmerged: an economy)
                    raise FileSystemError(self._files.path, _stopped(stop, len(dropped))) from None
                removed, freed_bytes = stop.removed, stop.freed
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # A review found only "No space left on device" here, naming nothing.
                raise FileSystemError(
                    self._files.path,
                    f"{exc.strerror}: {_plural(len(dropped), 'snapshot')} dropped, nothing "
                    "freed yet; free some space and run `worksnap gc` again",
                ) from None
        if not dry_run:
            self._catalog.forget_last()
        return GcReport(
            snapshots=len(dropped),
            objects=removed,
            bytes=freed_bytes,
            dropped=tuple(dropped),
            dry_run=dry_run,
            estimate=dry_run and bool(self._store.legacy_ids()),
            unswept=unswept,
        )

    def _upgrade_unless_full(self) -> None:
        """Migrates a format 1 store first, unless the disk is too full for its trees.

        A review found `gc` of a format 1 store on a full disk freeing nothing: the
        migration it ran first failed writing a record. A migration stopped anywhere
        leaves a store every command reads (migration.py; format 1 snapshots stay
        format 1), and gc marks format 1 manifests as they are (`live_objects`), as
        its dry run does: so gc goes on, making room, and the next command migrates.
        """
        try:
            self._catalog.upgrade_if_needed()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self._store.discard()  # the pack of trees it was writing, if any

    def _unswept(self, damaged: dict[str, str]) -> str:
        """Why a gc removed no object: the first damaged snapshot, and how to drop it."""
        first = min(damaged)
        more = f" (and {len(damaged) - 1} more: see `worksnap verify`)" if len(damaged) > 1 else ""
        return (
            f"removed no object: snapshot {first} is unreadable "
            f"({damaged[first]}){more}, so what it needs is unknown; "
            + drop_advice(first, self.record_file(first))
        )

    def record_file(self, snapshot_id: str) -> str:
        """The file that holds a snapshot: its record, or a format 1 store's manifest."""
        record, manifest = self._paths.record(snapshot_id), self._paths.manifest(snapshot_id)
        return manifest if not os.path.lexists(record) and os.path.lexists(manifest) else record

    def drop(self, snapshot_id: str) -> None:
        """Removes one snapshot now (its objects stay until the next gc sweeps them)."""
        self._catalog.upgrade_if_needed()
        with self._locks.exclusive("drop"):
            self._store.note_dropped([snapshot_id])
            self._store.delete_snapshot(snapshot_id)
        self._catalog.forget_last()

    def apply_configured_retention(self, policy: Retention, warn: Callable[[str], None]) -> None:
        """Runs the configured retention after a snapshot, unless another process is busy.

        `warn` is told when it removed no object (a damaged snapshot: `GcReport.unswept`).
        """
        if policy.is_empty():
            return
        try:
            report = self.gc(policy, wait=False, drop_session=None)
        except LockError:
            return  # another process holds the store; the next snapshot will try again
        if report.unswept is not None:
            warn(f"the configured retention {report.unswept}")

    def _known_session(self, name: str, summaries: list[Summary]) -> None:
        """Refuses a session with no snapshot and no state (a typo), naming those there are."""
        names = sorted({s.session for s in summaries})
        state = self._sessions.load(name)
        if name in names or state.redo or state.checkpoint is not None:
            return
        shown = ", ".join(n if n.isprintable() else repr(n) for n in names[:_NAMED])
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        raise InputError(
            f"no session {name!r} in this store; "
            + (f"its sessions: {shown}{more}" if names else "it has no snapshots")
        )

    def merge_packs_if_many(self) -> None:
        """Merges the small packs once there are more than `AUTO_MERGE`.

        Unless another process is busy: the next snapshot tries again. Nothing is
        removed (`DiskStore.sweep` with no `live` set).
        """
        if self._store.pack_count() <= AUTO_MERGE:
            return
        try:
            with self._locks.exclusive("merge packs", timeout=0.0):
                self._store.sweep(None, merge=True)
        except LockError:
            pass  # another process holds the store; the next snapshot will try again

    def live_objects(self, snapshot_ids: set[str]) -> tuple[set[str], dict[str, str]]:
        """Returns every object the snapshots need (trees, file contents, attachments).

        And, by id, why the record (or format 1 manifest) of each snapshot that has an
        unreadable one is: what that snapshot needs is unknown, so while there is one,
        no object may be removed; dropping it (`gc --drop`) is the way past it.

        Raises:
            ManifestError: a tree object is unreadable or hostile (or a pack index that
                finds it), so what the snapshots need is unknown: no snapshot's fault
                to drop it for.
        """
        live: set[str] = set()
        damaged: dict[str, str] = {}
        roots: list[Digest] = []
        for snapshot_id in sorted(snapshot_ids):
            try:
                record = self._store.load_record(snapshot_id)
                if record is None:
                    manifest = self._store.load_manifest(snapshot_id)
                    live.update(e.hash for e in manifest.entries if e.hash)
                    live.update(manifest.attachments.values())
                    continue
            except ManifestError as exc:
                damaged[snapshot_id] = str(exc)
                continue
            if record.id != snapshot_id:
                damaged[snapshot_id] = f"its file holds snapshot {record.id!r}"
                continue
            roots.append(Digest(record.tree))
            live.update(record.attachments.values())
        try:
            live.update(reachable(roots, self._store.read))
        except ObjectError as exc:
            why = (
                f"{exc.reason}; nothing removed (`worksnap verify` names the snapshots needing it)"
            )
            raise ManifestError(f"tree {exc.digest}", why) from None
        return live, damaged

    def object_sizes(self, snapshot_id: str) -> dict[str, int]:
        """Returns {digest: size} of every object a snapshot needs (trees, attachments too)."""
        record = self._store.load_record(snapshot_id)
        if record is None:
            manifest = self._store.load_manifest(snapshot_id)
            sizes = {e.hash: e.size or 0 for e in manifest.entries if e.hash}
            attachments = manifest.attachments
        else:
            sizes = {}

            def read(digest: Digest) -> bytes:
                data = self._store.read(digest)
                sizes[digest] = len(data)
                return data

            try:
                flat = flatten(Digest(record.tree), read, loose=loose_of(record))
            except ObjectError as exc:
                raise ManifestError(snapshot_id, f"tree {exc.digest} {exc.reason}") from None
            sizes.update((e.hash, e.size or 0) for e in flat.entries if e.hash)
            attachments = record.attachments
        for digest in attachments.values():
            sizes.setdefault(digest, 0)
        return sizes

    def du(self) -> dict[str, tuple[int, int]]:
        """Returns, per session, (snapshots, bytes of the distinct objects they reference)."""
        per_session: dict[str, tuple[int, dict[str, int]]] = {}
        summaries, _ = self._store.summaries()
        for summary in summaries:
            count, objects = per_session.get(summary.session, (0, {}))
            try:
                objects.update(self.object_sizes(summary.id))
            except ManifestError:
                pass  # damaged: counted, not sized (verify reports it)
            per_session[summary.session] = (count + 1, objects)
        return {
            session: (count, sum(objects.values()))
            for session, (count, objects) in sorted(per_session.items())
        }

    def store_size(self) -> int:
        """Returns the bytes the store takes (0 before it is created)."""
        return self._store.size() if self._store.exists() else 0

    def rebind(self) -> int:
        """Binds the store to this root (after the project moved); returns snapshots rebound.

        Every manifest's `root` is rewritten; the caches are dropped.
        """
        if not self._store.exists():
            raise InputError(f"no store at {self._paths.dir} to rebind")
        bound = self._store.bound()
        if (
            bound is not None
            and bound != self._root.path
            and os.path.isdir(bound)
            and store_location(bound, None) == self._paths.dir
        ):
            # A review was told to rebind from the wrong directory (another project's
            # store named by $WORKSNAP_STORE), and took that project's store away from it.
            raise InputError(
                f"store {self._paths.dir} is the store of {bound}, which is still there: "
                "run worksnap inside it (rebind is for a project that moved; a copy of a "
                "project has its own store)"
            )
        self._catalog.upgrade_if_needed()
        with self._locks.exclusive("rebind"):
            count = 0
            for snapshot_id in self._store.ids():
                try:
                    record = self._store.load_record(snapshot_id)
                except ManifestError:
                    continue  # left as it is; verify and list report it
                if record is not None:
                    if record.id == snapshot_id and record.root != self._root.wire:
                        self._store.save_record(
                            msgspec.structs.replace(record, root=self._root.wire)
                        )
                        count += 1
                    continue
                try:
                    manifest = self._store.load_manifest(snapshot_id)
                except ManifestError:
                    continue  # left as it is; verify and list report it
                if manifest.id != snapshot_id:
                    continue  # misfiled: rewriting it would overwrite the snapshot it names
                if manifest.root != self._root.wire:
                    moved = msgspec.structs.replace(manifest, root=self._root.wire)
                    self._store.replace_manifest(moved)
                    count += 1
            self._store.rebind(self._root.path)
            self._caches.drop()
        return count


def _plural(count: int, word: str) -> str:
    """`1 snapshot`, `3 snapshots`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _stopped(stop: SweepStopped, dropped: int) -> str:
    """What a gc stopped by a full disk did, and what is left to do, in one line."""
    freed = (
        f"freed {stop.freed:,} bytes ({_plural(stop.removed, 'object')} no kept snapshot "
        "needs, in files and packs of their own)"
        if stop.freed
        else "freed nothing yet"
    )
    if not stop.left:
        return (
            f"{stop.reason}: {_plural(dropped, 'snapshot')} dropped, {freed}; "
            "free some space and run `worksnap gc` again"
        )
    return (
        f"{stop.reason}: {_plural(dropped, 'snapshot')} dropped, {freed}; "
        f"{stop.left_bytes:,} bytes more stay in {_plural(stop.left, 'pack')} that also "
        "hold kept objects, until those are written anew (before the old go, so a kill "
        f"loses nothing), which takes about {stop.needed:,} bytes: free some space and "
        "run `worksnap gc` again"
    )
