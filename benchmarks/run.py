"""Benchmark worksnap against a shadow git repository (and Rust / git-based peers).

Every scenario is a pair: worksnap (A) and its peer (B), run alternately (A B, then
B A, ...) for ``--rounds`` rounds after one untimed warm-up of each. Medians, the
ratio A/B and pass/fail against the target go to ``benchmarks/results/<name>.json``
and ``<name>.md``; the scaling plot goes to ``docs/performance-scaling.png``.

Runs are page-cache warm: the OS caches cannot be dropped without root-only knobs,
so the warm-up makes every run read from memory alike. Dirty pages are flushed
(``os.sync()``) before every timed run so one run's writeback does not land in the next.

Build the trees first (see build_workspace.py), then::

    python benchmarks/run.py --name baseline
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_BASE = Path("/tmp/worksnap-bench")
# Plain CLI rows run without the daemon; the daemon rows (DAEMON_ENV) go through it.
DAEMON_ENV = {**os.environ, "PYTHONPATH": str(REPO / "src"), "NO_COLOR": "1"}
DAEMON_ENV.pop("WORKSNAP_STORE", None)
DAEMON_ENV.pop("WORKSNAP_NO_DAEMON", None)
# A user's install has its bytecode: a benchmark must not compile every module per run.
DAEMON_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
ENV = {**DAEMON_ENV, "WORKSNAP_NO_DAEMON": "1"}
SKIP_DIRS = {"node_modules", ".venv", "__pycache__", ".git", ".tidemark", ".stepback"}


def worksnap_cmd() -> list[str]:
    script = Path(sys.executable).parent / "worksnap"
    return [str(script)] if script.exists() else [sys.executable, "-m", "worksnap"]


# -- running and timing ------------------------------------------------------


def _spawn(cmd: list[str], cwd: Path | None, env: dict[str, str]) -> tuple[int, str]:
    """Runs one command to its end; returns (its own peak RSS in KB, via wait4; stdout)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    out = proc.stdout.read()  # our outputs are small: no deadlock on stderr
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return usage.ru_maxrss, out.decode()


def run_timed(
    cmds: list[list[str]], cwd: Path | None = None, env: dict[str, str] = ENV
) -> tuple[float, int, str]:
    """Runs commands one after the other; returns (seconds, peak RSS KB of any, last stdout)."""
    peak = 0
    out = ""
    start = time.perf_counter()
    for cmd in cmds:
        rss, out = _spawn(cmd, cwd, env)
        peak = max(peak, rss)
    return time.perf_counter() - start, peak, out


def run_rss(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] = ENV
) -> tuple[float, int, str]:
    """Runs one command; returns (seconds, its peak RSS in KB, stdout)."""
    return run_timed([cmd], cwd, env)


def auto_started_daemon(b: Bench) -> dict[str, object]:
    """Lets the default command line start the daemon by itself, as a user's command would.

    The plain runs before left the store with its caches; the next command without
    WORKSNAP_NO_DAEMON runs in its own process and starts the daemon (autostart.py).
    Fails if it was not started automatically.
    """
    run_rss(b.ws_cli("daemon", "stop"), env=DAEMON_ENV)
    run_rss(b.ws_cli("snapshot"), env=DAEMON_ENV)
    deadline = time.monotonic() + 300
    while True:
        status = daemon_status(b)  # exit 1 while none answers (it may still be warming up)
        if status["running"]:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon was not started automatically: {status}")
        time.sleep(0.2)
    if not str(status.get("started_by", "")).startswith("on:"):
        raise RuntimeError(f"the daemon was not started by the automatic start: {status}")
    print(f"  daemon started automatically: {status['started_by']}", flush=True)
    return status


def daemon_status(b: Bench) -> dict[str, object]:
    """`daemon status --json`, whether one runs (exit 0) or not (exit 1)."""
    done = subprocess.run(
        b.ws_cli("--json", "daemon", "status"), env=DAEMON_ENV, capture_output=True, check=False
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def daemon_memory(b: Bench) -> dict[str, object]:
    """The daemon's resident memory now and at its peak, and what its audit found."""
    status = daemon_status(b)
    found: dict[str, object] = {"daemon_requests": status["requests"]}
    with open(f"/proc/{status['pid']}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found["daemon_" + line.split(":")[0].lower() + "_kb"] = int(line.split()[1])
    from worksnap.client import request

    audit = request(str(b.store), "audit") or {}
    found["daemon_audits"] = audit.get("audits")
    found["daemon_audit_differences"] = audit.get("audit_differences")
    return found


class Worker:
    """The in-process worksnap (benchmarks/inproc_worker.py) on one long-lived Workspace.

    With `watch`, the Workspace is opened with `watch=True` (inotify).
    """

    def __init__(self, root: Path, store: Path, *, watch: bool = False) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "inproc_worker.py")],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        opened = self.call(op="open", root=str(root), store=str(store), watch=watch)
        if watch and not opened["watching"]:
            raise RuntimeError("watch=True but the Workspace has no watcher (no inotify?)")

    def call(self, **req: object) -> dict[str, object]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"in-process worker died on {req}")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def snapper(worker: Worker, mode: str, expect: str) -> Callable[[], float]:
    """A timed `ws.snapshot()` on `worker` that checks the tree digest between calls.

    expect "same": nothing changed, so the digest must not move; "changed": the files
    were rewritten with new content before every call, so it must move every time.
    """
    last: list[object] = [None]

    def fn() -> float:
        answer = worker.call(op="snapshot")
        tree = answer["tree"]
        if expect == "same" and last[0] is not None and tree != last[0]:
            raise RuntimeError(f"{mode}: nothing changed, yet the tree digest moved")
        if expect == "changed" and tree == last[0]:
            raise RuntimeError(f"{mode}: 10 files were modified, yet the tree digest did not move")
        last[0] = tree
        return float(answer["t"])  # type: ignore[arg-type]

    return fn


