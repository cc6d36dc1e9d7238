"""Push and pull: snapshots and the objects they need, between a local store and a repository.

The write order makes a process killed at any point harmless:

1. packs, each followed by its index (an object is findable only once both are there);
2. snapshot records, each only after every object it needs is in an indexed pack;
3. the session's ref, by compare-and-swap, last: a snapshot is listed only when whole.

A killed push leaves packs (maybe without an index) and records no ref lists: gc
sweeps them after its grace period, and the next push uploads what is missing.

A pull trusts nothing: the ref and records are decoded strictly and checked, every
tree goes through the codec's checks (`treewalk.reachable`), every object is checked
against its digest. Trees are all read and checked before any object is added
locally, and records are saved last, each after every object it needs is flushed.

Concurrent gc (see `gc.py`): a push never reuses an object of a pack gc has
condemned, and a push that has run longer than half the grace period looks at the
indexes and gc's state again before it writes records, so a pack it relies on
cannot be deleted under it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from worksnap.errors import InputError, ManifestError, RemoteError
from worksnap.paths import Digest
from worksnap.record import Record, loose_of
from worksnap.remote.formats import MAX_OBJECT_BYTES, PackIndex
from worksnap.remote.packs import PackBuilder
from worksnap.remote.repository import (
    GRACE,
    PACK_BYTES,
    Location,
    Repository,
    locations,
    record_key,
    ref_key,
)
from worksnap.remote.treereader import TreeReader
from worksnap.treeshape import check_shape, size_problem
from worksnap.treewalk import flatten, reachable

_UPLOADS = 3
"""Packs uploaded at once by a push."""
PACK_OBJECTS = 100_000
"""The most objects a push puts in one pack: 8 MiB of tiny objects would make an index
over the `formats.MAX_INDEX_BYTES` every reader refuses (62 bytes an entry at most)."""
_AWAKE_OR_ASLEEP = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
"""A push's clock: Linux's monotonic clock stops while the machine is suspended (macOS's
CLOCK_MONOTONIC does not), and gc's grace is counted in wall-clock time."""

Progress = Callable[[int, int], None]
"""Called with (bytes, objects) sent or received so far."""


class LocalSide(Protocol):
    """What push and pull need of the local store (objects by digest, records by session)."""

    def records(self, session: str) -> list[Record]:
        """The session's snapshot records."""
        ...

    def has_record(self, snapshot_id: str) -> bool:
        """Whether the snapshot is stored locally."""
        ...

    def dropped(self) -> set[str]:
        """The ids of snapshots a local gc dropped (a plain pull leaves them out)."""
        ...

    def record(self, snapshot_id: str) -> Record | None:
        """The snapshot's local record (None: none, or damaged)."""
        ...

    def read(self, digest: Digest) -> bytes:
        """An object's bytes, checked against its digest (raises if missing or damaged)."""
        ...

    def has(self, digest: str) -> bool:
        """Whether the object is stored locally."""
        ...

    def add(self, digest: Digest, data: bytes) -> None:
        """Stores an object (already checked against `digest`)."""
        ...

    def flush(self) -> None:
        """Makes every object added so far durable and visible."""
        ...

    def save_record(self, record: Record) -> None:
        """Stores a snapshot record (after every object it needs is flushed)."""
        ...


@dataclass
class Result:
    """What a push or a pull moved."""

    snapshots: list[str] = field(default_factory=list)
    objects: int = 0
    bytes: int = 0
    packs: int = 0
    lost_packs: list[str] = field(default_factory=list)
    """Packs an index names that are not on the remote whole, or hold objects marked
    damaged (a push's: their objects, when needed, were sent again; `Repository.whole`)."""
    left_out: list[str] = field(default_factory=list)
    """A plain pull's: the session's snapshots here no longer, which a local gc dropped."""


def _noop(sent: int, objects: int) -> None:
    pass


def same_snapshot(local: Record, remote: Record) -> bool:
    """Whether two records are one snapshot, wherever each is bound.

    A pulled record is saved bound to the pulling store's root (`local.py`), and
    `worksnap rebind` rebinds a moved project's: the root is where a snapshot restores,
    not what it holds.
    """
    return msgspec.structs.replace(local, root=remote.root) == remote


