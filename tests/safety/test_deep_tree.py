"""A tree deeper than PATH_MAX is snapshotted: the walk goes relative to directory descriptors.

Issue 11, item 12 (the scan's part): depth is limited only by the file system.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from worksnap import Workspace

NAME = "d" * 200
DEPTH = 25  # 25 levels of 201 bytes: over 5,000 bytes, PATH_MAX is 4,096


def deep_tree(root: Path) -> str:
    """Makes DEPTH nested directories with a file at the bottom; returns its relative path."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):
            os.mkdir(NAME, dir_fd=fd)
            inner = os.open(NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"at the bottom\n")
        os.close(out)
    finally:
        os.close(fd)
    return "/".join([NAME] * DEPTH + ["bottom.txt"])


@pytest.mark.parametrize("watch", [False, True])
def test_a_tree_deeper_than_path_max_is_snapshotted(
    root: Path, tmp_path: Path, watch: bool
) -> None:
    if watch and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux")
    rel = deep_tree(root)
    assert len(os.fsencode(os.path.join(root, rel))) > 4096
    with Workspace(root, store=tmp_path / "store", watch=watch) as ws:
        first = ws.snapshot()
        assert [e.path for e in first.entries] == [rel]
        entry = first.entries[0]
        assert entry.hash is not None
        assert ws.store.read(entry.hash) == b"at the bottom\n"
        assert len(first.dirs) == DEPTH
        assert ws.snapshot().tree == first.tree  # and again, from the caches or the watch
