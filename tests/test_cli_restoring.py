"""Every command that changes the tree previews, asks on a terminal, and says what it did.

restore, rewind, undo, redo and recover: the plan is shown and a person asked (stdin a
terminal, no --yes, no --json); "no" changes nothing; --dry-run changes nothing (not
even the store); the plan shown is the plan applied; one line of result, with correct
plurals. And `restore --to DIR`, which never touches the workspace.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import disk_fills_after, terminal_output, tree_state, write
from tests.conftest import run_cli as run
from worksnap import Workspace


def everything(root: Path) -> tuple[object, list[str]]:
    """The tree and the store's snapshots: what a preview must leave as it was."""
    return tree_state(root), sorted(os.listdir(root / ".worksnap" / "snapshots"))


def prepare(root: Path, command: str) -> list[str]:
    """A workspace where `command` has something to do; returns its arguments."""
    write(root, "a.txt", "first")
    write(root, "b.txt", "b")
    ws = Workspace(root)
    ws.snapshot(step=1)
    write(root, "a.txt", "edited")
    if command == "redo":
        assert ws.undo().ok
        return ["redo"]
    if command == "recover":
        pre = ws.snapshot(kind="manual")  # stands in for the restore's pre-restore snapshot
        journal = {"target": pre.id, "pre_restore": pre.id, "pid": 1, "host": "gone"}
        (root / ".worksnap" / "journal.json").write_text(json.dumps(journal))
        write(root, "a.txt", "half-restored")  # where the killed restore stopped
        return ["recover"]
    return {"restore": ["restore", "latest"], "rewind": ["rewind", "1"], "undo": ["undo"]}[command]


COMMANDS = ["restore", "rewind", "undo", "redo", "recover"]
SRC = str(Path(__file__).resolve().parent.parent / "src")


