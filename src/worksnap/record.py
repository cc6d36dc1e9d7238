"""Snapshot records (format 2): a snapshot's few hundred bytes of JSON beside its trees.

A record names the root tree (see `tree.py`) and holds what a tree does not: who,
when, why, the counts `list` shows, and a checkpoint's `absent` paths. It replaces
both the format 1 manifest and its summary: `list` reads records, and `show --json`
prints `manifest_of(record, flatten(...))`, the format 1 manifest, unchanged.

Canonical JSON (msgspec, fields in declaration order, defaults left out, one newline),
like a format 1 manifest: anything else is refused, and so is a newer version.
"""

from __future__ import annotations

import re
from itertools import pairwise

import msgspec

from worksnap.errors import ManifestError
from worksnap.layout import belongs_elsewhere
from worksnap.manifest import VERSION as FLAT_VERSION
from worksnap.manifest import Manifest, Summary, parse_time
from worksnap.paths import check_path, in_git, is_digest
from worksnap.treewalk import Flat, Loose

VERSION = 2
"""The record format this worksnap writes and the newest it reads."""

_ID = re.compile(r"[0-9a-f]{12}\Z")
_NUL = "\x00"


class Record(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One snapshot, as stored in format 2 (suggested name: `<store>/snapshots/<id>.json`)."""

    version: int
    id: str
    root: str
    kind: str
    step: int | None
    time: str
    max_file_bytes: int
    tree: str
    """Digest of the root tree (hex): equal trees, equal digests, across snapshots."""
    label: str | None = None
    session: str = "default"
    parent: str | None = None
    """The session's previous full snapshot (what `changed` counts against), if any."""
    files: int
    """Files and symlinks captured (format 1: `len(entries)`)."""
    bytes: int
    """Their total size."""
    changed: int | None = None
    """Paths changed since `parent` (None: no parent, or a checkpoint)."""
    meta: dict[str, str] = {}
    attachments: dict[str, str] = {}
    absent: list[str] = []
    """Checkpoints only: captured paths that did not exist (a rewind removes them)."""
    ignored: list[str] = []
    """Left-out paths no tree can hold (`treewalk.Loose`): almost always empty."""
    large: list[str] = []
    excluded: list[str] = []
    exclude: list[str] = []
    """The exclusion rules it was taken under, as the format 1 manifest's `exclude`."""


class _Header(msgspec.Struct):
    version: int


MAX_RECORD_BYTES = 16 << 20
"""The largest record a reader takes, in a store or on a remote (a few hundred bytes,
unless it lists many paths: a checkpoint's `absent` of tens of thousands)."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)
_header_decoder = msgspec.json.Decoder(_Header)


def encode_record(record: Record) -> bytes:
    """Returns the canonical JSON of a record (what is stored)."""
    return _encoder.encode(record) + b"\n"


def decode_record(data: bytes, source: str) -> Record:
    """Parses a stored record, refusing anything that is not exactly what worksnap writes.

    Checks structure and version only; `check_record` checks the values.

    Raises:
        ManifestError: the bytes are not a record this worksnap can trust.
    """
    try:
        header = _header_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(source, f"not a valid snapshot record ({exc})") from None
    if header.version > VERSION:
        raise ManifestError.too_new(source, "version", header.version, VERSION)
    if header.version != VERSION:
        raise ManifestError(source, f"version {header.version} is not a snapshot record")
    try:
        record = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(source, f"not a valid snapshot record ({exc})") from None
    if encode_record(record) != data:
        raise ManifestError(source, "not in the canonical form worksnap writes (edited by hand?)")
    return record


def check_record(record: Record, *, root: str, source: str) -> None:
    """Refuses a record whose values could make a restore unsafe or wrong.

    Its trees are checked as they are read (`treewalk`), not here.

    Raises:
        ManifestError: the first problem found.
    """
    if record.root != root:
        raise ManifestError(source, belongs_elsewhere(record.root, root, repr))
    if not _ID.match(record.id) or (record.parent is not None and not _ID.match(record.parent)):
        raise ManifestError(source, f"bad id {record.id!r} or parent {record.parent!r}")
    if not is_digest(record.tree):
        raise ManifestError(source, f"bad tree digest {record.tree!r}")
    numbers = (record.max_file_bytes, record.step, record.files, record.bytes, record.changed)
    if any(n is not None and n < 0 for n in numbers):
        raise ManifestError(source, "a negative step, size or count")
    try:
        parse_time(record.time)
    except ValueError:
        raise ManifestError(source, f"bad time {record.time!r}") from None
    for name in ("absent", "ignored", "large", "excluded"):
        paths: list[str] = getattr(record, name)
        if any(a >= b for a, b in pairwise(paths)):
            raise ManifestError(source, f"{name} are not sorted by path (or repeat one)")
        for path in paths:
            reason = check_path(path, name)
            if reason is None and name != "excluded" and in_git(path):
                reason = f"{name} {path!r} is inside a .git directory"
            if reason is not None:
                raise ManifestError(source, reason)
    for name, digest in record.attachments.items():
        if not name or "/" in name or _NUL in name or not is_digest(digest):
            raise ManifestError(source, f"bad attachment {name!r}")


def loose_of(record: Record) -> Loose:
    """The left-out paths the record holds, for `treewalk.flatten`."""
    return Loose(ignored=record.ignored, large=record.large, excluded=record.excluded)


def manifest_of(record: Record, flat: Flat) -> Manifest:
    """Returns the format 1 manifest of a snapshot: what `show --json` prints, what plans use.

    Its `tree` is the root tree's digest (equal trees, equal digests, as format 1
    promises); format 1's own digest of the entries is not computed again.
    """
    return Manifest(
        version=FLAT_VERSION,
        id=record.id,
        root=record.root,
        kind=record.kind,
        step=record.step,
        time=record.time,
        max_file_bytes=record.max_file_bytes,
        tree=record.tree,
        label=record.label,
        session=record.session,
        entries=flat.entries,
        dirs=flat.dirs,
        ignored=flat.ignored,
        large=flat.large,
        excluded=flat.excluded,
        meta=record.meta,
        attachments=record.attachments,
        absent=record.absent,
        exclude=record.exclude,
    )


def record_of(
    manifest: Manifest,
    tree: str,
    loose: Loose,
    *,
    parent: str | None = None,
    changed: int | None = None,
    total: int | None = None,
) -> Record:
    """Returns the record of a manifest whose trees are built (a new snapshot, the migration).

    Args:
        manifest: the snapshot as format 1 stored it.
        tree: its root tree's digest (`treebuild.from_flat`).
        loose: the left-out paths no tree holds (`treebuild.from_flat`).
        parent: the session's previous full snapshot, if known.
        changed: its summary's count, if it had one.
        total: the bytes of its files, if known (else summed here, one entry at a time).
    """
    return Record(
        version=VERSION,
        id=manifest.id,
        root=manifest.root,
        kind=manifest.kind,
        step=manifest.step,
        time=manifest.time,
        max_file_bytes=manifest.max_file_bytes,
        tree=tree,
        label=manifest.label,
        session=manifest.session,
        parent=parent,
        files=len(manifest.entries),
        bytes=sum(e.size or 0 for e in manifest.entries) if total is None else total,
        changed=changed,
        meta=manifest.meta,
        attachments=manifest.attachments,
        absent=manifest.absent,
        ignored=loose.ignored,
        large=loose.large,
        excluded=loose.excluded,
        exclude=manifest.exclude,
    )


def summary_of(record: Record) -> Summary:
    """The fields `list` shows, as format 1 kept them in a summary."""
    return Summary(
        id=record.id,
        step=record.step,
        kind=record.kind,
        time=record.time,
        label=record.label,
        session=record.session,
        tree=record.tree,
        files=record.files,
        bytes=record.bytes,
        changed=record.changed,
    )
