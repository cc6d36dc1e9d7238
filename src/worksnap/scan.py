"""Scan: walk the workspace once, top-down, sorting every path into what is captured and why not.

Never enters an ignored or excluded directory, never follows a symlink, and
never captures a `.git` (at any depth) or the store itself. Below a nested
repository, that repository's own ignore rules apply (see ignore.repo_rules).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from worksnap.errors import SnapshotError
from worksnap.ignore import Rules, repo_rules
from worksnap.manifest import wire_name


@dataclass(slots=True)
class Scan:
    """What one walk found. Paths are relative wire-form paths, in walk order."""

    files: list[tuple[str, os.stat_result]] = field(default_factory=list)
    symlinks: list[tuple[str, str, int]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    large: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


def scan_tree(
    root: str,
    rules: Rules,
    *,
    exclude: frozenset[str],
    max_file_bytes: int,
) -> Scan:
    """Walks `root` and sorts every path below it.

    Args:
        root: absolute path of the workspace.
        rules: the ignore rules in force at the root, before its own `.gitignore`.
        exclude: relative wire paths never captured nor entered (the store is one).
        max_file_bytes: larger files are listed in `large`, not captured.

    Raises:
        SnapshotError: a directory or symlink could not be read.
    """
    found = Scan()
    pending: list[tuple[str, str, Rules]] = [("", root, rules)]
    while pending:
        rel_dir, abs_dir, dir_rules = pending.pop()
        try:
            with os.scandir(abs_dir) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise SnapshotError(rel_dir or ".", f"cannot list directory: {exc.strerror}") from None
        ignore_file = None
        nested_repo = False
        for child in children:
            if child.name > ".gitignore":
                break  # sorted by name: neither can come later
            if child.name == ".gitignore":
                ignore_file = child
            elif child.name == ".git":
                nested_repo = rel_dir != ""
        if nested_repo:
            # git run inside a nested repository reads only that repository's ignore files.
            dir_rules = repo_rules(dir_rules, rel_dir) or dir_rules
        # git does not follow a symlinked .gitignore (>= 2.32).
        if ignore_file is not None and ignore_file.is_file(follow_symlinks=False):
            dir_rules = dir_rules.child(rel_dir, _read_ignore_file(ignore_file.path, rel_dir))
        subdirs: list[tuple[str, str, Rules]] = []
        for child in children:
            name = wire_name(child.name)
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if child.name == ".git" or rel in exclude:
                found.excluded.append(rel)
                continue
            try:
                # d_type answers these without a system call; only files need lstat.
                is_dir = child.is_dir(follow_symlinks=False)
                if dir_rules.ignored(rel, is_dir=is_dir):
                    found.ignored.append(rel)
                elif is_dir:
                    found.dirs.append(rel)
                    subdirs.append((rel, child.path, dir_rules))
                elif child.is_symlink():
                    target = wire_name(os.readlink(child.path))
                    mode = child.stat(follow_symlinks=False).st_mode & 0o777
                    found.symlinks.append((rel, target, mode))
                else:
                    st = child.stat(follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        # Sockets, FIFOs and devices are never captured, so never touched.
                        found.excluded.append(rel)
                    elif st.st_size > max_file_bytes:
                        found.large.append(rel)
                    else:
                        found.files.append((rel, st))
            except FileNotFoundError:
                continue  # deleted while we walked: it is simply not part of this snapshot
            except OSError as exc:
                raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
        pending.extend(reversed(subdirs))
    return found


def _read_ignore_file(path: str, rel_dir: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
        raise SnapshotError(where, f"cannot read: {exc.strerror}") from None
