"""Manifest: the record of one snapshot, its JSON form, and the checks a loaded one must pass.

Every path in a manifest is in wire form (see `paths.py`). The time format is
written and parsed here and nowhere else.
"""

from __future__ import annotations

import contextlib
import functools
import json
import operator
import os
import re
from bisect import bisect_left
from datetime import datetime, timezone
from itertools import islice
from typing import Literal

import msgspec
from blake3 import blake3

from worksnap.errors import InputError, ManifestError, shown
from worksnap.layout import belongs_elsewhere
from worksnap.paths import (
    check_path,
    in_git,
    is_canonical,
    is_digest,
    is_under,
)

VERSION = 1
"""The manifest schema this worksnap writes and the newest it reads."""

_NUL = "\x00"
_ID = re.compile(r"[0-9a-f]{12}\Z")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_LABEL_BYTES = 200
MAX_META_BYTES = 1 << 20
"""The most a snapshot's `meta` may hold, keys and values (its record is read up to 16 MiB)."""


class Entry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One captured file or symlink."""

    path: str
    type: Literal["file", "symlink"]
    mode: int
    hash: str | None = None
    size: int | None = None
    target: str | None = None


class Manifest(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One snapshot: what was captured, and what was deliberately left out."""

    version: int
    id: str
    root: str
    kind: str
    step: int | None
    time: str
    max_file_bytes: int
    tree: str
    label: str | None = None
    session: str = "default"
    entries: list[Entry]
    dirs: list[str]
    ignored: list[str]
    large: list[str]
    excluded: list[str]
    meta: dict[str, str] = {}
    attachments: dict[str, str] = {}
    absent: list[str] = []
    exclude: list[str] = []
    """The exclusion rules it was taken under (`exclusion.py`; the store is not among
    them): a restore of it never touches what they exclude."""


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """The few fields of a snapshot that `list` shows, stored beside its manifest."""

    id: str
    step: int | None
    kind: str
    time: str
    label: str | None = None
    session: str = "default"
    tree: str
    files: int
    bytes: int
    changed: int | None = None


class _Header(msgspec.Struct):
    version: int


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Manifest)
_header_decoder = msgspec.json.Decoder(_Header)


def entry_at(entries: list[Entry], path: str) -> Entry | None:
    """The entry at `path` in `entries` (sorted by path, as a manifest's are), or None."""
    at = bisect_left(entries, path, key=operator.attrgetter("path"))
    return entries[at] if at < len(entries) and entries[at].path == path else None


def tree_digest(entries: list[Entry], dirs: list[str]) -> str:
    """Returns the digest of a captured tree: equal trees have equal digests."""
    return str(blake3(_encoder.encode((entries, dirs)), max_threads=1).hexdigest())


def new_id() -> str:
    """Returns a fresh snapshot id: 12 random lowercase hex characters."""
    return os.urandom(6).hex()


def now_rfc3339(ns: int | None = None) -> str:
    """Returns the current UTC time (or `ns` since the epoch) in RFC 3339 form, to the us."""
    if ns is None:
        return datetime.now(timezone.utc).strftime(_TIME_FORMAT)
    at = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc)
    return at.replace(microsecond=ns // 1000 % 1_000_000).strftime(_TIME_FORMAT)


@functools.lru_cache(maxsize=256)
def parse_time(text: str) -> datetime:
    """Returns the (timezone-aware, UTC) time a manifest or summary records.

    Remembered: `strptime` takes longer than a plan's own look at a change, and a
    long-lived workspace reads the same snapshots' times at every plan and list.
    """
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=timezone.utc)


def check_step(step: int | None) -> None:
    """Refuses a negative step number.

    Raises:
        InputError: `step` is negative.
    """
    if step is not None and step < 0:
        raise InputError("step must not be negative")


