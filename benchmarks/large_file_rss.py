"""Peak memory of snapshot, verify and restore of one large file (issue 11, item 4).

Each command runs as its own process; its peak resident set size comes from the
kernel (`wait4`'s rusage), its time from the wall clock. The file is sparse by
default (zeros cost no disk until stored; BLAKE3 and the copy still see every
byte), or random with --random.

    PYTHONPATH=src python benchmarks/large_file_rss.py --size 1G [--random] [--source DIR]

--source runs another worksnap (say, a checkout of main) for a before/after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    unit = UNITS.get(text[-1:].upper())
    return int(text[:-1]) * unit if unit else int(text)


def run(source: str, *args: str) -> tuple[float, int]:
    """Runs worksnap; returns (seconds, peak RSS in MiB)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "worksnap", *args],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": source, "WORKSNAP_NO_DAEMON": "1"},
    )
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"worksnap {' '.join(args)} failed")
    return elapsed, usage.ru_maxrss >> 10


def make_file(path: Path, size: int, *, random: bool) -> None:
    with open(path, "wb") as f:
        if not random:
            f.truncate(size)
            return
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)  # one random MiB over and over: as costly to hash as any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--random", action="store_true")
    parser.add_argument("--source", default=str(Path(__file__).resolve().parents[1] / "src"))
    args = parser.parse_args()
    size = parse_size(args.size)
    work = Path(tempfile.mkdtemp(prefix="worksnap-rss-"))
    try:
        root = work / "ws"
        root.mkdir()
        big = root / "big.bin"
        make_file(big, size, random=args.random)
        common = ("--root", str(root))
        rows = [
            ("snapshot", run(args.source, *common, "snapshot", "--max-file-bytes", str(2 * size)))
        ]
        rows.append(("verify", run(args.source, *common, "verify")))
        big.unlink()
        rows.append(("restore", run(args.source, *common, "restore", "latest", "--yes")))
        assert big.stat().st_size == size
        kind = "random" if args.random else "sparse"
        print(f"| command | seconds | peak RSS (MiB) |  ({size >> 20} MiB file, {kind})")
        print("|---|---|---|")
        for name, (seconds, peak) in rows:
            print(f"| {name} | {seconds:.2f} | {peak} |")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
