"""Where worksnap's time goes, stage by stage, on one tree.

Wraps worksnap's stage functions with timers (inclusive wall time, so nested stages
overlap their parents) and runs one operation:

* ``cold``: snapshot into an empty store;
* ``warm-fresh``: a snapshot on a new Workspace object (what one CLI process does
  after start-up; start-up itself is measured in a subprocess);
* ``warm-inproc``: the second of two snapshots on one Workspace object;
* ``warm-10mod``: the same, with 10 files rewritten in between (``--watch`` for both:
  the object is opened with ``watch=True``);
* ``plan``: plan REF on a long-lived object; ``restore``: restore REF with the
  10 M / 10 A / 100 D situation rebuilt first.

Examples::

    python benchmarks/profile_stages.py --root /tmp/worksnap-bench/ref/root --mode warm-fresh
    python benchmarks/profile_stages.py --mode cold --cprofile /tmp/cold.prof
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import worksnap.apply
import worksnap.caches
import worksnap.capture
import worksnap.catalog
import worksnap.diskstore
import worksnap.hash
import worksnap.ignore
import worksnap.scan
import worksnap.transaction
import worksnap.treebuild
import worksnap.watch
import worksnap.workspace

TIMES: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)

Capture = worksnap.capture.Capture
Store = worksnap.diskstore.DiskStore
Workspace = worksnap.workspace.Workspace

# (class or module, attribute, label): methods and the module functions their callers
# look up at call time.
STAGES: list[tuple[Any, str, str]] = [
    (Workspace, "snapshot", "snapshot (total)"),
    (Capture, "capture", "  capture"),
    (worksnap.ignore.Rules, "ignored", "      Rules.ignored (ignore matching)"),
    (worksnap.ignore.Rules, "child", "      Rules.child (.gitignore compile)"),
    (Capture, "rules", "    base_rules (git config, info/exclude; first call)"),
    (worksnap.caches, "load_stat_table", "    load_stat_table (zstd + msgpack decode)"),
    (worksnap.caches, "load_listings", "    load_listings (per-directory cache)"),
    (worksnap.caches, "save_listings", "    save_listings"),
    (worksnap.watch.Watcher, "take", "    Watcher.take (inotify events)"),
    (Store, "_load_index", "    store._load_index (every call)"),
    (Store, "has", "    store.has (incl. index load)"),
    (Capture, "hash_and_store", "    read + hash + store (misses)"),
    (Store, "add", "      store.add (pack append)"),
    (worksnap.treebuild.CaptureTrees, "build", "    CaptureTrees.build (encode, digest, store)"),
    (worksnap.caches, "load_tree_table", "      load_tree_table (the tree cache)"),
    (worksnap.caches.Caches, "save", "    Caches.save (stat table, listings, trees)"),
    (worksnap.caches, "save_stat_table", "    save_stat_table (encode + zstd + write)"),
    (Store, "save_manifest", "  save_manifest (flush + encode + zstd + 2 fsynced writes)"),
    (Store, "flush", "    store.flush (pack fsync + idx)"),
    (Workspace, "load", "load REF (resolve + decode + checks)"),
    (Store, "load_manifest", "  load_manifest (decode + canonical re-encode)"),
    (worksnap.catalog, "check_manifest", "  check_manifest (path checks)"),
    (Workspace, "plan_restore", "plan_restore (capture + plan)"),
    (worksnap.transaction.Restorer, "_plan", "  _plan (read target .gitignores + diff)"),
    (worksnap.transaction, "plan_restore", "    plan.plan_restore (the diff)"),
    (Workspace, "apply", "apply (verify objects + pre-restore + write)"),
    (worksnap.transaction, "check_unchanged", "  check_unchanged"),
    (Store, "read", "  store.read (pread + verify)"),
    (Store, "summaries", "store.summaries (list/resolve)"),
    (worksnap.catalog, "count_changes", "count_changes (vs the previous snapshot)"),
]

# Functions a workspace is handed (workspace.Seams): timed by handing it timed ones.
SEAM_STAGES: list[tuple[str, Callable[..., Any], str]] = [
    ("scan_tree", worksnap.scan.scan_tree, "    scan_tree (scandir + sort + ignore + lstat)"),
    ("read_file", worksnap.hash.read_file, "      hash.read_file (read + BLAKE3)"),
    ("apply_plan", worksnap.apply.apply_plan, "  apply_plan (the writes, fsync each)"),
]


def _timed(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[label] += time.perf_counter() - start
            CALLS[label] += 1

    return timed


def _wrap(owner: Any, attr: str, label: str) -> None:
    fn: Callable[..., Any] | None = getattr(owner, attr, None)
    if fn is None:
        raise SystemExit(f"no stage {owner.__name__}.{attr}: update STAGES")
    setattr(owner, attr, _timed(fn, label))


def startup() -> dict[str, float]:
    """Median wall time of bare interpreter start, and of start + worksnap's imports."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}

    def median(cmd: list[str]) -> float:
        ts = []
        for _ in range(7):
            start = time.perf_counter()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            ts.append(time.perf_counter() - start)
        return sorted(ts)[3]

    py = sys.executable
    return {
        "python -c pass": median([py, "-c", "pass"]),
        "python -S -c pass": median([py, "-S", "-c", "pass"]),
        "import worksnap.cli": median([py, "-c", "import worksnap.cli"]),
        "import worksnap.cli + workspace": median(
            [py, "-c", "import worksnap.cli, worksnap.workspace"]
        ),
        "worksnap --help": median([py, "-m", "worksnap", "--help"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/worksnap-bench/ref/root"))
    parser.add_argument("--store", type=Path, help="default: ROOT/../state/profile-store")
    parser.add_argument(
        "--mode",
        choices=["cold", "warm-fresh", "warm-inproc", "warm-10mod", "plan", "restore", "startup"],
        default="warm-fresh",
    )
    parser.add_argument("--watch", action="store_true", help="Workspace(..., watch=True)")
    parser.add_argument("--cprofile", type=Path, help="also write a cProfile dump here")
    args = parser.parse_args()
    if args.mode == "startup":
        print(json.dumps(startup(), indent=1))
        return 0
    store = args.store or args.root.parent / "state" / "profile-store"
    seams = worksnap.workspace.Seams(**{name: _timed(fn, label) for name, fn, label in SEAM_STAGES})
    if args.mode == "cold":
        shutil.rmtree(store, ignore_errors=True)
    elif not (store / "snapshots").is_dir():
        Workspace(args.root, store=store).snapshot()
        time.sleep(0.2)
    ref = None
    edits = None
    ws = Workspace(args.root, store=store, watch=args.watch, seams=seams)
    if args.mode in ("warm-inproc", "warm-10mod", "plan", "restore"):
        ref = ws.snapshot().id  # loads the caches; the timed call is the next one
        time.sleep(0.2)
    if args.mode in ("restore", "warm-10mod"):
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from run import Edits

        edits = Edits(args.root)
        if args.mode == "restore":
            edits.mad()
        else:
            edits.modify()
    for owner, attr, label in STAGES:
        _wrap(owner, attr, label)
    TIMES.clear()  # the seams were timed during the set-up too
    CALLS.clear()
    prof = cProfile.Profile() if args.cprofile else None
    os.sync()
    start = time.perf_counter()
    if prof is not None:
        prof.enable()
    if args.mode in ("cold", "warm-fresh", "warm-inproc", "warm-10mod"):
        ws.snapshot()
    elif args.mode == "plan":
        assert ref is not None
        ws.plan_restore(ws.load(ref))
    else:
        assert ref is not None
        result = ws.restore(ref)
        assert result.ok, result
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.cprofile)
    total = time.perf_counter() - start
    if edits is not None and args.mode == "restore":
        edits.check_clean("restore")
    elif edits is not None:
        edits.reset()
    print(f"{args.mode} on {args.root}: {total:.3f} s in the operation")
    for label in [label for *_, label in STAGES + SEAM_STAGES]:
        if CALLS[label]:
            print(f"  {label:<58} {TIMES[label]:7.3f} s  {CALLS[label]:>7} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
