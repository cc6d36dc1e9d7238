"""Watch: what changed under a root since the last capture that committed (Linux inotify).

A long-lived `Workspace` keeps one so that a snapshot of an unchanged tree needs
no `lstat` of every file: only directories with events are looked at again.

What it answers (`Changes`) is built so that it can only ever cost work, never
hide a change:

- Nothing is vouched for until a first full scan, nor after a queue overflow
  (`everything`).
- A directory created or moved in, removed or moved away, one whose own watch
  ended (`IN_IGNORED`, `IN_DELETE_SELF`, `IN_MOVE_SELF`, an unmount) and one
  that could not be watched (`max_user_watches`) is a `subtrees` entry: it and
  everything below it is read afresh, with no memory reused. A directory that
  cannot be watched stays so at every capture until a watch succeeds.
- Events are consumed only by `commit`: a capture takes them (`take`), and if
  it fails or is abandoned before it commits, the next `take` returns them again
  together with the newer ones.
- What inotify cannot hear is looked at on every read (`bind`): the root's path
  leading to another directory than the one watched (its parent moved, another
  checkout made there) and a file system mounted or unmounted at or inside the root
  (mounts.py) make the next capture read everything; while a kind of file system
  whose changes inotify may miss is mounted inside the root, every capture does.

The scan adds the watch on a directory it opened before it lists it, through
the descriptor it lists (`/proc/self/fd/N`), so the watch is on the very
directory listed and nothing created in between goes unseen. It also gets a
fanotify mark, which names each file written there by its handle (`Changes.handles`):
inotify names only the path written through, which a descriptor keeps after its file
lost that name (`written.py`).

What inotify cannot see at all (writes through a shared `mmap`, writes through a
hard link from outside the tree made after the file was last looked at, other
hosts on a network file system) is in docs/performance.md; the daemon's audit
bounds how long such a miss can last.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import errno
import os
import struct
import sys
import time

from worksnap.fanotify import Fanotify
from worksnap.fsio import released_with
from worksnap.mounts import MountWatch, untrusted
from worksnap.paths import fs_path, wire_name
from worksnap.sources import Tracked

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

# No IN_DONT_FOLLOW: the watch is added through /proc/self/fd/N, a link to the
# directory the scan opened itself (with O_NOFOLLOW).
_MASK = (
    _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
    | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
)  # fmt: skip
_EVENT = struct.Struct("iIII")
_IN_PLACE = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE
_SELF_GONE = _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT
_DISPLACING = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO

_MANY_TRACKED_CHANGES = 1000
"""More paths than this tracked or untracked at once (a checkout): the next capture reads
everything rather than each changed path's directories."""

HISTORY = 4096
"""How many raw events are remembered, for the audit to say what a miss was preceded by."""


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


class Events:
    """What happened in one watched directory: the names touched, and whether its listing moved."""

    __slots__ = ("listing", "names", "unnamed")

    def __init__(self) -> None:
        self.names: set[bytes] = set()
        """Every child named by an event (written, chmod-ed, created, removed, renamed)."""
        self.listing = False
        """True when a child was created, removed or renamed, or the directory itself changed."""
        self.unnamed = False
        """True when an event named no child (the directory itself): its listing is read again."""

    def merge(self, other: Events) -> None:
        """Adds what `other` says."""
        self.names |= other.names
        self.listing |= other.listing
        self.unnamed |= other.unnamed


class Changes:
    """What may have changed under the root since the last committed capture.

    Any directory not named in `dirs` and not at or below one of `subtrees` is
    exactly as that capture saw it, unless `everything` is set.
    """

    __slots__ = ("dirs", "everything", "handles", "lost", "subtrees")

    def __init__(self, *, everything: bool = False) -> None:
        self.everything = everything
        """Nothing is vouched for: every directory is read afresh."""
        self.dirs: dict[str, Events] = {}
        """Directories (relative wire paths, "" the root) with events, and what they were."""
        self.subtrees: set[str] = set()
        """Directories read afresh with everything below them (no memory reused)."""
        self.lost = False
        """A file was written or chmod-ed in a directory with no fanotify mark: which file
        is not known, and it may have names remembered unchanged (`written.py`)."""
        self.handles: set[bytes] = set()
        """The files written or chmod-ed, by handle (`fanotify.py`): each must be one the
        scan looks at afresh, or at no name it takes from memory (`written.py`)."""

    def events(self, directory: str) -> Events:
        """The events of `directory`, created empty if it had none."""
        found = self.dirs.get(directory)
        if found is None:
            found = self.dirs[directory] = Events()
        return found

    def note_index(self, tracked: Tracked | None, was: Tracked | None) -> None:
        """Notes what git's index changed since `was`: each such path's directories decide again.

        A path tracked or untracked since (`git add -f`, a gitlink made a file) changes
        what is ignored with no event in the tree.
        """
        if tracked is was:
            return
        differing = (
            tracked.changed_since(was)
            if tracked is not None
            else was.changed_since(None)
            if was is not None
            else set()
        )
        if len(differing) > _MANY_TRACKED_CHANGES:
            self.everything = True
            return
        for raw in differing:
            # Each directory on the way down decides again whether to enter the next.
            path = wire_name(os.fsdecode(raw.rstrip(b"/")))
            while path:
                self.touch(path, subtree=False)
                path = path.rpartition("/")[0]

    def touch(self, path: str, *, subtree: bool) -> None:
        """Notes that `path` changed (and, with `subtree`, everything below it)."""
        if not path:
            self.everything = True
            return
        parent, _, name = path.rpartition("/")
        events = self.events(parent)
        events.names.add(fs_path(name))
        events.listing = True
        if subtree:
            self.subtrees.add(path)

    def merge(self, other: Changes) -> None:
        """Adds everything `other` says."""
        self.everything |= other.everything
        self.subtrees |= other.subtrees
        self.lost |= other.lost
        self.handles |= other.handles
        for directory, events in other.dirs.items():
            self.events(directory).merge(events)

    @property
    def quiet(self) -> bool:
        """True when nothing at all happened."""
        return not (self.everything or self.dirs or self.subtrees or self.handles)

    def copy(self) -> Changes:
        """An independent copy."""
        fresh = Changes()
        fresh.merge(self)
        return fresh


