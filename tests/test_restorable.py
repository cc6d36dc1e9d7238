"""What decides "something changed": only what a restore can change (entries and dirs).

A format 2 root tree also names the ignored, large and excluded paths it left out, so
its digest changes when only one of those appears or goes (Python's `__pycache__/`).
Undo and `run`'s settle loop must not count such a change as a change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import tree_state, write
from worksnap import Workspace
from worksnap.cli import main

LEFT_OUT = ["ignored", "large", "excluded"]


def _leave_out(root: Path, how: str) -> None:
    """Creates a path the next capture leaves out (`how`), changing nothing restorable."""
    if how == "ignored":
        write(root, "__pycache__/m.cpython-312.pyc", b"\x00bytecode")
    elif how == "large":
        write(root, "big.bin", b"x" * 4096)
    else:
        write(root, "agent-trajectory.db", "log")


def _workspace(root: Path) -> None:
    write(root, ".gitignore", "__pycache__/\n")
    assert main(["--root", str(root), "config", "max-file-bytes", "1000"]) == 0
    assert main(["--root", str(root), "config", "exclude", "add", "agent-trajectory.db"]) == 0


@pytest.mark.parametrize("how", LEFT_OUT)
def test_undo_skips_a_snapshot_that_differs_only_in_left_out_paths(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _workspace(tmp_path)
    write(tmp_path, "a.txt", "one")
    with Workspace(tmp_path) as ws:
        one = ws.snapshot(label="one")
        write(tmp_path, "a.txt", "two")
        ws.snapshot(label="two")
    _leave_out(tmp_path, how)
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "--json", "undo", "--yes"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (tmp_path / "a.txt").read_text() == "one"  # "two" is what is there: not a target
    assert (result["target"], result["restored"]) == (one.id, ["a.txt"])  # never 0 paths
    assert main(["--root", str(tmp_path), "redo", "--yes"]) == 0
    assert (tmp_path / "a.txt").read_text() == "two"
    assert main(["--root", str(tmp_path), "undo", "--yes"]) == 0
    assert (tmp_path / "a.txt").read_text() == "one"


@pytest.mark.parametrize("how", LEFT_OUT)
def test_undo_with_only_left_out_changes_has_nothing_to_undo(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _workspace(tmp_path)
    write(tmp_path, "a.txt", "one")
    with Workspace(tmp_path) as ws:
        ws.snapshot(label="one")
    _leave_out(tmp_path, how)
    before = tree_state(tmp_path)
    capsys.readouterr()
    assert main(["--root", str(tmp_path), "undo", "--yes"]) != 0
    assert "nothing to undo" in capsys.readouterr().err
    assert tree_state(tmp_path) == before


TOUCH_LEFT_OUT = """
import pathlib, sys, time
path = pathlib.Path(sys.argv[1])
path.parent.mkdir(exist_ok=True)
for i in range(3):
    path.write_bytes(b"x" * (4096 + i))
    time.sleep(0.6)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", LEFT_OUT)
def test_run_takes_no_settled_snapshot_when_only_left_out_paths_change(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _workspace(tmp_path)
    write(tmp_path, "toucher.py", TOUCH_LEFT_OUT)
    name = {"ignored": "__pycache__/x.pyc", "large": "big.bin", "excluded": "agent-trajectory.db"}
    capsys.readouterr()
    code = main([
        "--root", str(tmp_path), "--session", "agent", "--json", "run", "--snapshots",
        "--every", "0.15", "--", sys.executable, str(tmp_path / "toucher.py"),
        str(tmp_path / name[how]),
    ])  # fmt: skip
    assert code == 0
    taken = json.loads(capsys.readouterr().out)["snapshots"]
    with Workspace(tmp_path, session="agent") as ws:
        runs = [ws.load(s["id"]).meta["run"] for s in taken]
    assert runs == ["before", "after"]  # nothing restorable changed: nothing settled
