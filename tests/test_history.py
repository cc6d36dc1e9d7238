"""Steps, sessions, undo/redo and per-file checkpoints, in the style of the seed systems."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tests.conftest import tree_state, write
from tests.trees import Spec, summary, tree
from worksnap import InputError, Manifest, Retention, Summary, Workspace
from worksnap.history import CHECKPOINT, Frame, SessionState, checkpoint_target, undo_target


def test_rewind_to_a_step_restores_its_newest_snapshot(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "step 1")
    ws.snapshot(step=1, kind="step")
    write(root, "a.txt", "step 1, later")
    state_1b = tree_state(root)
    ws.snapshot(step=1, kind="step")
    write(root, "a.txt", "step 2")
    write(root, "b.txt", "new in 2")
    ws.snapshot(step=2, kind="step")
    result = ws.rewind(1)
    assert result.ok
    assert tree_state(root) == state_1b


def test_list_shows_changed_counts_since_previous_snapshot(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    ws.snapshot(step=1)
    ws.snapshot(step=2)
    write(root, "a.txt", "changed")
    write(root, "c/d.txt", "added file in a new dir")
    ws.snapshot(step=3)
    # A fresh Workspace reads the previous manifest from the store instead of memory.
    fresh = Workspace(root)
    write(root, "b.txt", "b changed")
    fresh.snapshot(step=4)
    assert [(s.step, s.changed) for s in fresh.list()] == [(4, 1), (3, 3), (2, 0), (1, None)]


def test_a_new_process_finds_the_previous_snapshot_without_reading_every_record(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's newest full snapshot is noted in the cache (2,000 records took 0.13
    s to read at every plain snapshot), with a digest of the ids stored then; a note that
    cannot be right is not taken, and every record is read as before."""
    write(root, "a.txt", "a")
    with Workspace(root) as ws:
        first = ws.snapshot(step=1)
    last = root / ".worksnap" / "cache" / "last.json"

    def fresh_snapshot(text: str, *, listing: bool) -> Summary:
        write(root, "a.txt", text)
        with Workspace(root) as ws:
            if not listing:
                monkeypatch.setattr(ws.store, "summaries", lambda: pytest.fail("listed"))
            taken = ws.snapshot()
            monkeypatch.undo()
            return next(s for s in ws.list() if s.id == taken.id)

    def parent(summary: Summary) -> str | None:
        with Workspace(root) as ws:
            record = ws.store.load_record(summary.id)
        assert record is not None
        return record.parent

    second = fresh_snapshot("b", listing=False)
    assert (second.changed, parent(second)) == (1, first.id)
    assert msgspec.json.decode(last.read_bytes())["default"][0] == second.id
    noted = last.read_bytes()
    third = fresh_snapshot("c", listing=False)
    assert (third.changed, parent(third)) == (1, second.id)
    digest = msgspec.json.decode(last.read_bytes())["default"][1]
    other = Workspace(root, session="other")
    write(root, "a.txt", "other")
    theirs = other.snapshot()
    assert parent(fresh_snapshot("d", listing=True)) != theirs.id  # the ids changed: listed
    newest = next(s for s in Workspace(root).list() if s.session == "default")
    listing = msgspec.json.decode(last.read_bytes())["default"][1]
    # Notes that cannot be right: the answer is that of the records, every one read.
    for i, note in enumerate(
        (
            noted,  # an older note (a crash after its record, before its note): older ids
            b"not json",
            b'{"default": ["../../x", "%s"]}' % listing.encode(),
            b'{"default": ["%s", "%s"]}' % (theirs.id.encode(), listing.encode()),
            b'{"default": ["%s", "%s"]}' % (first.id.encode(), digest.encode()),
        )
    ):
        last.write_bytes(note)
        again = fresh_snapshot(f"note {i}", listing=True)
        assert (again.changed, parent(again)) == (1, newest.id), note
        newest = again
        listing = msgspec.json.decode(last.read_bytes())["default"][1]


def test_sessions_never_mix_histories(root: Path) -> None:
    write(root, "a.txt", "a")
    alpha = Workspace(root, session="alpha")
    beta = Workspace(root, session="beta")
    first = alpha.snapshot(step=1)
    write(root, "a.txt", "beta's edit")
    second = beta.snapshot(step=1)
    assert [s.id for s in alpha.list()] == [first.id]
    assert [s.id for s in beta.list()] == [second.id]
    assert alpha.resolve("step:1") == first.id
    assert beta.resolve("latest") == second.id
    assert {s.id for s in alpha.list(all_sessions=True)} == {first.id, second.id}
    with pytest.raises(InputError, match="bad session name"):
        Workspace(root, session="../escape")


def test_undo_reverses_a_restore_and_redo_reapplies_it(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "v1")
    first = ws.snapshot(step=1)
    write(root, "a.txt", "v2")
    write(root, "new.txt", "n")
    ws.snapshot(step=2)
    at_step_2 = tree_state(root)
    assert ws.restore(first.id).ok
    at_step_1 = tree_state(root)
    assert ws.undo().ok
    assert tree_state(root) == at_step_2
    assert ws.redo().ok
    assert tree_state(root) == at_step_1


