"""Shared helpers of the safety suite: real trees, their exact state, hostile manifests."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.conftest import packed, tree_state, write
from worksnap.cli import main
from worksnap.manifest import Entry, Manifest, encode_manifest, new_id, tree_digest
from worksnap.workspace import Seams, Workspace

STORE = ".worksnap"

# write and tree_state (files, modes, links, directories and their modes) are shared with
# the rest of the suite; re-exported here for the safety tests.
__all__ = ["STORE", "tree_state", "write"]


def cli(*args: str, seams: Seams | None = None) -> tuple[int, str, str]:
    """Runs the command line in this process; returns (exit code, stdout, stderr).

    The streams have a `buffer`, as real ones do: `diff` and `cat` write bytes.
    """
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args), seams=seams)
    out.flush()
    err.flush()
    return code, *(_text(stream) for stream in (out, err))  # type: ignore[return-value]


def _text(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8", "replace")


def store_files(root: Path) -> set[str]:
    """The snapshots of the store, records and manifests alike (a restore adds a pre-restore one).

    By file name: a command that writes first migrates a planted format 1 manifest that
    passes the migration's checks into a record of the same id.
    """
    found: set[str] = set()
    for name in ("snapshots", "manifests"):
        directory = root / STORE / name
        found.update(os.listdir(directory) if directory.is_dir() else [])
    return found


def plant(root: Path, manifest: Manifest | bytes, *, pack: bool = False) -> str:
    """Writes a manifest (a struct, encoded canonically, or raw bytes) into the store.

    Plain JSON by default, as stores written before compression hold it; `pack` stores
    it as a zstd frame, as worksnap writes manifests now.
    """
    data = encode_manifest(manifest) if isinstance(manifest, Manifest) else manifest
    data = packed(data) if pack else data
    snapshot_id = manifest.id if isinstance(manifest, Manifest) else new_id()
    folder = root / STORE / "manifests"
    folder.mkdir(exist_ok=True)  # a store from before format 2 has it; a new one does not
    (folder / f"{snapshot_id}.json").write_bytes(data)
    return snapshot_id


def hostile(base: Manifest, **changes: object) -> Manifest:
    """A copy of `base` with fields replaced, a fresh id and a tree digest that matches.

    msgspec does not validate on construction, so anything can be put in; the
    result still encodes canonically, so only the hostile part is wrong.
    """
    entries = changes.get("entries", base.entries)
    dirs = changes.get("dirs", base.dirs)
    assert isinstance(entries, list)
    assert isinstance(dirs, list)
    fields: dict[str, object] = {"id": new_id(), "tree": tree_digest(entries, dirs)}
    fields.update(changes)
    return msgspec.structs.replace(base, **fields)


def file_entry(path: str, data: bytes = b"x", **changes: object) -> Entry:
    """A file entry for `data` (its object must be stored for a restore to get far)."""
    from worksnap.hash import hash_bytes

    fields: dict[str, object] = {
        "path": path,
        "type": "file",
        "mode": 0o644,
        "hash": hash_bytes(data),
        "size": len(data),
    }
    fields.update(changes)
    return Entry(**fields)  # type: ignore[arg-type]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace that no restore may ever touch."""
    path = tmp_path / "outside"
    path.mkdir()
    write(path, "secret.txt", "do not touch")
    return path


@pytest.fixture
def project(root: Path) -> Iterator[Workspace]:
    """A small workspace with one snapshot, open on `root`."""
    write(root, "a.txt", "alpha\n")
    write(root, "run.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "src/main.py", "print(1)\n")
    write(root, "src/pkg/util.py", "x = 1\n")
    (root / "empty").mkdir()
    os.symlink("src/main.py", root / "link")
    with Workspace(root) as ws:
        ws.snapshot(step=1)
        yield ws
