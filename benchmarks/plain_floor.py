"""The floor under a plain (no daemon) warm snapshot in Python, beside git's whole snapshot.

Issue 13 asks a warm plain-CLI snapshot to cost at most 1.5x git's. Without a process
that watched the tree, a snapshot must look at every captured file (a file's content
can change without its directory changing) and list every captured directory (to find
what was added). This measures, in one run, A/B interleaved, medians of the rounds:

* ``git``: ``git add -A && git write-tree`` on a shadow repository of the tree, warm;
* ``floor``: a new Python process that does only that minimum, with nothing of worksnap
  imported: ``os.scandir`` of each directory the last snapshot captured and ``os.lstat``
  of each file it captured (their names read from a file prepared before the rounds);
* ``least``: a new Python process that does the least a plain warm snapshot can do, with
  nothing of worksnap imported: it imports the four runtime libraries (a snapshot may
  hash, decode its caches and match an added name against the ignore rules), reads the
  stat records of the captured directories and files (msgpack, zstd-compressed, as
  worksnap keeps them; prepared before the rounds), ``lstat``s each directory and each
  file and compares it with its record (an unchanged directory's listing is trusted, as
  worksnap's listing cache does), and writes a record of a few hundred bytes with fsync.
  No object index, no tree, no manifest;
* ``least2``: the same on both cores, as git's preload-index uses them: a forked child
  takes every other directory;
* ``plain``: ``worksnap snapshot`` with ``WORKSNAP_NO_DAEMON=1``, warm.

When ``least`` alone passes 1.5x git, no plain snapshot in one Python process can meet the
target: the answer is the daemon (the default), the walk split across processes (what
``least2`` costs), or the per-file work moved out of Python.

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

LEAST = """
import os, sys
import blake3, msgspec, re2, zstandard
root, records, out = sys.argv[1:4]
with open(records, "rb") as f:
    dirs = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(f.read()))
rfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
changed = 0
half = os.environ.get("LEAST_FORK") == "1"
if half:  # both cores, as git's preload-index uses them: a child takes every other directory
    pid = os.fork()
    dirs = dirs[1 if pid == 0 else 0 :: 2]
for d, stamp, files in dirs:
    st = os.lstat(d or ".", dir_fd=rfd)
    changed += [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] != stamp
    fd = os.open(d or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=rfd)
    for name, *was in files:
        st = os.lstat(name, dir_fd=fd)
        changed += [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode] != was
    os.close(fd)
if half and pid == 0:
    os._exit(min(changed, 1))
if half:
    changed += os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
data = msgspec.json.encode({"changed": changed, "digest": blake3.blake3(b"").hexdigest()})
fd = os.open(out + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, data)
os.fsync(fd)
os.close(fd)
os.rename(out + ".tmp", out)
assert changed == 0, changed
"""


def records(root: str, by_dir: dict[str, list[str]]) -> bytes:
    """LEAST's input: each directory's stamp and its files' stat fields, as worksnap keeps them."""
    import msgspec
    import zstandard

    def fields(path: str) -> list[int]:
        st = os.lstat(os.path.join(root, path) if path else root)
        return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]

    dirs = [
        [d, fields(d)[:4], [[n, *fields(f"{d}/{n}" if d else n)] for n in files]]
        for d, files in by_dir.items()
    ]
    return bytes(zstandard.ZstdCompressor().compress(msgspec.msgpack.encode(dirs)))


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
        Path(scratch, "records").write_bytes(records(root, by_dir))
        least = [sys.executable, "-c", LEAST, root, str(Path(scratch, "records")),
                 str(Path(scratch, "record"))]  # fmt: skip
        runs = {"git": (git, genv), "floor": (floor, env), "least": (least, env),
                "least2": (least, env | {"LEAST_FORK": "1"}),
                "plain": ([*ws, "snapshot"], env)}  # fmt: skip
        for cmd, e in runs.values():
            timed(cmd, e)  # warm each up: caches, page cache, bytecode
        times: dict[str, list[float]] = {key: [] for key in runs}
        for _ in range(args.rounds):
            for key, (cmd, e) in runs.items():
                times[key].append(timed(cmd, e))
        shutil.rmtree(store)
    med = {k: statistics.median(v) for k, v in times.items()}
    files = sum(len(f) for f in by_dir.values())
    print(f"{files} files in {len(by_dir)} directories, medians of {args.rounds}:")
    for key in times:
        print(f"  {key:5} {med[key] * 1e3:7.1f} ms  {med[key] / med['git']:.2f}x git")


if __name__ == "__main__":
    main()