def test_undo_discards_edits_since_last_step_and_walks_back(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "one")
    ws.snapshot(step=1)
    one = tree_state(root)
    write(root, "a.txt", "two")
    ws.snapshot(step=2)
    two = tree_state(root)
    write(root, "a.txt", "unsaved edit")
    write(root, "junk.txt", "junk")
    edits = tree_state(root)
    assert ws.undo().ok
    assert tree_state(root) == two
    assert ws.undo().ok
    assert tree_state(root) == one
    with pytest.raises(InputError, match="nothing to undo"):
        ws.undo()
    assert ws.redo().ok
    assert tree_state(root) == two
    assert ws.redo().ok
    assert tree_state(root) == edits
    with pytest.raises(InputError, match="nothing to redo"):
        ws.redo()


def test_new_snapshot_clears_redo_and_redo_then_changes_nothing(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "one")
    ws.snapshot(step=1)
    write(root, "a.txt", "two")
    assert ws.undo().ok
    ws.snapshot(step=2)
    before = tree_state(root)
    with pytest.raises(InputError, match="new snapshot clears redo"):
        ws.redo()
    assert tree_state(root) == before


def test_undo_stack_survives_a_restart(root: Path) -> None:
    write(root, "a.txt", "one")
    Workspace(root).snapshot(step=1)
    write(root, "a.txt", "two")
    edits = tree_state(root)
    assert Workspace(root).undo().ok
    assert Workspace(root).redo().ok
    assert tree_state(root) == edits


def test_unchanged_step_records_the_same_tree(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "a")
    first = ws.snapshot(step=1).tree
    assert ws.snapshot(step=2).tree == first
    write(root, "a.txt", "b")
    assert ws.snapshot(step=3).tree != first


def test_checkpoint_capture_and_rewind_touch_only_captured_paths(root: Path) -> None:
    ws = Workspace(root)
    write(root, "edited.txt", "before turn 1")
    write(root, "untouched.txt", "the agent never named this")
    ws.begin(step=1, label="turn 1\nmore prompt text")
    ws.capture_before(["edited.txt", "created.txt"])
    write(root, "edited.txt", "turn 1 edit")
    ws.capture_before(["edited.txt"])  # first capture wins
    write(root, "edited.txt", "turn 1 second edit")
    write(root, "created.txt", "made in turn 1")
    write(root, "untouched.txt", "changed by the user meanwhile")
    ws.begin(step=2)
    ws.capture_before([str(root / "later.txt"), "edited.txt"])
    write(root, "later.txt", "made in turn 2")
    write(root, "edited.txt", "turn 2 edit")
    checkpoint = ws.load("step:1")
    assert checkpoint.kind == "checkpoint"
    assert checkpoint.label == "turn 1"
    assert [e.path for e in checkpoint.entries] == ["edited.txt"]
    assert checkpoint.absent == ["created.txt"]
    plan = ws.plan_restore(checkpoint)
    assert [(c.op.value, c.path) for c in plan.changes] == [
        ("A", "created.txt"),
        ("M", "edited.txt"),
        ("A", "later.txt"),
    ]
    assert ws.rewind(1).ok
    assert (root / "edited.txt").read_text() == "before turn 1"
    assert not (root / "created.txt").exists()
    assert not (root / "later.txt").exists()
    assert (root / "untouched.txt").read_text() == "changed by the user meanwhile"


def test_capture_costs_only_named_files(root: Path) -> None:
    from worksnap.scan import Scan
    from worksnap.workspace import Seams

    def no_scan(*args: object, **kwargs: object) -> Scan:
        raise AssertionError("capture must not scan the tree")

    write(root, "a.txt", "a")
    ws = Workspace(root, seams=Seams(scan_tree=no_scan))
    ws.begin(step=1)
    checkpoint = ws.capture_before(["a.txt"])
    assert [e.path for e in checkpoint.entries] == ["a.txt"]


def test_capture_refuses_paths_outside_root_and_without_checkpoint(
    root: Path, tmp_path: Path
) -> None:
    ws = Workspace(root)
    with pytest.raises(InputError, match="no open checkpoint"):
        ws.capture_before(["a.txt"])
    ws.begin(step=1)
    with pytest.raises(InputError, match="not a path inside"):
        ws.capture_before([str(tmp_path / "elsewhere.txt")])
    with pytest.raises(InputError, match="not a path inside"):
        ws.capture_before(["../escape.txt"])
    with pytest.raises(InputError, match="excluded"):
        ws.capture_before([".git/config"])
    with pytest.raises(InputError, match="excluded"):
        ws.capture_before(["sub/.GIT/config"])  # every spelling the scan leaves out
    with pytest.raises(InputError, match="excluded"):
        ws.capture_before([".worksnap/root"])


def test_mixed_session_of_snapshots_and_checkpoints(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "a0")
    write(root, "b.txt", "b0")
    full = ws.snapshot(step=1)
    state_full = tree_state(root)
    ws.begin(step=2)
    ws.capture_before(["a.txt"])
    write(root, "a.txt", "a2")
    write(root, "b.txt", "b2 (shell edit, not captured)")
    ws.snapshot(step=3)
    ws.begin(step=4)
    ws.capture_before(["b.txt"])
    write(root, "b.txt", "b4")
    assert ws.rewind(2).ok
    assert (root / "a.txt").read_text() == "a0"
    assert (root / "b.txt").read_text() == "b2 (shell edit, not captured)"
    assert ws.restore(full.id).ok
    assert tree_state(root) == state_full


def test_symlink_and_mode_before_images(root: Path) -> None:
    ws = Workspace(root)
    write(root, "run.sh", "#!/bin/sh\n", mode=0o755)
    os.symlink("run.sh", root / "link")
    ws.begin(step=1)
    ws.capture_before(["run.sh", "link"])
    write(root, "run.sh", "changed", mode=0o600)
    (root / "link").unlink()
    write(root, "link", "now a file")
    assert ws.rewind(1).ok
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o755
    assert os.readlink(root / "link") == "run.sh"


