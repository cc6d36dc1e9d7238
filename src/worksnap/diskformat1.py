"""The format 1 files of a store directory: a manifest and a summary per snapshot.

Stores written before format 2 hold them; they are read as they are until the
migration (migration.py) gives each snapshot its trees and record, then deletes them.
`DiskStore` inherits these methods; nothing else reads or writes these files.
"""

from __future__ import annotations

import msgspec

from worksnap.errors import ManifestError, SnapshotError, StoreError
from worksnap.frames import pack, unpack
from worksnap.layout import StorePaths
from worksnap.manifest import Manifest, Summary, decode_manifest, encode_manifest
from worksnap.storedir import MIB, StoreDir

_summary_decoder = msgspec.json.Decoder(Summary)
_MAX_SUMMARY = MIB


class FormatOneFiles:
    """Format 1 manifests (zstd frames, or plain JSON from before compression) and summaries.

    Attributes:
        files: the store directory, through which every file is reached.
        paths: its layout.
        max_unpacked: the largest manifest written or read.
    """

    files: StoreDir
    paths: StorePaths
    max_unpacked: int

    def flush(self) -> None:
        """Makes every object added durable (the store's own)."""
        raise NotImplementedError

    def save_manifest(self, manifest: Manifest, summary: Summary) -> None:
        """Stores a format 1 snapshot: its manifest, then its summary (tests of old stores)."""
        self.flush()
        self.files.makedirs(self.paths.manifests)  # a format 2 store has none
        self.files.makedirs(self.paths.summaries)
        self.replace_manifest(manifest)
        self.files.write(self.paths.summary(manifest.id), msgspec.json.encode(summary))

    def replace_manifest(self, manifest: Manifest) -> None:
        """Writes a format 1 manifest (compressed) over any stored one with its id.

        Raises:
            SnapshotError: the manifest is larger than a reader accepts.
        """
        data = encode_manifest(manifest)
        if len(data) > self.max_unpacked:
            raise SnapshotError("", f"manifest of {len(data)} bytes is over {self.max_unpacked}")
        self.files.write(self.paths.manifest(manifest.id), pack(data))

    def manifest_bytes(self, snapshot_id: str) -> bytes:
        """Returns a stored format 1 manifest's JSON (decompressed).

        Raises:
            ManifestError: there is no readable manifest with that id.
        """
        path = self.paths.manifest(snapshot_id)
        try:
            # A plain (old) manifest is at most the bound; a frame of it is smaller.
            data = self.files.read(path, limit=self.max_unpacked + MIB)
        except StoreError as exc:
            raise ManifestError(snapshot_id, exc.reason) from None
        except OSError as exc:
            raise ManifestError(snapshot_id, f"cannot read: {exc.strerror}") from None
        try:
            return unpack(data, limit=self.max_unpacked)
        except ValueError as exc:
            raise ManifestError(snapshot_id, str(exc)) from None

    def load_manifest(self, snapshot_id: str) -> Manifest:
        """Reads and decodes a stored format 1 manifest (paths are checked by the caller)."""
        return decode_manifest(self.manifest_bytes(snapshot_id), snapshot_id)

    def legacy_ids(self) -> list[str]:
        """Returns the ids that still have a format 1 manifest (a record may exist too)."""
        names = self.files.listdir(self.paths.manifests)
        return [i for name in names if (i := self.paths.snapshot_id(name)) is not None]

    def legacy_summaries(self, ids: list[str], problems: list[str]) -> list[Summary]:
        """The readable summaries of format 1 snapshots; a line in `problems` per bad one."""
        found: list[Summary] = []
        for snapshot_id in ids:
            try:
                data = self.files.read(self.paths.summary(snapshot_id), limit=_MAX_SUMMARY)
                summary = _summary_decoder.decode(data)
            except FileNotFoundError:
                continue  # still being written, or its snapshot failed half-way
            except StoreError as exc:
                problems.append(f"snapshot {snapshot_id}: {exc}; skipped")
                continue
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                problems.append(f"snapshot {snapshot_id}: unreadable summary ({exc}); skipped")
                continue
            if summary.id != snapshot_id:
                problems.append(f"snapshot {snapshot_id}: summary names {summary.id}; skipped")
                continue
            found.append(summary)
        return found

    def delete_legacy(self, snapshot_id: str) -> None:
        """Removes a snapshot's format 1 files: its summary first, then its manifest."""
        self.files.unlink(self.paths.summary(snapshot_id))
        self.files.unlink(self.paths.manifest(snapshot_id))
