"""The watcher against the plain scan it replaces: after every step, the same manifest.

A seeded random walk of file operations of every kind (tests/watchops.py) runs
against a tree watched by a long-lived `Workspace(watch=True)`, by the daemon, and
on a file system with whole-second timestamps (under a size cap the walk's files
cross both ways); the watched workspace now and then
restores an earlier snapshot, and the operations go on on what it wrote. After each
step the watched snapshot is compared with a plain capture of the same tree: a fresh
`Workspace` with no watcher, no caches and no store, which reads every rule and hashes
every file; and its root tree (built from the last capture's, treebuild.py) with
`treebuild.from_flat` of that plain capture. Some captures are made to fail part-way
(as a directory vanishing under a scan does): the events they took must not be lost.
The watched workspace runs under exclusion rules (a path, patterns, a directory-only
pattern), and the daemon gets them from `config exclude add` half-way: what they
exclude is never captured by the watched path either. After every snapshot that matched,
the watched memory is audited (`Workspace.audit`, the daemon's `audit`): each stat it
vouches for must be what a plain scan finds now, or a stale one harmless by design.

A fourth walk opens a new workspace at every step, as a plain command does: its caches
come from the store alone.

Derandomized: `WORKSNAP_WATCH_SEED` (default 1) and `WORKSNAP_WATCH_STEPS` (default
5000 operations over the four tests; CI runs the default) choose the walk;
`WORKSNAP_WATCH_BUDGET` (default 600) bounds the files of its tree.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401
from tests.compat.gitrun import GIT, clean_git_env, init_repo
from tests.watchops import Ops, records_hold
from worksnap import Workspace, client, daemon
from worksnap.apply import Result, apply_plan
from worksnap.errors import SnapshotError
from worksnap.flatbuild import from_flat
from worksnap.manifest import Manifest, decode_manifest
from worksnap.paths import ancestors
from worksnap.scan import Scan, scan_tree
from worksnap.treewalk import Flat
from worksnap.workspace import Seams

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

STEPS = int(os.environ.get("WORKSNAP_WATCH_STEPS", "5000"))
SEED = int(os.environ.get("WORKSNAP_WATCH_SEED", "1"))
BUDGET = int(os.environ.get("WORKSNAP_WATCH_BUDGET", "600"))
"""Files the walk's tree may hold before it removes some (`Ops`): a long run stays as
fast per step as a short one (CI's walks stay below 600; a long run may ask for fewer,
each step then capturing a smaller tree)."""
EXCLUDE = ("src/main.py", "*.bin", "deep/", "z", "b/x*")
"""Exclusion rules (exclusion.py) on names the random operations make."""


def plain_capture(
    root: Path, store: Path, exclude: tuple[str, ...] = (), max_file_bytes: int | None = None
) -> Manifest:
    """What a process that never watched would capture: no caches, rules read afresh."""
    with Workspace(root, store=store, exclude=exclude, max_file_bytes=max_file_bytes) as ws:
        return ws.capture(store_objects=False)


def differences(watched: Manifest, plain: Manifest) -> list[str]:
    """Every way two manifests of the same tree differ (empty when they agree)."""
    found: list[str] = []
    mine = {e.path: e for e in watched.entries}
    theirs = {e.path: e for e in plain.entries}
    for path in sorted(mine.keys() | theirs.keys()):
        if mine.get(path) != theirs.get(path):
            found.append(f"{path}: watched {mine.get(path)}, plain {theirs.get(path)}")
    for name in ("dirs", "ignored", "large", "excluded"):
        ours, now = set(getattr(watched, name)), set(getattr(plain, name))
        found += [f"{name}: only watched {p}" for p in sorted(ours - now)]
        found += [f"{name}: only plain {p}" for p in sorted(now - ours)]
    # What the planner relies on (`plan.unprotected`): nothing is captured at or below a
    # path the scan lists as ignored.
    ignored = set(plain.ignored)
    found += [
        f"{e.path}: captured at or below an ignored path"
        for e in plain.entries
        if any(a in ignored for a in ancestors(e.path))
    ]
    return found


class Flaky:
    """A scan that, when armed, fails part-way through the walk (a directory vanishing)."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.armed = False
        self.failed = 0
        self.meddle: Callable[[], None] | None = None
        """Run once, between a restore's pre-restore capture and its apply (another
        process acting then; not again before a rollback's apply, whose plan would be
        stale and fail, as it should)."""
        self.seams = Seams(scan_tree=self._scan_tree, apply_plan=self._apply_plan)

    def _apply_plan(self, *args: Any, **kwargs: Any) -> Result:
        meddle, self.meddle = self.meddle, None
        if meddle is not None:
            meddle()
        return apply_plan(*args, **kwargs)

    def _scan_tree(self, *args: Any, **kwargs: Any) -> Scan:
        if not self.armed:
            return scan_tree(*args, **kwargs)
        self.armed = False
        budget = [self.rnd.randint(0, 6)]

        def check() -> None:
            budget[0] -= 1
            if budget[0] < 0:
                self.failed += 1
                raise SnapshotError("somewhere", "vanished while it was scanned (injected)")

        return scan_tree(*args, check=check, **kwargs)


