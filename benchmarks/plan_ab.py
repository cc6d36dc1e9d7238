"""A/B: the daemon's `plan REF` against a no-change `snapshot`, per source tree of worksnap.

For each `--src` (a checkout's `src`, alternated `--repeat` times) the daemon is started by
the command line as a user's would be, the reference situation is made (10 modified,
10 added, 100 deleted since REF), and `plan REF` and `snapshot` are run alternately:
medians of `--rounds`, whole processes. The tree is put back afterwards.

    python benchmarks/plan_ab.py --root /tmp/watcher-bench/ref/root \
        --store /tmp/watcher-bench/ref/state/store \
        --git-dir /tmp/watcher-bench/ref/state/shadow.git --src OLD/src --src src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--git-dir", required=True, help="a shadow repository of the tree (run.py's)")
    ap.add_argument("--src", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for _ in range(args.repeat):
        for src in args.src:
            plan, snap = measure(args.root, args.store, args.git_dir, src, args.rounds)
            print(f"{src}: plan {plan * 1000:.1f} ms, snapshot {snap * 1000:.1f} ms, "
                  f"{plan / snap:.2f}x", flush=True)  # fmt: skip


def measure(root: str, store: str, git_dir: str, src: str, rounds: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src), "NO_COLOR": "1"}
    for name in ("WORKSNAP_NO_DAEMON", "PYTHONDONTWRITEBYTECODE", "WORKSNAP_STORE"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "worksnap", "--root", root, "--store", store]

    def run(*argv: str, check: bool = True) -> tuple[float, str]:
        start = time.perf_counter()
        done = subprocess.run([*cli, *argv], env=env, capture_output=True, text=True, check=check)
        return time.perf_counter() - start, done.stdout

    subprocess.run([*cli, "daemon", "stop"], env=env, capture_output=True, check=False)
    ref = json.loads(run("--json", "snapshot")[1])["id"]
    while not json.loads(run("--json", "daemon", "status", check=False)[1]).get("running"):
        time.sleep(0.3)
    # Files git would track: the same ignore rules as worksnap's.
    listed = subprocess.run(
        ["git", f"--git-dir={git_dir}", f"--work-tree={root}", "ls-files", "*.py"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    files = sorted(p for p in listed if not os.path.islink(os.path.join(root, p)))
    chosen = [Path(root, p) for p in random.Random(5).sample(files, 120)]
    orig = {f: f.read_bytes() for f in chosen}
    added = [Path(f"{chosen[10]}.added{i}") for i in range(10)]
    try:
        for f in chosen[:10]:
            f.write_bytes(orig[f] + b"\nedit\n")
        for i, f in enumerate(added):
            f.write_text(f"added {i}\n")
        for f in chosen[20:]:
            f.unlink()
        time.sleep(0.3)
        run("snapshot")
        plans, snaps = [], []
        for _ in range(rounds):
            took, out = run("--json", "plan", ref)
            if len(json.loads(out)["changes"]) != 120:
                raise RuntimeError(out[:300])
            plans.append(took)
            snaps.append(run("snapshot")[0])
        return statistics.median(plans), statistics.median(snaps)
    finally:
        for f, data in orig.items():
            f.write_bytes(data)
        for f in added:
            f.unlink(missing_ok=True)
        subprocess.run([*cli, "daemon", "stop"], env=env, capture_output=True, check=False)


if __name__ == "__main__":
    main()
