"""Autostart: whether a command starts the store's daemon by itself, and why (or why not).

Fast by default only where it is sound. The daemon (its watcher) is started by
the first command that finds none when all of these hold:

- Linux (inotify, SO_PEERCRED), and `WORKSNAP_NO_DAEMON` is not set;
- `config.json` does not say `"daemon": false` (`true` forces it, whatever else but
  a store this process cannot write: the daemon's socket and log are there);
- the root is on a local file system where inotify sees every change (`statfs`
  type ext2/3/4, xfs, btrfs, tmpfs, overlay, f2fs or zfs), and no mount below the
  root is of another type (never NFS, CIFS/SMB, FUSE, 9p: other hosts' writes raise
  no event);
- the tree is big enough to gain: about `BREAK_EVEN_FILES` captured files or more
  (estimated from the size of the stat cache the command just wrote; see
  docs/performance.md for the measurement).

The command itself always runs in its own process and is correct without it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os

import msgspec

from worksnap import fanotify
from worksnap.client import SUPPORTED, request
from worksnap.layout import StorePaths, store_location
from worksnap.mounts import mounts_of, untrusted

BREAK_EVEN_FILES = 2000
"""Below this many files a warm plain command costs about what its Python start-up does,
and a resident process is not worth its memory (measured: docs/performance.md)."""

STAT_CACHE_BYTES_PER_FILE = 55
"""What one file adds to the compressed stat cache (measured on the reference tree and
a small synthetic one: 61 and 50 bytes): the estimate of the tree's size."""

LOCAL_FILE_SYSTEMS = {
    0xEF53: "ext2/ext3/ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x794C7630: "overlay",
    0xF2F52010: "f2fs",
    0x2FC12FC1: "zfs",
}
"""`statfs` f_type of the file systems where inotify sees every change made."""


class Decision(msgspec.Struct, frozen=True):
    """Whether the daemon is used for a store, and why."""

    mode: str
    """"on" (config says true), "off", or "auto"."""
    start: bool
    """Whether a command that finds no daemon starts one."""
    reason: str
    """One line saying why."""


def decide(root: str, store_dir: str) -> Decision:
    """Decides for the store at `store_dir` of the workspace at `root` (a real path)."""
    if not SUPPORTED:
        return Decision("off", False, "the daemon needs Linux (inotify)")
    if os.environ.get("WORKSNAP_NO_DAEMON"):
        return Decision("off", False, "WORKSNAP_NO_DAEMON is set")
    paths = StorePaths(store_dir)
    configured = None
    if os.path.lexists(paths.config):
        from worksnap.config import load_config
        from worksnap.errors import InputError, StoreError
        from worksnap.storedir import StoreDir

        store = StoreDir(store_dir)  # never through a link, never a FIFO
        try:
            configured = load_config(store).daemon
        except (InputError, StoreError) as exc:
            return Decision("off", False, f"config.json is not valid ({exc})")
        finally:
            store.close()
    if configured is False:
        return Decision("off", False, 'config.json says "daemon": false')
    if os.path.isdir(store_dir) and not os.access(store_dir, os.W_OK):
        # A daemon's socket and log are in the store: on a read-only file system every
        # command failed trying to start one (a review).
        unwritable = f"no daemon can serve it: {store_dir} is not writable here"
        if configured is True:
            return Decision("on", False, f'config.json says "daemon": true, but {unwritable}')
        return Decision("auto", False, f"off: {unwritable}")
    if configured is True:
        return Decision("on", True, 'config.json says "daemon": true')
    unsound = unsound_file_system(root)
    if unsound is not None:
        return Decision("auto", False, f"off: {unsound}")
    files = estimated_files(paths)
    if files < BREAK_EVEN_FILES:
        return Decision(
            "auto", False, f"off: about {files} files, fewer than {BREAK_EVEN_FILES} (break-even)"
        )
    return Decision(
        "auto", True, f"on: about {files} files on {fs_name(root)}, a local file system"
    )


def maybe_start(root: str, store: str | None, *, force: bool) -> None:
    """Starts a daemon in the background, without waiting, if `decide` says so and none runs."""
    if not SUPPORTED or not os.path.isdir(root):
        return
    real = os.path.realpath(root)
    store_dir = store_location(real, store)
    if not os.path.isdir(store_dir):
        return  # nothing was stored: nothing to serve yet
    decision = decide(real, store_dir)
    if not decision.start or request(store_dir, "status") is not None:
        return
    from worksnap.daemon import DEFAULT_IDLE_SECONDS, spawn
    from worksnap.errors import WorksnapError
    from worksnap.output import warn

    try:
        spawn(real, store_dir, idle=DEFAULT_IDLE_SECONDS, force=force, why=decision.reason)
    except (OSError, WorksnapError) as exc:  # the command itself is done: it ends as it would
        warn(f"warning: the daemon was not started: {exc}")


def estimated_files(paths: StorePaths) -> int:
    """About how many files the tree has (0: none known yet).

    The newest snapshot's own count, as its record says (`cache/last.json` names it for
    each session); failing that, the size of the stat cache. The cache alone missed a
    tree that grew after its first snapshot (a review: 6,000 files taken for 733, its
    growth being in `stat.log`).
    """
    from worksnap.errors import InputError
    from worksnap.storedir import StoreDir

    store = StoreDir(paths.dir)  # never through a link, never a FIFO (a cloned store)
    try:
        last = json.loads(store.read_optional(paths.last_full, limit=_SMALL_FILE) or b"{}")
        counts = [
            int(json.loads(store.read(paths.record(str(snapshot_id)), limit=_SMALL_FILE))["files"])
            for snapshot_id, _ in last.values()
        ]
        if counts:
            return max(counts)
    except (InputError, OSError, ValueError, TypeError, KeyError, AttributeError):
        pass  # none yet, a format 1 store, or damage: the cache's size says enough
    finally:
        store.close()
    try:
        return os.stat(paths.stat_cache).st_size // STAT_CACHE_BYTES_PER_FILE
    except OSError:
        return 0


_SMALL_FILE = 64 * 1024
"""The most bytes read of `last.json` or a record for the estimate (each is one line)."""


def fs_type(path: str) -> int | None:
    """The `statfs` f_type of the file system holding `path` (None: unknown)."""
    libc_name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
    except OSError:
        return None
    buffer = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on x86-64
    if libc.statfs(os.fsencode(path), buffer) != 0:
        return None
    # f_type is the first field: a long (__fsword_t), native byte order.
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def fs_name(path: str) -> str:
    """A readable name for the file system type of `path`."""
    kind = fs_type(path)
    if kind is None:
        return "an unknown file system"
    return LOCAL_FILE_SYSTEMS.get(kind, f"file system type {kind:#x}")


def unsound_file_system(root: str) -> str | None:
    """Why inotify may miss changes under `root` (None: it sees them all)."""
    kind = fs_type(root)
    if kind not in LOCAL_FILE_SYSTEMS:
        what = "unknown" if kind is None else f"{kind:#x}"
        return f"the root is on a file system (type {what}) where inotify may miss changes"
    if (inside := untrusted(mounts_of(root))) is not None:
        return inside
    if not fanotify.available():
        return (
            "fanotify cannot say here which file a write went to (Linux 5.13 or later, "
            "not blocked by a seccomp filter): every write would cost a look at every file"
        )
    return None