def check_meta(meta: dict[str, str] | None) -> None:
    """Refuses `meta` that no record could hold: not strings, not Unicode, over 1 MiB.

    Checked before anything is stored (a record too big to read back made a snapshot that
    `list` skipped and that failed every `gc`: a review found it).

    Raises:
        InputError: what is wrong with it.
    """
    total = 0
    for key, value in (meta or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InputError("meta keys and values must be strings")
        try:
            total += len(key.encode()) + len(value.encode())
        except UnicodeEncodeError:
            raise InputError(f"meta {key!r} is not valid Unicode text") from None
    if total > MAX_META_BYTES:
        raise InputError(
            f"meta holds {total:,} bytes, more than {MAX_META_BYTES:,}: "
            "store large data as an attachment"
        )


def one_line(label: str | None) -> str | None:
    """Returns the first line of a label, trimmed, at most 200 bytes (None if empty)."""
    if label is None:
        return None
    first = label.strip().split("\n", 1)[0].strip()
    cut = first.encode("utf-8", "surrogatepass")[:_LABEL_BYTES].decode("utf-8", "ignore")
    return cut or None


def summarize(manifest: Manifest, *, changed: int | None = None) -> Summary:
    """Returns the summary stored beside a manifest (`changed`: paths changed since the last)."""
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


def encode_manifest(manifest: Manifest) -> bytes:
    """Returns the canonical JSON of a manifest (what is stored and what `show --json` prints)."""
    return _encoder.encode(manifest) + b"\n"


def decode_manifest(data: bytes, source: str) -> Manifest:
    """Parses a stored manifest, refusing anything that is not exactly what worksnap writes.

    Checks structure and version only; `check_manifest` checks the paths and values.

    Raises:
        ManifestError: the bytes are not a manifest this worksnap can trust.
    """
    try:
        header = _header_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(source, f"not a valid manifest ({exc})") from None
    if header.version > VERSION:
        raise ManifestError.too_new(source, "version", header.version, VERSION)
    if header.version < 1:
        raise ManifestError(source, f"unsupported version {header.version}")
    try:
        manifest = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(source, f"not a valid manifest ({exc})") from None
    if encode_manifest(manifest) != data:
        raise ManifestError(source, _why_not_canonical(data))
    return manifest


def _why_not_canonical(data: bytes) -> str:
    """Explains why a manifest that decoded is not byte-identical to its canonical form."""
    duplicate: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        keys = [key for key, _ in items]
        duplicate.extend(key for key in keys if keys.count(key) > 1)
        return dict(items)

    # msgspec read it; all that matters here is whether a key repeats.
    with contextlib.suppress(ValueError, RecursionError):
        json.loads(data, object_pairs_hook=pairs)
    if duplicate:
        return f"duplicate key {duplicate[0]!r}"
    return "not in the canonical form worksnap writes (edited by hand?)"


def _check_relpath(path: str, what: str, source: str, *, allow_git: bool = False) -> None:
    reason = check_path(path, what)
    if reason is None and not allow_git and in_git(path):
        reason = f"{what} {shown(path)!r} is inside a .git directory"
    if reason is not None:
        raise ManifestError(source, reason)


def check_manifest(
    manifest: Manifest, *, root: str, store_rel: str | None, source: str, from_trees: bool = False
) -> None:
    """Refuses a manifest whose paths or values could make a restore unsafe or wrong.

    Args:
        manifest: a decoded manifest.
        root: the wire-form absolute root it must belong to.
        store_rel: the store's path relative to the root, or None when outside it.
        source: names the manifest in errors.
        from_trees: the flat view of format 2 trees. There `tree` is the root tree's
            digest; every tree object was checked against its own digest, and every name
            and value in it (`tree.check_node`), as it was read; and each path lies below
            the directory it was read from. Left to check is what no tree knows: where
            the store is, and the record's own lists. (Checking each of the 47k paths
            again was three quarters of loading a snapshot.)

    Raises:
        ManifestError: the first problem found.
    """
    if manifest.root != root:
        raise ManifestError(source, belongs_elsewhere(manifest.root, root, repr))
    if not _ID.match(manifest.id):
        raise ManifestError(source, f"bad id {manifest.id!r}")
    if not is_digest(manifest.tree):
        raise ManifestError(source, f"bad tree digest {manifest.tree!r}")
    if manifest.max_file_bytes < 0 or (manifest.step is not None and manifest.step < 0):
        raise ManifestError(source, "negative max_file_bytes or step")
    if not from_trees and tree_digest(manifest.entries, manifest.dirs) != manifest.tree:
        # Damage that is still valid JSON (a flipped mode bit, a swapped digest).
        raise ManifestError(source, "its entries do not match its tree digest (damaged?)")
    # Sorted, strictly: what the writer does, and what lets the planner merge two lists.
    listed = (("dirs", manifest.dirs), ("entries", [e.path for e in manifest.entries]))
    for name, paths in listed:
        if not all(map(operator.lt, paths, islice(paths, 1, None))):  # in C: 2 ms at 47k
            raise ManifestError(source, f"{name} are not sorted by path (or repeat one)")
    if from_trees:
        for _, paths in listed:
            _check_outside_store(paths, store_rel, source)
    else:
        _check_paths(manifest, store_rel, source)
    for name in ("ignored", "large", "excluded", "absent"):
        for path in getattr(manifest, name):
            _check_relpath(path, name, source, allow_git=name == "excluded")
    for rule in manifest.exclude:
        if rule.startswith("/"):  # a pattern (`exclusion.PATTERN`)
            if len(rule) == 1 or any(c in rule for c in "\0\n\r"):
                raise ManifestError(source, f"bad exclusion pattern {rule!r}")
        else:
            _check_relpath(rule, "exclude", source, allow_git=True)
    for name, digest in manifest.attachments.items():
        if not name or "/" in name or _NUL in name or not is_digest(digest):
            raise ManifestError(source, f"bad attachment {name!r}")


def _check_paths(manifest: Manifest, store_rel: str | None, source: str) -> None:
    """Each path of a flat manifest: safe, once, outside the store, below a directory."""
    kinds: dict[str, str] = {}
    for d in manifest.dirs:
        _check_relpath(d, "dir", source)
        if d in kinds:
            raise ManifestError(source, f"path {shown(d)!r} appears twice")
        kinds[d] = "dir"
    for entry in manifest.entries:
        _check_entry(entry, source)
        if entry.path in kinds:
            raise ManifestError(source, f"path {shown(entry.path)!r} appears twice")
        kinds[entry.path] = entry.type
    for path, kind in kinds.items():
        if store_rel is not None and is_under(path, store_rel):
            raise ManifestError(source, f"path {shown(path)!r} is inside the store")
        parent, _, _ = path.rpartition("/")
        if parent and kinds.get(parent) != "dir":
            raise ManifestError(
                source, f"{kind} {shown(path)!r} has a parent that is not a captured directory"
            )


def _check_outside_store(paths: list[str], store_rel: str | None, source: str) -> None:
    """Refuses the store, or a path below it, in sorted `paths` (two searches)."""
    if store_rel is None:
        return
    for start in (store_rel, store_rel + "/"):
        at = bisect_left(paths, start)
        if at < len(paths) and is_under(paths[at], store_rel):
            raise ManifestError(source, f"path {shown(paths[at])!r} is inside the store")


def _check_entry(entry: Entry, source: str) -> None:
    _check_relpath(entry.path, entry.type, source)
    if not 0 <= entry.mode <= 0o777:
        raise ManifestError(source, f"{shown(entry.path)!r} has mode {entry.mode:o} outside 0o777")
    if entry.type == "file":
        if entry.hash is None or not is_digest(entry.hash):
            raise ManifestError(source, f"{shown(entry.path)!r} has a bad hash {entry.hash!r}")
        if entry.size is None or entry.size < 0:
            raise ManifestError(source, f"{shown(entry.path)!r} has a bad size {entry.size!r}")
        if entry.target is not None:
            raise ManifestError(source, f"file {shown(entry.path)!r} has a symlink target")
    else:
        if not entry.target or not is_canonical(entry.target):
            raise ManifestError(source, f"symlink {shown(entry.path)!r} has a bad target")
        if entry.hash is not None or entry.size is not None:
            raise ManifestError(source, f"symlink {shown(entry.path)!r} has a hash or size")


def size_problem(entry: Entry, size: int) -> str | None:
    """Why the object `entry` names, of `size` bytes, is not its file (None: it is, by size).

    A hostile or buggy tree may name an intact object with another size: restored, its
    file never matched the snapshot again (a review).
    """
    if entry.size is None or entry.size == size:
        return None
    return f"holds {size} bytes where the snapshot names {entry.size} for {shown(entry.path)!r}"
