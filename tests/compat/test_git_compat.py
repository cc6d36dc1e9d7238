"""worksnap captures exactly what `git status` would show as untracked, on random trees.

Each tree (seeded by its test index, see treegen.py) is captured by worksnap and
listed by git (`ls-files --others --exclude-standard`): the captured files and
symlinks must equal git's list, and everything worksnap left out as ignored must
be ignored by git too (`check-ignore`). Raise the number of trees with
WORKSNAP_COMPAT_TREES; rerun one tree with `-k "test_random_tree[SEED]"`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .gitrun import GIT, clean_git_env
from .harness import capture, compare, subroot
from .treegen import generate

pytestmark = [
    pytest.mark.slow,  # compared with real git, on random trees
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

TREES = int(os.environ.get("WORKSNAP_COMPAT_TREES", "300"))


@pytest.mark.parametrize("seed", range(TREES))
def test_random_tree(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    xdg = clean_git_env(monkeypatch, home)
    top = tmp_path / "tree"
    top.mkdir()
    tree = generate(seed)
    btop = os.fsencode(top)
    tree.build(btop)
    if seed % 5 == 1:
        # Not a repository at all: only the .gitignore files and the global file apply.
        # git can only list a repository, so capture first, then `git init` and compare
        # (the new repository has no info/exclude).
        tree.info_exclude.pop(b"", None)
        tree.setup_git(btop, os.fsencode(home), os.fsencode(xdg), top=False)
        before = capture(top, tmp_path / "store")
        tree.init_top(btop)
        compare(tree, top, top, tmp_path / "store", captured_before=before)
        return
    tree.setup_git(btop, os.fsencode(home), os.fsencode(xdg))
    compare(tree, top, top, tmp_path / "store")
    if seed % 3 == 0 and (sub := subroot(tree, top)) is not None:
        # The root is a subdirectory of the work tree: the .gitignore files above it apply.
        compare(tree, top, sub, tmp_path / "store2")