def seed_tree(root: Path, rnd: random.Random) -> None:
    """The tree each walk starts from."""
    for rel in ("src/main.py", "src/lib/util.py", "docs/a.log", "keep.log", "build/b.o", "README"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(rnd.randint(0, 200)))
    (root / ".gitignore").write_text("*.log\n!keep.log\nbuild/\n")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A repository in a clean git environment: (root, its git dir, the global excludes file)."""
    xdg = clean_git_env(monkeypatch, tmp_path / "home")
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    return root, root / ".git", xdg / "git" / "ignore"


def walk(
    root: Path,
    git_dir: Path | None,
    global_excludes: Path | None,
    outside: Path,
    steps: int,
    seed: int,
    *,
    snapshot: Callable[[], Manifest],
    plain: Callable[[], Manifest],
    flaky: Flaky | None,
    label: str,
    links_outside: int = 3,
    restore: Callable[[str], object] | None = None,
    load: Callable[[str], Manifest] | None = None,
    audit: Callable[[], list[str]] | None = None,
    watch: Callable[[], object] | None = None,
) -> None:
    """Runs `steps` random operations; after each batch, compares `snapshot()` with `plain()`.

    With `restore`, a batch now and then starts by restoring an earlier snapshot (by
    id): the operations that follow act on the files it wrote. With `load`, an earlier
    snapshot loaded now and then must hold exactly what its capture held (a watched
    workspace takes what it shares with the last capture from there:
    `treewalk.subtrees_of`). With `audit`, the watcher's memory is audited after every
    snapshot that matched (`Workspace.audit`): what it vouches for, file by file, must be
    what a plain scan finds (a stale stat fails here long before it makes a wrong
    snapshot). `watch`, if given, starts the watcher once the links outside the tree are
    made (a link made outside after the watcher looked at a file raises no event: the
    documented limit, not what the walk tests).
    """
    rnd = random.Random(seed)
    watched = [""]
    ops = Ops(
        root, rnd, git_dir=git_dir, global_excludes=global_excludes, outside=outside,
        watched=lambda: watched, budget=BUDGET,
    )  # fmt: skip
    ops.link_outside(links_outside)  # only before a watch: a later one raises no event
    if watch is not None:
        watch()
    ops.note_watched()
    history: list[str] = []
    refs: list[str] = []  # the snapshots taken, to restore
    kept: dict[str, Manifest] = {}  # some of them as captured, to load again

    def meddle() -> None:  # another process, while a restore runs, before its apply
        for _ in range(rnd.choice([0, 0, 1, 2])):
            history.append(f"(during the restore) {ops.step()}")

    done = 0
    start = time.monotonic()
    try:
        while done < steps:
            if restore is not None and refs and rnd.random() < 0.05:
                ref = rnd.choice(refs)
                if flaky is not None:
                    flaky.meddle = meddle
                history.append(f"restore {ref}")
                restore(ref)
                if flaky is not None:
                    flaky.meddle = None  # nothing to apply: not used
            for _ in range(rnd.choice([1, 1, 1, 2, 3])):
                history.append(ops.step())
                done += 1
            if flaky is not None and rnd.random() < 0.05:
                flaky.armed = True
                try:
                    snapshot()
                    history.append("(a capture the injected failure did not reach)")
                except SnapshotError:
                    history.append("(a capture failed part-way)")
                flaky.armed = False
            taken = snapshot()
            refs.append(taken.id)
            if load is not None:
                kept[taken.id] = taken
                if len(kept) > 64:
                    del kept[rnd.choice(list(kept))]
                if rnd.random() < 0.3:
                    ref = rnd.choice(list(kept))
                    loaded, was = load(ref), kept[ref]
                    fields = ("entries", "dirs", "ignored", "large", "excluded")
                    if any(getattr(loaded, f) != getattr(was, f) for f in fields):
                        pytest.fail(
                            f"{label}, seed {seed}, after {done} steps: snapshot {ref} loads as "
                            f"other than it was captured:\n  "
                            + "\n  ".join(differences(loaded, was)[:20] or ["(in order only)"]),
                            pytrace=False,
                        )  # fmt: skip
            expected = plain()
            watched[:] = ["", *expected.dirs]
            ops.note_watched()
            wrong = differences(taken, expected)
            slow = from_flat(Flat.of(expected), lambda digest, data: None)[0]
            if not wrong and taken.tree != slow:  # the trees built from the last capture's
                wrong = [f"root tree {taken.tree}, but from_flat of the plain capture: {slow}"]
            if not wrong and audit is not None:
                wrong = [f"the audit found: {line}" for line in audit()]
            if wrong:
                pytest.fail(
                    f"{label}, seed {seed}, after {done} steps: the watched snapshot differs from "
                    f"a plain capture:\n  " + "\n  ".join(wrong[:20]) + "\nlast steps:\n  "
                    + "\n  ".join(history[-15:]),
                    pytrace=False,
                )  # fmt: skip
    finally:
        ops.close()  # the descriptors it kept open
    print(
        f"{label}: {done} steps, seed {seed}, {time.monotonic() - start:.1f} s, "
        f"{ops.pruned} over the budget of files"
    )


def test_a_watched_workspace_matches_a_plain_capture(
    repo: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    root, git_dir, global_excludes = repo
    rnd = random.Random(SEED)
    seed_tree(root, rnd)
    outside = tmp_path / "outside"
    outside.mkdir()
    flaky = Flaky(random.Random(SEED + 1))
    ruled: set[str] = set()

    def plain() -> Manifest:
        found = plain_capture(root, tmp_path / "plain-store", EXCLUDE)
        ruled.update(p for p in found.excluded if p.endswith((".bin", "z", "main.py")))
        return found

    with Workspace(
        root, store=tmp_path / "store", watch=True, seams=flaky.seams, exclude=EXCLUDE
    ) as ws:
        assert ws.watching

        def snapshot() -> Manifest:
            taken = ws.snapshot()
            # The bytes the record and the snapshot say, as the trees built add them up.
            assert ws.total_bytes(taken) == sum(e.size or 0 for e in taken.entries)
            records_hold(ws, root, taken)  # the stat records carried over are the tree's
            return taken

        walk(
            root, git_dir, global_excludes, outside, STEPS * 5 // 10, SEED,
            snapshot=snapshot,
            plain=plain,
            flaky=flaky,
            label="watched workspace",
            restore=ws.restore,
            load=ws.load,
            audit=ws.audit,
        )  # fmt: skip
    assert flaky.failed > 0  # the failure path was taken
    assert ruled  # the rules excluded something the walk made


def test_a_new_workspace_at_every_step_matches_a_plain_capture(
    repo: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """What a plain command does at every step: a new process's caches, read back from the
    store (the stat cache's base and log, the listings, the tree cache), vouch for nothing
    a plain capture would not find."""
    root, git_dir, global_excludes = repo
    rnd = random.Random(SEED + 3)
    seed_tree(root, rnd)
    outside = tmp_path / "outside"
    outside.mkdir()
    log = tmp_path / "store" / "cache" / "stat.log"
    logged, unwalked = [0], [0]
    margin = Seams(racy_margin_ns=20_000_000)  # a tick of the kernel's clock is 4 ms at most
    pauses = random.Random(SEED + 4)

    def snapshot() -> Manifest:
        if pauses.random() < 0.8:
            # Every change older than the margin: every file's record is kept, and the
            # capture too (`lastcapture.py`), to be taken again when nothing it rested on
            # moved. Else changes within the margin: states not trusted, hashed again.
            time.sleep(0.025)
        with Workspace(root, store=tmp_path / "store", exclude=EXCLUDE, seams=margin) as ws:
            taken = ws.snapshot()
            unwalked[0] += ws._capture.last.taken
        logged[0] += log.exists()
        return taken

    walk(
        root, git_dir, global_excludes, outside, STEPS // 10, SEED + 3,
        snapshot=snapshot,
        plain=lambda: plain_capture(root, tmp_path / "plain-store", EXCLUDE),
        flaky=None,
        label="a new workspace per step",
    )  # fmt: skip
    assert logged[0] > 0  # the stat cache's log was written and read back
    assert unwalked[0] > 0  # the last capture was taken again
    print(f"  {unwalked[0]} snapshots taken without a walk")


def test_a_new_workspace_per_step_on_a_coarse_file_system(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    """Whole seconds: what a plain command keeps of its capture (`lastcapture.py`) is trusted
    only once a tick old, and a file rewritten within its tick is hashed again."""
    root = coarse_tmp / "ws"
    root.mkdir()
    seed_tree(root, random.Random(SEED + 5))
    outside = coarse_tmp / "outside"
    outside.mkdir()
    cap, unwalked = 2048, [0]
    pauses = random.Random(SEED + 6)

    def snapshot() -> Manifest:
        if pauses.random() < 0.25:
            time.sleep(1.05)  # now and then, everything a tick old: the capture is kept
        with Workspace(root, store=tmp_path / "store", max_file_bytes=cap) as ws:
            taken = ws.snapshot()
            unwalked[0] += ws._capture.last.taken
        return taken

    walk(
        root, None, None, outside, STEPS // 50, SEED + 5,
        snapshot=snapshot,
        plain=lambda: plain_capture(root, tmp_path / "plain-store", max_file_bytes=cap),
        flaky=None,
        label="a new workspace per step, coarse file system",
    )  # fmt: skip
    shutil.rmtree(coarse_tmp)
    assert unwalked[0] > 0  # the last capture was taken again
    print(f"  {unwalked[0]} snapshots taken without a walk")


def test_a_watched_workspace_on_a_coarse_file_system(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    root = coarse_tmp / "ws"
    root.mkdir()
    rnd = random.Random(SEED + 2)
    seed_tree(root, rnd)
    outside = coarse_tmp / "outside"
    outside.mkdir()
    # Whole seconds: a cached stat or listing is trusted only once a full second old
    # (what the capture's racy margin becomes on such a file system).
    seams = Seams(racy_margin_ns=2_000_000_000)
    # The store is elsewhere: the 64 MB image would fill up over a long run. A size cap
    # the walk's files cross both ways (3,000 bytes are made, and grown by 700): what
    # is over it is left out as large, and comes back when it shrinks.
    cap, capped = 2048, [0]
    with Workspace(
        root, store=tmp_path / "store", watch=True, seams=seams, max_file_bytes=cap
    ) as ws:

        def snapshot() -> Manifest:
            taken = ws.snapshot()
            capped[0] += bool(taken.large)
            return taken

        walk(
            root, None, None, outside, STEPS * 15 // 100, SEED + 2,
            snapshot=snapshot,
            plain=lambda: plain_capture(root, tmp_path / "plain-store", max_file_bytes=cap),
            flaky=None,
            label="coarse file system",
            audit=ws.audit,
        )  # fmt: skip
    shutil.rmtree(coarse_tmp)
    assert capped[0] > 0  # files over the cap were met


class Forwarded:
    """Runs commands in a daemon from this process, as the client does, through pipes."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, *argv: str) -> tuple[int, bytes]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            command = ["--root", str(self.root), *argv]
            code = client.forward(command, str(self.root), None, fds=(null, out_w, err_w))
        finally:
            os.close(null)
            os.close(out_w)
            os.close(err_w)
        with open(out_r, "rb") as out, open(err_r, "rb") as err:
            data, problem = out.read(), err.read()
        assert code is not None, "the daemon did not take the command"
        assert code == 0, problem.decode(errors="replace")
        return code, data


def test_the_daemon_matches_a_plain_capture(repo: tuple[Path, Path, Path], tmp_path: Path) -> None:
    root, git_dir, global_excludes = repo
    rnd = random.Random(SEED + 4)
    seed_tree(root, rnd)
    outside = tmp_path / "outside"
    outside.mkdir()
    store = str(root / ".worksnap")
    run = Forwarded(root)
    last_plain: list[Manifest] = []
    excluded: list[str] = [".worksnap"]
    try:

        def snapshot() -> Manifest:
            _, out = run("--json", "snapshot")
            taken = json.loads(out)
            expected = plain_capture(root, tmp_path / "plain-store", tuple(excluded))
            summary = {
                "tree": expected.tree,
                "ignored": len(expected.ignored),
                "large": len(expected.large),
                "excluded": len(expected.excluded),
            }
            last_plain[:] = [expected]
            if {k: taken[k] for k in summary} == summary:
                assert taken["bytes"] == sum(e.size or 0 for e in expected.entries)
                return expected  # the same tree digest: entries and directories agree
            _, shown = run("--json", "show", taken["id"])
            return decode_manifest(shown, "show --json")

        audits = [0]

        def audit() -> list[str]:  # the daemon's own audit, asked for now
            found = client.request(store, "audit")
            assert found is not None
            assert found["audits"] > audits[0], "no audit ran"
            audits[0] = found["audits"]
            if not found["audit_differences"]:
                return []
            log = (root / ".worksnap" / "daemon.log").read_text()
            return [line for line in log.splitlines() if "the watcher missed" in line]

        half = STEPS * 25 // 100 // 2
        walk(
            root, git_dir, global_excludes, outside, half, SEED + 4,
            snapshot=snapshot,
            plain=lambda: last_plain[0],  # taken right after the daemon's snapshot
            flaky=None,
            label="daemon",
            audit=audit,
            # Its warm-up capture starts the watch (once the walk's links outside are made).
            watch=lambda: daemon.start(str(root), store, idle=600, force=False),
        )  # fmt: skip
        # The daemon's workspace follows the config change (config.json's rules).
        run("config", "exclude", "add", *EXCLUDE)
        excluded += EXCLUDE
        walk(
            root, git_dir, global_excludes, outside, half, SEED + 5,
            snapshot=snapshot,
            plain=lambda: last_plain[0],
            flaky=None,
            label="daemon under exclusion rules",
            links_outside=0,
            audit=audit,
        )  # fmt: skip
        assert last_plain[0].exclude  # the rules were in force
        status = client.request(store, "status")
        assert status is not None
        assert status["requests"] > 0
        assert audit() == []
    finally:
        daemon.stop(store)
