"""A worksnap repository on a remote store: its layout and the operations on it.

Layout (keys; learned from restic and kopia):

    config                  format tag and version (created once, if absent)
    data/<d[:2]>/<d>        a pack: zstd frames of objects end to end; <d> = BLAKE3 of the pack
    index/<i>               what one pack holds; <i> = BLAKE3 of the index's own bytes
    snapshots/<id>.<nonce>  a snapshot record (format 2's canonical JSON, `record.py`); a new
                            nonce each time one is pushed
    refs/<session>          one session's snapshots: ids and record digests (compare-and-swap only)
    data/<d[:2]>/<d>.<o>    empty: object <o> of pack <d> failed its check (`verify` writes it)
    gc/lease                who runs gc, until when
    gc/state                packs a gc condemned, and since when

Everything but refs and `gc/*` is immutable, named by its content (records by their
id and a nonce), created with `put_if_absent`. Reading trusts
nothing: every object is checked against its digest after decompression, every size
is bounded before a byte is read, and every small object is decoded strictly (see
`formats.py`). Knows nothing of the local store: objects come and go as bytes.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import zstandard
from blake3 import blake3

from worksnap.errors import ManifestError, RemoteError
from worksnap.hash import hash_bytes
from worksnap.paths import is_digest
from worksnap.record import MAX_RECORD_BYTES, Record, check_record, decode_record, encode_record
from worksnap.remote import formats
from worksnap.remote.formats import Config, GcState, Listed, PackIndex, SessionRef
from worksnap.remote.indexcache import IndexCache
from worksnap.remote.packs import PackBuilder, without
from worksnap.remote.transport import MAX_REF_BYTES, PROBE, ListEntry, Transport

CONFIG_KEY = "config"
LEASE_KEY = "gc/lease"
STATE_KEY = "gc/state"
DATA, INDEX, SNAPSHOTS, REFS, FORGOTTEN = "data", "index", "snapshots", "refs", "forgotten"
FOLDERS = (DATA, INDEX, SNAPSHOTS, REFS, FORGOTTEN, "gc", PROBE)
"""The top-level folders of the layout (and `remote add`'s probe): all `remote gc` sweeps."""

GRACE = 3600.0
"""Seconds: gc deletes nothing younger, and condemned packs only this long after (gc.py)."""

PACK_BYTES = 8 << 20
"""A pack is sent once it holds this much (an object larger than this is a pack alone)."""

MAX_REF_UPDATES = 50
"""Compare-and-swap tries of one ref update before giving up (each lost one = another won)."""

_FETCHERS = 4


def pack_key(digest: str) -> str:
    """The key of the pack whose bytes have `digest`."""
    return f"{DATA}/{digest[:2]}/{digest}"


def index_key(digest: str) -> str:
    """The key of the index whose bytes have `digest`."""
    return f"{INDEX}/{digest}"


def damaged_key(pack: str, digest: str) -> str:
    """The key of the mark saying object `digest` of `pack` failed its check.

    Beside the pack, so the listing of packs every reader makes finds the marks too.
    """
    return f"{pack_key(pack)}.{digest}"


def record_key(snapshot_id: str, nonce: str) -> str:
    """The key of one pushed copy of a snapshot record."""
    return f"{SNAPSHOTS}/{snapshot_id}.{nonce}"


def ref_key(session: str, prefix: str = REFS) -> str:
    """The key of a session's ref (or, with `FORGOTTEN`, of its retention mark)."""
    if not formats.SESSION_NAME.match(session):
        raise ValueError(f"not a session name: {session!r}")
    return f"{prefix}/{session}"


@dataclass(frozen=True, slots=True)
class Location:
    """Where an object lies on the remote."""

    index: str
    """Digest of the index that lists it (what gc condemns)."""
    pack: str
    offset: int
    length: int
    raw: int
    trees: bool


def locations(indexes: dict[str, PackIndex], *, avoid: Iterable[str] = ()) -> dict[str, Location]:
    """Maps every object digest to one place holding it, from indexes keyed by their digest.

    Objects of the indexes in `avoid` (condemned by gc) are left out.
    """
    skip = set(avoid)
    found: dict[str, Location] = {}
    for key in sorted(indexes):
        if key in skip:
            continue
        index = indexes[key]
        for e in index.entries:
            found.setdefault(
                e.digest.hex(), Location(key, index.pack, e.offset, e.length, e.raw, index.trees)
            )
    return found


def unpack_object(frame: bytes, location: Location, digest: str, remote: str) -> bytes:
    """Returns an object's bytes from its stored frame, checked against its digest.

    Raises:
        RemoteError: the frame is damaged or not the object (names the pack).
    """
    key = pack_key(location.pack)
    try:
        size = zstandard.frame_content_size(frame)
        if size != location.raw:
            raise RemoteError(remote, f"object {digest} is not the size its index gives", key=key)
        data = zstandard.ZstdDecompressor().decompress(frame, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise RemoteError(remote, f"object {digest} is damaged ({exc})", key=key) from None
    if len(data) != location.raw or hash_bytes(data) != digest:
        raise RemoteError(remote, f"object {digest} does not match its digest", key=key)
    return data


class Repository:
    """A repository on `transport`; `open` reads (or creates) its config first."""

    def __init__(
        self, transport: Transport, config: Config, cache: str | None, trusted: str | None = None
    ) -> None:
        self.transport = transport
        self.config = config
        self.url = transport.url
        self._cache = IndexCache(cache, config.id, trusted) if cache is not None else None
        self.damaged: dict[str, str] = {}
        """Indexes `load_indexes` found damaged, by digest: one line each, for verify."""
        self.lost: dict[str, str] = {}
        """Indexes `whole` found without their pack, by digest: the pack's digest."""
        self.rotten: dict[str, set[str]] = {}
        """Objects marked damaged (`damaged_key`), by pack, as `pack_listing` last found."""

    @classmethod
    def open(
        cls,
        transport: Transport,
        *,
        cache: str | None = None,
        trusted: str | None = None,
        create: bool = False,
    ) -> Repository:
        """Opens the repository, creating its config if `create` and there is none.

        Args:
            transport: the remote store.
            cache: a local directory for index objects (immutable: cached by key).
            trusted: a folder above `cache` (default: its parent) below which no folder
                of the cache is reached through a symlink (the store's directory).
            create: write a config if there is none (two creators at once: one wins,
                both use its config).

        Raises:
            RemoteError: no repository there (and not `create`), a damaged config, or
                a newer format ("upgrade worksnap").
        """
        try:
            data = transport.get(CONFIG_KEY, max_bytes=formats.MAX_CONFIG_BYTES)
        except RemoteError as exc:
            if exc.reason != "missing" or exc.key != CONFIG_KEY:
                raise
            if not create:
                raise RemoteError(
                    transport.url, "no worksnap repository here (push creates one)"
                ) from None
            fresh = Config(format=formats.FORMAT, version=formats.VERSION, id=secrets.token_hex(16))
            transport.put_if_absent(CONFIG_KEY, formats.encode_config(fresh))
            data = transport.get(CONFIG_KEY, max_bytes=formats.MAX_CONFIG_BYTES)
        config = formats.decode_config(data, transport.url, CONFIG_KEY)
        return cls(transport, config, cache, trusted)

    @classmethod
    def add(
        cls, transport: Transport, *, cache: str | None = None, trusted: str | None = None
    ) -> Repository:
        """What `remote add` does: probes the store's conditional writes, then opens or creates.

        Raises:
            RefusedStoreError: the store does not enforce conditional writes (nothing
                but the probe's own keys, removed again, was written).
            RemoteError: the store failed, or holds something that is not a repository.
        """
        transport.probe()
        return cls.open(transport, cache=cache, trusted=trusted, create=True)

    # -- indexes and packs --------------------------------------------------------------

    def index_digests(self) -> set[str]:
        """The digests of the indexes now on the remote (one listing)."""
        found = set()
        for entry in self.transport.list_keys(INDEX):
            name = entry.key.rpartition("/")[2]
            if entry.key == index_key(name) and is_digest(name):
                found.add(name)
        return found

    def load_indexes(self, digests: Iterable[str] | None = None) -> dict[str, PackIndex]:
        """Reads the indexes (default: all listed), from the local cache where it has them.

        A damaged or hostile index is left out and noted in `damaged`, as the local store
        does with a damaged pack index: its pack's objects are unreachable (a push sends
        them again), `verify` names it, and gc leaves it and every unindexed pack alone.
        It stopped every push, gc and verify of the remote.

        Raises:
            RemoteError: the store failed.
        """
        wanted = sorted(self.index_digests() if digests is None else digests)
        found: dict[str, PackIndex] = {}
        missing = []
        for digest in wanted:
            cache = self._cache
            cached = cache.get(digest, self.url, index_key(digest)) if cache is not None else None
            if cached is None:
                missing.append(digest)
            else:
                found[digest] = cached
        if missing:
            with ThreadPoolExecutor(_FETCHERS) as pool:
                for digest, index in zip(
                    missing, pool.map(self._fetch_index, missing), strict=True
                ):
                    if index is not None:
                        found[digest] = index
        return found

    def whole(
        self, indexes: dict[str, PackIndex], packs: dict[str, ListEntry] | None = None
    ) -> dict[str, PackIndex]:
        """The `indexes` whose pack is on the remote whole; the others are noted in `lost`.

        A pack is written before its index, so an index without its pack (or with one of
        another size) is damage: a bucket's lifecycle rule, a partial copy. Its objects are
        unreachable, as a damaged index's are: a push sends them again (it said it pushed
        a snapshot no one could pull), and gc deletes the index (every gc failed on the
        missing pack). `packs`: the pack listing, when the caller has one.

        The objects `verify` marked damaged in a pack of the right size (bit rot) are left
        out of its index the same way (noted in `rotten`): every push reused them
        unread, and listed snapshots no one could pull.
        """
        packs = self.pack_listing() if packs is None else packs
        found: dict[str, PackIndex] = {}
        for digest, index in indexes.items():
            entry = packs.get(index.pack)
            if entry is None or entry.size != index.size:
                self.lost[digest] = index.pack
            elif bad := self.rotten.get(index.pack):
                found[digest] = without(index, bad)
            else:
                found[digest] = index
        return found

    def mark_damaged(self, pack: str, digest: str) -> None:
        """Marks object `digest` of `pack` damaged: readers leave it out of its index."""
        self.transport.put_if_absent(damaged_key(pack, digest), b"")
        self.rotten.setdefault(pack, set()).add(digest)

    def _remember(self, digest: str, data: bytes) -> None:
        if self._cache is not None:
            self._cache.put(digest, data)

    def _fetch_index(self, digest: str) -> PackIndex | None:
        key = index_key(digest)
        try:
            data = self.transport.get(key, max_bytes=formats.MAX_INDEX_BYTES)
        except RemoteError as exc:
            if exc.reason == "missing":
                # Listed, then deleted by a gc: it had condemned the pack a grace period
                # earlier, so no push may use it, and no listed snapshot needs it.
                return None
            raise
        try:
            if blake3(data).hexdigest() != digest:
                raise RemoteError(self.url, "does not match its digest (damaged?)", key=key)
            index = formats.decode_index(data, self.url, key)
        except RemoteError as exc:
            self.damaged[digest] = str(exc)
            return None
        self._remember(digest, data)
        return index

    def put_pack(self, builder: PackBuilder) -> tuple[str, PackIndex]:
        """Writes a pack, then its index (a pack without an index is invisible, and swept).

        Returns:
            The index's digest and the index.
        """
        data, index = builder.finish()
        self.transport.put_if_absent(pack_key(index.pack), data)
        encoded = formats.encode_index(index)
        digest = blake3(encoded).hexdigest()
        self.transport.put_if_absent(index_key(digest), encoded)
        self._remember(digest, encoded)
        return digest, index

    def read_objects(
        self,
        wanted: Iterable[tuple[str, Location]],
        *,
        spare: Container[str] = frozenset(),
        gap: int = 64 << 10,
        span: int = 8 << 20,
    ) -> Iterator[tuple[str, bytes]]:
        """Yields (digest, bytes) of objects, each checked, fetching adjacent ones in one range.

        Ranges of one pack less than `gap` apart are read together, up to `span` bytes
        (an object larger than that is one range alone). Fetches run a few at a time.
        An object of `spare` (fetched only because it lies beside one asked for) that
        fails its check is left out, not raised: one damaged neighbour stopped every
        pull and gc that read its pack's trees (its own reader fetches it and raises).
        """
        runs = _coalesce(sorted(set(wanted), key=lambda w: (w[1].pack, w[1].offset)), gap, span)
        with ThreadPoolExecutor(_FETCHERS) as pool:
            # A few ranges ahead, not all (`map` submits all: a 725 MiB pull took 775 MB).
            ahead = deque(pool.submit(self._read_run, run) for run in runs[: 2 * _FETCHERS])
            for i, run in enumerate(runs):
                blob = ahead.popleft().result()
                if i + 2 * _FETCHERS < len(runs):
                    ahead.append(pool.submit(self._read_run, runs[i + 2 * _FETCHERS]))
                start = run[0][1].offset
                for digest, where in run:
                    frame = blob[where.offset - start : where.offset - start + where.length]
                    try:
                        data = unpack_object(frame, where, digest, self.url)
                    except RemoteError:
                        if digest in spare:
                            continue
                        raise
                    yield digest, data

    def _read_run(self, run: list[tuple[str, Location]]) -> bytes:
        first, last = run[0][1], run[-1][1]
        return self.transport.get_range(
            pack_key(first.pack), first.offset, last.offset + last.length - first.offset
        )

    def pack_listing(self) -> dict[str, ListEntry]:
        """Every pack on the remote, by digest, with its size and time (gc).

        The same listing finds the objects marked damaged: kept in `rotten`.
        """
        found: dict[str, ListEntry] = {}
        self.rotten = {}
        for entry in self.transport.list_keys(DATA):
            pack, _, digest = entry.key.rpartition("/")[2].partition(".")
            if not is_digest(pack):
                continue
            if entry.key == pack_key(pack):
                found[pack] = entry
            elif is_digest(digest) and entry.key == damaged_key(pack, digest):
                self.rotten.setdefault(pack, set()).add(digest)
        return found

    def index_listing(self) -> dict[str, ListEntry]:
        """Every index on the remote, by digest, with its time (gc)."""
        return {
            name: entry
            for entry in self.transport.list_keys(INDEX)
            if is_digest(name := entry.key.rpartition("/")[2]) and entry.key == index_key(name)
        }

    # -- records ------------------------------------------------------------------

    def get_record(self, listed: Listed) -> Record:
        """Reads and checks a snapshot record a ref lists (its trees are checked as they are read).

        Raises:
            RemoteError: missing, not the bytes the ref names, or not a valid record.
        """
        return self.read_record(listed.id, listed.nonce, digest=listed.record)

    def read_record(self, snapshot_id: str, nonce: str, *, digest: str | None = None) -> Record:
        """Reads and checks a snapshot record by key (gc: one no ref lists yet).

        Raises:
            RemoteError: missing, not of `digest` (if given), or not a valid record.
        """
        key = record_key(snapshot_id, nonce)
        data = self.transport.get(key, max_bytes=MAX_RECORD_BYTES)
        if digest is not None and blake3(data).hexdigest() != digest:
            raise RemoteError(self.url, "is not the record its session's ref names", key=key)
        try:
            record = decode_record(data, key)
            check_record(record, root=record.root, source=key)
        except ManifestError as exc:
            raise RemoteError(self.url, str(exc), key=key) from None
        if record.id != snapshot_id:
            raise RemoteError(self.url, f"holds snapshot {record.id}, not {snapshot_id}", key=key)
        return record

    def put_record(self, record: Record) -> Listed:
        """Writes a snapshot record under a new name (never relying on one already there).

        Returns:
            Its entry for the session's ref.

        Raises:
            RemoteError: the record is larger than `record.MAX_RECORD_BYTES` (nothing written).
        """
        data = encode_record(record)
        if len(data) > MAX_RECORD_BYTES:
            # Every reader refuses a bigger one: written, it stopped every pull, gc, verify.
            raise RemoteError(
                self.url,
                f"snapshot {record.id}'s record is {len(data)} bytes, more than the "
                f"{MAX_RECORD_BYTES} a reader takes; nothing was written",
            )
        while True:
            nonce = secrets.token_hex(8)
            if self.transport.put_if_absent(record_key(record.id, nonce), data):
                return Listed(record.id, blake3(data).hexdigest(), nonce)

    def record_listing(self) -> dict[tuple[str, str], ListEntry]:
        """Every record on the remote, by (snapshot id, nonce)."""
        found = {}
        for entry in self.transport.list_keys(SNAPSHOTS):
            snapshot_id, _, nonce = entry.key.rpartition("/")[2].partition(".")
            if (
                formats.SNAPSHOT_ID.match(snapshot_id)
                and formats.NONCE.match(nonce)
                and entry.key == record_key(snapshot_id, nonce)
            ):
                found[snapshot_id, nonce] = entry
        return found

    # -- refs ------------------------------------------------------------------------

    def sessions(self) -> list[str]:
        """The sessions that have a ref."""
        names = [e.key.rpartition("/")[2] for e in self.transport.list_keys(REFS)]
        return sorted(n for n in names if formats.SESSION_NAME.match(n))

    def get_ref(self, session: str) -> tuple[SessionRef | None, str | None]:
        """A session's ref and its ETag (None, None: no such session on the remote)."""
        key = ref_key(session)
        found = self.transport.get_ref(key)
        if found is None:
            return None, None
        ref = formats.decode_ref(found.data, self.url, key)
        if ref.session != session:
            raise RemoteError(self.url, f"is the ref of session {ref.session!r}", key=key)
        return ref, found.etag

    def add_to_ref(
        self,
        session: str,
        adding: Iterable[Listed],
        *,
        read: tuple[SessionRef | None, str | None] | None = None,
    ) -> SessionRef:
        """Adds snapshots to a session's ref by compare-and-swap, keeping every one there.

        A lost swap means another pusher changed the ref: it is read again and merged.

        Args:
            session: the session.
            adding: the snapshots to list.
            read: the ref and ETag as read earlier, tried first (saves a request).

        Raises:
            RemoteError: the ref kept changing (`MAX_REF_UPDATES` lost swaps), or lists
                one of these ids with another record.
        """
        new_ones = {s.id: s for s in adding}
        for _ in range(MAX_REF_UPDATES):
            ref, etag = read if read is not None else self.get_ref(session)
            read = None
            have = {s.id: s for s in ref.snapshots} if ref is not None else {}
            clash = [i for i, s in new_ones.items() if have.get(i, s).record != s.record]
            if clash:
                raise RemoteError(
                    self.url, f"lists snapshot {clash[0]} with another record", key=ref_key(session)
                )
            if ref is not None and new_ones.keys() <= have.keys():
                return ref
            new = SessionRef(
                version=formats.VERSION,
                session=session,
                # A snapshot listed already keeps its entry (its copy is the one listed).
                snapshots=sorted({**new_ones, **have}.values(), key=lambda s: s.id),
                nonce=secrets.token_hex(8),
            )
            if len(data := formats.encode_ref(new)) > MAX_REF_BYTES:
                # Every reader refuses a bigger ref: written, it would stop every command.
                raise RemoteError(
                    self.url,
                    f"session {session!r} would list {len(new.snapshots)} snapshots, more than "
                    f"a ref holds ({MAX_REF_BYTES >> 20} MiB): drop old ones first with "
                    "`worksnap remote gc NAME --keep-last N`",
                    key=ref_key(session),
                )
            if self.transport.swap_ref(ref_key(session), data, etag):
                return new
        raise RemoteError(self.url, "the ref kept changing; try again", key=ref_key(session))

    def forgotten(self, session: str) -> set[str]:
        """The snapshots remote retention dropped from the session (`Forgotten`)."""
        key = ref_key(session, FORGOTTEN)
        if (found := self.transport.get_ref(key)) is None:
            return set()
        return set(formats.decode_forgotten(found.data, self.url, key).ids)

    def forget(self, session: str, ids: Iterable[str]) -> None:
        """Adds `ids` to the session's retention mark (compare-and-swap; oldest go first).

        Raises:
            RemoteError: the mark kept changing (`MAX_REF_UPDATES` lost swaps).
        """
        key = ref_key(session, FORGOTTEN)
        for _ in range(MAX_REF_UPDATES):
            found = self.transport.get_ref(key)
            was = formats.decode_forgotten(found.data, self.url, key).ids if found else []
            merged = list(dict.fromkeys([*was, *sorted(ids)]))[-formats.MAX_FORGOTTEN :]
            if merged == was:
                return
            mark = formats.Forgotten(version=formats.VERSION, session=session, ids=merged,
                                     nonce=secrets.token_hex(8))  # fmt: skip
            if self.transport.swap_ref(key, formats.encode_forgotten(mark), found and found.etag):
                return
        raise RemoteError(self.url, "the retention mark kept changing; try again", key=key)

    def remove_from_ref(self, session: str, ids: Iterable[str]) -> SessionRef | None:
        """Drops snapshots from a session's ref by compare-and-swap (remote retention).

        Whatever another pusher added meanwhile is kept: each try starts from the ref
        as it is now.

        Raises:
            RemoteError: the ref kept changing (`MAX_REF_UPDATES` lost swaps).
        """
        dropping = set(ids)
        for _ in range(MAX_REF_UPDATES):
            ref, etag = self.get_ref(session)
            if ref is None or not dropping & {s.id for s in ref.snapshots}:
                return ref
            new = SessionRef(
                version=formats.VERSION,
                session=session,
                snapshots=[s for s in ref.snapshots if s.id not in dropping],
                nonce=secrets.token_hex(8),
            )
            if self.transport.swap_ref(ref_key(session), formats.encode_ref(new), etag):
                return new
        raise RemoteError(self.url, "the ref kept changing; try again", key=ref_key(session))

    # -- gc's objects --------------------------------------------------------------------

    def gc_state(self) -> tuple[GcState, str | None]:
        """The packs gc has condemned, and the state's ETag (None: no state yet)."""
        found = self.transport.get_ref(STATE_KEY, max_bytes=formats.MAX_STATE_BYTES)
        if found is None:
            return GcState(version=formats.VERSION, condemned=[], nonce=""), None
        return formats.decode_state(found.data, self.url, STATE_KEY), found.etag


def _coalesce(
    wanted: list[tuple[str, Location]], gap: int, span: int
) -> list[list[tuple[str, Location]]]:
    runs: list[list[tuple[str, Location]]] = []
    for item in wanted:
        where = item[1]
        if runs:
            last = runs[-1][-1][1]
            first = runs[-1][0][1]
            end = last.offset + last.length
            if (
                where.pack == last.pack
                and end <= where.offset <= end + gap
                and where.offset + where.length - first.offset <= span
            ):
                runs[-1].append(item)
                continue
        runs.append([item])
    return runs
