"""What a scan finds, and what a watched workspace keeps of it between scans.

`Scan` is one walk's result; `DirScan` is one directory's part of it, kept in
memory by a long-lived capture so that a directory without events is not read
again (`refresh` and `remembered` say what of it still holds after events).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from typing import Protocol

import msgspec

from worksnap.errors import SnapshotError, gone, unreadable
from worksnap.exclusion import excluded_entry
from worksnap.fsio import Stamp, file_state
from worksnap.ignore import Rules
from worksnap.paths import fs_path, is_git_name, wire_name, with_parents
from worksnap.sources import Tracked
from worksnap.watch import Changes, Events

# Kinds of child in a listing (stored in the listing cache: never change one).
DIR, FILE, LINK, IGNORED, IGNORED_DIR, EXCLUDED = "d", "f", "l", "i", "I", "x"


class Seen:
    """What a scan keeps of a file's `lstat`: a third of an `os.stat_result`'s memory.

    A watched workspace remembers one per file (the daemon's 47k: about 20 MB less).
    """

    __slots__ = ("st_ctime_ns", "st_ino", "st_mode", "st_mtime_ns", "st_nlink", "st_size")

    def __init__(self, st: os.stat_result) -> None:
        mode, mtime, ctime = st.st_mode, st.st_mtime_ns, st.st_ctime_ns
        self.st_ino = st.st_ino
        self.st_size = st.st_size
        self.st_mtime_ns = mtime
        self.st_ctime_ns = mtime if ctime == mtime else ctime  # one int where they are equal
        self.st_mode = _MODES.setdefault(mode, mode)  # one int a mode, not one a file (3 MB)
        self.st_nlink = st.st_nlink


_MODES: dict[int, int] = {}


class Scan(msgspec.Struct):
    """What one walk found. Paths are relative wire-form paths, in walk order."""

    files: list[tuple[str, Seen]] = msgspec.field(default_factory=list)
    symlinks: list[tuple[str, str, int]] = msgspec.field(default_factory=list)
    dirs: list[str] = msgspec.field(default_factory=list)
    ignored: list[str] = msgspec.field(default_factory=list)
    large: list[str] = msgspec.field(default_factory=list)
    excluded: list[str] = msgspec.field(default_factory=list)


class WalkStats(msgspec.Struct):
    """What a walk had to do afresh (for tests and benchmarks; pass one to `scan_tree`)."""

    listed: list[str] = msgspec.field(default_factory=list)
    """Directories whose entries were read from the file system and classified."""
    matched: list[str] = msgspec.field(default_factory=list)
    """Paths the ignore rules were asked about (not taken from an earlier decision)."""
    reused: list[str] = msgspec.field(default_factory=list)
    """Directories taken from the watched memory (with or without files stat-ed again)."""
    patched: list[str] = msgspec.field(default_factory=list)
    """Directories with events whose memory was patched at the names they named, not listed."""
    restatted: bool = False
    """Every file taken from memory was stat-ed again (a file written may have been one)."""


class DirScan(msgspec.Struct):
    """What one directory contributed to a scan, kept in memory for a watched workspace."""

    ino: int
    """The directory's inode: the one its watch is on."""
    ignore_stamp: Stamp | None
    ignore_data: bytes | None
    """Its `.gitignore` as read (None: none read): what its children's rules came from."""
    rules: Rules
    reusable: bool
    found: Scan
    subdirs: list[tuple[str, str, bool]]
    """(relative path, name on disk, entered for tracked files only) of each subdirectory."""
    children: list[tuple[str, str]]
    """The classification it was made from: (wire name, kind) in name order."""
    linked: dict[str, int] = msgspec.field(default_factory=dict)
    """Names of its files with more than one hard link, and the inode at each: stat-ed
    again at every scan (one that holds another inode now is a new link)."""
    tracked_only: bool = False
    """Entered only for the files git tracks in it (it is ignored)."""
    trusted_before: int = 0
    """The scan's `trust_before` when it was made: a file whose times are older than this,
    stat-ed again and found as remembered, is unchanged (see `refresh`)."""

    def file_names(self) -> list[str]:
        """The names of every file it contributed (captured or over the size cap)."""
        return [rel.rpartition("/")[2] for rel, _ in self.found.files] + [
            rel.rpartition("/")[2] for rel in self.found.large
        ]


def remembered(
    last: DirScan, names: set[bytes]
) -> tuple[dict[str, str], dict[str, tuple[str, Seen]], dict[str, Seen]]:
    """What a directory's memory still vouches for after events on `names`.

    Returns the kinds of its children (hints for classifying it again), the files that
    no event named (unchanged since they were taken: each as its (path, stat) pair, kept
    as it is), and the stats remembered of those named (to compare with their new ones:
    `as_remembered`).
    """
    touched = {wire_name(os.fsdecode(raw)) for raw in names}
    known: dict[str, tuple[str, Seen]] = {}
    named: dict[str, Seen] = {}
    for pair in last.found.files:
        name = pair[0].rpartition("/")[2]
        if name in touched:
            named[name] = pair[1]
        else:
            known[name] = pair
    return dict(last.children), known, named


def as_remembered(before: Seen | None, now: Seen, trusted_before: int) -> Seen:
    """`before` itself when `now` says what it says (see `_same`), else `now`.

    A file stat-ed again and found unchanged keeps its remembered stat, and so the
    entry made of it (`capture`): a scan that stats every file again (a hard link's
    write may hide anywhere) makes new objects only for the files that changed.
    """
    return before if before is not None and _same(before, now, trusted_before) else now


def refresh(
    last: DirScan, dir_fd: int, path: str, names: set[bytes], *, max_file_bytes: int,
    trust_before: int,
) -> tuple[DirScan | None, bool]:  # fmt: skip
    """Returns `last` with the named files (changed in place) stat-ed and sized again.

    The files are reached as `path/NAME` relative to `dir_fd`. Also returns whether
    a file got a hard link it did not have (its other names may have changed too).
    The DirScan is None when the directory must be read again: a named file is no
    longer a regular file, or is not where the last listing put it. It is `last`
    itself when each named file's stat is as remembered and its times are older than
    `last.trusted_before` (a write within one timestamp tick of the remembered one
    could leave the stat as it was). `trust_before` is this scan's (see `scan_tree`).
    """
    prefix = f"{path}/" if path else ""
    fresh: dict[str, Seen] = {}
    stats = {rel.rpartition("/")[2]: st for rel, st in last.found.files}
    for raw in names:
        name = os.fsdecode(raw)
        try:
            now = os.lstat(prefix + name, dir_fd=dir_fd)
        except FileNotFoundError:
            return None, False
        if stat.S_ISREG(now.st_mode):
            wire = wire_name(name)
            fresh[wire] = as_remembered(stats.get(wire), Seen(now), last.trusted_before)
        elif not stat.S_ISDIR(now.st_mode):
            return None, False  # a symlink or special file now where a name changed: list again
    if all(stats.get(name) is now for name, now in fresh.items()):
        return last, False  # each as remembered (stat-ed again for a link, or all of them)
    listed = set(stats)
    listed.update(rel.rpartition("/")[2] for rel in last.found.large)
    listed.update(rel.rpartition("/")[2] for rel in last.found.ignored)
    if not fresh.keys() <= listed:
        return None, False  # not where the last listing put it: list again
    here = Scan(
        symlinks=last.found.symlinks,
        dirs=last.found.dirs,
        ignored=last.found.ignored,
        excluded=last.found.excluded,
    )
    # Only the named files may have changed size; each goes to files or large again.
    sized = [(rel, fresh.get(rel.rpartition("/")[2], st)) for rel, st in last.found.files]
    for rel in last.found.large:
        changed = fresh.get(rel.rpartition("/")[2])
        if changed is None:
            here.large.append(rel)
        else:
            sized.append((rel, changed))
    linked = dict(last.linked)
    new_links = False
    for name, seen in fresh.items():
        if seen.st_nlink > 1:
            # A name not linked before, or linked before for another file.
            new_links |= linked.get(name) != seen.st_ino
            linked[name] = seen.st_ino
        else:
            linked.pop(name, None)
    for rel, seen in sized:
        if seen.st_size > max_file_bytes:
            here.large.append(rel)
        else:
            here.files.append((rel, seen))
    part = DirScan(
        ino=last.ino,
        ignore_stamp=last.ignore_stamp,
        ignore_data=last.ignore_data,
        rules=last.rules,
        reusable=True,
        found=here,
        subdirs=last.subdirs,
        children=last.children,
        linked=linked,
        tracked_only=last.tracked_only,
        trusted_before=min(last.trusted_before, trust_before),
    )
    return part, new_links


def _same(before: Seen | None, now: Seen, trusted_before: int) -> bool:
    """True when a remembered stat older than `trusted_before` says what a new one says."""
    return (
        before is not None
        and before.st_mtime_ns < trusted_before
        and before.st_ctime_ns < trusted_before
        and file_state(before) == file_state(now)
        and before.st_nlink == now.st_nlink
    )


def merge(into: Scan, part: Scan) -> None:
    """Adds what `part` found to `into`."""
    into.files += part.files
    into.symlinks += part.symlinks
    into.dirs += part.dirs
    into.ignored += part.ignored
    into.large += part.large
    into.excluded += part.excluded


def looked_at(memory: dict[str, DirScan], changes: Changes) -> set[str]:
    """The directories a watched walk looks at itself: any other is taken whole from memory.

    Each at or above one with events or read afresh (`changes.subtrees`), one whose
    memory does not hold as it is (a file with several links, a `.gitignore` with
    another name), or one a subdirectory of which is not remembered as entered.
    """
    roots = set(changes.dirs) | changes.subtrees
    for rel_dir, part in memory.items():
        if part.linked or not part.reusable:
            roots.add(rel_dir)
        for rel, _, tracked_only in part.subdirs:
            sub = memory.get(rel)
            if sub is None or sub.tracked_only != tracked_only:
                roots.add(rel_dir)
    return with_parents(roots)


def taken_whole(
    memory: dict[str, DirScan], rel_dir: str, part: DirScan
) -> Iterator[tuple[str, DirScan]]:
    """A remembered directory and every one below it, in a walk's order (first name first)."""
    pending = [(rel_dir, part)]
    while pending:
        rel_dir, part = pending.pop()
        yield rel_dir, part
        pending += [(rel, memory[rel]) for rel, _, _ in reversed(part.subdirs)]


def lstat_or_none(path: str, dir_fd: int) -> os.stat_result | None:
    """`os.lstat`, or None when nothing is there."""
    try:
        return os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def a_remembered_file(
    name: str, prefix: str, dir_fd: int, events: Events | None, *, memory: dict[str, DirScan],
    inodes: list[set[int]],
) -> bool:  # fmt: skip
    """True when `name`, left out by the scan, is another name of a file `memory` holds.

    Making a hard link raises an event at the new name only. A captured file given a
    second name where the scan looks no further (an ignored or excluded name) keeps its
    remembered stat, one link, and is not stat-ed again at each scan: a write through
    that name could go unseen. Asked of the names `events` named in a directory listed
    again (all of them, listed without memory): the file is at `prefix + name` relative
    to `dir_fd`. `inodes` holds the memory's inode numbers once needed.
    """
    if events is not None and not events.unnamed and fs_path(name) not in events.names:
        return False
    st = lstat_or_none(prefix + os_name(name), dir_fd)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
        return False
    if not inodes:
        inodes.append({seen.st_ino for part in memory.values() for _, seen in part.found.files})
    return st.st_ino in inodes[0]


def special_names(children: list[tuple[str, str]]) -> set[str]:
    """Which of `.git` and `.gitignore` a listing holds."""
    return {name for name, _ in children if name in (".git", ".gitignore")}


def classify(
    rel_dir: str,
    dir_fd: int,
    dir_rules: Rules,
    *,
    exclude: frozenset[str],
    stats: WalkStats | None,
    hints: dict[str, str],
    inodes: dict[str, int],
) -> list[tuple[str, str]]:
    """Lists a directory and classifies each child (dir, file, link, ignored, excluded).

    `hints` holds the kinds an earlier listing under the same rules gave; a name
    whose entry has the type its kind implies keeps it. `inodes` is filled with
    the inode of each subdirectory.
    """
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise unreadable(rel_dir or ".", exc, "cannot list directory") from None
    if stats is not None:
        stats.listed.append(rel_dir)
    return _classified(rel_dir, entries, dir_rules, exclude=exclude, stats=stats, hints=hints,
                       inodes=inodes)  # fmt: skip


def patched(
    last: list[tuple[str, str]],
    rel_dir: str,
    dir_fd: int,
    names: set[bytes],
    dir_rules: Rules,
    *,
    exclude: frozenset[str],
    stats: WalkStats | None,
    hints: dict[str, str],
    inodes: dict[str, int],
) -> list[tuple[str, str]]:
    """A directory's classification after events that named `names`, without listing it.

    Every other child is as `last` has it; each named one is `lstat`ed (relative to
    `dir_fd`, the directory's own descriptor) and classified as `classify` would. Equal
    to `classify` of a new listing when the events named every child created, removed
    or renamed since `last`, under the same rules: what inotify says of a local file
    system, and what the watched differential test holds.
    """
    touched = {wire_name(os.fsdecode(raw)): raw for raw in names}
    entries: list[_Named] = []
    for wire, raw in touched.items():
        try:
            entries.append(_Named(os.fsdecode(raw), os.lstat(raw, dir_fd=dir_fd)))
        except FileNotFoundError:
            continue  # removed (or renamed away): no longer a child
        except OSError as exc:
            where = f"{rel_dir}/{wire}" if rel_dir else wire
            raise SnapshotError(where, f"cannot read: {exc.strerror}") from None
    entries.sort(key=lambda e: e.name)
    if stats is not None:
        stats.patched.append(rel_dir)
    fresh = _classified(rel_dir, entries, dir_rules, exclude=exclude, stats=stats, hints=hints,
                        inodes=inodes)  # fmt: skip
    children = [child for child in last if child[0] not in touched] + fresh
    children.sort(key=lambda child: os_name(child[0]))
    return children


def os_name(name: str) -> str:
    """A wire name as `os` functions give it (surrogate-escaped): what a listing sorts by."""
    return name if "\x00" not in name else os.fsdecode(fs_path(name))


class _Named:
    """One child, answered from its `lstat` as a listing's `os.DirEntry` answers."""

    __slots__ = ("_st", "name")

    def __init__(self, name: str, st: os.stat_result) -> None:
        self.name = name
        self._st = st

    def is_dir(self, *, follow_symlinks: bool = False) -> bool:
        """True for a directory (the `lstat`: never through a symlink)."""
        return stat.S_ISDIR(self._st.st_mode)

    def is_symlink(self) -> bool:
        """True for a symlink."""
        return stat.S_ISLNK(self._st.st_mode)

    def is_file(self, *, follow_symlinks: bool = False) -> bool:
        """True for a regular file (the `lstat`: never through a symlink)."""
        return stat.S_ISREG(self._st.st_mode)

    def inode(self) -> int:
        """The inode."""
        return self._st.st_ino


class Listed(Protocol):
    """What classifying asks of a child: an `os.DirEntry`, or a `_Named`."""

    @property
    def name(self) -> str:
        """Its name as `os` gives it."""
        ...

    def is_dir(self, *, follow_symlinks: bool = ...) -> bool:
        """True for a directory."""
        ...

    def is_symlink(self) -> bool:
        """True for a symlink."""
        ...

    def is_file(self, *, follow_symlinks: bool = ...) -> bool:
        """True for a regular file."""
        ...

    def inode(self) -> int:
        """The inode."""
        ...


def _classified(
    rel_dir: str,
    entries: Iterable[Listed],
    dir_rules: Rules,
    *,
    exclude: frozenset[str],
    stats: WalkStats | None,
    hints: dict[str, str],
    inodes: dict[str, int],
) -> list[tuple[str, str]]:
    """Classifies children in listing order (see `classify`)."""
    children: list[tuple[str, str]] = []
    for entry in entries:
        name = wire_name(entry.name)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if is_git_name(name) or excluded_entry(exclude, rel, entry):
            # git never tracks any spelling of .git; a manifest holding one is refused.
            children.append((name, EXCLUDED))
            continue
        try:
            # d_type answers these without a system call.
            is_dir = entry.is_dir(follow_symlinks=False)
            if is_dir:
                inodes[name] = entry.inode()
            hint = hints.get(name)
            if hint is not None and still(hint, entry, is_dir=is_dir):
                children.append((name, hint))
                continue
            if stats is not None:
                stats.matched.append(rel)
            if dir_rules.ignored(rel, is_dir=is_dir):
                children.append((name, IGNORED_DIR if is_dir else IGNORED))
            elif is_dir:
                children.append((name, DIR))
            elif entry.is_symlink():
                children.append((name, LINK))
            elif entry.is_file(follow_symlinks=False):
                children.append((name, FILE))
            else:
                # Sockets, FIFOs and devices are never captured, so never touched.
                children.append((name, EXCLUDED))
        except FileNotFoundError:
            continue  # deleted while we walked: simply not part of this snapshot
        except OSError as exc:
            raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
    return children


def still(kind: str, entry: Listed, *, is_dir: bool) -> bool:
    """True when `entry` is still of the type that `kind` was decided for."""
    if kind in (DIR, IGNORED_DIR):
        return is_dir
    if kind == IGNORED:
        return not is_dir  # for a non-directory the decision does not depend on its type
    if kind == LINK:
        return entry.is_symlink()
    if kind == FILE:
        return entry.is_file(follow_symlinks=False)
    return False  # excluded: decided by name, or by being a special file; decide again


def read_ignore_file(dir_fd: int, prefix: str, rel_dir: str) -> bytes:
    """Reads `prefix.gitignore` relative to `dir_fd` (never through a symlink)."""
    try:
        fd = os.open(
            prefix + ".gitignore", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
        with open(fd, "rb") as f:
            return f.read()
    except OSError as exc:
        where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
        raise SnapshotError(where, f"cannot read: {exc.strerror}") from None


TRACKED_DIR, TRACKED_FILE = "T", "t"  # never stored: what git's index makes of an ignored child


def tracked_kind(tracked: Tracked, rel: str, kind: str) -> str:
    """What an ignored child is once the paths git tracks are taken into account.

    An ignored directory is entered whole when git tracks it itself (a gitlink), for
    git's files only when it tracks some below it; tracked as a file before, it is
    just an ignored directory to git.
    """
    if kind == IGNORED_DIR:
        if tracked.enters_whole(rel):
            return DIR
        return TRACKED_DIR if tracked.holds(rel) else kind
    return TRACKED_FILE if tracked.is_tracked(rel) else kind


def add_link(here: Scan, rel: str, path: str, dir_fd: int) -> None:
    """Adds the symlink at `path` (relative to `dir_fd`) to `here`, unless it is gone."""
    try:
        target = wire_name(os.readlink(path, dir_fd=dir_fd))
        mode = os.lstat(path, dir_fd=dir_fd).st_mode & 0o777
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # readlink of what is no link: swapped since listed
            raise SnapshotError(rel, "is no longer a symlink", changing=True) from None
        raise SnapshotError(
            rel, f"cannot read symlink: {exc.strerror}", changing=gone(exc)
        ) from None
    here.symlinks.append((rel, target, mode))


class Anchor:
    """A directory descriptor the walk goes on from, closed when nothing pending needs it."""

    __slots__ = ("fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0

    def release(self) -> None:
        """One user fewer: the last one closes the descriptor."""
        self.users -= 1
        if self.users == 0:
            os.close(self.fd)


Item = tuple[str, Anchor, str, Rules, bool, bool, "int | None", bool]
"""A directory the walk has yet to look at (`scan.py`): relative dir, anchor, path from the
anchor, rules above it, rules as cached, memory usable, expected inode or None, entered for
tracked files only."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ANCHOR_AFTER = 2048
"""Below a directory this many bytes deep (relative to the descriptor it is reached
from), the walk opens it and goes on relative to it: PATH_MAX is 4096."""


def push_subdirs(
    pending: list[Item],
    part: DirScan,
    anchor: Anchor,
    path: str,
    *,
    rules_as_cached: bool,
    memory_ok: bool,
    inodes: dict[str, int] | None = None,
) -> None:
    """Queues the subdirectories of a directory, first one last (so it is walked first)."""
    if not part.subdirs:
        return
    prefix = f"{path}/" if path else ""
    if len(prefix) > ANCHOR_AFTER // 4 and len(os.fsencode(prefix)) > ANCHOR_AFTER:
        # Deep: go on from this directory's own descriptor, so no path gets long.
        own = Anchor(os.open(path, DIR_FLAGS, dir_fd=anchor.fd))
        anchor, prefix = own, ""
    inside = part.rules
    # Below an ignored directory: git's files only, and a gitlink's directory whole,
    # under the rules in force where the ignored directory is.
    whole = inside.outside or inside
    for rel, name, tracked_only in reversed(part.subdirs):
        rules = inside.ignore_all() if tracked_only else whole
        anchor.users += 1
        pending.append(
            (
                rel,
                anchor,
                prefix + name,
                rules,
                rules_as_cached,
                memory_ok,
                None if inodes is None else inodes.get(rel.rpartition("/")[2]),
                tracked_only,
            )
        )
