"""The first diff of a fresh `Workspace` against a second call: what reading the index costs.

Each round is a new process (imports done before the clock starts), which opens the
workspace and times `diff(OLD, NEW)` twice. Prints each round and the medians.

    PYTHONPATH=src python benchmarks/fresh_diff.py --root /tmp/syn200k/root \\
        --store /tmp/s200 --old ID1 --new ID2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_ROUND = """
import json, sys, time
from worksnap.workspace import Workspace
root, store, old, new = sys.argv[1:5]
ws = Workspace(root, store=store)
times = []
for _ in range(2):
    start = time.perf_counter()
    changes, _ = ws.diff(old, new)
    times.append(time.perf_counter() - start)
print(json.dumps({"first": times[0], "second": times[1], "changes": len(changes)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--old", required=True, help="a snapshot id")
    parser.add_argument("--new", required=True, help="a snapshot id")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        out = subprocess.run(
            [sys.executable, "-c", _ROUND, args.root, args.store, args.old, args.new],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rounds.append(json.loads(out.stdout))
        first, second = rounds[-1]["first"], rounds[-1]["second"]
        print(f"first {1e3 * first:.1f} ms, second {1e3 * second:.1f} ms")
    first = statistics.median(r["first"] for r in rounds)
    second = statistics.median(r["second"] for r in rounds)
    print(f"median: first {1e3 * first:.1f} ms, second {1e3 * second:.1f} ms, "
          f"{rounds[0]['changes']} changes")  # fmt: skip


if __name__ == "__main__":
    main()
