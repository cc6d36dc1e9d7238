"""A seeded random walk of agent turns, each rewound and checked against a model.

An agent turn opens a checkpoint (`begin`) and makes tool calls; before each write the
runtime captures the path the tool names, as the hooks do: a file, a symlink (to a file, a
directory or nowhere), a path through a symlinked directory, a directory removed whole
(each file in it captured first), a file turned into a directory and back, a mode change.
A user edits other files meanwhile, never captured. A rewind to a turn must leave every
file and symlink the agent changed since as it was when that turn began, and everything
else as it is: the model records the whole tree at each turn's start and the paths each
turn changed, independently of worksnap.

Seeded and derandomized: `WORKSNAP_CHECKPOINT_STEPS` (default 300) and
`WORKSNAP_CHECKPOINT_SEED` (default 1) set the run.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from pathlib import Path

from worksnap import InputError, Workspace

STEPS = int(os.environ.get("WORKSNAP_CHECKPOINT_STEPS", "300"))
SEED = int(os.environ.get("WORKSNAP_CHECKPOINT_SEED", "1"))

FILES = ["a", "b", "x", "x/y", "x/z", "x/y/w", "n"]
"""Where the agent's files live (`x` and `x/y` are files at times, directories at others)."""
THROUGH = ["L/y", "L/z", "La", "s", "s/y"]
"""Paths the tools name through symlinks: `L` leads to `x`, `La` to `a`, `s` is the agent's."""
USER = ["u", "ud/v"]
"""The user's files: never named by the agent, never captured, never touched by a rewind."""

State = dict[str, tuple[str, bytes, int] | tuple[str, str]]


def state(root: Path) -> State:
    """Every file (bytes, mode) and symlink (target) below `root`, by relative path."""
    found: State = {}
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        dirs[:] = [d for d in dirs if not (rel_top == "." and d == ".worksnap")]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            full = os.path.join(top, name)
            rel = os.path.normpath(os.path.join(rel_top, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(full))
            else:
                found[rel] = ("file", Path(full).read_bytes(), stat.S_IMODE(st.st_mode))
    return found


def real(root: Path, tool_path: str) -> str | None:
    """Where a write to `tool_path` lands, relative to `root` (None: outside, or no such place)."""
    full = os.path.realpath(root / tool_path)
    rel = os.path.relpath(full, os.path.realpath(root))
    return None if rel.startswith("..") else rel


class Walk:
    """The tree, the workspace and the model of what each turn changed."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root, self.rng = root, rng
        self.ws = Workspace(root)
        self.turns: list[tuple[int, State, set[str]]] = []  # step, tree at its start, changed
        self.step = 0

    def begin(self) -> None:
        self.step += 1
        self.ws.begin(step=self.step)
        self.turns.append((self.step, state(self.root), set()))

    def capture(self, tool_path: str) -> None:
        self.ws.capture_before([tool_path])

    def changed(self, rel: str | None) -> None:
        if rel is not None:
            self.turns[-1][2].add(rel)

    def agent(self) -> None:
        rng, root = self.rng, self.root
        op = rng.choice(["write", "write", "write", "delete", "remove_dir", "symlink", "chmod"])
        if op == "remove_dir":
            top = rng.choice(["x", "x/y"])
            if not (root / top).is_dir() or (root / top).is_symlink():
                return
            below = sorted(state(root / top), reverse=True)
            for rel in below:
                self.capture(f"{top}/{rel}")
            for rel in below:
                self.changed(f"{top}/{rel}")
            shutil.rmtree(root / top)
            return
        path = rng.choice(FILES + THROUGH)
        try:
            self.capture(path)
        except InputError as exc:  # a directory there, or a loop: the tool fails too
            if "is not a file or symlink" not in str(exc) and "make a loop" not in str(exc):
                raise
            return
        where = real(root, path)
        full = root / path
        try:
            if op == "write":
                os.makedirs(full.parent, exist_ok=True)
                full.write_bytes(rng.randbytes(rng.randrange(0, 6)))
                self.changed(where)
            elif op == "delete":
                if full.is_symlink() or full.is_file():
                    full.unlink()  # the entry itself, where its directory leads
                    parent = real(root, os.path.dirname(path)) or ""
                    self.changed(os.path.normpath(os.path.join(parent, full.name)))
            elif op == "symlink":
                if path in ("s", "a", "b") and (full.is_symlink() or not full.is_dir()):
                    if full.is_symlink() or full.exists():
                        full.unlink()
                    os.symlink(rng.choice(["b", "x", "n", "a"]), full)
                    self.changed(path)
            elif op == "chmod" and full.is_file():
                full.chmod(rng.choice([0o644, 0o755, 0o600]))
                self.changed(where)
        except OSError:
            pass  # the tool fails (a file in the way, a loop): nothing changed

    def user(self) -> None:
        write = self.root / self.rng.choice(USER)
        write.parent.mkdir(exist_ok=True)
        write.write_bytes(self.rng.randbytes(4))

    def rewind(self) -> None:
        at = self.rng.randrange(len(self.turns))
        step, before, _ = self.turns[at]
        changed = set().union(*(turn[2] for turn in self.turns[at:]))
        now = state(self.root)
        expected = {p: v for p, v in now.items() if p not in changed and not _below(p, changed)}
        expected.update((p, before[p]) for p in changed if p in before)
        result = self.ws.rewind(step)
        assert result.ok, (step, result.error)
        assert state(self.root) == expected, (self.rng, step, sorted(changed))
        del self.turns[at:]  # what came after is rewound: the next turn starts a new branch


def _below(path: str, changed: set[str]) -> bool:
    """True when a changed path was a file above `path` (the rewind brings the file back)."""
    return any(path.startswith(c + "/") for c in changed)


def test_rewinds_set_back_exactly_what_the_turns_changed(root: Path) -> None:
    rng = random.Random(SEED)
    (root / "x").mkdir()
    (root / "x" / "y").write_bytes(b"y")
    (root / "a").write_bytes(b"a")
    os.symlink("x", root / "L")
    os.symlink("a", root / "La")
    walk = Walk(root, rng)
    walk.begin()
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.12:
            walk.begin()
        elif roll < 0.2:
            walk.rewind()
            walk.begin()
        elif roll < 0.3:
            walk.user()
        else:
            walk.agent()
    walk.rewind()
