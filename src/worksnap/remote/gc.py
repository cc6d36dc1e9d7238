"""Remote gc (mark and sweep with a grace period, under a lease) and remote verify.

Consistency with pushes running at the same time, with no lock between them:

- Mark: every snapshot a ref lists, and every record younger than the grace period
  (a push writes its records before its ref), with every object their trees reach.
- A pack whose objects are all unmarked is not deleted: it is *condemned* (its index
  goes into `gc/state` with the time the state is written). A push reads that state
  before it lists indexes and never reuses a condemned pack's objects.
- A later gc deletes a condemned pack only if its mark, begun at least `grace` after
  the condemnation, still finds nothing in it. A push that read the state before the
  condemnation writes its ref within `grace / 2` of that read (`sync.push` looks
  again otherwise), so that mark sees the ref and keeps the pack.
- Only packs whose index is older than the grace period are condemned: a concurrent
  push's new packs are younger. A pack without an index (a killed push) is deleted
  once older than the grace period; so is a record no ref lists.
- `gc/lease` (compare-and-swap; expires) keeps two gcs from running at once; a gc
  renews it before deleting, and stops if it lost it.

Times are each machine's wall clock and the store's object times: clocks must agree
to well within the grace period (an hour by default).
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from blake3 import blake3

from worksnap.config import Retention
from worksnap.errors import ManifestError, ObjectError, RemoteError
from worksnap.paths import Digest
from worksnap.record import Record, summary_of
from worksnap.remote import formats
from worksnap.remote.formats import Condemned, GcState, Lease, Listed
from worksnap.remote.packs import without
from worksnap.remote.repository import (
    FOLDERS,
    GRACE,
    LEASE_KEY,
    STATE_KEY,
    Location,
    Repository,
    damaged_key,
    index_key,
    locations,
    pack_key,
    record_key,
    unpack_object,
)
from worksnap.remote.treereader import TreeReader
from worksnap.retention import select_expired
from worksnap.treeshape import check_shape, size_problem
from worksnap.treewalk import reachable

LEASE_SECONDS = 900.0
"""How long a gc lease lasts unless renewed (a killed gc blocks others this long at most)."""


@dataclass
class GcResult:
    """What a remote gc did."""

    kept_packs: int = 0
    condemned: int = 0
    deleted_packs: int = 0
    deleted_bytes: int = 0
    deleted_records: int = 0
    deleted_leftovers: int = 0
    """Temp files of pushes killed part-way (`file://` remotes), older than the grace."""
    forgotten: list[str] = field(default_factory=list)
    """Snapshots the retention policy dropped from the refs."""
    damaged_indexes: list[str] = field(default_factory=list)
    """Indexes that could not be read: left alone, with every pack no index lists."""
    lost_indexes: list[str] = field(default_factory=list)
    """Indexes whose pack was not there whole (`Repository.whole`), deleted (a dry run:
    that would be)."""


class GcLease:
    """The gc lease, held by this process from `acquire` until `release`."""

    def __init__(self, repo: Repository, now: Callable[[], float]) -> None:
        self.repo = repo
        self.owner = secrets.token_hex(8)
        self._now = now

    def acquire(self) -> None:
        """Takes the lease if nobody holds it (or the holder's has expired).

        Raises:
            RemoteError: another gc holds it.
        """
        found = self.repo.transport.get_ref(LEASE_KEY)
        if found is not None:
            held = formats.decode_lease(found.data, self.repo.url, LEASE_KEY)
            if held.expires > self._now():
                raise RemoteError(
                    self.repo.url,
                    f"another gc (on {held.host}) holds the lease for "
                    f"{held.expires - self._now():.0f} s more",
                )
        if not self._write(found.etag if found is not None else None):
            raise RemoteError(self.repo.url, "another gc took the lease just now")

    def renew(self) -> None:
        """Extends the lease; raises `RemoteError` if it was lost (expired and taken)."""
        found = self.repo.transport.get_ref(LEASE_KEY)
        held = formats.decode_lease(found.data, self.repo.url, LEASE_KEY) if found else None
        if found is None or held is None or held.owner != self.owner or not self._write(found.etag):
            raise RemoteError(
                self.repo.url, "this gc lost its lease (it ran too long); run it again"
            )

    def release(self) -> None:
        """Gives the lease up (if still held)."""
        found = self.repo.transport.get_ref(LEASE_KEY)
        if found is not None:
            held = formats.decode_lease(found.data, self.repo.url, LEASE_KEY)
            if held.owner == self.owner:
                self.repo.transport.delete(LEASE_KEY)

    def _write(self, etag: str | None) -> bool:
        lease = Lease(
            version=formats.VERSION,
            owner=self.owner,
            host=socket.gethostname(),
            expires=self._now() + LEASE_SECONDS,
        )
        return self.repo.transport.swap_ref(LEASE_KEY, formats.encode_lease(lease), etag)


def collect(
    repo: Repository,
    *,
    retention: Retention | None = None,
    keep: set[str] | None = None,
    grace: float = GRACE,
    now: Callable[[], float] = time.time,
    dry_run: bool = False,
) -> GcResult:
    """Runs one remote gc (see the module's docstring).

    Args:
        repo: the repository.
        retention: first drop from the refs the snapshots this policy expires (the
            local gc's policy, counted over the remote's snapshots).
        keep: snapshot ids the policy must not drop.
        grace: nothing younger is deleted, and a condemned pack only this long after.
        now: the wall clock (seconds since the epoch).
        dry_run: write and delete nothing (no lease either): count what a gc now
            would drop, condemn and delete.

    Raises:
        RemoteError: another gc runs, the lease was lost, or the remote is damaged (a
            ref naming a missing record, an unreadable tree): nothing is deleted then.
    """
    lease = None if dry_run else GcLease(repo, now)
    if lease is not None:
        lease.acquire()
    try:
        dropped = []
        if retention is not None and not retention.is_empty():
            dropped = forget(repo, retention, keep=keep or set(), now=now(), dry_run=dry_run)
        result = _collect(repo, lease, grace, now, dropped=set(dropped) if dry_run else set())
        result.forgotten = dropped
        return result
    finally:
        if lease is not None:
            lease.release()


def forget(
    repo: Repository, policy: Retention, *, keep: set[str], now: float, dry_run: bool = False
) -> list[str]:
    """Drops from the refs the snapshots `policy` expires; their objects go with later sweeps.

    With `dry_run`, only says which.

    Returns:
        The ids dropped.
    """
    records: dict[str, Record] = {}
    by_session: dict[str, list[str]] = {}
    for session in repo.sessions():
        ref, _ = repo.get_ref(session)
        for listed in ref.snapshots if ref is not None else ():
            records[listed.id] = repo.get_record(listed)
            by_session.setdefault(session, []).append(listed.id)
    places: dict[str, Location] | None = None

    def object_sizes(snapshot_id: str) -> dict[str, int]:
        nonlocal places
        if places is None:
            places = locations(repo.load_indexes())
        record = records[snapshot_id]
        found = reachable([Digest(record.tree)], TreeReader(repo, places))
        return {d: places[d].raw if d in places else 0 for d in found}

    expired = select_expired(
        [summary_of(r) for r in records.values()],
        policy,
        keep=keep,
        now=datetime.fromtimestamp(now, timezone.utc),
        object_sizes=object_sizes,
    )
    dropping = set(expired)
    for session, ids in sorted(by_session.items()):
        if dry_run:
            break
        if dropped := dropping & set(ids):
            # The mark first: a push never sends again what it drops (killed between the
            # two, the next gc drops them again).
            repo.forget(session, dropped)
            repo.remove_from_ref(session, dropping)
    return sorted(dropping)


def _collect(
    repo: Repository,
    lease: GcLease | None,
    grace: float,
    now: Callable[[], float],
    *,
    dropped: set[str],
) -> GcResult:
    """Marks and sweeps; with no `lease` (a dry run), counts and writes nothing.

    `dropped`: snapshots a dry run's retention would have taken off the refs.
    """
    result = GcResult()
    started = now()
    state, state_etag = repo.gc_state()
    listed: list[Listed] = []
    for session in repo.sessions():
        ref, _ = repo.get_ref(session)
        listed.extend(s for s in (ref.snapshots if ref is not None else ()) if s.id not in dropped)
    # Listed after the refs were read: a record a ref names was written before the ref.
    records = repo.record_listing()
    keys = {(s.id, s.nonce) for s in listed}
    absent = keys - records.keys()
    if absent:
        raise RemoteError(repo.url, f"refs name snapshots with no record: {sorted(absent)[:3]}")
    # A young record no ref lists yet is a push under way: its record is read by key.
    young = [
        k for k, e in records.items() if k not in keys and e.modified.timestamp() > started - grace
    ]
    index_times = repo.index_listing()
    packs = repo.pack_listing()
    indexes = repo.whole(repo.load_indexes(index_times), packs)
    marked = _mark(repo, indexes, listed, young)
    # What a listed snapshot needs and no index places (an index lost, or moved away by
    # hand): a pack no index lists may be the only copy, so none is deleted.
    located = {e.digest.hex() for index in indexes.values() for e in index.entries}
    unplaced = not marked <= located
    # Of no use to anyone, and every gc failed on the pack; past the grace period, as
    # a pack is written before its index (a listing a moment apart may see the index only).
    lost = [d for d in sorted(repo.lost) if index_times[d].modified.timestamp() <= started - grace]
    result.lost_indexes = lost

    since = {c.index: c.since for c in state.condemned}
    keep: dict[str, float] = {}
    doomed: list[str] = []
    for digest, index in sorted(indexes.items()):
        if any(e.digest.hex() in marked for e in index.entries):
            result.kept_packs += 1
        elif digest in since:
            if started - since[digest] >= grace:
                doomed.append(digest)
            else:
                keep[digest] = since[digest]
        elif index_times[digest].modified.timestamp() <= started - grace:
            keep[digest] = -1.0  # condemned now: its time is when the state is written
    result.condemned = sum(1 for t in keep.values() if t < 0)
    surviving = {indexes[d].pack for d in indexes if d not in doomed}
    indexed = {index.pack for index in indexes.values()}
    result.damaged_indexes = sorted(repo.damaged)
    unindexed = [  # a killed push's packs, never indexed
        p
        for p, e in sorted(packs.items())
        if p not in indexed
        and e.modified.timestamp() <= started - grace
        # A damaged index names no pack: each pack it might be the index of is kept.
        and not repo.damaged
        and not unplaced
    ]
    unlisted = [
        k
        for k, e in sorted(records.items())
        if k not in keys and e.modified.timestamp() <= started - grace
    ]
    if lease is None:
        gone = {indexes[d].pack for d in doomed if indexes[d].pack not in surviving} & packs.keys()
        result.deleted_packs = len(gone) + len(unindexed)
        result.deleted_bytes = sum(packs[p].size for p in [*gone, *unindexed])
        result.deleted_records = len(unlisted)
        result.deleted_leftovers, size = repo.transport.sweep_leftovers(
            started - grace, FOLDERS, dry_run=True)  # fmt: skip
        result.deleted_bytes += size
        return result
    lease.renew()
    stamp = now()
    # The doomed stay condemned in the state until their indexes are gone (a later gc
    # drops them then): a push that reads this state before the deletes below must not
    # find them live and reuse their objects.
    keep.update((d, since[d]) for d in doomed)
    new = GcState(
        version=formats.VERSION,
        condemned=[Condemned(k, stamp if t < 0 else t) for k, t in sorted(keep.items())],
        nonce=secrets.token_hex(8),
    )
    if not repo.transport.swap_ref(STATE_KEY, formats.encode_state(new), state_etag):
        raise RemoteError(
            repo.url, "the gc state changed under this gc (lease lost?)", key=STATE_KEY
        )

    for digest in doomed:
        repo.transport.delete(index_key(digest))  # the index first: the pack is then invisible
        pack = indexes[digest].pack
        if pack not in surviving and pack in packs:
            repo.transport.delete(pack_key(pack))
            result.deleted_packs += 1
            result.deleted_bytes += packs[pack].size
    for digest in lost:
        repo.transport.delete(index_key(digest))
    for pack in sorted(repo.rotten.keys() - packs.keys()):  # marks of a pack gone before
        for digest in sorted(repo.rotten[pack]):
            repo.transport.delete(damaged_key(pack, digest))
    for pack in unindexed:
        repo.transport.delete(pack_key(pack))
        result.deleted_packs += 1
        result.deleted_bytes += packs[pack].size
    for snapshot_id, nonce in unlisted:
        repo.transport.delete(record_key(snapshot_id, nonce))
        result.deleted_records += 1
    result.deleted_leftovers, size = repo.transport.sweep_leftovers(started - grace, FOLDERS)
    result.deleted_bytes += size
    return result


def _mark(
    repo: Repository,
    indexes: dict[str, formats.PackIndex],
    listed: list[Listed],
    young: list[tuple[str, str]],
) -> set[str]:
    """Every object the snapshots need (their trees are read from the remote)."""
    roots: list[Digest] = []
    marked: set[str] = set()
    records = [repo.get_record(s) for s in listed] + [repo.read_record(*k) for k in young]
    for record in records:
        roots.append(Digest(record.tree))
        marked.update(record.attachments.values())
    read = TreeReader(repo, locations(indexes))
    try:
        marked.update(reachable(roots, read))
    except (ManifestError, ObjectError) as exc:
        raise RemoteError(repo.url, f"cannot mark, nothing deleted: {exc}") from None
    return marked


@dataclass
class VerifyReport:
    """What a remote verify found: each problem in one line (none: the remote is clean)."""

    problems: list[str] = field(default_factory=list)
    snapshots: int = 0
    objects: int = 0
    packs: int = 0


def verify(repo: Repository, *, read_data: bool = True) -> VerifyReport:
    """Checks that every snapshot a ref lists can be pulled whole.

    Every record and tree is read and checked; every object the trees reach must be
    in an indexed pack; with `read_data`, every indexed pack is read whole and each
    of its objects checked against its digest.
    """
    report = VerifyReport()
    indexes = repo.whole(repo.load_indexes())  # (a copy sent again is read, not the lost)
    report.problems.extend(repo.damaged[d] for d in sorted(repo.damaged))
    report.problems.extend(
        f"pack {pack} of index {digest} is missing or cut short"
        for digest, pack in sorted(repo.lost.items())
    )
    places = locations(indexes)
    listed: list[Listed] = []
    for session in repo.sessions():
        ref, _ = repo.get_ref(session)
        listed.extend(ref.snapshots if ref is not None else ())
    roots: dict[str, Digest] = {}
    attached: dict[str, set[str]] = {}
    needed: set[str] = set()
    for snapshot in sorted(listed, key=lambda s: s.id):
        try:
            record = repo.get_record(snapshot)
        except RemoteError as exc:
            report.problems.append(str(exc))
            continue
        report.snapshots += 1
        roots[snapshot.id] = Digest(record.tree)
        attached[snapshot.id] = set(record.attachments.values())
        needed.update(attached[snapshot.id])
    reader = TreeReader(repo, places)
    try:
        sizes = check_shape(roots.values(), reader)  # as a pull checks them
        needed.update(reachable(roots.values(), reader))
    except (ManifestError, ObjectError, RemoteError):
        sizes = {}
        for snapshot_id, root in roots.items():  # each on its own: every broken one named
            try:
                for digest, given in check_shape([root], reader).items():
                    sizes.setdefault(digest, set()).update(given)
                needed.update(reachable([root], reader))
            except (ManifestError, ObjectError, RemoteError) as exc:
                report.problems.append(f"snapshot {snapshot_id}: {exc}")
    report.objects = len(needed)
    damaged = {d for bad in repo.rotten.values() for d in bad} - places.keys()
    if read_data:
        for digest, index in sorted(indexes.items()):
            report.packs += 1
            try:
                damaged.update(_check_pack(repo, digest, index, report, sizes))
            except RemoteError as exc:
                report.problems.append(str(exc))
        # A damaged object another pack holds whole is not lost.
        damaged -= locations({d: without(i, damaged) for d, i in indexes.items()}).keys()
    named = " ".join(report.problems)  # an unreadable tree is named once
    missing = sorted(d for d in needed - places.keys() - damaged if d not in named)
    report.problems.extend(f"object {d} is in no pack" for d in missing)
    if damaged & needed:
        for snapshot_id, root in roots.items():
            with contextlib.suppress(ManifestError, ObjectError, RemoteError):  # named above
                lost = damaged & {*reachable([root], reader), *attached[snapshot_id]}
                report.problems.extend(
                    f"snapshot {snapshot_id} needs object {d}, which is damaged (push the "
                    "snapshot again by id)"
                    for d in sorted(lost)
                )
    return report


def _check_pack(
    repo: Repository,
    digest: str,
    index: formats.PackIndex,
    report: VerifyReport,
    sizes: dict[str, set[int]],
) -> set[str]:
    """Reads a pack whole and checks each of its objects; returns those that fail.

    An object whose size is not the one a tree gives it is named too (the tree lies,
    not the object: a pull refuses that snapshot, `restore` would).

    Each one failing is marked damaged (`Repository.mark_damaged`): readers leave it
    out, so the next push that needs it sends it again. Only the pack's digest was
    checked, and every push kept relying on a damaged object unread.
    """
    pack = index.pack
    data = repo.transport.get(pack_key(pack), max_bytes=index.size)
    whole = blake3(data).hexdigest() == pack
    failed = set()
    for here, where in locations({digest: index}).items():
        try:
            found = unpack_object(
                data[where.offset : where.offset + where.length], where, here, repo.url
            )
        except RemoteError as exc:
            report.problems.append(str(exc))
            failed.add(here)
            continue
        if (problem := size_problem(here, found, sizes)) is not None:
            report.problems.append(problem)
    if not whole and not failed and pack not in repo.rotten:  # damage in no object: its salt
        report.problems.append(f"pack {pack} does not match its digest")
    for here in sorted(failed):
        repo.mark_damaged(pack, here)
    return failed