@dataclass
class _Known:
    """What the pusher knows of the remote's objects, and since when (monotonic)."""

    indexes: dict[str, PackIndex]
    places: dict[str, Location]
    read_at: float


def _survey(
    repo: Repository, clock: Callable[[], float], cached: dict[str, PackIndex] | None = None
) -> _Known:
    """Reads which objects the remote holds in packs gc has not condemned."""
    started = clock()
    # The state first: a pack condemned after it was read was still listed as live,
    # and is safe for a grace period from the moment the state was read (gc.py).
    state, _ = repo.gc_state()
    listed = repo.index_digests()
    have = {k: v for k, v in (cached or {}).items() if k in listed}
    indexes = repo.whole({**have, **repo.load_indexes(listed - have.keys())})
    places = locations(indexes, avoid=(c.index for c in state.condemned))
    return _Known(indexes, places, started)


def _unlisted(
    repo: Repository, session: str, mine: dict[str, Record], listed: set[str]
) -> set[str]:
    """The session's snapshots the ref lacks, less those remote retention dropped."""
    unlisted = set(mine) - listed
    return unlisted - repo.forgotten(session) if unlisted else unlisted


def push(
    local: LocalSide,
    repo: Repository,
    session: str,
    *,
    ids: Iterable[str] | None = None,
    grace: float = GRACE,
    pack_bytes: int = PACK_BYTES,
    pack_objects: int = PACK_OBJECTS,
    max_object_bytes: int = MAX_OBJECT_BYTES,
    progress: Progress = _noop,
    clock: Callable[[], float] = lambda: time.clock_gettime(_AWAKE_OR_ASLEEP),
) -> Result:
    """Sends the session's snapshots the remote lacks (or those of `ids`), with their objects.

    Args:
        local: the local store.
        repo: the repository.
        session: the session whose snapshots and ref are pushed.
        ids: push these snapshots only (default: every one of the session the ref lacks,
            less those remote retention dropped: `_unlisted`).
        grace: gc's grace period (the same on every machine using the remote).
        pack_bytes: send a pack once it holds this many bytes.
        pack_objects: or this many objects.
        max_object_bytes: the largest object every reader takes (`formats.MAX_OBJECT_BYTES`;
            lower in tests): a push holding a larger file is refused before it sends anything.
        progress: called with (bytes, objects) sent so far.
        clock: seconds that count while the machine sleeps (a laptop suspended mid-push
            for hours must look again; a seam for the test of a slow push).

    Raises:
        RemoteError: the remote failed (nothing a pull could see is half-written).
        ObjectError: a local object is missing or damaged.
        InputError: one of `ids` is no snapshot of the session.
    """
    ref, etag = repo.get_ref(session)
    listed = {s.id: s for s in ref.snapshots} if ref is not None else {}
    mine = {r.id: r for r in local.records(session)}
    wanted = _unlisted(repo, session, mine, set(listed)) if ids is None else set(ids)
    unknown = sorted(wanted - mine.keys())
    if unknown:
        raise InputError(f"session {session!r} has no snapshot {unknown[0]} to push")
    again: list[Record] = []
    for snapshot_id in sorted(wanted & listed.keys()):
        # Named, and listed already: the same snapshot (pulled from there, so bound to
        # this root) is there; another one under its id is refused, never listed over it.
        if not same_snapshot(mine[snapshot_id], repo.get_record(listed[snapshot_id])):
            raise RemoteError(
                repo.url,
                f"lists snapshot {snapshot_id} with another record",
                key=ref_key(session),
            )
        wanted.discard(snapshot_id)
        again.append(mine[snapshot_id])  # what the remote lost of it is sent again
    records = sorted((mine[i] for i in wanted), key=lambda r: (r.time, r.id))
    result = Result(snapshots=[r.id for r in records])
    if not records and not again:
        return result
    _refuse_oversized(local, repo, [*records, *again], max_object_bytes)
    known = _survey(repo, clock)
    trees: set[str] = set()

    def read_tree(digest: Digest) -> bytes:
        trees.add(digest)
        return local.read(digest)

    needed: list[str] = []
    for digest in reachable([Digest(r.tree) for r in [*records, *again]], read_tree):
        needed.append(digest)
    needed.extend(d for r in [*records, *again] for d in r.attachments.values())
    # Packs holding objects marked damaged that this push sends again (once sent, not
    # named again: the pack stays while its other objects are needed).
    resent = {p for p, bad in repo.rotten.items() if (bad & set(needed)) - known.places.keys()}
    while True:
        _upload(
            local,
            repo,
            needed,
            trees=trees,
            known=known,
            result=result,
            progress=progress,
            pack_bytes=pack_bytes,
            pack_objects=pack_objects,
            max_object_bytes=max_object_bytes,
        )
        # A pack relied on since `read_at` is safe from gc for a grace period from then.
        if clock() - known.read_at <= grace / 2:
            break
        known = _survey(repo, clock, known.indexes)
    if records:
        entries = [repo.put_record(r) for r in records]
        repo.add_to_ref(session, entries, read=(ref, etag))
    result.lost_packs = sorted({*repo.lost.values(), *resent})
    return result