def asked_at_a_terminal(
    root: Path, *args: str, answer: bytes, stdout: Path | None = None
) -> tuple[int, str]:
    """Runs worksnap in a real process on a pseudo-terminal and answers its question.

    Stdin and stderr are the terminal, and stdout too unless it goes to the file
    `stdout` (`worksnap restore latest > log`). Returns the exit code and what the
    terminal showed. A question that never shows on the terminal fails the test.
    """
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    with open(stdout or os.devnull, "wb") as file:
        child = subprocess.Popen(
            [sys.executable, "-m", "worksnap", "--root", str(root), *args],
            stdin=terminal,
            stdout=terminal if stdout is None else file,
            stderr=terminal,
            env={**env, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"},
        )
    os.close(terminal)
    shown, asked = terminal_output(controller, child, answer=answer)
    assert asked, f"no question on the terminal: {shown!r}"
    return child.wait(timeout=60), shown.decode().replace("\r\n", "\n")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stdin is a terminal; `answers` (appended by the test) are typed in order."""
    answers: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)

    def type_answer(prompt: str = "") -> str:
        answer = answers.pop(0)
        print(prompt + answer, file=sys.stderr)  # as the terminal echoes what is typed
        return answer

    monkeypatch.setattr("builtins.input", type_answer)
    return answers


@pytest.mark.parametrize("command", COMMANDS)
def test_no_at_the_prompt_changes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str], terminal: list[str], command: str
) -> None:
    args = prepare(root, command)
    before = everything(root)
    terminal.append("n")
    code, out, err = run(capsys, root, *args)
    assert code == 1
    assert "  M  a.txt" in out  # the plan came first
    assert f"make 1 change in {root}? [y/N] n\n" in err  # one change, one question
    assert out.rstrip().endswith("nothing was changed")
    assert everything(root) == before


@pytest.mark.parametrize("command", ["restore", "undo"])
def test_ctrl_d_at_the_question_is_no(root: Path, command: str) -> None:
    # EOF at the question (Ctrl-D) ended in an EOFError traceback.
    args = prepare(root, command)
    before = everything(root)
    code, shown = asked_at_a_terminal(root, *args, answer=b"\x04")
    assert code == 1, shown
    assert "Traceback" not in shown
    assert shown.endswith("[y/N] \nnothing was changed\n"), shown
    assert everything(root) == before


@pytest.mark.parametrize("command", ["restore", "undo", "recover"])
def test_ctrl_c_at_the_question_says_nothing_was_changed(root: Path, command: str) -> None:
    # A review: Ctrl-C said only "worksnap: interrupted", the same as Ctrl-C mid-restore,
    # so a person could not tell whether the tree was touched.
    args = prepare(root, command)
    before = everything(root)
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    # As a shell starts a foreground job: SIGINT not ignored, even when the tests run in
    # the background (a handled signal is reset to its default in the child).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "worksnap", "--root", str(root), *args],
            stdin=terminal, stdout=terminal, stderr=terminal,
            env={**env, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"},
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, previous)
    os.close(terminal)
    shown = b""
    while b"[y/N] " not in shown:
        assert select.select([controller], [], [], 60)[0], f"no question: {shown!r}"
        shown += os.read(controller, 65536)
    child.send_signal(signal.SIGINT)  # Ctrl-C at the question
    rest, _ = terminal_output(controller, child)
    assert child.wait(timeout=60) == 130
    said = "worksnap: interrupted; nothing was changed"
    if command == "recover":  # and what is still to do
        said += (": the workspace is still as the interrupted restore left it (run `worksnap "
                 "recover` again)")  # fmt: skip
    assert rest.decode().replace("\r\n", "\n") == said + "\n"
    assert everything(root) == before


@pytest.mark.parametrize("command", ["restore", "recover"])
def test_with_stdout_redirected_the_question_is_asked_on_the_terminal(
    root: Path, tmp_path: Path, command: str
) -> None:
    # `worksnap restore latest > log` wrote the plan and the question into the file and
    # waited for an answer to a question nobody saw.
    args = prepare(root, command)
    log = tmp_path / "log"
    code, shown = asked_at_a_terminal(root, *args, answer=b"y\n", stdout=log)
    assert code == 0, shown
    assert "  M  a.txt\n" in shown  # the plan the question is about
    assert f"make 1 change in {root}? [y/N] " in shown
    written = log.read_text()
    assert "  M  a.txt\n" in written and "[y/N]" not in written  # the file: as before
    assert written.splitlines()[-1].startswith(("restored 1 path", "rolled back")), written
    assert (root / "a.txt").read_text() == ("first" if command == "restore" else "edited")


@pytest.mark.parametrize("command", COMMANDS)
def test_dry_run_shows_the_plan_and_changes_nothing(
    root: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    args = prepare(root, command)
    before = everything(root)
    code, out, err = run(capsys, root, *args, "--dry-run")
    assert code == 0, err
    assert "  M  a.txt" in out
    assert everything(root) == before
    code, out, err = run(capsys, root, "--json", *args, "--dry-run")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["changes"] == [{"op": "M", "path": "a.txt"}]
    assert everything(root) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_yes_at_the_prompt_does_it_and_says_so_in_one_line(
    root: Path, capsys: pytest.CaptureFixture[str], terminal: list[str], command: str
) -> None:
    args = prepare(root, command)
    terminal.append("y")
    code, out, err = run(capsys, root, *args)
    assert code == 0, err
    last = out.splitlines()[-1]
    if command == "recover":
        # The tree as the recovery found it is kept first (issue 11: nothing lost).
        kept = f"rolled back an interrupted restore: 1 path put back in {root}; the tree as it "
        assert last.startswith(kept + "was: snapshot ") and last.endswith(
            f" (worksnap --root {root} undo)"
        )
    else:
        assert last.startswith(f"restored 1 path in {root} from snapshot "), last
    assert (root / "a.txt").read_text() == ("edited" if command in ("redo", "recover") else "first")


def test_the_plan_a_person_confirmed_is_the_plan_applied(
    root: Path,
    capsys: pytest.CaptureFixture[str],
    terminal: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepare(root, "undo")

    def edit_then_answer(prompt: str = "") -> str:
        print(prompt)
        write(root, "b.txt", "edited while the question was open")  # not in the plan
        return "y"

    monkeypatch.setattr("builtins.input", edit_then_answer)
    code, out, err = run(capsys, root, "undo")
    assert code == 0, err
    assert (root / "a.txt").read_text() == "first"  # what the plan said
    assert (root / "b.txt").read_text() == "edited while the question was open"  # kept
    assert "restored 1 path in" in out

    # A change to a path the plan touches, made while the question was open: refused.
    write(root, "a.txt", "edited again")
    Workspace(root).snapshot()
    write(root, "a.txt", "and again")

    def conflict_then_answer(prompt: str = "") -> str:
        write(root, "a.txt", "changed under the question")
        return "yes"

    monkeypatch.setattr("builtins.input", conflict_then_answer)
    code, out, err = run(capsys, root, "restore", "latest")
    assert code == 2 and "changed since the plan was made; nothing was restored" in err
    assert (root / "a.txt").read_text() == "changed under the question"


def test_repeated_undo_says_where_each_one_goes(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "one")
    ws = Workspace(root)
    first = ws.snapshot(step=1, label="one")
    write(root, "a.txt", "two")
    second = ws.snapshot(step=2, label="two")
    write(root, "a.txt", "three")
    code, out, _ = run(capsys, root, "undo", "--dry-run")
    assert code == 0
    assert out.startswith(f"undo goes back to snapshot {second.id} (step 2, manual, ")
    assert run(capsys, root, "undo", "--yes")[0] == 0
    code, out, _ = run(capsys, root, "undo", "--dry-run")
    assert out.startswith(f"undo goes back to snapshot {first.id} (step 1, manual, ")
    assert ': "one")' in out.splitlines()[0]


def test_plurals_and_nothing_to_do(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    assert run(capsys, root, "snapshot")[0] == 0
    code, out, _ = run(capsys, root, "restore", "latest", "--yes")
    assert (code, out) == (0, f"nothing to restore: {root} matches snapshot "
                              f"{Workspace(root).resolve('latest')}\n")  # fmt: skip
    write(root, "a.txt", "A")
    write(root, "b.txt", "B")
    code, out, _ = run(capsys, root, "restore", "latest", "--yes")
    assert code == 0 and out.startswith(f"restored 2 paths in {root} from snapshot ")


def test_a_restore_limited_to_paths_that_match_says_they_match_not_the_root(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan REF b.txt` said "nothing to restore: ROOT matches snapshot", with a.txt
    differing from it (review I 05)."""
    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    write(root, "c.txt", "c")
    assert run(capsys, root, "snapshot")[0] == 0
    latest = Workspace(root).resolve("latest")
    write(root, "a.txt", "changed")
    for args, said in [
        (("plan", "latest", "b.txt"), f"nothing to restore: b.txt matches snapshot {latest}\n"),
        (("restore", "latest", "b.txt", "c.txt", "--yes"),
         f"nothing to restore: b.txt, c.txt match snapshot {latest}\n"),
    ]:  # fmt: skip
        code, out, err = run(capsys, root, *args)
        assert (code, out) == (0, said), err
        assert (root / "a.txt").read_text() == "changed"


WriteInto = Callable[[Path], Path]


def test_restore_to_writes_a_copy_and_never_touches_the_workspace(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "src/app.py", "print('v1')\n")
    write(root, "bin/run.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "secret.txt", "s", mode=0o600)
    (root / "empty").mkdir()
    os.symlink("src/app.py", root / "link")
    assert run(capsys, root, "snapshot")[0] == 0
    snapshot_state = tree_state(root)
    write(root, "src/app.py", "print('v2, not in any snapshot')\n")
    before = everything(root)
    copy = tmp_path / "copy"
    code, out, err = run(capsys, root, "restore", "latest", "--to", str(copy))
    assert code == 0, err
    assert out == f"wrote 7 paths of snapshot {Workspace(root).resolve('latest')} into {copy}\n"
    assert tree_state(copy) == snapshot_state  # bytes, modes, the link, the empty dir
    assert everything(root) == before  # the workspace and its store, untouched
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    result = json.loads(run(capsys, root, "--json", "restore", "latest", "src", "--to",
                            str(empty))[1])  # fmt: skip
    assert result["to"] == str(empty) and result["pre_restore"] is None
    assert sorted(os.listdir(empty)) == ["src"]
    for bad, why in [
        (copy, "is not empty"),
        (root / "inside", "outside the workspace"),
        (root.parent, "outside the workspace"),
        (root / ".worksnap" / "x", "outside the workspace"),
        (tmp_path / "no" / "parent", f"{tmp_path / 'no'} does not exist"),
        (write(tmp_path, "plain", "") / "x", f"{tmp_path / 'plain'} is not a directory"),
        ("", "an empty path is not a directory"),  # (was "cannot restore into : it is the root")
    ]:
        code, out, err = run(capsys, root, "restore", "latest", "--to", str(bad))
        assert (code, out) == (2, ""), bad
        assert why in err, (bad, err)
    assert everything(root) == before


def test_restore_to_refuses_a_checkpoint(root: Path, tmp_path: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["a.txt"])
    with pytest.raises(Exception, match="is a checkpoint"):
        ws.restore_to("step:1", tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("command", ["undo", "redo"])
def test_a_preview_never_finishes_an_interrupted_restore(
    root: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    prepare(root, command)
    ws = Workspace(root)
    pre = ws.snapshot()
    journal = {"target": pre.id, "pre_restore": pre.id, "pid": 1, "host": "gone"}
    (root / ".worksnap" / "journal.json").write_text(json.dumps(journal))
    write(root, "a.txt", "half-restored")
    before = everything(root)
    code, out, err = run(capsys, root, command, "--dry-run")
    assert (code, out) == (2, "")
    assert "run `worksnap recover` first" in err
    assert everything(root) == before
    code, out, _ = run(capsys, root, "recover", "--dry-run")
    assert code == 0 and out.startswith(f"recover goes back to snapshot {pre.id}")
    assert everything(root) == before


def test_restore_to_that_fails_half_way_leaves_nothing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(20):
        write(root, f"d/f{i}.txt", f"file {i}")
    ws = Workspace(root)
    ws.snapshot()
    disk_fills_after(monkeypatch, 7)
    result = ws.restore_to("latest", tmp_path / "copy")
    assert not result.ok and "No space left on device" in (result.error or "")
    assert not (tmp_path / "copy").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".worksnap-extract")] == []


def test_restore_to_whose_final_sync_fails_publishes_nothing(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files of `restore --to` are made durable all at once (one syncfs) before the
    # rename that publishes them: a failure there (an I/O error in write-back) must leave
    # no directory behind that looks restored.
    for i in range(5):
        write(root, f"d/f{i}.txt", f"file {i}")
    ws = Workspace(root)
    ws.snapshot()

    def failing_sync() -> None:
        raise OSError(5, "Input/output error")

    import ctypes

    class NoSyncfs:  # a C library without syncfs: sync(2) is the fallback
        def __init__(self, name: object, use_errno: bool = False) -> None:
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoSyncfs)  # the OS boundary
    monkeypatch.setattr(os, "sync", failing_sync)
    result = ws.restore_to("latest", tmp_path / "copy")
    assert not result.ok and "Input/output error" in (result.error or "")
    assert result.restored == [] and "d/f0.txt" in result.not_restored
    assert not (tmp_path / "copy").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".worksnap-extract")] == []