def test_meta_and_attachments_round_trip(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    messages = b'[{"role": "user", "content": "hi"}]'
    snap = ws.snapshot(
        step=1,
        meta={"cut_len": "12", "full_compact_count": "0"},
        attach={"messages.json": messages},
    )
    loaded = ws.load(snap.id)
    assert loaded.meta == {"cut_len": "12", "full_compact_count": "0"}
    assert ws.attachment(snap.id, "messages.json") == messages
    with pytest.raises(InputError, match="no attachment"):
        ws.attachment(snap.id, "missing.json")
    checkpoint = ws.begin(step=2, attach={"messages.json": b"[]"})
    assert ws.attachment(checkpoint.id, "messages.json") == b"[]"


def test_meta_no_record_could_hold_is_refused_before_anything_is_stored(root: Path) -> None:
    """A review found a 20 MB `meta` stored as a snapshot whose record was too big to read
    back: `list` skipped it, `rewind` took an older one, and every `gc` failed after it."""
    write(root, "a.txt", "a")
    ws = Workspace(root)
    kept = ws.snapshot(step=1)
    for meta in ({"conversation": "x" * (2 << 20)}, {"k": "\udfff"}, {"k": 5}):
        with pytest.raises(InputError, match="meta"):
            ws.snapshot(step=1, meta=meta)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="meta"):
            ws.begin(step=2, meta=meta)  # type: ignore[arg-type]
    assert [s.id for s in ws.list()] == [kept.id]
    assert ws.resolve("step:1") == kept.id
    ws.gc(Retention(keep_last=1))
    assert ws.verify() == []


def test_a_checkpoint_is_compared_as_the_tree_it_rewinds_to(root: Path) -> None:
    """After `begin`, `latest` is a checkpoint holding only what was captured. `status` and
    `diff` compared it as a whole tree: every file it never captured showed as added, and
    the documented `worksnap diff | git apply -R` deleted them (two reviews found it)."""
    from worksnap.inspection import status_state

    for name in ("f1", "f2", "f3"):
        write(root, name, f"{name}\n")
    ws = Workspace(root)
    full = ws.snapshot(step=1)
    checkpoint = ws.begin(step=2)
    ws.capture_before(["f1"])
    write(root, "f1", "edited\n")
    write(root, "f2", "edited too, never captured\n")
    changes, _ = ws.diff()
    assert [(c.op, c.path) for c in changes] == [("M", "f1")]
    _, status_changes = status_state(ws, session="default", found="option", daemon=lambda: {})
    assert [(c.op, c.path) for c in status_changes] == [("M", "f1")]
    assert [(c.op, c.path) for c in ws.diff(full.id)[0]] == [("M", "f1"), ("M", "f2")]
    for pair in ((full.id, checkpoint.id), (checkpoint.id, full.id)):
        with pytest.raises(InputError, match="checkpoint holds only the files captured"):
            ws.diff(*pair)


def test_label_is_first_line_trimmed_to_200_bytes(root: Path) -> None:
    ws = Workspace(root)
    long = "  " + "\u00e9" * 150 + "\nsecond line"
    label = ws.snapshot(label=long).label
    assert label is not None
    assert len(label.encode()) <= 200
    assert label == "\u00e9" * 100


def test_parallel_captures_lose_no_before_image(root: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    names = [f"f{i}.txt" for i in range(24)]
    for name in names:
        write(root, name, "before " + name)
    ws = Workspace(root)
    ws.begin(step=1)

    def capture(name: str) -> None:
        Workspace(root).capture_before([name])  # as a separate tool call would

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(capture, names))
    checkpoint = ws.load("step:1")
    assert sorted(e.path for e in checkpoint.entries) == sorted(names)


def test_redo_of_a_state_already_there_pops_its_frame(root: Path) -> None:
    ws = Workspace(root)
    write(root, "a.txt", "one")
    ws.snapshot(step=1)
    write(root, "a.txt", "two")
    assert ws.undo().ok
    write(root, "a.txt", "two")  # the user re-did the edit by hand
    result = ws.redo()
    assert result.ok and result.restored == []
    with pytest.raises(InputError, match="nothing to redo"):
        ws.redo()


# -- the decisions, as tables on in-memory manifests ----------------------------

ONE, TWO, THREE = tree({"a": "1"}), tree({"a": "2"}), tree({"a": "3"})
# TWO's entries and dirs, and a new ignored path: a format 2 root tree of another digest.
TWO_LEFT_OUT = msgspec.structs.replace(TWO, tree="f" * 64, ignored=["__pycache__"])


def _history(*rows: tuple[str, Manifest, str]) -> list[Summary]:
    """Summaries newest first, from (id, tree, kind) oldest first."""
    made = [summary(i, of, kind=kind, second=n) for n, (i, of, kind) in enumerate(rows)]
    return made[::-1]


