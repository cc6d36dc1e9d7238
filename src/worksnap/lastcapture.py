"""The last capture, kept so that the next plain one need not walk the tree.

A plain (unwatched) capture in a new process walks every directory and stats every
file. After a snapshot is saved, this keeps what its capture found (its manifest) and
what that answer rested on: each directory's stamp and its `.gitignore`'s, each file's
state, and the key of everything else (the rules, the exclusions, the size cap, the
timestamp tick, git's index) and of the store's objects (`ObjectStore.witness`).

The next plain capture, in any process, first `look`s at only those: the stamp of every
directory the walk entered (it moves when a child is added, removed, renamed or
replaced), its `.gitignore`'s, and the state of every file (it moves when the file is
written or chmod-ed). When none moved, the capture is the last one. When only files'
states moved, those files are hashed again and the trees above them encoded again
(`retree`). Anything else (a directory changed, a file now over the cap or of another
kind, other rules, git's index, a sweep) and the walk runs as always.

Only what the walk itself trusted is kept: it is kept only when every directory's listing
was (older than the racy margin: `scan.py`), and a file's state only when its times
were (else None: the file is hashed again, as the stat cache would).

A second implementation of the walk (`scan.py`, `capture.py`) and of the tree build
(`treebuild.py`): `tests/test_watch_differential.py`'s new-workspace walk holds them
equal, `tests/test_last_capture.py` tries what would fool it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import msgspec

from worksnap.caches import TREE_CACHE_VERSION, Listing, StatTable, listing_key
from worksnap.errors import ManifestError, WorksnapError
from worksnap.flatbuild import child_of
from worksnap.frames import CHUNK, MAX_UNPACKED, ZSTD_MAGIC, msgpack_array, pack_pieces, unpack
from worksnap.fsio import MODES, DirTree, FileState, Stamp, file_state, is_coarse, stamp_of
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Digest, Root, fs_path
from worksnap.scanparts import DIR_FLAGS, os_name
from worksnap.sources import index_file, source_stamp
from worksnap.store import ObjectStore
from worksnap.storedir import StoreDir
from worksnap.tree import FORMAT, Child, Dir, File, Read, Write, encode_directory
from worksnap.treebuild import CaptureTrees
from worksnap.treewalk import Loose, children

VERSION = 1
"""Of the kept capture's encoding; another one is not used (and is replaced)."""

MOST_MOVED = 4096
"""More files moved than this: the walk runs (it reads ahead, and keeps every cache)."""

SPLIT_AT = 4096
"""A look at more files than this is shared with a forked child, when there is a core
for it (git's preload-index does the same with threads)."""

LONGEST = 4000
"""The longest path a look reaches in one call (`PATH_MAX`, 4096, less a `/.gitignore`)."""

Group = tuple[str, Stamp, Stamp | None, list[int], list[FileState | None]]
"""A directory the walk entered: its path, its stamp, its `.gitignore`'s (None: none), the
index of each file entry in it, and each one's state (None: not trusted, hashed again)."""

IndexKey = tuple[str | None, Stamp | None]
"""Git's index file (None: outside a repository) and its stamp (None: none there)."""

Moved = list[tuple[int, int]]
"""The files whose state moved, as (group, file) positions."""


class LastCapture(msgspec.Struct, array_like=True, frozen=True):
    """A capture and what it rested on."""

    version: int
    key: bytes
    """The rules, exclusions, size cap, tick and git's index it was taken under (`key`)."""
    witness: bytes
    """The store's objects when it was kept (`ObjectStore.witness`)."""
    head: Manifest
    """The capture, less its entries."""
    loose: Loose
    total: int
    """The bytes of its files."""
    groups: list[Group]
    entries: list[Entry]
    """The capture's entries: last, written a chunk at a time (`save`)."""

    @property
    def manifest(self) -> Manifest:
        """The capture."""
        return msgspec.structs.replace(self.head, entries=self.entries)


