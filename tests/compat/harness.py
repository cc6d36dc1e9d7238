"""The comparison itself: worksnap's capture of a root against git's view of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worksnap import Workspace
from worksnap.ignore import base_rules, ignore_checker
from worksnap.paths import fs_path, wire_name

from .gitrun import check_ignore, untracked
from .treegen import Tree


def capture(root: Path, store: Path) -> tuple[set[bytes], list[bytes]]:
    """What worksnap captures at `root` (files and symlinks) and what it calls ignored."""
    with Workspace(root, store=store) as ws:
        manifest = ws.capture(store_objects=False)
    return {fs_path(e.path) for e in manifest.entries}, [fs_path(p) for p in manifest.ignored]


def _owner(path: bytes, repos: list[bytes]) -> bytes:
    """The deepest repository (relative directory, b"" for the top) that holds `path`."""
    best = b""
    for repo in repos:
        if path.startswith(repo + b"/") and len(repo) > len(best):
            best = repo
    return best


def compare(
    tree: Tree,
    top: Path,
    root: Path,
    store: Path,
    *,
    captured_before: tuple[set[bytes], list[bytes]] | None = None,
) -> None:
    """Asserts that worksnap at `root` (at or below the repository `top`) agrees with git.

    The files and symlinks worksnap captures must be exactly what git lists as
    untracked (`ls-files --others --exclude-standard`, nested repositories
    listed by themselves), and every path worksnap calls ignored must be ignored
    for git (`check-ignore`, asked in the repository that holds the path).
    `captured_before` is a capture taken earlier (before `git init`, say).
    """
    try:
        captured, ignored = captured_before or capture(root, store)
    except Exception as exc:  # the tree is the reproduction recipe: show it
        pytest.fail(f"worksnap failed: {exc!r}\n{tree.describe()}", pytrace=True)
    broot = os.fsencode(root)
    expected = untracked(broot)
    below = os.path.relpath(broot, os.fsencode(top))
    below = b"" if below == b"." else below + b"/"
    repos = [r[len(below) :] for r in tree.repos if r.startswith(below)]
    wrongly_ignored: list[bytes] = []
    for repo in {_owner(p, repos) for p in ignored}:
        start = repo + b"/" if repo else b""
        mine = [p[len(start) :] for p in ignored if _owner(p, repos) == repo]
        agreed = check_ignore(os.path.join(broot, repo) if repo else broot, mine)
        wrongly_ignored += [start + p for p in mine if p not in agreed]
    unlike_scan = _checker_disagreements(root, captured, ignored)
    if captured != expected or wrongly_ignored or unlike_scan:
        pytest.fail(
            f"worksnap disagrees with git at root {below!r} of the tree\n"
            f"{tree.describe()}\n"
            f"captured by worksnap, not untracked for git: {sorted(captured - expected)}\n"
            f"untracked for git, not captured by worksnap: {sorted(expected - captured)}\n"
            f"ignored by worksnap, not by git: {sorted(wrongly_ignored)}\n"
            f"ignore_checker (restore planner) unlike the scan: {sorted(unlike_scan)}",
            pytrace=False,
        )


def _checker_disagreements(root: Path, captured: set[bytes], ignored: list[bytes]) -> list[bytes]:
    """Paths on which `ignore_checker` (what the restore planner asks) contradicts the scan.

    The checker is given every .gitignore the scan read: the regular files of that
    name in directories it entered.
    """
    broot = os.fsencode(root)
    ignored_set = set(ignored)
    gitignores: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(broot):
        rel = os.path.relpath(dirpath, broot)
        rel = b"" if rel == b"." else rel + b"/"
        dirnames[:] = [d for d in dirnames if rel + d not in ignored_set and d != b".git"]
        ignore_file = os.path.join(dirpath, b".gitignore")
        if b".gitignore" in filenames and not os.path.islink(ignore_file):
            with open(ignore_file, "rb") as f:
                gitignores[wire_name(os.fsdecode(rel[:-1]))] = f.read()
    checker = ignore_checker(base_rules(Path(os.path.realpath(root))), gitignores.get)
    wrong = [p for p in captured if checker(wire_name(os.fsdecode(p)), False)]
    for p in ignored:
        full = os.path.join(broot, p)
        is_dir = os.path.isdir(full) and not os.path.islink(full)
        if not checker(wire_name(os.fsdecode(p)), is_dir):
            wrong.append(p)
    return wrong


def subroot(tree: Tree, top: Path) -> Path | None:
    """The deepest directory below the top that git does not ignore (it lists a file in it).

    Not at or below a junk `.git` file: git refuses to run there at all. Not one whose
    path is not UTF-8: worksnap refuses such a root in one line (its records name the
    root as JSON text), which `tests/test_cli.py` holds; names below a root may be any bytes.
    """
    listed = untracked(os.fsencode(top))
    for d in sorted(tree.dirs, key=lambda d: (-d.count(b"/"), d)):
        if any(d == f or d.startswith(f + b"/") for f in tree.fake_gitfile):
            continue
        try:
            d.decode()
        except UnicodeDecodeError:
            continue
        if any(p.startswith(d + b"/") for p in listed):
            return Path(os.fsdecode(os.path.join(os.fsencode(top), d)))
    return None
