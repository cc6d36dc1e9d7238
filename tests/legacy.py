"""Format 1 stores, as worksnap wrote them before format 2: for tests of reading and migrating.

`downgrade` turns every snapshot record of a store into the format 1 manifest and
summary an older worksnap would have written for the same snapshot (its `tree` the
format 1 digest of the entries), and removes the record.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from worksnap.diskstore import DiskStore
from worksnap.manifest import Manifest, summarize, tree_digest
from worksnap.paths import Digest
from worksnap.record import loose_of, manifest_of
from worksnap.treewalk import flatten


def flat_manifest(store: DiskStore, snapshot_id: str) -> Manifest:
    """The format 1 manifest of a format 2 snapshot, `tree` the format 1 digest."""
    record = store.load_record(snapshot_id)
    assert record is not None, snapshot_id
    flat = flatten(Digest(record.tree), store.read, loose=loose_of(record))
    manifest = manifest_of(record, flat)
    return msgspec.structs.replace(manifest, tree=tree_digest(manifest.entries, manifest.dirs))


def downgrade(store_dir: Path) -> list[str]:
    """Rewrites every record of the store as a format 1 manifest and summary; returns the ids."""
    store = DiskStore(str(store_dir))
    ids = sorted(store.ids())
    for snapshot_id in ids:
        record = store.load_record(snapshot_id)
        assert record is not None
        manifest = flat_manifest(store, snapshot_id)
        store.save_manifest(manifest, summarize(manifest, changed=record.changed))
        os.unlink(store.paths.record(snapshot_id))
    store.close()
    return ids
