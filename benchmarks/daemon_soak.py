"""Soak: the daemon's reading commands side by side while snapshots and gc run.

Makes a workspace of `--files` files, starts its daemon, then for `--seconds` runs
`--readers` client loops (`show --json latest`, `show --json latest~2`, `list`, `cat`,
`verify`, `du`, at random) beside one that rewrites 5 files and snapshots, with a `gc`
every seventh round. Every command is a whole client process, as a user's. Prints the
daemon's request count and each failed command; exits 1 if any failed for a reason other
than `latest~2` asked before three snapshots existed.

    PYTHONPATH=src python benchmarks/daemon_soak.py --dir /tmp/soak --seconds 300
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", required=True, type=Path, help="made afresh (removed first)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--files", type=int, default=600)
    args = ap.parse_args()
    root = args.dir / "ws"
    shutil.rmtree(args.dir, ignore_errors=True)
    rng = random.Random(1)
    names = [f"d{n % 20}/f{n // 20}.txt" for n in range(args.files)]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name} " * rng.randint(1, 200))
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    env["PYTHONPATH"] = SRC

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "worksnap", "--root", str(root), *words]
        return subprocess.run(argv, check=False, capture_output=True, text=True, env=env)

    def cli(*words: str) -> tuple[int, str]:
        done = run(*words)
        return done.returncode, (done.stderr or done.stdout).strip()[:300]

    print(cli("daemon", "start")[1].splitlines()[0], flush=True)
    cli("snapshot", "-m", "first")
    failed: list[tuple[str, str]] = []
    stop = time.monotonic() + args.seconds

    def write() -> None:
        for step in range(1, 1 << 30):
            if time.monotonic() > stop:
                return
            for name in rng.sample(names, 5):
                (root / name).write_text(f"step {step} " * rng.randint(1, 300))
            for words in [("snapshot", "-m", f"s{step}")] + [("gc",)] * (step % 7 == 0):
                code, said = cli(*words)
                if code:
                    failed.append((" ".join(words), said))

    reads = [("--json", "show", "latest"), ("--json", "show", "latest~2"), ("list",),
             ("cat", "latest", names[3]), ("verify",), ("du",)]  # fmt: skip

    def read(seed: int) -> None:
        pick = random.Random(seed)
        while time.monotonic() < stop:
            words = pick.choice(reads)
            code, said = cli(*words)
            if code:
                failed.append((" ".join(words), said))

    threads = [threading.Thread(target=write)]
    threads += [threading.Thread(target=read, args=(n,)) for n in range(args.readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    status = json.loads(run("--json", "daemon", "status").stdout)
    cli("daemon", "stop")
    early = [f for f in failed if "latest~2" in f[0] and "no snapshot matches" in f[1]]
    print(f"daemon running at the end: {status['running']}, requests: {status.get('requests')}")
    print(f"{len(failed)} commands failed ({len(early)} asked for latest~2 too early)")
    for words, said in failed[:20]:
        print(f"  {words}: {said}")
    sys.exit(1 if len(failed) > len(early) or not status["running"] else 0)


if __name__ == "__main__":
    main()
