"""Which files a watched scan looks at though no event names them.

inotify says where an event happened, not to which file. A write is heard in the
directory of the name written through, under that name, and nowhere else, so a file
with another name may change where no event is ever heard:

- a file with several links is written through one of its other names (outside the
  watched tree, say, where nothing is heard at all);
- a descriptor opened on a file by a name that then went (removed, or another file
  renamed onto it) writes under that name for as long as it stays open, across any
  number of captures, while the file lives on under its other name.

Such files are *hot*: stat-ed at every capture (`DirScan.linked`), by inode, wherever
they move, until their inode leaves the tree. A file is hot once it has been seen with
several links, or once it may be the file that left a name (`Events.vacated`):

- when nothing else happened at that name since the last capture, the file that left
  it is the one that capture saw there, and its inode is made hot;
- when that capture knew the name only as ignored, too large or excluded (no inode
  kept), every file arrived since is made hot: the one that left had other names then
  (hot already, having several links) or was given one since (an arrival);
- otherwise (something came to that name and left it again, or its directory is new)
  which file left is not known: every file is stat-ed again, and every file found
  changed since the last capture is made hot. Giving a file a name and taking one away
  both change its ctime.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from worksnap.paths import wire_name
from worksnap.scanparts import DIR, IGNORED_DIR, LINK, DirScan, Seen, other_links, unchanged
from worksnap.watch import Changes

KNOWN, ARRIVALS, CHANGES = 0, 1, 2
"""`Heat.mode`: which files found at a scan may be ones that left a name since the last."""


@dataclass(slots=True)
class Heat:
    """Which files one scan keeps hot (see the module's text)."""

    inos: set[int] = field(default_factory=set)
    """Inodes kept hot: those the last capture found hot, and those that left a name since."""
    memory: dict[str, DirScan] = field(default_factory=dict)
    """What the last capture saw: the files a file found now is compared with."""
    mode: int = KNOWN
    found: set[int] = field(default_factory=set)
    """The inodes this scan found hot (the next capture's `inos`)."""
    _stats: dict[str, dict[str, Seen]] = field(default_factory=dict)

    def keeps(self, rel_dir: str, name: str, now: Seen) -> bool:
        """True when the file `rel_dir/name`, stat-ed just now as `now`, is hot."""
        hot = now.st_nlink > 1 or now.st_ino in self.inos
        if hot or (self.mode and self._new(rel_dir, name, now)):
            self.found.add(now.st_ino)
            return True
        return False

    def _new(self, rel_dir: str, name: str, now: Seen) -> bool:
        """True when the file is not the one the last capture saw there (CHANGES: as it was)."""
        last = self.memory.get(rel_dir)
        stats = self._stats.get(rel_dir)
        if stats is None:
            files = last.found.files if last is not None else []
            stats = self._stats[rel_dir] = {rel.rpartition("/")[2]: st for rel, st in files}
        before = stats.get(name)
        if last is None or before is None or before.st_ino != now.st_ino:
            return True
        return self.mode == CHANGES and not unchanged(before, now, last.trusted_before)


def heat_for(changes: Changes, memory: dict[str, DirScan], hot: frozenset[int]) -> Heat:
    """The heat of a scan after `changes`, `memory` the last capture's, `hot` its hot inodes."""
    heat = Heat(set(hot), memory)
    for directory, events in changes.dirs.items():
        if not events.vacated:
            continue
        last = memory.get(directory)
        if last is None:
            heat.mode = CHANGES  # a directory made since: whatever left a name in it came since
            return heat
        kinds = dict(last.children)
        stats = {rel.rpartition("/")[2]: st for rel, st in last.found.files}
        for raw, count in events.vacated.items():
            name = wire_name(os.fsdecode(raw))
            if count > 1:
                heat.mode = CHANGES
                return heat
            st, kind = stats.get(name), kinds.get(name)
            if st is not None:
                heat.inos.add(st.st_ino)
            elif kind is not None and kind not in (DIR, IGNORED_DIR, LINK):
                heat.mode = ARRIVALS  # a file, its inode not kept (ignored, large, excluded)
            # None: a file renamed onto a name that was free (nothing came there before).
    return heat


def written_elsewhere(changes: Changes, memory: dict[str, DirScan], root_fd: int) -> bool:
    """True when an inode written since the last scan may have names remembered as unchanged.

    A write raises an event only in the directory of the name written. When that
    name has other names not known to be linked (a hard link from an ignored `.log`
    name, say), or the inode written left every name in sight since (removed, replaced
    by a rename onto its name, renamed out of the watched tree: `Changes.lost`), those
    other names' directories heard nothing.
    """
    if changes.lost or changes.travelling:
        return True
    for directory, events in changes.dirs.items():
        if not events.written:
            continue
        last = memory.get(directory)
        known = set(last.linked) if last is not None else set()
        for raw in events.written:
            linked = other_links(root_fd, directory, raw)
            if linked is None or (linked and wire_name(os.fsdecode(raw)) not in known):
                return True  # gone since its last event, or with other names
    return False
