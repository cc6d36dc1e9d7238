"""The small objects of a remote repository: config, pack index, session ref, gc lease and state.

Each is one canonical encoding (msgspec; anything else is refused) with a `version`
checked explicitly; a newer version is refused with "upgrade worksnap". Every value
is checked on decoding, so a damaged or hostile object gives one `RemoteError` that
names its key, and nothing partial reaches a caller. Pure: no transport here.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import TypeVar

import msgspec

from worksnap.errors import RemoteError
from worksnap.paths import is_digest

FORMAT = "worksnap-remote"
"""The `format` tag of a repository's config."""

VERSION = 1
"""The repository format this worksnap writes and the newest it reads."""

SNAPSHOT_ID = re.compile(r"[0-9a-f]{12}\Z")
NONCE = re.compile(r"[0-9a-f]{16}\Z")
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
"""What `history.check_session_name` accepts: each is a valid key segment as it is."""

MAX_CONFIG_BYTES = 4096
MAX_INDEX_BYTES = 16 << 20
"""An index lists at most a few hundred thousand objects (about 50 bytes each)."""
MAX_STATE_BYTES = 16 << 20
SALT_BYTES = 16
MAX_OBJECT_BYTES = 1 << 30
"""The largest object an index may list (unpacked): decompression allocates that much."""

_T = TypeVar("_T")


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The repository's config: which format it holds, written once when it is created."""

    format: str
    version: int
    id: str
    """Random, 32 hex digits: names the repository in local caches."""


