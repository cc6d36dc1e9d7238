"""Format 2 (trees + records) against a shadow git repository, in one run, as ratios.

Measures what issue 13 asks, each worksnap figure beside git's from the same run:

* store growth of a snapshot of an unchanged tree, and of one with 5 files modified in
  5 directories (git: `add -A` + `commit`, the loose objects it adds);
* a 200-step session (5 modified + 1 added per step, then a snapshot): worksnap's store
  growth against the shadow repository's before and after `git gc`;
* warm plain-CLI snapshot (no daemon), unchanged and with 10 files modified, against
  `git add -A && git commit` (two processes, as a shadow-git checkpointer runs them);
* `diff` (and `count_changes`) between two snapshots that differ in 10 files, in-process
  (the 200k tree when built);
* `list` of 1,000 snapshots and `gc` of them (a 2,000-file tree, one edit per snapshot);
* peak RSS of a cold plain-CLI snapshot (47k and 200k files).

Medians of `--rounds` runs (A B, then B A, ...). Usage::

    python benchmarks/trees_vs_git.py --ref /tmp/trees-bench/ref \
        --big /tmp/trees-bench/syn200k/root --state /tmp/trees-bench/state --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from run import ENV, Bench, Edits, run_rss, run_timed, store_bytes  # noqa: E402
from worksnap import Workspace  # noqa: E402
from worksnap.config import Retention  # noqa: E402
from worksnap.paths import Digest  # noqa: E402
from worksnap.treewalk import count_changes  # noqa: E402


def apparent(path: Path) -> int:
    return store_bytes(path)[0]


def git_commit(b: Bench, message: str) -> list[list[str]]:
    return [
        b.git("add", "-A"),
        b.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty",
              "-m", message),
    ]  # fmt: skip


def five_in_five(root: Path, edits: Edits, rnd: random.Random, counter: int) -> list[Path]:
    """Modifies 5 files in 5 different directories (new content each time)."""
    by_dir: dict[str, str] = {}
    for f in edits.modified:  # 10 small files, a stable choice
        by_dir.setdefault(os.path.dirname(f), f)
    chosen = list(by_dir.values())[:5]
    for f in chosen:
        path = root / f
        path.write_bytes(path.read_bytes() + f"\nedit {counter} {rnd.random()}\n".encode())
    return [root / f for f in chosen]


def growth(b: Bench, rounds: int) -> dict[str, object]:
    """Bytes one snapshot adds: unchanged, and 5 modified files in 5 directories."""
    rnd = random.Random(5)
    edits = Edits(b.root, seed=7)
    b.fresh_git()
    shutil.rmtree(b.store, ignore_errors=True)
    run_timed([b.ws_cli("snapshot")])
    run_timed(git_commit(b, "base"))
    out: dict[str, object] = {}
    for name, edit in (("unchanged", None), ("5 files in 5 dirs", five_in_five)):
        ws_added, git_added, file_bytes = [], [], []
        for i in range(rounds):
            changed = edit(b.root, edits, rnd, i) if edit is not None else []
            file_bytes.append(sum(p.stat().st_size for p in changed))
            before = apparent(b.store)
            run_timed([b.ws_cli("snapshot")])
            ws_added.append(apparent(b.store) - before)
            before = apparent(b.gitdir)
            run_timed(git_commit(b, f"{name} {i}"))
            git_added.append(apparent(b.gitdir) - before)
        row = {
            "worksnap_bytes": statistics.median(ws_added),
            "git_bytes": statistics.median(git_added),
            "files_bytes": statistics.median(file_bytes),
            "worksnap_minus_files": statistics.median(
                w - f for w, f in zip(ws_added, file_bytes, strict=True)
            ),
        }
        print(f"  growth {name}: {row}", flush=True)
        out[name] = row
    edits.reset()
    return out


def session(b: Bench, steps: int) -> dict[str, object]:
    """A session of `steps` steps (5 modified + 1 added each), worksnap in-process vs git."""
    rnd = random.Random(200)
    state = b.state / "session"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    store, gitdir = state / "store", state / "shadow.git"
    b.fresh_git(gitdir)
    # No automatic gc in the middle: "before gc" is every object as written.
    subprocess.run(["git", f"--git-dir={gitdir}", "config", "gc.auto", "0"], check=True)
    edits = Edits(b.root, seed=11)
    added: list[Path] = []
    with Workspace(b.root, store=store) as ws:
        ws.snapshot()
        run_timed([b.git("add", "-A", gitdir=gitdir),
                   b.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "0",
                         gitdir=gitdir)])  # fmt: skip
        # Packed first, so that after the session's `git gc` only the session is counted.
        subprocess.run(["git", f"--git-dir={gitdir}", "gc", "-q"], check=True)
        ws_start, git_start = apparent(store), apparent(gitdir)
        for step in range(steps):
            for f in rnd.sample(edits.modified, 5):
                path = b.root / f
                path.write_bytes(path.read_bytes() + f"step {step}\n".encode())
            new = b.root / os.path.dirname(edits.modified[step % 10]) / f"session_{step}.txt"
            new.write_text(f"added at step {step} {rnd.random()}\n" * 20)
            added.append(new)
            ws.snapshot(step=step)
            run_timed([b.git("add", "-A", gitdir=gitdir),
                       b.git("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q",
                             "-m", str(step), gitdir=gitdir)])  # fmt: skip
        ws_growth = apparent(store) - ws_start
        git_growth = apparent(gitdir) - git_start
        subprocess.run(["git", f"--git-dir={gitdir}", "gc", "-q"], check=True)
        git_after_gc = apparent(gitdir) - git_start
    for path in added:
        path.unlink()
    edits.reset()
    row = {
        "steps": steps,
        "worksnap_bytes": ws_growth,
        "git_bytes_before_gc": git_growth,
        "git_bytes_after_gc": git_after_gc,
        "worksnap_per_step": ws_growth / steps,
        "ratio_before_gc": ws_growth / git_growth,
        "ratio_after_gc": ws_growth / max(git_after_gc, 1),
    }
    print(f"  session: {row}", flush=True)
    return row


def warm_cli(b: Bench, rounds: int) -> dict[str, object]:
    """Warm plain-CLI snapshot vs git add -A + commit: unchanged, and 10 modified."""
    b.fresh_git()
    shutil.rmtree(b.store, ignore_errors=True)
    run_timed([b.ws_cli("snapshot")])
    run_timed(git_commit(b, "base"))
    edits = Edits(b.root)
    out = {
        "unchanged": b.pair(
            "warm snapshot, unchanged",
            lambda: run_timed([b.ws_cli("snapshot")])[0],
            lambda: run_timed(git_commit(b, "x"))[0],
            rounds=rounds,
        ),
        "10 modified": b.pair(
            "warm snapshot, 10 modified",
            lambda: run_timed([b.ws_cli("snapshot")])[0],
            lambda: run_timed(git_commit(b, "x"))[0],
            before_a=edits.modify,
            before_b=edits.modify,
            rounds=rounds,
        ),
    }
    edits.reset()
    return out


def diff_between(root: Path, state: Path, rounds: int) -> dict[str, object]:
    """In-process diff and count_changes between two snapshots differing in 10 files."""
    store = state / "diff-store"
    shutil.rmtree(store, ignore_errors=True)
    edits = Edits(root, seed=3)
    with Workspace(root, store=store) as ws:
        first = ws.snapshot()
        edits.modify()
        second = ws.snapshot()
    edits.reset()
    times: dict[str, list[float]] = {"diff": [], "diff again": [], "count": [], "flat load": []}
    for _ in range(rounds):
        with Workspace(root, store=store) as ws:  # a fresh process's view: nothing cached
            start = time.perf_counter()
            changes, _ = ws.diff(first.id, second.id)
            times["diff"].append(time.perf_counter() - start)  # reads the pack index too
            assert len(changes) == 10, changes
            start = time.perf_counter()
            ws.diff(first.id, second.id)  # a long-lived workspace: the index is in memory
            times["diff again"].append(time.perf_counter() - start)
            start = time.perf_counter()
            assert count_changes(Digest(first.tree), Digest(second.tree), ws.store.read) == 10
            times["count"].append(time.perf_counter() - start)
            start = time.perf_counter()
            ws.load(second.id)
            times["flat load"].append(time.perf_counter() - start)
    row = {k: statistics.median(v) for k, v in times.items()}
    row["files"] = len(first.entries)
    print(f"  diff between two snapshots ({len(first.entries)} files): {row}", flush=True)
    return row


def many_snapshots(state: Path, count: int) -> dict[str, object]:
    """`list` of `count` snapshots and `gc` of them, on a 2,000-file tree (in-process)."""
    root = state / "small"
    shutil.rmtree(root, ignore_errors=True)
    for i in range(2000):
        path = root / f"d{i % 40}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n" * 10)
    store = state / "many-store"
    shutil.rmtree(store, ignore_errors=True)
    with Workspace(root, store=store) as ws:
        for i in range(count):
            (root / f"d{i % 40}" / "edited.txt").write_text(f"{i}\n")
            ws.snapshot(step=i)
    lists, gcs = [], []
    for _ in range(5):
        with Workspace(root, store=store) as ws:
            start = time.perf_counter()
            assert len(ws.list()) == count
            lists.append(time.perf_counter() - start)
    listed = run_timed([[*Bench(root, state, 1).ws_cli("--json", "list", store=store)]])[0]
    with Workspace(root, store=store) as ws:
        start = time.perf_counter()
        report = ws.gc(Retention(keep_last=count // 2))
        gcs.append(time.perf_counter() - start)
    row = {
        "snapshots": count,
        "list_in_process": statistics.median(lists),
        "list_cli_process": listed,
        "gc_drop_half": gcs[0],
        "gc_dropped": report.snapshots,
    }
    print(f"  many snapshots: {row}", flush=True)
    return row


def cold_rss(b: Bench, label: str) -> dict[str, object]:
    store = b.state / f"cold-{label}"
    shutil.rmtree(store, ignore_errors=True)
    seconds, rss_kb, _ = run_rss(b.ws_cli("snapshot", store=store))
    row = {"seconds": seconds, "peak_rss_mb": rss_kb / 1024}
    gitdir = b.state / f"cold-{label}.git"
    b.fresh_git(gitdir)
    git_seconds, git_rss, _ = run_timed(
        [b.git("add", "-A", gitdir=gitdir), b.git("write-tree", gitdir=gitdir)], cwd=b.root
    )
    row.update(git_seconds=git_seconds, git_peak_rss_mb=git_rss / 1024)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(gitdir, ignore_errors=True)
    print(f"  cold snapshot {label}: {row}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref", type=Path, required=True, help="the 47k-file reference root")
    parser.add_argument("--big", type=Path, help="the 200k-file root (optional)")
    parser.add_argument("--state", type=Path, default=Path("/tmp/trees-bench/state"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--only", help="comma-separated scenario names")
    args = parser.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    b = Bench(args.ref, args.state, args.rounds)
    results: dict[str, object] = {"command": " ".join(sys.argv), "env": ENV.get("PYTHONPATH")}

    def want(name: str) -> bool:
        return only is None or name in only

    if want("cold"):
        results["cold 47k"] = cold_rss(b, "47k")
        if args.big:
            results["cold 200k"] = cold_rss(Bench(args.big, args.state, 1), "200k")
    if want("growth"):
        results["growth"] = growth(b, args.rounds)
    if want("warm"):
        results["warm"] = warm_cli(b, args.rounds)
    if want("diff"):
        results["diff 47k"] = diff_between(args.ref, args.state, args.rounds)
        if args.big:
            results["diff 200k"] = diff_between(args.big, args.state, args.rounds)
    if want("many"):
        results["many"] = many_snapshots(args.state, args.snapshots)
    if want("session"):
        results["session"] = session(b, args.steps)
    out = HERE / "results" / "trees_vs_git.json"
    out.parent.mkdir(exist_ok=True)
    if only is not None and out.exists():  # a partial run updates the scenarios it ran
        results = {**json.loads(out.read_text()), **results}
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
