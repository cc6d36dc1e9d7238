"""Recovering from a restore killed part-way: no byte that is in no snapshot is ever destroyed.

A restore is killed with SIGKILL at an exact step (a real child process); then the
user goes on working: edits a file the restore touched, edits one it did not,
creates files. `plan` and the read-only commands leave all of that alone and say
that a recovery is pending; `recover` (or the next snapshot) rolls back only the
paths the journal lists, after storing the tree as it is as a `pre-recover`
snapshot that `undo` brings back.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import msgspec
import pytest

from worksnap import Workspace

from .conftest import STORE, cli, tree_state, write
from .faults import build_scenario
from .test_kill import CHILD, SRC, _child

RECOVER_CHILD = CHILD.replace("result = ws.restore(target)", "result = ws.recover()")
UNDO_CHILD = CHILD.replace("result = ws.restore(target)", "result = ws.undo()")
assert RECOVER_CHILD != CHILD != UNDO_CHILD

pytestmark = pytest.mark.slow  # kill -9 of real restore processes

JOURNAL = Path(STORE) / "journal.json"


def _killed_restore(root: Path, step: str = "rename", nth: int = 2) -> dict[bytes, object]:
    """Builds the scenario, kills its restore at the `nth` `step`; returns the pre-restore state."""
    ws, target = build_scenario(root)
    ws.close()
    before = tree_state(root)
    child = _child(root, target, step, nth)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, out
    assert (root / JOURNAL).exists()
    return before


def _killed(code: str, root: Path, *, nth: int) -> None:
    """Runs `code` (a variant of test_kill's child) on `root`; it kills itself on its
    `nth` rename, leaving the journal."""
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(root), "-", "rename", str(nth)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, out
    assert (root / JOURNAL).exists()


def _without_leftovers(state: dict[bytes, object]) -> dict[bytes, object]:
    """A tree's state without the temp files a killed restore leaves (recovery sweeps them)."""
    return {p: v for p, v in state.items() if not re.search(rb"\.worksnap-[0-9a-f]{12}\.tmp$", p)}


def _line(stream: IO[str], timeout: float = 30) -> str:
    """The next line a child writes, or a failure if none comes (it waits silently)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        pytest.fail(f"no line in {timeout} s")
    return stream.readline()


def _edit_after_the_kill(root: Path) -> None:
    """What a user (or an agent) does next, not knowing the restore died."""
    write(root, "keep.txt", "edited after the kill: the restore never touched it\n")
    write(root, "newdir/new.txt", "created after the kill\n")
    write(root, "mod.txt", "edited after the kill: the restore touched it\n")


@pytest.mark.parametrize("command", [["plan", "latest"], ["--json", "plan", "latest"]])
def test_plan_never_changes_the_tree_and_points_to_recover(root: Path, command: list[str]) -> None:
    _killed_restore(root)
    _edit_after_the_kill(root)
    edited = tree_state(root)
    code, out, err = cli("--root", str(root), *command)
    assert (code, out) == (2, ""), err  # refused, nothing changed
    assert err.count("\n") == 1 and "worksnap recover" in err, err
    assert tree_state(root) == edited
    assert (root / JOURNAL).exists()


@pytest.mark.parametrize("command", [["list"], ["verify"], ["show", "latest"], ["diff", "latest"]])
def test_read_only_commands_leave_the_tree_and_say_a_recovery_is_pending(
    root: Path, command: list[str]
) -> None:
    _killed_restore(root)
    _edit_after_the_kill(root)
    edited = tree_state(root)
    code, _, err = cli("--root", str(root), *command)
    assert code in (0, 1), err  # diff and verify may find differences
    assert "warning: a restore was interrupted" in err and "worksnap recover" in err
    assert tree_state(root) == edited
    assert (root / JOURNAL).exists()


@pytest.mark.parametrize("command", ["recover", "snapshot"])
def test_recovery_keeps_later_work_and_undo_brings_it_all_back(root: Path, command: str) -> None:
    before = _killed_restore(root)
    _edit_after_the_kill(root)
    edited = _without_leftovers(tree_state(root))
    touched = {os.fsencode(p) for p in json.loads((root / JOURNAL).read_bytes())["paths"]}
    assert b"mod.txt" in touched and b"keep.txt" not in touched
    code, out, err = cli("--root", str(root), command)
    assert code == 0, err
    assert not (root / JOURNAL).exists()
    after = tree_state(root)
    # Every path the restore touched is back as before it; every other path is where
    # the user left it (the edit of keep.txt, newdir/ and what is in it).
    for path in before.keys() | edited.keys() | after.keys():
        wanted = before.get(path) if path in touched else edited.get(path)
        assert after.get(path) == wanted, path
    # The tree as it was before the recovery is a snapshot, and undo brings it back.
    with Workspace(root) as ws:
        kinds = [s.kind for s in ws.list()]
    assert "pre-recover" in kinds
    if command == "recover":
        assert f"(worksnap --root {root} undo)" in out  # the hint reaches this root
    code, _, err = cli("--root", str(root), "undo")
    assert code == 0, err
    assert tree_state(root) == edited


@pytest.mark.parametrize("drop", ["--drop", "--drop-session"])
def test_gc_never_drops_the_snapshot_a_pending_recovery_rolls_back_to(
    root: Path, drop: str
) -> None:
    """`gc --drop` of the pre-restore snapshot (or `--drop-session` of its session) went
    ahead under the "a restore was interrupted" warning and freed its objects: `recover`
    could then only discard, the half-restored tree kept (stop 41's second review). Both
    are refused in one line, exit 2, nothing removed; `recover` then puts the tree back."""
    before = _killed_restore(root)
    pre = json.loads((root / JOURNAL).read_bytes())["pre_restore"]
    with Workspace(root) as ws:
        listed = [s.id for s in ws.list()]
        session = ws.session
    code, _, err = cli("--root", str(root), "gc", drop, pre if drop == "--drop" else session)
    *warning, error = err.strip().splitlines()  # (the pending-recovery warning first)
    assert code == 2 and "is needed by an interrupted restore (to recover)" in error, err
    assert drop == "--drop-session" or error.startswith(f"worksnap: error: snapshot {pre} ")
    assert "worksnap recover" in error and len(warning) == 1
    with Workspace(root) as ws:
        assert [s.id for s in ws.list()] == listed
    code, _, err = cli("--root", str(root), "recover")
    assert code == 0, err
    assert _without_leftovers(tree_state(root)) == _without_leftovers(before)


@pytest.mark.parametrize("journal", ["as written", "older, without its kind"])
def test_undo_right_after_a_killed_restore_is_its_rollback(root: Path, journal: str) -> None:
    """`undo` first recovers: it keeps the half-restored tree as `pre-recover` and rolls
    the restore back. It then took that very snapshot as the newest that differs, and
    put the half-restored tree back, journal gone (hostile review). The rollback is the
    undo; `redo` brings the half-restored tree back, as after any undo. A journal from
    before the kind was recorded was a restore's (review of 0a13ab8)."""
    before = _killed_restore(root)
    if journal != "as written":
        written = json.loads((root / JOURNAL).read_bytes())
        assert written.pop("kind") == "pre-restore"
        (root / JOURNAL).write_text(json.dumps(written))
    half = _without_leftovers(tree_state(root))
    assert half != before
    code, out, err = cli("--root", str(root), "undo", "--yes")
    assert code == 0, err
    assert not (root / JOURNAL).exists()
    assert tree_state(root) == before
    assert f"redo it with: worksnap --root {root} redo" in out  # the hint reaches this root
    assert "rolled back first" not in err  # the rollback is what was asked for: the undo
    code, _, err = cli("--root", str(root), "redo", "--yes")
    assert code == 0, err
    assert tree_state(root) == half


def test_undo_right_after_a_killed_undo_undoes(root: Path) -> None:
    """Only a killed restore's rollback is an undo: after a killed undo, the rollback put
    the restore back and `undo` stopped there, nothing undone (review of 5bbdbcb)."""
    for i in range(4):
        write(root, f"f{i}", "v1\n")
    with Workspace(root) as ws:
        first = ws.snapshot().id
        for i in range(4):
            write(root, f"f{i}", "v2\n")
        ws.snapshot()
        wanted = tree_state(root)
        assert ws.restore(first).ok
    _killed(UNDO_CHILD, root, nth=2)  # the undo, on its second rename
    code, _, err = cli("--root", str(root), "undo", "--yes")
    assert code == 0, err
    assert not (root / JOURNAL).exists()
    assert tree_state(root) == wanted
    assert "an interrupted restore was rolled back first" in err  # not the undo asked for


@pytest.mark.parametrize(
    "command",
    [
        ["snapshot"],
        ["--json", "snapshot"],
        ["restore", "latest", "--yes"],
        ["restore", "latest", "--yes", "--", "no-such-path"],
    ],
)
def test_a_command_that_recovers_first_says_so_and_names_the_snapshot_it_kept(
    root: Path, command: list[str]
) -> None:
    """A review found `snapshot` after a killed restore rolling the tree back without a
    word (the edits made since only in a `pre-recover` snapshot nothing named), and
    `restore REF no-such-path` doing so before it refused the path (exit 2)."""
    _killed_restore(root)
    _edit_after_the_kill(root)
    code, _, err = cli("--root", str(root), *command)
    assert code == (2 if "no-such-path" in command else 0), err
    with Workspace(root) as ws:
        kept = [s.id for s in ws.list() if s.kind == "pre-recover"]
    assert len(kept) == 1
    said = [line for line in err.splitlines() if "rolled back first" in line]
    assert len(said) == 1, err
    assert said[0].startswith("worksnap: an interrupted restore was rolled back first (")
    assert f"snapshot {kept[0]} (`worksnap restore {kept[0]}` brings it back)" in said[0]
    # What it says brings the tree back does (`undo` would not, after a restore: a review).
    assert cli("--root", str(root), "restore", kept[0], "--yes")[0] == 0
    assert (root / "newdir" / "new.txt").read_text() == "created after the kill\n"
    assert (root / "mod.txt").read_text() == "edited after the kill: the restore touched it\n"


def test_a_hook_that_recovers_first_says_so_and_not_to_run_recover(root: Path) -> None:
    """A review found the hook's snapshot rolling back a killed restore silently, its one
    line saying a restore was interrupted and to run `worksnap recover`: no longer true."""
    _killed_restore(root)
    _edit_after_the_kill(root)
    event = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": str(root),
             "prompt": "go on", "transcript_path": ""}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "hook", "claude-code"], input=json.dumps(event),
        capture_output=True, text=True, cwd=root, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("CLAUDE")}
        | {"WORKSNAP_NO_DAEMON": "1", "PYTHONPATH": SRC},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (root / JOURNAL).exists()
    assert "rolled back first" in done.stderr and "worksnap recover" not in done.stderr


