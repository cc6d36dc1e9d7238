"""`Session` (numbered steps, rewind) and `run --snapshots` / `run --rewind N`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import worksnap
from tests.conftest import write
from worksnap import Workspace, apply
from worksnap.cli import main
from worksnap.workspace import Seams


def test_session_numbers_steps_and_rewinds(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "start")
    with worksnap.Session(tmp_path, name="conv-1", snapshots=True) as s:
        write(tmp_path, "a.txt", "one")
        first = s.step(label="turn 1\nmore", meta={"cut_len": "3"})
        write(tmp_path, "a.txt", "two")
        write(tmp_path, "b.txt", "new")
        s.step(label="turn 2")
        assert (first.step, first.kind, first.label, first.meta) == (
            1,
            "step",
            "turn 1",
            {"cut_len": "3"},
        )
        assert s.next_step() == 3
        assert s.rewind(1).ok
        assert (tmp_path / "a.txt").read_text() == "one"
        assert not (tmp_path / "b.txt").exists()
        plan = s.plan_rewind(0)
        assert [c.path for c in plan.changes] == ["a.txt"]
        assert s.rewind(0, plan=plan).ok
    assert (tmp_path / "a.txt").read_text() == "start"
    with Workspace(tmp_path, session="conv-1") as ws:
        steps = [(m.step, m.label) for m in ws.list() if m.kind == "step"]
    # the pre-restore snapshots of the rewinds do not count as steps; leaving took step 3
    assert steps == [(3, "session end"), (2, "turn 2"), (1, "turn 1"), (0, "session start")]
    assert "Session" in worksnap.__all__


def test_sessions_do_not_share_step_numbers(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "x")
    with Workspace(tmp_path) as ws:
        a = worksnap.Session(workspace=ws, name="a")
        b = worksnap.Session(workspace=ws, name="b")
        assert [a.step().step, a.step().step, b.step().step] == [0, 1, 0]
        a.close()  # a workspace handed in stays open
        assert ws.snapshot().session == "default"


def test_steps_taken_at_once_by_threads_get_distinct_numbers(tmp_path: Path) -> None:
    """As a daemon's threads take hook steps: each its own workspace on one store."""
    import threading

    write(tmp_path, "a.txt", "start")
    workspaces = [Workspace(tmp_path) for _ in range(8)]
    start = threading.Barrier(len(workspaces))
    errors: list[BaseException] = []

    def take(ws: Workspace, i: int) -> None:
        try:
            start.wait()
            worksnap.Session(workspace=ws, name="conv-1").step(label=f"turn {i}")
        except BaseException as exc:  # seen by the test, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=take, args=(ws, i)) for i, ws in enumerate(workspaces)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for ws in workspaces:
        ws.close()
    assert errors == []
    with Workspace(tmp_path, session="conv-1") as ws:
        steps = [s.step for s in ws.list()]
    assert steps == list(range(7, -1, -1))  # newest first: numbered in the order stored


def test_a_bad_session_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(worksnap.InputError):
        worksnap.Session(tmp_path, name="no spaces")


EDITOR = textwrap.dedent(
    """
    import pathlib, sys, time
    for i in range(3):
        pathlib.Path("work.txt").write_text(f"version {i}")
        time.sleep(float(sys.argv[1]))
    """
)


@pytest.mark.slow
def test_run_snapshots_numbers_before_settled_and_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "editor.py", EDITOR)
    monkeypatch.chdir(tmp_path)
    code = main([
        "--root", str(tmp_path), "--session", "agent-7", "--json", "run", "--snapshots",
        "--every", "0.25", "--", sys.executable, "editor.py", "1.2",
    ])  # fmt: skip
    assert code == 0
    outcome = json.loads(capsys.readouterr().out)
    with Workspace(tmp_path, session="agent-7") as ws:
        rows = list(reversed(ws.list()))
        texts = [ws.file_bytes(s.id, "work.txt")[1] if s.step else b"" for s in rows]
        metas = [ws.load(s.id).meta["run"] for s in rows]
    assert [s.step for s in rows] == list(range(len(rows)))
    assert {s.kind for s in rows} == {"step"}
    assert metas[0] == "before" and metas[-1] == "after"
    assert set(metas[1:-1]) == {"settled"}
    assert len(rows) >= 4  # settled at least twice between three versions 1.2 s apart
    assert texts[-1] == b"version 2"
    assert [s["id"] for s in outcome["snapshots"]] == [s.id for s in rows]


def test_plain_run_keeps_its_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--root", str(tmp_path), "--json", "run", "--", "true"])
    assert code == 0
    kinds = [s["kind"] for s in json.loads(capsys.readouterr().out)["snapshots"]]
    assert kinds == ["run-before", "run-after"]


