"""Diff: what changed between two captured states, as file changes, unified diffs and stats.

Renames are exact: a path that disappeared and a path that appeared with the
same content (and type) are one rename.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from worksnap.manifest import Entry, Manifest

_BINARY_SNIFF = 8000  # as git: a NUL in the first 8000 bytes means binary


@dataclass(frozen=True, slots=True)
class FileChange:
    """One path that differs. `op` is M, A, D or R (renamed from `old_path`)."""

    op: str
    path: str
    old: Entry | None
    new: Entry | None
    old_path: str | None = None


def compare(old: Manifest, new: Manifest) -> list[FileChange]:
    """Lists the files and symlinks that differ from `old` to `new`, sorted by path."""
    before = {e.path: e for e in old.entries}
    after = {e.path: e for e in new.entries}
    changes: list[FileChange] = []
    gone = {p: e for p, e in before.items() if p not in after}
    by_content: dict[tuple[str, str | None, str | None], list[str]] = {}
    for path in sorted(gone):
        entry = gone[path]
        by_content.setdefault((entry.type, entry.hash, entry.target), []).append(path)
    for path, entry in after.items():
        if path in before:
            if before[path] != entry:
                changes.append(FileChange("M", path, before[path], entry))
            continue
        sources = by_content.get((entry.type, entry.hash, entry.target))
        if sources:
            origin = sources.pop(0)
            del gone[origin]
            changes.append(FileChange("R", path, before[origin], entry, old_path=origin))
        else:
            changes.append(FileChange("A", path, None, entry))
    changes.extend(FileChange("D", path, entry, None) for path, entry in gone.items())
    changes.sort(key=lambda c: c.path)
    return changes


def is_binary(data: bytes) -> bool:
    """True when `data` looks binary the way git decides it."""
    return b"\x00" in data[:_BINARY_SNIFF]


def _content(entry: Entry | None, read: Callable[[Entry], bytes]) -> bytes:
    if entry is None:
        return b""
    if entry.type == "symlink":
        return (entry.target or "").encode("utf-8", "surrogatepass")
    return read(entry)


def line_counts(change: FileChange, read: Callable[[Entry], bytes]) -> tuple[int, int] | None:
    """Returns (lines added, lines deleted), or None for binary content."""
    old, new = _content(change.old, read), _content(change.new, read)
    if is_binary(old) or is_binary(new):
        return None
    added = deleted = 0
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            deleted += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, deleted


def unified(change: FileChange, read: Callable[[Entry], bytes]) -> str:
    """Returns a git-style unified diff of one change (binary files are only named)."""
    old_name = f"a/{change.old_path or change.path}"
    new_name = f"b/{change.path}"
    header = f"diff --worksnap {old_name} {new_name}\n"
    if change.op == "R":
        header += f"rename from {change.old_path}\nrename to {change.path}\n"
    if change.old is not None and change.new is not None and change.old.mode != change.new.mode:
        header += f"old mode {change.old.mode:o}\nnew mode {change.new.mode:o}\n"
    old, new = _content(change.old, read), _content(change.new, read)
    if old == new:
        return header
    if is_binary(old) or is_binary(new):
        return header + f"Binary files {old_name} and {new_name} differ\n"
    lines = difflib.unified_diff(
        old.decode("utf-8", "replace").splitlines(keepends=True),
        new.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=old_name if change.old is not None else "/dev/null",
        tofile=new_name if change.new is not None else "/dev/null",
    )
    body = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    return header + body
