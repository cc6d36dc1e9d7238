"""Scan: walk the workspace once, top-down, sorting every path into what is captured and why not.

Never enters an ignored or excluded directory, never follows a symlink, and
never captures a `.git` (at any depth, in any spelling git protects) or the
store itself. Below a nested repository, that repository's own ignore rules
apply (see ignore.repo_rules).

A directory whose listing and `.gitignore` are unchanged since the last scan
(same inode and times, older than the racy margin, under unchanged rules) is
not listed nor matched again: its children's classification is reused from
the `Listings` cache and only its files are `lstat`ed. That is most of a warm
snapshot's work saved, and nothing is trusted that a change could have hidden.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from worksnap.caches import Listing, Listings, Stamp, listing_key
from worksnap.errors import SnapshotError
from worksnap.exclusion import excluded_entry
from worksnap.fsio import file_state
from worksnap.ignore import Rules, repo_rules
from worksnap.paths import fs_path, is_git_name, wire_name
from worksnap.watch import Events, Watcher

# Kinds of child in a listing.
_DIR, _FILE, _LINK, _IGNORED, _IGNORED_DIR, _EXCLUDED = "d", "f", "l", "i", "I", "x"


@dataclass(slots=True)
class Scan:
    """What one walk found. Paths are relative wire-form paths, in walk order."""

    files: list[tuple[str, os.stat_result]] = field(default_factory=list)
    symlinks: list[tuple[str, str, int]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    large: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


@dataclass(slots=True)
class WalkStats:
    """What a walk had to do afresh (for tests and benchmarks; pass one to `scan_tree`)."""

    listed: list[str] = field(default_factory=list)
    """Directories whose entries were read from the file system and classified."""
    matched: list[str] = field(default_factory=list)
    """Paths the ignore rules were asked about (not taken from an earlier decision)."""


def _stamp(st: os.stat_result) -> Stamp:
    return file_state(st)[:4]  # the listing cache's format has no st_mode (ctime covers it)


def _os_name(name: str) -> str:
    return name if "\x00" not in name else os.fsdecode(fs_path(name))


@dataclass(slots=True)
class DirScan:
    """What one directory contributed to a scan, kept in memory for a watched workspace."""

    ignore_stamp: Stamp | None
    rules: Rules
    reusable: bool
    found: Scan
    subdirs: list[tuple[str, str]]
    children: list[tuple[str, str]]
    """The classification it was made from: (wire name, kind) in name order."""


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
    dirty: dict[str, Events | None] | None = None,
    stats: WalkStats | None = None,
) -> Scan:
    """Walks `root` and sorts every path below it.

    Args:
        root: absolute path of the workspace.
        rules: the ignore rules in force at the root, before its own `.gitignore`.
        exclude: relative wire paths never captured nor entered (the store is one).
        max_file_bytes: larger files are listed in `large`, not captured.
        listings: the per-directory cache, read and brought up to date (None: no cache).
        trust_before: a listing is only kept for a directory (and its `.gitignore`)
            whose times are older than this (ns since the epoch): one changed again
            within the same timestamp tick would otherwise look unchanged.
        watcher: watches every directory scanned, so that the next call can be told
            which ones changed.
        memory: what each directory contributed to the last scan (updated).
        dirty: what had events since the last scan (from `watcher`), per directory.
            Any other directory is taken from `memory` without a single system call;
            in one with events only the named children are looked at again (its
            listing is read again if it changed). None: nothing is known, every
            directory is read.
        stats: where to record what had to be done afresh (None: nowhere).

    Raises:
        SnapshotError: a directory or symlink could not be read.
    """
    found = Scan()
    # Listings hold ignore and exclusion decisions: they are only good under the same ones.
    key = listing_key(rules.key, exclude)
    old = listings.dirs if listings is not None and listings.base == key else {}
    fresh: dict[str, Listing] = {}
    remembered = memory if memory is not None and dirty is not None else {}
    visited: dict[str, DirScan] = {}
    # (relative dir, absolute dir, rules above it, whether those rules are as cached,
    #  whether they are as remembered)
    pending: list[tuple[str, str, Rules, bool, bool]] = [("", root, rules, True, True)]
    while pending:
        rel_dir, abs_dir, above, rules_as_cached, rules_as_remembered = pending.pop()
        last = remembered.get(rel_dir)
        # From memory: the kinds of the children, and the stats of files no event named.
        memory_hints: dict[str, str] = {}
        known: dict[str, os.stat_result] = {}
        if rules_as_remembered and last is not None and last.reusable and dirty is not None:
            # No event here since the last scan: nothing changed. Files written in
            # place: only they are looked at again.
            events = dirty.get(rel_dir, _QUIET)
            part = None
            if events is _QUIET:
                part = last
            elif events is not None and not events.names & {b".gitignore", b".git"}:
                if not events.listing:
                    part = _refresh(last, abs_dir, events.names, max_file_bytes)
                else:
                    memory_hints, known = _remembered(last, events.names)
            if part is not None:
                _merge(found, part.found)
                visited[rel_dir] = part
                if rel_dir in old:
                    fresh[rel_dir] = old[rel_dir]
                pending.extend(
                    (rel, path, part.rules, True, True) for rel, path in reversed(part.subdirs)
                )
                continue
        if watcher is not None:
            # Watch before reading, so a change made while we read shows up next time.
            watcher.watch(rel_dir, os.fsencode(abs_dir))
        cached = old.get(rel_dir)
        try:
            dir_stat = os.lstat(abs_dir)
            if not stat.S_ISDIR(dir_stat.st_mode):
                raise SnapshotError(rel_dir or ".", "changed while it was scanned")
            stamp = _stamp(dir_stat)
            # An unchanged listing says whether `.gitignore` and `.git` are there: no need
            # to ask the file system (a third of a warm scan's system calls).
            names = _special_names(cached.children) if cached and cached.stamp == stamp else None
            ignore_stat = (
                _lstat_or_none(os.path.join(abs_dir, ".gitignore"))
                if names is None or ".gitignore" in names
                else None
            )
        except OSError as exc:
            raise SnapshotError(rel_dir or ".", f"cannot read: {exc.strerror}") from None
        ignore_stamp = _stamp(ignore_stat) if ignore_stat is not None else None
        reuse = (
            rules_as_cached
            and cached is not None
            and cached.stamp == stamp
            and cached.ignore_file == ignore_stamp
        )
        has_git = None if names is None else ".git" in names
        dir_rules, nested_repo = _rules_inside(rel_dir, abs_dir, above, ignore_stat, has_git)
        if nested_repo:
            reuse = False  # its rules come from its own .git, which this cache does not stamp
        if reuse and cached is not None:
            children = cached.children
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
            if not hints and last is not None and last.ignore_stamp == ignore_stamp:
                hints = memory_hints  # same rules as remembered (no event on .gitignore)
            children = _classify(rel_dir, abs_dir, dir_rules, exclude, hints, stats=stats)
        trusted = max(stamp[2], stamp[3], *(ignore_stamp[2:] if ignore_stamp else ())) < (
            trust_before
        )
        if trusted:
            fresh[rel_dir] = Listing(stamp, ignore_stamp, children)
        part = DirScan(
            ignore_stamp=ignore_stamp,
            rules=dir_rules,
            reusable=not nested_repo,
            found=Scan(),
            subdirs=[],
            children=children,
        )
        here = part.found
        prefix = abs_dir + "/"  # plain concatenation: os.path.join cost a fifth of a warm scan
        for name, kind in children:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if kind == _DIR:
                here.dirs.append(rel)
                part.subdirs.append((rel, prefix + _os_name(name)))
            elif kind == _FILE:
                try:
                    st = known.get(name) or os.lstat(prefix + _os_name(name))
                except FileNotFoundError:
                    continue  # deleted while we walked: simply not part of this snapshot
                except OSError as exc:
                    raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
                if not stat.S_ISREG(st.st_mode):
                    # Replaced by something else after the listing: take it from the top.
                    return scan_tree(
                        root, rules, exclude=exclude, max_file_bytes=max_file_bytes, stats=stats
                    )
                if st.st_size > max_file_bytes:
                    here.large.append(rel)
                else:
                    here.files.append((rel, st))
            elif kind == _LINK:
                path = prefix + _os_name(name)
                try:
                    target = wire_name(os.readlink(path))
                    mode = os.lstat(path).st_mode & 0o777
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise SnapshotError(rel, f"cannot read symlink: {exc.strerror}") from None
                here.symlinks.append((rel, target, mode))
            elif kind in (_IGNORED, _IGNORED_DIR):
                here.ignored.append(rel)
            else:
                here.excluded.append(rel)
        _merge(found, here)
        visited[rel_dir] = part
        same_rules = (
            rules_as_remembered
            and last is not None
            and last.ignore_stamp == ignore_stamp
            and not nested_repo
        )
        pending.extend(
            (rel, path, dir_rules, reuse and trusted, same_rules)
            for rel, path in reversed(part.subdirs)
        )
    if listings is not None:
        listings.base = key
        listings.dirs = fresh
    if memory is not None:
        memory.clear()
        memory.update(visited)
    return found


_QUIET = Events()  # stands for "no event" in a lookup


def _remembered(
    last: DirScan, names: set[bytes]
) -> tuple[dict[str, str], dict[str, os.stat_result]]:
    """What a directory's memory still vouches for after events on `names`.

    Returns the kinds of its children (hints for classifying it again) and the
    stats of its files that no event named (unchanged since they were taken).
    """
    touched = {wire_name(os.fsdecode(raw)) for raw in names}
    known = {
        name: st for rel, st in last.found.files if (name := rel.rpartition("/")[2]) not in touched
    }
    return dict(last.children), known


def _refresh(last: DirScan, abs_dir: str, names: set[bytes], max_file_bytes: int) -> DirScan | None:
    """Returns `last` with the named files (changed in place) stat'ed and sized again.

    None when the directory must be read again: a named file is no longer a
    regular file, or is not where the last listing put it.
    """
    prefix = abs_dir + "/"
    fresh: dict[str, os.stat_result] = {}
    for raw in names:
        name = os.fsdecode(raw)
        try:
            st = os.lstat(prefix + name)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode):
            fresh[wire_name(name)] = st
        elif not stat.S_ISDIR(st.st_mode):
            return None  # a symlink or special file now where a name changed: list again
    if not fresh:
        return last
    listed = {rel.rpartition("/")[2] for rel, _ in last.found.files}
    listed.update(rel.rpartition("/")[2] for rel in last.found.large)
    listed.update(rel.rpartition("/")[2] for rel in last.found.ignored)
    if not fresh.keys() <= listed:
        return None  # not where the last listing put it: list again
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
    for rel, st in sized:
        if st.st_size > max_file_bytes:
            here.large.append(rel)
        else:
            here.files.append((rel, st))
    return DirScan(
        ignore_stamp=last.ignore_stamp,
        rules=last.rules,
        reusable=True,
        found=here,
        subdirs=last.subdirs,
        children=last.children,
    )


def _merge(into: Scan, part: Scan) -> None:
    into.files += part.files
    into.symlinks += part.symlinks
    into.dirs += part.dirs
    into.ignored += part.ignored
    into.large += part.large
    into.excluded += part.excluded


def _lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _special_names(children: list[tuple[str, str]]) -> set[str]:
    """Which of `.git` and `.gitignore` a listing holds."""
    return {name for name, _ in children if name in (".git", ".gitignore")}


def _rules_inside(
    rel_dir: str,
    abs_dir: str,
    above: Rules,
    ignore_stat: os.stat_result | None,
    has_git: bool | None,
) -> tuple[Rules, bool]:
    """Returns the rules in force inside a directory, and whether it is a nested repository.

    `has_git`: whether a `.git` is there, if an unchanged listing says (None: look).
    """
    dir_rules = above
    if has_git is None:
        has_git = os.path.lexists(os.path.join(abs_dir, ".git"))
    nested_repo = bool(rel_dir) and has_git
    if nested_repo:
        # git run inside a nested repository reads only that repository's ignore files.
        dir_rules = repo_rules(above, rel_dir) or above
    # git does not follow a symlinked .gitignore (>= 2.32), nor reads a non-file.
    if ignore_stat is not None and stat.S_ISREG(ignore_stat.st_mode):
        dir_rules = dir_rules.child(rel_dir, _read_ignore_file(abs_dir, rel_dir))
    return dir_rules, nested_repo


def _classify(
    rel_dir: str,
    abs_dir: str,
    dir_rules: Rules,
    exclude: frozenset[str],
    hints: dict[str, str],
    *,
    stats: WalkStats | None,
) -> list[tuple[str, str]]:
    """Lists a directory and classifies each child (dir, file, link, ignored, excluded).

    `hints` holds the kinds an earlier listing under the same rules gave; a name
    whose entry has the type its kind implies keeps it.
    """
    try:
        with os.scandir(abs_dir) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise SnapshotError(rel_dir or ".", f"cannot list directory: {exc.strerror}") from None
    if stats is not None:
        stats.listed.append(rel_dir)
    children: list[tuple[str, str]] = []
    for entry in entries:
        name = wire_name(entry.name)
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if is_git_name(name) or excluded_entry(exclude, rel, entry):
            # git never tracks any spelling of .git; a manifest holding one is refused.
            children.append((name, _EXCLUDED))
            continue
        try:
            # d_type answers these without a system call.
            is_dir = entry.is_dir(follow_symlinks=False)
            hint = hints.get(name)
            if hint is not None and _still(hint, entry, is_dir=is_dir):
                children.append((name, hint))
                continue
            if stats is not None:
                stats.matched.append(rel)
            if dir_rules.ignored(rel, is_dir=is_dir):
                children.append((name, _IGNORED_DIR if is_dir else _IGNORED))
            elif is_dir:
                children.append((name, _DIR))
            elif entry.is_symlink():
                children.append((name, _LINK))
            elif entry.is_file(follow_symlinks=False):
                children.append((name, _FILE))
            else:
                # Sockets, FIFOs and devices are never captured, so never touched.
                children.append((name, _EXCLUDED))
        except FileNotFoundError:
            continue  # deleted while we walked: simply not part of this snapshot
        except OSError as exc:
            raise SnapshotError(rel, f"cannot read: {exc.strerror}") from None
    return children


def _still(kind: str, entry: os.DirEntry[str], *, is_dir: bool) -> bool:
    """True when `entry` is still of the type that `kind` was decided for."""
    if kind in (_DIR, _IGNORED_DIR):
        return is_dir
    if kind == _IGNORED:
        return not is_dir  # for a non-directory the decision does not depend on its type
    if kind == _LINK:
        return entry.is_symlink()
    if kind == _FILE:
        return entry.is_file(follow_symlinks=False)
    return False  # excluded: decided by name, or by being a special file; decide again


def _read_ignore_file(abs_dir: str, rel_dir: str) -> bytes:
    try:
        with open(os.path.join(abs_dir, ".gitignore"), "rb") as f:
            return f.read()
    except OSError as exc:
        where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
        raise SnapshotError(where, f"cannot read: {exc.strerror}") from None
