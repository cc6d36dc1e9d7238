"""Layout: where a store is, and the name of every file and folder inside it.

The only module that spells them; every other module asks a `StorePaths`
(`paths.journal`, `paths.manifest(id)`), so the layout in docs/format.md can be
read, and changed, in one place:

    <store>/                     <git-dir>/worksnap in a git work tree, else <root>/.worksnap,
                                 or --store / $WORKSNAP_STORE (see `locate`)
      .gitignore                 "*": git never shows the store
      root                       the root this store belongs to (one line)
      format                     the store's format ("3"); a newer one is refused
      packs/<name>.pack          small objects, each a zstd frame (raw in version 1 packs)
      packs/<name>.idx           msgpack ["wspack", 2, [[digest, stored, raw, base], ...]]
                                 (version 1: [[digest, offset, size], ...]); written last
      objects/<aa>/<62 hex>      objects of 1 MiB or more, one file each
      snapshots/<id>.json        a snapshot record (format 2: JSON naming its root tree)
      manifests/<id>.json        a format 1 manifest (a zstd frame of what `show --json`
                                 prints); only in a store not migrated yet
      summaries/<id>.json        the few fields `list` shows (format 1, beside its manifest)
      cache/stat, cache/dirs     the stat and listing caches (may be deleted at any time)
      cache/trees, trees.log     the tree cache, base and appended log (the same)
      cache/multi-pack-index     every packed object's place, sorted by digest (the same)
      cache/timestamps           present when the file system keeps coarse (whole-second) times
      cache/last.json            each session's newest full snapshot, by id (the next one's parent)
      cache/capture              the last plain snapshot's capture, to take the next without a walk
      cache/remote/<id>/<digest> indexes of the remote repository <id> (immutable; a copy)
      generation                 rewritten by every gc sweep
      damaged-copies             packed copies `verify --repair` found damaged, not read
      dropped                    ids of snapshots a local gc dropped (a plain pull leaves them out)
      packs/!older-worksnap-stop.idx  written by the migration: no pack index, so that the
                                 gc of a worksnap older than format 2 stops there
      journal.json               present only while a restore runs
      sessions/<name>.json       a session's redo stack and open checkpoint
      pins.json                  ids gc never drops
      config.json                optional settings
      lock, lock.holder          the store lock and a note of its exclusive holder
      lock.gate                  taken by a waiting writer so new readers queue behind it
      lock.steps                 held while a session's next step is numbered and stored
      daemon.sock, daemon.log    the daemon's socket and log

Imports nothing but the standard library: the daemon's client imports it on every
command.
"""

from __future__ import annotations

import os
import stat  # already loaded: os.path imports it

# Not `typing`, `re`, `dataclasses` nor `hashlib` at load: the daemon's client imports
# this module on every command, and they would double its import time (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

STORE_DIR_NAME = ".worksnap"
"""The store's directory in the root, outside git work trees (and where older versions put it)."""

GIT_STORE_NAME = "worksnap"
"""The store's directory in the git directory of a work tree whose top is the root."""

TEMP_MARK = ".tmp-"
OLDER_STOP = "!older-worksnap-stop.idx"
"""A worksnap older than format 2 takes it for the first pack index (`!` sorts before any
pack name) and its gc fails on it, before deleting a pack: it would take every format 1
pack a migration left for dead, seeing no format 1 manifest (the docs' format.md)."""
STORE_FORMAT = 3
"""The store format this worksnap writes and reads up to, in the `format` file (3: packs of
zstd frames; a store without the file was written before it, and is read as it is)."""
"""In the name of every temp file a store write makes, so a sweep can tell leftovers."""

_JSON = ".json"
_PACK = ".pack"
_INDEX = ".idx"
_HEX = frozenset("0123456789abcdef")
_DOT_GIT = ".git"
_GITDIR_PREFIX = b"gitdir: "
_GIT_HEAD = "HEAD"
_GIT_FILE_MAX_BYTES = 1 << 16


