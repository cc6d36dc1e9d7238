"""Restores in a long-lived watched workspace, round after round, as the daemon runs them.

Each round makes the restore benchmark's situation (10 files modified, 10 added, 100
deleted; `run.py`'s `restore_daemon` row) and restores the first snapshot. With
`--other-tool`, the deleted files are then written again by another process's way of
writing (unlink, then a new file in place, as `git read-tree -u` does), so the next round
deletes files the watcher saw written by another program: what `run.py`'s interleaved git
rounds do to the daemon. Prints each restore's time, their median and the peak RSS.

    PYTHONPATH=src python benchmarks/restore_rounds.py --ref /tmp/watcher-bench/ref/root
    PYTHONPATH=src python benchmarks/restore_rounds.py --ref REF --other-tool

The reference tree is copied to a scratch directory first (it is changed).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from worksnap.workspace import Workspace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="the reference tree (copied)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--other-tool", action="store_true", help="rewrite deleted files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="restore-rounds-") as scratch:
        root = Path(scratch) / "root"
        shutil.copytree(args.ref, root, symlinks=True)
        times, peak = rounds(root, Path(scratch) / "store", args.rounds, args.other_tool)
    print("restores", " ".join(f"{t:.3f}" for t in times))
    print(f"median {statistics.median(times):.3f} s; peak RSS {peak // 1024} MB")


def rounds(root: Path, store: Path, count: int, other_tool: bool) -> tuple[list[float], int]:
    with Workspace(root, store=store, watch=True) as ws:
        base = ws.snapshot(label="base")
        small = sorted(e.path for e in base.entries if e.type == "file" and (e.size or 0) < 1 << 20)
        picked = random.Random(1).sample(small, 110)
        modified, deleted = picked[:10], picked[10:]
        data = {p: (root / p).read_bytes() for p in picked}
        times = []
        for r in range(count):
            for p in modified:
                (root / p).write_bytes(data[p] + f"\nbench edit {r}\n".encode())
            for i in range(10):
                (root / f"added{i}.txt").write_text(f"added {i} round {r}\n")
            for p in deleted:
                (root / p).unlink()
            start = time.perf_counter()
            result = ws.restore(base.id)
            times.append(time.perf_counter() - start)
            if result.error is not None or len(result.restored) != 120:
                raise RuntimeError(f"round {r}: {result}")
            if other_tool:
                for p in deleted:
                    os.unlink(root / p)
                    (root / p).write_bytes(data[p])
    return times, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    main()
