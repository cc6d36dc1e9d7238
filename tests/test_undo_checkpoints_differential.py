"""Undo's fast choice among checkpoints, held equal to planning each rewind (a seeded walk).

`history.checkpoint_changes` decides, for each checkpoint undo walks past, whether a
rewind to it changes something now, without planning it: it compares the paths the
checkpoints know, leaves out what the capture now leaves out, and memoizes answers by
the later checkpoints that captured something. The slow and obvious answer plans the
rewind as `restore` does (`Workspace.plan_restore`: `checkpoint_rewind`, then the planner
with the ignore rules the rewind leaves in force, its size cap and the protections) and
asks whether the plan holds a change a restore makes. A `B` (blocked) change is listed
and never made: a plan of only those restores nothing (`restore` runs no apply for it,
keeps no pre-restore snapshot, pushes no redo frame), so an undo that went there would say
"restored 0 paths" and go there again next time. README: undo goes back to "the newest
[snapshot] whose files or directories differ from the tree now (ignored, large and
excluded paths do not count, since no restore changes them); a checkpoint counts as
what rewinding it would restore".

The walk drives a real workspace through the public API: agent turns (`begin`, then
tool calls that `capture_before` each path they write: files, symlinks, paths through
a symlinked directory, directories removed whole, files turned into directories and
back, mode changes, files over the size cap, `.gitignore` files), turns that capture
nothing, the user's edits (never captured; ignored files too), `.gitignore` edits that
make captured paths ignored or not, size cap changes (`config max-file-bytes`), the
workspace opened again under other exclusion rules, plain snapshots, undo, redo and
restores (of snapshots and checkpoints; half of the undos and redos previewed first, then
that plan applied, as at a terminal). After every step, for every checkpoint of the
session, the fast answer is compared with the slow one, and what `plan_undo` targets
with the newest snapshot or checkpoint (older than the last undo's target, undo and redo
snapshots never) whose planned rewind changes something.

A `.gitignore` over the size cap is in no snapshot, so a rewind leaves it as it is: the
planner decides by the rules the rewind leaves in force (`plan.target_ignores`; found by
this walk, `test_undo_after_a_turn_made_the_gitignore_larger_than_the_cap`).

Derandomized: `WORKSNAP_UNDO_STEPS` (default 400) and `WORKSNAP_UNDO_SEED` (default 1)
choose the walk; every `EPISODE` steps it goes on in a new session (and a new
`Workspace`), so a long run stays as fast per step as a short one. A failure prints the
seed, the step and every operation so far.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from worksnap import InputError, Workspace
from worksnap.history import (
    CHECKPOINT,
    UNDO_KINDS,
    Sessions,
    checkpoint_changes,
    states_at_cap,
)
from worksnap.manifest import Manifest
from worksnap.plan import Op, Plan

STEPS = int(os.environ.get("WORKSNAP_UNDO_STEPS", "400"))
SEED = int(os.environ.get("WORKSNAP_UNDO_SEED", "1"))
EPISODE = 120
"""Steps of one session: the checks plan a rewind to each of its checkpoints at every step."""

AGENT = ["a", "b", "x", "x/y", "x/z", "x/y/w", "big", "big/f", "n/m", "s", "L/y", "d.log",
         ".gitignore", "x/.gitignore"]  # fmt: skip
"""What the agent's tools write (`L` leads to `x`; `x`, `x/y`, `big` and `n` are files at
times, directories at others)."""
USER = [*AGENT, "u", "x/u", "n/v.log"]
"""What the user edits, never captured."""
RULES = ["*.log", "x/y", "a", "big", "x/", "!d.log", "n/", "y", "w", "/s"]
"""Lines of the `.gitignore` files written: captured paths become ignored, and not."""
CAPS = ["64", "128", "4096"]
"""Size caps: a 100-byte file is large under the first only."""
EXCLUDE = [(), (), ("u",), ("a",), ("x/z", "u"), ("x/y",), ("big",), ("x/.gitignore",)]
"""Exclusion rules the workspace is opened with: captured paths become excluded, and not."""
DIRS = ["x", "x/y", "big", "n"]


@dataclass
class Difference:
    """The fast path and the slow one disagree, after the step `step` of the walk."""

    step: int
    what: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.what}"


@dataclass
class Walk:
    """A workspace, a seeded generator, and the log of what was done to them."""

    root: Path
    rng: random.Random
    log: list[str] = field(default_factory=list)
    ws: Workspace | None = None
    session: int = 0
    turn: int = 0
    exclude: tuple[str, ...] = ()

    @property
    def workspace(self) -> Workspace:
        assert self.ws is not None
        return self.ws

    def note(self, text: str) -> None:
        self.log.append(f"{len(self.log)}: {text}")

    def new_session(self) -> None:
        if self.ws is not None:
            self.ws.close()
        self.session += 1
        self.ws = Workspace(self.root, session=f"walk-{self.session}", exclude=self.exclude)
        if self.session == 1:
            self.ws.set_config("max-file-bytes", CAPS[0])
        self.note(f"new session walk-{self.session}")
        self.turn += 1
        self.ws.begin(step=self.turn, label=f"turn {self.turn}")
        self.note(f"begin turn {self.turn}")

    # -- what the agent does ---------------------------------------------------

    def capture(self, path: str) -> bool:
        """Captures `path` as a hook does before a tool writes it (False: the tool fails)."""
        try:
            self.workspace.capture_before([path])
        except InputError as exc:
            if "is excluded" in str(exc):
                self.note(f"  capture {path} refused: {exc}")
                return True  # a hook fails open: the tool writes, uncaptured
            refusals = ("is not a file or symlink", "make a loop", "cannot follow its symbolic")
            if not any(refusal in str(exc) for refusal in refusals):
                raise  # (a directory there, a loop, a symlink to a file above: the tool fails)
            self.note(f"  capture {path} refused: {exc}")
            return False
        return True

    def agent(self) -> None:
        rng = self.rng
        op = rng.choice(["write", "write", "write", "delete", "remove_dir", "to_dir",
                         "to_file", "symlink", "chmod", "large", "gitignore"])  # fmt: skip
        if op == "remove_dir":
            top = rng.choice(DIRS)
            if not _is_dir(self.root / top):
                return
            below = _below(self.root / top)
            self.note(f"agent removes {top}/ whole ({len(below)} captured)")
            if all(self.capture(f"{top}/{rel}") for rel in below):
                shutil.rmtree(self.root / top)
            return
        if op == "to_dir":  # a file (or symlink) turned into a directory
            top = rng.choice(DIRS)
            full = self.root / top
            if _is_dir(full) or not (full.is_symlink() or full.exists()):
                return
            self.note(f"agent turns {top} into a directory")
            if self.capture(top) and self.capture(f"{top}/c"):
                full.unlink()
                _write(full / "c", rng.randbytes(3))
            return
        if op == "to_file":  # a directory turned into a file
            top = rng.choice(DIRS)
            full = self.root / top
            if not _is_dir(full):
                return
            below = _below(full)
            self.note(f"agent turns {top}/ into a file ({len(below)} captured)")
            if all(self.capture(f"{top}/{rel}") for rel in below) and self.capture(top):
                shutil.rmtree(full)
                _write(full, rng.randbytes(4))
            return
        if op == "gitignore":
            path = rng.choice([".gitignore", ".gitignore", "x/.gitignore"])
        else:
            path = rng.choice(AGENT)
        self.note(f"agent {op} {path}")
        if not self.capture(path):
            return
        full = self.root / path
        try:
            if op in ("write", "large"):
                _write(full, _content(op, path, rng))
            elif op == "gitignore":
                _write(full, _rules(rng))
            elif op == "delete":
                if full.is_symlink() or full.is_file():
                    full.unlink()
            elif op == "symlink":
                if full.is_symlink() or full.is_file():
                    full.unlink()
                if not full.exists():
                    os.symlink(rng.choice(["a", "x", "nowhere", "b"]), full)
            elif op == "chmod" and full.is_file() and not full.is_symlink():
                full.chmod(rng.choice([0o644, 0o755, 0o600]))
        except OSError as exc:  # a file in the way, a loop: the tool fails too
            self.note(f"  the tool fails: {exc.strerror}")

    # -- what the user does ----------------------------------------------------

    def user(self) -> None:
        rng = self.rng
        op = rng.choice(["write", "write", "delete", "mkdir", "chmod", "large", "gitignore",
                         "ignored"])  # fmt: skip
        path = rng.choice(USER)
        if op == "gitignore":
            path = rng.choice([".gitignore", ".gitignore", "x/.gitignore"])
        elif op == "ignored":
            path = rng.choice(["d.log", "x/e.log", "n/v.log", "x/y/w"])
        elif op == "mkdir":
            path = rng.choice(DIRS)
        self.note(f"user {op} {path}")
        full = self.root / path
        try:
            if op in ("write", "large", "ignored"):
                _write(full, _content(op, path, rng))
            elif op == "gitignore":
                if rng.random() < 0.2 and full.is_file():
                    full.unlink()
                else:
                    _write(full, _rules(rng))
            elif op == "delete":
                if _is_dir(full):
                    shutil.rmtree(full)
                elif full.is_symlink() or full.exists():
                    full.unlink()
            elif op == "mkdir":
                full.mkdir(parents=True, exist_ok=True)
            elif op == "chmod" and full.is_file() and not full.is_symlink():
                full.chmod(rng.choice([0o644, 0o755, 0o600]))
        except OSError as exc:
            self.note(f"  fails: {exc.strerror}")

    # -- worksnap's commands ---------------------------------------------------

    def command(self) -> None:
        rng, ws = self.rng, self.workspace
        op = rng.choice(["begin", "begin", "begin", "snapshot", "undo", "undo", "redo",
                         "restore", "cap", "exclude"])  # fmt: skip
        if op == "begin":
            self.turn += 1
            ws.begin(step=self.turn, label=f"turn {self.turn}")
            self.note(f"begin turn {self.turn}")
        elif op == "snapshot":
            ws.snapshot(label=f"after turn {self.turn}")
            self.note(f"snapshot after turn {self.turn}")
        elif op in ("undo", "redo"):
            confirmed = rng.random() < 0.5  # previewed, then that plan applied (a terminal's)
            try:
                if op == "undo":
                    result = ws.undo(ws.plan_undo() if confirmed else None)
                else:
                    result = ws.redo(ws.plan_redo() if confirmed else None)
            except InputError as exc:
                if f"nothing to {op}" not in str(exc):
                    raise
                self.note(f"{op}: nothing to {op}")
                return
            assert result.ok, result
            how = " as previewed" if confirmed else ""
            self.note(f"{op}{how} to {self.name(result.target)}: {len(result.restored)} restored")
        elif op == "restore":
            history = ws.list()
            if history:
                target = rng.choice(history).id
                result = ws.restore(target)
                assert result.ok, result
                self.note(f"restore {self.name(target)}: {len(result.restored)} restored")
        elif op == "exclude":  # a runtime opened again with other rules, in the same session
            self.exclude = rng.choice(EXCLUDE)
            ws.close()
            self.ws = Workspace(self.root, session=ws.session, exclude=self.exclude)
            self.note(f"workspace opened again, excluding {list(self.exclude)}")
        else:
            cap = rng.choice(CAPS)
            ws.set_config("max-file-bytes", cap)
            self.note(f"config max-file-bytes {cap}")

    def name(self, snapshot_id: str) -> str:
        """A snapshot as the log names it: its place in the session, oldest first, and kind."""
        history = self.workspace.list()[::-1]
        at = next((i for i, s in enumerate(history) if s.id == snapshot_id), None)
        return f"#{at} ({history[at].kind})" if at is not None else snapshot_id

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.45:
            self.agent()
        elif roll < 0.65:
            self.user()
        else:
            self.command()

    # -- the check -------------------------------------------------------------

    def differences(self, step: int) -> list[Difference]:
        """Fast against slow, for every checkpoint of the session and for undo's target."""
        ws = self.workspace
        found: list[Difference] = []
        current = ws.capture(store_objects=False)
        history = ws.list()

        def capture(cap: int) -> Manifest:  # what a restore under a higher cap compares
            with Workspace(
                self.root, session=ws.session, max_file_bytes=cap, exclude=self.exclude
            ) as other:
                return other.capture(store_objects=False)

        fast = checkpoint_changes(current, history, ws.load, states_at_cap(current, capture))
        plans: dict[str, Plan] = {}

        def changes(snapshot_id: str) -> bool:
            if snapshot_id not in plans:
                plans[snapshot_id] = ws.plan_restore(ws.load(snapshot_id))
            return any(c.op is not Op.BLOCKED for c in plans[snapshot_id].changes)  # (applies)

        for summary in (s for s in history if s.kind == CHECKPOINT):
            if fast(summary.id) != changes(summary.id):
                found.append(Difference(step, (
                    f"checkpoint {self.name(summary.id)}: checkpoint_changes says "
                    f"{fast(summary.id)}, its planned rewind changes {_rows(plans[summary.id])}"
                )))  # fmt: skip
        wanted = slow_undo_target(ws, changes)
        try:
            picked: str | None = ws.plan_undo().target.id
        except InputError as exc:
            if "nothing to undo" not in str(exc):
                raise
            picked = None
        if picked != wanted:
            shown = {i: "nothing" if i is None else self.name(i) for i in (picked, wanted)}
            why = f"{_rows(plans[wanted])}" if wanted is not None else ""
            found.append(Difference(step, (
                f"undo goes to {shown[picked]}; the newest whose planned rewind changes "
                f"something is {shown[wanted]} {why}"
            ) + (f"; {shown[picked]}'s changes {_rows(plans[picked])}"
                 if picked is not None and picked in plans else "")))  # fmt: skip
        return found


