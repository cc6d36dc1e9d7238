"""Property: an excluded path is never captured and never touched by a restore.

Random trees and random .gitignore-style exclusion patterns. Which paths the rules
exclude is asked of git itself (`git check-ignore` with the patterns, and each with
SQLite's side-file suffixes, in an `info/exclude` of a git directory kept outside the
tree), so worksnap's matcher is checked against git's, not against itself.
`WORKSNAP_HYPOTHESIS=deep` runs 1,500 examples instead of 60.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import tree_state
from tests.property.test_roundtrip import build
from worksnap import Workspace
from worksnap.exclusion import SIDE_SUFFIXES, is_pattern

pytestmark = pytest.mark.slow

GIT = shutil.which("git")
names = st.sampled_from(
    [b"a", b"b.db", b"b.db-wal", b"b.db-journal", b"c.tmp", b"dir", b"cache", b"x y",
     b"caf\xc3\xa9", b".agent-1.json", b"n.log"]
)  # fmt: skip
paths = st.lists(names, min_size=1, max_size=3).map(b"/".join)
contents = st.binary(max_size=16)
kinds = st.one_of(
    st.tuples(st.just("file"), contents, st.just(0o644)),
    st.tuples(st.just("link"), st.sampled_from([b"a", b"dir"])),
    st.tuples(st.just("dir")),
)
trees = st.dictionaries(paths, kinds, max_size=10)
pieces = st.sampled_from(
    ["*", "?", "*.db", "b.*", "[bc]*", "dir", "cache", "*.tmp", ".agent-*.json", "x y", "a",
     "n.log", "caf*"]
)  # fmt: skip
patterns = st.builds(
    lambda lead, body, tail: f"{lead}{body}{tail}",
    st.sampled_from(["", "/", "**/", "dir/", "*/"]),
    pieces,
    st.sampled_from(["", "", "/"]),
).filter(is_pattern)  # the rest are paths (`dir`, `dir/cache/`); `cache/` is a pattern


def git_excluded(root: Path, rules: list[str], candidates: list[bytes]) -> set[bytes]:
    """The candidates git ignores under `rules` (and their side files), a parent included."""
    git_dir = Path(tempfile.mkdtemp())
    try:
        subprocess.run([GIT or "git", "init", "-q", "--bare", str(git_dir)], check=True)
        lines = [*rules, *(r + s for r in rules if not r.endswith("/") for s in SIDE_SUFFIXES)]
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "exclude").write_text("\n".join(lines) + "\n")
        asked = sorted({p for c in candidates for p in _with_parents(c)})
        result = subprocess.run(
            [GIT or "git", f"--git-dir={git_dir}", f"--work-tree={root}", "check-ignore",
             "--no-index", "-z", "--stdin"],
            input=b"".join(p + b"\0" for p in asked), capture_output=True, cwd=root,
            env={"PATH": os.environ["PATH"], "HOME": str(git_dir)}, check=False,
        )  # fmt: skip
        assert result.returncode in (0, 1), result.stderr
        ignored = set(result.stdout.split(b"\0")) - {b""}
    finally:
        shutil.rmtree(git_dir)
    return {c for c in candidates if any(p in ignored for p in _with_parents(c))}


def _with_parents(path: bytes) -> list[bytes]:
    parts = path.split(b"/")
    return [b"/".join(parts[: i + 1]) for i in range(len(parts))]


@pytest.mark.skipif(GIT is None, reason="needs git")
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(before=trees, rules=st.lists(patterns, min_size=1, max_size=3), after=trees)
def test_excluded_paths_are_never_captured_nor_touched(
    before: dict[bytes, tuple[object, ...]],
    rules: list[str],
    after: dict[bytes, tuple[object, ...]],
) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        build(root, before)
        state = tree_state(root)
        excluded = git_excluded(root, rules, list(state))
        with Workspace(root, exclude=tuple(rules)) as ws:
            snapshot = ws.snapshot()
        captured = {os.fsencode(e.path) for e in snapshot.entries} | {
            os.fsencode(d) for d in snapshot.dirs
        }
        assert not captured & excluded, (rules, captured & excluded)
        assert captured == set(state) - excluded, rules  # everything else is captured
        # Change the tree (excluded paths too), then restore: nothing excluded moves.
        for rel in sorted(state, reverse=True):
            full = os.path.join(os.fsencode(root), rel)
            if os.path.islink(full) or os.path.isfile(full):
                os.unlink(full)
        build(root, after)
        changed = tree_state(root)
        excluded_now = git_excluded(root, rules, list(changed))
        with Workspace(root, exclude=tuple(rules)) as ws:
            result = ws.restore(snapshot.id)
        restored = tree_state(root)
        if not result.ok:  # a restore may be refused, never half done
            assert restored == changed
            return
        for rel in excluded_now | excluded:
            assert restored.get(rel) == changed.get(rel), (rules, rel)
        # Everything else is as the snapshot has it, but for the directories that hold
        # something excluded now: those stay (a directory goes only with all of it).
        left_alone = excluded_now | excluded
        holders = {p for rel in excluded_now for p in _with_parents(rel)[:-1]}

        def rest(tree: dict[bytes, object]) -> dict[bytes, object]:
            return {
                p: v for p, v in tree.items()
                if p not in left_alone | holders and not _under_any(p, left_alone)
            }  # fmt: skip

        assert rest(restored) == rest(state), rules
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _under_any(path: bytes, dirs: set[bytes]) -> bool:
    return any(path.startswith(d + b"/") for d in dirs)
