"""The snapshot files of a store directory: a record per snapshot (format 2), and the pins.

A record (`snapshots/<id>.json`, plain JSON) is written once the snapshot's objects are
flushed: its presence means the snapshot is complete. `DiskStore` inherits these
methods (and the format 1 files', diskformat1.py); its objects and packs are its own.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Hashable, Sequence

import msgspec

from worksnap.diskformat1 import FormatOneFiles
from worksnap.errors import ManifestError, StoreError
from worksnap.fsio import file_state
from worksnap.layout import is_snapshot_id
from worksnap.manifest import Summary
from worksnap.record import MAX_RECORD_BYTES, Record, decode_record, encode_record, summary_of
from worksnap.storedir import MIB

# The most each file may hold: a hostile store cannot make a read eat memory.
_MAX_PINS = 16 * MIB
_MAX_DROPPED = 4 * MIB
_OLDER_STOP_TEXT = (
    b"This store was migrated to format 2 by a newer worksnap: install it to use the store.\n"
)
_KEEP_DROPPED = 65_536  # the newest ids `dropped` keeps once it grows past 1 MiB (13 B an id)


class SnapshotFiles(FormatOneFiles):
    """Snapshot records, pins, and (inherited) format 1 manifests and summaries."""

    def manifest_stamp(self, snapshot_id: str) -> Hashable | None:
        """Returns what changes whenever the stored snapshot changes (None: unknown)."""
        for path in (self.paths.record(snapshot_id), self.paths.manifest(snapshot_id)):
            try:
                st = self.files.lstat(path)
            except OSError:
                return None
            if st is not None:
                return (path, file_state(st))
        return None

    def save_record(self, record: Record) -> None:
        """Stores a snapshot's record once its objects are durable (a record means complete)."""
        self.flush()
        self.files.makedirs(self.paths.snapshots)
        self.files.write(self.paths.record(record.id), encode_record(record))

    def load_record(self, snapshot_id: str) -> Record | None:
        """Reads and decodes a snapshot's record (None: it has none; checked by the caller).

        Raises:
            ManifestError: the record is unreadable, not canonical, or of a newer version.
        """
        try:
            data = self.files.read_optional(self.paths.record(snapshot_id), limit=MAX_RECORD_BYTES)
        except StoreError as exc:
            raise ManifestError(snapshot_id, exc.reason) from None
        except OSError as exc:
            raise ManifestError(snapshot_id, f"cannot read its record: {exc.strerror}") from None
        return None if data is None else decode_record(data, snapshot_id)

    def _named(self, directory: str) -> list[str]:
        names = self.files.listdir(directory)
        return [i for name in names if (i := self.paths.snapshot_id(name)) is not None]

    def ids(self) -> list[str]:
        """Returns the ids of every stored snapshot (records and format 1 manifests)."""
        return list(dict.fromkeys(self._named(self.paths.snapshots) + self.legacy_ids()))

    def summaries(self) -> tuple[list[Summary], list[str]]:
        """Returns the readable summaries, and one line for each damaged snapshot skipped."""
        found: list[Summary] = []
        problems: list[str] = []
        recorded = self._named(self.paths.snapshots)
        for snapshot_id in recorded:
            try:
                record = self.load_record(snapshot_id)
            except ManifestError as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable record ({exc}); skipped")
                continue
            if record is None:
                continue  # dropped since the listing
            if record.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: record names {record.id}; skipped")
                continue
            found.append(summary_of(record))
        legacy = sorted(set(self.legacy_ids()).difference(recorded))
        found += self.legacy_summaries(legacy, problems)
        return found, problems

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a snapshot: its record, then any format 1 summary and manifest."""
        self.files.unlink(self.paths.record(snapshot_id))
        self.delete_legacy(snapshot_id)

    def stop_older_sweeps(self) -> None:
        """Writes `packs/!older-worksnap-stop.idx` unless it is there (layout.OLDER_STOP)."""
        if self.files.lstat(self.paths.older_stop) is None:
            self.files.makedirs(self.paths.packs)
            self.files.write(self.paths.older_stop, _OLDER_STOP_TEXT)

    def note_dropped(self, snapshot_ids: Sequence[str]) -> None:
        """Adds ids to `dropped` (a plain pull leaves them out), under the exclusive lock.

        Appended, not fsynced: a mark lost in a crash only lets a pull bring one back, and
        so does one a full disk had no room for (the gc goes on: it is what frees space).
        Past 1 MiB the file is written anew with its newest `_KEEP_DROPPED` ids.
        """
        if not snapshot_ids:
            return
        lines = "".join(f"{i}\n" for i in snapshot_ids).encode()
        st = self.files.lstat(self.paths.dropped)
        try:
            if st is None or st.st_size + len(lines) <= MIB:
                self.files.append(self.paths.dropped, lines)
                return
            kept = self._dropped_lines()[-_KEEP_DROPPED:] + list(snapshot_ids)
            self.files.write(self.paths.dropped, "".join(f"{i}\n" for i in kept).encode())
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise

    def dropped(self) -> set[str]:
        """The ids a local gc dropped, as far as `dropped` remembers (none if absent)."""
        return set(self._dropped_lines())

    def _dropped_lines(self) -> list[str]:
        data = self.files.read_optional(self.paths.dropped, limit=_MAX_DROPPED) or b""
        return [i for i in data.decode("ascii", "replace").splitlines() if is_snapshot_id(i)]

    def pins(self) -> set[str]:
        """Returns the ids of pinned snapshots (never dropped by gc)."""
        try:
            data = self.files.read_optional(self.paths.pins, limit=_MAX_PINS)
            return set() if data is None else set(msgspec.json.decode(data, type=list[str]))
        except (OSError, msgspec.DecodeError) as exc:
            raise ManifestError(os.path.basename(self.paths.pins), f"damaged ({exc})") from None

    def set_pins(self, pins: set[str]) -> None:
        """Stores the set of pinned snapshot ids."""
        self.files.write(self.paths.pins, msgspec.json.encode(sorted(pins)))