# -- the workspace and its edits ---------------------------------------------


def list_files(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        rel = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".log", ".tmp")) or name == ".gitignore":
                continue
            path = name if rel == "." else f"{rel}/{name}"
            out.append(path)
    return out


class Edits:
    """The same files, edited the same way, for every tool and every round."""

    def __init__(self, root: Path, seed: int = 42) -> None:
        self.root = root
        files = list_files(root)
        rnd = random.Random(seed)
        small = [f for f in files if 500 < (root / f).stat().st_size < 200_000]
        chosen = rnd.sample(small, 110)
        self.modified = chosen[:10]
        self.deleted = [f for f in rnd.sample(files, 200) if f not in chosen][:100]
        dirs = sorted({os.path.dirname(f) for f in self.modified})
        self.added = [f"{dirs[i % len(dirs)]}/bench_added_{i}.txt".lstrip("/") for i in range(10)]
        self.orig = {f: (root / f).read_bytes() for f in self.modified + self.deleted}
        self.counter = 0

    def modify(self) -> None:
        """Rewrites the 10 files with content never seen before (so both tools must hash)."""
        self.counter += 1
        for f in self.modified:
            (self.root / f).write_bytes(self.orig[f] + f"\nbench edit {self.counter}\n".encode())

    def mad(self) -> None:
        """Makes the restore situation: 10 modified, 10 added, 100 deleted."""
        self.modify()
        for i, f in enumerate(self.added):
            (self.root / f).write_text(f"added file {i} round {self.counter}\n")
        for f in self.deleted:
            (self.root / f).unlink()

    def reset(self) -> None:
        """Puts the tree back as built (untimed)."""
        for f, data in self.orig.items():
            path = self.root / f
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
        for f in self.added:
            (self.root / f).unlink(missing_ok=True)

    def check_clean(self, what: str) -> None:
        """Fails loudly if a restore did not bring the tree back."""
        for f, data in self.orig.items():
            path = self.root / f
            if not path.exists() or path.read_bytes() != data:
                raise RuntimeError(f"{what}: {f} was not restored")
        for f in self.added:
            if (self.root / f).exists():
                raise RuntimeError(f"{what}: {f} was not removed")


# -- one benchmark session ---------------------------------------------------


class Bench:
    def __init__(self, root: Path, state: Path, rounds: int) -> None:
        self.root = root
        self.state = state
        self.rounds = rounds
        self.store = state / "store"
        self.gitdir = state / "shadow.git"
        self.ws = worksnap_cmd()

    # commands
    def ws_cli(self, *args: str, store: Path | None = None) -> list[str]:
        return [*self.ws, "--root", str(self.root), "--store", str(store or self.store), *args]

    def git(self, *args: str, gitdir: Path | None = None) -> list[str]:
        return ["git", f"--git-dir={gitdir or self.gitdir}", f"--work-tree={self.root}", *args]

    def git_snapshot(self, gitdir: Path | None = None) -> tuple[float, int, str]:
        return run_timed(
            [self.git("add", "-A", gitdir=gitdir), self.git("write-tree", gitdir=gitdir)],
            cwd=self.root,
        )

    def fresh_git(self, gitdir: Path | None = None) -> None:
        gitdir = gitdir or self.gitdir
        shutil.rmtree(gitdir, ignore_errors=True)
        subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True)
        # A bare init sets core.bare; the shadow repo has a work tree.
        subprocess.run(["git", f"--git-dir={gitdir}", "config", "core.bare", "false"], check=True)

    # the pair runner
    def pair(
        self,
        name: str,
        a: Callable[[], float],
        b: Callable[[], float],
        *,
        before_a: Callable[[], None] = lambda: None,
        before_b: Callable[[], None] = lambda: None,
        after_a: Callable[[], None] = lambda: None,
        after_b: Callable[[], None] = lambda: None,
        rounds: int | None = None,
    ) -> dict[str, object]:
        rounds = rounds or self.rounds
        times: dict[str, list[float]] = {"a": [], "b": []}
        steps = {"a": (before_a, a, after_a), "b": (before_b, b, after_b)}

        def one(which: str, record: bool) -> None:
            before, fn, after = steps[which]
            before()
            os.sync()
            t = fn()
            after()
            if record:
                times[which].append(t)

        one("a", False)  # untimed warm-up of each
        one("b", False)
        for i in range(rounds):
            for which in ("a", "b") if i % 2 == 0 else ("b", "a"):
                one(which, True)
        ma, mb = statistics.median(times["a"]), statistics.median(times["b"])
        print(
            f"  {name}: A {ma:.3f} s  B {mb:.3f} s  ratio {ma / mb:.2f}  "
            f"(A {' '.join(f'{t:.3f}' for t in times['a'])} | "
            f"B {' '.join(f'{t:.3f}' for t in times['b'])})",
            flush=True,
        )
        return {"a": times["a"], "b": times["b"], "median_a": ma, "median_b": mb, "ratio": ma / mb}