UNDO: dict[str, tuple[list[Summary], Manifest, SessionState, str | None]] = {
    "nothing yet": ([], ONE, SessionState(), None),
    "edits since the last snapshot": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step")),
        THREE,
        SessionState(),
        "s2",
    ),
    "the newest is the current state: the one before": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step")),
        TWO,
        SessionState(),
        "s1",
    ),
    "undo, redo and checkpoints never count": (
        _history(
            ("s1", ONE, "step"),
            ("u", TWO, "undo"),
            ("r", TWO, "redo"),
            ("c", TWO, "checkpoint"),
        ),
        THREE,
        SessionState(),
        "s1",
    ),
    "a pre-restore snapshot counts (undo reverses a restore)": (
        _history(("s1", ONE, "step"), ("p", TWO, "pre-restore")),
        ONE,
        SessionState(),
        "p",
    ),
    "repeated undo walks further back than the last undo went": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step"), ("s3", THREE, "step")),
        TWO,
        SessionState(redo=[Frame("s2", "left")]),
        "s1",
    ),
    "only older than the last undo's target, even when equal to now": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step")),
        ONE,
        SessionState(redo=[Frame("s2", "left")]),
        None,
    ),
    "a snapshot that differs only in left-out paths is the current state": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step")),
        TWO_LEFT_OUT,
        SessionState(),
        "s1",
    ),
    "only left-out paths changed since the first snapshot: nothing to undo": (
        _history(("s2", TWO, "step")),
        TWO_LEFT_OUT,
        SessionState(),
        None,
    ),
    "a redo frame whose target is gone is no limit": (
        _history(("s1", ONE, "step"), ("s2", TWO, "step")),
        THREE,
        SessionState(redo=[Frame("dropped", "left")]),
        "s2",
    ),
}


@pytest.mark.parametrize("case", UNDO)
def test_undo_target(case: str) -> None:
    history, current, state, expected = UNDO[case]
    by_tree = {m.tree: m for m in (ONE, TWO, THREE, TWO_LEFT_OUT)}
    trees = {s.id: s.tree for s in history}

    def load(snapshot_id: str) -> Manifest:
        return by_tree[trees[snapshot_id]]

    assert undo_target(history, current, state, load=load) == expected


def files(root: Path) -> dict[bytes, object]:
    """Every path in the tree and its content (None: a directory)."""
    return {p: (s[3] if s[0] == "file" else None) for p, s in tree_state(root).items()}


def test_undo_after_a_checkpointed_turn_sets_back_that_turn_only(root: Path) -> None:
    """A review: after a full snapshot, an edit (b), then a turn a checkpoint recorded
    (a edited, c made), `status` showed "M a" while `undo` went to the full snapshot,
    reverting b and removing c. Undo now sets back what the turn captured, as a rewind
    to that checkpoint does; the next undo goes on to the full snapshot; redo returns."""
    write(root, "a", "a0\n")
    write(root, "b", "b0\n")
    with Workspace(root) as ws:
        ws.snapshot()
        write(root, "b", "b1\n")  # before the turn: in no snapshot
        ws.begin()
        ws.capture_before(["a", "new/c"])
        write(root, "a", "a1\n")
        write(root, "new/c", "made by the turn\n")
        write(root, "d", "not captured\n")
        first = ws.undo()
        assert first.ok and sorted(first.restored) == ["a", "new", "new/c"]
        assert files(root) == {b"a": b"a0\n", b"b": b"b1\n", b"d": b"not captured\n"}
        back = ws.redo()
        assert back.ok and (root / "a").read_text() == "a1\n"
        assert (root / "new" / "c").read_text() == "made by the turn\n"
        ws.undo()
        second = ws.undo()  # past the checkpoint: the full snapshot
        assert second.ok
        assert files(root) == {b"a": b"a0\n", b"b": b"b0\n"}


@pytest.mark.parametrize("left_out", ["ignored", "excluded"])
def test_undo_goes_past_a_checkpoint_whose_rewind_changes_nothing_now(
    root: Path, left_out: str
) -> None:
    """A review: the turn's one captured file became ignored (or excluded); undo picked
    that checkpoint every time and restored nothing ("restored 0 paths"), never reaching
    the full snapshot."""
    write(root, "a", "a0\n")
    write(root, "b", "b0\n")
    exclude = ("a",) if left_out == "excluded" else ()  # from the undo on
    with Workspace(root) as ws:
        ws.snapshot()
        write(root, "b", "b1\n")
        ws.begin()
        ws.capture_before(["a"])
        write(root, "a", "a1\n")
        if left_out == "ignored":
            write(root, ".gitignore", "a\n")
    with Workspace(root, exclude=exclude) as ws:
        first = ws.undo()
        assert first.ok and first.restored, first
        assert (root / "b").read_text() == "b0\n"  # the full snapshot's
        assert (root / "a").read_text() == "a1\n"  # left out now: never touched


def test_undo_goes_past_a_checkpoint_whose_deleted_file_is_excluded_now(root: Path) -> None:
    """The undo differential walk (seed 3, step 30): a turn deleted its captured file,
    which is excluded now; no restore recreates what today's rules exclude, yet undo
    counted the checkpoint (the file is in no capture's `excluded`: it is gone) and
    restored nothing, every time."""
    write(root, "a", "a0\n")
    write(root, "b", "b0\n")
    with Workspace(root) as ws:
        ws.snapshot()
        write(root, "b", "b1\n")
        ws.begin()
        ws.capture_before(["a"])
        (root / "a").unlink()
    with Workspace(root, exclude=("a",)) as ws:
        first = ws.undo()
        assert first.ok and first.restored == ["b"], first  # the full snapshot's
        assert files(root) == {b"b": b"b0\n"}