class Location:
    """Where a command works: its root, its store, and how the root was chosen.

    Attributes:
        root: absolute and symlink-resolved.
        store: the store directory (it may not exist yet).
        found: how the root was chosen: "option" (`--root`), "store" (the nearest
            directory at or above the current one that has a store), "git" (the top
            of the enclosing git work tree), or "cwd" (the current directory).
    """

    __slots__ = ("found", "root", "store")

    root: str
    store: str
    found: str

    def __init__(self, root: str, store: str, found: str) -> None:
        # A frozen, slotted record, written out: `dataclasses` imports `re` and `inspect`.
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "store", store)
        object.__setattr__(self, "found", found)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Location is frozen: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Location):
            return NotImplemented
        return (self.root, self.store, self.found) == (other.root, other.store, other.found)

    def __hash__(self) -> int:
        return hash((self.root, self.store, self.found))

    def __repr__(self) -> str:
        return f"Location(root={self.root!r}, store={self.store!r}, found={self.found!r})"


def locate(cwd: str, *, root: str | None = None, store: str | None = None) -> Location:
    """Finds the root and the store a command run in `cwd` works on, as git finds its repository.

    With `root` (`--root`), that is the root. Otherwise the walk goes up from `cwd` to the
    nearest directory that has a store (its own `.worksnap`, or one in the git directory
    of the work tree it is the top of); failing that, the root is the top of the enclosing
    git work tree; failing that, `cwd` itself. `/` and the home directory are never found
    this way (their stores are used only when named with `--root`).

    A store named by `store` (`--store`) or `$WORKSNAP_STORE` is that store; then the root
    is the one it is bound to if `cwd` lies inside it, else found as above but for stores.

    Nothing is written; a few `stat` calls per directory above `cwd`.
    """
    chosen = store if store is not None else os.environ.get("WORKSNAP_STORE") or None
    if root is not None:
        real = os.path.realpath(root)
        return Location(real, store_location(real, store), "option")
    here = os.path.realpath(cwd)
    tops = _git_tops(here)
    if chosen is not None:
        store_dir = os.path.abspath(chosen)
        bound = _bound_root(store_dir)
        if bound is not None and _is_within(here, bound):
            return Location(bound, store_dir, "store")
        top = next(iter(tops.values()), None)
        return Location(top or here, store_dir, "git" if top else "cwd")
    skipped = {"/", os.path.realpath(os.path.expanduser("~"))}
    for directory, top in tops.items():
        if directory in skipped:
            continue
        found = _existing_store(directory, top)
        if found is not None:
            return Location(directory, found, "store")
    top = next((t for t in tops.values() if t is not None), None)
    if top is not None:
        return Location(top, _default_store(top, top), "git")
    return Location(here, _default_store(here, None), "cwd")


def store_location(root: str, store: str | None) -> str:
    """The store directory of a (real) root.

    `store` if given, else $WORKSNAP_STORE, else the store the root already has (its own
    `.worksnap`, or one in its git directory), else the default for a new one: in the
    git directory when the root is inside a git work tree (`git clean -fdx` never touches
    it), else `<root>/.worksnap`.
    """
    chosen = store if store is not None else os.environ.get("WORKSNAP_STORE")
    if chosen:
        return os.path.abspath(chosen)
    top = _enclosing_git_top(root)
    return _existing_store(root, top) or _default_store(root, top)


def belongs_elsewhere(bound: str, root: str, show: Callable[[str], str] = str) -> str:
    """What to say of a store or snapshot of the root `bound`, met from `root`.

    `worksnap rebind` is for a project that moved. Where `bound` is still there, the
    command was run in the wrong place (or with another project's store named): a review
    followed the rebind advice there and took a project's own store away from it.
    """
    if os.path.isdir(bound):
        hint = f"it is still there: run worksnap inside it, or with --root {bound}"
    else:
        hint = "if the project moved here, run `worksnap rebind`"
    return f"belongs to {show(bound)}, not {show(root)} ({hint})"


