"""Looking without changing: status, show, cat, list; and refs that cannot pick wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import cli_json as ok_json
from tests.conftest import run_cli as run
from tests.conftest import write
from worksnap import InputError, Workspace
from worksnap.cli import main


@pytest.mark.parametrize("damage", ["its tree missing", "its record cut short"])
@pytest.mark.parametrize("json_output", [False, True])
def test_status_names_a_damaged_newest_snapshot_never_no_snapshot_yet(
    root: Path, capsys: pytest.CaptureFixture[str], json_output: bool, damage: str
) -> None:
    """The session's newest snapshot unreadable: `status` said "no snapshot yet: nothing
    here is protected" (`"latest": null`), exit 0, or took an older one for the latest,
    without a word (stop 42's reviews). It now warns, one line each, as `list` does, and
    lists them in its JSON (`unreadable`); it compares with no unreadable snapshot."""
    write(root, "a.txt", "a")
    code, only, _ = run(capsys, root, "snapshot")
    if damage == "its tree missing":
        write(root, "b.txt", "b")
        code, only, _ = run(capsys, root, "snapshot")
    assert code == 0
    record = root / ".worksnap" / "snapshots" / f"{only.strip()}.json"
    text = record.read_text()
    if damage == "its tree missing":
        record.write_text(text.replace(json.loads(text)["tree"], "7" * 64))
    else:
        record.write_text(text[: len(text) // 2])
    code, out, err = run(capsys, root, *(["--json"] if json_output else []), "status")
    assert code == 0, err
    (line,) = err.splitlines()
    assert line.startswith("worksnap: warning: ") and only.strip() in line, line
    if json_output:
        state = json.loads(out)
        assert state["latest"] is None and len(state["unreadable"]) == 1
        assert only.strip() in state["unreadable"][0]
    else:
        assert "no snapshot yet" not in out and "no readable snapshot" in out, out


def test_status_says_where_and_what_changed_like_git_status_short(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "keep.txt", "k")
    write(root, "edit.txt", "e")
    write(root, "gone.txt", "g")
    write(root, "move/from.txt", "moved bytes")
    assert run(capsys, root, "snapshot", "--step", "1")[0] == 0
    write(root, "edit.txt", "edited")
    (root / "gone.txt").unlink()
    write(root, "new.txt", "n")
    os.rename(root / "move" / "from.txt", root / "move" / "to.txt")
    write(root, "big.bin", b"\0" * (3 << 20))
    code, out, err = run(capsys, root, "status")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"root      {root} (given with --root)"
    assert lines[1].startswith(f"store     {root / '.worksnap'} (1 snapshot, ")
    assert lines[2].startswith("session   default (1 snapshot; latest ")
    assert lines[3] == "daemon    not running"
    assert lines[4] == "large     big.bin (3.0 MiB) is over the 2.0 MiB cap: not protected"
    assert lines[5:] == [
        "",
        f"changes since latest ({Workspace(root).resolve('latest')}):",
        " M edit.txt",
        " D gone.txt",
        " R move/from.txt -> move/to.txt",
        " A new.txt",
    ]
    state = ok_json(capsys, root, "status")
    assert isinstance(state, dict)
    assert {c["path"]: (c["op"], c["from"]) for c in state["changes"]} == {
        "edit.txt": ("M", None), "gone.txt": ("D", None), "new.txt": ("A", None),
        "move/to.txt": ("R", "move/from.txt"),
    }  # fmt: skip
    assert state["large"] == [{"path": "big.bin", "size": 3 << 20}]
    assert (state["snapshots"], state["recovery_pending"], state["daemon"]["running"]) == (
        1, False, False,
    )  # fmt: skip


def test_show_lists_files_meta_and_pin_state(
    root: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(root, "src/app.py", "print('hi')\n")
    write(root, "run.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "big.bin", b"\0" * (3 << 20))
    os.symlink("src/app.py", root / "link")
    (root / "empty").mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("n")
    code, out, _ = run(capsys, root, "snapshot", "--meta", "k=v", "--attach", f"notes={notes}")
    assert code == 0
    snap_id = out.strip()
    code, out, _ = run(capsys, root, "show", snap_id)
    assert code == 0
    assert "step None" not in out and "None" not in out
    assert "pinned" not in out.splitlines()[0]
    assert "meta     k=v" in out and f"attached notes (worksnap attachment {snap_id} notes)" in out
    assert "large    big.bin" in out
    files = out.split("\n\n", 1)[1].splitlines()
    assert files == [
        "040000 dir           -  empty/",
        "120000 link          -  link -> src/app.py",
        "100755 file         10  run.sh",
        "100644 file         12  src/app.py",
    ]
    assert run(capsys, root, "pin", snap_id)[0] == 0
    code, out, _ = run(capsys, root, "show", snap_id, "src")
    assert out.splitlines()[0] == f"snapshot {snap_id}  (pinned: gc keeps it)"
    assert out.split("\n\n", 1)[1].splitlines() == ["100644 file         12  src/app.py"]
    code, out, err = run(capsys, root, "show", snap_id, "nowhere")
    assert (code, out) == (2, "") and "not in snapshot" in err
    code, out, err = run(capsys, root, "show", snap_id, "src", "--json")
    assert code == 2 and "whole manifest" in err


def test_cat_prints_the_captured_bytes(
    root: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = bytes(range(256)) * 3
    write(root, "data.bin", data)
    write(root, "d/text.txt", "captured\n")
    os.symlink("d/text.txt", root / "link")
    assert main(["--root", str(root), "snapshot"]) == 0
    write(root, "data.bin", b"changed since")
    capsysbinary.readouterr()
    assert main(["--root", str(root), "cat", "latest", "data.bin"]) == 0
    assert capsysbinary.readouterr().out == data
    assert main(["--root", str(root), "cat", "latest", "link"]) == 0
    assert capsysbinary.readouterr().out == b"d/text.txt"
    for missing in ("nope", "d"):
        assert main(["--root", str(root), "cat", "latest", missing]) == 2
        out, err = capsysbinary.readouterr()
        assert out == b"" and b"is not in snapshot" in err


def test_list_limit_kind_pins_and_changed_against_what_people_took(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "1")
    ws = Workspace(root)
    one = ws.snapshot(step=1, kind="step")
    write(root, "a.txt", "2")
    write(root, "b.txt", "2")
    assert ws.restore(one.id).ok  # a pre-restore snapshot, taken automatically
    write(root, "c.txt", "3")
    three = ws.snapshot(step=3, kind="step")
    ws.pin(three.id)
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list)
    assert [(s["kind"], s["changed"], s["automatic"], s["pinned"]) for s in listed] == [
        ("step", 1, False, True),  # c.txt, against step 1, not against the pre-restore one
        ("pre-restore", 2, True, False),
        ("step", None, False, False),
    ]
    assert [s["id"] for s in ok_json(capsys, root, "list", "--limit", "1")] == [three.id]  # type: ignore[union-attr]
    assert [s["kind"] for s in ok_json(capsys, root, "list", "--kind", "pre-restore")] == [  # type: ignore[union-attr]
        "pre-restore"
    ]
    code, out, _ = run(capsys, root, "list")
    assert code == 0
    assert out.splitlines()[0] == f"snapshots of {root}, session default, newest first:"
    assert out.splitlines()[2].startswith(f"{three.id}*")
    assert out.splitlines()[-1] == "(* pinned: gc keeps it)"


def test_list_limit_0_shows_none_as_git_log_n_0_and_says_there_are_some(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--limit 0` is no usage error (git log -n 0 shows nothing, exit 0), and says the
    truth: there are snapshots, none shown (review B 08, 1)."""
    write(root, "a.txt", "1")
    assert run(capsys, root, "snapshot")[0] == 0
    assert run(capsys, root, "snapshot", "--kind", "step")[0] == 0
    assert ok_json(capsys, root, "list", "--limit", "0") == []
    code, out, err = run(capsys, root, "list", "--limit", "0")
    assert (code, err) == (0, "")
    assert out == f"2 snapshots in {root}, session default; --limit 0 shows none\n"
    code, out, err = run(capsys, root, "list", "--limit", "0", "--kind", "step")
    assert out == f"1 snapshot of kind step in {root}, session default; --limit 0 shows none\n"
    code, out, err = run(capsys, root, "list", "--kind", "nope")
    assert out.startswith(f"no snapshots of kind nope yet in {root}")


EVIL = "fix\x1b]0;owned\x07 it\r\x1b[2K\x9b31m\x7fdone\u202e"
"""A label that retitles the terminal, erases its line, colours it and reverses text."""


def test_labels_and_meta_reach_a_terminal_escaped_and_json_exactly(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every human output of a label goes through one escape (review: raw escapes)."""
    write(root, "a.txt", "1")
    assert run(capsys, root, "snapshot", "--label", "first")[0] == 0
    notes = write(root.parent, "notes.txt", "n")
    assert run(capsys, root, "snapshot", "--label", EVIL, "--meta", f"why{EVIL}={EVIL}",
               "--attach", f"{EVIL}={notes}")[0] == 0  # fmt: skip
    write(root, "a.txt", "2")  # an edit since: `undo` would discard it, back to EVIL's
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list) and listed[0]["label"] == EVIL  # JSON: exactly
    evil = listed[0]["id"]
    shown = ok_json(capsys, root, "show", evil)
    assert isinstance(shown, dict) and shown["meta"] == {f"why{EVIL}": EVIL}
    escaped = r"fix\x1b]0;owned\x07 it\r\x1b[2K\x9b31m\x7fdone\u202e"
    outputs = {
        "list": run(capsys, root, "list"),
        "list --all": run(capsys, root, "list", "--all"),
        "show": run(capsys, root, "show", evil),
        "gc --dry-run": run(capsys, root, "gc", "--keep-last", "0", "--all", "--dry-run"),
        "undo --dry-run": run(capsys, root, "undo", "--dry-run"),
        "attachment (an error)": run(capsys, root, "attachment", evil, "nope"),
    }
    for command, (code, out, err) in outputs.items():
        assert code == (2 if "error" in command else 0), (command, err)
        assert [c for c in out + err if not c.isprintable() and c != "\n"] == [], command
        assert escaped in out + err, command
    assert f"meta     why{escaped}={escaped}\n" in outputs["show"][1]
    assert f': "{escaped}")' in outputs["undo --dry-run"][1]  # the snapshot it goes back to
    assert ok_json(capsys, root, "list") == listed  # (the dry runs changed nothing)


def test_a_record_from_elsewhere_cannot_write_escapes_through_its_kind_or_session(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record's kind and session are checked only when worksnap takes the snapshot;
    one pulled from a shared remote (or written by another tool) is shown escaped too."""
    import msgspec

    from worksnap.record import decode_record, encode_record

    write(root, "a.txt", "1")
    assert run(capsys, root, "snapshot")[0] == 0
    [path] = (root / ".worksnap" / "snapshots").iterdir()
    record = decode_record(path.read_bytes(), str(path))
    path.write_bytes(encode_record(msgspec.structs.replace(record, kind=EVIL, session=EVIL)))
    escaped = r"fix\x1b]0;owned\x07 it\r\x1b[2K\x9b31m\x7fdone\u202e"
    for args in (("list", "--all"), ("du",), ("show", record.id)):
        code, out, err = run(capsys, root, *args)
        assert code == 0, (args, err)
        assert [c for c in out + err if not c.isprintable() and c != "\n"] == [], args
        assert escaped in out, args
    listed = ok_json(capsys, root, "list", "--all")
    assert isinstance(listed, list) and (listed[0]["kind"], listed[0]["session"]) == (EVIL, EVIL)


def test_refs_cannot_pick_the_wrong_snapshot(root: Path) -> None:
    write(root, "a.txt", "1")
    ws = Workspace(root)
    one = ws.snapshot(step=1)
    write(root, "a.txt", "2")
    two = ws.snapshot(step=2)
    write(root, "a.txt", "broken")
    result = ws.restore("latest")
    assert result.ok and result.target == two.id and result.pre_restore is not None
    # `latest` skips the pre-restore snapshot: retrying the restore restores again.
    assert ws.resolve("latest") == two.id
    assert ws.resolve("latest~1") == one.id
    with pytest.raises(InputError, match=r"has 2 snapshots taken on purpose"):
        ws.resolve("latest~2")
    assert ws.resolve(result.pre_restore) == result.pre_restore  # still reachable by id
    with pytest.raises(InputError, match="bad ref 'latest~x'"):
        ws.resolve("latest~x")
    for short in (one.id[:1], one.id[:3]):
        with pytest.raises(InputError):
            ws.resolve(short)
    if one.id[:4] != two.id[:4] and not one.id[:4].isdigit():  # digits read as a step
        assert ws.resolve(one.id[:4]) == one.id
    digits = "1234"
    (root / ".worksnap" / "manifests").mkdir(exist_ok=True)
    (root / ".worksnap" / "manifests" / f"{digits}00000000.json").write_bytes(b"")
    with pytest.raises(InputError, match=r"did you mean step:1234, or snapshot 123400000000\?"):
        ws.resolve(digits)
    with pytest.raises(InputError, match=r"did you mean step:2\?"):
        ws.resolve("2")


def test_verify_names_a_damaged_file_escaped_and_json_exactly(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review found verify printing a damaged file's name raw: escapes reached the
    terminal, and a newline in the name forged an "all objects present" line."""
    from worksnap.diskstore import DiskStore
    from worksnap.hash import hash_bytes

    name = f"x{EVIL}\nall objects present and intact"
    write(root, name, "a" * 100)
    assert run(capsys, root, "snapshot")[0] == 0
    store = DiskStore(str(root / ".worksnap"))
    pack, offset, size = store._load_index()[hash_bytes(b"a" * 100)][:3]
    with open(store.paths.pack(pack), "r+b") as f:  # the file's bytes, not its tree's
        f.seek(offset)
        f.write(b"b" * size)
    code, out, err = run(capsys, root, "verify")
    assert code == 1, err
    assert [c for c in out + err if not c.isprintable() and c != "\n"] == []
    escaped = r"fix\x1b]0;owned\x07 it\r\x1b[2K\x9b31m\x7fdone\u202e"
    named, advice = out.splitlines()  # the damaged file's line, then verify --repair's
    assert f": x{escaped}\\nall objects present and intact: " in named
    assert advice.startswith("1 damaged object: `worksnap verify --repair`")
    code, out, _ = run(capsys, root, "--json", "verify")
    assert code == 1 and f": {name}: object " in json.loads(out)["problems"][0]


def _git_apply_reverse(root: Path, patch: str) -> None:
    """`worksnap diff | git apply -R`, as `diff --help` suggests to take changes back."""
    import subprocess

    done = subprocess.run(["git", "apply", "-R", "-"], input=patch, cwd=root, text=True,
                          capture_output=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def _compared(capsys: pytest.CaptureFixture[str], root: Path) -> tuple[list[object], str]:
    """`status --json`'s changes, and `diff`'s patch (both exit 0)."""
    state = ok_json(capsys, root, "status")
    assert isinstance(state, dict)
    code, patch, err = run(capsys, root, "diff")
    assert code == 0, err
    return state["changes"], patch


def test_status_and_diff_leave_what_the_snapshots_exclude_rules_leave_out(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After `snapshot --exclude notes`, status and diff called notes/ added since, and
    `diff | git apply -R` deleted it, though it is in no snapshot and `plan` rightly had
    nothing to restore (stop 43's review). They now say what a restore takes back."""
    write(root, "notes/a.md", "keep\n")
    write(root, "main.py", "src\n")
    assert run(capsys, root, "snapshot", "--exclude", "notes")[0] == 0
    write(root, "notes/new.md", "came since, under the same rule\n")
    assert _compared(capsys, root) == ([], "")
    write(root, "main.py", "edited\n")
    changes, patch = _compared(capsys, root)
    assert changes == [{"op": "M", "path": "main.py", "from": None}]
    _git_apply_reverse(root, patch)
    assert (root / "main.py").read_text() == "src\n"
    assert (root / "notes/a.md").read_text() == "keep\n" and (root / "notes/new.md").exists()


def test_status_and_diff_leave_what_todays_exclude_rules_leave_out(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's `config exclude add agent-trajectory.db` right after a snapshot: status
    and diff said the file (still there) was deleted; `plan` had nothing to restore."""
    write(root, "main.py", "code\n")
    write(root, "agent-trajectory.db", "traj\n")
    assert run(capsys, root, "snapshot")[0] == 0
    assert run(capsys, root, "config", "exclude", "add", "agent-trajectory.db")[0] == 0
    assert _compared(capsys, root) == ([], "")
    code, out, _ = run(capsys, root, "status")
    assert code == 0 and "nothing changed since latest" in out, out


def test_status_and_diff_leave_a_file_ignored_or_over_the_cap_now(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file the snapshot holds, on disk but ignored now or over the cap now: status and
    diff called it deleted (`D`), while `plan` shows it `!`, left as it is. A file over
    today's cap but within the snapshot's is restored, so it is a change (`M`)."""
    write(root, "keep.txt", "a\n")
    write(root, "secret.env", "s\n")
    write(root, "data.bin", "small\n")
    write(root, "grown.bin", "small\n")
    assert run(capsys, root, "config", "max-file-bytes", "1K")[0] == 0
    assert run(capsys, root, "snapshot")[0] == 0
    write(root, ".gitignore", "secret.env\n")
    write(root, "secret.env", "s2\n")
    write(root, "data.bin", "x" * 2048)
    changes, patch = _compared(capsys, root)
    assert changes == [{"op": "A", "path": ".gitignore", "from": None}], changes
    _git_apply_reverse(root, patch)
    assert (root / "secret.env").read_text() == "s2\n" and (root / "data.bin").exists()
    assert not (root / ".gitignore").exists()
    write(root, ".gitignore", "secret.env\n")
    assert run(capsys, root, "config", "max-file-bytes", "100")[0] == 0
    write(root, "grown.bin", "y" * 500)  # over today's cap, within the snapshot's
    changes, _ = _compared(capsys, root)
    assert changes == [
        {"op": "A", "path": ".gitignore", "from": None},
        {"op": "M", "path": "grown.bin", "from": None},
    ], changes
    code, out, _ = run(capsys, root, "plan", "latest")
    assert code == 0 and "M  grown.bin" in out, out


def test_status_names_a_file_changed_since_latest_that_is_ignored_now(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file `latest` holds, edited since and ignored now: no snapshot keeps its edits, and
    a restore leaves it (`plan` shows it `!`); `status` said nothing of it (stop 43's review:
    it read "changes since latest" with only `.gitignore`)."""
    write(root, "notes.md", "v1\n")
    write(root, "same.md", "kept\n")
    write(root, "build/p", "built\n")
    assert run(capsys, root, "snapshot")[0] == 0
    write(root, ".gitignore", "notes.md\nsame.md\nbuild/\n")
    write(root, "notes.md", "v2, edited since\n")
    code, out, err = run(capsys, root, "status")
    assert code == 0, err
    assert (
        "ignored   notes.md (17 B) changed since latest, and is ignored now: not protected\n" in out
    )
    assert "same.md" not in out  # as the snapshot has it: nothing is lost
    state = ok_json(capsys, root, "status")
    assert isinstance(state, dict)
    assert state["ignored_now"] == [{"path": "notes.md", "size": 17}]
    assert state["changes"] == [{"op": "A", "path": ".gitignore", "from": None}]
    (root / "build" / "p").unlink()  # (a review: it was called changed, and not protected)
    code, out, _ = run(capsys, root, "status")
    gone = "ignored   build/p deleted since latest, and is ignored now: a restore leaves it "
    assert code == 0 and gone + "deleted\n" in out, out
    write(root, "build/p", "built\n")
    (root / ".gitignore").unlink()
    state = ok_json(capsys, root, "status")
    assert isinstance(state, dict) and state["ignored_now"] == []  # a change again: `M`
    assert state["changes"] == [{"op": "M", "path": "notes.md", "from": None}]


@pytest.mark.parametrize("json_output", [False, True])
def test_status_names_a_sessions_automatic_snapshots_never_no_snapshot_yet(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    json_output: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After `worksnap run -- CMD` (no --snapshots), the session holds only automatic
    snapshots, which `list` shows and undo goes to; `status` said "no snapshot yet:
    nothing here is protected" (stop 43's review). It names the newest, and how to compare."""
    write(root, "f.txt", "a\n")
    monkeypatch.chdir(root)  # (the command runs here)
    code, _, err = run(capsys, root, "run", "--", "sh", "-c", "echo b > f.txt")
    assert code == 0 and (root / "f.txt").read_text() == "b\n", err
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list)
    newest = listed[0]["id"]
    code, out, err = run(capsys, root, *(["--json"] if json_output else []), "status")
    assert code == 0, err
    if json_output:
        state = json.loads(out)
        assert state["latest"] is None and state["newest"] == {"id": newest, "kind": "run-after"}
    else:
        assert "no snapshot yet" not in out and "only automatic snapshots" in out, out
        assert f"worksnap --root {root} diff {newest}" in out, out  # reaches it from anywhere


@pytest.mark.parametrize("where", ["a mistyped --store", "a root never snapshotted"])
@pytest.mark.parametrize("json_output", [False, True])
def test_verify_where_there_is_no_store_says_so_and_fails(
    root: Path, capsys: pytest.CaptureFixture[str], where: str, json_output: bool
) -> None:
    """`verify` of a store that does not exist said "all objects present and intact",
    exit 0 (`{"ok": true}`): a typo in `--store` passed every check (stop 43's review).
    It is bad input now, as a mistyped ref is: exit 2, one line, nothing on stdout."""
    write(root, "a.txt", "a")
    store = root / ".worksnap"
    if where == "a mistyped --store":
        assert run(capsys, root, "snapshot")[0] == 0
        store = root / ".worksnapp"
    options = ["--store", str(store)] * (where == "a mistyped --store")
    options += ["--json"] * json_output
    code, out, err = run(capsys, root, *options, "verify")
    assert (code, out) == (2, "")
    assert err == (f"worksnap: error: no store at {store}: nothing to verify (none made yet)\n")
    assert not store.exists()  # looked at, not made


@pytest.mark.parametrize("selected", ["d", "e"])
def test_diff_of_some_paths_takes_a_rename_with_one_side_outside_as_that_sides_change(
    root: Path, capsys: pytest.CaptureFixture[str], selected: str
) -> None:
    """After `mv d/x e/x`, `diff -- d` was the rename, and `diff -- d | git apply -R`
    removed e/x, which `restore latest -- d` keeps (review X 03). As git's pathspec: the
    side named is a deletion (or an addition), and the patch takes back what the restore
    of those paths does."""
    write(root, "d/x", "moved\n")
    write(root, "e/y", "stays\n")
    assert run(capsys, root, "snapshot")[0] == 0
    os.rename(root / "d/x", root / "e/x")
    code, out, err = run(capsys, root, "--json", "diff", "--", selected)
    assert code == 0, err
    row = {"op": "D", "path": "d/x"} if selected == "d" else {"op": "A", "path": "e/x"}
    assert [{k: r[k] for k in ("op", "path")} for r in json.loads(out)] == [row]
    code, patch, err = run(capsys, root, "diff", "--", selected)
    assert code == 0, err
    _git_apply_reverse(root, patch)
    # What `restore latest -- SELECTED` leaves: the side named back as it was, the other kept.
    assert (root / "d/x").exists() == (selected == "d")
    assert (root / "e/x").exists() == (selected == "d")
    assert (root / "e/y").read_text() == "stays\n"


def test_status_names_directories_a_restore_adds_back_or_removes_as_plan_does(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review removed an empty directory and made another after a snapshot: `status`
    said "nothing changed since latest" and its JSON `changes` was empty, while `plan`
    and `undo` showed `D keep/` and `A newempty/`; an agent trusting `changes == []` would
    run an undo that removes a directory it was told had not changed."""
    write(root, "a.txt", "a")
    (root / "keep").mkdir()
    (root / "full").mkdir()
    assert run(capsys, root, "snapshot")[0] == 0
    (root / "keep").rmdir()
    (root / "newempty").mkdir()
    write(root, "full/new.txt", "n")
    code, out, err = run(capsys, root, "status")
    assert code == 0, err
    assert out.splitlines()[-3:] == [" A full/new.txt", " D keep/", " A newempty/"]
    state = ok_json(capsys, root, "status")
    assert state["changes"] == [
        {"op": "A", "path": "full/new.txt", "from": None},
        {"op": "D", "path": "keep", "from": None},
        {"op": "A", "path": "newempty", "from": None},
    ]
    planned = ok_json(capsys, root, "plan", "latest")["changes"]
    assert [(c["op"], c["path"]) for c in planned] == [
        (c["op"], c["path"]) for c in state["changes"]
    ]
