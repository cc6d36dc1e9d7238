"""Files git tracks belong to the workspace whatever the ignore rules say, as `git status` shows.

Random trees (treegen.py), in which some files git ignores are then added with
`git add -f` (in ignored directories too, at any depth). worksnap must capture
exactly the files `git ls-files` tracks (those on disk) plus what `git ls-files
--others --exclude-standard` lists as untracked, and everything it calls ignored
must be listed by `git status --porcelain --ignored` (a directory as itself when git
shows it whole). Raise the number of trees with WORKSNAP_COMPAT_TREES.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from .gitrun import GIT, clean_git_env, git, split_z, untracked
from .harness import capture
from .treegen import generate

pytestmark = [
    pytest.mark.slow,  # compared with real git, on random trees
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

TREES = int(os.environ.get("WORKSNAP_COMPAT_TREES", "300")) // 5


def _status_ignored(top: Path) -> set[bytes]:
    out = git(top, "status", "--porcelain=v1", "-z", "--ignored")
    found = set()
    for record in split_z(out):
        if record.startswith(b"!! "):
            found.add(record[3:].rstrip(b"/"))
    return found


def _holds_no_file(top: Path, path: bytes) -> bool:
    """An empty directory (or one holding only directories): git never lists one."""
    full = os.path.join(os.fsencode(top), path)
    if os.path.islink(full) or not os.path.isdir(full):
        return False
    return all(not files for _, _, files in os.walk(full))


def _on_disk(top: Path, path: bytes) -> bool:
    full = os.path.join(os.fsencode(top), path)
    return os.path.islink(full) or os.path.isfile(full)


@pytest.mark.parametrize("seed", range(TREES))
def test_tracked_files_in_ignored_places(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    xdg = clean_git_env(monkeypatch, home)
    top = tmp_path / "tree"
    top.mkdir()
    tree = generate(seed + 10_000)
    btop = os.fsencode(top)
    tree.build(btop)
    tree.setup_git(btop, os.fsencode(home), os.fsencode(xdg))
    ignored_files = [
        p
        for p in split_z(git(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"))
        if not any(p.startswith(r + b"/") for r in tree.repos if r)
    ]
    rnd = random.Random(seed)
    chosen = [p for p in ignored_files if rnd.random() < 0.4]
    for path in chosen:
        git(top, "add", "-f", "--", path)
    tracked = {p for p in split_z(git(top, "ls-files", "-z", "--cached")) if _on_disk(top, p)}
    expected = tracked | untracked(btop)
    captured, ignored = capture(top, tmp_path / "store")
    shown = _status_ignored(top)
    wrong_ignored = [
        p
        for p in ignored
        if p in tracked
        or (
            not any(p == s or p.startswith(s + b"/") for s in shown)
            and not any(p.startswith(r + b"/") or p == r for r in tree.repos if r)
        )
    ]
    if captured != expected or wrong_ignored:
        pytest.fail(
            f"worksnap disagrees with git about tracked files (seed {seed})\n"
            f"{tree.describe()}\nadded with -f: {sorted(chosen)}\n"
            f"captured, not tracked nor untracked: {sorted(captured - expected)}\n"
            f"tracked or untracked, not captured: {sorted(expected - captured)}\n"
            f"ignored by worksnap, not shown ignored by git: {sorted(wrong_ignored)}",
            pytrace=False,
        )
