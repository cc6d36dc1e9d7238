"""Migration: a format 1 store turned into format 2 in place, one snapshot at a time.

For each snapshot that still has a format 1 manifest, in id order:

1. its manifest is read and checked (a damaged or hostile one is left as it is, and
   reported: it stays refused as before, and the next migration tries it again);
2. its trees are built (`treebuild.from_flat`) and written as objects, and flushed;
3. its record is written (atomically: temp file, fsync, rename);
4. its format 1 summary, then its manifest, are deleted.

A kill -9 anywhere leaves a store every command reads correctly: before step 3 the
snapshot is still format 1 (unpublished tree objects are swept by gc like any pack a
writer left); after it, the record wins over a manifest of the same id, and the next
migration only deletes what is left of format 1. Nothing is ever rewritten in place.

Run under the store's exclusive lock (`Workspace.upgrade`, and the first command that
writes), so no snapshot is written or dropped meanwhile.
"""

from __future__ import annotations

import os
import signal

import msgspec

from worksnap.errors import InputError, ManifestError
from worksnap.flatbuild import from_flat
from worksnap.manifest import check_manifest
from worksnap.progress import Reporter
from worksnap.record import record_of
from worksnap.store import Store
from worksnap.treewalk import Flat

STOP_AFTER_ENV = "WORKSNAP_MIGRATE_STOP_AFTER"
"""For crash tests only: `N:POINT` kills this process (SIGKILL) when the Nth snapshot
(1-based) reaches POINT, one of `STOP_POINTS`, as a power cut or an OOM kill would."""

STOP_POINTS = ("trees", "flushed", "record")
"""Where a migration may be stopped for a test: after the trees were added (not
flushed), after they were flushed, after the record was written (format 1 files kept)."""


class UpgradeReport(msgspec.Struct, frozen=True):
    """What a migration did (or, for a dry run, would do).

    Attributes:
        migrated: the ids turned into records (for a dry run: that would be).
        finished: ids a killed migration had given a record already, whose format 1
            files were deleted now.
        left: one line for each format 1 manifest left as it is (damaged or hostile).
        dry_run: nothing was written.
    """

    migrated: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    dry_run: bool = False


def migrate(
    store: Store,
    *,
    store_rel: str | None,
    report: Reporter | None = None,
    dry_run: bool = False,
) -> UpgradeReport:
    """Turns every format 1 snapshot of `store` into trees and a record (see the module).

    `store_rel`: where the store lies in the root (a manifest naming a path in it is
    left, as every command refuses it). The caller holds the store's exclusive lock.
    """
    legacy = sorted(store.legacy_ids())
    if not legacy:
        return UpgradeReport(dry_run=dry_run)
    if not dry_run:
        store.stop_older_sweeps()  # before any format 1 manifest goes (`DiskStore`)
    summaries = {s.id: s for s in store.summaries()[0]}
    stop = _stop_point()
    migrated: list[str] = []
    finished: list[str] = []
    left: list[str] = []
    for done, snapshot_id in enumerate(legacy, 1):
        try:
            has_record = store.load_record(snapshot_id) is not None
        except ManifestError:
            has_record = True  # a damaged record still wins: never replaced from here
        if has_record:
            finished.append(snapshot_id)
            if not dry_run:
                store.delete_legacy(snapshot_id)
            continue
        try:
            manifest = store.load_manifest(snapshot_id)
            if manifest.id != snapshot_id:
                raise ManifestError(snapshot_id, f"file holds snapshot {manifest.id!r}")
            # Its own root: a store not rebound yet is migrated too (the load checks the root).
            check_manifest(manifest, root=manifest.root, store_rel=store_rel, source=snapshot_id)
        except ManifestError as exc:
            left.append(f"{exc}; left as it is")
            continue
        migrated.append(snapshot_id)
        if dry_run:
            continue
        summary = summaries.get(snapshot_id)
        tree, loose = from_flat(Flat.of(manifest), store.add_tree)
        _maybe_stop(stop, len(migrated), "trees")
        store.flush()
        _maybe_stop(stop, len(migrated), "flushed")
        changed = summary.changed if summary is not None else None
        store.save_record(record_of(manifest, tree, loose, changed=changed))
        _maybe_stop(stop, len(migrated), "record")
        store.delete_legacy(snapshot_id)
        if report is not None:
            report("upgrade", done, len(legacy))
    return UpgradeReport(
        migrated=tuple(migrated), finished=tuple(finished), left=tuple(left), dry_run=dry_run
    )


def _stop_point() -> tuple[int, str] | None:
    """The test knob `STOP_AFTER_ENV`, parsed (None: not set)."""
    value = os.environ.get(STOP_AFTER_ENV)
    if not value:
        return None
    count, _, point = value.partition(":")
    if not count.isdigit() or point not in STOP_POINTS:
        raise InputError(f"{STOP_AFTER_ENV}={value!r}: expected N:{'|'.join(STOP_POINTS)}")
    return int(count), point


def _maybe_stop(stop: tuple[int, str] | None, count: int, point: str) -> None:
    if stop == (count, point):
        os.kill(os.getpid(), signal.SIGKILL)
