"""A watched capture carries the last stat table over, less what it looks at again.

`carry.carried_stats` copies the table and takes out the records of every directory not
taken whole (changed, or gone); the capture then makes their records as a capture
without a watcher does. A record left behind would vouch for a file that is gone, or
for an older state of one: these tests check every record against the tree after
each capture, and that the carried path was the one taken. The entries' order is
carried over too when no path was added or dropped (`carry.resorted`): checked
against a plain capture.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import write
from tests.watchops import records_hold
from worksnap import Workspace
from worksnap.carry import Kept, carried_stats
from worksnap.workspace import Seams


def relink(link: Path, target: str) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def test_the_carried_table_and_order_are_the_tree_after_each_change(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    for d in ("a", "b", "b/deep", "c"):
        for i in range(3):
            write(root, f"{d}/f{i}.txt", f"{d} {i}\n")
    steps = [
        lambda: write(root, "a/f0.txt", "a changed, longer\n"),  # the same paths: in order
        (root / "a/f1.txt").unlink,  # a record gone with its file
        lambda: shutil.rmtree(root / "b"),  # a directory gone, and one below it
        lambda: write(root, "d/new.txt", "new\n"),
        lambda: None,  # nothing: every directory taken whole
        lambda: (root / "c").rename(root / "e"),  # its records under other paths
        lambda: write(root, "e/f0.txt", "e changed\n"),
        lambda: relink(root / "e/link", "f0.txt"),
        lambda: relink(root / "e/link", "f1.txt"),  # another target, the same path
        lambda: (root / "e/f1.txt").chmod(0o755),
    ]
    counts: list[tuple[int, int]] = []
    carried: list[tuple[bool, bool]] = []
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(racy_margin_ns=0)) as ws:  # fmt: skip
        assert records_hold(ws, root, ws.snapshot()) == (12, 12)  # the first: every file
        for step in steps:
            step()
            taken = ws.snapshot()
            counts.append(records_hold(ws, root, taken))
            carried.append(ws._capture.carried_over)
            with Workspace(root, store=tmp_path / "plain") as plain:
                assert taken.entries == plain.capture(store_objects=False).entries
    assert counts == [(n, n) for n in (12, 11, 5, 6, 6, 6, 6, 6, 6, 6)]
    # The stat table carried over at every look (the one with nothing to look at, not one
    # event, is the one before); the entries' order where no path was added or dropped.
    yes, table_only = (True, True), (True, False)
    assert carried == [yes, table_only, table_only, table_only, table_only, table_only,
                       yes, table_only, yes, yes]  # fmt: skip


def test_a_table_that_is_not_the_kept_records_is_not_carried(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a/f.txt", "a\n")
    write(root, "b/g.txt", "b\n")
    with Workspace(root, store=tmp_path / "store", watch=True,
                   seams=Seams(racy_margin_ns=0)) as ws:  # fmt: skip
        ws.snapshot()
        kept: dict[str, Kept] = ws._capture._kept
        table = dict(ws._capture._caches.stat_table())
        held = {d: kept[d].part for d in kept}
        assert carried_stats(table, kept, held) == table  # every directory as it was
        gone = {d: part for d, part in held.items() if d != "b"}
        assert carried_stats(table, kept, gone) == {"a/f.txt": table["a/f.txt"]}
        del table["b/g.txt"]  # a record its Kept names is not there: not that table
        assert carried_stats(table, kept, gone) is None
