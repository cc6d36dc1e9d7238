"""Large files are never quietly unprotected; the size cap is the store's; exit codes hold.

Issue 14's "Large files", and issue 11 items 3 (a raised cap is restored) and 13
(a stored snapshot exits 0; every API error is a WorksnapError).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from tests.conftest import cli_json as ok_json
from tests.conftest import run_cli as run
from tests.conftest import tree_state, write
from worksnap import WorksnapError, Workspace
from worksnap.cli import main
from worksnap.errors import FileSystemError

MB = 1 << 20


def blob(size: int, fill: int) -> bytes:
    return bytes([fill]) * size


def test_a_file_a_raised_cap_captured_is_restored_and_the_restore_undone(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "model.bin", blob(5 * MB, 1))
    write(root, "small.txt", "small")
    snap = ok_json(capsys, root, "snapshot", "--max-file-bytes", "10M")
    assert isinstance(snap, dict) and snap["large"] == 0 and snap["max_file_bytes"] == 10 * MB
    ok_json(capsys, root, "config", "max-file-bytes", "2M")  # lowered again: new snapshots only
    write(root, "model.bin", blob(5 * MB, 2))
    before_restore = tree_state(root)
    plan = ok_json(capsys, root, "plan", snap["id"])
    assert plan == {"target": snap["id"], "changes": [{"op": "M", "path": "model.bin"}],
                    "unprotected": []}  # fmt: skip
    result = ok_json(capsys, root, "restore", snap["id"], "--yes")
    assert isinstance(result, dict) and result["restored"] == ["model.bin"]
    assert (root / "model.bin").read_bytes() == blob(5 * MB, 1)
    undone = ok_json(capsys, root, "undo")
    assert isinstance(undone, dict) and undone["restored"] == ["model.bin"]
    assert tree_state(root) == before_restore  # the pre-restore snapshot kept the 5 MB file


def test_the_api_restores_what_a_raised_cap_captured(root: Path) -> None:
    write(root, "model.bin", blob(3 * MB, 1))
    snap = Workspace(root, max_file_bytes=10 * MB).snapshot()
    write(root, "model.bin", blob(3 * MB, 2))
    with Workspace(root) as ws:  # the default cap (2 MiB): the target's cap wins
        result = ws.restore(snap.id)
        assert result.ok and result.restored == ["model.bin"]
        assert (root / "model.bin").read_bytes() == blob(3 * MB, 1)
        assert ws.undo().restored == ["model.bin"]
    assert (root / "model.bin").read_bytes() == blob(3 * MB, 2)


def test_a_file_grown_over_the_cap_is_left_as_it_is_and_shown(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "data.bin", blob(1 * MB, 1))
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    write(root, "data.bin", blob(3 * MB, 2))  # over the 2 MiB cap now: in no snapshot
    plan = ok_json(capsys, root, "plan", snap["id"])
    assert plan == {
        "target": snap["id"], "changes": [],
        "unprotected": [{"path": "data.bin", "why": "too-large", "size": 3 * MB}],
    }  # fmt: skip
    code, out, _ = run(capsys, root, "plan", snap["id"])
    assert code == 0
    assert "  !  data.bin  (not protected, 3.0 MiB: over the size cap now" in out
    assert ok_json(capsys, root, "restore", snap["id"], "--yes")["restored"] == []  # type: ignore[index]
    assert (root / "data.bin").read_bytes() == blob(3 * MB, 2)  # bytes in no snapshot: kept


def test_the_cap_is_a_setting_of_the_store_with_units(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.bin", blob(3 * MB, 1))
    code, _, err = run(capsys, root, "config", "max-file-bytes", "64M")
    assert code == 0, err
    config = json.loads((root / ".worksnap" / "config.json").read_bytes())
    assert config["max_file_bytes"] == 64 * MB
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict) and (snap["max_file_bytes"], snap["large"]) == (64 * MB, 0)
    assert Workspace(root).max_file_bytes == 64 * MB  # the API reads it too
    for text, size in (("1G", 1 << 30), ("1536K", 1536 << 10), ("2MiB", 2 * MB), ("100", 100)):
        assert ok_json(capsys, root, "snapshot", "--max-file-bytes", text)["max_file_bytes"] == size  # type: ignore[index]
    shown = ok_json(capsys, root, "config")
    assert isinstance(shown, dict) and shown["max_file_bytes"] == 100
    code, out, err = run(capsys, root, "snapshot", "--max-file-bytes", "lots")
    assert (code, out) == (2, "") and "bad size 'lots'" in err
    ok_json(capsys, root, "config", "max-file-bytes", "none")
    assert Workspace(root).max_file_bytes == 2 * MB


def test_a_snapshot_that_leaves_files_out_names_them_and_the_command_that_protects_them(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = {"e.bin": 3, "b.bin": 9, "a.bin": 5, "d.bin": 7, "c.iso": 4}
    for name, megabytes in sizes.items():
        write(root, name, blob(megabytes * MB, 7))
    write(root, "small.txt", "s")
    code, _, err = run(capsys, root, "snapshot")
    assert code == 0
    lines = err.splitlines()
    assert lines[0] == (
        "worksnap: warning: 5 files over the 2.0 MiB size cap left out, not protected: "
        "b.bin (9.0 MiB), d.bin (7.0 MiB), a.bin (5.0 MiB) and 2 more"
    )
    prefix = "worksnap: to protect them, raise this store's cap: "
    assert lines[1].startswith(prefix)
    command = shlex.split(lines[1][len(prefix) :])
    assert command == ["worksnap", "--root", str(root), "config", "max-file-bytes", "16M"]
    monkeypatch.chdir(root.parent)
    assert main(command[1:]) == 0  # the exact command works
    capsys.readouterr()
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict) and snap["large"] == 0 and snap["large_files"] == []
    write(root, "huge.bin", blob(20 * MB, 1))
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    assert snap["large_files"] == [{"path": "huge.bin", "size": 20 * MB}]


def test_plan_shows_every_large_file_a_restore_cannot_bring_back(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "gone.bin", blob(3 * MB, 1))
    write(root, "kept.bin", blob(3 * MB, 2))
    write(root, "edited.bin", blob(3 * MB, 3))
    write(root, "a.txt", "a")
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict) and snap["large"] == 3
    (root / "gone.bin").unlink()
    write(root, "edited.bin", blob(3 * MB, 4))
    write(root, "new.bin", blob(3 * MB, 5))
    write(root, "a.txt", "edited")
    plan = ok_json(capsys, root, "plan", snap["id"])
    assert plan == {
        "target": snap["id"],
        "changes": [{"op": "M", "path": "a.txt"}],
        "unprotected": [
            {"path": "edited.bin", "why": "changed", "size": 3 * MB},
            {"path": "gone.bin", "why": "deleted", "size": None},
            {"path": "new.bin", "why": "added", "size": 3 * MB},
        ],
    }
    code, out, _ = run(capsys, root, "plan", snap["id"])
    assert code == 0
    assert "  !  gone.bin  (not protected: deleted since" in out
    assert "3 large files not protected" in out
    only = ok_json(capsys, root, "plan", snap["id"], "gone.bin")
    assert isinstance(only, dict) and [u["path"] for u in only["unprotected"]] == ["gone.bin"]


def test_an_invalid_config_refuses_the_snapshot_before_anything_is_stored(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    ok_json(capsys, root, "snapshot")
    for bad in ('{"retention": {"keep_lats": 2}}', '{"max_file_bytes": "lots"}',
                '{"retention": {"max_age": "soon"}}'):  # fmt: skip
        (root / ".worksnap" / "config.json").write_text(bad)
        code, out, err = run(capsys, root, "snapshot")
        assert (code, out) == (2, ""), bad
        assert err.startswith("worksnap: error: config ") and err.count("\n") == 1
        assert len(Workspace(root).list()) == 1, bad  # nothing was stored


def test_a_stored_snapshot_exits_0_when_its_retention_fails(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    first = ok_json(capsys, root, "snapshot")
    assert isinstance(first, dict)
    ok_json(capsys, root, "pin", first["id"])  # kept: gc must read it, and cannot
    (root / ".worksnap" / "snapshots" / f"{first['id']}.json").write_bytes(b"damaged")
    (root / ".worksnap" / "config.json").write_text('{"retention": {"keep_last": 1}}')
    code, out, err = run(capsys, root, "snapshot")
    assert code == 0
    snap_id = out.strip()
    assert "worksnap: warning: the configured retention removed no object" in err
    assert f"worksnap gc --drop {first['id']}" in err
    assert snap_id in [s.id for s in Workspace(root).list()]


@pytest.mark.parametrize(
    ("failing", "call"),
    [
        ("replace", lambda ws: ws.pin("latest")),
        ("replace", lambda ws: ws.set_config("daemon", "true")),
        ("listdir", lambda ws: ws.list()),
        ("listdir", lambda ws: ws.verify()),
    ],
)
def test_every_error_of_the_api_is_a_worksnap_error(
    root: Path, monkeypatch: pytest.MonkeyPatch, failing: str, call: object
) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    ws.snapshot()
    real = getattr(os, failing)

    def refuse(*args: object, **kwargs: object) -> object:
        # The store is reached through its descriptor: a call names a folder's descriptor
        # and a name in it (or only a descriptor); the system's error names what it was given.
        first = args[0] if args else None
        folder = kwargs.get("dir_fd", kwargs.get("src_dir_fd"))
        if isinstance(first, int):
            where, given = os.readlink(f"/proc/self/fd/{first}"), None
        elif isinstance(first, (str, os.PathLike)):
            given = os.fspath(first)
            where = given
            if isinstance(folder, int):
                where = os.path.join(os.readlink(f"/proc/self/fd/{folder}"), given)
        else:
            where, given = "", None
        if ".worksnap" in str(where):
            raise PermissionError(13, "Permission denied", given)
        return real(*args, **kwargs)

    monkeypatch.setattr(os, failing, refuse)  # the OS boundary: a store we may not touch
    with pytest.raises(WorksnapError) as caught:
        call(ws)  # type: ignore[operator]
    assert isinstance(caught.value, FileSystemError)
    assert caught.value.exit_code == 1 and "Permission denied" in str(caught.value)
    assert ".worksnap" in caught.value.path


def test_a_checkpoint_capture_names_the_large_files_it_could_not_keep(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "small.txt", "s")
    write(root, "big.bin", blob(3 * MB, 1))
    assert run(capsys, root, "begin", "--step", "1")[0] == 0
    code, out, err = run(capsys, root, "--json", "capture", "small.txt", "big.bin")
    assert code == 0
    assert json.loads(out)["large"] == ["big.bin"]  # stdout: the one document
    assert err.splitlines() == [
        "worksnap: warning: 1 file over the 2.0 MiB size cap left out of the checkpoint, "
        "not protected: big.bin (3.0 MiB)",
        f"worksnap: to protect them, raise this store's cap: worksnap --root {root} "
        "config max-file-bytes 4M",
    ]
    code, _, err = run(capsys, root, "capture", "small.txt")
    assert (code, err) == (0, "")  # only the files this call named


def test_the_cap_and_the_daemons_three_states_live_side_by_side_in_the_config(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "a.txt", "a")
    config = root / ".worksnap" / "config.json"
    ok_json(capsys, root, "config", "max-file-bytes", "64M")
    assert ok_json(capsys, root, "config")["daemon"] is None  # type: ignore[index]
    for value, stored, mode in (("true", True, "on"), ("false", False, "off"),
                                ("none", None, "auto"), ("TRUE", True, "on"),
                                ("auto", None, "auto")):  # fmt: skip
        shown = ok_json(capsys, root, "config", "daemon", value)
        assert isinstance(shown, dict)
        assert (shown["daemon"], shown["max_file_bytes"]) == (stored, 64 * MB), value
        on_disk = json.loads(config.read_text())
        assert on_disk.get("daemon", "unset") == ("unset" if stored is None else stored), value
        assert on_disk["max_file_bytes"] == 64 * MB  # the cap stays
        monkeypatch.delenv("WORKSNAP_NO_DAEMON")  # `daemon status` only reads: it starts none
        code, out, _ = run(capsys, root, "--json", "daemon", "status")
        monkeypatch.setenv("WORKSNAP_NO_DAEMON", "1")
        assert (code, json.loads(out)["mode"]) == (1, mode), value
    code, out, _ = run(capsys, root, "config", "daemon")
    assert out == "daemon          none (automatic: see `worksnap daemon status`)\n"
    code, _, err = run(capsys, root, "config", "daemon", "sometimes")
    assert code == 2 and "daemon must be true, false or none" in err
    assert Workspace(root).config().cap() == 64 * MB


def test_plan_shows_a_file_the_snapshot_holds_that_todays_rules_ignore(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, ".gitignore", "")
    write(root, "a.log", "v1")
    write(root, "same.log", "unchanged since")
    write(root, "gone.log", "deleted since")
    write(root, "build/out.o", "v1")
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "a.log", "v2 work")  # never captured again: the restore must not touch it
    write(root, "build/out.o", "v2 build")
    (root / "gone.log").unlink()  # nothing there to lose: it comes back
    plan = ok_json(capsys, root, "plan", snap["id"])
    assert plan == {
        "target": snap["id"],
        "changes": [{"op": "M", "path": ".gitignore"}, {"op": "D", "path": "gone.log"}],
        "unprotected": [
            {"path": "a.log", "why": "ignored", "size": 7},
            {"path": "build/out.o", "why": "ignored", "size": 8},
        ],
    }
    code, out, _ = run(capsys, root, "plan", snap["id"])
    assert code == 0
    assert "  !  a.log  (not protected, 7 B: ignored now" in out
    assert "2 files ignored now left as they are" in out
    assert "large file" not in out
    result = ok_json(capsys, root, "restore", snap["id"], "--yes")
    assert isinstance(result, dict) and result["restored"] == [".gitignore", "gone.log"]
    assert (root / "a.log").read_text() == "v2 work"


def test_plan_shows_a_file_the_snapshot_holds_that_todays_exclusions_leave_out(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review found `config exclude add cache` then an edit of cache/x: plan, restore
    and status said the tree matched the snapshot, and no snapshot held the edit."""
    write(root, "cache/x", "v1")
    write(root, "cache/gone", "deleted since")
    write(root, "keep", "k")
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    assert run(capsys, root, "config", "exclude", "add", "cache")[0] == 0
    write(root, "cache/x", "precious")
    (root / "cache" / "gone").unlink()  # excluded: the restore does not bring it back
    rows = [
        {"path": "cache/gone", "why": "excluded", "size": None},
        {"path": "cache/x", "why": "excluded", "size": 8},
    ]
    plan = ok_json(capsys, root, "plan", snap["id"])
    assert plan == {"target": snap["id"], "changes": [], "unprotected": rows}
    code, out, _ = run(capsys, root, "plan", snap["id"])
    assert code == 0 and "  !  cache/x  (not protected, 8 B: excluded now" in out
    assert "2 files excluded now left as they are" in out
    assert "matches" not in out and "large file" not in out
    result = ok_json(capsys, root, "restore", snap["id"], "--yes")
    assert isinstance(result, dict) and (result["restored"], result["unprotected"]) == ([], rows)
    assert (root / "cache" / "x").read_text() == "precious"
    assert not (root / "cache" / "gone").exists()


