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

fanotify names the file written by its handle (`fanotify.py`): each one must be the
file now at a name some event named, or the scan stats every file. Where a directory
has no fanotify mark (an older kernel, a seccomp filter, the marks' limit), a write
heard there makes the scan stat every file (`Watcher`).
"""

from __future__ import annotations

import os

from worksnap.fanotify import handle_of
from worksnap.paths import fs_path, wire_name
from worksnap.scanparts import DirScan, other_links
from worksnap.watch import Changes


def written_elsewhere(changes: Changes, memory: dict[str, DirScan], root_fd: int) -> bool:
    """True when a file written since `memory` was made may have names remembered unchanged."""
    if changes.lost or changes.travelling:
        return True
    unseen = set(changes.handles)
    for directory, events in changes.dirs.items():
        prefix = fs_path(directory) + b"/" if directory else b""
        last = memory.get(directory)
        known = set(last.linked) if last is not None else set()
        for raw in events.written:
            linked = other_links(root_fd, directory, raw)
            if linked is None or (linked and wire_name(os.fsdecode(raw)) not in known):
                return True  # gone since its last event, or with other names
        for raw in events.names if unseen else ():
            unseen.discard(handle_of(prefix + raw, root_fd) or b"")
    return bool(unseen)  # written, and at no name an event named
