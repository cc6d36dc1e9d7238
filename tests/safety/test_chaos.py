"""Chaos: random file operations interleaved with snapshots, restores, undo, and kill -9.

A seeded random walk (the same in every CI run) drives one workspace through file
operations (writes of the same size and of a new size, creates, deletes, renames
across directories, a directory moved away and made again, `mkdir -p`, chmod, a
file swapped for a symlink and back, a file for a directory) and through worksnap:
snapshots, restores (whole or of one path), undo, redo, restores and recoveries
killed with SIGKILL at an exact system call in a real child process, recovery, and
`plan` while a recovery is pending. Part of each run is on a file system with
whole-second times (tests/coarse_fs.py).

After every step, two things are checked, with the tree read and hashed by this
file (BLAKE3 from the `blake3` package, `os.walk`), never by worksnap's code:

(a) every snapshot worksnap recorded holds exactly the bytes that were on disk when
    it was taken: a snapshot the step asked for, the tree after the step; the
    pre-restore and pre-recover snapshots worksnap took on its own, the tree before
    the step (without the temp files a killed restore leaves); a restore or undo
    that succeeded leaves exactly its target's bytes;
(b) no byte that was in the tree before a worksnap step is lost by it: each file's
    content is still on disk or held by a stored snapshot whose object is readable.

WORKSNAP_CHAOS_STEPS (steps per run, 1,000 by default: 2,000 in all) and
WORKSNAP_CHAOS_SEED (1 by default) make longer or other runs.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from blake3 import blake3

from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401  (fixtures)
from worksnap import InputError, RecoveryError, Workspace
from worksnap.manifest import Manifest

from .test_kill import CHILD, SRC

pytestmark = pytest.mark.slow  # thousands of steps, real processes killed

STEPS = int(os.environ.get("WORKSNAP_CHAOS_STEPS", "1000"))
SEED = int(os.environ.get("WORKSNAP_CHAOS_SEED", "1"))

STORE = ".worksnap"
LEFTOVER = re.compile(r"(^|/)\.worksnap-[0-9a-f]{12}\.tmp$")
RECOVER_CHILD = CHILD.replace("result = ws.restore(target)", "result = ws.recover()")
KILL_STEPS = ["unlink", "rmdir", "mkdir", "open temp file", "write", "fsync file", "rename"]

# What the tree holds, as this file reads it: path -> ("file", mode, BLAKE3 hex)
# | ("link", target) | ("dir",).
State = dict[str, tuple[object, ...]]


def read_tree(root: Path) -> State:
    """The tree's content, read and hashed here (the store itself left out)."""
    state: State = {}
    for directory, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != STORE]
            rel_dir = ""
        for name in dirnames + filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir",)
            else:
                with open(full, "rb") as f:
                    state[rel] = ("file", stat.S_IMODE(st.st_mode), blake3(f.read()).hexdigest())
    return state


def of_manifest(manifest: Manifest) -> State:
    """What a manifest says the tree held."""
    state: State = dict.fromkeys(manifest.dirs, ("dir",))
    for e in manifest.entries:
        state[e.path] = ("link", e.target) if e.type == "symlink" else ("file", e.mode, e.hash)
    return state


def without_leftovers(state: State) -> State:
    """The state without the temp files (not dirs) a killed restore left: recovery sweeps them."""
    return {p: v for p, v in state.items() if v[0] == "dir" or not LEFTOVER.search(p)}


def contents(state: State) -> set[str]:
    return {str(v[2]) for v in state.values() if v[0] == "file"}


