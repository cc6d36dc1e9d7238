"""Compare two versions of worksnap on one tree, interleaved: did a change cost time?

run.py measures worksnap against git; this measures worksnap against itself, e.g.
main before a refactor (A) and the branch after it (B). Each version is a source
directory put first on PYTHONPATH, with a store of its own; every command is a
fresh `python -m worksnap` process without the daemon, as a user runs it. Rounds
alternate the order (A B, B A, ...) after one untimed warm-up of each, and the
report gives medians and the ratio B/A.

Scenarios: warm snapshot of an unchanged tree; warm snapshot after 10 files were
modified (the same 10 files, new content each time); plan against the first
snapshot with those 10 files modified; restore of the 10 modified / 10 added /
100 deleted situation (run.py's Edits).

Example::

    git archive main src | tar -x -C /tmp/before
    python benchmarks/build_workspace.py --synthetic 50000 --out /tmp/ws-bench
    python benchmarks/versions.py --root /tmp/ws-bench/root \\
        --a /tmp/before/src --b src --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import Edits  # the same edits run.py makes


class Version:
    """One worksnap source tree and the store it uses."""

    def __init__(self, name: str, src: Path, root: Path, store: Path) -> None:
        self.name = name
        self.root = root
        self.store = store
        self.env = {**os.environ, "PYTHONPATH": str(src.resolve()), "WORKSNAP_NO_DAEMON": "1"}
        self.env.pop("WORKSNAP_STORE", None)
        # Bytecode is cached, as it is for an installed package: otherwise every run
        # compiles every module, and the version with more source lines pays for that.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    def run(self, *args: str) -> tuple[float, str]:
        """Runs one command; returns (seconds, stdout)."""
        cmd = [sys.executable, "-m", "worksnap", "--root", str(self.root)]
        cmd += ["--store", str(self.store), *args]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{self.name}: {cmd} failed: {done.stderr[-2000:]}")
        return elapsed, done.stdout


def interleaved(
    versions: list[Version], rounds: int, timed: Callable[[Version], float]
) -> dict[str, list[float]]:
    """Times `timed` for each version, alternating the order, after one untimed warm-up."""
    for version in versions:
        timed(version)
    times: dict[str, list[float]] = {v.name: [] for v in versions}
    for n in range(rounds):
        for version in versions if n % 2 == 0 else versions[::-1]:
            os.sync()  # one run's writeback must not land in the next
            times[version.name].append(timed(version))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="the tree (outside git)")
    parser.add_argument("--a", type=Path, required=True, help="source dir of version A")
    parser.add_argument("--b", type=Path, required=True, help="source dir of version B")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--state", type=Path, help="stores go here (default: ROOT/../versions)")
    args = parser.parse_args()
    state = args.state or args.root.parent / "versions"
    shutil.rmtree(state, ignore_errors=True)
    versions = [
        Version("A", args.a, args.root, state / "store-a"),
        Version("B", args.b, args.root, state / "store-b"),
    ]
    edits = Edits(args.root)
    refs = {v.name: v.run("snapshot")[1].strip() for v in versions}  # cold, untimed
    time.sleep(0.3)  # past the racy margin: the stat caches may be trusted from here
    for version in versions:
        version.run("snapshot")

    def snapshot(version: Version) -> float:
        return version.run("snapshot")[0]

    def modified_snapshot(version: Version) -> float:
        edits.modify()
        return version.run("snapshot")[0]

    def plan(version: Version) -> float:
        elapsed, out = version.run("--json", "plan", refs[version.name])
        if len(json.loads(out)["changes"]) != len(edits.modified):
            raise RuntimeError(f"{version.name}: the plan does not hold the 10 modified files")
        return elapsed

    def restore(version: Version) -> float:
        edits.mad()
        elapsed, _ = version.run("restore", refs[version.name], "--yes")
        edits.check_clean(f"{version.name} restore")
        return elapsed

    results: dict[str, dict[str, object]] = {}
    for name, timed in [
        ("warm snapshot, no change", snapshot),
        ("warm snapshot, 10 modified", modified_snapshot),
        ("plan, 10 modified", plan),
        ("restore 10M/10A/100D", restore),
    ]:
        if name == "plan, 10 modified":
            edits.modify()
        times = interleaved(versions, args.rounds, timed)
        a, b = statistics.median(times["A"]), statistics.median(times["B"])
        results[name] = {"A": a, "B": b, "B/A": b / a, "runs": times}
        print(f"{name:<28} A {a * 1000:7.1f} ms  B {b * 1000:7.1f} ms  B/A {b / a:5.3f}")
    edits.reset()
    (state / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