def git_dir(work_tree: str) -> str | None:
    """The git directory of the work tree whose top is `work_tree` (None: none, or unreadable).

    As git finds it: `.git` is the directory, or a file `gitdir: PATH` (linked work
    trees, submodules, `--separate-git-dir`), PATH relative to the work tree. A linked
    work tree's own git directory is used, not the common one: each work tree is a root
    of its own, and a store serves one root. The environment (`GIT_DIR`) is not read:
    git sets it for hooks, which must still find the work tree's own store.
    """
    dot_git = os.path.join(work_tree, _DOT_GIT)
    try:
        st = os.stat(dot_git)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        named = dot_git
    elif stat.S_ISREG(st.st_mode):
        found = _read_small(dot_git, follow=True)
        text = found.rstrip(b"\r\n") if found is not None else b""
        if not text.startswith(_GITDIR_PREFIX) or b"\n" in text:
            return None
        named = os.path.realpath(os.path.join(work_tree, os.fsdecode(text[len(_GITDIR_PREFIX) :])))
    else:
        return None
    # As git's own test: a git directory has a HEAD. A `.git` naming anything else (a
    # stray folder, a tarball's `gitdir: /somewhere`) is not one: the store stays home.
    return named if os.path.isfile(os.path.join(named, _GIT_HEAD)) else None


def _git_tops(directory: str) -> dict[str, str | None]:
    """Every directory from `directory` up to `/`, each with the top of its git work tree."""
    chain = [directory]
    while chain[-1] != "/":
        chain.append(os.path.dirname(chain[-1]))
    tops: dict[str, str | None] = {}
    top: str | None = None
    for path in reversed(chain):  # from `/` down: a nearer `.git` starts a nested work tree
        if os.path.lexists(os.path.join(path, _DOT_GIT)):
            top = path
        tops[path] = top
    return {path: tops[path] for path in chain}


def _enclosing_git_top(directory: str) -> str | None:
    return _git_tops(directory)[directory]


def _git_store(root: str, top: str) -> str | None:
    """The store of `root` in the git directory of the work tree whose top is `top`."""
    directory = git_dir(top)
    if directory is None:
        return None
    if root == top:
        return os.path.join(directory, GIT_STORE_NAME)
    # A root below the top (`--root sub`): a store of its own, named after its path.
    tag = _path_tag(os.path.relpath(root, top))
    return os.path.join(directory, f"{GIT_STORE_NAME}-{tag}")


def _path_tag(rel: str) -> str:
    """The 16 hex digits of BLAKE2b-64 of a relative path, naming its store in the git directory.

    `hashlib.blake2b` is `_blake2.blake2b`, but importing hashlib costs 3 ms (OpenSSL):
    every walk up from a subdirectory of a git work tree asks for a tag, so the
    daemon's client would pay that on most commands; `_blake2` costs 0.4 ms.
    """
    try:
        from _blake2 import blake2b
    except ImportError:  # a Python built without its own hashes
        from hashlib import blake2b
    return blake2b(os.fsencode(rel), digest_size=8).hexdigest()


def _is_store(directory: str) -> bool:
    paths = StorePaths(directory)
    return os.path.isdir(paths.snapshots) or os.path.isdir(paths.manifests)


def _existing_store(root: str, top: str | None) -> str | None:
    """The store `root` already has: its `.worksnap`, else one in its git directory."""
    own = os.path.join(root, STORE_DIR_NAME)
    if _is_store(own):
        return own
    if top is not None:
        in_git = _git_store(root, top)
        if in_git is not None and _is_store(in_git):
            return in_git
    return None


def _default_store(root: str, top: str | None) -> str:
    in_git = _git_store(root, top) if top is not None else None
    return in_git or os.path.join(root, STORE_DIR_NAME)


def _bound_root(store_dir: str) -> str | None:
    """The root a store is bound to (None: no store there, or not bound yet)."""
    line = _read_small(StorePaths(store_dir).root, follow=False)
    bound = os.fsdecode(line.rstrip(b"\n")) if line is not None else ""
    return bound if os.path.isabs(bound) else None