def test_undo_goes_past_a_checkpoint_that_rewinds_only_below_a_large_file(root: Path) -> None:
    """A turn made a file in a directory where a large file (in no snapshot) was: its
    rewind touches nothing at or below what its checkpoint knew as large (the planner
    never touches what the target left out, nor below it), yet undo counted it and
    restored nothing, every time (found while reading `checkpoint_changes` against the
    planner, for the undo differential walk)."""
    write(root, "a", "a0\n")
    write(root, "big", "b" * 100)
    with Workspace(root, max_file_bytes=64) as ws:
        first = ws.snapshot().id
        write(root, "a", "a1\n")
        ws.begin()
        assert ws.capture_before(["big", "big/c"]).large == ["big"]
        (root / "big").unlink()
        write(root, "big/c", "made by the turn\n")
        assert ws.plan_undo().target.id == first
        assert ws.undo().restored == ["a"]


def test_undo_goes_past_a_checkpoint_whose_file_would_replace_a_directory_it_cannot_empty(
    root: Path,
) -> None:
    """Turn 1 knew p/q as a large file (in no snapshot), turn 2 knew p as a file; after
    an undo of turn 2, p is an empty directory again. Rewinding turn 1 puts the file p
    back only by removing that directory, which the planner never removes when the
    target left something out below it (a `B` change); undo counted the checkpoint and
    restored nothing, every time (found reading `checkpoint_changes` against the
    planner, for the undo differential walk)."""
    write(root, "a", "a0\n")
    write(root, "p/q", "q" * 100)
    with Workspace(root, max_file_bytes=64) as ws:
        first = ws.snapshot().id
        write(root, "a", "a1\n")  # the person's edit
        ws.begin()
        assert ws.capture_before(["p/q"]).large == ["p/q"]
        (root / "p/q").unlink()
        (root / "p").rmdir()
        write(root, "p", "the person's file\n")
        ws.begin()
        ws.capture_before(["p"])
        (root / "p").unlink()
        (root / "p").mkdir()
        assert ws.undo().restored == ["p"]  # turn 2's
        (root / "p").unlink()
        (root / "p").mkdir()
        assert ws.plan_undo().target.id == first
        assert ws.undo().restored == ["a"]


def test_undo_after_a_turn_made_the_gitignore_larger_than_the_cap(root: Path) -> None:
    """Found for the undo differential walk: the turn made `.gitignore` larger than the
    cap and then `new.log`, which only its before-image ignores. The rewind leaves
    `.gitignore` as it is (large now, in no snapshot), so `new.log` is not ignored after
    it: the planner decided by the before-image, kept `new.log`, and undo went to the
    checkpoint to restore nothing, every time. It decides by the rules the rewind
    leaves in force: `new.log` goes."""
    write(root, ".gitignore", "*.log\n")
    with Workspace(root, max_file_bytes=64) as ws:
        ws.begin()
        ws.capture_before([".gitignore"])
        write(root, ".gitignore", "# " + "x" * 98 + "\n")  # over the cap: large now
        ws.capture_before(["new.log"])
        write(root, "new.log", "made by the turn\n")
        plan = ws.plan_undo()
        assert [(c.op.value, c.path) for c in plan.changes] == [("A", "new.log")]
        assert ws.undo().restored == ["new.log"]
        assert not (root / "new.log").exists()
        assert (root / ".gitignore").read_text().startswith("# xx")  # in no snapshot: left
        with pytest.raises(InputError):
            ws.plan_undo()  # nothing left to undo


def test_a_restore_decides_by_the_gitignore_it_leaves_in_force(root: Path) -> None:
    """A `.gitignore` over the cap now is in no snapshot, so a restore leaves it: what its
    rules do not ignore, and the target lacks, goes, though the target's `.gitignore`
    ignored it. One the target holds that ignores itself now is left too: its rules,
    read from the tree, keep what they ignore."""
    write(root, ".gitignore", "*.log\n")
    write(root, "sub/.gitignore", "*.tmp\n")
    with Workspace(root, max_file_bytes=64) as ws:
        first = ws.snapshot()
        write(root, ".gitignore", "# " + "x" * 98 + "\n")  # over the cap: left as it is
        write(root, "new.log", "no rule ignores me now\n")
        write(root, "sub/.gitignore", "/.gitignore\n*.tmp\n*.keep\n")  # ignores itself
        write(root, "sub/a.keep", "ignored by the rules left in force\n")
        write(root, "sub/b.tmp", "ignored either way\n")
        plan = ws.plan_restore(first)
        assert [(c.op.value, c.path) for c in plan.changes] == [("A", "new.log")]
        assert ws.restore(first.id).restored == ["new.log"]
        assert (root / "sub/a.keep").exists() and (root / "sub/b.tmp").exists()
        assert ws.plan_restore(first).changes == []


def test_a_restore_waits_on_no_fifo_left_where_a_gitignore_was(root: Path) -> None:
    """A FIFO where a `.gitignore` was (never captured, so left as it is) is no rule file,
    as git reads none there: the plan does not wait on it, and removes what the target
    lacks that its `.gitignore` ignored."""
    write(root, "f/.gitignore", "*.log\n")
    with Workspace(root) as ws:
        first = ws.snapshot()
        (root / "f/.gitignore").unlink()
        os.mkfifo(root / "f/.gitignore")
        write(root, "f/new.log", "no rule ignores me now\n")
        plan = ws.plan_restore(first)
        assert [(c.op.value, c.path) for c in plan.changes] == [
            ("B", "f/.gitignore"), ("A", "f/new.log")  # (a FIFO is never replaced)
        ]  # fmt: skip


