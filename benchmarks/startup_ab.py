"""What a command costs to start, under two checkouts of worksnap, A/B interleaved.

Every command without the daemon, and every Claude Code hook, starts a Python process
and imports worksnap: this times that, and three plain commands, under the source
trees of two checkouts (`PYTHONPATH=CHECKOUT/src`), each command run under both in turn,
medians of the rounds. Each checkout has its own store of the same tree.

Example::

    git worktree add /tmp/base e40cafd
    python benchmarks/startup_ab.py /tmp/base . /tmp/worksnap-bench/ref/root --rounds 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the checkout to compare with (A)")
    parser.add_argument("head", type=Path, help="the checkout to measure (B)")
    parser.add_argument("root", type=Path, help="the tree to snapshot (the reference tree)")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"}
    ws = [sys.executable, "-m", "worksnap", "--root", str(args.root)]
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        stores = {side: str(Path(scratch, side)) for side in ("base", "head")}
        commands: dict[str, Callable[[str], list[str]]] = {
            "import cli+workspace": lambda side: [
                sys.executable, "-c", "import worksnap.cli, worksnap.workspace"],
            "--version": lambda side: [*ws, "--version"],
            "list": lambda side: [*ws, "--store", stores[side], "list"],
            "snapshot (warm, plain)": lambda side: [*ws, "--store", stores[side], "snapshot"],
        }  # fmt: skip
        sources = {
            side: str(path.resolve() / "src")
            for side, path in (("base", args.base), ("head", args.head))
        }

        def timed(command: list[str], side: str) -> float:
            start = time.perf_counter()
            subprocess.run(command, env=env | {"PYTHONPATH": sources[side]},
                           capture_output=True, check=True)  # fmt: skip
            return time.perf_counter() - start

        for side in sources:  # a first snapshot, and bytecode written, for both
            timed(commands["snapshot (warm, plain)"](side), side)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for name, command in commands.items():
                for side in sources:
                    times.setdefault((name, side), []).append(timed(command(side), side))
    print(f"medians of {args.rounds}, A/B interleaved:")
    for name in commands:
        a, b = (statistics.median(times[(name, side)]) for side in ("base", "head"))
        print(f"  {name:24} base {a * 1e3:7.1f} ms   head {b * 1e3:7.1f} ms   {b / a:.2f}x")


if __name__ == "__main__":
    main()