def test_a_killed_recovery_is_recovered_without_losing_later_work(root: Path) -> None:
    """The recovery itself is killed part-way; the next one still loses nothing."""
    _killed_restore(root)
    _edit_after_the_kill(root)
    edited = _without_leftovers(tree_state(root))
    _killed(RECOVER_CHILD, root, nth=1)  # the recovery, on the first rename of its rollback
    code, _, err = cli("--root", str(root), "recover")
    assert code == 0, err
    after = tree_state(root)
    assert after[b"keep.txt"] == edited[b"keep.txt"]
    assert after[b"newdir/new.txt"] == edited[b"newdir/new.txt"]
    # Two undos walk back through both pre-recover snapshots to the tree as edited.
    for _ in range(2):
        if tree_state(root) == edited:
            break
        assert cli("--root", str(root), "undo")[0] == 0
    assert tree_state(root) == edited


def test_a_recovery_preview_reads_the_gitignore_of_the_tree_now(root: Path) -> None:
    """Found with the undo differential walk's fix: the rollback's target keeps the tree's
    own `.gitignore`, which a preview's capture does not store, and the planner reads it
    for what the rollback removes; `recover --dry-run` failed with "object ...: missing
    from the store"."""
    write(root, "a", "a0\n")
    with Workspace(root) as ws:
        pre = ws.snapshot().id  # stands in for a pre-restore snapshot
        write(root, "new", "the killed restore made this\n")
        write(root, ".gitignore", "*.log\n")  # the user's, after the kill
        journal = {"target": pre, "pre_restore": pre, "pid": 1, "host": "gone", "paths": ["new"]}
        (root / JOURNAL).write_text(json.dumps(journal))
        plan = ws.plan_recover()
        assert plan is not None and [(c.op.value, c.path) for c in plan.changes] == [("A", "new")]


