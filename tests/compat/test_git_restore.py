"""After a restore, what is not the snapshot's is what git ignores (a seeded walk per tree).

Each tree (seeded by its test index) gets random files and `.gitignore` files (some over
the size cap, so left out and left as they are by a restore), a snapshot under random
exclusion rules, random edits, then a restore of the snapshot (of the whole tree or of
some paths) from a workspace opened under other exclusion rules. Afterwards, in what
the restore covers, every file is one the snapshot holds, with its bytes, or one that
git (`check-ignore --no-index`) ignores in the tree as the restore left it; and every
file the snapshot holds is there. Exempt, by design: what either side left out (ignored,
over the size cap, excluded, and what lies below), what the snapshot's exclusion rules
cover and today's (what they exclude is never captured, nor brought back), and what the
plan blocked; a restore of paths the snapshot left out is refused. The planner decides
by the `.gitignore` files a restore leaves in force (`plan.target_ignores`): this holds
it to git's answer on the tree after.
Raise the number of trees with WORKSNAP_RESTORE_TREES; rerun one with
`-k "test_a_restore_leaves_what_git_ignores[SEED]"`.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from worksnap import InputError, Workspace
from worksnap.exclusion import compile_rules
from worksnap.hash import hash_bytes
from worksnap.paths import under_any

from .gitrun import GIT, clean_git_env, init_repo

pytestmark = [
    pytest.mark.slow,  # compared with real git, on random trees
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

TREES = int(os.environ.get("WORKSNAP_RESTORE_TREES", "200"))
DIRS = ["", "a", "a/b", "c"]
NAMES = ["x.log", "y.txt", "z.tmp", "keep.log", "w"]
RULES = ["*.log", "!keep.log", "*.tmp", "b/", "y.txt", "/x.log", "w", "!w", "# a note", "b/*.log",
         "**/w", "c/", "!c/", "!b/"]  # fmt: skip
EXCLUDES = [(), (), ("c/.gitignore",), ("a/z.tmp",), (".gitignore",), ("a/*.txt",)]
SELECTIONS = [None, None, None, ["a"], ["c"], ["a/b"], ["a/b", "c"]]
CAP = 64  # bytes: a `.gitignore` with the long note below is over it


@pytest.mark.parametrize("seed", range(TREES))
def test_a_restore_leaves_what_git_ignores(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_git_env(monkeypatch, tmp_path / "home")
    rng = random.Random(seed)
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    edit(root, rng, 14)
    then = rng.choice(EXCLUDES)
    with Workspace(root, max_file_bytes=CAP, exclude=then) as ws:
        target = ws.snapshot()
    edit(root, rng, 10)
    selected = rng.choice(SELECTIONS)
    today = rng.choice(EXCLUDES)
    log = (
        f"seed {seed}: snapshot excluding {then}, restore of {selected or 'all'} excluding {today}"
    )
    with Workspace(root, max_file_bytes=CAP, exclude=today) as ws:
        try:
            plan = ws.plan_restore(target, paths=selected)
        except InputError as exc:
            refused = str(exc)  # a path the snapshot left out, or that neither side has
        else:
            refused = ""
        if refused:
            assert "is not in snapshot" in refused, refused  # refused, as documented
            return
        ws.restore(target.id, paths=selected)
    now = plan.current
    left = {*now.ignored, *now.large, *now.excluded, *target.ignored, *target.large,
            *target.excluded, *(c.path for c in plan.blocked)}  # fmt: skip
    excluded = (compile_rules(frozenset(target.exclude)), compile_rules(frozenset(now.exclude)))
    inside = set(selected) if selected is not None else None

    def exempt(rel: str) -> bool:
        return (
            (inside is not None and not under_any(rel, inside))
            or under_any(rel, left)
            or any(rules.covers(rel, is_dir=False) for rules in excluded)
        )

    held = {e.path: e for e in target.entries if e.type == "file"}
    found = files(root)
    for rel in sorted(found):
        if exempt(rel):
            continue
        if rel in held:
            assert hash_bytes(found[rel]) == held[rel].hash, f"{log}: {rel} not restored"
        else:
            assert ignored(root, rel), f"{log}: {rel} is in no snapshot, and git does not ignore it"
    for rel in held:
        assert rel in found or exempt(rel), f"{log}: {rel} was not brought back"


def edit(root: Path, rng: random.Random, steps: int) -> None:
    """Random writes and removals of files and `.gitignore` files."""
    for _ in range(steps):
        d = rng.choice(DIRS)
        where = root / d if d else root
        roll = rng.random()
        if roll < 0.3:
            path = where / ".gitignore"
            if rng.random() < 0.15:
                path.unlink(missing_ok=True)
                continue
            text = "".join(f"{rule}\n" for rule in rng.sample(RULES, rng.randrange(0, 4)))
            if rng.random() < 0.25:
                text += "# " + "x" * 98 + "\n"  # over the cap: in no snapshot
            where.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif roll < 0.85:
            where.mkdir(parents=True, exist_ok=True)
            (where / rng.choice(NAMES)).write_bytes(rng.randbytes(rng.randrange(1, 16)))
        else:
            (where / rng.choice(NAMES)).unlink(missing_ok=True)


def files(root: Path) -> dict[str, bytes]:
    """Every regular file below `root` but `.git`, by its path relative to it."""
    out: dict[str, bytes] = {}
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not (top == str(root) and d == ".git")]
        for name in names:
            path = Path(top, name)
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def ignored(root: Path, rel: str) -> bool:
    """Whether git ignores `rel` in the tree as it is (its exit status says)."""
    assert GIT is not None
    done = subprocess.run([GIT, "check-ignore", "-q", "--no-index", rel], cwd=root, check=False)
    return done.returncode == 0
