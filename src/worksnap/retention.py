"""Retention: which snapshots a garbage collection drops (pure; the store sweeps the objects).

The policy itself, `Retention`, is part of the store's config (config.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from worksnap.config import Retention, parse_duration, parse_size
from worksnap.history import first_undo_stops, is_automatic
from worksnap.manifest import Summary, parse_time

__all__ = ["Retention", "parse_duration", "parse_size", "select_expired"]


def _age_seconds(summary: Summary, now: datetime) -> float:
    return (now - parse_time(summary.time).replace(tzinfo=now.tzinfo)).total_seconds()


def select_expired(
    summaries: Iterable[Summary],
    policy: Retention,
    *,
    keep: set[str],
    now: datetime,
    object_sizes: Callable[[str], dict[str, int]],
    everything: bool = False,
) -> list[str]:
    """Returns the ids of the snapshots a policy drops.

    Retention counts, per session, the snapshots people and runtimes took. Those
    worksnap took on its own (`history.AUTOMATIC_KINDS`: pre-restore, undo, redo,
    run-*) never take their place, and go first. `keep_last` N keeps a session's N
    newest snapshots people and runtimes took, and the N newest of any kind undo can go
    to (`history.first_undo_stops`: of a run of one tree, only the newest), so at most
    2N a session. A review found a restore's pre-restore snapshot, the only
    copy of the edits it overwrote and undo's first stop after the next snapshot,
    dropped by that snapshot: only automatic ones newer than the newest deliberate one
    were counted as undo's. Under `max_bytes` the automatic ones are the last to be given room.

    Never dropped: ids in `keep` (pinned, on a redo stack, an open checkpoint), and each
    session's newest snapshot, unless `everything` (as the README and `gc --help` say:
    a `max_age` that dropped it pruned a session left alone whole, and `max-age 0`
    dropped every snapshot as it was taken). `gc --drop-session` drops a whole session.

    Args:
        summaries: every snapshot of every session.
        policy: the limits; `keep_last` counts per session.
        keep: ids that must survive.
        now: the current time (timezone-aware UTC).
        object_sizes: for `max_bytes`, returns {digest: size} of a snapshot's objects.
        everything: a `keep_last` of 0 drops each session's newest too.
    """
    newest_first = sorted(summaries, key=lambda s: (s.time, s.id), reverse=True)
    max_age = parse_duration(policy.max_age) if policy.max_age is not None else None
    deliberate: dict[str, int] = {}  # id -> rank among the session's deliberate snapshots
    sessions: dict[str, list[Summary]] = {}  # each session's snapshots, newest first
    counts: dict[str, int] = {}  # session -> deliberate snapshots seen so far
    for summary in newest_first:
        if not is_automatic(summary.kind):
            deliberate[summary.id] = counts.get(summary.session, 0)
            counts[summary.session] = deliberate[summary.id] + 1
        sessions.setdefault(summary.session, []).append(summary)
    newest = set() if everything else {history[0].id for history in sessions.values()}
    reached: set[str] = set()  # the `keep_last` newest snapshots undo can go to
    for history in sessions.values():
        reached.update(s.id for s in first_undo_stops(history, policy.keep_last or 0))
    dropped: list[str] = []
    kept: list[Summary] = []
    for summary in newest_first:
        too_many = False
        if policy.keep_last is not None and summary.id not in newest:
            place = deliberate.get(summary.id)
            too_many = summary.id not in reached and (place is None or place >= policy.keep_last)
        too_old = (
            max_age is not None
            and summary.id not in newest
            and _age_seconds(summary, now) > max_age
        )
        if summary.id not in keep and (too_many or too_old):
            dropped.append(summary.id)
        else:
            kept.append(summary)
    if policy.max_bytes is not None:
        # Keep the newest snapshots whose objects, together, fit in the budget: first what
        # must stay, then what people and runtimes took, then what worksnap took.
        budget = parse_size(policy.max_bytes)
        live: dict[str, int] = {}
        total = 0
        must = keep | newest
        ordered = sorted(
            kept, key=lambda s: 0 if s.id in must else 1 if s.id in deliberate else 2
        )  # a stable sort: newest first within each group
        for summary in ordered:
            sizes = object_sizes(summary.id)
            extra = sum(size for digest, size in sizes.items() if digest not in live)
            if summary.id in must or total + extra <= budget:
                live.update(sizes)
                total += extra
            else:
                dropped.append(summary.id)
    return dropped
