"""Retention, pinning, garbage collection and du."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import msgspec
import pytest

from tests.conftest import tree_state, write
from tests.legacy import downgrade
from worksnap import InputError, Summary, Workspace
from worksnap.diskstore import DiskStore
from worksnap.hash import SMALL
from worksnap.layout import TEMP_MARK
from worksnap.retention import Retention, parse_duration, parse_size, select_expired


def summary(snapshot_id: str, minutes_ago: float, session: str = "default") -> Summary:
    when = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    return Summary(
        id=snapshot_id, step=None, kind="step", time=when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        session=session, tree=snapshot_id.ljust(64, "0"), files=0, bytes=0,
    )  # fmt: skip


def test_durations_and_sizes_parse() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("45m") == 2700
    assert parse_duration("12h") == 43200
    assert parse_duration("30d") == 30 * 86400
    assert parse_duration("2w") == 14 * 86400
    assert parse_size("1024") == 1024
    assert parse_size("10KiB") == 10240
    assert parse_size("5G") == 5 * 1024**3
    with pytest.raises(InputError, match="bad duration"):
        parse_duration("soon")
    with pytest.raises(InputError, match="bad size"):
        parse_size("lots")


def test_keep_last_is_per_session_and_spares_pins_and_newest() -> None:
    snaps = [summary(f"a{i}", i) for i in range(5)] + [summary("b0", 10, session="other")]
    now = datetime.now(timezone.utc)
    dropped = select_expired(
        snaps, Retention(keep_last=2), keep={"a4"}, now=now, object_sizes=lambda _: {}
    )
    assert sorted(dropped) == ["a2", "a3"]
    dropped = select_expired(
        snaps, Retention(keep_last=0), keep=set(), now=now, object_sizes=lambda _: {}
    )
    assert sorted(dropped) == ["a1", "a2", "a3", "a4"]  # newest per session always stays


def test_max_age_and_max_bytes() -> None:
    snaps = [summary("new", 1), summary("mid", 60), summary("old", 60 * 48)]
    now = datetime.now(timezone.utc)
    assert select_expired(
        snaps, Retention(max_age="1d"), keep=set(), now=now, object_sizes=lambda _: {}
    ) == ["old"]
    stale_session = [*snaps, summary("abandoned", 60 * 72, session="old-chat")]
    assert select_expired(
        stale_session, Retention(max_age="1d"), keep=set(), now=now, object_sizes=lambda _: {}
    ) == ["old"]  # a session's newest stays, however old (`gc --drop-session` drops it)
    assert select_expired(
        snaps, Retention(max_age="0s"), keep=set(), now=now, object_sizes=lambda _: {}
    ) == ["mid", "old"]  # an age of 0 never drops the snapshot just taken
    assert select_expired(
        stale_session, Retention(max_age="1d"), keep=set(), now=now,
        object_sizes=lambda _: {}, everything=True,
    ) == ["old", "abandoned"]  # fmt: skip
    sizes = {"new": {"x": 600}, "mid": {"x": 600, "y": 500}, "old": {"z": 300}}
    dropped = select_expired(
        snaps, Retention(max_bytes="1000"), keep=set(), now=now, object_sizes=sizes.__getitem__
    )
    assert dropped == ["mid"]  # new (600) + old (300) fit; mid would add 500


def test_gc_drops_snapshots_and_sweeps_objects(root: Path) -> None:
    ws = Workspace(root)
    for i in range(4):
        write(root, "data.txt", f"version {i} " * 50)
        ws.snapshot(step=i)
    write(root, "data.txt", "final")
    final = ws.snapshot(step=9)
    store_before = ws.store.size()
    report = ws.gc(Retention(keep_last=1))
    assert report.snapshots == 4
    assert report.objects == 8  # 4 versions of data.txt, and the 4 root trees naming them
    assert report.bytes > 0
    assert [s.id for s in ws.list()] == [final.id]
    assert ws.store.size() < store_before
    assert ws.verify() == []
    write(root, "data.txt", "edited")
    assert ws.restore(final.id).ok
    assert (root / "data.txt").read_text() == "final"


def test_pinned_snapshot_survives_gc_and_stays_restorable(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "pinned content")
    pinned = ws.snapshot(step=1)
    ws.pin(pinned.id)
    write(root, "a.txt", "later")
    ws.snapshot(step=2)
    write(root, "a.txt", "latest")
    ws.snapshot(step=3)
    ws.gc(Retention(keep_last=1))
    assert {s.id for s in ws.list()} >= {pinned.id}
    assert ws.restore(pinned.id).ok
    assert (root / "a.txt").read_text() == "pinned content"
    ws.pin(pinned.id, pinned=False)
    ws.gc(Retention(keep_last=1))
    assert pinned.id not in {s.id for s in ws.list()}


def test_gc_keeps_what_redo_needs(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "one")
    ws.snapshot(step=1)
    write(root, "a.txt", "unsaved")
    assert ws.undo().ok
    ws.gc(Retention(keep_last=1))
    assert ws.redo().ok
    assert (root / "a.txt").read_text() == "unsaved"


def test_gc_sweeps_unpublished_packs(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "a")
    ws.snapshot()
    orphan = root / ".worksnap" / "packs" / "deadbeefdeadbeef.pack"
    orphan.write_bytes(b"half-written by a killed process")
    ws.gc(Retention())
    assert not orphan.exists()
    assert ws.verify() == []


def test_configured_retention_runs_after_each_snapshot(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "a")
    ws.snapshot()
    config = {"retention": {"keep_last": 2}}
    (root / ".worksnap" / "config.json").write_text(json.dumps(config))
    for i in range(4):
        write(root, "a.txt", str(i))
        ws.snapshot(step=i)
    assert [s.step for s in ws.list()] == [3, 2]


def test_du_reports_per_session(root: Path) -> None:
    write(root, "a.txt", "x" * 1000)
    one = Workspace(root, session="one").snapshot()
    write(root, "b.txt", "y" * 500)
    two = Workspace(root, session="two").snapshot()
    ws = Workspace(root)
    usage = ws.du()
    trees = [len(ws.store.read(snap.tree)) for snap in (one, two)]  # each a one-level tree
    assert usage == {"one": (1, 1000 + trees[0]), "two": (1, 1500 + trees[1])}


def test_rebind_after_the_project_moved(root: Path, tmp_path: Path) -> None:
    write(root, "a.txt", "a")
    snap = Workspace(root).snapshot()
    moved = tmp_path / "moved"
    root.rename(moved)
    with pytest.raises(InputError, match="worksnap rebind"):
        Workspace(moved).snapshot()
    with pytest.raises(InputError, match="worksnap rebind"):
        Workspace(moved).restore(snap.id)
    assert Workspace(moved).rebind() == 1
    ws = Workspace(moved)
    write(moved, "a.txt", "edited after the move")
    before_other = tree_state(moved)
    assert before_other != {}
    assert ws.restore(snap.id).ok
    assert (moved / "a.txt").read_text() == "a"


def test_a_store_named_from_outside_its_root_is_never_rebound_away_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review I 07: with project a's store named by $WORKSNAP_STORE in another directory,
    `status` said "1 snapshot" and "no snapshot yet" at once, `list` called a's snapshots
    the other directory's, and `plan` said to run `worksnap rebind`, which took a's own
    store away from it (a could no longer snapshot). A moved project still rebinds."""
    import subprocess

    from tests.conftest import run_here

    a, elsewhere = tmp_path / "a", tmp_path / "elsewhere"
    write(a, "f.txt", "one\n")
    write(elsewhere, "g.txt", "other\n")
    subprocess.run(["git", "init", "-q", str(a)], check=True)
    monkeypatch.chdir(a)
    assert run_here(capsys, "snapshot")[0] == 0
    store = str(a / ".git" / "worksnap")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("WORKSNAP_STORE", store)
    still_there = f"it is still there: run worksnap inside it, or with --root {a}"
    code, out, err = run_here(capsys, "status")
    assert (code, out) == (2, "")
    said = f"worksnap: error: store {store} belongs to {a}, not {elsewhere} ({still_there})\n"
    assert err == said
    code, out, err = run_here(capsys, "list")
    assert out.startswith(f"snapshots of {a} (not {elsewhere}), session default,"), err
    code, out, err = run_here(capsys, "plan", "latest")
    assert code == 2 and err.endswith(f"({still_there})\n")
    code, out, err = run_here(capsys, "rebind")
    assert (code, out) == (2, "")
    assert f"is the store of {a}, which is still there: run worksnap inside it" in err
    monkeypatch.delenv("WORKSNAP_STORE")
    monkeypatch.chdir(a)
    assert run_here(capsys, "snapshot")[0] == 0  # a's store is still a's

    moved = tmp_path / "moved"
    a.rename(moved)
    monkeypatch.chdir(moved)
    code, out, err = run_here(capsys, "status")
    assert code == 2 and err.endswith("(if the project moved here, run `worksnap rebind`)\n")
    assert run_here(capsys, "rebind")[0] == 0
    assert run_here(capsys, "snapshot")[0] == 0