class IndexEntry(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """Where one object lies in its pack: `length` stored bytes from `offset`, `raw` unpacked."""

    digest: bytes
    offset: int
    length: int
    raw: int


class PackIndex(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one pack holds, in pack order.

    A pack is `SALT_BYTES` random bytes, then the entries' bytes end to end: the salt
    makes every pack a push writes new, even with the same objects as another (a
    push that uploads again what gc condemned must not recreate the condemned pack).
    """

    version: int
    pack: str
    """The pack's digest (BLAKE3 of all its bytes), which names it."""
    size: int
    trees: bool
    """The pack holds a push's trees (and maybe small file contents): a walk fetches it whole."""
    entries: list[IndexEntry]


class Listed(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A snapshot of a ref: its id, its record's digest (checked on pull), and which copy.

    Each push writes a record under a new name (`nonce`): a push never relies on a
    record already there, which gc may be deleting (an earlier, killed push's).
    """

    id: str
    record: str
    nonce: str


class SessionRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The snapshots of one session on the remote; changed only by compare-and-swap."""

    version: int
    session: str
    snapshots: list[Listed]
    """Sorted by id, no repeats."""
    nonce: str
    """Unique to each write: an ETag names bytes, so equal bytes must never be written twice."""


class Lease(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who runs gc now, until when (seconds since the epoch); taken over once expired."""

    version: int
    owner: str
    host: str
    expires: float


class Condemned(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A pack found unreachable by a gc at `since`; deleted by a gc a grace period later."""

    index: str
    since: float


class GcState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The packs gc has condemned: pushes never reuse their objects (they upload them anew)."""

    version: int
    condemned: list[Condemned]
    """Sorted by index key, no repeats."""
    nonce: str


class Forgotten(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The snapshots remote retention dropped from a session (`forgotten/<session>`).

    A push leaves them out unless named. The oldest go first past `MAX_FORGOTTEN`.
    """

    version: int
    session: str
    ids: list[str]
    """In the order they were dropped, no repeats."""
    nonce: str


MAX_FORGOTTEN = 50_000
"""The most ids a retention mark keeps (about 800 KB, under a ref's `MAX_REF_BYTES`)."""


_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()


def encode_config(config: Config) -> bytes:
    """Canonical JSON of a config."""
    return _json.encode(config) + b"\n"


def encode_index(index: PackIndex) -> bytes:
    """Canonical msgpack of a pack index (about 50 bytes an object)."""
    return _msgpack.encode(index)


def encode_ref(ref: SessionRef) -> bytes:
    """Canonical JSON of a session ref."""
    return _json.encode(ref) + b"\n"


def encode_forgotten(forgotten: Forgotten) -> bytes:
    """Canonical JSON of a session's retention mark (`Forgotten`)."""
    return _json.encode(forgotten) + b"\n"


def encode_lease(lease: Lease) -> bytes:
    """Canonical JSON of a gc lease."""
    return _json.encode(lease) + b"\n"


def encode_state(state: GcState) -> bytes:
    """Canonical JSON of the gc state."""
    return _json.encode(state) + b"\n"


class _Header(msgspec.Struct):
    version: int


def _strict(data: bytes, kind: type[_T], msgpack: bool, remote: str, key: str) -> _T:
    """Decodes `data` as `kind`: version checked first, then structure, then canonical form."""

    def refuse(reason: str) -> RemoteError:
        return RemoteError(remote, f"not a valid {kind.__name__.lower()}: {reason}", key=key)

    module = msgspec.msgpack if msgpack else msgspec.json
    try:
        header = module.decode(data, type=_Header)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise refuse(str(exc)) from None
    if header.version > VERSION:
        raise RemoteError(
            remote,
            f"written in remote format {header.version}, newer than this worksnap reads "
            f"({VERSION}); upgrade worksnap",
            key=key,
        )
    if header.version != VERSION:
        raise refuse(f"version {header.version}")
    try:
        value: _T = module.decode(data, type=kind)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise refuse(str(exc)) from None
    again = _msgpack.encode(value) if msgpack else _json.encode(value) + b"\n"
    if again != data:
        raise refuse("not in the canonical form worksnap writes")
    return value


def decode_config(data: bytes, remote: str, key: str) -> Config:
    """Parses a repository config, refusing another format or a newer version."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raw = None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise RemoteError(remote, "not a worksnap repository (its config is not ours)", key=key)
    config = _strict(data, Config, False, remote, key)
    if not re.fullmatch(r"[0-9a-f]{32}", config.id):
        raise RemoteError(remote, f"bad repository id {config.id!r}", key=key)
    return config


def decode_index(data: bytes, remote: str, key: str) -> PackIndex:
    """Parses a pack index: entries contiguous from 0 to `size`, digests unique, sizes sane."""
    index = _strict(data, PackIndex, True, remote, key)

    def refuse(reason: str) -> RemoteError:
        return RemoteError(remote, f"not a valid pack index: {reason}", key=key)

    if not is_digest(index.pack):
        raise refuse(f"bad pack digest {index.pack!r}")
    offset = SALT_BYTES
    for entry in index.entries:
        if len(entry.digest) != 32:
            raise refuse("an object digest is not 32 bytes")
        if entry.offset != offset or entry.length <= 0 or entry.raw < 0:
            raise refuse("its objects do not lie end to end")
        if entry.raw > MAX_OBJECT_BYTES:
            raise refuse(
                f"an object of {entry.raw} bytes, more than the {MAX_OBJECT_BYTES} allowed"
            )
        offset += entry.length
    if offset != index.size or not index.entries:
        raise refuse(f"its objects add up to {offset} bytes, not the pack's {index.size}")
    if len({e.digest for e in index.entries}) != len(index.entries):
        raise refuse("an object is listed twice")
    return index


def decode_ref(data: bytes, remote: str, key: str) -> SessionRef:
    """Parses a session ref: a valid session name, sorted unique snapshot ids, record digests."""
    ref = _strict(data, SessionRef, False, remote, key)
    if not SESSION_NAME.match(ref.session):
        raise RemoteError(remote, f"bad session name {ref.session!r}", key=key)
    ids = [s.id for s in ref.snapshots]
    if (
        any(not SNAPSHOT_ID.match(i) for i in ids)
        or any(a >= b for a, b in pairwise(ids))
        or any(not is_digest(s.record) or not NONCE.match(s.nonce) for s in ref.snapshots)
    ):
        raise RemoteError(remote, "its snapshots are bad, unsorted or repeated", key=key)
    return ref


def decode_forgotten(data: bytes, remote: str, key: str) -> Forgotten:
    """Parses a session's retention mark (`Forgotten`)."""
    cost = "deleting it only lets pushes send back what gc dropped"
    try:
        forgotten = _strict(data, Forgotten, False, remote, key)
    except RemoteError as exc:
        raise RemoteError(remote, f"{exc.reason}; {cost}", key=key) from None
    ids = forgotten.ids
    if (
        not SESSION_NAME.match(forgotten.session)
        or len(ids) > MAX_FORGOTTEN
        or len(set(ids)) != len(ids)
        or any(not SNAPSHOT_ID.match(i) for i in ids)
    ):
        raise RemoteError(remote, f"its session or ids are bad or repeated; {cost}", key=key)
    return forgotten


def decode_lease(data: bytes, remote: str, key: str) -> Lease:
    """Parses a gc lease."""
    return _strict(data, Lease, False, remote, key)


def decode_state(data: bytes, remote: str, key: str) -> GcState:
    """Parses the gc state: sorted unique index keys."""
    state = _strict(data, GcState, False, remote, key)
    keys = [c.index for c in state.condemned]
    if any(not is_digest(k) for k in keys) or any(a >= b for a, b in pairwise(keys)):
        raise RemoteError(remote, "its condemned packs are bad, unsorted or repeated", key=key)
    return state
