"""Scan: walk the workspace once, top-down, sorting every path into what is captured and why not.

Never enters an ignored or excluded directory (except for the files git tracks
there), never follows a symlink, and never captures a `.git` (at any depth, in
any spelling git protects) or the store itself. Below a nested repository, that
repository's own ignore rules apply (see ignore.repo_rules). A file git tracks is
captured whatever the ignore rules say, and an ignored directory holding tracked
files is entered for those files only, exactly as `git status` shows them.

The walk works relative to directory descriptors (`openat`, `fstatat`), so a
tree deeper than PATH_MAX is walked like any other: a path handed to the kernel
is never longer than `ANCHOR_AFTER` bytes below the directory it starts from.

Two ways to do less work, each only where nothing can have hidden a change:

- The listing cache (`Listings`, on disk): a directory whose listing and
  `.gitignore` are unchanged since the last scan (same inode and times, older
  than the racy margin, under unchanged rules) is not listed nor matched again;
  only its files are `lstat`ed.
- The watched memory (`DirScan` per directory, kept by a long-lived capture):
  a directory the watcher saw no event in is taken from memory without a system
  call; in one with events only the named children are looked at again. A file
  with more than one hard link is `lstat`ed at every scan (a write through its
  other name raises no event here), and a directory created or moved in, or one
  whose watch ended, is read afresh down to its deepest file (`Changes.subtrees`).
  A directory with nothing at or below it to look at is taken whole (`looked_at`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

import msgspec

from worksnap.caches import Listing, Listings, listing_key
from worksnap.errors import SnapshotError, unreadable
from worksnap.fsio import stamp_of
from worksnap.ignore import Rules, repo_rules
from worksnap.paths import fs_path
from worksnap.scanparts import (
    DIR,
    DIR_FLAGS,
    FILE,
    IGNORED,
    IGNORED_DIR,
    LINK,
    TRACKED_DIR,
    TRACKED_FILE,
    Anchor,
    DirScan,
    Item,
    Scan,
    Seen,
    WalkStats,
    a_remembered_file,
    add_link,
    as_remembered,
    classify,
    looked_at,
    lstat_or_none,
    merge,
    os_name,
    patched,
    push_subdirs,
    read_ignore_file,
    refresh,
    remembered,
    special_names,
    taken_whole,
    tracked_kind,
)
from worksnap.sources import Tracked
from worksnap.watch import Changes, Events, Watcher
from worksnap.written import written_alone, written_unseen

__all__ = ["DirScan", "Each", "Scan", "WalkStats", "scan_tree"]

_SPECIAL = frozenset({b".gitignore", b".git"})


def _refreshed(
    w: _Walk, last: DirScan, anchor: Anchor, path: str, names: set[bytes]
) -> DirScan | None:
    part, new_links = refresh(
        last, anchor.fd, path, names, max_file_bytes=w.max_file_bytes, trust_before=w.trust_before
    )
    w.new_links |= new_links
    return part


class _Restart(Exception):
    """The walk must start again (a file turned into something else, a new hard link)."""

    def __init__(self, *, restat_all: bool) -> None:
        super().__init__()
        self.restat_all = restat_all


def scan_tree(
    root: str,
    rules: Rules,
    *,
    exclude: frozenset[str],
    max_file_bytes: int,
    listings: Listings | None = None,
    trust_before: int = 0,
    watcher: Watcher | None = None,
    memory: dict[str, DirScan] | None = None,
    changes: Changes | None = None,
    remember: dict[str, DirScan] | None = None,
    tracked: Tracked | None = None,
    stats: WalkStats | None = None,
    check: Callable[[], None] | None = None,
    each: Each | None = None,
) -> Scan:
    """Walks `root` and sorts every path below it.

    Args:
        root: absolute path of the workspace.
        rules: the ignore rules in force at the root, before its own `.gitignore`.
        exclude: the exclusion rules (`exclusion.py`: relative wire paths, the store
            among them, and patterns): what they exclude is never captured nor entered.
        max_file_bytes: larger files are listed in `large`, not captured.
        listings: the per-directory cache, read and brought up to date (None: no cache).
        trust_before: a listing is only kept for a directory (and its `.gitignore`) whose
            times are older than this (ns since the epoch): one changed again within the
            same timestamp tick would otherwise look unchanged.
        watcher: watches every directory listed (before it is listed), so that the next
            call can be told which ones changed.
        memory: what each directory contributed to the last committed scan (read only).
        changes: what may have changed since `memory` was made (from `watcher`). Any
            directory it does not name is taken from `memory` without a system call (its
            multiply-linked files aside), with all below it when none is named there; in
            one with events only the named children are looked at again. None: nothing
            is known, every directory is read.
        remember: filled with what each directory contributed to this scan (the caller
            keeps it as the next `memory` once it commits).
        tracked: the paths git tracks (captured whatever the ignore rules say).
        stats: where to record what had to be done afresh (None: nowhere).
        check: called before each directory; it may raise to abandon the walk.
        each: given each directory's part as soon as it is done, which the walk then
            drops (the Scan returned and `remember` stay empty): a whole tree is never
            held at once. Given ("", None) when the walk starts again from the top
            (what it was given before is void).

    Raises:
        SnapshotError: a directory or symlink could not be read.
    """
    restat_all = False
    while True:
        found = Scan()
        visited: dict[str, DirScan] = {}
        try:
            _walk(
                _Walk(
                    root=root,
                    rules=rules,
                    exclude=exclude,
                    max_file_bytes=max_file_bytes,
                    listings=listings,
                    trust_before=trust_before,
                    watcher=watcher,
                    memory=memory if memory is not None and changes is not None else {},
                    changes=changes if changes is not None else Changes(everything=True),
                    tracked=tracked,
                    stats=stats,
                    check=check,
                    restat_all=restat_all,
                    found=found,
                    visited=visited,
                    each=each,
                )
            )
        except _Restart as restart:
            if each is not None:
                each("", None)
            if restart.restat_all:
                restat_all = True  # memory stays usable; every remembered file is stat-ed
            else:
                memory, changes = None, None  # take it from the top, trusting nothing
            continue
        if remember is not None:
            remember.clear()
            remember.update(visited)
        return found


Each = Callable[[str, "DirScan | None"], None]
"""`scan_tree`'s `each`: a directory's part as it is done, or ("", None) at a restart."""


class _Walk(msgspec.Struct):
    """One walk's inputs and outputs."""

    root: str
    rules: Rules
    exclude: frozenset[str]
    max_file_bytes: int
    listings: Listings | None
    trust_before: int
    watcher: Watcher | None
    memory: dict[str, DirScan]
    changes: Changes
    tracked: Tracked | None
    stats: WalkStats | None
    check: Callable[[], None] | None
    restat_all: bool
    found: Scan
    visited: dict[str, DirScan]
    each: Each | None = None
    from_memory: set[str] = msgspec.field(default_factory=set)
    """Directories whose stats (some or all) were taken from memory."""
    new_links: bool = False
    inodes: list[set[int]] = msgspec.field(default_factory=list)  # (`a_remembered_file`)
    looked_at: set[str] | None = None  # (None: every directory is)


