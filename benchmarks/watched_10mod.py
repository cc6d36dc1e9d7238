"""A watched in-process workspace against a shadow git repository: warm, 10 files modified.

Each round modifies 10 random captured files, then times `Workspace(watch=True).snapshot()`;
modifies 10 more, then times `git add -A && git write-tree` on a shadow repository of the
same tree (so each side sees 20 files changed since its last run). Medians of the rounds.

Example::

    PYTHONPATH=src python benchmarks/watched_10mod.py /tmp/trees-bench/syn200k/root \
        --git-dir /tmp/g200 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import time
from pathlib import Path

from worksnap.workspace import Workspace

SKIP = {"node_modules", "__pycache__", ".git", ".worksnap", ".venv"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--git-dir", type=Path, required=True, help="the shadow repository")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = str(args.root)
    env = dict(os.environ, GIT_DIR=str(args.git_dir), GIT_WORK_TREE=root)

    def git() -> float:
        start = time.perf_counter()
        subprocess.run("git add -A && git write-tree", shell=True, env=env, check=True,
                       capture_output=True)  # fmt: skip
        return time.perf_counter() - start

    if not args.git_dir.is_dir():
        subprocess.run(["git", "init", "-q", "--bare", str(args.git_dir)], check=True)
        subprocess.run(["git", "--git-dir", str(args.git_dir), "config", "core.bare", "false"],
                       check=True)  # fmt: skip
    git()
    git()
    files: list[str] = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP]
        files += [os.path.join(d, f) for f in names if not f.startswith(".")]
    rng = random.Random(1)

    def modify(i: int) -> None:
        for path in rng.sample(files, 10):
            with open(path, "a") as f:
                f.write(f"# {i}\n")
        time.sleep(0.2)

    with Workspace(root, watch=True) as ws:
        start = time.perf_counter()
        ws.snapshot()
        print(f"cold snapshot {time.perf_counter() - start:.1f} s", flush=True)
        ws.snapshot()
        mine, theirs = [], []
        for i in range(args.rounds):
            modify(i)
            start = time.perf_counter()
            ws.snapshot()
            mine.append(time.perf_counter() - start)
            modify(i)
            theirs.append(git())
            print(f"worksnap {mine[-1]:.3f} s  git {theirs[-1]:.3f} s", flush=True)
    a, b = statistics.median(mine), statistics.median(theirs)
    print(f"medians: worksnap {a:.3f} s, git {b:.3f} s, ratio {a / b:.2f}x")


if __name__ == "__main__":
    main()