def test_undo_decides_by_no_gitignore_where_an_exclusion_keeps_the_rewind_from_one(
    root: Path,
) -> None:
    """A review (stop 46): the turn removed `.gitignore`, then made `x.log`; the workspace
    was opened again excluding `.gitignore`, so the rewind does not bring it back. The
    planner decided by the checkpoint's copy (`*.log`) and kept `x.log`: every undo went
    to the checkpoint and restored nothing. No rules are in force there: `x.log` goes."""
    write(root, ".gitignore", "*.log\n")
    with Workspace(root) as ws:
        ws.begin()
        ws.capture_before([".gitignore"])
        (root / ".gitignore").unlink()
        ws.capture_before(["x.log"])
        write(root, "x.log", "made by the turn\n")
    with Workspace(root, exclude=(".gitignore",)) as ws:
        assert [(c.op.value, c.path) for c in ws.plan_undo().changes] == [("A", "x.log")]
        assert ws.undo().restored == ["x.log"]
        assert not (root / ".gitignore").exists()
        with pytest.raises(InputError):
            ws.plan_undo()


def test_a_restore_reads_a_gitignore_the_target_s_exclusions_leave(root: Path) -> None:
    """A review (stop 46): `sub/.gitignore` appeared since a snapshot that excluded it, so
    the restore leaves it, and its `!x.log` keeps `x.log` from the root's `*.log`, which
    the restore brings back: `x.log` is not ignored after it and goes."""
    write(root, ".gitignore", "*.log\n")
    write(root, "sub/a.txt", "a\n")
    with Workspace(root, exclude=("sub/.gitignore",)) as ws:
        first = ws.snapshot()
    write(root, ".gitignore", "\n")
    write(root, "sub/.gitignore", "!x.log\n")
    write(root, "sub/x.log", "made since\n")
    with Workspace(root) as ws:
        plan = ws.plan_restore(first)
        assert [(c.op.value, c.path) for c in plan.changes] == [
            ("M", ".gitignore"), ("A", "sub/x.log")
        ]  # fmt: skip
        ws.restore(first.id)
        assert not (root / "sub/x.log").exists()
        assert ws.plan_restore(first).changes == []


@pytest.mark.parametrize("now_ignores", [True, False])
def test_a_restore_of_some_paths_decides_by_the_gitignore_it_leaves_outside(
    root: Path, now_ignores: bool
) -> None:
    """A review (stop 46): `restore REF sub` leaves the root's `.gitignore` as it is now,
    yet the planner decided by the target's copy: it removed `sub/deep/x.log`, ignored
    after the restore (the root's `*.log` now, `sub/deep/.gitignore`'s `!x.log` gone), or
    kept `sub/x.log`, not ignored after it (the target's root had `*.log`)."""
    write(root, ".gitignore", "\n" if now_ignores else "*.log\n")
    write(root, "sub/a.txt", "a\n")
    with Workspace(root) as ws:
        first = ws.snapshot()
        write(root, ".gitignore", "*.log\n" if now_ignores else "\n")
        if now_ignores:
            write(root, "sub/deep/.gitignore", "!x.log\n")
            write(root, "sub/deep/x.log", "work\n")
        else:
            write(root, "sub/x.log", "work\n")
        plan = ws.plan_restore(first, paths=["sub"])
        ws.restore(first.id, paths=["sub"])
        if now_ignores:  # x.log stays, and so does its directory
            assert [(c.op.value, c.path) for c in plan.changes] == [("A", "sub/deep/.gitignore")]
            assert (root / "sub/deep/x.log").exists()
        else:
            assert [(c.op.value, c.path) for c in plan.changes] == [("A", "sub/x.log")]
            assert not (root / "sub/x.log").exists()
        assert ws.plan_restore(first, paths=["sub"]).changes == []


def test_a_restore_reads_a_large_gitignore_whole_as_the_scan_does(root: Path) -> None:
    """A review (stop 46): the planner read a `.gitignore` left as it is only up to 64 MiB,
    the scan all of it: its last rule (`*.log`) was lost and the restore removed what it
    ignores after the restore."""
    write(root, ".gitignore", ("#" + "x" * 1023 + "\n") * (65 * 1024) + "*.log\n")
    write(root, "sub/a.txt", "a\n")
    with Workspace(root, max_file_bytes=1 << 20) as ws:
        first = ws.snapshot()
        write(root, "sub/.gitignore", "!x.log\n")
        write(root, "sub/x.log", "work\n")
        plan = ws.plan_restore(first)
        assert [(c.op.value, c.path) for c in plan.changes] == [("A", "sub/.gitignore")]
        ws.restore(first.id)
        assert (root / "sub/x.log").exists()


def test_a_plan_reads_from_the_tree_only_a_gitignore_the_capture_left_out(root: Path) -> None:
    """A review (stop 46): where a restore leaves a `.gitignore` (here the target's
    exclusions cover it), the planner read the tree for it whether the capture found one
    or not: in every directory asked, walking down from the root each time (a chain
    1,900 deep: 2.7 s to 35.7 s). It decides as its capture found the tree: a
    `.gitignore` made after the capture is not read; one it left out is."""
    write(root, "keep/a.txt", "a\n")
    with Workspace(root, exclude=("d/.gitignore",)) as ws:
        first = ws.snapshot()
    with Workspace(root, exclude=("e/.gitignore",)) as ws:
        write(root, "d/new.txt", "made since\n")
        write(root, "e/.gitignore", "*.tmp\n")  # excluded now: left out, and left as it is
        write(root, "e/x.tmp", "ignored now, and after\n")
        now = ws.capture(store_objects=False)
        write(root, "d/.gitignore", "*.txt\n")  # after the capture: not what it saw
        changes = [(c.op.value, c.path) for c in ws.plan_restore(first, now=now).changes]
        assert changes == [("A", "d"), ("A", "d/new.txt")]