def _refuse_oversized(
    local: LocalSide, repo: Repository, records: list[Record], limit: int
) -> None:
    """Refuses the push, before it sends anything, if a snapshot holds a file over `limit`.

    Every reader refuses an index listing an object over `formats.MAX_OBJECT_BYTES` (its
    decompression would allocate that much): pushed, such a file stopped every push,
    pull, gc and verify of the remote. Objects are not split (that would change the
    format), so the push is refused, naming the file. Only a snapshot taken with a
    `max_file_bytes` over the limit can hold one: the others cost nothing here.

    Raises:
        RemoteError: a file is too large (names the snapshot, the file and both sizes).
    """
    for record in records:
        if record.max_file_bytes <= limit:
            continue
        for entry in flatten(Digest(record.tree), local.read, loose=loose_of(record)).entries:
            if entry.hash is not None and entry.size is not None and entry.size > limit:
                raise RemoteError(
                    repo.url,
                    f"snapshot {record.id} holds {entry.path}, which is {entry.size} bytes, "
                    f"more than the {limit} a remote object may hold; nothing was pushed "
                    "(push the other snapshots by id, or lower max-file-bytes for new ones)",
                )


def _upload(
    local: LocalSide,
    repo: Repository,
    needed: list[str],
    *,
    trees: set[str],
    known: _Known,
    result: Result,
    progress: Progress,
    pack_bytes: int,
    pack_objects: int,
    max_object_bytes: int,
) -> None:
    """Sends the objects of `needed` that `known` lacks, trees and file contents in apart packs.

    Up to `_UPLOADS` packs are in flight at once (each followed by its index in the same
    task); all have landed when this returns, before any record is written.
    """
    builders = {True: PackBuilder(trees=True), False: PackBuilder(trees=False)}
    sent: set[str] = set()
    pending: list[Future[tuple[str, PackIndex]]] = []

    def landed(future: Future[tuple[str, PackIndex]]) -> None:
        digest, index = future.result()
        known.indexes[digest] = index
        known.places.update(locations({digest: index}))
        result.packs += 1
        result.bytes += index.size
        progress(result.bytes, result.objects)

    with ThreadPoolExecutor(_UPLOADS) as pool:

        def send(builder: PackBuilder) -> None:
            while len(pending) >= _UPLOADS:  # bounds memory: packs wait whole in memory
                landed(pending.pop(0))
            pending.append(pool.submit(repo.put_pack, builder))

        try:
            for digest in needed:
                if digest in known.places or digest in sent:
                    continue
                sent.add(digest)
                is_tree = digest in trees
                builder = builders[is_tree]
                data = local.read(Digest(digest))
                if len(data) > max_object_bytes:
                    # An attachment (files were checked before anything was sent): no
                    # index lists it, and no record is written.
                    raise RemoteError(
                        repo.url,
                        f"object {digest} is {len(data)} bytes, more than the "
                        f"{max_object_bytes} a remote object may hold; no snapshot was listed",
                    )
                builder.add(digest, data)
                result.objects += 1
                if builder.size >= pack_bytes or len(builder) >= pack_objects:
                    send(builder)
                    builders[is_tree] = PackBuilder(trees=is_tree)
            trees_left, data_left = builders[True], builders[False]
            if (
                trees_left.size + data_left.size <= pack_bytes
                and len(trees_left) + len(data_left) <= pack_objects
            ):
                # One small pack (the usual push of a few changes): one request fewer, and
                # a pull that fetches it whole for its trees gets the contents with them.
                trees_left.absorb(data_left)
                data_left = PackBuilder(trees=False)
            for builder in (trees_left, data_left):
                if len(builder):
                    send(builder)
        except BaseException:
            # Every upload ends before this returns; the first failure is what is raised.
            for future in pending:
                future.exception()
            raise
        while pending:
            landed(pending.pop(0))  # the pool waits for the rest if one raises