@dataclass
class Chaos:
    """One random walk over one workspace; `check` failures say which step and seed."""

    root: Path
    rng: random.Random
    label: str
    ws: Workspace | None = None
    expected: dict[str, State] = field(default_factory=dict)
    """Every snapshot's id -> the tree it must hold (as read here when it was taken)."""
    manifests: dict[str, set[str]] = field(default_factory=dict)
    """Every snapshot's id -> the contents (digests) it holds, loaded once."""
    step: int = 0
    kills: int = 0
    names: Iterator[int] = field(default_factory=lambda: iter(range(10**9)))

    # -- the workspace --------------------------------------------------------

    def workspace(self) -> Workspace:
        if self.ws is None or self.rng.random() < 0.1:  # a fresh process's view, now and then
            if self.ws is not None:
                self.ws.close()
            self.ws = Workspace(self.root)
        return self.ws

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.ws = None

    def pending(self) -> bool:
        return (self.root / STORE / "journal.json").exists()

    # -- file operations ------------------------------------------------------

    def paths(self, kind: str) -> list[str]:
        return sorted(p for p, v in read_tree(self.root).items() if v[0] == kind)

    def new_name(self, prefix: str = "f") -> str:
        return f"{prefix}{next(self.names)}"

    def some_dir(self) -> Path:
        dirs = self.paths("dir")
        return self.root / self.rng.choice(dirs) if dirs and self.rng.random() < 0.8 else self.root

    def data(self, size: int | None = None) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, 300) if size is None else size)

    def file_op(self) -> str:
        rng = self.rng
        files, links, dirs = self.paths("file"), self.paths("link"), self.paths("dir")
        op = rng.choice(
            ["same size", "new size", "create", "create", "delete", "rename", "move dir",
             "mkdir -p", "chmod", "symlink swap", "type swap"]
        )  # fmt: skip
        if op in ("same size", "new size", "delete", "rename", "chmod") and not files:
            op = "create"
        if op == "same size":
            path = self.root / rng.choice(files)
            path.write_bytes(self.data(path.stat().st_size))  # the racy case: times may not move
        elif op == "new size":
            (self.root / rng.choice(files)).write_bytes(self.data())
        elif op == "create":
            (self.some_dir() / self.new_name()).write_bytes(self.data())
        elif op == "delete":
            (self.root / rng.choice(files + links)).unlink()
        elif op == "rename":
            os.rename(self.root / rng.choice(files), self.some_dir() / self.new_name())
        elif op == "move dir" and dirs:
            moved = self.root / rng.choice(dirs)
            target = self.root / self.new_name("moved")
            if not str(target).startswith(str(moved) + "/"):
                os.rename(moved, target)
                moved.mkdir()  # made again, empty, where it was
                if rng.random() < 0.5:
                    (moved / self.new_name()).write_bytes(self.data())
        elif op == "mkdir -p":
            parts = [self.new_name("d") for _ in range(rng.randint(1, 3))]
            (self.some_dir().joinpath(*parts)).mkdir(parents=True)
        elif op == "chmod":
            os.chmod(self.root / rng.choice(files), rng.choice([0o644, 0o600, 0o755, 0o700]))
        elif op == "symlink swap":
            if links and rng.random() < 0.5:
                link = self.root / rng.choice(links)
                link.unlink()
                if rng.random() < 0.5:
                    os.symlink(self.new_name("target"), link)
                else:
                    link.write_bytes(self.data())  # a link becomes a file
            elif files:
                path = self.root / rng.choice(files)
                path.unlink()
                os.symlink(rng.choice(["../x", "a/b", self.new_name("t")]), path)
        elif op == "type swap" and files:
            path = self.root / rng.choice(files)
            path.unlink()
            path.mkdir()
            (path / self.new_name()).write_bytes(self.data())
        return op

    # -- worksnap operations --------------------------------------------------

    def snapshots(self) -> list[str]:
        return list(self.expected)  # in the order they were taken: the same in every run

    def record_new(self, before: State, after: State, asked: str | None) -> None:
        """Checks (a) for every snapshot the step made, and remembers what each holds."""
        ws = Workspace(self.root)
        try:
            for summary in ws.list(all_sessions=True):
                if summary.id in self.expected:
                    continue
                manifest = ws.load(summary.id)
                got = of_manifest(manifest)
                if summary.id == asked:
                    wanted = after
                elif summary.kind == "pre-recover":
                    # Taken once the temp files of the killed restore are swept from the
                    # directories it wrote; one the user moved elsewhere since may stay.
                    wanted, got = without_leftovers(before), without_leftovers(got)
                else:  # pre-restore, undo, redo: the tree as the step found it
                    assert summary.kind in ("pre-restore", "undo", "redo"), summary.kind
                    wanted = before
                assert got == wanted, self.where(
                    f"{summary.kind} snapshot {summary.id}", got, wanted
                )
                self.expected[summary.id] = wanted
                self.manifests[summary.id] = contents(got)
        finally:
            ws.close()

    def check_nothing_lost(self, before: State, after: State) -> None:
        """(b): every content the tree held before the step is on disk or in a snapshot."""
        before = without_leftovers(before)  # a killed restore's temp files are its own
        kept = contents(after).union(*self.manifests.values())
        lost = contents(before) - kept
        assert not lost, self.where(f"lost {len(lost)} contents", sorted(lost), [])
        ws = Workspace(self.root)
        try:
            for digest in contents(before) - contents(after):
                ws.store.read(digest)  # held by a snapshot: its object is there and intact
        finally:
            ws.close()

    def where(self, what: str, got: object, wanted: object) -> str:
        return f"{self.label} step {self.step}: {what}\n got {got}\nwanted {wanted}"

    def worksnap_op(self) -> str:
        rng = self.rng
        if self.pending():
            op = rng.choice(["recover", "recover", "snapshot", "kill recovery", "plan"])
        else:
            op = rng.choices(
                ["snapshot", "restore", "restore path", "undo", "redo", "kill restore"],
                weights=[40, 22, 6, 10, 4, 8],
            )[0]
            if op != "snapshot" and not self.expected:
                op = "snapshot"
        before = read_tree(self.root)
        asked: str | None = None
        target: str | None = None
        if op == "snapshot":
            asked = self.workspace().snapshot().id
        elif op == "restore":
            target = rng.choice(self.snapshots())
            result = self.workspace().restore(target)
            assert result.ok, self.where("restore failed", result.error, None)
        elif op == "restore path":
            target = rng.choice(self.snapshots())
            chosen = sorted(before.keys() | self.expected[target].keys())
            if chosen:
                path = rng.choice(chosen)
                result = self.workspace().restore(target, paths=[path])
                assert result.ok, self.where("restore of a path failed", result.error, None)
                self.check_path_restore(before, target, path)
            target = None
        elif op in ("undo", "redo"):
            try:
                result = getattr(self.workspace(), op)()
            except InputError:
                result = None  # nothing to undo or redo
            if result is not None:
                assert result.ok, self.where(f"{op} failed", result.error, None)
                target = result.target
        elif op == "plan":
            with pytest.raises(RecoveryError):
                self.workspace().plan_restore(self.workspace().load(rng.choice(self.snapshots())))
            assert read_tree(self.root) == before, self.where("plan changed the tree", None, None)
        elif op == "recover":
            assert self.workspace().recover() is not None
        else:  # a child process killed with SIGKILL at one exact system call
            self.close()
            script = RECOVER_CHILD if op == "kill recovery" else CHILD
            victim = "-" if op == "kill recovery" else rng.choice(self.snapshots())
            step, nth = rng.choice(KILL_STEPS), rng.randint(1, 6)
            child = subprocess.run(
                [sys.executable, "-c", script, str(self.root), victim, step, str(nth)],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": SRC},
                check=False,
                timeout=120,
            )
            assert child.returncode in (0, -signal.SIGKILL), self.where(op, child.stderr, None)
            self.kills += child.returncode == -signal.SIGKILL
            if child.returncode == 0 and op == "kill restore":
                target = victim  # the kill came too late: the restore finished
        after = read_tree(self.root)
        if target is not None:
            # A temp-named file the user moved away from a killed restore's directories
            # may be in a snapshot; worksnap may sweep it later (docs/safety.md).
            got, wanted = without_leftovers(after), without_leftovers(self.expected[target])
            assert got == wanted, self.where(f"{op} of {target}", got, wanted)
        self.record_new(before, after, asked)
        self.check_nothing_lost(before, after)
        assert (op not in ("recover", "snapshot")) or not self.pending()
        return op

    def check_path_restore(self, before: State, target: str, path: str) -> None:
        """A restore of one path: below it, the target's files; elsewhere, what was there."""
        after, then = read_tree(self.root), self.expected[target]
        for p in before.keys() | after.keys() | then.keys():
            inside = p == path or p.startswith(path + "/")
            if (before.get(p, ("dir",))[0] == "dir") or (then.get(p, ("dir",))[0] == "dir"):
                continue  # directories come and go with what is in them
            wanted = then.get(p) if inside else before.get(p)
            assert after.get(p) == wanted, self.where(
                f"restore of {path}: {p}", after.get(p), wanted
            )

    def run(self, steps: int) -> None:
        for self.step in range(steps):
            if self.rng.random() < 0.55:
                self.file_op()
            else:
                self.worksnap_op()
        if self.pending():
            self.workspace().recover()
        self.close()
        ws = Workspace(self.root)
        try:
            assert ws.verify() == [], self.where("verify", ws.verify(), [])
        finally:
            ws.close()


def _start(root: Path, rng: random.Random) -> None:
    for d in ("src", "docs", "src/pkg"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for i in range(8):
        (root / rng.choice(["", "src", "docs", "src/pkg"]) / f"init{i}").write_bytes(
            rng.randbytes(rng.randint(0, 200))
        )


def test_chaos_on_a_file_system_with_fine_times(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    rng = random.Random(SEED)
    _start(root, rng)
    chaos = Chaos(root, rng, "fine times")
    chaos.run(STEPS)
    assert chaos.kills > 0 and len(chaos.expected) > 10


def test_chaos_on_a_file_system_with_whole_second_times(coarse_tmp: Path) -> None:  # noqa: F811
    root = coarse_tmp / "ws"
    root.mkdir()
    rng = random.Random(SEED + 1_000_003)
    _start(root, rng)
    chaos = Chaos(root, rng, "whole-second times")
    try:
        chaos.run(STEPS)
    finally:
        chaos.close()
        shutil.rmtree(root, ignore_errors=True)  # the loop mount is small: free it for others
    assert chaos.kills > 0 and len(chaos.expected) > 10
