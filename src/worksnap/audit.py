"""The audit: what a watched workspace vouches for, compared with a plain scan of the tree now.

The daemon runs it while idle (`Capture.audit`): any difference is something the
watcher missed, reported with the latest events seen where it is. One is not: a file
whose ctime alone moved on (its link count as remembered), with the bytes the last
capture recorded. A second name made and removed since (anywhere, even outside the
tree) moves it, and no event names the file; the remembered stat is then stale, never
wrong, since a ctime only grows: a capture comparing it with a new one hashes the file
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from worksnap.errors import SnapshotError
from worksnap.fsio import DirTree, file_state, state_fields
from worksnap.hash import read_file
from worksnap.ignore import base_rules
from worksnap.manifest import Manifest
from worksnap.paths import Root, fs_path
from worksnap.scan import scan_tree
from worksnap.scanparts import DirScan, Scan, Seen
from worksnap.sources import Tracked, tracked_below
from worksnap.watch import Watcher


def audit_memory(
    root: Root,
    watcher: Watcher,
    memory: dict[str, DirScan],
    key: bytes | None,
    tracked_then: Tracked | None,
    *,
    captured: Manifest | None,
    settled_before: int,
    max_file_bytes: int,
    check: Callable[[], None] | None,
) -> list[str]:
    """Compares `memory` with a plain scan of `root` now.

    `memory` was made under the rules of `key` and git's index `tracked_then`, and
    `captured` of it (None: a file whose ctime alone moved is a difference); a stat
    older than `settled_before` (ns) found as captured is brought up to date there. The
    plain scan uses no cache, no memory and no watcher, and reads the rules and git's
    index afresh. Directories with events pending before or after it are left out, and
    those where git's index changed since (the next capture reads them again anyway).

    Returns:
        One line per difference: the path, what differs, and the latest events seen
        in its directory. Empty when the watcher was right, or when the next capture
        reads everything anyway.
    """
    before = watcher.peek()
    rules = base_rules(Path(root.path))
    if before.everything or rules.key != key:
        return []  # the next capture reads everything anyway
    tracked = tracked_below(Path(root.path))
    # Each directory is compared as soon as it is scanned, and dropped: a plain scan of
    # the whole tree held at once was the daemon's peak memory (30 MB at 47k files).
    scanned: set[str] = set()
    differing: dict[str, list[tuple[str, str]]] = {}
    digests = {e.path: e.hash for e in captured.entries} if captured is not None else {}
    tree = DirTree(root.path)

    def compare(rel_dir: str, theirs: DirScan | None) -> None:
        if theirs is None:  # the walk starts again from the top
            scanned.clear()
            differing.clear()
            return
        scanned.add(rel_dir)
        mine = memory.get(rel_dir)
        if mine is None or not (differ := list(_differences(mine.found, theirs.found))):
            return
        stale = _stale_only(mine.found, theirs.found)
        found: list[tuple[str, str]] = []
        for rel, what in differ:
            if rel in stale:
                was, now = stale[rel]
                if check is not None:
                    check()  # a read may be long: the audit gives way before each
                if _as_captured(tree, rel, now, digests.get(rel)):
                    if now.st_ctime_ns < settled_before:
                        # Found as captured, remembered so: no later audit reads it again.
                        # (Only once older than the capture's racy margin: a write within
                        # one tick of this stat could leave it as it is.)
                        was.st_ctime_ns = now.st_ctime_ns
                    continue
            found.append((rel, what))
        if found:
            differing[rel_dir] = found

    with tree:
        scan_tree(
            root.path,
            rules,
            exclude=root.exclude,
            max_file_bytes=max_file_bytes,
            tracked=tracked,
            check=check,
            each=compare,
        )
    after = watcher.peek()
    after.merge(before)
    after.note_index(tracked, tracked_then)
    if after.everything:
        return []
    missed: list[str] = []
    for rel_dir in sorted(memory.keys() | scanned):
        if rel_dir in after.dirs or _under_any(rel_dir, after.subtrees):
            continue
        if rel_dir not in memory or rel_dir not in scanned:
            parent = rel_dir.rpartition("/")[0]
            if parent in after.dirs or _under_any(parent, after.subtrees):
                continue
            what = "not scanned by the watcher" if rel_dir not in memory else "no longer there"
            missed.append(_described(watcher, rel_dir or ".", what))
            continue
        for path, what in differing.get(rel_dir, ()):
            missed.append(_described(watcher, path, what))
    return missed


def _stale_only(mine: Scan, theirs: Scan) -> dict[str, tuple[Seen, Seen]]:
    """The files whose stat differs from the one remembered in a later ctime alone.

    By path: (remembered, now). The link count must be as remembered too: a file with a
    name more than the memory knows (a hard link kept outside the tree, or in an ignored
    directory) is a difference, since writes through it raise no event here (a review).
    """
    remembered = dict(mine.files)
    stale: dict[str, tuple[Seen, Seen]] = {}
    for rel, now in theirs.files:
        was = remembered.get(rel)
        if (
            was is not None
            and now.st_ctime_ns > was.st_ctime_ns
            and (was.st_ino, was.st_size, was.st_mtime_ns, was.st_mode, was.st_nlink)
            == (now.st_ino, now.st_size, now.st_mtime_ns, now.st_mode, now.st_nlink)
        ):
            stale[rel] = (was, now)
    return stale


def _as_captured(tree: DirTree, rel: str, now: Seen, digest: str | None) -> bool:
    """True when the file at `rel`, as `now` says it is, holds the bytes of `digest`."""
    if digest is None:
        return False
    parent, _, name = rel.rpartition("/")
    try:
        found, _, st = read_file(fs_path(name), rel, keep=False, dir_fd=tree.dir_fd(parent))
    except (OSError, SnapshotError):
        return False  # gone or changed since: its events make the directory left out
    return found == digest and file_state(st) == file_state(now)


def _under_any(path: str, roots: set[str]) -> bool:
    """True when `path` is one of `roots` or below one."""
    return any(path == r or path.startswith(r + "/") for r in roots)


def _described(watcher: Watcher, path: str, what: str) -> str:
    """A difference, with the latest events seen in the path's directory (or on it)."""
    parent = path.rpartition("/")[0]
    events = [
        f"{time.strftime('%H:%M:%S', time.localtime(at))} {directory or '.'}/"
        f"{name.decode(errors='replace')} mask={mask:#x}"
        for at, directory, name, mask in watcher.history
        if directory in (parent, path)
    ][-5:]
    return f"{path}: {what}; latest events there: {', '.join(events) or 'none'}"


def _differences(mine: Scan, theirs: Scan) -> Iterator[tuple[str, str]]:
    """What one directory's remembered scan says that a plain scan does not."""
    mine_files = {rel: file_state(st) for rel, st in mine.files}
    their_files = {rel: file_state(st) for rel, st in theirs.files}
    for rel in sorted(mine_files.keys() | their_files.keys()):
        if mine_files.get(rel) != their_files.get(rel):
            remembered, found = mine_files.get(rel), their_files.get(rel)
            yield (
                rel,
                (
                    f"file state {remembered and state_fields(remembered)} remembered, "
                    f"{found and state_fields(found)} now"
                ),
            )
    for name, ours, now in (
        ("symlinks", sorted(mine.symlinks), sorted(theirs.symlinks)),
        ("dirs", sorted(mine.dirs), sorted(theirs.dirs)),
        ("ignored", sorted(mine.ignored), sorted(theirs.ignored)),
        ("large", sorted(mine.large), sorted(theirs.large)),
        ("excluded", sorted(mine.excluded), sorted(theirs.excluded)),
    ):
        if ours != now:
            for item in sorted(set(map(str, ours)) ^ set(map(str, now))):
                yield item, f"{name}: remembered {ours != now and item in map(str, ours)}"
