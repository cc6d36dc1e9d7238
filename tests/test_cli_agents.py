"""The agent-facing commands of the CLI: sessions, rewind, undo/redo, checkpoints, gc, run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_json as ok_json
from tests.conftest import run_cli as call
from tests.conftest import tree_state, write
from worksnap.diskstore import DiskStore
from worksnap.errors import InputError
from worksnap.hash import hash_bytes
from worksnap.runwrap import run_wrapped
from worksnap.workspace import Workspace


def test_rewind_undo_redo_from_the_command_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "step 1")
    ok_json(capsys, root, "snapshot", "--step", "1")
    step_1 = tree_state(root)
    write(root, "a.txt", "step 2")
    ok_json(capsys, root, "snapshot", "--step", "2")
    step_2 = tree_state(root)
    result = ok_json(capsys, root, "rewind", "1", "--yes")
    assert isinstance(result, dict) and result["error"] is None
    assert tree_state(root) == step_1
    ok_json(capsys, root, "undo")
    assert tree_state(root) == step_2
    ok_json(capsys, root, "redo")
    assert tree_state(root) == step_1
    code, out, err = call(capsys, root, "redo")
    assert code == 2 and "nothing to redo" in err and out == ""


def test_session_option_and_environment(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "a.txt", "a")
    ok_json(capsys, root, "--session", "s1", "snapshot", "--step", "1")
    monkeypatch.setenv("WORKSNAP_SESSION", "s2")
    code, _, _ = call(capsys, root, "--session", "s2", "snapshot", "--step", "7")
    assert code == 0
    listed = ok_json(capsys, root, "--session", "s1", "list")
    assert isinstance(listed, list) and [s["step"] for s in listed] == [1]
    everything = ok_json(capsys, root, "list", "--all")
    assert isinstance(everything, list)
    assert sorted(s["session"] for s in everything) == ["s1", "s2"]
    code, _, err = call(capsys, root, "--session", "s1", "rewind", "7", "--yes")
    assert code == 2 and "no snapshot matches 'step:7' in session 's1'" in err


def test_begin_capture_and_attachments(
    root: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    write(root, "code.py", "original")
    messages = tmp_path / "messages.json"
    messages.write_bytes(b'[{"role":"user"}]')
    began = ok_json(
        capsys, root, "begin", "--step", "3", "--label", "fix the bug\nmore",
        "--meta", "cut_len=4", "--attach", f"messages.json={messages}",
    )  # fmt: skip
    assert isinstance(began, dict) and began["label"] == "fix the bug"
    captured = ok_json(capsys, root, "capture", "code.py", "new.py")
    assert captured == {
        "id": began["id"], "captured": ["code.py"], "absent": ["new.py"], "large": [],
        "ignored": [],
    }  # fmt: skip
    write(root, "code.py", "edited")
    write(root, "new.py", "created")
    ok_json(capsys, root, "rewind", "3", "--yes")
    assert (root / "code.py").read_text() == "original"
    assert not (root / "new.py").exists()
    code, out, _ = call(capsys, root, "attachment", began["id"], "messages.json")
    assert code == 0 and out == '[{"role":"user"}]'
    shown = ok_json(capsys, root, "show", began["id"])
    assert isinstance(shown, dict) and shown["meta"] == {"cut_len": "4"}
    code, _, err = call(capsys, root, "snapshot", "--meta", "novalue")
    assert code == 2 and "expected KEY=VALUE" in err


def test_gc_pin_du_from_the_command_line(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = []
    for i in range(3):
        write(root, "a.txt", f"v{i}")
        snap = ok_json(capsys, root, "snapshot", "--step", str(i))
        assert isinstance(snap, dict)
        ids.append(snap["id"])
    assert ok_json(capsys, root, "pin", ids[0]) == {"id": ids[0], "pinned": True}
    store = DiskStore(str(root / ".worksnap"))
    dropped = store.load_record(ids[1])
    assert dropped is not None
    index = store._load_index()
    stored = index[hash_bytes(b"v1")].stored + index[dropped.tree].stored  # compressed
    store.close()
    report = ok_json(capsys, root, "gc", "--keep-last", "1")
    tree = 68  # each snapshot's root tree: ["wstree", 2, [[0, "a.txt", 420, 2, <32 bytes>]]]
    assert report == {
        "snapshots": 1, "objects": 2, "bytes": stored, "dropped": [ids[1]], "dry_run": False,
        "estimate": False, "unswept": None,
    }  # fmt: skip
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list) and [s["id"] for s in listed] == [ids[2], ids[0]]
    usage = ok_json(capsys, root, "du")
    assert isinstance(usage, dict)
    assert usage["sessions"] == {"default": {"snapshots": 2, "bytes": 2 * (2 + tree)}}
    assert usage["store_bytes"] > 0
    code, _, err = call(capsys, root, "gc", "--max-age", "forever")
    assert code == 2 and "bad duration" in err


def test_run_wraps_a_command_and_passes_its_status(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)  # the command runs where worksnap was started
    write(root, "a.txt", "before")
    script = "import pathlib, sys; pathlib.Path('a.txt').write_text('after'); sys.exit(3)"
    code, _, _ = call(capsys, root, "run", "--step", "5", "--", sys.executable, "-c", script)
    assert code == 3
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list)
    # Counted against the previous snapshot not taken automatically: there is none.
    assert [(s["kind"], s["step"], s["changed"]) for s in listed] == [
        ("run-after", 5, None),
        ("run-before", 5, None),
    ]
    assert ok_json(capsys, root, "diff", listed[1]["id"], listed[0]["id"]) == [
        {"op": "M", "path": "a.txt", "from": None, "added": 1, "deleted": 1, "binary": False}
    ]
    code, _, err = call(capsys, root, "run")
    assert code == 2 and "needs a command" in err


def test_run_passes_on_a_killed_command_s_status_as_a_shell_does(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review I 12: a command killed by signal N made `run` exit 256 - N (SIGTERM: 241),
    and `--json` say -15; a shell says 128 + N (143), which scripts test for."""
    monkeypatch.chdir(root)
    write(root, "a.txt", "a")
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    code, _, err = call(capsys, root, "run", "--", sys.executable, "-c", kill)
    assert code == 143, err
    code, out, err = call(capsys, root, "--json", "run", "--", sys.executable, "-c", kill)
    assert (code, json.loads(out)["exit_code"]) == (143, 143), err


