"""A/B: `worksnap --json snapshot` of an unchanged tree through the daemon, per source tree.

For each `--src` in turn (blocks alternated `--blocks` times) the daemon of that code is
started by the command line as a user's would be and warmed with 6 snapshots; then
`--rounds` `--json snapshot` runs are timed as whole processes, and the daemon is stopped
(a daemon of other code declines a client, and one older than stop 42 kept its pipes
open). Prints medians and the ratio of the second source to the first.

    python benchmarks/json_snapshot_ab.py --root /tmp/worksnap-bench/ref/root \\
        --store /tmp/worksnap-bench/ref/state/store --src OLD/src --src src
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from run import DAEMON_ENV


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--src", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args()
    times: dict[str, list[float]] = {src: [] for src in args.src}

    def cli(src: str, *words: str) -> float:
        command = [sys.executable, "-m", "worksnap", "--root", args.root, "--store", args.store]
        start = time.perf_counter()
        done = subprocess.run(
            [*command, *words], env={**DAEMON_ENV, "PYTHONPATH": src}, capture_output=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(done.stderr.decode())
        return time.perf_counter() - start

    for _ in range(args.blocks):
        for src in args.src:
            for _ in range(6):
                cli(src, "snapshot")
                time.sleep(0.3)
            times[src] += [cli(src, "--json", "snapshot") for _ in range(args.rounds)]
            cli(src, "daemon", "stop")
    for src, found in times.items():
        print(f"{src}: --json snapshot median {statistics.median(found) * 1000:.1f} ms "
              f"over {len(found)}")  # fmt: skip
    first, *rest = (statistics.median(times[src]) for src in args.src)
    for src, median in zip(args.src[1:], rest, strict=True):
        print(f"{src}: {median / first:.2f}x the first")


if __name__ == "__main__":
    main()
