"""A new process's note of its session's newest snapshot, and long-lived readers of a store
another process merged: the sequences of a hostile review, each failing before its fix.

The note (`cache/last.json`) must name what reading every record would (the newest by
time and id), whatever happened meanwhile: two snapshots of one session at once, a clock
set back. A reader that reads the index again (a pack it named is gone) must still see
a pack moved out since, and find the objects its own unpublished pack holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

from tests.conftest import write
from tests.safety.test_merges import _SNAPSHOT_MORE
from tests.test_long_lived_store import cli
from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.manifest import _TIME_FORMAT

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"}


def _tree(root: Path, tag: str) -> None:
    for i in range(4):
        write(root, f"d{i}/sub/f.txt", f"{tag}{i}\n")
        write(root, f"d{i}/g.txt", f"g{i}\n")


# -- 30e9cbb: a read that re-reads the index hides a moved-out pack from `sync` -----------


def test_a_read_after_a_pack_is_moved_out_hides_it_from_the_next_snapshot(
    root: Path, tmp_path: Path
) -> None:
    """verify advises moving a damaged pack and its index out of the store; `sync` then
    sees the index gone and the long-lived workspace trusts nothing it remembers. Since
    30e9cbb any read that meets the gone pack re-reads the index, which also resets the
    set of indexes `sync` compares with: the next snapshot trusts its memory and records
    trees and files that are no longer stored."""
    store = tmp_path / "store"
    _tree(root, "x")
    with Workspace(root, store=store, watch=True) as ws:
        ws.snapshot()
        # The pack index is damaged on disk; `worksnap verify` (another process) says so
        # and advises moving the pack and its index out; the user does.
        (index,) = (store / "packs").glob("*.idx")
        index.write_bytes(b"\0" * 64)
        r = cli(root, store, "verify")
        assert "move both files out of the store" in r.stdout + r.stderr, r.stdout + r.stderr
        aside = tmp_path / "aside"
        aside.mkdir()
        for p in list((store / "packs").iterdir()):
            os.rename(p, aside / p.name)
        assert ws.verify()  # the long-lived workspace reads a moved object: problems, rightly
        taken = ws.snapshot()
    r = cli(root, store, "verify")
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "restored"
    r = cli(root, store, "restore", "--to", str(out), taken.id)
    assert r.returncode == 0, r.stdout + r.stderr


# -- f915856: the note names the snapshot saved last, not the newest ----------------------

_SLOW_SNAPSHOT = r"""
import os, sys, time
from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.workspace import Seams

root, ready, go = sys.argv[1:4]

class SlowStore(DiskStore):
    def save_record(self, record):
        # Stands for a snapshot whose storing takes long (many new files to pack): its
        # time was taken at the end of its scan, its record is written only now.
        open(ready, "w").close()
        while not os.path.exists(go):
            time.sleep(0.01)
        super().save_record(record)

with Workspace(root, seams=Seams(open_store=SlowStore)) as ws:
    print(ws.snapshot().id)
