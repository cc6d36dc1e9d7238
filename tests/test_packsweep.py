"""What a sweep does with each pack (`packsweep.plan_sweep`), decided on indexes in memory.

A pack goes before anything is written when no kept copy is read from it and no orphan
(a kept object whose base dies) is rebuilt through it; the end-to-end cases, on a full
disk and under kill -9, are in tests/safety/test_full_disk_gc.py.
"""

from __future__ import annotations

import pytest

from worksnap.objectindex import join_indexes
from worksnap.packcodec import BASE_PREFIX, PackRows, slots
from worksnap.packsweep import SweepPlan, Tally, plan_sweep


def digest(name: str) -> str:
    """A made-up digest for an object called `name` (its first 16 bytes tell it apart)."""
    return (name.encode().hex() * 32)[:64]


Packs = dict[str, list[tuple[str, str | None]]]
"""{pack: [(object, the object its frame stands on, or None), ...]}, joined in name order."""


def planned(packs: Packs, live: set[str] | None, *, small: frozenset[str]) -> SweepPlan:
    """The plan of a sweep of `packs` keeping `live` (objects by name; None: a merge).

    Row `i` of a pack takes `10 + i` bytes in it and is 50 bytes long.
    """
    read = []
    for name, objects in sorted(packs.items()):
        rows = PackRows(name, framed=True)
        for row, (_, base) in enumerate(objects):
            rows.offsets.append(100 * row)
            rows.stored.append(10 + row)
            rows.raw.append(50)
            if base is not None:
                rows.bases[row] = digest(base)[: 2 * BASE_PREFIX]
        read.append(([digest(o) for o, _ in objects], rows))
    index, find = join_indexes(read)
    records = [(rows.name, slots(digests, rows)) for digests, rows in read]
    kept = None if live is None else {digest(o) for o in live}
    return plan_sweep(index, find, records, kept, small=set(small))


@pytest.mark.parametrize(
    ("packs", "live", "first", "rewritten", "orphans"),
    [
        pytest.param(
            {"p1": [("a", None)], "p2": [("b", None), ("c", None)]},
            {"a"}, ["p2"], [], set(),
            id="a pack of dead objects goes first",
        ),
        pytest.param(
            {"p1": [("a", None), ("b", None)], "p2": [("c", None)]},
            {"a"}, ["p2"], ["p1"], set(),
            id="a pack with a kept object beside a dead one is written anew",
        ),
        pytest.param(
            {"p1": [("a", None), ("b", None)]},
            {"a", "b"}, [], [], set(),
            id="a pack of kept objects stays as it is",
        ),
        pytest.param(
            {"p1": [("v1", None)], "p2": [("v2", "v1")], "p3": [("junk", None)]},
            {"v2"}, ["p3"], ["p1", "p2"], {"v2"},
            id="the pack of a dead base of a kept object stays until it is stored alone",
        ),
        pytest.param(
            {"p1": [("v1", None)], "p2": [("v2", "v1")], "p3": [("v3", "v2")]},
            {"v3"}, [], ["p1", "p2", "p3"], {"v3"},
            id="so do the packs of every base below it",
        ),
        pytest.param(
            {"p1": [("v1", None), ("keep", None)], "p2": [("v2", "v1")], "p3": [("v3", "v2")]},
            {"v1", "keep", "v3"}, [], ["p2", "p3"], {"v3"},
            id="a live base below a dead one keeps its pack as it is",
        ),
        pytest.param(
            {"p1": [("v1", None)], "p2": [("v2", "v1")]},
            {"v1", "v2"}, [], [], set(),
            id="a kept object on a kept base moves nothing",
        ),
        pytest.param(
            {"p1": [("a", None)], "p2": [("a", None)], "p3": [("b", None)]},
            {"a"}, ["p1", "p3"], [], set(),
            id="a pack of copies the index does not read goes first",
        ),
        pytest.param(
            {"p1": [("a", None)], "p2": [("b", None)], "p3": [("c", None)]},
            None, [], ["p1", "p2"], set(),
            id="a merge writes the small packs anew",
        ),
        pytest.param(
            {"p1": [("a", None)], "p2": [("a", None)]},
            None, ["p1"], [], set(),
            id="a merge removes a pack of copies the index does not read first",
        ),
    ],
)  # fmt: skip
def test_what_a_sweep_does_with_each_pack(
    packs: Packs, live: set[str] | None, first: list[str], rewritten: list[str], orphans: set[str]
) -> None:
    small = frozenset({"p1", "p2"}) if live is None and len(packs) == 3 else frozenset()
    plan = planned(packs, live, small=small)
    names = {digest(o): o for objects in packs.values() for o, _ in objects}
    assert [p.name for p in plan.first] == first
    assert [p.name for p in plan.rewritten] == rewritten
    assert {names[d] for d in plan.orphans} == orphans


def test_what_is_left_and_what_it_takes_when_the_disk_fills() -> None:
    """`SweepPlan.stopped` counts what finishing would free, and about what it needs:
    the kept copies as stored, an orphan at its full size (it is compressed alone)."""
    packs: Packs = {"p1": [("v1", None), ("gone", None)], "p2": [("v2", "v1"), ("keep", None)]}
    plan = planned(packs, {"v2", "keep"}, small=frozenset())
    stop = plan.stopped("/store", "No space left on device", Tally(3, 4096))
    assert (stop.removed, stop.freed) == (3, 4096)
    assert (stop.left, stop.left_bytes) == (2, 10 + 11)  # v1 and gone
    assert stop.needed == 50 + 11  # v2 alone at its size, keep as it is stored