def _read_small(path: str, *, follow: bool) -> bytes | None:
    """A small regular file's bytes; None for anything else (a FIFO must not hang a command).

    Opened non-blocking (and with `follow` False, not through a symlink), checked with
    `fstat`, read bounded.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _GIT_FILE_MAX_BYTES:
            return None
        return os.read(fd, _GIT_FILE_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


SESSION_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
"""A session's name: 1-64 letters, digits, `.`, `_` or `-`, starting with a letter or digit
(it names a file of the store: `sessions/<name>.json`)."""


def is_snapshot_id(text: str) -> bool:
    """True for a snapshot id's form: 12 lowercase hex characters (`manifest.new_id`)."""
    return len(text) == 12 and _HEX.issuperset(text)


class StorePaths:
    """The path of every file and folder of one store directory (nothing is touched)."""

    __slots__ = (
        "cache",
        "config",
        "daemon_log",
        "damaged_copies",
        "dir",
        "dropped",
        "format",
        "generation",
        "gitignore",
        "journal",
        "last_capture",
        "last_full",
        "listing_cache",
        "lock",
        "lock_gate",
        "lock_holder",
        "lock_steps",
        "manifests",
        "multi_pack_index",
        "objects",
        "older_stop",
        "packs",
        "pins",
        "remote_cache",
        "root",
        "sessions",
        "snapshots",
        "socket",
        "stat_cache",
        "stat_cache_log",
        "summaries",
        "timestamps",
        "tree_cache",
        "tree_cache_log",
    )

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.gitignore = os.path.join(directory, ".gitignore")
        """`*`: keeps git from showing the store when it lies inside a repository."""
        self.root = os.path.join(directory, "root")
        """The root this store is bound to, one line."""
        self.packs = os.path.join(directory, "packs")
        self.older_stop = os.path.join(self.packs, OLDER_STOP)
        """Stops a worksnap older than format 2 before its gc deletes a pack (`pack_file`)."""
        self.objects = os.path.join(directory, "objects")
        self.snapshots = os.path.join(directory, "snapshots")
        """Format 2 snapshot records (plain JSON, as the name says)."""
        self.manifests = os.path.join(directory, "manifests")
        """Format 1 manifests (zstd frames); emptied by the migration to format 2."""
        self.summaries = os.path.join(directory, "summaries")
        self.cache = os.path.join(directory, "cache")
        self.stat_cache = os.path.join(self.cache, "stat")
        """The stat cache's base (and `stat.log`, appended: the records changed since)."""
        self.stat_cache_log = os.path.join(self.cache, "stat.log")
        self.listing_cache = os.path.join(self.cache, "dirs")
        self.tree_cache = os.path.join(self.cache, "trees")
        """Each directory's tree by a digest of its children (and `trees.log`, appended)."""
        self.tree_cache_log = os.path.join(self.cache, "trees.log")
        self.timestamps = os.path.join(self.cache, "timestamps")
        self.multi_pack_index = os.path.join(self.cache, "multi-pack-index")
        """Every packed object's place, sorted by digest: read where it lies (multipack)."""
        self.last_capture = os.path.join(self.cache, "capture")
        """The last plain snapshot's capture and what it rested on (`lastcapture.py`)."""
        self.last_full = os.path.join(self.cache, "last.json")
        """Each session's newest full snapshot, by id: the next one's parent."""
        """The file system's timestamp tick in ns, once times without a fraction were seen."""
        self.remote_cache = os.path.join(self.cache, "remote")
        """Remote repositories' pack indexes, one folder per repository id (remote.repository)."""
        self.format = os.path.join(directory, "format")
        """The store's format ("3": compressed packs); a newer one is refused."""
        self.generation = os.path.join(directory, "generation")
        """Rewritten by every gc sweep, so long-lived processes drop their index."""
        self.damaged_copies = os.path.join(directory, "damaged-copies")
        """`<digest> <pack>` a line: packed copies found damaged, never read (damagedcopies)."""
        self.dropped = os.path.join(directory, "dropped")
        """`<id>` a line: snapshots a local gc dropped, which a plain pull leaves out."""
        self.journal = os.path.join(directory, "journal.json")
        """Present only while a restore runs."""
        self.sessions = os.path.join(directory, "sessions")
        self.pins = os.path.join(directory, "pins.json")
        self.config = os.path.join(directory, "config.json")
        self.lock = os.path.join(directory, "lock")
        self.lock_holder = os.path.join(directory, "lock.holder")
        self.lock_gate = os.path.join(directory, "lock.gate")
        """Taken by a waiting writer, so that no new reader gets in before it."""
        self.lock_steps = os.path.join(directory, "lock.steps")
        """Held from reading a session's last step until the next step's snapshot is stored."""
        self.socket = os.path.join(directory, "daemon.sock")
        self.daemon_log = os.path.join(directory, "daemon.log")

    def foreign(self, names: list[str]) -> list[str]:
        """Of the names in the store's directory, those no store of ours makes (sorted).

        One of ours being written (`NAME.tmp-HEX`: a first command beside this one, or
        one killed there) is ours too.
        """
        ours = {
            os.path.basename(path)
            for path in (getattr(self, slot) for slot in self.__slots__)
            if isinstance(path, str) and os.path.dirname(path) == self.dir
        }
        ours.add("")  # (`.tmp-...`: a large object's temp file)
        return sorted(n for n in names if n.partition(TEMP_MARK)[0] not in ours)

    # -- snapshots ------------------------------------------------------------

    def record(self, snapshot_id: str) -> str:
        """Where the record of a format 2 snapshot is stored."""
        return os.path.join(self.snapshots, snapshot_id + _JSON)

    def manifest(self, snapshot_id: str) -> str:
        """Where the manifest of a format 1 snapshot is stored."""
        return os.path.join(self.manifests, snapshot_id + _JSON)

    def summary(self, snapshot_id: str) -> str:
        """Where the summary of a snapshot is stored."""
        return os.path.join(self.summaries, snapshot_id + _JSON)

    @staticmethod
    def snapshot_id(file_name: str) -> str | None:
        """The snapshot id a file in `snapshots` or `manifests` is named after (None: none)."""
        stem = file_name[: -len(_JSON)] if file_name.endswith(_JSON) else ""
        return stem if is_snapshot_id(stem) else None

    # -- sessions -------------------------------------------------------------

    def session(self, name: str) -> str:
        """Where a session's state is stored."""
        return os.path.join(self.sessions, name + _JSON)

    @staticmethod
    def session_name(file_name: str) -> str | None:
        """The session a file in `sessions` belongs to (None: not a session's file)."""
        return file_name[: -len(_JSON)] if file_name.endswith(_JSON) else None

    # -- objects --------------------------------------------------------------

    def pack(self, name: str) -> str:
        """The pack file `name`."""
        return os.path.join(self.packs, name + _PACK)

    def pack_index(self, name: str) -> str:
        """The index of pack `name` (its presence publishes the pack)."""
        return os.path.join(self.packs, name + _INDEX)

    @staticmethod
    def pack_file(file_name: str) -> tuple[str, Literal["pack", "index", "other"]]:
        """What a file in `packs` is: (pack name, "pack" | "index" | "other", e.g. a temp file)."""
        if file_name == OLDER_STOP:
            return file_name, "other"  # never swept: no temp file, no pack
        if file_name.endswith(_PACK):
            return file_name[: -len(_PACK)], "pack"
        if file_name.endswith(_INDEX):
            return file_name[: -len(_INDEX)], "index"
        return file_name.rsplit(".", 1)[0], "other"

    def loose(self, digest: str) -> str:
        """Where an object of 1 MiB or more is stored (the caller checks the digest)."""
        return os.path.join(self.objects, digest[:2], digest[2:])

    @staticmethod
    def is_temp(file_name: str) -> bool:
        """True for a temp file an interrupted write left (`StoreDir.write`, large objects)."""
        return TEMP_MARK in file_name