class Watcher:
    """Watches every directory a scan reads; says what changed since the last commit.

    Usage: a capture calls `take`, scans (the scan calls `watch` on each
    directory it lists, before listing it), and calls `commit` once what it
    built from the changes is kept. Anything not committed comes back at the
    next `take`.

    Args:
        fanotify: ask fanotify which files were written (False: as where it cannot).
    """

    def __init__(self, *, fanotify: bool = True) -> None:
        self._libc = _libc()
        self._fd = -1
        if self._libc is not None:
            self._fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        self._closer = released_with(self, os.close, self._fd) if self._fd >= 0 else None
        self._dirs: dict[int, str] = {}
        self._by_dir: dict[str, int] = {}
        self._fan = Fanotify.open() if self._fd >= 0 and fanotify else None
        self._marked: set[str] = set()  # directories with a fanotify mark
        self._pending = Changes(everything=True)  # nothing is vouched for before a full scan
        self._taken: Changes | None = None
        self._untidy = False  # watches may remain on directories no longer scanned
        self.history: collections.deque[tuple[float, str, bytes, int]] = collections.deque(
            maxlen=HISTORY
        )
        """The latest raw events: (time, directory, name, mask)."""
        self.overflows = 0
        """Queue overflows seen (each made the next capture read everything)."""
        self.failed_watches = 0
        """Directories that could not be watched (each is read afresh at every capture)."""
        self.remounts = 0
        """Times the root's path led elsewhere or its mounts changed (each: a full read)."""
        self.unsound: str | None = None
        """Why every capture reads everything now (a mount inotify may not hear), or None."""
        self._root: str | None = None
        self._root_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the root watched
        self._mounts: MountWatch | None = None

    def bind(self, root: str) -> None:
        """Watches `root` for what inotify cannot hear (see the module's docstring)."""
        self._root = root
        self._mounts = MountWatch(root)
        self.unsound = untrusted(self._mounts.mounts)

    @property
    def available(self) -> bool:
        """True when this platform has inotify and the watcher could start."""
        return self._fd >= 0

    @property
    def watches(self) -> int:
        """How many directories are watched now."""
        return len(self._by_dir)

    def watch(self, directory: str, fd: int) -> None:
        """Watches the directory open at `fd`, known as `directory`.

        Called before the directory is listed. A failure (e.g. ENOSPC: max_user_watches)
        makes the directory and everything below it be read afresh at the next capture.
        """
        if self._fd < 0:
            return
        assert self._libc is not None
        # The mark first: a write inotify hears from here on is one fanotify names.
        marked = self._fan is not None and self._fan.mark(fd)
        wd = self._libc.inotify_add_watch(self._fd, f"/proc/self/fd/{fd}".encode(), _MASK)
        if wd < 0:
            self.failed_watches += 1
            self._pending.touch(directory, subtree=True)
            return
        if not directory and self._root is not None:
            st = os.fstat(fd)
            self._root_id = (st.st_dev, st.st_ino)
        before = self._dirs.get(wd)
        if before is not None and before != directory:
            # The same directory known under another name (it was moved): that name
            # is no longer watched, so whatever is there now is read afresh.
            if self._by_dir.get(before) == wd:
                del self._by_dir[before]
            self._pending.touch(before, subtree=True)
        old = self._by_dir.get(directory)
        if old is not None and old != wd:
            self._untidy = True  # the watch of a directory once at this name
        if marked and before is not None and before not in self._marked:
            # Watched without a mark until now (under this name or the one it was moved
            # from): a write heard there may have no handle, yet be read once it has one.
            self._pending.lost = True
        self._dirs[wd] = directory
        self._by_dir[directory] = wd
        if marked:
            self._marked.add(directory)
        else:
            self._marked.discard(directory)  # a write heard there is looked for everywhere

    def take(self) -> Changes:
        """Returns what changed since the last `commit` (anything taken and not committed too)."""
        self._read()
        taken = self._pending
        if self._taken is not None:
            self._taken.merge(taken)
            taken = self._taken
        self._taken = taken
        self._pending = Changes()
        return taken

    def commit(self, alive: set[str] | None = None) -> None:
        """Consumes what the last `take` returned: a capture built on it is kept.

        Args:
            alive: the directories the committed capture scanned; watches on any
                other are dropped (None: keep all).
        """
        self._taken = None
        if alive is not None and (self._untidy or len(self._by_dir) > len(alive)):
            self._tidy(alive)

    def heard(self) -> bool:
        """True when anything happened since the last `take` (events read now)."""
        self._read()
        return not self._pending.quiet

    def peek(self) -> Changes:
        """What `take` would return now, without taking it."""
        self._read()
        seen = self._pending.copy()
        if self._taken is not None:
            seen.merge(self._taken)
        return seen

    def forget_all(self) -> None:
        """Vouches for nothing more: the next capture reads everything afresh."""
        self._pending.everything = True

    def _tidy(self, alive: set[str]) -> None:
        assert self._libc is not None
        for wd, directory in list(self._dirs.items()):
            if directory not in alive or self._by_dir.get(directory) != wd:
                # Its fanotify mark stays: a descriptor opened by a name in it (ignored
                # now, or moved away) may still write to a file of the tree.
                if directory not in alive:
                    self._marked.discard(directory)  # its watch goes: nothing heard there
                del self._dirs[wd]
                if self._by_dir.get(directory) == wd:
                    del self._by_dir[directory]
                self._libc.inotify_rm_watch(self._fd, wd)
        self._untidy = False

    def _read(self) -> None:
        """Moves every queued kernel event into the pending changes."""
        if self._fd < 0:
            self._pending.everything = True
            return
        pending = self._pending
        now = time.time()
        if self._root is not None:
            self._look_past_inotify(pending, now)
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    self.overflows += 1
                    self.history.append((now, "", b"", mask))
                    pending.everything = True
                    continue
                directory = self._dirs.get(wd)
                if directory is None:
                    continue  # a watch already dropped
                self.history.append((now, directory, name, mask))
                if mask & _SELF_GONE:
                    # The directory itself was removed, moved or unmounted: its watch
                    # (and the watches below it, by path) no longer say anything.
                    del self._dirs[wd]
                    if self._by_dir.get(directory) == wd:
                        del self._by_dir[directory]
                        self._marked.discard(directory)  # its mark stays, on the old place
                    if not mask & _IN_IGNORED:
                        assert self._libc is not None
                        self._libc.inotify_rm_watch(self._fd, wd)
                    self._untidy = True
                    pending.touch(directory, subtree=True)
                    continue
                events = pending.events(directory)
                if name:
                    events.names.add(name)
                    if mask & _IN_PLACE and directory not in self._marked:
                        # No file handles from here: the file written may be another
                        # name's (a hard link, or a descriptor opened by a name gone since).
                        pending.lost = True
                    if mask & _IN_ISDIR and mask & _DISPLACING:
                        # A directory created, moved in, removed or moved away: nothing
                        # remembered of that name holds, down to its deepest file.
                        child = wire_name(os.fsdecode(name))
                        pending.subtrees.add(f"{directory}/{child}" if directory else child)
                if not name or mask & ~_IN_PLACE:
                    events.listing = True  # not only written or chmod-ed in place
                    events.unnamed |= not name
        if self._fan is not None:
            handles, overflowed = self._fan.read()
            pending.everything |= overflowed
            pending.handles.update(handles)

    def _look_past_inotify(self, pending: Changes, now: float) -> None:
        """Everything read afresh if the root moved or a mount changed; always, if unsound."""
        assert self._root is not None
        assert self._mounts is not None
        try:
            st = os.stat(self._root)
            moved = self._root_id is not None and (st.st_dev, st.st_ino) != self._root_id
        except OSError:
            moved = True  # (the capture says what is wrong with the root)
        remounted = self._mounts.changed()
        if moved or remounted:
            self.remounts += 1
            self.history.append((now, "", b"", _IN_UNMOUNT))
            self.unsound = untrusted(self._mounts.mounts)
            self._root_id = None  # the next full scan watches the root again
        if moved or remounted or self.unsound is not None:
            pending.everything = True

    def close(self) -> None:
        """Releases the inotify descriptor and the fanotify group."""
        if self._mounts is not None:
            self._mounts.close()
            self._mounts = None
        if self._fan is not None:
            self._fan.close()
            self._fan = None
        if self._closer is not None:
            self._closer()
            self._fd, self._closer = -1, None
        self._dirs.clear()
        self._by_dir.clear()
