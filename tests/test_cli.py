"""The command line contract: output shapes, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tree_state, write
from worksnap.cli import display, main
from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse exits on its own for usage errors and --help
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> object:
    code, out, err = run(capsys, "--root", str(root), "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_snapshot_list_show_plan_restore_round_trip(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    snap = run_json(capsys, root, "snapshot", "--step", "1", "--label", "start")
    assert isinstance(snap, dict)
    for key in ("id", "step", "kind", "time", "files", "bytes", "new_objects", "ignored", "large"):
        assert key in snap
    assert (snap["step"], snap["kind"], snap["files"], snap["new_objects"]) == (1, "manual", 1, 1)

    listed = run_json(capsys, root, "list")
    assert isinstance(listed, list)
    assert [(s["id"], s["step"], s["label"]) for s in listed] == [(snap["id"], 1, "start")]

    shown = run_json(capsys, root, "show", snap["id"])
    stored = root / ".worksnap" / "snapshots" / f"{snap['id']}.json"
    record = json.loads(stored.read_bytes())
    assert isinstance(shown, dict)
    assert (shown["version"], shown["tree"], shown["dirs"]) == (1, record["tree"], [])
    assert [e["path"] for e in shown["entries"]] == ["a.txt"]

    before = tree_state(root)
    write(root, "a.txt", "changed")
    write(root, "b.txt", "new")
    plan = run_json(capsys, root, "plan", "step:1")
    assert plan == {
        "target": snap["id"],
        "changes": [{"op": "M", "path": "a.txt"}, {"op": "A", "path": "b.txt"}],
        "unprotected": [],
    }
    dry = run_json(capsys, root, "restore", "step:1", "--dry-run")
    assert dry == plan
    assert (root / "b.txt").exists()
    result = run_json(capsys, root, "restore", "step:1", "--yes")
    assert isinstance(result, dict)
    assert result["target"] == snap["id"]
    assert sorted(result["restored"]) == ["a.txt", "b.txt"]
    assert (result["not_restored"], result["error"]) == ([], None)
    assert tree_state(root) == before


def test_snapshot_and_begin_take_the_label_as_git_s_dash_m(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    snap = run_json(capsys, root, "snapshot", "-m", "before the refactor")
    begun = run_json(capsys, root, "begin", "-m", "turn 2")
    assert isinstance(snap, dict) and isinstance(begun, dict)
    assert (snap["label"], begun["label"]) == ("before the refactor", "turn 2")
    listed = run_json(capsys, root, "list")
    assert isinstance(listed, list)
    assert [s["label"] for s in listed if s["id"] == snap["id"]] == ["before the refactor"]


def test_human_plan_output_has_counts(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(root, "a.txt", "a")
    code, out, _ = run(capsys, "--root", str(root), "snapshot")
    assert code == 0 and len(out.strip()) == 12
    write(root, "a.txt", "b")
    write(root, "n.txt", "n")
    code, out, _ = run(capsys, "--root", str(root), "plan", "latest")
    assert code == 0
    assert "  M  a.txt" in out and "  A  n.txt" in out
    assert "1 modified (restored), 1 added since (removed), 0 deleted since (recreated)" in out


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["plan", "nope"], 2, "no snapshot matches 'nope'"),
        (["show", "step:x"], 2, "step:N needs a number"),
        (["snapshot", "--step", "-1"], 2, "is negative"),
        (["bogus"], 2, "invalid choice"),
        # It started a daemon that stopped at its first look (or never, for NaN).
        (["daemon", "start", "--idle", "0"], 2, "is not a time above 0 seconds"),
        (["daemon", "serve", "--idle", "nan"], 2, "is not a time above 0 seconds"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    root: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    write(root, "a.txt", "a")
    assert run(capsys, "--root", str(root), "snapshot")[0] == 0
    got, out, err = run(capsys, "--root", str(root), *args)
    assert got == code
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_a_root_whose_own_path_is_not_utf8_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Records and caches name the root as JSON text: every snapshot of such a root ended
    # in a UnicodeEncodeError traceback (a review). Names inside a tree may be any bytes.
    bad = tmp_path / os.fsdecode(b"proj\xff")
    fine = tmp_path / "proj"
    for root in (bad, fine):
        write(root, "a.txt", "a")
        (root / os.fsdecode(b"name\xfe")).write_text("b")
    for args in (["snapshot"], ["status"], ["config", "daemon", "true"]):
        code, out, err = run(capsys, "--root", str(bad), *args)
        assert (code, out) == (2, "")
        assert err == (
            f"worksnap: error: root '{tmp_path}/proj\\xff': a root's own path must be valid "
            "UTF-8 (names inside the tree need not be): rename or move the directory\n"
        )
    assert sorted(os.listdir(bad)) == sorted(os.listdir(fine)) == ["a.txt", "name\udcfe"]
    assert run(capsys, "--root", str(fine), "snapshot")[0] == 0


def test_corrupt_manifest_is_exit_2_and_one_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    snap = run_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    path = root / ".worksnap" / "snapshots" / f"{snap['id']}.json"
    path.write_bytes(path.read_bytes()[:40])
    code, out, err = run(capsys, "--root", str(root), "restore", snap["id"], "--yes")
    assert code == 2
    assert out == "" and err.startswith("worksnap: error: manifest") and err.count("\n") == 1


def test_verify_reports_damage_with_exit_1(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(root, "a.txt", "a" * 100)
    run_json(capsys, root, "snapshot")
    assert run_json(capsys, root, "verify") == {"ok": True, "problems": []}
    store = DiskStore(str(root / ".worksnap"))
    pack, offset, size = store._load_index()[hash_bytes(b"a" * 100)][:3]
    with open(store.paths.pack(pack), "r+b") as f:  # the file's bytes, not its tree's
        f.seek(offset)
        f.write(b"b" * size)
    code, out, _ = run(capsys, "--root", str(root), "--json", "verify")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and "a.txt" in report["problems"][0]
    pack_file = next((root / ".worksnap" / "packs").glob("*.pack"))
    pack_file.write_bytes(b"b" * pack_file.stat().st_size)  # the trees too
    code, out, _ = run(capsys, "--root", str(root), "--json", "verify")
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and "tree object" in report["problems"][0]


def test_failed_restore_json_printed_with_exit_1(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    write(root, "a.txt", "a")
    snap = run_json(capsys, root, "snapshot")
    assert isinstance(snap, dict)
    write(root, "a.txt", "edited")

    def no_rename(*args: object, **kw: object) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", no_rename)  # the OS boundary
    code, out, _ = run(capsys, "--root", str(root), "--json", "restore", snap["id"], "--yes")
    assert code == 1
    result = json.loads(out)
    assert result["error"] == "a.txt: Permission denied"
    assert result["not_restored"] == ["a.txt"] and result["restored"] == []
    assert result["rolled_back"] is True
    assert (root / "a.txt").read_text() == "edited"


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "examples:" in out and "worksnap restore step:3 --yes" in out


def test_display_quotes_awkward_names() -> None:
    assert display("plain/name.txt") == "plain/name.txt"
    assert display("tab\there") == '"tab\\there"'
    assert display("caf\x00e9") == '"caf\\xe9"'
    assert display(" padded") == '" padded"'


def test_entry_point_runs_as_a_process(root: Path) -> None:
    write(root, "a.txt", "a")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), "--json", "snapshot"],
        capture_output=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 1
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), "plan", "deadbeef"],
        capture_output=True,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr.decode().count("\n") == 1 and b"Traceback" not in done.stderr


@pytest.mark.parametrize(("answer", "code", "restored"), [("n", 1, False), ("yes", 0, True)])
def test_restore_asks_at_a_terminal(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    code: int,
    restored: bool,
) -> None:
    write(root, "a.txt", "original")
    run(capsys, "--root", str(root), "snapshot")
    write(root, "a.txt", "edited")
    asked: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or answer)
    got, out, err = run(capsys, "--root", str(root), "restore", "latest")
    assert got == code
    assert asked == [""]  # the question is on stderr, where a terminal is (`> log`)
    assert err.endswith(f"restore: make 1 change in {root}? [y/N] ")
    assert "  M  a.txt" in out
    assert (root / "a.txt").read_text() == ("original" if restored else "edited")


def test_restore_does_not_ask_without_a_terminal(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "a.txt", "original")
    run(capsys, "--root", str(root), "snapshot")
    write(root, "a.txt", "edited")
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    monkeypatch.setattr("builtins.input", lambda prompt="": pytest.fail("must not ask"))
    assert run(capsys, "--root", str(root), "restore", "latest")[0] == 0
    assert (root / "a.txt").read_text() == "original"


def test_plan_and_restore_take_paths(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    run(capsys, "--root", str(root), "snapshot")
    write(root, "a.txt", "A")
    write(root, "b.txt", "B")
    plan = run_json(capsys, root, "plan", "latest", "b.txt")
    assert isinstance(plan, dict)
    assert plan["changes"] == [{"op": "M", "path": "b.txt"}]
    result = run_json(capsys, root, "restore", "latest", "b.txt", "--yes")
    assert isinstance(result, dict) and result["restored"] == ["b.txt"]
    assert (root / "a.txt").read_text() == "A"
    assert (root / "b.txt").read_text() == "b"


def test_an_option_may_come_between_the_ref_and_the_paths(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As git takes `git diff HEAD --stat src/`: argparse alone refused the PATHs after an
    # option ("unrecognized arguments: src").
    write(root, "src/a.txt", "a")
    write(root, "b.txt", "b")
    run(capsys, "--root", str(root), "snapshot")
    write(root, "src/a.txt", "A")
    write(root, "b.txt", "B")
    plan = run_json(capsys, root, "plan", "latest", "--json", "src")
    assert isinstance(plan, dict) and plan["changes"] == [{"op": "M", "path": "src/a.txt"}]
    code, out, err = run(capsys, "--root", str(root), "restore", "latest", "--dry-run", "src")
    assert code == 0, err
    assert out.startswith("  M  src/a.txt\n") and "b.txt" not in out
    code, out, err = run(capsys, "--root", str(root), "show", "latest", "--session",
                         "default", "src")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[-1].endswith("  src/a.txt")
    copy = tmp_path / "copy"
    code, _, err = run(capsys, "--root", str(root), "restore", "latest", "--to", str(copy), "src")
    assert code == 0, err
    assert sorted(os.listdir(copy)) == ["src"]
    code, _, err = run(capsys, "--root", str(root), "restore", "latest", "--yes", "src", "--",
                       "-b")  # fmt: skip
    assert code == 2 and "'-b'" in err  # (after `--`, a PATH: in neither)
    assert run(capsys, "--root", str(root), "restore", "latest", "--yes", "src")[0] == 0
    assert (root / "src/a.txt").read_text() == "a"
    assert (root / "b.txt").read_text() == "B"
    code, out, err = run(
        capsys, "--root", str(root), "restore", "latest", "--yes", "--bogus", "b.txt"
    )
    assert (code, out) == (2, "") and "unrecognized arguments: --bogus" in err
    assert (root / "b.txt").read_text() == "B"
