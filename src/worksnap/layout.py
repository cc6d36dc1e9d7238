"""Layout: where a store is, and the name of every file and folder inside it.

The only module that spells them; every other module asks a `StorePaths`
(`paths.journal`, `paths.manifest(id)`), so the layout in docs/format.md can be
read, and changed, in one place:

    <store>/                     default <root>/.worksnap, or --store / $WORKSNAP_STORE
      .gitignore                 "*": git never shows the store
      root                       the root this store belongs to (one line)
      packs/<name>.pack          small objects appended back to back
      packs/<name>.idx           msgpack [[digest, offset, size], ...]; written last
      objects/<aa>/<62 hex>      objects of 1 MiB or more, one file each
      manifests/<id>.json        a manifest (a zstd frame of what `show --json` prints)
      summaries/<id>.json        the few fields `list` shows
      cache/stat, cache/dirs     the stat and listing caches (may be deleted at any time)
      cache/timestamps           present when the file system keeps coarse (whole-second) times
      generation                 rewritten by every gc sweep
      journal.json               present only while a restore runs
      sessions/<name>.json       a session's redo stack and open checkpoint
      pins.json                  ids gc never drops
      config.json                optional settings
      lock, lock.holder          the store lock and a note of its exclusive holder
      lock.gate                  taken by a waiting writer so new readers queue behind it
      daemon.sock, daemon.log    the daemon's socket and log

Imports nothing but the standard library: the daemon's client imports it on every
command.
"""

from __future__ import annotations

import os
import re
from typing import Literal

STORE_DIR_NAME = ".worksnap"
"""The store's directory in the root, unless another is chosen."""

TEMP_MARK = ".tmp-"
"""In the name of every temp file a store write makes, so a sweep can tell leftovers."""

_JSON = ".json"
_PACK = ".pack"
_INDEX = ".idx"
_SNAPSHOT_FILE = re.compile(r"([0-9a-f]{12})\.json\Z")


def store_location(root: str, store: str | None) -> str:
    """The store directory for a (real) root: `store`, else $WORKSNAP_STORE, else ROOT/.worksnap."""
    chosen = store if store is not None else os.environ.get("WORKSNAP_STORE")
    return os.path.abspath(chosen) if chosen else os.path.join(root, STORE_DIR_NAME)


class StorePaths:
    """The path of every file and folder of one store directory (nothing is touched)."""

    __slots__ = (
        "cache",
        "config",
        "daemon_log",
        "dir",
        "generation",
        "gitignore",
        "journal",
        "listing_cache",
        "lock",
        "lock_gate",
        "lock_holder",
        "manifests",
        "objects",
        "packs",
        "pins",
        "root",
        "sessions",
        "socket",
        "stat_cache",
        "summaries",
        "timestamps",
    )

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.gitignore = os.path.join(directory, ".gitignore")
        """`*`: keeps git from showing the store when it lies inside a repository."""
        self.root = os.path.join(directory, "root")
        """The root this store is bound to, one line."""
        self.packs = os.path.join(directory, "packs")
        self.objects = os.path.join(directory, "objects")
        self.manifests = os.path.join(directory, "manifests")
        self.summaries = os.path.join(directory, "summaries")
        self.cache = os.path.join(directory, "cache")
        self.stat_cache = os.path.join(self.cache, "stat")
        self.listing_cache = os.path.join(self.cache, "dirs")
        self.timestamps = os.path.join(self.cache, "timestamps")
        """The file system's timestamp tick in ns, once times without a fraction were seen."""
        self.generation = os.path.join(directory, "generation")
        """Rewritten by every gc sweep, so long-lived processes drop their index."""
        self.journal = os.path.join(directory, "journal.json")
        """Present only while a restore runs."""
        self.sessions = os.path.join(directory, "sessions")
        self.pins = os.path.join(directory, "pins.json")
        self.config = os.path.join(directory, "config.json")
        self.lock = os.path.join(directory, "lock")
        self.lock_holder = os.path.join(directory, "lock.holder")
        self.lock_gate = os.path.join(directory, "lock.gate")
        """Taken by a waiting writer, so that no new reader gets in before it."""
        self.socket = os.path.join(directory, "daemon.sock")
        self.daemon_log = os.path.join(directory, "daemon.log")

    # -- snapshots ------------------------------------------------------------

    def manifest(self, snapshot_id: str) -> str:
        """Where the manifest of a snapshot is stored."""
        return os.path.join(self.manifests, snapshot_id + _JSON)

    def summary(self, snapshot_id: str) -> str:
        """Where the summary of a snapshot is stored."""
        return os.path.join(self.summaries, snapshot_id + _JSON)

    @staticmethod
    def snapshot_id(file_name: str) -> str | None:
        """The snapshot id a file in `manifests` is named after (None: not a manifest)."""
        match = _SNAPSHOT_FILE.match(file_name)
        return match.group(1) if match else None

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