# -- item 9: a journal that cannot be acted on -----------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        "missing pre-restore", "damaged pre-restore", "damaged journal",
        "mode out of range", "negative mode", "session no file can name",
    ],
)  # fmt: skip
def test_a_journal_that_cannot_be_acted_on_says_how_to_clear_it(root: Path, damage: str) -> None:
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
        pre = ws.snapshot(kind="before").id  # stands in for a pre-restore snapshot
    if damage == "missing pre-restore":
        journal = {"target": target, "pre_restore": "0123456789ab", "pid": 1, "host": "gone"}
        (root / JOURNAL).write_text(json.dumps(journal))
    elif damage == "damaged pre-restore":
        journal = {"target": target, "pre_restore": pre, "pid": 1, "host": "gone"}
        (root / JOURNAL).write_text(json.dumps(journal))
        (root / STORE / "snapshots" / f"{pre}.json").write_bytes(b"{not json")
    elif damage == "damaged journal":
        (root / JOURNAL).write_text('{"target": ')
    else:  # a review: a mode past C's int stopped a recovery half-way with a traceback;
        # 4095 made a setuid, sticky, world-writable directory; "../x" filed a snapshot
        # under a session no command can name
        bad = {
            "mode out of range": {"modes": {"d": 1 << 40}},
            "negative mode": {"modes": {"d": -1}},
            "session no file can name": {"session": "../x"},
        }[damage]
        journal = {"target": target, "pre_restore": pre, "pid": 1, "host": "gone",
                   "paths": ["d", "d/a.txt"], **bad}  # fmt: skip
        (root / JOURNAL).write_text(json.dumps(journal))
    write(root, "a.txt", "work of the afternoon\n")
    state = tree_state(root)

    for command in (["snapshot"], ["restore", target, "--yes"], ["recover"]):
        code, out, err = cli("--root", str(root), *command)
        assert (code, out) == (1, ""), (command, err)
        assert err.count("\n") == 1 and "worksnap recover --discard" in err, err
        assert tree_state(root) == state
    code, _, err = cli("--root", str(root), "list")
    assert code == 0 and "warning: a restore was interrupted" in err

    code, out, err = cli("--root", str(root), "--json", "recover", "--discard")
    assert code == 0, err
    kept = msgspec.json.decode(out)["pre_restore"]
    assert tree_state(root) == state  # nothing was rolled back
    assert not (root / JOURNAL).exists()
    with Workspace(root) as ws:
        (entry,) = ws.load(kept).entries
        assert (entry.path, ws.store.read(entry.hash or "")) == (
            "a.txt",
            b"work of the afternoon\n",
        )
    assert cli("--root", str(root), "snapshot")[0] == 0
    assert cli("--root", str(root), "restore", target, "--yes")[0] == 0
    assert (root / "a.txt").read_text() == "alpha\n"


