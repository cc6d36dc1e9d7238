"""Manifest: the record of one snapshot, its JSON form, and the checks a loaded one must pass.

Paths are kept in *wire form* everywhere inside worksnap: the UTF-8 text of the
name, except that a byte that is not part of valid UTF-8 is written as a NUL
character followed by two lowercase hex digits (NUL can never occur in a POSIX
name, so the escape is unambiguous and every valid UTF-8 name is its own wire
form). `fs_path` turns a wire path back into the exact bytes of the name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from datetime import datetime, timezone
from itertools import pairwise
from typing import Literal, NewType

import msgspec
from blake3 import blake3

from worksnap.errors import ManifestError

VERSION = 1
"""The manifest schema this worksnap writes and the newest it reads."""

RelPath = NewType("RelPath", str)
"""A slash-separated path relative to the root, in wire form."""

Digest = NewType("Digest", str)
"""64 lowercase hex characters: the BLAKE3 digest of an object's bytes."""

_NUL = "\x00"
_ESCAPE = re.compile("\x00([89a-f][0-9a-f])")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_ID = re.compile(r"[0-9a-f]{12}\Z")
# `X:\` or `X:/`: absolute on Windows. A colon elsewhere (`a:b`, `C:x`) is a legal POSIX name.
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
# Code points HFS+ ignores when it compares names, so `.g\u200cit` opens `.git` there.
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


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


def wire_name(name: str) -> str:
    """Returns the wire form of a name as `os` functions return it (surrogate-escaped)."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(
            f"{_NUL}{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in name
        )
    return name


def fs_path(path: str) -> bytes:
    """Returns the exact bytes of a wire-form path."""
    if _NUL not in path:
        return path.encode("utf-8", "surrogatepass")
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(path):
        out += path[pos : match.start()].encode("utf-8", "surrogatepass")
        out.append(int(match.group(1), 16))
        pos = match.end()
    out += path[pos:].encode("utf-8", "surrogatepass")
    return bytes(out)


def tree_digest(entries: list[Entry], dirs: list[str]) -> str:
    """Returns the digest of a captured tree: equal trees have equal digests."""
    return str(blake3(_encoder.encode((entries, dirs)), max_threads=1).hexdigest())


def new_id() -> str:
    """Returns a fresh snapshot id: 12 random lowercase hex characters."""
    return secrets.token_hex(6)


def now_rfc3339() -> str:
    """Returns the current UTC time in RFC 3339 form with microseconds."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        raise ManifestError(
            source,
            f"version {header.version} is newer than this worksnap reads ({VERSION}); "
            "upgrade worksnap",
        )
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


def _is_canonical(text: str) -> bool:
    """True when a wire-form string has no NUL except canonical escapes of non-UTF-8 bytes."""
    if _NUL not in text:
        return True
    raw = fs_path(text)
    return b"\x00" not in raw and wire_name(os.fsdecode(raw)) == text


def is_git_name(component: str) -> bool:
    """True for every spelling git itself refuses as a path component.

    As git's `verify_path` with core.protectNTFS and core.protectHFS: any case
    (`.GIT`), trailing dots and spaces (`.git. .`), an NTFS stream
    (`.git::$INDEX_ALLOCATION`), the NTFS short name (`git~1`), and HFS+
    ignorable code points anywhere (`.g\u200cit`).
    """
    if component.isascii():  # the common case, asked for every name a scan sees
        lowered = component.lower()
        if not lowered.startswith((".git", "git~1")):
            return False
        return lowered.partition(":")[0].rstrip(". ") in (".git", "git~1")
    name = _HFS_IGNORED.sub("", component).lower().partition(":")[0].rstrip(". ")
    return name in (".git", "git~1")


def check_path(path: str, what: str) -> str | None:
    """Returns why `path` is not a safe, normal wire-form relative path, or None when it is."""
    if not path:
        return f"{what} has an empty path"
    if path.startswith("/") or _DRIVE.match(path):
        return f"{what} {path!r} is absolute"
    if os.sep != "/" and "\\" in path:
        return f"{what} {path!r} has a backslash"
    bounded = f"/{path}/"  # every component between slashes: three searches, no split
    if "//" in bounded or "/./" in bounded or "/../" in bounded:
        return f"{what} {path!r} has an empty, '.' or '..' component"
    if not _is_canonical(path):
        return f"{what} {path!r} has a NUL byte or a non-canonical escape"
    return None


