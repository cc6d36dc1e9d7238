"""SIGKILL part-way through a real restore, then recovery: back to the pre-restore state.

A restore runs in a child process and is killed: at exact steps of the apply
(the child kills itself on the n-th unlink, rename, fsync...), and after
random short delays. The next command (or `worksnap recover`) must leave the
workspace exactly as it was before the restore; a kill that came too late
leaves it exactly at the target instead, never in between.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import worksnap

from .conftest import STORE, cli, tree_state, write
from .faults import build_scenario

SRC = str(Path(worksnap.__file__).resolve().parents[1])

pytestmark = pytest.mark.slow  # kill -9 of real restore processes

CHILD = r"""
import os, signal, stat, sys
from worksnap.apply import apply_plan as real_apply
from worksnap.workspace import Seams, Workspace

root, target, step, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def is_dir(fd):
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False

STEPS = {
    "unlink": ("unlink", lambda *a, **k: True),
    "rmdir": ("rmdir", lambda *a, **k: True),
    "mkdir": ("mkdir", lambda *a, **k: True),
    "open temp file": ("open", lambda p, flags, *a, **k: bool(flags & os.O_CREAT)),
    "write": ("write", lambda *a, **k: True),
    "fsync file": ("fsync", lambda fd: not is_dir(fd)),
    "fsync dir": ("fsync", is_dir),
    "symlink": ("symlink", lambda *a, **k: True),
    "rename": ("rename", lambda *a, **k: True),
    "never": ("getpid", lambda *a, **k: False),
}
armed = False
count = 0

def apply_plan(*args, **kwargs):
    global armed
    armed = True
    print("applying", flush=True)
    return real_apply(*args, **kwargs)

func, test = STEPS[step]
real = getattr(os, func)

def wrapper(*args, **kwargs):
    global count
    if armed and test(*args, **kwargs):
        count += 1
        if count == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

setattr(os, func, wrapper)  # the OS boundary: the kill lands on one exact system call
print("start", flush=True)
with Workspace(root, seams=Seams(apply_plan=apply_plan)) as ws:
    result = ws.restore(target)
print("finished", result.ok, flush=True)
"""


def _child(root: Path, target: str, step: str = "never", nth: int = 0) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), target, step, str(nth)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


KILL_AT = [
    ("unlink", 1),
    ("unlink", 3),
    ("rmdir", 1),
    ("mkdir", 2),
    ("open temp file", 1),
    ("write", 2),
    ("fsync file", 3),
    ("rename", 1),
    ("rename", 4),
    ("symlink", 1),
    ("fsync dir", 1),
]


@pytest.mark.parametrize(("step", "nth"), KILL_AT, ids=[f"{s}#{n}" for s, n in KILL_AT])
@pytest.mark.parametrize("recovery", ["recover", "next command"])
def test_kill_at_a_step_then_recovery_restores_pre_state(
    root: Path, step: str, nth: int, recovery: str
) -> None:
    write(root, ".gitignore", "*.tmp\n")  # a temp file left behind would be ignored
    ws, target = build_scenario(root)
    ws.close()
    before = tree_state(root)
    child = _child(root, target, step, nth)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, out
    assert "applying" in out
    assert (root / STORE / "journal.json").exists()
    command = "recover" if recovery == "recover" else "snapshot"
    code, _, err = cli("--root", str(root), command)
    assert code == 0, err
    assert tree_state(root) == before
    assert not (root / STORE / "journal.json").exists()
    assert cli("--root", str(root), "verify")[0] == 0


def _mess_up(root: Path) -> None:
    """Turns the target state of `big` into the state a restore starts from."""
    for d in range(10):
        for f in range(40):
            write(root, f"d{d:02}/f{f:02}.txt", f"current {d} {f}\n" * 31)
    shutil.rmtree(root / "d10")
    write(root, "new/one.txt", "added since\n")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[bytes, object]]:
    """A workspace whose restore takes a while: 400 files change, 40 go, 40 come back."""
    root = tmp_path_factory.mktemp("big") / "ws"
    for d in range(12):
        for f in range(40):
            write(root, f"d{d:02}/f{f:02}.txt", f"target {d} {f}\n" * 30)
    os.symlink("d00/f00.txt", root / "link")
    with worksnap.Workspace(root) as ws:
        target = ws.snapshot().id
    return root, target, tree_state(root)


@pytest.mark.parametrize("seed", range(6))
def test_kill_after_random_delay_then_recovery(
    big: tuple[Path, str, dict[bytes, object]], seed: int
) -> None:
    root, target, target_state = big
    if tree_state(root) == target_state:
        _mess_up(root)  # the first seed, or one whose kill came after the restore finished
    before = tree_state(root)
    rng = random.Random(seed)
    child = _child(root, target)
    assert child.stdout is not None
    assert child.stdout.readline() == "start\n"
    if seed % 2:
        time.sleep(rng.uniform(0.0, 0.5))  # anywhere: capture, pre-restore, journal, apply
    else:
        assert child.stdout.readline() == "applying\n"
        time.sleep(rng.uniform(0.0, 0.3))  # part-way through the apply
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=60)
    journal = (root / STORE / "journal.json").exists()
    code, _, err = cli("--root", str(root), "recover" if seed % 3 else "snapshot")
    assert code == 0, err
    after = tree_state(root)
    # Killed after the journal was removed but before "finished" was printed: the restore
    # had completed, and the only acceptable state is the whole target.
    completed = "finished" in out or (not journal and after == target_state)
    if completed:
        assert not journal
        assert after == target_state
    else:
        assert after == before, f"journal was {'there' if journal else 'absent'}"
    assert not (root / STORE / "journal.json").exists()
    assert cli("--root", str(root), "verify")[0] == 0
