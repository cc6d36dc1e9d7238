"""Whether a file written since the last capture may be one the scan would not look at.

A watched scan looks again only at the names events named (and at every name of a
file seen with several links). inotify hears a write in the directory of the name it
went through, under that name, so a write is missed where the file has a name no
event named:

- its other names, when the file has several links not known (a link from an
  ignored `.log` name, say);
- every name, when the file left the name the write was heard at: removed, renamed
  out of the tree, or replaced by another file (`Changes.lost`); or when the write
  went through a descriptor opened by a name the file has lost since, which writes
  under that name for as long as it stays open (found by two hostile reviews).

fanotify names the file written by its handle (`fanotify.py`): each one must be a
file the scan captured at a name some event named, or the scan stats every file. Where a directory
has no fanotify mark (an older kernel, a seccomp filter, the marks' limit), a write
heard there makes the scan stat every file (`Watcher`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from worksnap.fanotify import handle_of
from worksnap.paths import fs_path, wire_name
from worksnap.scanparts import DirScan, other_links
from worksnap.watch import Changes


def written_elsewhere(changes: Changes, memory: dict[str, DirScan], root_fd: int) -> bool:
    """True when a file written since `memory` was made may have names remembered unchanged."""
    if changes.lost or changes.travelling:
        return True
    for directory, events in changes.dirs.items():
        last = memory.get(directory)
        known = set(last.linked) if last is not None else set()
        for raw in events.written:
            linked = other_links(root_fd, directory, raw)
            if linked is None or (linked and wire_name(os.fsdecode(raw)) not in known):
                return True  # gone since its last event, or with other names
    return False


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
    changes: Changes, unseen: set[bytes], visited: dict[str, DirScan], root: str
) -> bool:
    """True when a file written (of `written_alone`'s) is not one the walk just stat-ed.

    Asked once the walk is done: each must be the very file the walk captured at a
    name an event named (so stat-ed afresh): the same inode, with the same ctime (no
    link made or removed since). Its other names, if it has any, are the walk's to
    judge (`new_links`).
    """
    for directory, name, handle, now in _looks(changes, root, unseen):
        part = visited.get(directory)
        walked = dict(part.found.files).get(_rel(directory, name)) if part else None
        if walked is not None and (walked.st_ino, walked.st_ctime_ns) == (
            now.st_ino,
            now.st_ctime_ns,
        ):
            unseen.discard(handle)
    return bool(unseen)


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
        return handle_of(b"", fd), os.fstat(fd)
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
