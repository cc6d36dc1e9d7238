"""Running real git in a clean, test-owned environment, and reading its answers as bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

GIT = shutil.which("git")


def clean_git_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """Points git (ours and worksnap's own `git config` call) at an empty home; returns XDG dir.

    No system config, no user config but what the test writes, no `GIT_*` variable
    from the caller (a hook's GIT_DIR would redirect every command).
    """
    for name in list(os.environ):
        if name.startswith("GIT_") or name.startswith("WORKSNAP_"):
            monkeypatch.delenv(name)
    xdg = home / ".config"
    (xdg / "git").mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("LC_ALL", "C")
    return xdg


def git(cwd: Path | bytes, *args: str | bytes, stdin: bytes | None = None) -> bytes:
    """Runs git in `cwd` and returns its stdout; a failure raises with git's stderr."""
    assert GIT is not None
    out = subprocess.run(
        [GIT, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        check=False,
    )
    if out.returncode not in (0, 1) or (out.returncode == 1 and args[0] != "check-ignore"):
        raise AssertionError(
            f"git {args!r} in {cwd!r} failed: {out.stderr.decode(errors='replace')}"
        )
    return out.stdout


def init_repo(path: Path | bytes, *, git_dir: bytes | None = None) -> bytes:
    """Creates an empty repository at `path` and returns its git directory.

    With `git_dir`, the repository lives there and `path/.git` is a `gitdir:` file.
    Patterns match case-sensitively everywhere.
    """
    separate: list[str | bytes] = []
    if git_dir is not None:
        os.makedirs(os.path.dirname(git_dir), exist_ok=True)
        separate = ["--separate-git-dir", git_dir]
    git(path, "init", "-q", "--template=", *separate, ".")
    where = git_dir if git_dir is not None else os.path.join(os.fsencode(path), b".git")
    # On a case-insensitive file system `git init` sets core.ignorecase, which makes git
    # match patterns ignoring case; worksnap always matches exact bytes.
    with open(os.path.join(where, b"config"), "ab") as f:
        f.write(b"[core]\n\tignorecase = false\n")
    return where


def split_z(data: bytes) -> list[bytes]:
    """Splits NUL-terminated git output."""
    return [p for p in data.split(b"\0") if p]


def untracked(repo: bytes, prefix: bytes = b"") -> set[bytes]:
    """Files and symlinks `git status` would show as untracked in `repo`, recursively.

    git shows an untracked nested repository as `sub/` without looking inside;
    worksnap captures its files under the rules git would use inside it, so the
    expected set takes the nested repository's own listing in its place.
    """
    found: set[bytes] = set()
    for path in split_z(git(repo, "ls-files", "--others", "--exclude-standard", "-z")):
        if path.endswith(b"/"):
            found |= untracked(os.path.join(repo, path[:-1]), prefix + path)
        else:
            found.add(prefix + path)
    return found


def check_ignore(repo: bytes, paths: list[bytes]) -> set[bytes]:
    """The subset of `paths` (relative to `repo`) that git in `repo` calls ignored."""
    if not paths:
        return set()
    out = git(repo, "check-ignore", "-z", "--stdin", stdin=b"".join(p + b"\0" for p in paths))
    return set(split_z(out))