# -- item 13: a restore racing gc -------------------------------------------------


def test_a_restore_racing_gc_changes_nothing_and_says_retry(root: Path) -> None:
    """gc drops the target (and its objects) while the restore waits for the store."""
    from worksnap.diskstore import DiskStore
    from worksnap.lock import StoreLock
    from worksnap.paths import Digest
    from worksnap.treewalk import reachable

    write(root, "a.txt", "only in the old snapshot\n")
    with Workspace(root) as ws:
        old = ws.snapshot().id
    write(root, "a.txt", "now\n")
    with Workspace(root) as ws:
        ws.snapshot()
    before = tree_state(root)
    store = str(root / STORE)
    with StoreLock(store, exclusive=True, purpose="gc"):
        restore = subprocess.Popen(
            [sys.executable, "-m", "worksnap", "--root", str(root), "restore", old, "--yes"],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
        )
        assert restore.stderr is not None
        line = _line(restore.stderr)  # it has loaded its target and waits for the store
        assert "waiting for store" in line and "gc" in line, line
        # What a gc does under this lock: drop the snapshot, sweep what only it needed.
        disk = DiskStore(store)
        kept = [disk.load_record(i) for i in disk.ids() if i != old]
        live = set(reachable([Digest(r.tree) for r in kept if r is not None], disk.read))
        disk.delete_snapshot(old)
        disk.sweep(live)
    err = restore.stderr.read()
    restore.stderr.close()
    assert restore.wait(timeout=60) == 2, err
    assert err.count("\n") == 1 and "retry" in err and old in err, err
    assert tree_state(root) == before
    with Workspace(root) as ws:
        assert [s.kind for s in ws.list()] == ["manual"]  # no pre-restore snapshot
    assert not (root / JOURNAL).exists()