def _walk(w: _Walk) -> None:
    # Listings hold ignore and exclusion decisions: they are only good under the same ones.
    key = listing_key(w.rules.key, w.exclude)
    old = w.listings.dirs if w.listings is not None and w.listings.base == key else {}
    fresh: dict[str, Listing] = {}
    try:
        root_fd = os.open(w.root, DIR_FLAGS)
    except OSError as exc:
        raise SnapshotError(".", f"cannot read: {exc.strerror}") from None
    root_anchor = Anchor(root_fd)
    root_anchor.users = 1
    if w.memory and w.changes.lost:
        w.restat_all = True  # a file written where fanotify cannot say which (`written.py`)
    if w.restat_all and w.stats is not None:
        w.stats.restatted = True
    unseen = written_alone(w.changes, w.root) if not w.restat_all else set()
    if w.memory and not w.restat_all and not w.changes.everything and w.each is None:
        w.looked_at = looked_at(w.memory, w.changes)
    pending: list[Item] = [("", root_anchor, "", w.rules, True, True, None, False)]
    everything = w.changes.everything
    subtrees = w.changes.subtrees
    try:
        while pending:
            item = pending.pop()
            try:
                if w.check is not None:
                    w.check()
                _one_dir(
                    w,
                    item,
                    old=old,
                    fresh=fresh,
                    pending=pending,
                    everything=everything,
                    subtrees=subtrees,
                )
            finally:
                item[1].release()
    except BaseException:
        for item in pending:
            item[1].release()
        raise
    if (
        w.from_memory
        and not w.restat_all
        and (
            w.new_links
            or written_unseen(w.changes, unseen, w.visited, w.from_memory, w.root)
            or (w.changes.handles and w.watcher is not None and w.watcher.heard())
        )
    ):
        # A file with a new hard link: its other names may be files remembered as
        # unchanged (a write through a new name raises no event at an old one). Or a
        # file written is not one this walk stat-ed afresh, or was vouched for by looks
        # that may have seen what happened after the changes were taken (`written.py`).
        raise _Restart(restat_all=True)
    if w.listings is not None:
        w.listings.base = key
        w.listings.dirs = fresh


