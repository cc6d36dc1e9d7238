"""The mount table (`/proc/self/mountinfo`): the file systems mounted at or inside a root.

inotify hears nothing when a file system is mounted over a watched directory or
unmounted from it (the directory's own watch stays on the covered one), and sees no
change made on some kinds of file system (a network's other hosts, FUSE). So the
watcher asks the kernel whether the table changed (`MountWatch.changed`: a `poll`,
no read when nothing did) and then reads it again, and the daemon's automatic start
looks for a kind it cannot trust (`untrusted`).
"""

from __future__ import annotations

import os
import select
import weakref

MOUNTINFO = "/proc/self/mountinfo"

INOTIFY_COMPLETE = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "zfs"}
)
"""File system types where inotify hears every change made through this kernel."""

HARMLESS = frozenset({"proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "devtmpfs"})
"""Kinds a snapshot may meet inside a tree, whose files no one edits as a project's."""

Mount = tuple[str, str, str]
"""(the kernel's mount id, mount point, file system type)."""


def unescape(field: str) -> str:
    """A mountinfo field as the path it names (space, tab, newline, backslash are escaped)."""
    if "\\" not in field:
        return field
    parts = field.split("\\")
    out = [parts[0]]
    for part in parts[1:]:
        code = part[:3]
        if len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)) + part[3:])
        else:
            out.append("\\" + part)
    return "".join(out)


def parse(table: bytes, root: str) -> frozenset[Mount]:
    """The mounts at `root` or inside it, from the text of a mountinfo file."""
    inside = root.rstrip("/") + "/"
    found = set()
    for line in table.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 5:
            continue
        point = unescape(fields[4])
        if point == root or point.startswith(inside):
            found.add((fields[0], point, fields[fields.index("-", 6) + 1]))
    return frozenset(found)


def untrusted(mounts: frozenset[Mount]) -> str | None:
    """Why inotify may miss changes in one of `mounts` (None: it hears them all)."""
    for _, point, kind in sorted(mounts, key=lambda m: m[1]):
        if kind.split(".")[0] not in INOTIFY_COMPLETE and kind not in HARMLESS:
            return f"{point} is mounted inside the root ({kind}): inotify may miss changes there"
    return None


def mounts_of(root: str) -> frozenset[Mount]:
    """The mounts at `root` or inside it now (none when the table cannot be read)."""
    try:
        with open(MOUNTINFO, "rb") as f:
            return parse(f.read(), root)
    except OSError:
        return frozenset()


class MountWatch:
    """Tells when a file system was mounted or unmounted at or inside `root`.

    The table is read once here and again only after `poll` says it changed (the
    kernel flags each change to every open mountinfo file). When it cannot be
    opened (no /proc), `changed` is always True: nothing is vouched for.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self._fd = -1
        self._poll = select.poll()
        try:
            self._fd = os.open(MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.mounts: frozenset[Mount] = frozenset()
            return
        self._closer = weakref.finalize(self, os.close, self._fd)  # (a watcher dropped unclosed)
        self._poll.register(self._fd, select.POLLPRI)
        self.mounts = self._read()

    def _read(self) -> frozenset[Mount]:
        chunks = []
        os.lseek(self._fd, 0, os.SEEK_SET)
        while chunk := os.read(self._fd, 1 << 16):
            chunks.append(chunk)
        return parse(b"".join(chunks), self.root)

    def changed(self) -> bool:
        """True when the mounts at or inside the root differ from when last asked."""
        if self._fd < 0:
            return True
        if not self._poll.poll(0):
            return False
        mounts = self._read()
        changed, self.mounts = mounts != self.mounts, mounts
        return changed

    def close(self) -> None:
        """Releases the table's descriptor."""
        if self._fd >= 0:
            self._closer()
            self._fd = -1