def test_a_capture_after_an_undo_is_undone_as_the_turn_s_not_past_it(root: Path) -> None:
    """A review: after an undo, the turn went on (capture b, edit it); the next undo went
    to the full snapshot, reverting an edit no turn made (u). A capture clears redo, as a
    snapshot does, and the undo sets back the turn's files."""
    write(root, "a", "a0\n")
    write(root, "b", "b0\n")
    write(root, "u", "u0\n")
    with Workspace(root) as ws:
        ws.snapshot()
        write(root, "u", "u1\n")  # the person's edit, in no snapshot
        ws.begin()
        ws.capture_before(["a"])
        write(root, "a", "a1\n")
        assert ws.undo().ok
        ws.capture_before(["b"])
        write(root, "b", "b1\n")
        second = ws.undo()
        assert second.ok and second.restored == ["b"], second
        assert files(root) == {b"a": b"a0\n", b"b": b"b0\n", b"u": b"u1\n"}


def test_a_preview_of_a_checkpoint_rewind_reads_the_gitignore_of_the_tree_now(root: Path) -> None:
    """The undo differential walk (seed 1, step 11): a preview captures the tree without
    storing it, and a checkpoint's rewind keeps the tree's own `.gitignore`, which the
    planner reads to know what the rewind may remove; `undo --dry-run`, `plan` and
    `rewind --dry-run` failed with "object ...: missing from the store"."""
    write(root, "a", "a0\n")
    with Workspace(root) as ws:
        turn = ws.begin()
        ws.capture_before(["new"])
        write(root, "new", "made by the turn\n")
        write(root, ".gitignore", "*.log\n")  # the user's, in no snapshot
        for plan in (ws.plan_undo(), ws.plan_restore(ws.load(turn.id))):
            assert plan.target.id == turn.id
            assert [(c.op.value, c.path) for c in plan.changes] == [("A", "new")]
        assert ws.undo().restored == ["new"]


def test_undo_counts_a_checkpoint_whose_files_are_over_a_cap_lowered_since(root: Path) -> None:
    """The undo differential walk (seed 1, step 55): a rewind captures under at least its
    checkpoint's cap, so it sets back a file the turn made larger than today's (lower) cap;
    undo skipped that checkpoint as changing nothing and went to the full snapshot,
    reverting an edit no turn made (b)."""
    write(root, "a", "a0\n")
    write(root, "b", "b0\n")
    with Workspace(root, max_file_bytes=1024) as ws:
        ws.snapshot()
        write(root, "b", "b1\n")  # the person's edit, in no turn
        turn = ws.begin()
        ws.capture_before(["a"])
        write(root, "a", "x" * 100)
    with Workspace(root, max_file_bytes=64) as ws:  # the cap lowered since
        assert ws.plan_undo().target.id == turn.id
        assert ws.undo().restored == ["a"]
        assert files(root) == {b"a": b"a0\n", b"b": b"b1\n"}


def test_a_confirmed_undo_goes_where_its_preview_went_after_the_cap_was_lowered(
    root: Path,
) -> None:
    """A preview chooses from the tree under today's cap; the confirmed undo (`undo` at a
    terminal, `ws.undo(ws.plan_undo())`) chose again from its capture under the target's
    higher cap, where the file the last turn made large counts for that turn, and refused:
    "the workspace changed since the preview" (found reading undo's choice for the undo
    differential walk, which now confirms some of its undos)."""
    write(root, "f", "f0\n")
    with Workspace(root, max_file_bytes=4096) as ws:
        first = ws.snapshot().id
    with Workspace(root, max_file_bytes=64) as ws:
        ws.begin()
        ws.capture_before(["f"])
        write(root, "f", "x" * 100)  # over today's cap: the turn's rewind leaves it
        plan = ws.plan_undo()
        assert plan.target.id == first
        assert ws.undo(plan).restored == ["f"]
        assert (root / "f").read_text() == "f0\n"


@pytest.mark.parametrize(
    "since",
    ["logs/ holds only ignored files", "the file x is a directory holding only ignored files",
     "big, large then, is small now", "big is over a cap lowered since, as it was"],
)  # fmt: skip
def test_undo_goes_past_a_snapshot_whose_restore_changes_nothing(root: Path, since: str) -> None:
    """The undo differential walk (seeds 1-3): undo went to the newest snapshot whose
    entries or dirs differed from the tree now where only what no restore changes
    differed (a `B` change at most); it restored nothing, pushed no redo frame, and went
    there again at every undo, never further back."""
    write(root, ".gitignore", "*.log\n")
    write(root, "a", "a0\n")
    write(root, "x", "x0\n")
    write(root, "big", "b" * 100)
    with Workspace(root, max_file_bytes=1024 if "lowered" in since else 64) as ws:
        first = ws.snapshot().id
        write(root, "a", "a1\n")
        ws.snapshot()
    if since.startswith("logs/"):
        write(root, "logs/run.log", "ignored\n")
    elif since.startswith("the file x"):
        (root / "x").unlink()
        write(root, "x/run.log", "ignored\n")
    elif since.startswith("big, large then"):
        write(root, "big", "b\n")
    with Workspace(root, max_file_bytes=64) as ws:
        assert ws.plan_undo().target.id == first
        assert ws.undo().restored == ["a"]
        assert (root / "a").read_text() == "a0\n"