def slow_undo_target(ws: Workspace, changes: Callable[[str], bool]) -> str | None:
    """Undo's documented rule, each candidate planned: the newest snapshot or checkpoint
    older than the last undo's target (undo and redo snapshots never) whose restore
    changes something."""
    history = ws.list()
    redo = Sessions(ws.store.files).load(ws.session).redo
    last = next((s for s in history if redo and s.id == redo[-1].target), None)
    for summary in history:
        if summary.kind in UNDO_KINDS:
            continue
        if last is not None and (summary.time, summary.id) >= (last.time, last.id):
            continue
        if changes(summary.id):
            return summary.id
    return None


def _rows(plan: Plan) -> str:
    return "[" + ", ".join(f"{c.op.value} {c.path}" for c in plan.changes) + "]"


def _content(op: str, path: str, rng: random.Random) -> bytes:
    """Over the smallest cap for a large write: a `.gitignore`'s rules, then a long comment."""
    if op == "large" and path.endswith(".gitignore"):
        return _rules(rng) + b"# " + b"x" * 98 + b"\n"
    return rng.randbytes(100 if op == "large" else rng.randrange(0, 8))


def _rules(rng: random.Random) -> bytes:
    return "".join(f"{rule}\n" for rule in rng.sample(RULES, rng.randrange(0, 4))).encode()