# -- item 14: a wait for the store says who holds it -------------------------------


HOLDER = r"""
import sys
from worksnap.lock import StepLock, StoreLock
lock = StepLock(sys.argv[1]) if sys.argv[2] == "steps" else StoreLock(
    sys.argv[1], exclusive=True, purpose="restore")
with lock:
    print("holding", flush=True)
    sys.stdin.readline()
"""


def _wait_behind(root: Path, lock: str, *command: str) -> tuple[int, str, str, str]:
    """Runs `worksnap --root ROOT COMMAND` while another process holds `lock` ("store"
    or "steps"), lets go once its first line on stderr came: (exit, first line, out, rest)."""
    env = {**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root / STORE), lock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "holding\n"
    waiting = subprocess.Popen(
        [sys.executable, "-m", "worksnap", "--root", str(root), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert waiting.stderr is not None
    line = _line(waiting.stderr).replace(f"pid {holder.pid} on ", "pid HOLDER on ")
    holder.stdin.write("go\n")
    holder.communicate(timeout=60)
    out, err = waiting.communicate(timeout=60)
    return waiting.returncode, line, out, err


def test_a_command_waiting_for_the_store_says_who_holds_it(root: Path) -> None:
    write(root, "a.txt", "alpha\n")
    with Workspace(root):
        pass
    assert cli("--root", str(root), "snapshot")[0] == 0
    code, line, out, err = _wait_behind(root, "store", "--json", "snapshot")
    assert line.startswith("worksnap: waiting for store "), line
    assert "pid HOLDER on " in line and ": restore" in line, line
    assert code == 0, err
    assert err == ""  # said once
    assert json.loads(out)["id"]


def test_a_numbered_step_waiting_for_another_says_so(root: Path) -> None:
    write(root, "a.txt", "alpha\n")
    assert cli("--root", str(root), "snapshot")[0] == 0
    code, line, _, err = _wait_behind(root, "steps", "run", "--snapshots", "--", "true")
    assert line.startswith("worksnap: waiting for store "), line
    assert "(another step of a session is being numbered)" in line, line
    assert code == 0, err


@pytest.mark.parametrize("tool", ["restore", "undo", "redo"])
def test_the_mcp_server_recovers_before_it_changes_the_tree(tmp_path: Path, tool: str) -> None:
    """docs/agents.md: a killed restore is rolled back by the next snapshot, restore, rewind,
    undo or redo. The MCP tools planned first, and a plan of a half-restored tree is
    refused ("run `worksnap recover`", which no tool does): a review found the agent stuck.
    Then they recovered before the call, so an undo took the half-restored tree the
    recovery kept for the newest that differs and put it back (stop 47's review)."""
    from worksnap.mcpserver import ToolError, Tools

    root = tmp_path / "ws"
    before = _killed_restore(root)
    with Workspace(root) as ws:
        tools = Tools(ws, session="default")
        target = next(s.id for s in ws.list() if s.label == "target")
        if tool == "redo":  # nothing to redo: refused before anything changes, as `redo`
            half = tree_state(root)
            with pytest.raises(ToolError, match="redo"):
                tools.redo()
            assert tree_state(root) == half and (root / JOURNAL).exists()
            tools.snapshot()  # the next change recovers
            assert _without_leftovers(tree_state(root)) == before
        else:
            result = tools.restore(target) if tool == "restore" else tools.undo()
            assert result["error"] is None, result
            if tool == "restore":
                assert ws.plan_restore(ws.load(target)).changes == []
                # The agent is told (a review found it only in the server's log).
                [notice] = result["notices"]
                assert notice.startswith("an interrupted restore was rolled back first (")
            else:  # the rollback is the undo, as on the command line (not the half-done tree)
                assert tree_state(root) == before and "notices" not in result
        assert not (root / JOURNAL).exists()


_HELD_RESTORE = """
import sys
from worksnap import apply, cli
from worksnap.workspace import Seams

def apply_plan(root, plan, read, **kwargs):
    print("applying", flush=True)  # its journal written, the store's lock held
    sys.stdin.readline()  # until the test says go (or kills it)
    return apply.apply_plan(root, plan, read, **kwargs)

sys.exit(cli.main(sys.argv[1:], seams=Seams(apply_plan=apply_plan)))
"""


@pytest.mark.parametrize("end", ["finishes", "is killed"])
def test_a_restore_running_in_another_process_is_not_reported_as_interrupted(
    root: Path, end: str
) -> None:
    """While a restore simply ran in another process (a person's rewind, an agent's
    restore), `list`, `status` and the hooks warned that a restore was interrupted and
    to run `worksnap recover`, and `plan` refused with that claim (hostile review): only
    the journal's presence was looked at. A journal whose restore holds the store's lock
    is a restore running: said so, and `plan` refuses as busy (git: "another git process
    seems to be running"); once its process is killed (the kernel frees the lock), the
    journal is an interrupted restore again."""
    ws, target = build_scenario(root)
    ws.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HELD_RESTORE, "--root", str(root), "restore", target, "--yes"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert _line(holder.stdout) == "applying\n"
        assert (root / JOURNAL).exists()
        code, _, err = cli("--root", str(root), "list")
        assert code == 0, err
        assert "warning: a restore is running in another process" in err, err
        assert "interrupted" not in err and "recover" not in err, err
        code, out, err = cli("--root", str(root), "plan", "latest")
        assert (code, out) == (1, ""), err
        assert err.startswith("worksnap: error: a restore is running in another process")
        assert f"pid {holder.pid} on " in err and "interrupted" not in err, err
        code, out, err = cli("--root", str(root), "--json", "status")
        state = json.loads(out)
        assert (state["restore_running"], state["recovery_pending"]) == (True, False), err
        if end == "is killed":
            holder.kill()
        else:
            holder.stdin.write("go\n")
        holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    code, out, err = cli("--root", str(root), "--json", "status")
    state = json.loads(out)
    assert not state["restore_running"], err
    if end == "finishes":
        assert holder.returncode == 0
        assert not state["recovery_pending"] and not (root / JOURNAL).exists()
        return
    assert state["recovery_pending"] and (root / JOURNAL).exists()
    code, _, err = cli("--root", str(root), "list")
    assert "warning: a restore was interrupted" in err and "worksnap recover" in err, err
    code, out, err = cli("--root", str(root), "plan", "latest")
    assert (code, out) == (2, "") and "worksnap recover" in err, err
