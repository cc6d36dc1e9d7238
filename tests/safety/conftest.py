"""Shared helpers of the safety suite: real trees, their exact state, hostile manifests."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from worksnap.cli import main
from worksnap.manifest import Entry, Manifest, encode_manifest, new_id, tree_digest
from worksnap.workspace import Workspace

# The suite must not see the developer's git configuration or store override.
for _name in [n for n in os.environ if n.startswith(("GIT_", "WORKSNAP_"))]:
    del os.environ[_name]

STORE = ".worksnap"


def write(root: Path, rel: str | bytes, data: bytes | str = b"", mode: int | None = None) -> Path:
    """Writes a file (creating parents); `rel` may be bytes for names that are not UTF-8."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def tree_state(root: Path, *, skip: tuple[str, ...] = (STORE,)) -> dict[bytes, object]:
    """Everything a restore or a rollback must reproduce, by raw path.

    File bytes and permission bits, symlink targets (never followed), and every
    directory with its permission bits, empty ones included.
    """
    state: dict[bytes, object] = {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir == b".":
            dirnames[:] = [d for d in dirnames if os.fsdecode(d) not in skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                with open(full, "rb") as f:
                    state[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_nlink, f.read())
    return state


def cli(*args: str) -> tuple[int, str, str]:
    """Runs the command line in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def store_files(root: Path) -> set[str]:
    """The names of every manifest in the store (a restore adds a pre-restore one)."""
    directory = root / STORE / "manifests"
    return set(os.listdir(directory)) if directory.is_dir() else set()


def plant(root: Path, manifest: Manifest | bytes) -> str:
    """Writes a manifest (a struct, encoded canonically, or raw bytes) into the store."""
    data = encode_manifest(manifest) if isinstance(manifest, Manifest) else manifest
    snapshot_id = manifest.id if isinstance(manifest, Manifest) else new_id()
    (root / STORE / "manifests" / f"{snapshot_id}.json").write_bytes(data)
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
