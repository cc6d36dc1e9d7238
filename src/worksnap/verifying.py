"""`verify`: every object the snapshots need, read through and checked; `--repair`.

A damaged object (bit rot in a pack) is named by every snapshot that needs it, and a
snapshot taken while the file is intact on disk would name it again. `--repair` takes
the damaged copies as not stored (`Store.record_damaged`, `damagedcopies.py`), under
the exclusive lock: the next snapshot stores again what is still on disk, and the
snapshots named keep lacking it. Without it, verify says to run it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Protocol

from worksnap.errors import InputError, ManifestError, ObjectError
from worksnap.lock import Locks
from worksnap.manifest import Manifest, size_problem
from worksnap.progress import Reporter
from worksnap.store import Store


class Snapshots(Protocol):
    """What `verify` asks of the catalog."""

    def resolve(self, ref: str, session: str) -> str:
        """The snapshot id a ref names."""
        ...

    def load_id(self, snapshot_id: str, *, from_store: bool = False) -> Manifest:
        """A snapshot, loaded and checked (`from_store`: every tree read from the store)."""
        ...


_REPORT_EVERY = 64
"""Objects read between two progress reports of `verify`."""


def drop_advice(snapshot_id: str, where: str | None = None) -> str:
    """How to get past one damaged snapshot: the one wording of gc, retention and verify."""
    record = f" (its record: {where})" if where else ""
    return f"to drop that snapshot{record}: worksnap gc --drop {snapshot_id}"


def verify(
    catalog: Snapshots,
    store: Store,
    locks: Locks,
    ref: str | None,
    session: str,
    *,
    report: Reporter | None = None,
    repair: bool = False,
    where: Callable[[str], str] | None = None,
) -> builtins.list[str]:
    """Checks that every object the snapshot (or every snapshot) needs is present and intact.

    Args:
        catalog: the snapshots (`resolve`, `load`).
        store: where they are.
        locks: the store's locks (`repair` takes the exclusive one).
        ref: the snapshot (None: every snapshot of the store).
        session: where `latest` and `step:N` look.
        report: told how many of the objects have been read ("verify").
        repair: the objects found damaged are taken as not stored: the next snapshot
            stores again what is still on disk. The snapshots named still lack them.
        where: a snapshot's record file, which the line for an unreadable one names.

    Returns:
        One line for each problem found; empty when all is well.
    """
    if not repair:
        problems, damaged = _check(catalog, store, ref, session, report=report, where=where)
        if damaged:
            problems.append(
                f"{_objects(len(damaged))}: `worksnap verify --repair` makes the next "
                "snapshot store again what is still on disk"
            )
        return problems
    with locks.exclusive("verify --repair"):
        problems, damaged = _check(catalog, store, ref, session, report=report, where=where)
        if damaged:
            problems.append(
                f"{_objects(store.record_damaged(damaged))} taken as not stored: "
                "the next snapshot stores again what is still on disk (until then, and for good "
                "where nothing on disk has them, the snapshots named above lack them)"
            )
    return problems


def _unreadable(
    unreadable: dict[str, str], where: Callable[[str], str] | None
) -> builtins.list[tuple[str, str]]:
    """A line for each unreadable snapshot, and how to drop it; for several, one command.

    gc removes nothing while any of them stays: dropping one at a time, as each line
    said, failed until the last (a review).
    """
    if len(unreadable) == 1:
        [(snapshot_id, why)] = unreadable.items()
        at = where(snapshot_id) if where is not None else None
        return [(snapshot_id, f"{why}; {drop_advice(snapshot_id, at)}")]
    lines = list(unreadable.items())
    if lines:
        drops = " ".join(f"--drop {i}" for i in sorted(unreadable))
        lines.append(("", f"to drop these {len(lines)} snapshots at once: worksnap gc {drops}"))
    return lines


def _objects(count: int) -> str:
    return f"{count} damaged object{'' if count == 1 else 's'}"


def _check(
    catalog: Snapshots,
    store: Store,
    ref: str | None,
    session: str,
    *,
    report: Reporter | None,
    where: Callable[[str], str] | None,
) -> tuple[builtins.list[str], builtins.list[str]]:
    """(a line for each problem, the objects found damaged)."""
    problems = store.problems()  # damage that commands work around (pack indexes)
    ids = [catalog.resolve(ref, session)] if ref is not None else store.ids()
    loaded: builtins.list[Manifest] = []
    found: builtins.list[tuple[str, str]] = []  # (snapshot, problem)
    unreadable: dict[str, str] = {}
    damaged_trees: builtins.list[str] = []
    partly_read = False  # a snapshot's tree could not be read: nothing below it was
    for snapshot_id in ids:
        try:
            loaded.append(catalog.load_id(snapshot_id, from_store=True))
        except ManifestError as exc:
            if ref is None and snapshot_id not in store.ids():
                continue  # a gc removed it since it was listed
            cause = exc.__cause__
            partly_read |= isinstance(cause, ObjectError)
            if not isinstance(cause, ObjectError) or not cause.reason.startswith("damaged"):
                unreadable[snapshot_id] = str(exc)
            elif store.has(cause.digest):
                # A damaged copy of one of its trees: `--repair`, not a drop, is the way.
                damaged_trees.append(cause.digest)
                found.append((snapshot_id, str(exc)))
            else:  # `--repair` took it as not stored: a snapshot may store it again
                at = where(snapshot_id) if where is not None else None
                found.append(
                    (snapshot_id, f"{exc}; {_AFTER_REPAIR}, else {drop_advice(snapshot_id, at)}")
                )
        except InputError:
            if ref is not None or snapshot_id in store.ids():
                raise  # else a gc removed it since it was listed
    needed = list(dict.fromkeys(e.hash for m in loaded for e in m.entries if e.hash))
    if partly_read:
        # Nothing below an unreadable tree was read: every other object is checked, so that
        # a damaged tree or file there is found too (a review: repaired one level at a time,
        # the next snapshot named a damaged subtree again, exit 0).
        known = {*needed, *damaged_trees}
        needed += [d for d in store.digests() if d not in known]
    checked: dict[str, str | None] = {}
    sizes: dict[str, int] = {}
    for done, digest in enumerate(needed, 1):
        try:
            sizes[digest] = store.check(digest)  # a piece at a time: any size
            checked[digest] = None
        except ObjectError as exc:
            checked[digest] = exc.reason
        if report is not None and (done % _REPORT_EVERY == 0 or done == len(needed)):
            report("verify", done, len(needed))
    found += _unreadable(unreadable, where)
    found += [
        (m.id, f"{m.id}: {e.path}: object {e.hash} {reason}")
        for m in loaded
        for e in m.entries
        if e.hash and (reason := checked.get(e.hash)) is not None
    ]
    found += [
        (m.id, f"{m.id}: {e.path}: object {e.hash} {problem}")
        for m in loaded
        for e in m.entries
        if e.hash in sizes and (problem := size_problem(e, sizes[e.hash])) is not None
    ]
    if found and ref is None:  # a gc may have removed a snapshot (and its objects) since
        stored = set(store.ids())
        found = [(i, line) for i, line in found if not i or i in stored]  # ("": advice)
    found_damaged = [d for d, why in checked.items() if why and why.startswith("damaged")]
    damaged = [d for d in found_damaged if store.has(d)]  # (else taken as not stored already)
    if lost := len(found_damaged) - len(damaged):
        found.append(
            ("", f"{_objects(lost)}: {_AFTER_REPAIR}; the snapshots named lack the others")
        )
    damaged += [d for d in dict.fromkeys(damaged_trees) if d not in checked]
    return problems + [line for _, line in found], damaged


_AFTER_REPAIR = (
    "`verify --repair` took the damaged copy as not stored: the next snapshot stores it again "
    "if its bytes are still on disk (run `worksnap snapshot`, then verify again)"
)
"""What is left to do about a copy `--repair` took (a review: a verify before the next
snapshot advised dropping snapshots that snapshot would have healed)."""
