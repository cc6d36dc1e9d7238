"""Whether a file written since the last capture may be one the scan would not look at.

A watched scan looks again only at the names events named (and at every name of a
file seen with several links). inotify hears a write in the directory of the name it
went through, under that name, so a write is missed where the file has a name no
event named: its other names, when it has several links not known (a link from an
ignored `.log` name, say); or every name, when the write went through a name the
file has lost since (removed, or another file renamed onto it: a descriptor opened by
a name writes under that name for as long as it stays open).

fanotify names the file written by its handle (`fanotify.py`). Each one must be a file
the walk looked at afresh at a name some event named, or else at no name the walk took
from memory (a file written and then removed, say); or the walk starts again with
every file stat-ed. Where a directory has no fanotify mark (an older kernel, a seccomp
filter, the marks' limit), a write heard there does that at once (`Changes.lost`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from worksnap.fanotify import file_system, handle_of, inode_of
from worksnap.paths import fs_path, wire_name
from worksnap.scanparts import DirScan
from worksnap.watch import Changes


def written_alone(changes: Changes, root: str) -> set[bytes]:
    """The files fanotify says were written, less those now alone at a name an event named.

    Asked before the walk: a file with one link at such a name (an ignored log written,
    say) has no other name the walk could take from memory. The look sees the tree as
    it is now, not as the changes taken say: the walk starts again with every file
    stat-ed when anything was heard since they were taken (`Watcher.heard`).
    """
    unseen = set(changes.handles)
    for _, _, handle, now in _looks(changes, root, unseen):
        if now.st_nlink == 1:
            unseen.discard(handle)
    return unseen


def written_unseen(
    changes: Changes,
    unseen: set[bytes],
    visited: dict[str, DirScan],
    from_memory: set[str],
    root: str,
) -> bool:
    """True when a file written (of `written_alone`'s) may be one the walk took from memory.

    Asked once the walk is done. A file passes when it is the very file the walk
    captured at a name an event named (so stat-ed afresh): the same inode, with the
    same ctime (no link made or removed since); its other names, if it has any, are the
    walk's to judge (`new_links`). Else it passes when no name the walk took from
    memory, in the directories `from_memory` names, holds its inode
    (`_nowhere_remembered`).
    """
    for directory, name, handle, now in _looks(changes, root, unseen):
        part = visited.get(directory)
        walked = dict(part.found.files).get(_rel(directory, name)) if part else None
        if walked is not None and (walked.st_ino, walked.st_ctime_ns) == (
            now.st_ino,
            now.st_ctime_ns,
        ):
            unseen.discard(handle)
    if not unseen:
        return False
    parts = [(d, visited[d]) for d in from_memory if d in visited]
    return not _nowhere_remembered(changes, unseen, parts, root)


def _nowhere_remembered(
    changes: Changes, handles: set[bytes], parts: list[tuple[str, DirScan]], root: str
) -> bool:
    """True when no file the walk took from memory is one of those `handles` name.

    A name no event named holds the inode it held when it was last stat-ed (any change
    of what a name holds raises an event at it): were the file written at such a name,
    its number would be the one remembered there. So a file written whose number no
    such name holds (nor a `.gitignore` the rules were read from) has no name the walk
    did not stat afresh: it was removed since, say, or lives only at ignored names. Two
    files sharing a number (a tmpfs whose 32-bit numbers wrapped) cost a restat, never
    a miss. Only handles of the root's file system, in a layout known
    (`fanotify.inode_of`), are read; the walk's memory is what the last capture saw.
    """
    fd = _open_dir(root, "")
    if fd < 0:
        return False
    try:
        fs = file_system(fd)
        own = handle_of(fd)
        if fs is None or own is None or inode_of(own, fs) != os.fstat(fd).st_ino:
            return False  # handles here are not read as this reads them
        written = {inode_of(handle, fs) for handle in handles}
        if None in written:
            return False
        for directory, part in parts:
            events = changes.dirs.get(directory)
            named = {wire_name(os.fsdecode(raw)) for raw in events.names} if events else set()
            rules = part.ignore_stamp  # its .gitignore, captured or not (it may ignore itself)
            if rules is not None and rules[0] in written and ".gitignore" not in named:
                return False
            for rel, seen in part.found.files:
                if seen.st_ino in written and rel.rpartition("/")[2] not in named:
                    return False
            for rel in part.found.large:  # kept without a stat: looked at now
                if rel.rpartition("/")[2] not in named:
                    try:
                        st = os.lstat(fs_path(rel), dir_fd=fd)
                    except OSError:
                        return False
                    if not stat.S_ISREG(st.st_mode) or st.st_ino in written:
                        return False
        return True
    finally:
        os.close(fd)


def _rel(directory: str, raw: bytes) -> str:
    name = wire_name(os.fsdecode(raw))
    return f"{directory}/{name}" if directory else name


def _looks(
    changes: Changes, root: str, handles: set[bytes]
) -> Iterator[tuple[str, bytes, bytes, os.stat_result]]:
    """(directory, name, handle, stat) of each file with a handle of `handles` at a name.

    Only names an event named are looked at, reached one directory at a time without
    following a symlink.
    """
    for directory, events in changes.dirs.items() if handles else ():
        fd = _open_dir(root, directory)
        if fd < 0:
            continue
        try:
            for raw in events.names:
                handle, now = _file_at(raw, fd)
                if handle in handles and now is not None:
                    yield directory, raw, handle, now
        finally:
            os.close(fd)


def _file_at(name: bytes, dir_fd: int) -> tuple[bytes | None, os.stat_result | None]:
    """The handle and stat of what is at `name` (one look: not two names' answers)."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None, None
    try:
        return handle_of(fd), os.fstat(fd)
    finally:
        os.close(fd)


def _open_dir(root: str, directory: str) -> int:
    """`directory` opened from the root one name at a time, never through a symlink (-1)."""
    try:
        fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError:
        return -1
    for name in fs_path(directory).split(b"/") if directory else ():
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            child = -1
        os.close(fd)
        if child < 0:
            return -1
        fd = child
    return fd


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
