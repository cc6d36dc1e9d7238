"""Whatever a snapshot captures on this platform, a restore on this platform accepts.

A name is bytes (anything but `/` and NUL); a snapshot takes it, and the checks a
restore makes (manifest.check_manifest) must accept every manifest a snapshot of a
real tree writes, or that snapshot could never be restored (as `C:\\x`, a legal
Linux name, once was: "is absolute"). Only what is unsafe here is left out, at
capture time: the spellings of `.git` git itself refuses, listed in `excluded`.

Random trees of hostile-looking names (seeded: the same in every CI run;
WORKSNAP_NAMES_TREES and WORKSNAP_NAMES_SEED for more), each snapshotted, wiped and
restored: byte-identical.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from worksnap import Workspace
from worksnap.paths import is_git_name, wire_name

from .conftest import tree_state

TREES = int(os.environ.get("WORKSNAP_NAMES_TREES", "12"))
SEED = int(os.environ.get("WORKSNAP_NAMES_SEED", "11"))

# Pieces names are made of: Windows drives and separators, dots, spaces, colons,
# bytes that are not UTF-8, control characters, escapes-lookalikes, git spellings.
PIECES = [
    b"C:", b"c:", b"Z:", b"\\", b"\\\\", b"/", b".", b"..", b" ", b":", b"~", b"~1",
    b"git", b".git", b".GIT", b"x", b"name", b"\xff", b"\xe9", b"\xc3\xa9", b"\x01",
    b"\t", b"\n", b"$", b"*", b"?", b"-", b"\x00", b"\\x00", b"NUL", b"con", b"::$DATA",
]  # fmt: skip


def random_name(rng: random.Random) -> bytes:
    while True:
        name = b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
        name = name.replace(b"/", b"").replace(b"\x00", b"")  # the only bytes a name lacks
        if name not in (b"", b".", b".."):
            return name


def build(root: Path, rng: random.Random) -> None:
    base = os.fsencode(root)
    dirs = [b""]
    for _ in range(rng.randint(5, 25)):
        parent = rng.choice(dirs)
        path = (
            os.path.join(base, parent, random_name(rng))
            if parent
            else os.path.join(base, random_name(rng))
        )
        if os.path.lexists(path):
            continue
        kind = rng.random()
        if kind < 0.3:
            os.mkdir(path)
            dirs.append(os.path.relpath(path, base))
        elif kind < 0.85:
            with open(path, "wb") as f:
                f.write(rng.randbytes(rng.randint(0, 64)))
            os.chmod(path, rng.choice([0o644, 0o600, 0o755]))
        else:
            os.symlink(random_name(rng), path)


def captured(state: dict[bytes, object]) -> dict[bytes, object]:
    """What a snapshot keeps of a tree: everything but the spellings of `.git` and below."""
    return {
        path: value
        for path, value in state.items()
        if not any(is_git_name(wire_name(os.fsdecode(part))) for part in path.split(b"/"))
    }


@pytest.mark.parametrize("n", range(TREES))
def test_every_name_a_snapshot_takes_is_restored(tmp_path: Path, n: int) -> None:
    rng = random.Random(SEED * 1_000_003 + n)
    root = tmp_path / "ws"
    root.mkdir()
    build(root, rng)
    expected = captured(tree_state(root))
    with Workspace(root) as ws:
        snap = ws.snapshot()
        for name in os.listdir(os.fsencode(root)):
            path = os.path.join(os.fsencode(root), name)
            if name != b".worksnap" and not is_git_name(wire_name(os.fsdecode(name))):
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(
                    path
                ) else os.unlink(path)
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert captured(tree_state(root)) == expected


def test_windows_drive_names_are_legal_here(root: Path) -> None:
    """`C:\\x` is one name, `C:/x` a file in a directory `C:`: both captured, both restored."""
    base = os.fsencode(root)
    with open(os.path.join(base, b"C:\\x"), "wb") as f:
        f.write(b"a backslash in a name\n")
    os.mkdir(os.path.join(base, b"C:"))
    with open(os.path.join(base, b"C:/x"), "wb") as f:
        f.write(b"a file in a directory C:\n")
    os.symlink(b"C:\\target", os.path.join(base, b"D:\\link"))
    expected = tree_state(root)
    with Workspace(root) as ws:
        snap = ws.snapshot()
        assert {e.path for e in snap.entries} == {"C:\\x", "C:/x", "D:\\link"}
        for name in (b"C:\\x", b"D:\\link"):
            os.unlink(os.path.join(base, name))
        shutil.rmtree(os.path.join(base, b"C:"))
        result = ws.restore(snap.id)
    assert result.ok, result.error
    assert tree_state(root) == expected
