"""Trees deeper than PATH_MAX: apply and capture work through descriptors; errors stay one line.

Every operation of a restore walks down from a descriptor on the root one component
at a time, so its depth is limited only by the file system; a checkpoint's
before-image is read the same way. A path in an error message is cut to
`errors.SHOWN_PATH_CHARS` (its start and its end), so a failure deep in a tree is
still one readable line. (The scan of such a tree is `scan.py`'s.)
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import msgspec
import pytest

from worksnap import ManifestError, Workspace
from worksnap.errors import SHOWN_PATH_CHARS

from .conftest import cli, file_entry, hostile, plant, write
from .faults import Faults

PART = "d" * 40


def deep(depth: int) -> list[str]:
    """The directories of a chain `depth` deep, shallowest first."""
    return ["/".join([PART] * n) for n in range(1, depth + 1)]


def read_deep(root: Path, rel: str) -> bytes:
    """Reads a file by walking descriptors (an absolute path would be too long)."""
    *dirs, name = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in dirs:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open(name, os.O_RDONLY, dir_fd=fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def make_deep(root: Path, rel: str, data: bytes) -> None:
    *dirs, name = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in dirs:
            os.mkdir(part, dir_fd=fd)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    finally:
        os.close(fd)


def _planted_deep(ws: Workspace, depth: int, data: bytes) -> tuple[str, str]:
    root = Path(ws.root)
    chain = deep(depth)
    path = chain[-1] + "/file.txt"
    entry = file_entry(path, data)
    ws.store.add(entry.hash, data)  # type: ignore[arg-type]
    ws.store.flush()
    base = ws.load("latest")
    manifest = hostile(
        base,
        entries=sorted([*base.entries, entry], key=lambda e: e.path),
        dirs=sorted({*base.dirs, *chain}),
    )
    return plant(root, manifest, pack=True), path


def test_a_restore_deeper_than_path_max(root: Path) -> None:
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        ws.snapshot()
        ref, path = _planted_deep(ws, 150, b"deep down\n")  # 6,150 characters
        assert len(path) > 4096
        result = ws.restore(ref)
    assert result.ok, result.error
    assert read_deep(root, path) == b"deep down\n"


def test_a_failure_deep_in_a_tree_is_one_short_line(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faults = Faults(monkeypatch)
    write(root, "a.txt", "alpha\n")
    with Workspace(root, seams=faults.seams) as ws:
        ws.snapshot()
        ref, _ = _planted_deep(ws, 60, b"deep down\n")  # 2,460 characters
        faults.fail_step, faults.fail_at, faults.errno = "rename", 1, errno.EIO
        result = ws.restore(ref)
    assert not result.ok and result.rolled_back
    assert result.error is not None and "Input/output error" in result.error
    assert len(result.error) < SHOWN_PATH_CHARS + 100, result.error
    assert result.error.startswith(PART) and "file.txt" in result.error
    assert not (root / PART).exists()


def test_a_hostile_manifest_with_an_enormous_path_is_one_short_line(root: Path) -> None:
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        base = ws.snapshot()
    long_path = "/".join(["x" * 50] * 400) + "/evil"  # 20,000 characters, no parents
    ref = plant(root, hostile(base, entries=[*base.entries, file_entry(long_path)]))
    code, out, err = cli("--root", str(root), "--json", "restore", ref, "--yes")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and len(err) < 2 * SHOWN_PATH_CHARS + 200, err
    with Workspace(root) as ws, pytest.raises(ManifestError, match="parent"):
        ws.load(ref)


def test_a_checkpoint_captures_a_file_deeper_than_path_max(root: Path) -> None:
    path = "/".join(deep(120)[-1:]) + "/notes.txt"  # 4,930 characters
    make_deep(root, path, b"before the turn\n")
    with Workspace(root) as ws:
        ws.begin(step=1)
        checkpoint = ws.capture_before([path])
        (entry,) = checkpoint.entries
        assert entry.path == path
        assert ws.store.read(entry.hash or "") == b"before the turn\n"
    assert msgspec.json.decode(msgspec.json.encode(checkpoint.entries))[0]["size"] == 16
