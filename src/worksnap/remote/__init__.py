"""Remote stores: push and pull snapshots through S3-compatible stores and shared disks.

The transport layer is exported here: `open_transport(url)` gives a `Transport`, the
few operations (create-if-absent, bounded reads, listing, compare-and-swap refs)
that an immutable-pack remote needs. The S3 client (`obstore`, the `s3` extra) is
imported only when an `s3://` URL is opened. Above it, and not imported here (they
are higher in the layers): `formats` and `repository` (the repository's layout and
objects), `sync` (push and pull) and `gc` (remote gc and verify); docs/remote.md.
"""

from __future__ import annotations

from worksnap.remote.backends import open_transport
from worksnap.remote.transport import (
    MAX_REF_BYTES,
    ListEntry,
    Ref,
    RefusedStoreError,
    Stat,
    Transport,
    probe_transport,
)

__all__ = [
    "MAX_REF_BYTES",
    "ListEntry",
    "Ref",
    "RefusedStoreError",
    "Stat",
    "Transport",
    "open_transport",
    "probe_transport",
]
