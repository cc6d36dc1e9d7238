"""Reading a git index: worksnap's own reader against dulwich, on a 50,000-entry index.

Builds the index with real git (`update-index --index-info`, no files needed), writes it
as versions 2 and 4, then times, each in fresh processes so nothing is cached in them:

* import: `import worksnap.gitindex` and `import dulwich.index` (over bare Python);
* read: the set of paths, as `tracked_paths` returns it, median of several reads.

dulwich is optional: install it in a scratch environment (`pip install dulwich`) and pass
that environment's Python with `--dulwich-python`.

Example::

    python benchmarks/gitindex_read.py --entries 50000 --dulwich-python /tmp/dul/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")

OWN = """
import sys, time
from pathlib import Path
from worksnap.gitindex import read_index
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    paths = read_index(Path(sys.argv[1])).paths
    times.append(time.perf_counter() - start)
print(len(paths), *times)
"""

DULWICH = """
import sys, time
from dulwich.index import Index
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    paths = frozenset(Index(sys.argv[1]).paths())
    times.append(time.perf_counter() - start)
print(len(paths), *times)
"""

IMPORT = "import time; s = time.perf_counter(); import {module}; print(time.perf_counter() - s)"


def build(where: Path, entries: int) -> dict[int, Path]:
    """A repository whose index has `entries` paths shaped like a source tree's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["HOME"] = str(where)

    def git(*args: str, stdin: bytes | None = None) -> bytes:
        return subprocess.run(
            ["git", *args], cwd=where, env=env, input=stdin, capture_output=True, check=True
        ).stdout

    git("init", "-q", ".")
    blob = git("hash-object", "-w", "--stdin", stdin=b"").strip()
    records = b"".join(
        b"100644 %s\tsrc/pkg%02d/module%d/sub%d/file_%05d_component.py\0"
        % (blob, i % 97, i % 13, i % 7, i)
        for i in range(entries)
    )
    git("update-index", "-z", "--add", "--index-info", stdin=records)
    indexes = {}
    for version in (2, 4):
        git("update-index", "--index-version", str(version))
        indexes[version] = where / f"index.v{version}"
        indexes[version].write_bytes((where / ".git" / "index").read_bytes())
    return indexes


def run(python: str, code: str, *args: str) -> list[float]:
    # Imports as installed code runs them: from cached bytecode (the first run writes it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = SRC
    out = subprocess.run(
        [python, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return [float(x) for x in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--reads", type=int, default=9, help="reads per process")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--dulwich-python", help="a Python that can import dulwich")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="worksnap-gitindex-") as tmp:
        indexes = build(Path(tmp), args.entries)
        sizes = ", ".join(f"v{v} {p.stat().st_size / 1e6:.1f} MB" for v, p in indexes.items())
        print(f"{args.entries} entries ({sizes}); medians in ms\n")
        readers = [("worksnap", sys.executable, OWN, "worksnap.gitindex")]
        if args.dulwich_python:
            readers.append(("dulwich", args.dulwich_python, DULWICH, "dulwich.index"))
        print(f"{'reader':<10} {'import':>8} {'read v2':>9} {'read v4':>9}")
        for name, python, code, module in readers:
            run(python, IMPORT.format(module=module))
            imports = [run(python, IMPORT.format(module=module))[0] for _ in range(args.processes)]
            reads = {}
            for version, path in indexes.items():
                samples: list[float] = []
                for _ in range(args.processes):
                    count, *times = run(python, code, str(path), str(args.reads))
                    assert int(count) == args.entries, (name, count)
                    samples += times
                reads[version] = statistics.median(samples)
            print(
                f"{name:<10} {1000 * statistics.median(imports):>8.1f} "
                f"{1000 * reads[2]:>9.1f} {1000 * reads[4]:>9.1f}"
            )


if __name__ == "__main__":
    main()
