"""`worksnap diff` writes patches that real git applies: `git apply --check`, then `git apply`.

The snapshot's tree is written elsewhere (`restore --to`), the patch from the snapshot
to the workspace is applied there by git, and the result must equal the workspace,
byte for byte and mode for mode: text edits (with and without a final newline), new,
deleted and empty files, mode changes, an exact rename, symlinks, a file that became a
symlink, odd names (a tab, bytes that are not UTF-8), and binary files with --binary.
The patch's `index` lines carry git's own blob ids.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tree_state, write
from worksnap.cli import main

from .gitrun import GIT, clean_git_env, git, init_repo

pytestmark = [
    pytest.mark.slow,  # real git
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    clean_git_env(monkeypatch, home)
    monkeypatch.setenv("WORKSNAP_NO_DAEMON", "1")
    return tmp_path


def worksnap(capfdbinary: pytest.CaptureFixture[bytes], *args: str) -> tuple[int, bytes]:
    capfdbinary.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capfdbinary.readouterr()
    assert b"Traceback" not in err, err
    return code, out


def build(root: Path) -> None:
    write(root, "edit.txt", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n")
    write(root, "no-newline.txt", "last line has no newline")
    write(root, "gone.txt", "deleted later\n")
    write(root, "moved/from.py", "print('renamed, same bytes')\n")
    write(root, "mode.sh", "#!/bin/sh\necho hi\n", mode=0o644)
    write(root, "both.sh", "#!/bin/sh\necho before\n", mode=0o644)
    write(root, "becomes-link", "a file first\n")
    os.symlink("edit.txt", root / "link")
    write(root, b"tab\there.txt", "odd name\n")
    write(root, b"caf\xe9.txt", "not utf-8 name\n")
    write(root, "data.bin", bytes(range(256)) * 4)


def change(root: Path) -> None:
    write(root, "edit.txt", "one\ntwo\nTHREE\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\n")
    write(root, "no-newline.txt", "last line has no newline, still")
    (root / "gone.txt").unlink()
    os.rename(root / "moved" / "from.py", root / "moved" / "to.py")
    (root / "mode.sh").chmod(0o755)
    write(root, "both.sh", "#!/bin/sh\necho after\n", mode=0o755)
    (root / "becomes-link").unlink()
    os.symlink("edit.txt", root / "becomes-link")
    (root / "link").unlink()
    os.symlink("no-newline.txt", root / "link")
    write(root, b"tab\there.txt", "odd name, edited\n")
    write(root, b"caf\xe9.txt", "not utf-8 name, edited\n")
    write(root, "new/empty.txt", "")
    write(root, "new/file.txt", "brand new\n")
    write(root, "data.bin", bytes(reversed(range(256))) * 4 + b"\x00tail")


def apply_in(directory: Path, patch: bytes) -> None:
    for extra in (["--check"], []):
        done = subprocess.run(
            [GIT or "git", "apply", *extra, "-"],
            cwd=directory,
            input=patch,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_git_applies_the_patch_and_gets_the_workspace(
    env: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = env / "ws"
    root.mkdir()
    build(root)
    assert worksnap(capfdbinary, "--root", str(root), "snapshot")[0] == 0
    change(root)
    code, patch = worksnap(capfdbinary, "--root", str(root), "diff", "--binary")
    assert code == 0
    assert b"GIT binary patch" in patch and b"similarity index 100%" in patch
    copy = env / "copy"
    assert (
        worksnap(capfdbinary, "--root", str(root), "restore", "latest", "--to", str(copy))[0] == 0
    )
    apply_in(copy, patch)
    assert tree_state(copy) == tree_state(root)


def test_without_binary_the_text_still_applies_and_binaries_are_named(
    env: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = env / "ws"
    root.mkdir()
    build(root)
    assert worksnap(capfdbinary, "--root", str(root), "snapshot")[0] == 0
    change(root)
    code, patch = worksnap(capfdbinary, "--root", str(root), "diff", "latest")
    assert code == 0
    assert b"Binary files a/data.bin and b/data.bin differ\n" in patch
    copy = env / "copy"
    assert (
        worksnap(capfdbinary, "--root", str(root), "restore", "latest", "--to", str(copy))[0] == 0
    )
    # Everything but the binary file: exclude it, as a person would.
    done = subprocess.run(
        [GIT or "git", "apply", "--exclude=data.bin", "-"],
        cwd=copy,
        input=patch,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    expected = tree_state(root)
    got = tree_state(copy)
    assert got.pop(b"data.bin") != expected.pop(b"data.bin")
    assert got == expected


def test_index_lines_name_gits_own_blobs_and_paths_filter(
    env: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    root = env / "ws"
    root.mkdir()
    init_repo(root)
    write(root, "a.txt", "alpha\n")
    write(root, "sub/b.txt", "beta\n")
    assert worksnap(capfdbinary, "--root", str(root), "snapshot")[0] == 0
    write(root, "a.txt", "alpha, edited\n")
    write(root, "sub/b.txt", "beta, edited\n")
    code, patch = worksnap(capfdbinary, "--root", str(root), "diff", "latest", "--", "sub")
    assert code == 0
    assert patch.startswith(b"diff --git a/sub/b.txt b/sub/b.txt\n")
    assert b"a.txt" not in patch
    old_id = git(root, "hash-object", "--stdin", stdin=b"beta\n").strip()[:7]
    new_id = git(root, "hash-object", "sub/b.txt").strip()[:7]
    assert b"\nindex " + old_id + b".." + new_id + b" 100644\n" in patch
