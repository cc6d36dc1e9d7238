"""Two gc sweeps within one second on a whole-second file system (the store's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import worksnap
from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401
from tests.conftest import write
from worksnap import Workspace

SRC = str(Path(worksnap.__file__).resolve().parents[1])

_GC_SERVER = """
import sys
from pathlib import Path
from worksnap.config import Retention
from worksnap.workspace import Workspace
root, store = Path(sys.argv[1]), Path(sys.argv[2])
for line in sys.stdin:
    policy = Retention(keep_last=1) if line.strip() == "drop" else Retention()
    with Workspace(root, store=store) as ws:
        ws.gc(policy)
    print("ok", flush=True)
"""


def test_two_sweeps_in_one_second_are_both_seen(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    """gc rewrites `generation` (temp file and rename) to tell long-lived processes that
    objects are gone; they compare (inode, mtime). Two rewrites reuse the first inode, and
    in one whole second the mtime is the same: the second sweep looks like none."""
    root, store = tmp_path / "ws", coarse_tmp / "store"
    root.mkdir()
    server = subprocess.Popen(
        [sys.executable, "-c", _GC_SERVER, str(root), str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None

    def gc(kind: str) -> None:
        server.stdin.write(kind + "\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        assert server.stdout.readline().strip() == "ok"  # type: ignore[union-attr]

    generation = store / "generation"
    try:
        with Workspace(root, store=store) as ws:
            for attempt in range(8):
                old = os.urandom(1000 + attempt)
                write(root, "f.bin", old)
                ws.snapshot()  # holds `old`
                write(root, "f.bin", b"new")
                time.sleep(1 - time.time() % 1)  # the start of a second
                gc("keep")  # rewrites generation, sweeps nothing
                ws.snapshot()  # syncs: remembers generation and an index holding `old`
                seen = os.stat(generation)
                gc("drop")  # drops the snapshot holding `old`, sweeps it
                gc("keep")
                now = os.stat(generation)
                if (now.st_ino, now.st_mtime_ns) == (seen.st_ino, seen.st_mtime_ns):
                    break  # the case: two sweeps since, and the stamp is the same
            # (On a loaded machine the sweeps may never fit in one second: the check
            # below still runs, as for any two sweeps; idle, the first attempt fits.)
            write(root, "f.bin", old)
            taken = ws.snapshot()
        r = subprocess.run(
            [sys.executable, "-m", "worksnap", "--root", str(root), "--store", str(store),
             "verify"],
            check=False, env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
        )  # fmt: skip
        assert r.returncode == 0, f"attempt {attempt}, {taken.id}: " + r.stdout + r.stderr
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        server.stdout.close()
