"""Merging small packs (a snapshot past 50 packs) against long-lived readers and a full disk.

A hostile review of the first version found each of these: a merge that filled the disk
left its half-written pack as the store's writer (the next snapshot published it, and the
history with it); readers that kept an index read before a merge named objects missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write
from tests.safety.test_disk_full import mounted_tmpfs
from worksnap import Workspace, client
from worksnap.maintenance import AUTO_MERGE

SRC = str(Path(__file__).resolve().parent.parent / "src")


def _cli(root: Path, *args: str, daemon: bool) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    env["PYTHONPATH"] = SRC
    if not daemon:
        env["WORKSNAP_NO_DAEMON"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _packs(store: Path) -> int:
    return len(list((store / "packs").glob("*.idx")))


def _session_of_packs(root: Path, count: int) -> list[str]:
    """`count` snapshots, each storing a new file: a pack each (no merge up to AUTO_MERGE)."""
    ids = []
    with Workspace(root) as ws:
        for i in range(count):
            write(root, f"f{i}.txt", f"file {i}\n" * 20)
            ids.append(ws.snapshot().id)
    assert _packs(root / ".worksnap") == count
    return ids


# -- 1. the daemon's readers after the daemon's own merge ----------------------------


@pytest.fixture
def daemon_root(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "ws"
    root.mkdir()
    yield root
    _cli(root, "daemon", "stop", daemon=True)
    answer = client.request(str(root / ".worksnap"), "status")
    if answer is not None:
        os.kill(int(answer["pid"]), signal.SIGKILL)


def test_daemon_cat_and_verify_after_the_daemon_s_own_snapshot_merged_packs(
    daemon_root: Path,
) -> None:
    """A user's session has 50 packs; the daemon serves `cat`, then `snapshot` (which
    merges the small packs), then `cat` and `verify` of older snapshots. Every object is
    still in the store (a merge removes nothing), so both must succeed."""
    root = daemon_root
    ids = _session_of_packs(root, AUTO_MERGE)
    code, out, err = _cli(root, "daemon", "start", daemon=True)
    assert code == 0, err
    code, out, err = _cli(root, "cat", ids[0], "f0.txt", daemon=True)
    assert (code, out) == (0, "file 0\n" * 20), err
    write(root, "new.txt", "one more\n")
    code, out, err = _cli(root, "snapshot", daemon=True)  # the 51st pack: a merge
    assert code == 0, err
    assert _packs(root / ".worksnap") < AUTO_MERGE  # the daemon merged them
    code, out, err = _cli(root, "--json", "daemon", "status", daemon=True)
    assert json.loads(out)["requests"] >= 2  # the commands ran in the daemon
    code, out, err = _cli(root, "cat", ids[20], "f20.txt", daemon=True)
    assert code == 0, err
    assert out == "file 20\n" * 20
    code, out, err = _cli(root, "verify", daemon=True)
    assert (code, err) == (0, ""), out
    # A fresh process reads it all: nothing was lost, the daemon's reader is stale.
    code, out, err = _cli(root, "verify", daemon=False)
    assert code == 0


# -- 2. a long-lived Workspace (library use) after another process's snapshot ---------


_SNAPSHOT_MORE = """
import sys
from pathlib import Path
from worksnap import Workspace
root = Path(sys.argv[1])
with Workspace(root) as ws:
    for i in range(int(sys.argv[2]), int(sys.argv[3])):
        (root / f"g{i}.txt").write_text(f"more {i}\\n")
        ws.snapshot()
"""


def test_a_long_lived_workspace_reads_and_verifies_after_another_process_merged(
    tmp_path: Path,
) -> None:
    """An agent harness keeps a Workspace open (reads a file of snapshot 0); a hook in
    another process takes a few snapshots, the last of which merges the small packs.
    The harness then reads older snapshots and verifies: every object is in the store."""
    root = tmp_path / "root"
    root.mkdir()
    ids = _session_of_packs(root, AUTO_MERGE - 2)
    with Workspace(root) as harness:
        assert harness.file_bytes(ids[0], "f0.txt")[1] == b"file 0\n" * 20
        subprocess.run(
            [sys.executable, "-c", _SNAPSHOT_MORE, str(root), "0", "3"],
            env={**os.environ, "PYTHONPATH": SRC},
            check=True,
        )
        assert _packs(root / ".worksnap") < AUTO_MERGE  # the other process merged them
        problems = harness.verify()
        read = harness.file_bytes(ids[30], "f30.txt")[1]
    assert problems == []
    assert read == b"file 30\n" * 20


# -- 3. a merge that fills the disk, in a long-lived workspace ------------------------


@pytest.fixture
def tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real tmpfs of 24 MiB (root only)."""
    yield from mounted_tmpfs(tmp_path, "24m")


def test_a_merge_that_fills_the_disk_does_not_damage_the_next_snapshot_or_history(
    tmp_path: Path, tmpfs: Path
) -> None:
    """An agent harness (or the daemon) keeps one Workspace for a session of 50 steps.
    The disk is nearly full (a build's output) when the 51st snapshot merges the small
    packs: the merge fails with ENOSPC (a warning; the snapshot stands). The user frees
    space and the harness takes one more snapshot. Every snapshot must still verify."""
    import random

    root = tmp_path / "root"
    root.mkdir()
    store = tmpfs / "store"
    rnd = random.Random(1)
    ballast = tmpfs / "build-output"
    with Workspace(root, store=store) as ws:
        for i in range(AUTO_MERGE):
            write(root, f"f{i}.bin", rnd.randbytes(100_000))
            ws.snapshot()
        assert _packs(store) == AUTO_MERGE
        st = os.statvfs(tmpfs)
        ballast.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 2_500_000))  # the disk fills
        write(root, f"f{AUTO_MERGE}.bin", rnd.randbytes(100_000))
        ws.snapshot()  # stands; its merge of the 5 MB of small packs hits ENOSPC
        assert any("No space left" in w for w in ws.warnings), ws.warnings
        ballast.unlink()  # the user frees space
        write(root, "after.bin", rnd.randbytes(100_000))
        ws.snapshot()
    with Workspace(root, store=store) as fresh:
        problems = fresh.verify()
    assert problems == [], f"{len(problems)} problems, first: {problems[0]}"
