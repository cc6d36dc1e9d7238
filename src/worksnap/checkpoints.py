"""Checkpoints: light per-turn records of the files a turn is about to change, with no tree scan.

`begin` opens an empty checkpoint (a manifest of kind `checkpoint`) and makes it
the session's open one; `capture_before` adds the before-image of each named
file to it (the first capture of a path wins; a missing file is recorded as
absent). A rewind to a checkpoint sets back just those paths (see
`history.checkpoint_target`), with every guarantee of a restore.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import msgspec

from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import InputError
from worksnap.history import CHECKPOINT, Sessions
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
            dirs = set(checkpoint.dirs)
            for path in paths:
                rel = self._root.named(path)
                if rel in entries or rel in absent or rel in large:
                    continue
                entry = self._capture.before_image(rel)
                if entry is None:
                    absent.add(rel)
                elif entry == "large":
                    large.add(rel)
                else:
                    entries[rel] = entry
                    dirs.update(ancestors(rel.rpartition("/")[0]))
            ordered = sorted(entries.values(), key=lambda e: e.path)
            updated = msgspec.structs.replace(
                checkpoint,
                entries=ordered,
                dirs=sorted(dirs),
                absent=sorted(absent),
                large=sorted(large),
                tree=tree_digest(ordered, sorted(dirs)),
            )
            return self._catalog.replace(updated)
