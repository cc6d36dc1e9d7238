"""A session through the command line: store growth per step, beside a shadow git repository.

Each step appends a line to 5 random `.py` files, adds one new file, then runs
`worksnap snapshot` (a whole process) and `git add -A` + `git commit` on a shadow
repository of the same tree. Reports the growth of each per step; git's after `git gc`
(the store's `cache/` is left out: it is not snapshots). `--mode cli` sets
`WORKSNAP_NO_DAEMON=1` (every step a new process, no memory of the last); `--mode daemon`
lets the first command start the daemon, as the default command line does on Linux.

Example::

    python benchmarks/build_workspace.py --synthetic 10000 --out /tmp/wsb/syn10k
    python benchmarks/cli_session.py /tmp/wsb/syn10k/root --steps 40 --mode cli
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _size(top: str, *, skip: str = "\0") -> int:
    return sum(
        os.lstat(os.path.join(d, f)).st_size
        for d, _, names in os.walk(top)
        if skip not in d
        for f in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", help="the tree (its .worksnap store is replaced)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--mode", choices=("cli", "daemon"), default="cli")
    parser.add_argument("--seed", type=int, default=5)
    options = parser.parse_args()
    root = os.path.abspath(options.root)
    env = {**os.environ, "PYTHONPATH": SRC}
    if options.mode == "cli":
        env["WORKSNAP_NO_DAEMON"] = "1"
    store = os.path.join(root, ".worksnap")
    shutil.rmtree(store, ignore_errors=True)
    gitdir = tempfile.mkdtemp(prefix="cli-session-git-")
    git = ["git", f"--git-dir={gitdir}", f"--work-tree={root}"]
    commit = [*git, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm"]
    ws = [sys.executable, "-m", "worksnap", "--root", root]
    subprocess.run(["git", "init", "-q", "--bare", gitdir], check=True)
    subprocess.run([*git, "config", "gc.auto", "0"], check=True)

    def step(label: str) -> None:
        subprocess.run([*ws, "snapshot"], env=env, check=True, capture_output=True)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*commit, label], check=True)

    step("start")
    subprocess.run([*git, "gc", "-q"], check=True)
    store0, git0 = _size(store, skip="/cache"), _size(gitdir)
    rng = random.Random(options.seed)
    files = [
        os.path.join(d, f)
        for d, _, names in os.walk(root)
        if ".worksnap" not in d
        for f in names
        if f.endswith(".py")
    ]
    for n in range(options.steps):
        for path in rng.sample(files, 5):
            with open(path, "a") as out:
                out.write(f"# step {n} {rng.random()}\n")
        new = os.path.join(os.path.dirname(rng.choice(files)), f"new_{n}.py")
        Path(new).write_text(f"x = {n}\n" * 20)
        files.append(new)
        step(str(n))
    subprocess.run([*git, "gc", "-q"], check=True)
    grown, git_grown = _size(store, skip="/cache") - store0, _size(gitdir) - git0
    if options.mode == "daemon":
        subprocess.run([*ws, "daemon", "stop"], env=env, check=False, capture_output=True)
    shutil.rmtree(gitdir)
    steps = options.steps
    print(
        f"{options.mode}: worksnap {grown / steps:.0f} B a step, git after gc "
        f"{git_grown / steps:.0f} B a step: {grown / git_grown:.2f}x"
    )


if __name__ == "__main__":
    main()