def _one_dir(
    w: _Walk,
    item: Item,
    *,
    old: dict[str, Listing],
    fresh: dict[str, Listing],
    pending: list[Item],
    everything: bool,
    subtrees: set[str],
) -> None:
    rel_dir, anchor, path, _, _, memory_ok, ino, _ = item
    memory_ok = memory_ok and not everything and rel_dir not in subtrees
    last = w.memory.get(rel_dir) if memory_ok else None
    if last is not None and (
        not last.reusable or (ino is not None and ino != last.ino) or last.tracked_only != item[7]
    ):
        # Another directory now has this name, or it is entered otherwise (for the files
        # git tracks only, or no longer): nothing remembered of it holds.
        last = None
    # From memory: the kinds of the children, and the stats of files no event named.
    memory_hints: dict[str, str] = {}
    known: dict[str, tuple[str, Seen]] = {}
    named: dict[str, Seen] = {}  # the remembered stats of files events named
    patch: set[bytes] | None = None  # with a listing event: the names it is patched at
    events = w.changes.dirs.get(rel_dir) if last is not None else None
    if last is not None:
        w.from_memory.add(rel_dir)
        names = {fs_path(n) for n in (last.file_names() if w.restat_all else last.linked)}
        if w.restat_all and last.ignore_stamp is not None:
            names.add(b".gitignore")  # read again, even where it ignores itself
        part = None
        if names & _SPECIAL:
            # Its .gitignore may have been written through another name: read it again,
            # and decide again below it (the rules are compared byte for byte).
            pass
        elif events is None:
            part = _refreshed(w, last, anchor, path, names) if names else last
        elif not events.names & _SPECIAL:
            if not events.listing:
                part = _refreshed(w, last, anchor, path, names | events.names)
            else:
                memory_hints, known, named = remembered(last, events.names | names)
                patch = None if events.unnamed else events.names
        if part is last and w.looked_at is not None and rel_dir not in w.looked_at:
            for rel, whole in taken_whole(w.memory, rel_dir, last):  # nothing below to look at
                _reused(w, rel, whole, old, fresh)
            return
        if part is not None:
            _reused(w, rel_dir, part, old, fresh)
            push_subdirs(pending, part, anchor, path, rules_as_cached=True, memory_ok=True)
            return
    # A directory the watcher saw change is listed again: its cached listing may carry
    # the same stamp (a change within one timestamp tick) and is not asked.
    cached = old.get(rel_dir) if events is None else None
    dir_fd = -1
    try:
        if w.watcher is not None:
            # Open, watch, then list: the watch is on the very directory listed, and
            # anything created after the listing raises an event.
            dir_fd = os.open(path or ".", DIR_FLAGS, dir_fd=anchor.fd)
            dir_stat = os.fstat(dir_fd)
            w.watcher.watch(rel_dir, dir_fd)
        else:
            dir_stat = os.lstat(path or ".", dir_fd=anchor.fd)
        if not stat.S_ISDIR(dir_stat.st_mode):
            raise SnapshotError(rel_dir or ".", "changed while it was scanned", changing=True)
        _read_dir(
            w,
            item,
            memory_ok=memory_ok,
            dir_fd=dir_fd,
            dir_stat=dir_stat,
            cached=cached,
            last=last,
            events=events,
            memory_hints=memory_hints,
            known=known,
            named=named,
            patch=patch,
            fresh=fresh,
            pending=pending,
        )
    except OSError as exc:
        raise unreadable(rel_dir or ".", exc) from None
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)


