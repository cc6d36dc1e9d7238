"""Retention: which snapshots a garbage collection drops (pure; the store sweeps the objects).

The policy itself, `Retention`, is part of the store's config (config.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime

from worksnap.config import Retention
from worksnap.errors import InputError
from worksnap.manifest import Summary, parse_time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)\Z")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\Z")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_duration(text: str) -> float:
    """Parses `90s`, `45m`, `12h`, `30d`, `2w` (or plain seconds) into seconds."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise InputError(f"bad duration {text!r}: use a number and s, m, h, d or w (e.g. 30d)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def parse_size(text: str) -> int:
    """Parses `500M`, `2G`, `10KiB`, `1024` (binary units) into bytes."""
    match = _SIZE.match(text.strip().lower())
    if not match:
        raise InputError(f"bad size {text!r}: use a number and K, M, G or T (e.g. 5G)")
    return int(float(match.group(1)) * 1024 ** _POWERS[match.group(2)])


def _age_seconds(summary: Summary, now: datetime) -> float:
    return (now - parse_time(summary.time).replace(tzinfo=now.tzinfo)).total_seconds()


def select_expired(
    summaries: Iterable[Summary],
    policy: Retention,
    *,
    keep: set[str],
    now: datetime,
    object_sizes: Callable[[str], dict[str, int]],
) -> list[str]:
    """Returns the ids of the snapshots a policy drops.

    Never dropped: ids in `keep` (pinned, on a redo stack, an open checkpoint).
    `keep_last` and `max_bytes` also keep the newest snapshot of each session;
    `max_age` does not, so a session left alone long enough is pruned whole.

    Args:
        summaries: every snapshot of every session.
        policy: the limits; `keep_last` counts per session.
        keep: ids that must survive.
        now: the current time (timezone-aware UTC).
        object_sizes: for `max_bytes`, returns {digest: size} of a snapshot's objects.
    """
    newest_first = sorted(summaries, key=lambda s: (s.time, s.id), reverse=True)
    seen_per_session: dict[str, int] = {}
    max_age = parse_duration(policy.max_age) if policy.max_age is not None else None
    dropped: list[str] = []
    kept: list[Summary] = []
    for summary in newest_first:
        rank = seen_per_session.get(summary.session, 0)
        seen_per_session[summary.session] = rank + 1
        too_many = policy.keep_last is not None and rank >= policy.keep_last and rank > 0
        too_old = max_age is not None and _age_seconds(summary, now) > max_age
        if summary.id not in keep and (too_many or too_old):
            dropped.append(summary.id)
        else:
            kept.append(summary)
    if policy.max_bytes is not None:
        # Keep the newest snapshots whose objects, together, fit in the budget.
        budget = parse_size(policy.max_bytes)
        live: dict[str, int] = {}
        total = 0
        sessions: set[str] = set()
        for summary in kept:
            first_of_session = summary.session not in sessions
            sessions.add(summary.session)
            sizes = object_sizes(summary.id)
            extra = sum(size for digest, size in sizes.items() if digest not in live)
            if first_of_session or summary.id in keep or total + extra <= budget:
                live.update(sizes)
                total += extra
            else:
                dropped.append(summary.id)
    return dropped
