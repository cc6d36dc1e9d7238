"""How long a Claude Code `UserPromptSubmit` hook takes, end to end, as Claude Code runs it.

A fresh `worksnap hook claude-code` process per prompt, the event JSON on its stdin, in
the project directory; the clock runs from before the process starts until it has
exited (interpreter start, imports, root discovery, the snapshot, the exit). Before each
timed prompt one file is edited (what an agent's turn does), so every hook stores a
real snapshot. Two modes: with `worksnap daemon start` running (the hook is forwarded
to it) and without (`WORKSNAP_NO_DAEMON=1`, the hook snapshots in its own process).

    python benchmarks/hook_latency.py --root /tmp/agents-bench/ref/root --rounds 7

Every run is checked: exit 0, nothing on stdout, and one more snapshot in the session.
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
from pathlib import Path

SESSION = "bench-7f3a2c1e-0000-4000-8000-000000000000"


def worksnap_command() -> list[str]:
    found = shutil.which("worksnap")
    return [found] if found else [sys.executable, "-m", "worksnap"]


def event(root: Path, prompt: str) -> str:
    return json.dumps({
        "session_id": SESSION,
        "transcript_path": f"/tmp/{SESSION}.jsonl",
        "cwd": str(root),
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    })  # fmt: skip


def count(root: Path) -> int:
    out = subprocess.run(
        [*worksnap_command(), "--session", SESSION, "--json", "list"],
        cwd=root, capture_output=True, check=True, env={**os.environ, "WORKSNAP_NO_DAEMON": "1"},
    ).stdout  # fmt: skip
    return len(json.loads(out))


def one_hook(root: Path, env: dict[str, str], prompt: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [*worksnap_command(), "hook", "claude-code"],
        input=event(root, prompt).encode(), cwd=root, capture_output=True, env=env, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or done.stdout or done.stderr:
        raise SystemExit(f"hook failed: {done.returncode} {done.stdout!r} {done.stderr!r}")
    return elapsed


def measure(root: Path, *, daemon: bool, rounds: int, edited: Path) -> list[float]:
    env = dict(os.environ)
    env.pop("WORKSNAP_NO_DAEMON", None)
    if not daemon:
        env["WORKSNAP_NO_DAEMON"] = "1"
    one_hook(root, env, "warm-up")  # caches (and the daemon's watch) in place
    samples = []
    for i in range(rounds):
        edited.write_text(f"edit {i} {time.time()}\n")
        before = count(root)
        samples.append(one_hook(root, env, f"prompt {i}\nsecond line"))
        if count(root) != before + 1:
            raise SystemExit("the hook took no snapshot")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    root = args.root.resolve()
    files = sum(len(f) for _, _, f in os.walk(root))
    edited = root / "hook-bench-edited.txt"
    subprocess.run([*worksnap_command(), "snapshot", "--label", "base"], cwd=root, check=True,
                   capture_output=True, env={**os.environ, "WORKSNAP_NO_DAEMON": "1"})  # fmt: skip
    results = {}
    results["without daemon"] = measure(root, daemon=False, rounds=args.rounds, edited=edited)
    subprocess.run([*worksnap_command(), "daemon", "start"], cwd=root, check=True)
    try:
        time.sleep(1.0)
        results["with daemon"] = measure(root, daemon=True, rounds=args.rounds, edited=edited)
    finally:
        subprocess.run([*worksnap_command(), "daemon", "stop"], cwd=root, check=False)
        edited.unlink(missing_ok=True)
    print(f"tree: {root} ({files} files on disk), {args.rounds} timed hooks per mode, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    for mode, samples in results.items():
        shown = " ".join(f"{s:.3f}" for s in samples)
        print(f"{mode:>15}: median {statistics.median(samples):.3f} s  (runs: {shown})")


if __name__ == "__main__":
    main()