def _may_hold_git_name(path: str) -> bool:
    """False when no component of `path` can be a spelling of `.git` (checked per path)."""
    if not path.isascii():
        return True  # HFS+ ignorable code points can hide one: check each component
    lowered = path.lower()
    return ".git" in lowered or "git~1" in lowered


def _check_relpath(path: str, what: str, source: str, *, allow_git: bool = False) -> None:
    reason = check_path(path, what)
    if (
        reason is None
        and not allow_git
        and _may_hold_git_name(path)
        and any(is_git_name(c) for c in path.split("/"))
    ):
        reason = f"{what} {path!r} is inside a .git directory"
    if reason is not None:
        raise ManifestError(source, reason)


def is_under(path: str, parent: str) -> bool:
    """True when `path` is `parent` or lies below it (both relative wire paths)."""
    return path == parent or path.startswith(parent + "/")


def check_manifest(manifest: Manifest, *, root: str, store_rel: str | None, source: str) -> None:
    """Refuses a manifest whose paths or values could make a restore unsafe or wrong.

    Args:
        manifest: a decoded manifest.
        root: the wire-form absolute root it must belong to.
        store_rel: the store's path relative to the root, or None when outside it.
        source: names the manifest in errors.

    Raises:
        ManifestError: the first problem found.
    """
    if manifest.root != root:
        raise ManifestError(
            source,
            f"belongs to {manifest.root!r}, not {root!r} "
            "(if the project moved, run `worksnap rebind`)",
        )
    if not _ID.match(manifest.id):
        raise ManifestError(source, f"bad id {manifest.id!r}")
    if not _HEX64.match(manifest.tree):
        raise ManifestError(source, f"bad tree digest {manifest.tree!r}")
    if manifest.max_file_bytes < 0 or (manifest.step is not None and manifest.step < 0):
        raise ManifestError(source, "negative max_file_bytes or step")
    if tree_digest(manifest.entries, manifest.dirs) != manifest.tree:
        # Damage that is still valid JSON (a flipped mode bit, a swapped digest).
        raise ManifestError(source, "its entries do not match its tree digest (damaged?)")
    # Sorted, strictly: what the writer does, and what lets the planner merge two lists.
    for name, paths in (("dirs", manifest.dirs), ("entries", [e.path for e in manifest.entries])):
        if any(a >= b for a, b in pairwise(paths)):
            raise ManifestError(source, f"{name} are not sorted by path (or repeat one)")
    kinds: dict[str, str] = {}
    for d in manifest.dirs:
        _check_relpath(d, "dir", source)
        if d in kinds:
            raise ManifestError(source, f"path {d!r} appears twice")
        kinds[d] = "dir"
    for entry in manifest.entries:
        _check_entry(entry, source)
        if entry.path in kinds:
            raise ManifestError(source, f"path {entry.path!r} appears twice")
        kinds[entry.path] = entry.type
    for path, kind in kinds.items():
        if store_rel is not None and is_under(path, store_rel):
            raise ManifestError(source, f"path {path!r} is inside the store")
        parent, _, _ = path.rpartition("/")
        if parent and kinds.get(parent) != "dir":
            raise ManifestError(
                source, f"{kind} {path!r} has a parent that is not a captured directory"
            )
    for name in ("ignored", "large", "excluded", "absent"):
        for path in getattr(manifest, name):
            _check_relpath(path, name, source, allow_git=name == "excluded")
    for name, digest in manifest.attachments.items():
        if not name or "/" in name or _NUL in name or not _HEX64.match(digest):
            raise ManifestError(source, f"bad attachment {name!r}")


def _check_entry(entry: Entry, source: str) -> None:
    _check_relpath(entry.path, entry.type, source)
    if not 0 <= entry.mode <= 0o777:
        raise ManifestError(source, f"{entry.path!r} has mode {entry.mode:o} outside 0o777")
    if entry.type == "file":
        if entry.hash is None or not _HEX64.match(entry.hash):
            raise ManifestError(source, f"{entry.path!r} has a bad hash {entry.hash!r}")
        if entry.size is None or entry.size < 0:
            raise ManifestError(source, f"{entry.path!r} has a bad size {entry.size!r}")
        if entry.target is not None:
            raise ManifestError(source, f"file {entry.path!r} has a symlink target")
    else:
        if not entry.target or not _is_canonical(entry.target):
            raise ManifestError(source, f"symlink {entry.path!r} has a bad target")
        if entry.hash is not None or entry.size is not None:
            raise ManifestError(source, f"symlink {entry.path!r} has a hash or size")