def test_a_restore_never_says_a_file_ignored_now_matches_and_names_it_without_a_preview(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review found `restore REF x.log --yes` saying x.log matched the snapshot while it
    held v2 (ignored now, never captured again), the snapshot v1; with no word of it."""
    write(root, "x.log", "v1")
    write(root, "keep", "k")
    snap = ok_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    write(root, ".gitignore", "*.log\n")
    write(root, "x.log", "v2 work")
    nothing = f"nothing to restore from snapshot {snap['id']}: 1 file not protected may differ"
    warning = "warning: x.log: not protected, 7 B: ignored now, so in no snapshot: left as it is"
    code, out, _ = run(capsys, root, "plan", snap["id"], "x.log")
    assert code == 0 and "  !  x.log  (not protected, 7 B: ignored now" in out
    assert nothing in out and "matches" not in out
    code, out, err = run(capsys, root, "restore", snap["id"], "x.log", "--yes")
    assert code == 0 and out == f"{nothing} from it, left as it is\n"
    assert err.count("warning") == 1 and warning in err
    row = {"path": "x.log", "why": "ignored", "size": 7}
    result = ok_json(capsys, root, "restore", snap["id"], "x.log", "--yes")
    assert isinstance(result, dict) and (result["restored"], result["unprotected"]) == ([], [row])
    # The whole root: .gitignore goes, x.log stays v2, so the tree is not the snapshot: said.
    result = ok_json(capsys, root, "restore", snap["id"], "--yes")
    assert isinstance(result, dict) and result["restored"] == [".gitignore"]
    assert result["unprotected"] == [row] and (root / "x.log").read_text() == "v2 work"
    assert run(capsys, root, "undo", "--yes")[0] == 0
    assert (root / ".gitignore").exists() and (root / "x.log").read_text() == "v2 work"
    code, out, err = run(capsys, root, "restore", snap["id"], "--yes")
    assert code == 0 and out.startswith("restored 1 path") and warning in err
    assert (root / "x.log").read_text() == "v2 work"