def test_run_rewind_resumes_from_a_step_and_exits_with_the_command_s_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    root = str(tmp_path)
    write(tmp_path, "state.txt", "step one")
    with worksnap.Session(tmp_path, name="agent") as s:
        s.step()  # step 0
        write(tmp_path, "state.txt", "step two")
        write(tmp_path, "extra.txt", "later")
        s.step()  # step 1
    script = "import pathlib, sys; sys.exit(len(pathlib.Path('state.txt').read_text()))"
    code = main(["--root", root, "--session", "agent", "run", "--rewind", "0", "--yes", "--",
                 sys.executable, "-c", script])  # fmt: skip
    assert code == len("step one")
    assert not (tmp_path / "extra.txt").exists()
    assert "restored" in capsys.readouterr().out
    code = main(["--root", root, "--session", "agent", "--json", "run", "--rewind", "7", "--",
                 "true"])  # fmt: skip
    assert code == 2  # no step 7: nothing was run
    assert json.loads(capsys.readouterr().out or "null") is None


def test_run_json_rewind_prints_one_document_that_holds_the_rewind_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review: `run --json --rewind N` printed the rewind's line ("restored 1 path ...")
    on stdout before run's document, so stdout was not one JSON document."""
    write(tmp_path, "a.txt", "step zero")
    with worksnap.Session(tmp_path, name="agent") as s:
        s.step()
    write(tmp_path, "a.txt", "edited")
    agent = ["--root", str(tmp_path), "--session", "agent", "--json"]
    code = main([*agent, "run", "--rewind", "0", "--", sys.executable, "-c", "exit(3)"])
    document = json.loads(capsys.readouterr().out)
    assert code == 3 and document["exit_code"] == 3 and document["error"] is None
    rewind = document["rewind"]
    assert rewind["restored"] == ["a.txt"] and rewind["error"] is None and rewind["pre_restore"]
    assert (tmp_path / "a.txt").read_text() == "step zero"
    assert main([*agent, "rewind", "0"]) == 0
    assert json.loads(capsys.readouterr().out).keys() == rewind.keys()  # what rewind prints
    assert main([*agent, "run", "--", "true"]) == 0
    assert json.loads(capsys.readouterr().out)["rewind"] is None

    def apply_plan(root: str, plan: Any, read_object: Any, **kwargs: Any) -> Any:
        if not failing:
            return apply.apply_plan(root, plan, read_object, **kwargs)
        failing.clear()  # the rewind's bytes are damaged (not its rollback's)
        return apply.apply_plan(root, plan, lambda d: [b"rotten", *read_object(d)], **kwargs)

    write(tmp_path, "a.txt", "edited again")
    failing, marker = [True], tmp_path / "ran"
    code = main([*agent, "run", "--rewind", "0", "--", "touch", str(marker)],
                seams=Seams(apply_plan=apply_plan))  # fmt: skip
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert code == 1 and document["exit_code"] == 1 and not marker.exists()
    assert document["error"] == "the rewind to step 0 failed, so the command was not run"
    assert document["rewind"]["rolled_back"] and document["snapshots"] == []
    assert "do not match" in err and (tmp_path / "a.txt").read_text() == "edited again"
    assert "the workspace was rolled back to how it was before" in err  # as `rewind` says


def test_run_rewind_asks_on_a_terminal_and_a_no_runs_nothing(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "0")
    with worksnap.Session(tmp_path, name="s") as s:
        s.step()
    write(tmp_path, "a.txt", "changed")
    marker = tmp_path / "ran"
    script = (
        "import os, pty, sys\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0:\n"
        "    os.execv(sys.executable, [sys.executable, '-m', 'worksnap',"
        f" '--root', {str(tmp_path)!r}, '--session', 's', 'run', '--rewind', '0', '--',"
        f" 'touch', {str(marker)!r}])\n"
        "out = b''\n"
        "while b'[y/N]' not in out:\n"
        "    out += os.read(fd, 1024)\n"
        "os.write(fd, b'n\\n')\n"
        "while True:\n"
        "    try:\n"
        "        chunk = os.read(fd, 1024)\n"
        "    except OSError:\n"
        "        break\n"
        "    if not chunk:\n"
        "        break\n"
        "    out += chunk\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status))\n"
        "sys.stdout.write(out.decode())\n"
    )
    env = {**os.environ, "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env, check=True)  # fmt: skip
    assert result.stdout.splitlines()[0] == "1"
    assert "M  a.txt" in result.stdout
    assert not marker.exists()
    assert (tmp_path / "a.txt").read_text() == "changed"