def pull(
    local: LocalSide,
    repo: Repository,
    session: str,
    *,
    ids: Iterable[str] | None = None,
    progress: Progress = _noop,
    with_dropped: bool = False,
) -> Result:
    """Brings the session's snapshots the local store lacks (or those of `ids`), with their objects.

    Without `ids`, those a local gc dropped are left out (`Result.left_out`), unless
    `with_dropped`: a store that pulls and keeps a retention would never shrink.

    Raises:
        RemoteError: the remote failed, or something on it is damaged or hostile; no
            record of a snapshot whose objects were not all fetched and checked is saved.
    """
    ref, _ = repo.get_ref(session)
    listed = {s.id: s for s in ref.snapshots} if ref is not None else {}
    left_out: list[str] = []
    if ids is None:
        wanted = [s for i, s in listed.items() if not local.has_record(i)]
        if not with_dropped and wanted:
            dropped = local.dropped()
            left_out = sorted(s.id for s in wanted if s.id in dropped)
            wanted = [s for s in wanted if s.id not in dropped]
    else:
        unknown = sorted(set(ids) - listed.keys())
        if unknown:
            raise RemoteError(repo.url, f"session {session!r} has no snapshot {unknown[0]}")
        wanted = [listed[i] for i in sorted(set(ids))]
    records = []
    for entry in wanted:
        record = repo.get_record(entry)
        if record.session != session:
            raise RemoteError(
                repo.url,
                f"belongs to session {record.session!r}",
                key=record_key(record.id, entry.nonce),
            )
        if local.has_record(record.id):
            # Named, and here already: the same snapshot is not fetched again; another
            # one under its id (or a damaged record, which verify reports) is kept.
            mine = local.record(record.id)
            if mine is not None and not same_snapshot(mine, record):
                raise RemoteError(
                    repo.url,
                    f"snapshot {record.id} is another snapshot here; it was not overwritten",
                    key=record_key(record.id, entry.nonce),
                )
            continue
        records.append(record)
    result = Result(snapshots=[r.id for r in records], left_out=left_out)
    if not records:
        return result
    places = locations(repo.whole(repo.load_indexes()))  # (a copy sent again is whole)
    read_remote = TreeReader(repo, places, skip=local.has)

    def read(digest: Digest) -> bytes:
        if digest not in read_remote.fetched and local.has(digest):
            return local.read(digest)
        data = read_remote(digest)
        progress(read_remote.bytes, 0)
        return data

    # Every tree is read and checked (by the codec, then as a checked load would: split
    # directories' ranges, depth, paths) before anything is stored.
    try:
        sizes = check_shape([Digest(r.tree) for r in records], read)
        needed: list[str] = list(reachable([Digest(r.tree) for r in records], read))
    except ManifestError as exc:
        raise RemoteError(repo.url, f"refused: {exc}") from None

    def checked(digest: str, data: bytes) -> bytes:
        if (problem := size_problem(digest, data, sizes)) is not None:
            raise RemoteError(repo.url, f"refused: {problem}")
        return data

    needed.extend(d for r in records for d in r.attachments.values())
    missing = [d for d in dict.fromkeys(needed) if not local.has(d)]
    fetched = read_remote.fetched
    data_places = {d: read_remote.place(d) for d in missing if d not in fetched}
    result.bytes = read_remote.bytes
    for digest in missing:  # (checked first: nothing is stored if one is refused)
        if digest in fetched:
            checked(digest, fetched[digest])
    for digest in missing:
        if digest in fetched:
            local.add(Digest(digest), fetched[digest])
            result.objects += 1
    progress(result.bytes, result.objects)
    for digest, data in repo.read_objects(data_places.items()):
        local.add(Digest(digest), checked(digest, data))
        result.objects += 1
        result.bytes += data_places[digest].length
        progress(result.bytes, result.objects)
    local.flush()
    for record in records:
        local.save_record(record)
    return result
