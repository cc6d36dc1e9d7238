"""The daemon's `plan latest~3` right after each snapshot: a target not loaded before, each time.

Runs in-process through the daemon's own entry point (`cli._run_pooled` on a
`WorkspacePool`, as `worksnap daemon serve` runs a client's command), on a copy of the
store, so the snapshots it takes leave the original alone. Prints the median of the
plans after the first (which opens the workspace). Run it with the `src` to measure on
`PYTHONPATH`:

    PYTHONPATH=src python benchmarks/plan_moving_target.py \
        --root /tmp/watcher-bench/ref/root --store /tmp/watcher-bench/ref/state/store
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import tempfile
import time

from worksnap import cli
from worksnap.daemon import WorkspacePool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    os.environ["WORKSNAP_NO_DAEMON"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        shutil.copytree(args.store, store, symlinks=True)
        pool = WorkspacePool()

        def run(*argv: str) -> None:
            out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                pool.start_command(next(a for a in argv if not a.startswith("-")), None)
                try:
                    code = cli._run_pooled(["--root", args.root, "--store", store, *argv], pool)
                finally:
                    pool.end_command()
            if code != 0:
                raise RuntimeError(f"{argv}: exit {code}")

        run("snapshot")
        took = []
        for _ in range(args.rounds):
            run("snapshot")
            start = time.perf_counter()
            run("--json", "plan", "latest~3")
            took.append(time.perf_counter() - start)
        pool.drop_all()
    print(f"plan latest~3: first {took[0] * 1000:.1f} ms, then median "
          f"{statistics.median(took[1:]) * 1000:.1f} ms of {len(took) - 1}")  # fmt: skip


if __name__ == "__main__":
    main()
