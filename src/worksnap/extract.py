"""Extract: a snapshot written into a new or empty directory outside the root.

`worksnap restore REF --to DIR`. The apply machinery with another root: the plan
recreates every path of the snapshot in an empty tree, and `apply.apply_plan` carries
it out. Nothing in the workspace is read or changed, so no pre-restore snapshot and no
journal are needed. The files go into a temp directory beside DIR, renamed to DIR at
the end, so DIR appears whole or not at all.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable

from worksnap.apply import Result, apply_plan
from worksnap.errors import InputError
from worksnap.fsio import fsync_dir, sync_filesystem
from worksnap.history import CHECKPOINT
from worksnap.manifest import VERSION, Manifest, new_id, now_rfc3339, tree_digest
from worksnap.paths import Root, relative_to
from worksnap.plan import plan_restore, select_paths

_TEMP_PREFIX = ".worksnap-extract-"


def extract(
    target: Manifest,
    destination: str,
    *,
    root: Root,
    store_dir: str,
    read_object: Callable[[str], Iterable[bytes]],
    selected: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Writes the snapshot `target` (or the `selected` paths of it) into `destination`.

    Args:
        target: a full snapshot (checked by `Catalog.load`).
        destination: a directory that does not exist yet (its parent does), or an
            empty one; outside the root and the store.
        root: the workspace, never touched.
        store_dir: the store, never written into.
        read_object: yields an object's bytes a piece at a time (checked at the end).
        selected: only these paths (relative wire paths) and what lies below them.
        progress: called with (done, total) as files are written.

    Returns:
        What was written (`restored`); on a failure `error` says where, and nothing is
        left at `destination` (an empty directory that was there stays).

    Raises:
        InputError: a checkpoint, or a destination that is not new or empty, or lies
            inside the root or the store, or holds them.
    """
    if target.kind == CHECKPOINT:
        raise InputError(
            f"snapshot {target.id} is a checkpoint (before-images of a few files): "
            "rewind it in place, or give a full snapshot"
        )
    final = _check_destination(destination, root=root.path, store_dir=store_dir)
    empty = Manifest(
        version=VERSION,
        id=new_id(),
        root=target.root,
        kind="current",
        step=None,
        time=now_rfc3339(),
        max_file_bytes=target.max_file_bytes,
        tree=tree_digest([], []),
        entries=[],
        dirs=[],
        ignored=[],
        large=[],
        excluded=[],
    )
    plan = plan_restore(empty, target, ignored_by_target=lambda path, is_dir: False)
    if selected is not None:
        plan = select_paths(plan, selected)
    parent = os.path.dirname(final)
    temp = tempfile.mkdtemp(prefix=_TEMP_PREFIX, dir=parent)
    try:
        # Nothing is visible at `final` before the rename: the files need not be durable
        # one by one, only all of them before it.
        result = apply_plan(temp, plan, read_object, progress=progress, sync_each=False)
        if result.ok:
            try:
                sync_filesystem(temp)
            except OSError as exc:  # the last write-back failed: nothing is published
                result.error = f"cannot make the files durable: {exc.strerror or exc}"
                result.not_restored, result.restored = result.restored, []
        if result.ok:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o777 & ~umask)  # mkdtemp made it private
            os.rename(temp, final)  # replaces an empty directory, never a full one
            fsync_dir(parent)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if not result.ok:
        shutil.rmtree(temp, ignore_errors=True)
    return result


def _check_destination(destination: str, *, root: str, store_dir: str) -> str:
    """Returns the absolute destination once it is known to be new or empty, and outside.

    Raises:
        InputError: why it cannot be used.
    """
    final = os.path.abspath(destination)
    parent = os.path.realpath(os.path.dirname(final))
    final = os.path.join(parent, os.path.basename(final))
    if not os.path.isdir(parent):
        raise InputError(f"cannot restore into {destination}: {parent} is not a directory")
    for name, place in (("the root", root), ("the store", os.path.realpath(store_dir))):
        inside = relative_to(place, final) is not None or final == place
        holds = relative_to(final, place) is not None
        if inside or holds:
            raise InputError(
                f"cannot restore into {destination}: it is {name} ({place}), or inside or "
                f"above it; --to takes a directory outside the workspace"
            )
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        return final
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"cannot restore into {destination}: it exists and is not a directory")
    with os.scandir(final) as entries:
        if next(entries, None) is not None:
            raise InputError(f"cannot restore into {destination}: it is not empty")
    return final
