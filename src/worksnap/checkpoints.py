"""Checkpoints: light per-turn records of the files a turn is about to change, with no tree scan.

`begin` opens an empty checkpoint (a manifest of kind `checkpoint`) and makes it
the session's open one; `capture_before` adds the before-image of each named
file to it (the first capture of a path wins; a missing file is recorded as
absent). A rewind to a checkpoint sets back just those paths (see
`history.checkpoint_target`), with every guarantee of a restore.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

import msgspec

from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import InputError
from worksnap.fsio import DirTree
from worksnap.history import CHECKPOINT, Sessions
from worksnap.ignore import ignore_checker
from worksnap.lock import Locks
from worksnap.manifest import (
    VERSION,
    Manifest,
    check_meta,
    check_step,
    new_id,
    now_rfc3339,
    one_line,
    tree_digest,
)
from worksnap.paths import Root, ancestors
from worksnap.scanparts import read_ignore_file
from worksnap.store import Store
from worksnap.storedir import StoreDir


class Checkpoints:
    """Opening checkpoints and recording before-images in them, for one workspace."""

    def __init__(
        self,
        root: Root,
        store: Store,
        *,
        files: StoreDir,
        locks: Locks,
        capture: Capture,
        catalog: Catalog,
        sessions: Sessions,
    ) -> None:
        self._root = root
        self._store = store
        self._files = files
        self._locks = locks
        self._paths = files.paths
        self._capture = capture
        self._catalog = catalog
        self._sessions = sessions

    def begin(
        self,
        *,
        step: int | None,
        label: str | None,
        meta: dict[str, str] | None,
        attach: dict[str, bytes] | None,
        session: str,
    ) -> Manifest:
        """Opens a checkpoint for a turn of `session` (see `Workspace.begin`)."""
        check_step(step)
        check_meta(meta)
        self._store.bind(self._root.path)
        self._catalog.upgrade_if_needed()
        with self._locks.shared("begin"):
            checkpoint = Manifest(
                version=VERSION,
                id=new_id(),
                root=self._root.wire,
                kind=CHECKPOINT,
                step=step,
                time=now_rfc3339(),
                max_file_bytes=self._capture.max_file_bytes,
                tree=tree_digest([], []),
                label=one_line(label),
                session=session,
                entries=[],
                dirs=[],
                ignored=[],
                large=[],
                excluded=[],
                meta=dict(meta or {}),
                attachments=self._catalog.store_attachments(attach),
            )
            checkpoint = self._catalog.save(checkpoint, session)
            state = self._sessions.load(session)
            state.checkpoint = checkpoint.id
            self._sessions.save(session, state)
        return checkpoint

    def capture_before(self, paths: Iterable[str | os.PathLike[str]], session: str) -> Manifest:
        """Records the before-image of each named file in the open checkpoint.

        Raises:
            InputError: no checkpoint is open, or a path is outside the root,
                inside `.git` or the store, or a directory.
        """
        state = self._sessions.load(session)
        if state.checkpoint is None:
            raise InputError(
                f"no open checkpoint in session {session!r}: run `worksnap begin` first"
            )
        self._catalog.upgrade_if_needed()
        # Exclusive: captures from parallel tool calls (threads or processes) each
        # rewrite the checkpoint, and none may lose another's before-images.
        with self._locks.exclusive("capture"):
            checkpoint = self._catalog.load(state.checkpoint, session)
            entries = {e.path: e for e in checkpoint.entries}
            absent = set(checkpoint.absent)
            large = set(checkpoint.large)
            ignored = set(checkpoint.ignored)
            dirs = set(checkpoint.dirs)
            ignored_now = self._ignored_now()
            for rel in (r for path in paths for r in self._root.written(path)):
                if rel in entries or rel in absent or rel in large or rel in ignored:
                    continue  # the first capture wins
                if ignored_now(rel):
                    ignored.add(rel)  # a restore never touches it: nothing to keep
                    continue
                if rel in dirs:
                    continue  # a directory when the turn began: its files have their images
                parent = rel.rpartition("/")[0]
                if any(d in entries or d in absent or d in large for d in ancestors(parent)):
                    absent.add(rel)  # below what was a file, or nothing, when the turn began
                    continue
                entry = self._capture.before_image(rel)
                if entry is None:
                    absent.add(rel)
                    top = self._missing_top(parent)
                    if top is not None and top not in dirs:
                        absent.add(top)  # nothing there: what a turn makes below it goes
                elif entry == "large":
                    large.add(rel)
                else:
                    entries[rel] = entry
                    dirs.update(ancestors(parent))
            ordered = sorted(entries.values(), key=lambda e: e.path)
            updated = msgspec.structs.replace(
                checkpoint,
                entries=ordered,
                dirs=sorted(dirs),
                absent=sorted(absent),
                large=sorted(large),
                ignored=sorted(ignored),
                tree=tree_digest(ordered, sorted(dirs)),
            )
            return self._catalog.replace(updated)

    def _missing_top(self, directory: str) -> str | None:
        """The topmost of `directory` and the directories above it that are not there."""
        with DirTree(self._root.path) as tree:
            for above in reversed(list(ancestors(directory))):
                try:
                    tree.dir_fd(above)
                except FileNotFoundError:
                    return above
                except OSError:
                    return None  # a file (or a symlink) there: what is below it is absent
        return None

    def _ignored_now(self) -> Callable[[str], bool]:
        """`ignored(rel)`: whether today's rules leave a file out, as a scan would.

        Reads only the `.gitignore` files of the directories above the paths asked
        about (never through a symlink); a file git tracks is never ignored.
        """
        rules = self._capture.rules()
        tracked = self._capture.tracked(rules)

        def gitignore(directory: str) -> bytes | None:
            with DirTree(self._root.path) as tree:
                try:
                    dir_fd = tree.dir_fd(directory)
                    if not stat.S_ISREG(os.lstat(".gitignore", dir_fd=dir_fd).st_mode):
                        return None  # git reads no symlinked .gitignore (>= 2.32), nor a non-file
                except OSError:
                    return None
                return read_ignore_file(dir_fd, "", directory)

        def nested(directory: str) -> bool:
            with DirTree(self._root.path) as tree:
                try:
                    os.lstat(".git", dir_fd=tree.dir_fd(directory))
                except OSError:
                    return False
                return True

        whole = tracked.enters_whole if tracked is not None and tracked.enters_any else None
        ignored = ignore_checker(rules, gitignore, whole, nested)

        def ignored_now(rel: str) -> bool:
            return not (tracked is not None and tracked.is_tracked(rel)) and ignored(rel, False)

        return ignored_now
