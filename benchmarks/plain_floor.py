"""The floor under a plain (no daemon) warm snapshot in Python, beside git's whole snapshot.

Issue 13 asks a warm plain-CLI snapshot to cost at most 1.5x git's. Without a process
that watched the tree, a snapshot must look at every captured file (a file's content
can change without its directory changing) and list every captured directory (to find
what was added). This measures, in one run, A/B interleaved, medians of the rounds:

* ``git``: ``git add -A && git write-tree`` on a shadow repository of the tree, warm;
* ``floor``: a new Python process that does only that minimum, with nothing of worksnap
  imported: ``os.scandir`` of each directory the last snapshot captured and ``os.lstat``
  of each file it captured (their names read from a file prepared before the rounds);
* ``plain``: ``worksnap snapshot`` with ``WORKSNAP_NO_DAEMON=1``, warm.

When the floor alone passes 1.5x git, no pure-Python plain snapshot can meet the target:
the answer is the daemon (the default), or the per-file work moved out of Python.

Example::

    python benchmarks/plain_floor.py /tmp/watcher-bench/ref/root --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

FLOOR = """
import os, sys
root = sys.argv[1]
with open(sys.argv[2]) as f:
    listing = f.read().split("\\0")
rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
for group in listing:
    d, *files = group.split("\\n")
    fd = os.open(d or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=rfd)
    with os.scandir(fd) as entries:
        for _ in entries:
            pass
    for name in files:
        os.lstat(name, dir_fd=fd)
    os.close(fd)
"""


def timed(cmd: list[str] | str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, shell=isinstance(cmd, str))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the tree (the reference tree's root)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    root = str(args.root)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": str(REPO / "src"), "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory(prefix="floor-") as scratch:
        store, gitdir, names = Path(scratch, "store"), Path(scratch, "git"), Path(scratch, "names")
        ws = [sys.executable, "-m", "worksnap", "--root", root, "--store", str(store)]
        subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True)
        genv = env | {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": root}
        git = "git add -A && git write-tree"

        def answer(*args: str) -> dict[str, Any]:
            done = subprocess.run([*ws, "--json", *args], env=env, check=True,
                                  capture_output=True, text=True)  # fmt: skip
            return dict(json.loads(done.stdout))

        manifest = answer("show", answer("snapshot")["id"])
        by_dir: dict[str, list[str]] = {d: [] for d in ["", *manifest["dirs"]]}
        for entry in manifest["entries"]:
            if entry["type"] == "file":
                head, _, name = entry["path"].rpartition("/")
                by_dir[head].append(name)
        names.write_text("\0".join("\n".join([d, *files]) for d, files in by_dir.items()))
        floor = [sys.executable, "-c", FLOOR, root, str(names)]
        for cmd, e in (([*ws, "snapshot"], env), (git, genv), (floor, env)):
            timed(cmd, e)  # warm each up: caches, page cache, bytecode
        times: dict[str, list[float]] = {"git": [], "floor": [], "plain": []}
        for _ in range(args.rounds):
            times["git"].append(timed(git, genv))
            times["floor"].append(timed(floor, env))
            times["plain"].append(timed([*ws, "snapshot"], env))
        shutil.rmtree(store)
    med = {k: statistics.median(v) for k, v in times.items()}
    files = sum(len(f) for f in by_dir.values())
    print(f"{files} files in {len(by_dir)} directories, medians of {args.rounds}:")
    for key in ("git", "floor", "plain"):
        print(f"  {key:5} {med[key] * 1e3:7.1f} ms  {med[key] / med['git']:.2f}x git")


if __name__ == "__main__":
    main()