def _is_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _below(top: Path) -> list[str]:
    """Every file and symlink below `top` (relative), deepest first."""
    found = []
    for at, dirs, files in os.walk(top):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(at, d))]:
            found.append(os.path.relpath(os.path.join(at, name), top))
    return sorted(found, reverse=True)


def _write(path: Path, data: bytes) -> None:
    """Writes as a tool does: through symlinks, failing on a directory or a file in the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def walk(root: Path, seed: int, steps: int, found: Callable[[Difference, Walk], None]) -> None:
    """Runs the walk of `seed` for `steps` steps; each difference goes to `found`."""
    rng = random.Random(seed)
    _write(root / "a", b"a0")
    _write(root / "x" / "y", b"y0")
    os.symlink("x", root / "L")
    run = Walk(root, rng)
    run.new_session()
    for step in range(steps):
        if step and step % EPISODE == 0:
            run.new_session()
        try:
            run.step()
        except Exception as exc:
            found(Difference(step, f"the step failed: {exc!r}"), run)
            raise
        for difference in run.differences(step):
            found(difference, run)
    run.workspace.close()


def test_undo_skips_exactly_the_checkpoints_whose_rewind_changes_nothing(root: Path) -> None:
    def fail(difference: Difference, run: Walk) -> None:
        log = run.log
        print(f"WORKSNAP_UNDO_SEED={SEED} WORKSNAP_UNDO_STEPS={STEPS}", *log, sep="\n")
        raise AssertionError(
            f"seed {SEED}, {difference} (the operations are printed above; the last ones: "
            + "; ".join(log[-8:])
            + ")"
        )

    walk(root, SEED, STEPS, fail)
