"""Maintenance: pins, garbage collection and its configured retention, disk use, rebinding.

gc is mark and sweep under the exclusive lock: every manifest that stays is read
before anything is removed (an unreadable one stops the gc with nothing removed),
then the dropped snapshots go, then every object no remaining snapshot needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from worksnap.caches import Caches
from worksnap.catalog import Catalog
from worksnap.config import Retention, load_config
from worksnap.errors import InputError, LockError, ManifestError
from worksnap.history import Sessions, SessionState, check_session_name
from worksnap.lock import Locks
from worksnap.paths import Root
from worksnap.retention import select_expired
from worksnap.store import Store
from worksnap.storedir import StoreDir
from worksnap.transaction import journal_snapshots


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a garbage collection removed."""

    snapshots: int = 0
    objects: int = 0
    bytes: int = 0


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

    def gc(self, policy: Retention | None, *, wait: bool, drop_session: str | None) -> GcReport:
        """Drops what a retention policy expires and sweeps unreferenced objects.

        See `Workspace.gc`.

        Raises:
            ManifestError: a manifest is unreadable, so what it needs is unknown;
                nothing was removed.
        """
        policy = policy if policy is not None else self.configured_retention()
        if not self._store.exists():
            return GcReport()
        with self._locks.exclusive("gc", timeout=60.0 if wait else 0.0):
            summaries, _ = self._store.summaries()
            pins = self._store.pins()
            if drop_session is not None:
                self._sessions.save(check_session_name(drop_session), SessionState())
            # A pending recovery rolls back to its pre-restore snapshot: it must stay.
            keep = pins | self._sessions.referenced() | journal_snapshots(self._files)
            dropped = select_expired(
                summaries,
                policy,
                keep=keep,
                now=datetime.now(timezone.utc),
                object_sizes=self.object_sizes,
            )
            dropped += [
                s.id
                for s in summaries
                if s.session == drop_session and s.id not in pins and s.id not in dropped
            ]
            live: set[str] = set()
            for snapshot_id in set(self._store.ids()) - set(dropped):
                # Before anything is removed: an unreadable manifest stops the gc here.
                live.update(self.object_sizes(snapshot_id))
            for snapshot_id in dropped:
                self._store.delete_snapshot(snapshot_id)
            removed, freed = self._store.sweep(live)
        self._catalog.forget_last()
        return GcReport(snapshots=len(dropped), objects=removed, bytes=freed)

    def apply_configured_retention(self) -> None:
        """Runs the configured retention after a snapshot, unless another process is busy."""
        policy = self.configured_retention()
        if policy.is_empty():
            return
        try:
            self.gc(policy, wait=False, drop_session=None)
        except LockError:
            pass  # another process holds the store; the next snapshot will try again

    def object_sizes(self, snapshot_id: str) -> dict[str, int]:
        """Returns {digest: size} of every object a snapshot needs (its attachments included)."""
        manifest = self._store.load_manifest(snapshot_id)
        sizes = {e.hash: e.size or 0 for e in manifest.entries if e.hash}
        for digest in manifest.attachments.values():
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
        with self._locks.exclusive("rebind"):
            count = 0
            for snapshot_id in self._store.ids():
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
