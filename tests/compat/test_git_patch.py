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
import random
import stat
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


# -- random trees, random changes: worksnap's patch against git's own applier -------------

TREES = int(os.environ.get("WORKSNAP_PATCH_TREES", "40"))
_WORDS = ["alpha", "beta", "gamma", "", "delta", "  indented", "x = 1", "-dash", "+plus", "@@"]
_NAMES = ["a", "b.txt", "c.py", "with space", "tab\there", "caf\u00e9", "d-e", "Makefile"]


def _text(rng: random.Random) -> bytes:
    lines = [rng.choice(_WORDS) + (str(rng.randrange(9)) if rng.random() < 0.3 else "")
             for _ in range(rng.randrange(0, 30))]  # fmt: skip
    ending = rng.choice(["\n", "\n", "\r\n"])
    body = ending.join(lines)
    if lines and rng.random() < 0.7:
        body += ending  # else: no newline at the end
    return body.encode()


def _content(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.1:
        return b""
    if roll < 0.25:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000))) + b"\0"
    return _text(rng)


def _edit(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.3 or b"\0" in data:
        return _content(rng)
    lines = data.splitlines(keepends=True)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(lines) + 1)
        roll = rng.random()
        if roll < 0.4:
            lines.insert(at, _text(rng) or b"new\n")
        elif roll < 0.7 and at < len(lines):
            del lines[at]
        elif at < len(lines):
            lines[at] = rng.choice(_WORDS).encode() + b" changed\n"
    return b"".join(lines)


def _files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*")
        if ".worksnap" not in p.parts and (p.is_symlink() or p.is_file())
    )  # fmt: skip


def _random_tree(rng: random.Random, root: Path) -> None:
    for _ in range(rng.randrange(1, 15)):
        parts = [rng.choice(_NAMES) for _ in range(rng.randrange(1, 4))]
        path = root.joinpath(*parts)
        above = [p for p in path.parents if root in p.parents]
        if any(os.path.lexists(p) and not stat.S_ISDIR(os.lstat(p).st_mode) for p in above):
            continue
        if os.path.lexists(path):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if rng.random() < 0.15:
            target = rng.choice(["a", "../b.txt", "nowhere", "c.py"])
            # Not a link to itself: git cannot apply a patch below a link that loops
            # (`Too many levels of symbolic links`), its own patches included.
            os.symlink(target if target != path.name else "nowhere", path)
        else:
            path.write_bytes(_content(rng))
            path.chmod(rng.choice([0o644, 0o644, 0o755, 0o600]))


def _random_changes(rng: random.Random, root: Path) -> None:
    for path in _files(root):
        roll = rng.random()
        if not os.path.lexists(path):
            continue
        if roll < 0.25 and not path.is_symlink():
            path.write_bytes(_edit(rng, path.read_bytes()))
        elif roll < 0.35:
            path.unlink()
        elif roll < 0.45:
            target = path.with_name(path.name + "-moved")
            if not os.path.lexists(target):
                os.rename(path, target)
        elif roll < 0.52 and not path.is_symlink():
            path.chmod(path.stat().st_mode ^ 0o111)
        elif roll < 0.57:
            path.unlink()
            if rng.random() < 0.5:
                os.symlink("b.txt", path)
            else:
                path.write_bytes(_content(rng))
    _random_tree(rng, root)  # and some new files


def _seen_by_git(root: Path) -> dict[bytes, object]:
    """Files and symlinks with what git can carry: bytes, link targets, the exec bit."""
    state = tree_state(root)
    seen: dict[bytes, object] = {}
    for path, value in state.items():
        if value[0] == "file":
            _, mode, _, data = value  # type: ignore[misc]
            seen[path] = ("file", bool(mode & 0o100), data)
        elif value[0] == "link":
            seen[path] = value
    return seen


@pytest.mark.parametrize("seed", range(TREES))
def test_random_changes_patch_applies_with_git(
    env: Path, capfdbinary: pytest.CaptureFixture[bytes], seed: int
) -> None:
    rng = random.Random(seed)
    root = env / "ws"
    root.mkdir()
    _random_tree(rng, root)
    assert worksnap(capfdbinary, "--root", str(root), "snapshot")[0] == 0
    _random_changes(rng, root)
    code, patch = worksnap(capfdbinary, "--root", str(root), "diff", "--binary")
    assert code == 0
    copy = env / "copy"
    assert (
        worksnap(capfdbinary, "--root", str(root), "restore", "latest", "--to", str(copy))[0] == 0
    )
    if patch:
        apply_in(copy, patch)
    assert _seen_by_git(copy) == _seen_by_git(root), patch.decode(errors="replace")


def test_a_name_with_a_space_ends_its_file_lines_with_a_tab_as_git_s_do(
    env: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    """git ends a `---` or `+++` line naming a path with a space with a tab, so that GNU
    patch takes the whole name (a review: worksnap's had none); never after /dev/null."""
    root = env / "ws"
    root.mkdir()
    init_repo(root)
    write(root, "x y.txt", "a\n")
    git(root, "add", "x y.txt")  # (git's diff compares with its index)
    assert worksnap(capfdbinary, "--root", str(root), "snapshot")[0] == 0
    write(root, "x y.txt", "a\nb\n")
    write(root, "new f", "n\n")
    code, patch = worksnap(capfdbinary, "--root", str(root), "diff", "latest")
    assert code == 0
    git(root, "add", "-N", "new f")
    ours = [line for line in patch.splitlines() if line.startswith((b"--- ", b"+++ "))]
    theirs = [line for line in git(root, "diff").splitlines()
              if line.startswith((b"--- ", b"+++ "))]  # fmt: skip
    assert ours == theirs == [b"--- /dev/null", b"+++ b/new f\t", b"--- a/x y.txt\t",
                              b"+++ b/x y.txt\t"]  # fmt: skip