@pytest.mark.parametrize("every", ["0", "-1", "nan", "inf", "-0.0"])
def test_run_every_not_above_zero_is_refused_and_runs_nothing(
    root: Path, capsys: pytest.CaptureFixture[str], every: str
) -> None:
    """`--every 0` and `--every -1` were taken, and polled without a pause (revJ's review)."""
    write(root, "a.txt", "a")
    ran = root / "ran.txt"
    script = f"import pathlib; pathlib.Path({str(ran)!r}).write_text('x')"
    code, out, err = call(capsys, root, "run", "--every", every, "--", sys.executable, "-c", script)
    assert (code, out) == (2, "")
    assert "above 0 seconds" in err and err.count("\n") == 1
    assert not ran.exists() and not (root / ".worksnap").exists()
    with pytest.raises(InputError, match="above 0 seconds"):
        run_wrapped(Workspace(root), [sys.executable, "-c", script], every=float(every), step=None)
    assert not ran.exists()


def test_run_every_snapshots_once_the_tree_settles(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)
    script = "import pathlib, time; pathlib.Path('made.txt').write_text('x'); time.sleep(2)"
    code, _, _ = call(capsys, root, "run", "--every", "0.2", "--", sys.executable, "-c", script)
    assert code == 0
    listed = ok_json(capsys, root, "list")
    assert isinstance(listed, list)
    assert [s["kind"] for s in listed] == ["run-after", "run-settled", "run-before"]
    assert [s["changed"] for s in listed] == [None, None, None]  # no deliberate one before


TRAPS = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "a").write(signal.Signals(signum).name + "\\n")
    sys.exit(7)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, stop)
open(sys.argv[1], "a").write("ready\\n")
time.sleep(60)
"""


@pytest.mark.parametrize("to", ["wrapper", "group"])
@pytest.mark.parametrize("every", [None, "0.01"])
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_run_passes_a_stopping_signal_on_to_its_command(
    root: Path, signum: str, every: str | None, to: str
) -> None:
    """A review sent SIGTERM (or SIGHUP) to `worksnap run`: the wrapper died of it, the
    command ran on unseen with no after snapshot and no document; a SIGINT sent to the
    wrapper alone never reached the command, nor one that came while `--every` looked
    at the tree. The signal goes to the command, once (a second review: sent to the
    wrapper's process group, as `timeout` sends it, the command got it twice), which
    decides; `run` waits for it, takes the after snapshot and exits with its status."""
    import os
    import signal
    import subprocess
    import time

    from tests.safety.test_kill import SRC

    write(root, "a.txt", "a\n")
    said = root.parent / "said.txt"
    script = root.parent / "traps.py"
    script.write_text(TRAPS)
    env = {**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"}
    often = ["--every", every] if every else []
    # As at a shell's prompt: a CI job in the background of `nohup` ignores SIGHUP and
    # SIGINT, and what is ignored is never passed on (`stopsignals.on_stop`).
    defaults = ("import os, signal, sys\n"
                "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):\n"
                "    signal.signal(s, signal.SIG_DFL)\n"
                "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")  # fmt: skip
    wrapper = subprocess.Popen(
        [sys.executable, "-c", defaults, "-m", "worksnap", "--root", str(root), "--json",
         "run", *often, "--", sys.executable, str(script), str(said)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # no terminal: a signal reaches the wrapper alone
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (said.exists() and said.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if to == "wrapper":
        wrapper.send_signal(getattr(signal, signum))
    else:
        os.killpg(wrapper.pid, getattr(signal, signum))  # its group (its own session's)
    out, err = wrapper.communicate(timeout=120)
    time.sleep(0.2)  # a second signal would have come by now
    assert said.read_text() == f"ready\n{signum}\n"
    assert wrapper.returncode == 7, err
    document = json.loads(out)
    assert document["exit_code"] == 7
    assert [s["kind"] for s in document["snapshots"]][:: len(document["snapshots"]) - 1] == [
        "run-before",
        "run-after",
    ]  # (and any the tree settled at: `--every`)