def _read_dir(
    w: _Walk,
    item: Item,
    *,
    memory_ok: bool,
    dir_fd: int,
    dir_stat: os.stat_result,
    cached: Listing | None,
    last: DirScan | None,
    events: Events | None,
    memory_hints: dict[str, str],
    known: dict[str, tuple[str, Seen]],
    named: dict[str, Seen],
    patch: set[bytes] | None,
    fresh: dict[str, Listing],
    pending: list[Item],
) -> None:
    rel_dir, anchor, path, above, rules_as_cached, _, _, tracked_only = item
    prefix = f"{path}/" if path else ""
    stamp = stamp_of(dir_stat)
    if cached is not None and cached.tracked_only != tracked_only:
        cached = None  # classified under other rules: entered for tracked files only, or not
    ignore_data: bytes | None = None
    nested_repo = False
    if tracked_only:
        # Inside an ignored directory git reads no .gitignore and sees no repository:
        # everything it does not track is ignored.
        ignore_stat = None
        dir_rules = above
    else:
        # An unchanged listing says whether `.gitignore` and `.git` are there: no need
        # to ask the file system (a third of a warm scan's system calls).
        names = special_names(cached.children) if cached and cached.stamp == stamp else None
        ignore_stat = (
            lstat_or_none(prefix + ".gitignore", anchor.fd)
            if names is None or ".gitignore" in names
            else None
        )
        has_git = None if names is None else ".git" in names
        if has_git is None:
            has_git = lstat_or_none(prefix + ".git", anchor.fd) is not None
        # git walks a directory its index tracks something in as its own, `.git` or not.
        nested_repo = bool(rel_dir) and has_git and not (w.tracked and w.tracked.holds(rel_dir))
        dir_rules = above
        if nested_repo:
            # git run inside a nested repository reads only that repository's ignore files.
            dir_rules = repo_rules(above, rel_dir) or above
        # git does not follow a symlinked .gitignore (>= 2.32), nor reads a non-file.
        if ignore_stat is not None and stat.S_ISREG(ignore_stat.st_mode):
            ignore_data = read_ignore_file(anchor.fd, prefix, rel_dir)
            dir_rules = dir_rules.child(rel_dir, ignore_data)
    ignore_stamp = stamp_of(ignore_stat) if ignore_stat is not None else None
    reuse = (
        rules_as_cached
        and cached is not None
        and cached.stamp == stamp
        and cached.ignore_file == ignore_stamp
        and not nested_repo  # its rules come from its own .git, which this cache does not stamp
    )
    # Remembered under the same rules (no nested repository is; git's index may make one).
    same_source = last is not None and last.ignore_data == ignore_data and not nested_repo
    inodes: dict[str, int] = {}
    if reuse and cached is not None:
        children = cached.children
    elif patch is not None and last is not None and same_source and dir_fd >= 0:
        # Same rules, and every child created, removed or renamed is named: look at those.
        children = patched(last.children, rel_dir, dir_fd, patch, dir_rules, exclude=w.exclude,
                           stats=w.stats, hints=memory_hints, inodes=inodes)  # fmt: skip
    else:
        # Same rules as the cached listing: a child still there, of the same type,
        # gets the same decision; only new or changed names are matched again.
        same_rules = (
            rules_as_cached
            and cached is not None
            and cached.ignore_file == ignore_stamp
            and not nested_repo
        )
        hints = dict(cached.children) if same_rules and cached is not None else {}
        if not hints and same_source:
            hints = memory_hints  # same rules as remembered
        own_fd = dir_fd if dir_fd >= 0 else os.open(path or ".", DIR_FLAGS, dir_fd=anchor.fd)
        try:
            children = classify(
                rel_dir, own_fd, dir_rules, exclude=w.exclude, stats=w.stats, hints=hints,
                inodes=inodes,
            )  # fmt: skip
        finally:
            if own_fd != dir_fd:
                os.close(own_fd)
    trusted = max(stamp[2], stamp[3], *(ignore_stamp[2:] if ignore_stamp else ())) < (
        w.trust_before
    )
    if trusted and w.listings is not None and not nested_repo:  # (its rules: its .git's)
        fresh[rel_dir] = Listing(stamp, ignore_stamp, children, tracked_only)
    linked_ignore = ignore_stat is not None and ignore_stat.st_nlink > 1
    part = DirScan(
        tracked_only=tracked_only,
        ino=dir_stat.st_ino,
        ignore_stamp=ignore_stamp,
        ignore_data=ignore_data,
        rules=dir_rules,
        # A .gitignore with another name elsewhere may change without an event here.
        reusable=not nested_repo and not linked_ignore,
        found=Scan(),
        subdirs=[],
        children=children,
        # Stats from memory were last found unchanged by an earlier scan.
        trusted_before=min(last.trusted_before, w.trust_before)
        if last and known
        else w.trust_before,
    )
    here = part.found
    tracked = w.tracked
    known_links = last.linked if last is not None else {}
    for name, listed_kind in children:
        # A file no event named is as remembered: its path and stat are those objects.
        pair = known.get(name)
        rel = pair[0] if pair is not None else f"{rel_dir}/{name}" if rel_dir else name
        kind = listed_kind
        if kind in (IGNORED, IGNORED_DIR) and tracked is not None:
            kind = tracked_kind(tracked, rel, kind)
        if kind in (DIR, TRACKED_DIR):
            here.dirs.append(rel)
            part.subdirs.append((rel, os_name(name), kind == TRACKED_DIR))
        elif kind in (FILE, TRACKED_FILE):
            try:
                st = (
                    pair[1]
                    if pair is not None
                    else as_remembered(
                        named.get(name),
                        Seen(os.lstat(prefix + os_name(name), dir_fd=anchor.fd)),
                        last.trusted_before if last is not None else 0,
                    )
                )
            except FileNotFoundError:
                continue  # deleted while we walked: simply not part of this snapshot
            except OSError as exc:
                raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode) and kind == TRACKED_FILE:
                add_link(here, rel, prefix + os_name(name), anchor.fd)
                continue
            if not stat.S_ISREG(st.st_mode):
                if kind == TRACKED_FILE:
                    here.excluded.append(rel)  # a tracked name that is a FIFO or device now
                    continue
                # Replaced by something else after the listing: take it from the top.
                raise _Restart(restat_all=False)
            if st.st_nlink > 1:
                part.linked[name] = st.st_ino
                if known_links.get(name) != st.st_ino:  # not linked before, or another file
                    w.new_links = True
            if st.st_size > w.max_file_bytes:
                here.large.append(rel)
            else:
                here.files.append(pair if pair is not None else (rel, st))
        elif kind == LINK:
            add_link(here, rel, prefix + os_name(name), anchor.fd)
        else:
            (here.ignored if kind in (IGNORED, IGNORED_DIR) else here.excluded).append(rel)
            if kind != IGNORED_DIR and w.memory and not w.changes.everything:  # (then all stat-ed)
                w.new_links |= a_remembered_file(
                    name, prefix, anchor.fd, events, memory=w.memory, inodes=w.inodes
                )
    _done(w, rel_dir, part)
    same_rules = (
        memory_ok
        and last is not None
        and last.ignore_data == ignore_data
        and last.reusable
        and not nested_repo
        and (events is None or b".git" not in events.names)
    )
    push_subdirs(
        pending,
        part,
        anchor,
        path,
        rules_as_cached=reuse and trusted,
        memory_ok=same_rules,
        inodes=inodes,
    )


def _done(w: _Walk, rel_dir: str, part: DirScan) -> None:
    """Hands a directory's part on: to `each`, or to the scan and what it remembers."""
    if w.each is not None:
        w.each(rel_dir, part)
        return
    merge(w.found, part.found)
    w.visited[rel_dir] = part


def _reused(
    w: _Walk, rel_dir: str, part: DirScan, old: dict[str, Listing], fresh: dict[str, Listing]
) -> None:
    """A directory's part as memory has it (or refreshed): its cached listing stays good."""
    w.from_memory.add(rel_dir)
    if w.stats is not None:
        w.stats.reused.append(rel_dir)
    _done(w, rel_dir, part)
    if rel_dir in old:
        fresh[rel_dir] = old[rel_dir]
