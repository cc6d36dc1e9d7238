"""A long session's packs: plain commands before and after the small packs are merged.

Each snapshot that stores something writes a pack, and every new process reads every
pack's index. This builds a session of N snapshots of a small tree (one file changed per
step) while another process holds the store, so no merge runs (as before merging
existed), and a shadow git repository with a commit per step beside it; then times, in
one run, medians of the rounds: plain `worksnap snapshot` (still under the other
process's lock: no merge), `worksnap status` and `worksnap --json list`, then the same
after one snapshot merged the packs, a snapshot without the note of the session's newest
snapshot (`cache/last.json` removed: every record is read, as before stop 30), and git's
`add -A && write-tree`.

Example::

    python benchmarks/many_packs.py --steps 2000 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from worksnap import Workspace  # noqa: E402
from worksnap.lock import Locks  # noqa: E402
from worksnap.storedir import StoreDir  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"PYTHONPATH": str(REPO / "src"), "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"}
    with tempfile.TemporaryDirectory(prefix="packs-") as scratch:
        root, store, gitdir = (Path(scratch, n) for n in ("root", "store", "git"))
        root.mkdir()
        for i in range(args.files):
            (root / f"f{i}.txt").write_text(f"file {i}\n")
        subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True)
        genv = env | {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(root)}
        genv |= {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
        genv |= {"GIT_COMMITTER_EMAIL": "b@b"}
        ws_cmd = [sys.executable, "-m", "worksnap", "--root", str(root), "--store", str(store)]

        def timed(cmd: list[str] | str, e: dict[str, str]) -> float:
            start = time.perf_counter()
            subprocess.run(cmd, env=e, check=True, capture_output=True, shell=isinstance(cmd, str))
            return time.perf_counter() - start

        def git_step() -> float:
            return timed("git add -A && git commit -q -m step", genv)

        with Workspace(root, store=store) as ws:
            ws.snapshot()
            held = Locks(StoreDir(str(store))).shared("the benchmark: no merge while it builds")
            with held:
                for i in range(args.steps):
                    (root / f"f{i % args.files}.txt").write_text(f"version {i}\n")
                    ws.snapshot()
                    git_step()
        results: dict[str, list[float]] = {}

        def rounds(label: str, cmd: list[str] | str, e: dict[str, str]) -> None:
            results[label] = [timed(cmd, e) for _ in range(args.rounds)]

        packs = len(list((store / "packs").glob("*.idx")))
        with Locks(StoreDir(str(store))).shared("the benchmark: keeps the packs unmerged"):
            rounds(f"snapshot, {packs} packs", [*ws_cmd, "snapshot"], env)
        rounds(f"status, {packs} packs", [*ws_cmd, "status"], env)
        rounds(f"list, {packs} packs", [*ws_cmd, "--json", "list"], env)
        timed([*ws_cmd, "snapshot"], env)  # merges them
        merged = len(list((store / "packs").glob("*.idx")))
        rounds(f"snapshot, {merged} packs", [*ws_cmd, "snapshot"], env)
        note = store / "cache" / "last.json"
        unnoted = f"rm -f {note} && " + " ".join(map(shlex.quote, [*ws_cmd, "snapshot"]))
        rounds(f"snapshot, {merged} packs, no note", unnoted, env)
        rounds(f"status, {merged} packs", [*ws_cmd, "status"], env)
        rounds(f"list, {merged} packs", [*ws_cmd, "--json", "list"], env)
        rounds("git add -A && git write-tree", "git add -A && git write-tree", genv)
    print(f"{args.steps} snapshots of {args.files} files, medians of {args.rounds}:")
    for label, times in results.items():
        print(f"  {label:36} {statistics.median(times) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
