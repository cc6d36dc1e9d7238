"""Shared helpers: build real trees and read back their exact state."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import zstandard

# Tests must not see the developer's git configuration or store override.
for _name in [n for n in os.environ if n.startswith("GIT_")] + [
    "WORKSNAP_STORE",
    "WORKSNAP_SESSION",
]:
    os.environ.pop(_name, None)


def write(root: Path, rel: str | bytes, data: bytes | str = b"", mode: int | None = None) -> Path:
    """Writes a file (creating parents); `rel` may be bytes for names that are not UTF-8."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def tree_state(root: Path, *, skip: tuple[str, ...] = (".worksnap",)) -> dict[bytes, object]:
    """Everything a restore or a rollback must reproduce, by raw path.

    File bytes, permission bits and link counts, symlink targets (never followed),
    and every directory with its permission bits, empty ones included.
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


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def packed(data: bytes) -> bytes:
    """`data` as worksnap stores manifests and caches: one zstd frame with size and checksum."""
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def unpacked(data: bytes) -> bytes:
    """What a store file holds, read with zstandard directly (not with worksnap's reader)."""
    assert data.startswith(ZSTD_MAGIC), data[:16]
    return zstandard.ZstdDecompressor().decompress(data)


def flip_middle(data: bytes) -> bytes:
    """`data` with one bit of its middle byte flipped."""
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0x01]) + data[mid + 1 :]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    path = tmp_path / "ws"
    path.mkdir()
    return path