def _checkpoint(
    cid: str, second: int, paths: dict[str, Spec], absent: tuple[str, ...] = ()
) -> Manifest:
    return tree(
        paths,
        snapshot_id=cid,
        kind=CHECKPOINT,
        time=f"2026-01-01T00:00:{second:02d}.000000Z",
        absent=absent,
        step=second,
        session="s",
    )


CHECKPOINTS: dict[str, tuple[dict[str, Spec], list[Manifest], dict[str, Spec]]] = {
    "a before-image comes back, the rest stays": (
        {"a": "edited", "b": "untouched since", "c/d": "not captured"},
        [_checkpoint("c1", 1, {"a": "before"})],
        {"a": "before", "b": "untouched since", "c/d": "not captured"},
    ),
    "a file that did not exist goes": (
        {"a": "1", "new": "made by the turn"},
        [_checkpoint("c1", 1, {}, absent=("new",))],
        {"a": "1"},
    ),
    "the earliest before-image wins; later checkpoints add their paths": (
        {"a": "3", "b": "2"},
        [_checkpoint("c1", 1, {"a": "1"}), _checkpoint("c2", 2, {"a": "2", "b": "1"})],
        {"a": "1", "b": "1"},
    ),
    "a directory that needs to come back is made": (
        {"top": "t"},
        [_checkpoint("c1", 1, {"deep/er/f": "f"})],
        {"top": "t", "deep/er/f": "f"},
    ),
    "a directory there now is never replaced by a named file": (
        {"a/inside": "i"},
        [_checkpoint("c1", 1, {"a": "was a file"})],
        {"a/inside": "i"},
    ),
    "a directory holding files no checkpoint named stays": (
        {"a/made": "by the turn", "a/other": "not named"},
        [_checkpoint("c1", 1, {"a": "was a file"}), _checkpoint("c2", 2, {}, absent=("a/made",))],
        {"a/other": "not named"},
    ),
    "a directory holding only what was made since goes, and the file comes back": (
        {"a/made": "by the turn", "a/deeper/too": "by the turn", "b": "b"},
        [
            _checkpoint("c1", 1, {"a": "was a file"}),
            _checkpoint("c2", 2, {}, absent=("a/made", "a/deeper/too")),
        ],
        {"a": "was a file", "b": "b"},
    ),
    "a file in the way of a before-image's directory goes (the pre-restore snapshot keeps it)": (
        {"x": "made a file by the turn"},
        [_checkpoint("c1", 1, {"x/y": "before"})],
        {"x/y": "before"},
    ),
    "a symlink in the way of a before-image's directory goes": (
        {"x": ("link", "elsewhere"), "elsewhere/y": "after"},
        [_checkpoint("c1", 1, {"x/y": "before"})],
        {"x/y": "before", "elsewhere/y": "after"},
    ),
    "a later before-image below what an earlier checkpoint had as a file is not set back": (
        {"x/y": "made by turn 1, then edited", "x/z": "made by turn 1"},
        [_checkpoint("c1", 1, {"x": "was a file"}), _checkpoint("c2", 2, {"x/y": "turn 1's"})],
        {"x/z": "made by turn 1"},
    ),
    "below what an earlier checkpoint had as absent, all goes: the directory too": (
        {"x/y": "made by turn 1, then edited", "b": "b"},
        [_checkpoint("c1", 1, {}, absent=("x",)), _checkpoint("c2", 2, {"x/y": "turn 1's"})],
        {"b": "b"},
    ),
    "a directory made since that holds what no checkpoint named stays": (
        {"x/y": "made by turn 1", "x/other": "not named"},
        [_checkpoint("c1", 1, {}, absent=("x",)), _checkpoint("c2", 2, {}, absent=("x/y",))],
        {"x/other": "not named"},
    ),
    "an earlier before-image below what a later checkpoint has as a file wins": (
        {"x": "made a file by turn 1, then edited"},
        [_checkpoint("c1", 1, {"x/y": "before"}), _checkpoint("c2", 2, {"x": "turn 1's"})],
        {"x/y": "before"},
    ),
    "a directory a later checkpoint knew comes back where a file is now": (
        {"x": "made a file by turn 2"},
        [_checkpoint("c1", 1, {}, absent=("x/z",)), _checkpoint("c2", 2, {"x/z": "z"})],
        {"x": "/"},
    ),
    "a symlink's before-image": (
        {"l": ("link", "new")},
        [_checkpoint("c1", 1, {"l": ("link", "old")})],
        {"l": ("link", "old")},
    ),
}


@pytest.mark.parametrize("case", CHECKPOINTS)
def test_checkpoint_target(case: str) -> None:
    now, checkpoints, expected = CHECKPOINTS[case]
    current = tree(now, ignored=("x.log",))
    target = checkpoint_target(current, checkpoints)
    wanted = tree(expected)
    assert (target.entries, target.dirs) == (wanted.entries, wanted.dirs)
    assert target.tree == wanted.tree
    first = checkpoints[0]
    assert (target.id, target.kind, target.step, target.session) == (
        first.id,
        first.kind,
        first.step,
        first.session,
    )
    assert target.ignored == current.ignored  # what is left out stays left out