def test_drop_session_frees_what_only_it_needed(root: Path) -> None:
    write(root, "shared.txt", "in both sessions")
    write(root, "a.txt", "only in the doomed session " * 20)
    doomed = Workspace(root, session="doomed")
    doomed.snapshot(step=1)
    write(root, "a.txt", "unsaved edit")
    assert doomed.undo().ok  # leaves redo state for the session
    (root / "a.txt").unlink()
    kept = Workspace(root, session="kept").snapshot(step=1)
    report = Workspace(root).gc(drop_session="doomed")
    assert report.snapshots == 2  # step 1, and the state the undo left (kind "undo")
    assert report.objects >= 1
    everything = Workspace(root).list(all_sessions=True)
    assert [s.id for s in everything] == [kept.id]
    assert not (root / ".worksnap" / "sessions" / "doomed.json").exists()
    assert Workspace(root).verify() == []


def test_dropping_a_session_that_does_not_exist_is_exit_2_naming_those_that_do(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo (`defualt`) dropped nothing and said so with exit 0 (review B 08, 9)."""
    from tests.conftest import run_cli

    write(root, "a.txt", "a")
    assert run_cli(capsys, root, "snapshot")[0] == 0
    assert run_cli(capsys, root, "--session", "other", "snapshot")[0] == 0
    before = tree_state(root, skip=())
    for dry in ([], ["--dry-run"]):
        code, out, err = run_cli(capsys, root, "gc", "--drop-session", "defualt", *dry)
        assert (code, out) == (2, "")
        assert err == (
            "worksnap: error: no session 'defualt' in this store; its sessions: default, other\n"
        )
    assert tree_state(root, skip=()) == before  # nothing dropped, nothing swept
    code, out, err = run_cli(capsys, root, "gc", "--drop-session", "other")
    assert (code, err) == (0, "") and out.startswith("dropped 1 snapshot,")
    with pytest.raises(
        InputError, match=r"no session 'other' in this store; its sessions: default"
    ):
        Workspace(root).gc(drop_session="other")


def test_gc_with_a_damaged_tree_removes_nothing(root: Path) -> None:
    """Not the snapshot's fault (a damaged pack index reads so too): no drop is advised."""
    from worksnap import ManifestError

    ws = Workspace(root)
    for i in range(3):
        write(root, "a.txt", str(i) * 50)
        ws.snapshot(step=i)
    newest = ws.list()[0]
    ws.close()
    store = root / ".worksnap"
    disk = DiskStore(str(store))
    pack, offset, size = disk._load_index()[newest.tree][:3]
    with open(disk.paths.pack(pack), "r+b") as f:
        f.seek(offset + size // 2)
        f.write(b"\xff")
    before = {p: p.read_bytes() for p in (store / "packs").iterdir()}
    ws = Workspace(root)
    with pytest.raises(ManifestError, match="nothing removed"):
        ws.gc(Retention(keep_last=1))
    assert len(ws.list()) == 3
    assert {p: p.read_bytes() for p in (store / "packs").iterdir()} == before


@pytest.mark.parametrize("damaged", ["record", "format 1 manifest"])
def test_gc_with_a_damaged_snapshot_removes_no_object_and_says_how_to_drop_it(
    root: Path, damaged: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The review: one hand-edited record stopped every gc and the configured retention
    for good (`--drop-session` of another session too), and no message said what to do."""
    from worksnap.cli import main

    ws = Workspace(root)
    for i in range(3):
        write(root, "a.txt", str(i) * 50)
        ws.snapshot(step=i)
    newest = ws.list()[0]  # kept by keep-last: what it needs must be known
    write(root, "b.txt", "other")
    Workspace(root, session="other").snapshot()
    ws.close()
    store = root / ".worksnap"
    record = store / "snapshots" / f"{newest.id}.json"
    if damaged == "record":
        record.write_bytes(b"{not json")
    else:
        downgrade(store)
        record = store / "manifests" / f"{newest.id}.json"
        record.write_bytes(b"{not json")
    before = {p: p.read_bytes() for p in (store / "packs").iterdir()}
    way_out = f"(its record: {record}): worksnap gc --drop {newest.id}"
    assert any(way_out in line for line in Workspace(root).verify())
    capsys.readouterr()
    args = ["--root", str(root), "gc", "--keep-last", "1", "--drop-session", "other"]
    assert main(args) == 0  # the records go: dropping one never loses what another needs
    out, err = capsys.readouterr()
    assert re.match(r"dropped [23] snapshots, 0 objects", out)
    assert f"removed no object: snapshot {newest.id} is unreadable" in err and way_out in err
    assert all(p.read_bytes() == data for p, data in before.items())
    assert [s.session for s in Workspace(root).list(all_sessions=True)] == ["default"]
    # The configured retention says the same after each snapshot.
    (store / "config.json").write_text(json.dumps({"retention": {"keep_last": 1}}))
    ws = Workspace(root)
    write(root, "a.txt", "new")
    ws.snapshot()
    if damaged != "record":  # listed, so dropped by retention in its turn: all is swept
        assert not record.exists() and ws.warnings == [] and ws.verify() == []
        return
    assert any(
        w.startswith("the configured retention removed no object") and way_out in w
        for w in ws.warnings
    )
    assert all(p.read_bytes() == data for p, data in before.items())
    # The way out: the snapshot goes, and then what no snapshot needs.
    report = ws.gc(drop=[newest.id])
    assert report.unswept is None and newest.id in report.dropped and report.objects > 0
    assert ws.verify() == [] and ws.restore("latest").ok


def kinded(snapshot_id: str, minutes_ago: float, kind: str, session: str = "default") -> Summary:
    return msgspec.structs.replace(summary(snapshot_id, minutes_ago, session), kind=kind)


def test_automatic_snapshots_take_no_place_and_go_first() -> None:
    # Newest first: three runs, a step, two pre-restores, two steps, a run.
    history = [
        kinded("run3", 1, "run-after"), kinded("run2", 2, "run-before"),
        kinded("run1", 3, "run-settled"), kinded("step3", 4, "step"),
        kinded("pre2", 5, "pre-restore"), kinded("pre1", 6, "pre-restore"),
        kinded("step2", 7, "step"), kinded("step1", 8, "manual"), kinded("run0", 9, "run-after"),
    ]  # fmt: skip
    now = datetime.now(timezone.utc)

    def drop(policy: Retention, **kw: object) -> list[str]:
        return sorted(
            select_expired(history, policy, keep=set(), now=now, object_sizes=lambda _: {}, **kw)  # type: ignore[arg-type]
        )

    # keep_last counts what people and runtimes took: all three steps stay. Of the
    # automatic ones, only those undo walks through before it reaches step3, at most 3.
    assert drop(Retention(keep_last=3)) == ["pre1", "pre2", "run0"]
    assert drop(Retention(keep_last=2)) == ["pre1", "pre2", "run0", "run1", "step1"]
    assert drop(Retention(keep_last=1)) == [
        "pre1",
        "pre2",
        "run0",
        "run1",
        "run2",
        "step1",
        "step2",
    ]
    # 0 still keeps the session's newest (whatever its kind), unless everything goes.
    assert "run3" not in drop(Retention(keep_last=0))
    assert drop(Retention(keep_last=0), everything=True) == sorted(s.id for s in history)
    # Nothing counted: nothing dropped.
    assert drop(Retention(max_age="1d")) == []
    # max_bytes: what people took gets the room before what worksnap took.
    sizes = {s.id: {s.id: 100} for s in history}
    dropped = sorted(
        select_expired(history, Retention(max_bytes="450"), keep=set(), now=now,
                       object_sizes=sizes.__getitem__)
    )  # fmt: skip
    assert dropped == ["pre1", "pre2", "run0", "run1", "run2"]  # run3 (newest) + 3 steps fit


def test_keep_last_keeps_the_pre_restore_snapshot_undo_reaches_first(root: Path) -> None:
    """The review: keep-last 5, three snapshots taken on purpose, and the next one dropped
    the pre-restore snapshot of a restore, the only copy of the edit it overwrote."""
    ws = Workspace(root)
    (root / ".worksnap").mkdir()
    (root / ".worksnap" / "config.json").write_text(json.dumps({"retention": {"keep_last": 5}}))
    write(root, "f", "A")
    ws.snapshot()
    write(root, "f", "B")
    ws.snapshot()
    write(root, "f", "unsaved work")
    assert ws.restore("latest~1").ok
    write(root, "f", "C")
    ws.snapshot()
    assert [s.kind for s in ws.list()] == [
        "manual", "pre-restore", "manual", "manual"
    ]  # fmt: skip
    assert ws.undo().ok
    assert (root / "f").read_text() == "unsaved work"
    # Still bounded: the N newest people took, and the N newest undo can go to.
    history = [
        kinded("c", 1, "step"), kinded("pre3", 2, "pre-restore"), kinded("pre2", 3, "pre-restore"),
        kinded("pre1", 4, "pre-restore"), kinded("b", 5, "step"), kinded("a", 6, "step"),
    ]  # fmt: skip
    now = datetime.now(timezone.utc)
    dropped = select_expired(
        history, Retention(keep_last=2), keep=set(), now=now, object_sizes=lambda _: {}
    )
    assert sorted(dropped) == ["a", "pre1", "pre2"]


@pytest.mark.parametrize("after", ["snapshots of the same tree", "empty checkpoints"])
def test_keep_last_keeps_what_the_next_undo_reaches_past_what_it_passes_over(
    root: Path, after: str
) -> None:
    """Stop 41's second look: keep-last 2, a restore (its pre-restore snapshot the only
    copy of an edit), then two snapshots of the unchanged tree (or two `begin`s that
    captured nothing): they took both places, undo passes over them (nothing to set
    back), and the configured retention dropped the snapshot undo went to."""
    ws = Workspace(root)
    (root / ".worksnap").mkdir()
    (root / ".worksnap" / "config.json").write_text(json.dumps({"retention": {"keep_last": 2}}))
    write(root, "f", "A")
    first = ws.snapshot()
    write(root, "f", "unsaved edit")
    assert ws.restore(first.id).ok
    for _ in range(2):
        if after == "snapshots of the same tree":
            ws.snapshot()
        else:
            ws.begin()
    ws.snapshot()
    assert "pre-restore" in [s.kind for s in ws.list()]
    assert ws.undo().ok
    assert (root / "f").read_text() == "unsaved edit"
    # Still bounded: of a run of one tree, undo can reach only the newest.
    history = [msgspec.structs.replace(s, tree=t) for s, t in zip([
        kinded("s4", 1, "step"), kinded("s3", 2, "step"), kinded("s2", 3, "step"),
        kinded("s1", 4, "step"), kinded("s0", 5, "step"),
    ], ["T2", "T2", "T1", "T1", "T0"], strict=True)]  # fmt: skip
    now = datetime.now(timezone.utc)
    dropped = select_expired(
        history, Retention(keep_last=1), keep=set(), now=now, object_sizes=lambda _: {}
    )
    assert sorted(dropped) == ["s0", "s1", "s2", "s3"]
    dropped = select_expired(
        history, Retention(keep_last=2), keep=set(), now=now, object_sizes=lambda _: {}
    )
    assert sorted(dropped) == ["s0", "s1"]  # s2 the first undo's, s3 a step kept


def test_gc_keeps_labelled_steps_over_run_snapshots(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report: `gc --keep-last 5` dropped every labelled step and kept run-* ones."""
    from worksnap.cli import main

    ws = Workspace(root)
    steps = []
    for i in range(5):
        write(root, "a.txt", f"step {i}")
        steps.append(ws.snapshot(step=i, kind="step", label=f"step {i}").id)
    for i in range(8):
        write(root, "a.txt", f"run {i}")
        ws.snapshot(kind="run-before", label="make test", automatic=True)
        ws.snapshot(kind="run-after", label="make test", automatic=True)
    capsys.readouterr()
    assert main(["--root", str(root), "--json", "gc", "--keep-last", "5", "--dry-run"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert preview["dry_run"] is True and preview["snapshots"] == 11
    assert len(ws.list()) == 21  # a dry run removes nothing
    assert main(["--root", str(root), "--json", "gc", "--keep-last", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dropped"] == preview["dropped"] and report["objects"] == preview["objects"]
    kept = ws.list()
    assert [s.id for s in kept if s.kind == "step"] == steps[::-1]  # every labelled step
    # A run's two snapshots hold one tree: undo can reach only the newer (it passes over
    # the other), so the five undo can go to are five run-afters.
    assert [s.kind for s in kept if s.kind != "step"] == ["run-after"] * 5
    assert main(["--root", str(root), "gc", "--keep-last", "0"]) == 2
    assert "add --all" in capsys.readouterr().err
    assert main(["--root", str(root), "gc", "--keep-last", "0", "--all"]) == 0
    assert ws.list() == []


def test_a_retention_setting_that_keeps_nothing_is_refused(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review I 11: `config max-age 0` (0 reads as "no limit" to many) was taken without a
    word, and the next snapshot dropped every earlier one of the session."""
    from tests.conftest import run_cli

    for step in range(3):
        write(root, "a.txt", str(step))
        Workspace(root).snapshot(step=step)
    for key, value in [("keep-last", "0"), ("max-age", "0"), ("max-age", "0d"), ("max-bytes", "0")]:
        code, out, err = run_cli(capsys, root, "config", key, value)
        assert (code, out) == (2, ""), err
        assert err.startswith(f"worksnap: error: {key} {value} would keep no snapshot but pinned")
        assert f"`worksnap config {key} none` clears the setting" in err
    Workspace(root).snapshot()
    assert len(Workspace(root).list()) == 4
    code, _, err = run_cli(capsys, root, "config", "keep-last", "2")
    assert code == 0, err
    Workspace(root).snapshot()
    # The two newest (of one tree: nothing changed since step 2), and step 1, which the
    # first undo goes to (it passes over the snapshots of the tree as it is).
    assert [s.step for s in Workspace(root).list()] == [None, None, 1]


def test_gc_dry_run_says_what_gc_then_does_and_changes_no_byte_of_the_store(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review I 04: the dry run said "12 objects (1.4 KiB freed)", gc then "(672 B freed)".

    The dry run summed the raw sizes of what dropped snapshots named; gc counts what
    its sweep removes: stored (compressed) bytes, leftovers of killed writes, objects
    no snapshot named. Here files change at every snapshot (so versions stand on one
    another), a large file goes loose, packs are partly emptied, and a killed
    snapshot left a pack without an index and a temp file.
    """
    from tests.conftest import run_cli
    from worksnap.output import human_bytes

    ws = Workspace(root)
    text = os.urandom(6000).hex()
    for i in range(6):
        text = text[:3000] + f"edit {i}\n" + text[3000:]
        write(root, "notes.txt", text)
        write(root, f"new{i}.txt", f"file {i}\n" * 20)
        write(root, "small.txt", f"v{i}")
        (root / "big.bin").write_bytes(bytes([i]) * (SMALL + 10))
        ws.snapshot(step=i)
    ws.close()
    store = root / ".worksnap"
    (store / "packs" / "0123456789abcdef.pack").write_bytes(b"a killed writer's pack")
    (store / "objects" / "ab").mkdir()
    (store / "objects" / "ab" / f"{'c' * 62}{TEMP_MARK}0123").write_bytes(b"half a file")
    before = tree_state(store, skip=())

    code, out, _ = run_cli(capsys, root, "gc", "--keep-last", "2", "--dry-run")
    assert code == 0
    code, dry_json, _ = run_cli(capsys, root, "--json", "gc", "--keep-last", "2", "--dry-run")
    assert code == 0
    api = Workspace(root).gc(Retention(keep_last=2), dry_run=True)
    assert tree_state(store, skip=()) == before  # not one byte changed
    preview = json.loads(dry_json)
    code, run_json, _ = run_cli(capsys, root, "--json", "gc", "--keep-last", "2")
    assert code == 0
    report = json.loads(run_json)
    assert report["snapshots"] == 4 and report["objects"] > 4 and report["bytes"] > 0
    assert {**preview, "dry_run": False} == report
    assert (api.snapshots, api.objects, api.bytes) == (4, report["objects"], report["bytes"])
    assert out.startswith(
        f"would drop 4 snapshots, {report['objects']} objects "
        f"({human_bytes(report['bytes'])} freed); nothing was removed:\n"
    )
    assert Workspace(root).verify() == []


def test_a_dry_run_in_a_format_1_store_says_its_numbers_are_about(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gc migrates a format 1 store first: the trees that writes for dropped snapshots
    go too, which the dry run cannot count, so it says its numbers are about."""
    from tests.conftest import run_cli

    ws = Workspace(root)
    for i in range(4):
        write(root, "a.txt", f"version {i}\n" * 50)
        ws.snapshot(step=i)
    ws.close()
    downgrade(root / ".worksnap")
    code, out, err = run_cli(capsys, root, "gc", "--keep-last", "1", "--dry-run")
    assert code == 0 and out.startswith("would drop 3 snapshots, about ")
    assert re.match(
        r"would drop 3 snapshots, about \d+ objects \(about \d+ B freed\); nothing", out
    )
    assert err.startswith("worksnap: note: about: gc first migrates this store's format 1")
    code, out, _ = run_cli(capsys, root, "--json", "gc", "--keep-last", "1", "--dry-run")
    assert json.loads(out)["estimate"] is True
    code, out, _ = run_cli(capsys, root, "--json", "gc", "--keep-last", "1")
    assert (json.loads(out)["snapshots"], json.loads(out)["estimate"]) == (3, False)
    code, out, _ = run_cli(capsys, root, "--json", "gc", "--keep-last", "1", "--dry-run")
    assert json.loads(out)["estimate"] is False  # migrated: exact again