def store_bytes(path: Path) -> tuple[int, int]:
    """Returns (apparent bytes, allocated bytes) of everything under `path`."""
    apparent = allocated = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def store_breakdown(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for sub in sorted(os.listdir(path)):
        full = path / sub
        out[sub] = store_bytes(full)[0] if full.is_dir() else full.stat().st_size
    return out


# -- the scenarios -----------------------------------------------------------

MODES = ("inproc", "watch")  # in-process: plain Workspace, and Workspace(watch=True)
INPROC_SCENARIOS = ("warm_nochange", "warm_10mod", "restore", "plan")

TARGETS = {
    "cold": 0.25,
    "warm_nochange_cli": 1.5,
    "warm_nochange_inproc": 1.0,
    "warm_10mod_cli": 1.5,
    "warm_10mod_inproc": 1.0,
    "restore_cli": 1.0,
    "restore_inproc": 1.0,
    "plan_cli": 1.0,
    "plan_inproc": 1.0,
    "warm_nochange_watch": 1.0,
    "warm_10mod_watch": 1.0,
    "restore_watch": 1.0,
    "plan_watch": 1.0,
    # issue 12: the default CLI, with the daemon it starts by itself
    "warm_nochange_daemon": 0.5,
    "warm_10mod_daemon": 0.6,
    "restore_daemon": 0.7,
    "plan_daemon": 1.0,
}

PEERS = {
    "cold": "git add -A && git write-tree (fresh shadow git dir)",
    "warm_nochange_cli": "git add -A && git write-tree (warm shadow)",
    "warm_nochange_inproc": "git add -A && git write-tree (warm shadow)",
    "warm_10mod_cli": "git add -A && git write-tree (warm, 10 modified)",
    "warm_10mod_inproc": "git add -A && git write-tree (warm, 10 modified)",
    "restore_cli": "git add -A && git read-tree -u --reset TREE",
    "restore_inproc": "git add -A && git read-tree -u --reset TREE",
    "plan_cli": "worksnap snapshot (CLI, warm)",
    "plan_inproc": "ws.snapshot() (in-process, warm)",
    "warm_nochange_watch": "git add -A && git write-tree (warm shadow)",
    "warm_10mod_watch": "git add -A && git write-tree (warm, 10 modified)",
    "restore_watch": "git add -A && git read-tree -u --reset TREE",
    "plan_watch": "ws.snapshot() (in-process, watch=True, warm)",
    "warm_nochange_daemon": "git add -A && git write-tree (warm shadow)",
    "warm_10mod_daemon": "git add -A && git write-tree (warm, 10 modified)",
    "restore_daemon": "git add -A && git read-tree -u --reset TREE",
    "plan_daemon": "worksnap snapshot (CLI through the daemon, warm)",
}

WHAT = {
    "cold": "cold snapshot (empty store), CLI",
    "warm_nochange_cli": "warm snapshot, nothing changed, CLI",
    "warm_nochange_inproc": "warm snapshot, nothing changed, in-process",
    "warm_10mod_cli": "warm snapshot, 10 modified, CLI",
    "warm_10mod_inproc": "warm snapshot, 10 modified, in-process",
    "restore_cli": "restore 10 M / 10 A / 100 D (pre-restore snapshot incl.), CLI",
    "restore_inproc": "restore 10 M / 10 A / 100 D, in-process",
    "plan_cli": "plan REF (M/A/D present), CLI",
    "plan_inproc": "plan REF (M/A/D present), in-process",
    "warm_nochange_watch": "warm snapshot, nothing changed, in-process watch",
    "warm_10mod_watch": "warm snapshot, 10 modified, in-process watch",
    "restore_watch": "restore 10 M / 10 A / 100 D, in-process watch",
    "plan_watch": "plan REF (M/A/D present), in-process watch",
    "warm_nochange_daemon": "warm, nothing changed, default CLI (daemon started by itself)",
    "warm_10mod_daemon": "warm snapshot, 10 modified, default CLI (daemon started by itself)",
    "restore_daemon": "restore 10 M / 10 A / 100 D, default CLI (daemon started by itself)",
    "plan_daemon": "plan REF (M/A/D present), default CLI (daemon started by itself)",
}
DAEMON_SCENARIOS = ("warm_nochange_daemon", "warm_10mod_daemon", "restore_daemon", "plan_daemon")


def reference_scenarios(b: Bench, only: set[str] | None) -> tuple[dict[str, object], dict]:
    root = b.root
    edits = Edits(root)
    edits.reset()
    results: dict[str, object] = {}
    extra: dict[str, object] = {}

    def want(name: str) -> bool:
        return only is None or name in only

    # cold ------------------------------------------------------------------
    cold_rss: list[int] = []
    git_cold_rss: list[int] = []
    snap_info: dict[str, object] = {}

    def ws_cold() -> float:
        t, rss, out = run_rss(b.ws_cli("--json", "snapshot"))
        cold_rss.append(rss)
        snap_info.update(json.loads(out))
        return t

    def git_cold() -> float:
        t, _, _ = b.git_snapshot()
        return t

    if want("cold"):
        print("cold", flush=True)
        results["cold"] = b.pair(
            "cold",
            ws_cold,
            git_cold,
            before_a=lambda: shutil.rmtree(b.store, ignore_errors=True),
            before_b=b.fresh_git,
        )
        app, alloc = store_bytes(b.store)
        extra["cold_peak_rss_kb"] = cold_rss
        extra["cold_store"] = {
            "captured_bytes": snap_info.get("bytes"),
            "captured_files": snap_info.get("files"),
            "new_objects": snap_info.get("new_objects"),
            "store_apparent_bytes": app,
            "store_allocated_bytes": alloc,
            "breakdown": store_breakdown(b.store),
            "git_shadow_apparent_bytes": store_bytes(b.gitdir)[0],
        }
        _t, rss, _ = run_rss(b.git("add", "-A"), cwd=root)
        git_cold_rss.append(rss)
        extra["git_warm_add_rss_kb"] = rss
        print(f"  cold peak RSS {max(cold_rss) / 1024:.0f} MB; store {extra['cold_store']}")

    # make sure both are populated and settled
    if not (b.store / "snapshots").is_dir():
        run_rss(b.ws_cli("snapshot"))
    if not (b.gitdir / "index").exists():
        b.fresh_git()
        b.git_snapshot()
    time.sleep(0.2)  # let the racy-timestamp margin pass
    run_rss(b.ws_cli("snapshot"))
    b.git_snapshot()

    def ws_snap() -> float:
        return run_rss(b.ws_cli("snapshot"))[0]

    def git_snap() -> float:
        return b.git_snapshot()[0]

    if want("warm_nochange_cli"):
        print("warm, nothing changed, CLI", flush=True)
        results["warm_nochange_cli"] = b.pair("warm_nochange_cli", ws_snap, git_snap)
    if want("warm_10mod_cli"):
        print("warm, 10 modified, CLI", flush=True)
        results["warm_10mod_cli"] = b.pair(
            "warm_10mod_cli", ws_snap, git_snap, before_a=edits.modify, before_b=edits.modify
        )
        edits.reset()
        time.sleep(0.2)
        ws_snap()
        git_snap()

    # in-process: ONE long-lived Workspace per mode ("inproc": plain, "watch": watch=True),
    # opened here and kept across every round of every in-process scenario below (the CLI
    # restore and plan runs in between are other processes writing the same tree and store).
    modes = [m for m in MODES if any(want(f"{s}_{m}") for s in INPROC_SCENARIOS)]
    workers: dict[str, Worker] = {}
    for mode in modes:
        workers[mode] = Worker(root, b.store, watch=mode == "watch")
        first = workers[mode].call(op="snapshot")  # loads the caches; the watcher starts here
        extra[f"{mode}_first_snapshot_s"] = first["t"]
    time.sleep(0.2)
    checks: list[str] = []
    extra["digest_checks"] = checks

    def cli_tree() -> str:
        return str(json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["tree"])

    def check_digest(mode: str) -> None:
        """The long-lived object must see what a fresh full scan (the CLI) sees."""
        mine = workers[mode].call(op="snapshot")["tree"]
        full = cli_tree()
        if mine != full:
            raise RuntimeError(f"{mode}: tree digest {mine} but a full scan gives {full}")
        checks.append(f"{mode}: {mine[:16]} == full scan")

    for mode in modes:
        key = f"warm_nochange_{mode}"
        if want(key):
            print(f"warm, nothing changed, {mode}", flush=True)
            results[key] = b.pair(key, snapper(workers[mode], mode, "same"), git_snap)
            check_digest(mode)
    for mode in modes:
        key = f"warm_10mod_{mode}"
        if want(key):
            print(f"warm, 10 modified, {mode}", flush=True)
            results[key] = b.pair(
                key,
                snapper(workers[mode], mode, "changed"),
                git_snap,
                before_a=edits.modify,
                before_b=edits.modify,
            )
            check_digest(mode)
            edits.reset()
            time.sleep(0.2)
            ws_snap()
            git_snap()

    # restore ------------------------------------------------------------------
    ref = json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["id"]
    tree = b.git_snapshot()[2].strip()
    extra["ref"] = ref
    extra["tree"] = tree

    def ws_restore() -> float:
        t, _, out = run_rss(b.ws_cli("--json", "restore", ref, "--yes"))
        if json.loads(out)["error"] is not None:
            raise RuntimeError(out)
        return t

    def git_restore() -> float:
        t, _, _ = run_timed(
            [b.git("add", "-A"), b.git("read-tree", "-u", "--reset", tree)], cwd=root
        )
        return t

    def check(what: str) -> Callable[[], None]:
        return lambda: edits.check_clean(what)

    if want("restore_cli"):
        print("restore M/A/D, CLI", flush=True)
        results["restore_cli"] = b.pair(
            "restore_cli",
            ws_restore,
            git_restore,
            before_a=edits.mad,
            before_b=edits.mad,
            after_a=check("worksnap restore"),
            after_b=check("git read-tree"),
        )
    for mode in modes:
        key = f"restore_{mode}"
        if not want(key):
            continue
        print(f"restore M/A/D, {mode}", flush=True)

        def ws_restore_mode(worker: Worker = workers[mode]) -> float:
            answer = worker.call(op="restore", ref=ref)
            # 120 changes (10 M, 10 A, 100 D): fewer means the object missed some of them.
            if not answer["ok"] or answer["restored"] != 120:
                raise RuntimeError(answer)
            return float(answer["t"])  # type: ignore[arg-type]

        results[key] = b.pair(
            key,
            ws_restore_mode,
            git_restore,
            before_a=edits.mad,  # the M/A/D situation is rebuilt before every timed run
            before_b=edits.mad,
            after_a=check(f"worksnap restore ({mode})"),
            after_b=check("git read-tree"),
        )

    # plan vs warm snapshot, with the M/A/D situation present ------------------
    if want("plan_cli") or any(want(f"plan_{m}") for m in modes):
        edits.mad()
        time.sleep(0.2)
        ws_snap()

        def ws_plan() -> float:
            t, _, out = run_rss(b.ws_cli("--json", "plan", ref))
            n = len(json.loads(out)["changes"])
            extra["plan_changes"] = n
            return t

        if want("plan_cli"):
            print("plan vs warm snapshot, CLI", flush=True)
            results["plan_cli"] = b.pair("plan_cli", ws_plan, ws_snap)
        for mode in modes:
            key = f"plan_{mode}"
            if not want(key):
                continue
            print(f"plan vs warm snapshot, {mode}", flush=True)
            worker = workers[mode]

            def plan_mode(worker: Worker = worker, mode: str = mode) -> float:
                answer = worker.call(op="plan", ref=ref)
                if answer["changes"] != 120:
                    raise RuntimeError(f"{mode} plan: {answer}")
                return float(answer["t"])  # type: ignore[arg-type]

            results[key] = b.pair(key, plan_mode, snapper(worker, mode, "same"))
        edits.reset()
        time.sleep(0.2)
        ws_snap()
        git_snap()
    for mode, worker in workers.items():
        check_digest(mode)
        extra[f"{mode}_peak_rss_kb"] = worker.call(op="snapshot")["maxrss_kb"]
        worker.close()

    # the CLI through `worksnap daemon` -------------------------------------------
    if any(want(key) for key in DAEMON_SCENARIOS):
        extra["daemon_started_by"] = auto_started_daemon(b)["started_by"]
        try:
            daemon_scenarios(
                b,
                edits,
                ref=ref,
                git_snap=git_snap,
                git_restore=git_restore,
                want=want,
                results=results,
                checks=checks,
            )
            extra.update(daemon_memory(b))
        finally:
            run_rss(b.ws_cli("daemon", "stop"))
    return results, extra


def daemon_scenarios(
    b: Bench,
    edits: Edits,
    *,
    ref: str,
    git_snap: Callable[[], float],
    git_restore: Callable[[], float],
    want: Callable[[str], bool],
    results: dict[str, object],
    checks: list[str],
) -> None:
    """Every CLI scenario again, with a daemon serving the store (started by the caller)."""

    def cli(*args: str) -> tuple[float, int, str]:
        return run_rss(b.ws_cli(*args), env=DAEMON_ENV)

    def snap() -> float:
        return cli("snapshot")[0]

    def check_digest() -> None:
        mine = json.loads(cli("--json", "snapshot")[2])["tree"]
        full = json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["tree"]
        if mine != full:
            raise RuntimeError(f"daemon: tree digest {mine} but a full scan gives {full}")
        checks.append(f"daemon: {mine[:16]} == full scan")

    time.sleep(0.2)
    snap()
    if want("warm_nochange_daemon"):
        print("warm, nothing changed, daemon", flush=True)
        results["warm_nochange_daemon"] = b.pair("warm_nochange_daemon", snap, git_snap)
        check_digest()
    if want("warm_10mod_daemon"):
        print("warm, 10 modified, daemon", flush=True)
        results["warm_10mod_daemon"] = b.pair(
            "warm_10mod_daemon", snap, git_snap, before_a=edits.modify, before_b=edits.modify
        )
        check_digest()
        edits.reset()
        time.sleep(0.2)
        snap()
        git_snap()
    if want("restore_daemon"):
        print("restore M/A/D, daemon", flush=True)

        def restore() -> float:
            t, _, out = cli("--json", "restore", ref, "--yes")
            answer = json.loads(out)
            if answer["error"] is not None or len(answer["restored"]) != 120:
                raise RuntimeError(out)
            return t

        results["restore_daemon"] = b.pair(
            "restore_daemon",
            restore,
            git_restore,
            before_a=edits.mad,
            before_b=edits.mad,
            after_a=lambda: edits.check_clean("worksnap restore (daemon)"),
            after_b=lambda: edits.check_clean("git read-tree"),
        )
    if want("plan_daemon"):
        print("plan vs warm snapshot, daemon", flush=True)
        edits.mad()
        time.sleep(0.2)
        snap()

        def plan() -> float:
            t, _, out = cli("--json", "plan", ref)
            if len(json.loads(out)["changes"]) != 120:
                raise RuntimeError(out)
            return t

        results["plan_daemon"] = b.pair("plan_daemon", plan, snap)
        check_digest()
        edits.reset()
        time.sleep(0.2)
        snap()
        git_snap()


# -- peers ---------------------------------------------------------------------

SNAPDIR_SCRIPT = """
import asyncio, sys, snapdir
m = asyncio.run(snapdir.manifest(sys.argv[1], exclude=sys.argv[2:]))
print(len(m.entries))
"""

STEPBACK_CHECKPOINT = """
import sys
from pathlib import Path
from stepback.engine import Engine
cp = Engine(Path(sys.argv[1])).checkpoint()
print(cp.id if cp is not None else "none")
"""


def peers(b: Bench, rounds: int) -> dict[str, object]:
    """Rust and git-based peers on the same tree (not interleaved; `rounds` runs each)."""
    root = b.root
    out: dict[str, object] = {}
    bindir = Path(sys.executable).parent

    def median_of(fn: Callable[[], float], n: int = rounds) -> dict[str, object]:
        fn()  # untimed warm-up
        ts = []
        for _ in range(n):
            os.sync()
            ts.append(fn())
        return {"runs": ts, "median": statistics.median(ts)}

    # snapdir: a manifest (BLAKE3 of every file) of the tree, ignored dirs excluded by regex.
    try:
        excludes = ["/node_modules(/|$)", "/\\.venv(/|$)", "/__pycache__(/|$)", "\\.pyc$"]
        cmd = [sys.executable, "-c", SNAPDIR_SCRIPT, str(root), *excludes]
        entries = run_rss(cmd)[2].strip()
        out["snapdir_manifest"] = {
            "what": "snapdir.manifest(root) (Python binding of the Rust crate), whole process",
            "entries": entries,
            **median_of(lambda: run_rss(cmd)[0]),
        }
        print(f"  snapdir manifest: {out['snapdir_manifest']}", flush=True)
    except (RuntimeError, OSError) as exc:
        out["snapdir_manifest"] = {"error": str(exc)}

    # tidemark: `snap` writes a manifest into its store (.tidemark, inside the root).
    tidemark = bindir / "tidemark"
    if tidemark.exists():
        tm_out = b.state / "tidemark.json"

        def tm() -> float:
            return run_rss(
                [
                    str(tidemark),
                    "--quiet",
                    "snap",
                    "--path",
                    str(root),
                    "--no-content",
                    "--hidden",
                    "--output-file",
                    str(tm_out),
                    "--json",
                    "bench",
                ],
                cwd=b.state,
            )[0]

        shutil.rmtree(root / ".tidemark", ignore_errors=True)
        first = tm()
        out["tidemark_snap"] = {
            "what": "tidemark snap --no-content --hidden (honours .gitignore), whole process",
            "first_run": first,
            "entries": json.loads(tm_out.read_text())["entry_count"],
            **median_of(tm),
        }
        shutil.rmtree(root / ".tidemark", ignore_errors=True)
        print(f"  tidemark snap: {out['tidemark_snap']}", flush=True)
    else:
        out["tidemark_snap"] = {"error": "tidemark not installed"}

    # stepback: its Engine.checkpoint() (git add -A into a throwaway index + write-tree +
    # commit-tree) and `stepback rewind ID --yes`. Its shadow store lives in ROOT/.stepback.
    if (bindir / "stepback").exists():
        edits = Edits(root)
        edits.reset()
        sb_dir = root / ".stepback"
        cmd = [sys.executable, "-c", STEPBACK_CHECKPOINT, str(root)]
        shutil.rmtree(sb_dir, ignore_errors=True)
        os.sync()
        cold = run_rss(cmd, cwd=root)
        cp_id = cold[2].strip()

        def sb_warm() -> float:
            return run_rss(cmd, cwd=root)[0]

        def sb_mod() -> float:
            edits.modify()
            os.sync()
            return run_rss(cmd, cwd=root)[0]

        warm = median_of(sb_warm)
        mod = median_of(sb_mod)
        edits.reset()
        run_rss(cmd, cwd=root)

        def sb_rewind() -> float:
            edits.mad()
            os.sync()
            t = run_rss([str(bindir / "stepback"), "rewind", cp_id, "--yes"], cwd=root)[0]
            edits.check_clean("stepback rewind")
            return t

        try:
            rewind = median_of(sb_rewind)
        except RuntimeError as exc:
            rewind = {"error": str(exc)[-500:]}
        out["stepback"] = {
            "what": "stepback Engine(root).checkpoint() per process; `stepback rewind ID --yes`",
            "cold_checkpoint": cold[0],
            "cold_peak_rss_kb": cold[1],
            "warm_checkpoint": warm,
            "checkpoint_10mod": mod,
            "rewind_mad": rewind,
        }
        edits.reset()
        shutil.rmtree(sb_dir, ignore_errors=True)
        print(f"  stepback: {out['stepback']}", flush=True)
    else:
        out["stepback"] = {"error": "stepback not installed"}
    return out


# -- scaling -------------------------------------------------------------------


def scaling(
    base: Path, sizes: list[int], rounds: int, *, daemon_only: bool = False
) -> dict[str, object]:
    return {str(n): scale_one(base, n, rounds, daemon_only=daemon_only) for n in sizes}


def scale_one(base: Path, n: int, rounds: int, *, daemon_only: bool = False) -> dict[str, object]:
    """One synthetic tree: cold once, then warm / 10 modified / plan pairs."""
    tree = base / f"syn{n}"
    if not (tree / "root").is_dir():
        subprocess.run(
            [
                sys.executable,
                str(HERE / "build_workspace.py"),
                "--synthetic",
                str(n),
                "--out",
                str(tree),
            ],
            check=True,
        )
    b = Bench(tree / "root", tree / "state", rounds)
    b.state.mkdir(exist_ok=True)
    print(f"scaling {n} files", flush=True)
    shutil.rmtree(b.store, ignore_errors=True)
    os.sync()
    ws_cold_t, ws_cold_rss, snap = run_rss(b.ws_cli("--json", "snapshot"))
    b.fresh_git()
    os.sync()
    git_cold_t = b.git_snapshot()[0]
    time.sleep(0.2)
    ref = json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["id"]
    b.git_snapshot()
    edits = Edits(b.root)

    def ws_snap() -> float:
        return run_rss(b.ws_cli("snapshot"))[0]

    def git_snap() -> float:
        return b.git_snapshot()[0]

    def ws_plan() -> float:
        return run_rss(b.ws_cli("--json", "plan", ref))[0]

    row: dict[str, object] = {
        "files": json.loads(snap)["files"],
        "bytes": json.loads(snap)["bytes"],
        "cold_cli": ws_cold_t,
        "cold_peak_rss_kb": ws_cold_rss,
        "git_cold": git_cold_t,
    }
    if not daemon_only:
        row.update(
            plain_and_inproc_scaling(
                b, n, ref, edits, ws_snap=ws_snap, git_snap=git_snap, ws_plan=ws_plan
            )
        )
    row.update(daemon_scaling(b, n, ref, edits, git_snap))
    return row


def plain_and_inproc_scaling(
    b: Bench,
    n: int,
    ref: str,
    edits: Edits,
    *,
    ws_snap: Callable[[], float],
    git_snap: Callable[[], float],
    ws_plan: Callable[[], float],
) -> dict[str, object]:
    """The plain CLI, in-process and watched rows of one synthetic tree."""
    row: dict[str, object] = {}
    row["warm_nochange_cli"] = b.pair("warm_nochange_cli", ws_snap, git_snap)
    row["warm_10mod_cli"] = b.pair(
        "warm_10mod_cli", ws_snap, git_snap, before_a=edits.modify, before_b=edits.modify
    )
    edits.reset()
    time.sleep(0.2)
    ws_snap()
    git_snap()
    # One long-lived Workspace per mode, kept across every round below.
    workers = {mode: Worker(b.root, b.store, watch=mode == "watch") for mode in MODES}
    for mode, worker in workers.items():
        row[f"{mode}_first_snapshot_s"] = worker.call(op="snapshot")["t"]
    time.sleep(0.2)
    for mode, worker in workers.items():
        row[f"warm_nochange_{mode}"] = b.pair(
            f"warm_nochange_{mode}", snapper(worker, mode, "same"), git_snap
        )
    for mode, worker in workers.items():
        row[f"warm_10mod_{mode}"] = b.pair(
            f"warm_10mod_{mode}",
            snapper(worker, mode, "changed"),
            git_snap,
            before_a=edits.modify,
            before_b=edits.modify,
        )
        # what the long-lived object saw must be what a full scan sees
        mine = worker.call(op="snapshot")["tree"]
        full = json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["tree"]
        if mine != full:
            raise RuntimeError(f"{n} files, {mode}: tree {mine} but a full scan gives {full}")
        edits.reset()
        time.sleep(0.2)
        ws_snap()
    row["plan_cli"] = b.pair("plan_cli", ws_plan, ws_snap)
    for mode, worker in workers.items():

        def plan_mode(worker: Worker = worker) -> float:
            return float(worker.call(op="plan", ref=ref)["t"])  # type: ignore[arg-type]

        row[f"plan_{mode}"] = b.pair(f"plan_{mode}", plan_mode, snapper(worker, mode, "same"))
        row[f"{mode}_peak_rss_kb"] = worker.call(op="snapshot")["maxrss_kb"]
        worker.close()
    return row


def daemon_scaling(
    b: Bench, n: int, ref: str, edits: Edits, git_snap: Callable[[], float]
) -> dict[str, object]:
    """The default CLI's rows of one synthetic tree, with the daemon it starts by itself."""
    row: dict[str, object] = {}
    row["daemon_started_by"] = auto_started_daemon(b)["started_by"]
    try:

        def daemon_cli(*args: str) -> tuple[float, int, str]:
            return run_rss(b.ws_cli(*args), env=DAEMON_ENV)

        def daemon_snap() -> float:
            return daemon_cli("snapshot")[0]

        daemon_snap()
        row["warm_nochange_daemon"] = b.pair("warm_nochange_daemon", daemon_snap, git_snap)
        row["warm_10mod_daemon"] = b.pair(
            "warm_10mod_daemon",
            daemon_snap,
            git_snap,
            before_a=edits.modify,
            before_b=edits.modify,
        )
        mine = json.loads(daemon_cli("--json", "snapshot")[2])["tree"]
        full = json.loads(run_rss(b.ws_cli("--json", "snapshot"))[2])["tree"]
        if mine != full:
            raise RuntimeError(f"{n} files, daemon: tree {mine} but a full scan gives {full}")
        edits.reset()
        time.sleep(0.2)
        daemon_snap()
        row["plan_daemon"] = b.pair(
            "plan_daemon", lambda: daemon_cli("--json", "plan", ref)[0], daemon_snap
        )
        row.update(daemon_memory(b))
    finally:
        run_rss(b.ws_cli("daemon", "stop"))
    return row


def plot(scale: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(scale, key=int)
    xs = [scale[n]["files"] for n in sizes]  # type: ignore[index]

    def series(key: str, which: str = "median_a") -> list[float]:
        return [scale[n][key][which] for n in sizes]  # type: ignore[index]

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ax.plot(xs, series("warm_nochange_cli"), "o-", label="worksnap warm, no change (CLI)")
    ax.plot(xs, series("warm_10mod_cli"), "s--", label="worksnap warm, 10 modified (CLI)")
    ax.plot(xs, series("warm_nochange_inproc"), "o-", label="worksnap warm, no change (in-proc)")
    ax.plot(xs, series("warm_10mod_inproc"), "s--", label="worksnap warm, 10 modified (in-proc)")
    ax.plot(xs, series("warm_nochange_watch"), "o-", label="worksnap warm, no change (watch)")
    ax.plot(xs, series("warm_10mod_watch"), "s--", label="worksnap warm, 10 modified (watch)")
    ax.plot(xs, series("plan_cli"), "^-", label="worksnap plan (CLI)")
    ax.plot(xs, series("plan_watch"), "^--", label="worksnap plan (watch)")
    ax.plot(xs, series("warm_nochange_daemon"), "D-", label="worksnap warm, no change (daemon)")
    ax.plot(xs, series("plan_daemon"), "D--", label="worksnap plan (daemon)")
    ax.plot(xs, series("warm_nochange_cli", "median_b"), "k:", label="git add -A + write-tree")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("captured files (synthetic trees)")
    ax.set_ylabel("median seconds")
    ax.set_title("worksnap warm snapshot and plan vs tree size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- report --------------------------------------------------------------------


def machine() -> dict[str, object]:
    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return "?"

    mem = "?"
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) // 1024} MiB"
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": sh(["git", "--version"]),
        "filesystem": sh(["stat", "-f", "-c", "%T", str(DEFAULT_BASE)]),
        "worksnap_commit": sh(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
    }


def markdown(data: dict) -> str:
    lines = []
    counts = data.get("counts", {})
    lines.append(
        f"Reference tree: {counts.get('captured_files')} captured files, "
        f"{counts.get('captured_bytes', 0) / 1e6:.1f} MB, "
        f"{counts.get('ignored_files')} ignored files; {data['rounds']} rounds, medians."
    )
    lines.append("")
    lines.append("| scenario | worksnap (A) | peer (B) | A/B | target | result |")
    lines.append("|---|---:|---:|---:|---:|---|")
    for key, r in data["results"].items():
        ok = r["ratio"] <= TARGETS[key]
        lines.append(
            f"| {WHAT[key]} | {r['median_a']:.3f} s | {r['median_b']:.3f} s "
            f"<br><sub>{PEERS[key]}</sub> | {r['ratio']:.2f}x | <= {TARGETS[key]}x "
            f"| {'PASS' if ok else 'FAIL'} |"
        )
    extra = data.get("extra", {})
    if "cold_peak_rss_kb" in extra:
        rss = max(extra["cold_peak_rss_kb"]) / 1024
        st = extra["cold_store"]
        ratio = st["store_apparent_bytes"] / st["captured_bytes"]
        lines.append(
            f"| peak RSS, cold snapshot (max of runs) | {rss:.0f} MB | | | <= 200 MB "
            f"| {'PASS' if rss <= 200 else 'FAIL'} |"
        )
        lines.append(
            f"| store size / captured bytes | {st['store_apparent_bytes'] / 1e6:.1f} MB / "
            f"{st['captured_bytes'] / 1e6:.1f} MB | git shadow "
            f"{st['git_shadow_apparent_bytes'] / 1e6:.1f} MB | {ratio:.2f}x | <= 1.1x "
            f"| {'PASS' if ratio <= 1.1 else 'FAIL'} |"
        )
    for mode in MODES:
        if f"{mode}_peak_rss_kb" in extra:
            lines.append(
                f"| peak RSS, long-lived in-process object ({mode}) "
                f"| {extra[f'{mode}_peak_rss_kb'] / 1024:.0f} MB | | | | |"
            )
    if "daemon_vmhwm_kb" in extra:
        peak = extra["daemon_vmhwm_kb"] / 1024
        lines.append(
            f"| daemon RSS (peak), started automatically | {peak:.0f} MB | | | <= 150 MB "
            f"| {'PASS' if peak <= 150 else 'FAIL'} |"
        )
        lines.append(
            f"| daemon audit after the runs | {extra.get('daemon_audits')} run, "
            f"{extra.get('daemon_audit_differences')} differences | | | 0 | "
            f"{'PASS' if extra.get('daemon_audit_differences') == 0 else 'FAIL'} |"
        )
    if extra.get("digest_checks"):
        lines += ["", "Tree digest checks (long-lived object vs a full CLI scan): "]
        lines += [f"* {c}" for c in extra["digest_checks"]]
    peers_data = data.get("peers")
    if peers_data:
        lines += ["", "Peers on the same tree (whole process, medians of 3 after a warm-up):", ""]
        lines.append("| peer | operation | median | note |")
        lines.append("|---|---|---:|---|")
        sd = peers_data.get("snapdir_manifest", {})
        if "median" in sd:
            lines.append(
                f"| snapdir 1.12.0 | manifest of the tree | {sd['median']:.3f} s "
                f"| {sd['entries']} entries incl. dirs; .gitignore not read (regex excludes) |"
            )
        tm = peers_data.get("tidemark_snap", {})
        if "median" in tm:
            lines.append(
                f"| tidemark 0.1.4 | snap (manifest, no content) | {tm['median']:.3f} s "
                f"| first run {tm['first_run']:.3f} s; {tm['entries']} entries |"
            )
        sb = peers_data.get("stepback", {})
        if "warm_checkpoint" in sb:
            rew = sb["rewind_mad"]
            rew_s = f"{rew['median']:.3f} s" if "median" in rew else "failed"
            lines.append(
                f"| stepback 0.2.0 | checkpoint cold / warm / 10 modified | "
                f"{sb['cold_checkpoint']:.3f} / {sb['warm_checkpoint']['median']:.3f} / "
                f"{sb['checkpoint_10mod']['median']:.3f} s | throwaway index: every checkpoint "
                f"re-hashes the tree |"
            )
            lines.append(f"| stepback 0.2.0 | rewind ID --yes (M/A/D) | {rew_s} | |")
    scale = data.get("scaling")
    if scale:
        lines += ["", "Scaling (synthetic trees; medians; A = worksnap, B = git or warm snapshot):"]
        cols = [
            ("warm CLI", "warm_nochange_cli", "median_a"),
            ("warm in-proc", "warm_nochange_inproc", "median_a"),
            ("warm watch", "warm_nochange_watch", "median_a"),
            ("warm daemon", "warm_nochange_daemon", "median_a"),
            ("10 mod CLI", "warm_10mod_cli", "median_a"),
            ("10 mod in-proc", "warm_10mod_inproc", "median_a"),
            ("10 mod watch", "warm_10mod_watch", "median_a"),
            ("10 mod daemon", "warm_10mod_daemon", "median_a"),
            ("git warm", "warm_nochange_cli", "median_b"),
            ("git 10 mod", "warm_10mod_cli", "median_b"),
            ("plan CLI", "plan_cli", "median_a"),
            ("plan in-proc", "plan_inproc", "median_a"),
            ("plan watch", "plan_watch", "median_a"),
            ("plan daemon", "plan_daemon", "median_a"),
            ("warm daemon / git", "warm_nochange_daemon", "ratio"),
        ]
        lines += [
            "",
            "| files | MB | cold | git cold | " + " | ".join(c[0] for c in cols) + " |",
            "|" + "---:|" * (4 + len(cols)),
        ]
        for n in sorted(scale, key=int):
            r = scale[n]
            cells = [f"{r[key][which]:.3f}" if key in r else "" for _, key, which in cols]
            lines.append(
                f"| {r['files']} | {r['bytes'] / 1e6:.0f} | {r['cold_cli']:.2f} "
                f"| {r['git_cold']:.2f} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, default=DEFAULT_BASE, help="where the trees are")
    parser.add_argument("--ref", default="ref", help="reference tree: BASE/REF/root")
    parser.add_argument("--name", default="baseline", help="results file name")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="comma-separated scenarios (default: all)")
    parser.add_argument("--scaling", default="10000,50000,200000", help="'' to skip")
    parser.add_argument("--scaling-rounds", type=int, default=3)
    parser.add_argument(
        "--scaling-daemon-only", action="store_true", help="only the daemon rows of the scaling"
    )
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "performance-scaling.png")
    args = parser.parse_args()

    tree = args.base / args.ref
    root = tree / "root"
    if not root.is_dir():
        print(f"no tree at {root}: run benchmarks/build_workspace.py first", file=sys.stderr)
        return 2
    state = tree / "state"
    state.mkdir(exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    data: dict[str, object] = {
        "name": args.name,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine(),
        "rounds": args.rounds,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    counts_file = tree / "counts.json"
    if counts_file.exists():
        data["counts"] = json.loads(counts_file.read_text())
    start = time.monotonic()
    bench = Bench(root, state, args.rounds)
    data["results"], data["extra"] = reference_scenarios(bench, only)
    if not args.no_peers and only is None:
        print("peers", flush=True)
        data["peers"] = peers(bench, rounds=3)
    if args.scaling:
        sizes = [int(s) for s in args.scaling.split(",")]
        data["scaling"] = scale = scaling(
            args.base, sizes, args.scaling_rounds, daemon_only=args.scaling_daemon_only
        )
        if not args.scaling_daemon_only:  # the plot needs every row
            args.plot.parent.mkdir(parents=True, exist_ok=True)
            plot(scale, args.plot)  # type: ignore[arg-type]
    data["seconds"] = time.monotonic() - start
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"{args.name}.json").write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / f"{args.name}.md").write_text(markdown(data))
    print(markdown(data))
    print(f"total {data['seconds']:.0f} s; wrote {out_dir / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