def key(listed: bytes, cap: int, tick: int, index: IndexKey) -> bytes:
    """What a capture's decisions rested on besides the tree: equal keys, equal decisions.

    `listed`: the listing cache's key (the rules and exclusions: `caches.listing_key`).
    The tree format and the tree cache's version are in it too: a capture whose trees were
    encoded otherwise is not taken again.
    """
    return msgspec.msgpack.encode((listed, cap, tick, index, FORMAT, TREE_CACHE_VERSION))


def settled(index: str | None, stamp: tuple[int, ...] | None, racy_before: int) -> IndexKey | None:
    """Git's index file and its stamp as read, unless it may have changed since unseen.

    `racy_before`: an index whose times are not older than this may have changed again
    within them (`sources.RACY_SOURCE_NS`).
    """
    if stamp is not None and max(stamp[2:]) >= racy_before:
        return None
    return index, None if stamp is None else (stamp[0], stamp[1], stamp[2], stamp[3])


HashFile = Callable[..., tuple[str, os.stat_result]]
"""Hashes (and stores) a file: `Capture.hash_and_store`, given its path, `tree` and `base`."""

_Walked = tuple[Manifest, Mapping[str, Listing], StatTable, bytes, IndexKey | None]


class Keeper:
    """The last capture of one workspace: read once, taken again, kept after each snapshot.

    Args:
        files: the store's directory (the capture is kept in `cache/capture`).
        store: its objects (read for the trees, written to when capturing to store).
        root: the workspace root.
        trees: the capture's trees (told of trees taken as stored, asked of those built).
        enabled: False: nothing is taken nor kept (every capture walks).
    """

    def __init__(
        self, files: StoreDir, store: ObjectStore, root: Root, trees: CaptureTrees, *,
        enabled: bool = True) -> None:  # fmt: skip
        self._files, self._store, self._root, self._trees = files, store, root, trees
        self._enabled = enabled
        self._last: LastCapture | None = None
        self._pending: LastCapture | _Walked | None = None
        self.taken = 0
        """How many captures were taken without a walk (tests count them)."""

    def take(
        self, rules_key: bytes, *, store_objects: bool, cap: int, tick: int, margin: int,
        trust_before: int, hash_file: HashFile) -> Manifest | None:  # fmt: skip
        """The last snapshot's capture with the files whose state moved hashed again.

        None: it cannot be taken (none kept, or something it rested on moved): walk.
        `margin`: the racy margin (a file changed within it is read twice); a file's new
        state is kept when its times are older than `trust_before`.
        """
        self._pending = None
        if not self._enabled:
            return None
        last = self._last = self._last or load(self._files, self._files.paths.last_capture)
        if last is None or last.head.root != self._root.wire:
            return None
        index = index_file(Path(self._root.path))
        now = (index, None if index is None else source_stamp(index))
        listed = listing_key(rules_key, self._root.exclude)
        if last.key != key(listed, cap, tick, now):
            return None
        if store_objects and last.witness != self._store.witness():
            return None  # objects may be gone, or packs were merged
        moved = look(self._root.path, last, cap)
        if moved is None:
            return None
        if moved:
            write: Write = self._store.add_tree if store_objects else _discard
            try:
                with DirTree(self._root.path) as tree:
                    renewed = renew(
                        last, moved, lambda rel, base: hash_file(
                            rel, store_objects=store_objects, tree=tree, recent_ns=margin,
                            base=base),
                        read=self._store.read, write=write, trust_before=trust_before, tick=tick,
                    )  # fmt: skip
            except (WorksnapError, OSError):
                return None  # (the walk says what it is, if it is anything)
            if renewed is None:
                return None
            last = renewed
        if store_objects:
            self._pending = last
            self._trees.took(last.head.tree, last.loose, last.total)
        self.taken += 1
        return last.manifest

    def walked(
        self, current: Manifest, listings: Mapping[str, Listing], table: StatTable,
        rules_key: bytes, *, cap: int, tick: int, index: IndexKey | None) -> None:  # fmt: skip
        """Notes a walk's capture that stored its objects, to keep if a snapshot of it is saved.

        `index`: git's index as it read it (None: it may have changed unseen; not kept).
        """
        listed = key(listing_key(rules_key, self._root.exclude), cap, tick, index or (None, None))
        self._pending = (current, listings, table, listed, index) if self._enabled else None

    def keep(self) -> None:
        """Keeps the last capture for the next plain one: call once a snapshot of it is saved.

        Nothing when it was a watcher's, or when the walk cannot vouch for it (`kept`).
        Under the store's lock: no sweep between the save and the witness taken here.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if not isinstance(pending, LastCapture):
            current, listings, table, listed, index = pending
            built, groups = self._trees.stored(current), kept(current, listings, table)
            if built is None or groups is None or index is None:
                return
            head = msgspec.structs.replace(current, entries=[])
            pending = LastCapture(VERSION, listed, b"", head, built[0], built[1], groups,
                                  current.entries)  # fmt: skip
        witness = self._store.witness()
        if pending is self._last and pending.witness == witness:
            return  # taken again as it was kept
        last = msgspec.structs.replace(pending, witness=witness)
        try:
            save(self._files, self._files.paths.last_capture, last)
        except OSError:
            return  # (a full disk: the next capture walks)
        self._last = last


def kept(
    manifest: Manifest,
    listings: Mapping[str, Listing],
    table: StatTable,
) -> list[Group] | None:
    """The groups of a walk's capture: None when it cannot be kept.

    Args:
        manifest: what the walk captured.
        listings: the listing cache it left (trusted listings only, keyed under its rules).
        table: the stat cache it left (trusted states only).

    Not kept: a directory it entered without a trusted listing (changed within the racy
    margin, or a nested repository's, whose rules come from its own `.git`), or a path
    too long for a look (`LONGEST`).
    """
    dirs = ["", *manifest.dirs]
    if len(listings) != len(dirs) or any(
        len(fs_path(path)) > LONGEST for path in (*manifest.dirs, *manifest.large)
    ):
        return None
    groups: dict[str, Group] = {}
    for d in dirs:
        listing = listings.get(d)
        if listing is None:
            return None
        groups[d] = (d, listing.stamp, listing.ignore_file, [], [])
    for i, entry in enumerate(manifest.entries):
        if entry.type == "file":
            hit = table.get(entry.path)
            if (group := groups.get(entry.path.rpartition("/")[0])) is None:
                return None
            group[3].append(i)
            group[4].append(hit[0] if hit is not None and hit[1] == entry.hash else None)
    if any(path.rpartition("/")[0] not in groups for path in manifest.large):
        return None
    return list(groups.values())


def load(store: StoreDir, path: str) -> LastCapture | None:
    """The kept capture (None: none, damaged, of another version, or not as `keep` writes).

    Only a checksummed frame is read, and only one that gives each file of a group a state.
    """
    try:
        data = store.read_optional(path, limit=MAX_UNPACKED)
        if data is None or not data.startswith(ZSTD_MAGIC):
            return None
        last = msgspec.msgpack.decode(unpack(data), type=LastCapture)
    except (OSError, ValueError):  # msgspec.DecodeError is a ValueError
        return None
    if any(len(group[3]) != len(group[4]) for group in last.groups):
        return None  # (each index is checked where it is used: `_look`)
    return last if last.version == VERSION else None


def save(store: StoreDir, path: str, last: LastCapture) -> None:
    """Keeps a capture (not durably: losing it costs a walk).

    Encoded and compressed a piece at a time (its entries are 34 MB of msgpack at 200k
    files): exactly `msgspec.msgpack.encode(last)`.
    """
    encoder = msgspec.msgpack.Encoder()

    def pieces() -> Iterator[bytes]:
        yield encoder.encode(msgspec.structs.replace(last, entries=[]))[:-1]  # less its `[]`
        entries = last.entries
        chunks = (entries[at : at + CHUNK] for at in range(0, len(entries), CHUNK))
        yield from msgpack_array(encoder, len(entries), chunks)

    store.write(path, pack_pieces(pieces), durable=False)


def look(root: str, last: LastCapture, cap: int) -> Moved | None:
    """The files whose state moved since `last` was kept; None: the tree must be walked.

    A directory's or `.gitignore`'s stamp moved, a large file no longer over `cap`, a
    file over it or no longer a regular file, anything gone or unreadable: None.
    """
    try:
        root_fd = os.open(root, DIR_FLAGS)
    except OSError:
        return None  # (the walk says why)
    try:
        for path in last.head.large:  # (few)
            st = os.lstat(os_name(path), dir_fd=root_fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size <= cap:
                return None
        if len(last.entries) <= SPLIT_AT or not _alone() or _cores() < 2:
            return _look(root_fd, last, cap, 0, 1)
        return _shared(root_fd, last, cap)
    except (OSError, IndexError):
        return None
    finally:
        os.close(root_fd)


_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
"""Blocked across `_shared`'s fork (`stopsignals.py` turns some into exceptions)."""


def _alone() -> bool:
    """True when this process runs one thread (a library's own, such as BLAKE3's, count).

    A fork copies the caller's thread alone, and no lock another one holds.
    """
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # (no /proc)
        return threading.active_count() == 1


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):  # (not on macOS)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _shared(root_fd: int, last: LastCapture, cap: int) -> Moved | None:
    """`look`, with a forked child taking every other directory.

    The stopping signals are blocked from before the fork until the child is reaped and
    the pipe closed (a Ctrl-C waits for the look, a fraction of a second): a child
    interrupted before it reached `os._exit` ran on as a second copy of the caller, and
    released the store's lock, shared with the parent, on its way out; a parent
    interrupted there leaked the pipe, or left the child a zombie (two reviews).
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
    try:
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # (no process to spare: look alone, below)
            os.close(read_end)
            os.close(write_end)
            pid = -1
        if pid == 0:  # the child: look, say what moved, and leave without cleaning up
            try:
                os.close(read_end)
                moved = _look(root_fd, last, cap, 1, 2)
                if moved is not None:
                    data = memoryview(msgspec.msgpack.encode(moved))
                    while data:
                        data = data[os.write(write_end, data) :]
            finally:
                os._exit(0)
        if pid > 0:
            os.close(write_end)
            mine, theirs = None, b""
            try:
                with contextlib.suppress(OSError, IndexError):
                    mine = _look(root_fd, last, cap, 0, 2)
                if mine is not None:
                    with open(read_end, "rb", closefd=False) as f:
                        theirs = f.read()
            finally:
                if not theirs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                os.close(read_end)
                with contextlib.suppress(ChildProcessError):  # (reaped: SIGCHLD ignored)
                    os.waitpid(pid, 0)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # (a stop waiting is raised here)
    if pid < 0:
        return _look(root_fd, last, cap, 0, 1)
    if mine is None:
        return None
    try:
        moved = mine + msgspec.msgpack.decode(theirs, type=list[tuple[int, int]])
    except msgspec.DecodeError:
        return None  # the child found a reason to walk (nothing said), or died saying it
    return moved if len(moved) <= MOST_MOVED else None


def _look(root_fd: int, last: LastCapture, cap: int, first: int, step: int) -> Moved | None:
    """`look` at every `step`th directory from the `first`: their stamps, then their files.

    (A directory changed is the likelier reason to walk, and is found before any file.)
    """
    mine = range(first, len(last.groups), step)
    for g in mine:
        d, dir_stamp, ignore_stamp, _, _ = last.groups[g]
        if stamp_of(os.lstat(os_name(d or "."), dir_fd=root_fd)) != dir_stamp:
            return None
        if ignore_stamp is not None:
            ignore = os.lstat(os_name(f"{d}/.gitignore" if d else ".gitignore"), dir_fd=root_fd)
            if stamp_of(ignore) != ignore_stamp:
                return None
    moved: Moved = []
    entries, regular = last.entries, stat.S_ISREG
    for g in mine:
        d, _, _, indexes, states = last.groups[g]
        fd = os.open(os_name(d or "."), DIR_FLAGS, dir_fd=root_fd)
        try:
            for f, index in enumerate(indexes):
                entry = entries[index]  # (an index out of range: IndexError, walk)
                name = entry.path.rpartition("/")[2]
                st = os.lstat(os_name(name), dir_fd=fd)
                if st.st_size > cap or not regular(st.st_mode) or entry.type != "file":
                    return None
                if (state := states[f]) is None or file_state(st) != state:
                    moved.append((g, f))
                    if len(moved) > MOST_MOVED:
                        return None
        finally:
            os.close(fd)
    return moved


def renew(
    last: LastCapture,
    moved: Moved,
    hash_file: Callable[[str, str | None], tuple[str, os.stat_result]],
    *,
    read: Read,
    write: Write,
    trust_before: int,
    tick: int,
) -> LastCapture | None:
    """`last` with the files whose state moved hashed again (None: the tree must be walked).

    Args:
        last: the kept capture.
        moved: what `look` found.
        hash_file: hashes (and stores) the file at a path, given its last digest as a base.
        read: reads a stored tree object.
        write: stores a new tree object (or discards it).
        trust_before: a file's new state is kept when its times are older than this.
        tick: the timestamp tick known (0: none).

    A file now larger than the cap or not a regular file, or with times in whole
    seconds while the tick is not known (the walk learns it), needs the walk.
    """
    entries, groups = list(last.entries), list(last.groups)
    changed: dict[str, Entry] = {}
    total = last.total
    for g, f in moved:
        d, dir_stamp, ignore_stamp, indexes, states = groups[g]
        if states is last.groups[g][4]:
            states = list(states)
            groups[g] = (d, dir_stamp, ignore_stamp, indexes, states)
        old = entries[indexes[f]]
        digest, st = hash_file(old.path, old.hash)
        if not stat.S_ISREG(st.st_mode) or st.st_size > last.head.max_file_bytes:
            return None
        if not tick and is_coarse(st):
            return None
        trusted = st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before
        states[f] = file_state(st) if trusted else None
        entry = Entry(path=old.path, type="file", mode=MODES[st.st_mode & 0o777], hash=digest,
                      size=st.st_size)  # fmt: skip
        if entry != old:
            entries[indexes[f]] = changed[old.path] = entry
            total += (entry.size or 0) - (old.size or 0)
    head = last.head
    if changed:
        head = msgspec.structs.replace(head, tree=retree(Digest(head.tree), changed, read, write))
    return msgspec.structs.replace(
        last, head=head, total=total, groups=groups, entries=entries if changed else last.entries
    )


def retree(root: Digest, files: Mapping[str, Entry], read: Read, write: Write) -> Digest:
    """The root tree with each of `files` in place of the file child at its path.

    Only the directories that hold them, and those above, are read and encoded again
    (`write` gets their objects); every other subtree is named as it was.

    Raises:
        ManifestError: a path's directory or file is not in the tree as it should be.
    """
    kids: dict[str, list[Child]] = {}

    def load_dir(d: str) -> list[Child]:
        if (found := kids.get(d)) is not None:
            return found
        digest = root
        if d:
            parent, _, name = d.rpartition("/")
            sub = next((c for c in load_dir(parent) if c.name == name), None)
            if type(sub) is not Dir:
                raise ManifestError(d, "is not a directory of the last capture's tree")
            digest = Digest(sub.tree.hex())
        found = kids[d] = list(children(digest, read, d or "."))
        return found

    for path in files:
        load_dir(path.rpartition("/")[0])
    new: dict[str, bytes] = {}
    placed = 0
    # Deepest first: each directory is encoded after every one below it.
    for d in sorted(kids, key=lambda d: d.count("/") if d else -1, reverse=True):
        prefix = f"{d}/" if d else ""
        listing = kids[d]
        for i, child in enumerate(listing):
            path = prefix + child.name
            if type(child) is File and (entry := files.get(path)) is not None:
                listing[i] = child_of(child.name, entry)
                placed += 1
            elif type(child) is Dir and (tree := new.get(path)) is not None:
                listing[i] = Dir(name=child.name, tree=tree)
        encoded = encode_directory(listing, f"new tree of {d or '.'!r}")
        for digest, data in encoded.objects:
            write(digest, data)
        new[d] = bytes.fromhex(encoded.digest)
    if placed != len(files):
        raise ManifestError(".", "a file of the last capture is not in its tree")
    return Digest(new[""].hex())


def _discard(digest: Digest, data: bytes) -> None:
    """A tree object's `write` when nothing is stored (a capture that only compares)."""