"""


def _summaries(root: Path) -> list:
    with Workspace(root) as ws:
        return ws.list()


def _parent(root: Path, snapshot_id: str) -> str | None:
    with Workspace(root) as ws:
        record = ws.store.load_record(snapshot_id)
    assert record is not None
    return record.parent


def test_two_snapshots_at_once_then_a_third_counts_against_the_newest(
    root: Path, tmp_path: Path
) -> None:
    """Snapshots take the shared lock: two run at once. P1 scans first (its time is the
    older) and writes its record and note last; P2 scanned later. The old code gave the
    next snapshot the newest of the session by time (P2's); the note names P1's, so the
    third snapshot's parent and CHANGED skip the snapshot listed just below it."""
    store = root / ".worksnap"
    write(root, "a.txt", "one\n")
    r = cli(root, store, "snapshot")
    assert r.returncode == 0, r.stderr
    ready, go = tmp_path / "ready", tmp_path / "go"
    slow = subprocess.Popen(
        [sys.executable, "-c", _SLOW_SNAPSHOT, str(root), str(ready), str(go)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not ready.exists():
            assert slow.poll() is None, slow.communicate()
            time.sleep(0.01)
        write(root, "a.txt", "two\n")  # edited while P1 stores
        r = cli(root, store, "snapshot")  # P2: scans after P1, done before it
        assert r.returncode == 0, r.stderr
        go.touch()
        _, err = slow.communicate(timeout=120)
        assert slow.returncode == 0, err
    finally:
        if slow.poll() is None:
            slow.kill()
    r = cli(root, store, "snapshot")  # nothing changed since P2's snapshot
    assert r.returncode == 0, r.stderr
    newest, *older = _summaries(root)
    # What the records say (the old code's answer): the newest earlier full snapshot.
    expected = older[0]
    assert (_parent(root, newest.id), newest.changed) == (expected.id, 0), [
        (s.id, s.time, s.changed, _parent(root, s.id)) for s in (newest, *older)
    ]


def _taken_with_the_clock_ahead(root: Path, store: Path) -> None:
    """A snapshot whose time is an hour ahead, as a clock set back by NTP after it leaves."""
    r = cli(root, store, "snapshot")
    assert r.returncode == 0, r.stderr
    disk = DiskStore(str(store))
    record = disk.load_record(r.stdout.split()[0])
    assert record is not None
    ahead = datetime.strptime(record.time, _TIME_FORMAT) + timedelta(hours=1)
    disk.save_record(msgspec.structs.replace(record, time=ahead.strftime(_TIME_FORMAT)))
    disk.close()


def test_after_the_clock_went_back_the_parent_depends_on_another_session(
    root: Path, tmp_path: Path
) -> None:
    """The clock went back after a snapshot. The records (the old code) give every later
    snapshot that one as the newest; the note gives the one saved last: the same history
    gets another parent and CHANGED whenever a snapshot of an unrelated session happened
    to be taken in between (the ids changed, so the records were read)."""
    results = []
    for other_session in (False, True):
        here = tmp_path / f"ws{int(other_session)}"
        store = here / ".worksnap"
        write(here, "a.txt", "one\n")
        assert cli(here, store, "snapshot").returncode == 0
        write(here, "a.txt", "two\n")
        _taken_with_the_clock_ahead(here, store)  # X
        write(here, "a.txt", "three\n")
        assert cli(here, store, "snapshot").returncode == 0  # Y, after the clock went back
        if other_session:
            r = cli(here, store, "--session", "other", "snapshot")
            assert r.returncode == 0, r.stderr
        r = cli(here, store, "snapshot")  # Z: nothing changed since Y
        assert r.returncode == 0, r.stderr
        z = r.stdout.split()[0]
        by_id = {s.id: s for s in _summaries(here)}
        place = {s.id: i for i, s in enumerate(sorted(by_id.values(), key=lambda s: s.time))}
        # (Z's CHANGED, its parent's place in time order: 0 A, 1 Y, 2 Z, 3 X)
        results.append((by_id[z].changed, place[_parent(here, z)]))
    # Same history in the session, same answer expected either way.
    assert results[0] == results[1], results


# -- 30e9cbb: a long-lived reader that holds unpublished objects still names moved ones missing


def test_a_long_lived_workspace_that_captured_reads_after_another_process_merged(
    tmp_path: Path,
) -> None:
    """As tests/safety/test_merges.py's harness, which also called the public
    `capture(store_objects=True)` (what a snapshot does, without the record): its objects
    sit in an unpublished pack, and with one the store never reads the index again, for an
    unknown digest (`read_chunks`) nor for a gone pack (`_read_packed_again`). The other
    process's snapshots (their trees are in the merged pack) are reported missing by the
    harness's verify; a new process's verify finds every object (30e9cbb's claim, "a
    library's long-lived workspace keeps working", holds only without such a pack)."""
    from worksnap.maintenance import AUTO_MERGE

    root = tmp_path / "root"
    root.mkdir()
    ids = []
    with Workspace(root) as ws:
        for i in range(AUTO_MERGE - 2):
            write(root, f"f{i}.txt", f"file {i}\n" * 20)
            ids.append(ws.snapshot().id)
    with Workspace(root) as harness:
        assert harness.file_bytes(ids[0], "f0.txt")[1] == b"file 0\n" * 20
        write(root, "draft.txt", "not yet snapshotted\n")
        harness.capture(store_objects=True)  # e.g. to diff the tree against a snapshot
        subprocess.run(
            [sys.executable, "-c", _SNAPSHOT_MORE, str(root), "0", "3"],
            env=ENV,
            check=True,
            timeout=120,
        )
        assert len(list((root / ".worksnap" / "packs").glob("*.idx"))) < AUTO_MERGE
        problems = harness.verify()
        try:
            read = harness.file_bytes(ids[30], "f30.txt")[1]
        except Exception as exc:
            read = repr(exc).encode()
    fresh = cli(root, root / ".worksnap", "verify")
    assert fresh.returncode == 0, fresh.stdout  # a new process finds every object
    newest = {s.id for s in Workspace(root).list()[:3]}  # the other process's
    assert (problems, read, newest) == ([], b"file 30\n" * 20, newest)
