"""Extract: a snapshot written into a new or empty directory outside the root.

`worksnap restore REF --to DIR`. The apply machinery with another root: the plan
recreates every path of the snapshot in an empty tree (`plan_extract`, which is also
the preview, so `--dry-run` refuses exactly what the run refuses), and
`apply.apply_plan` carries it out. Nothing in the workspace is changed, so no
pre-restore snapshot and no journal are needed.

A new DIR is written as a temp directory beside it, renamed to DIR at the end: it
appears whole or not at all. An existing empty DIR is filled in place, so that it
keeps its inode, mode and owner (a shell sitting in it, a mount point): the files go
into a hidden temp directory inside it, moved in name by name once all are written
and durable, never over a name (`fsio.rename_noreplace`); a failure takes back what
was moved. Only a kill -9 among those renames
(no data is written then) can leave part of the top level, beside the hidden temp.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from os.path import dirname

from worksnap.apply import Result, apply_plan
from worksnap.errors import InputError, shown
from worksnap.fsio import fsync_dir, rename_noreplace, sync_filesystem
from worksnap.history import CHECKPOINT
from worksnap.manifest import VERSION, Manifest, new_id, now_rfc3339, tree_digest
from worksnap.paths import Root, fs_path, relative_to, wire_name
from worksnap.plan import Plan, check_selected, plan_restore, select_paths

_TEMP_PREFIX = ".worksnap-extract-"
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def plan_extract(
    target: Manifest,
    destination: str,
    *,
    root: Root,
    store_dir: str,
    paths: Sequence[str | os.PathLike[str]] | None = None,
) -> tuple[Plan, str]:
    """Returns what writing `target` (or the `paths` of it) into `destination` does, and where.

    Every refusal of `extract` is made here, before anything is written. The plan is
    from an empty tree (every change `Op.DELETED`: a path made); where is the absolute
    destination, a symbolic link at it followed to the directory it names.

    Raises:
        InputError: a checkpoint; a destination that is not new or empty, or lies inside
            the root or the store, or holds them; a path no restore there would write.
    """
    if target.kind == CHECKPOINT:
        raise InputError(
            f"snapshot {target.id} is a checkpoint (before-images of a few files): "
            "rewind it in place, or give a full snapshot"
        )
    selected = root.selection(paths)  # the root named: the whole snapshot
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
        base = os.fsencode(root.path)
        check_selected(
            selected,
            None,
            target,
            in_workspace=lambda rel: os.path.lexists(os.path.join(base, fs_path(rel))),
        )
        plan = select_paths(plan, selected)
    return plan, final


def extract(
    target: Manifest,
    destination: str,
    *,
    root: Root,
    store_dir: str,
    read_object: Callable[[str], Iterable[bytes]],
    paths: Sequence[str | os.PathLike[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Writes the snapshot `target` (or the `paths` of it) into `destination`.

    Args:
        target: a full snapshot (checked by `Catalog.load`).
        destination: a directory that does not exist yet (its parent does), or an
            empty one (or a symbolic link to one); outside the root and the store.
        root: the workspace, never touched.
        store_dir: the store, never written into.
        read_object: yields an object's bytes a piece at a time (checked at the end).
        paths: only these paths (relative to the root, or absolute inside it) and what
            lies below them.
        progress: called with (done, total) as files are written.

    Returns:
        What was written (`restored`); on a failure `error` says where, and nothing is
        left at `destination` (an empty directory that was there stays, as it was).

    Raises:
        InputError: what `plan_extract` refuses; a destination it may not write into.
    """
    plan, final = plan_extract(target, destination, root=root, store_dir=store_dir, paths=paths)
    existing = os.path.isdir(final)
    into = final if existing else dirname(final)
    try:  # (named with its pid, for a person to tell whose it is)
        temp = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-", dir=into)
    except OSError as exc:  # a directory it may not write into: named, not the temp
        raise InputError(f"cannot restore into {destination}: {exc.strerror or exc}") from None
    moved: list[str] = []
    try:
        # Nothing is visible at `final` before the renames: the files need not be
        # durable one by one, only all of them before.
        result = apply_plan(temp, plan, read_object, progress=progress, sync_each=False)
        if result.ok:
            try:
                sync_filesystem(temp)
            except OSError as exc:  # the last write-back failed: nothing is published
                result.error = f"cannot make the files durable: {exc.strerror or exc}"
        if result.ok and existing:
            try:
                _move_in(temp, final, moved)
            except OSError as exc:  # what was moved is taken back below
                result.error = f"{shown(wire_name(exc.filename))}: {exc.strerror or exc}"
        elif result.ok:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o777 & ~umask)  # mkdtemp made it private
            os.rename(temp, final)  # replaces an empty directory, never a full one
            fsync_dir(dirname(final))
        if result.error is not None and not result.not_restored:
            result.not_restored, result.restored = result.restored, []
    except BaseException:
        _take_back(final, moved)
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if not result.ok:
        _take_back(final, moved)
    shutil.rmtree(temp, ignore_errors=True)  # (gone already: renamed to `final`)
    return result


def _move_in(temp: str, final: str, moved: list[str]) -> None:
    """Moves what `temp` holds into `final` (`moved`: the names moved), never over a name.

    Raises:
        OSError: a rename failed, or a name appeared in `final` meanwhile.
    """
    source = os.open(temp, _DIRECTORY)
    try:
        into = os.open(final, _DIRECTORY)
        try:
            for name in sorted(os.listdir(source)):
                try:
                    rename_noreplace(name, src_dir_fd=source, dst_dir_fd=into)
                except FileExistsError:
                    raise FileExistsError(errno.EEXIST, "it appeared meanwhile", name) from None
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror or str(exc), name) from exc
                moved.append(name)
            os.fsync(into)
        finally:
            os.close(into)
    finally:
        os.close(source)


def _take_back(final: str, moved: list[str]) -> None:
    """Removes what `_move_in` moved into `final`, last first; the directory stays."""
    for name in reversed(moved):
        path = os.path.join(final, name)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass  # gone, or out of reach: the rest still goes
    moved.clear()


def _check_destination(destination: str, *, root: str, store_dir: str) -> str:
    """Returns the absolute destination once it is known to be new or empty, and outside.

    A symbolic link is followed to the directory it names (as `cp -r`, `rsync` and
    `tar -C` do), which is then checked as the destination itself.

    Raises:
        InputError: why it cannot be used.
    """
    if not destination:  # (it would be the current directory: the root, or a stranger)
        raise InputError("cannot restore into '': an empty path is not a directory")
    final = os.path.abspath(destination)
    parent = os.path.realpath(os.path.dirname(final))
    final = os.path.join(parent, os.path.basename(final))
    if not os.path.isdir(parent):
        why = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise InputError(f"cannot restore into {destination}: {parent} {why}")
    if os.path.islink(final):
        if not os.path.isdir(resolved := os.path.realpath(final)):
            raise InputError(
                f"cannot restore into {destination}: it is a symbolic link to "
                f"{os.readlink(final)}, which is not a directory"
            )
        final = resolved
    for name, place in (("the root", root), ("the store", os.path.realpath(store_dir))):
        inside = relative_to(place, final) is not None or final == place
        holds = relative_to(final, place) is not None
        if inside or holds:
            raise InputError(
                f"cannot restore into {destination}: it is {name} ({place}), or inside or "
                f"above it; --to takes a directory outside the workspace"
            )
    try:
        try:
            st: os.stat_result | None = os.lstat(final)
        except FileNotFoundError:
            st = None
        folder = st is not None and stat.S_ISDIR(st.st_mode)
        names = os.listdir(final) if folder else []
    except OSError as exc:  # above it, one that cannot be searched; or it cannot be read
        raise InputError(f"cannot restore into {destination}: {exc.strerror}") from None
    if st is not None and not folder:
        raise InputError(f"cannot restore into {destination}: it exists and is not a directory")
    if names:
        left = sorted(name for name in names if name.startswith(_TEMP_PREFIX))
        raise InputError(
            f"cannot restore into {destination}: it is not empty"
            + (f" (it holds {left[0]}, the temp directory of a `restore --to` running, or "
               "interrupted: then it, and what it had moved in, can go)" if left else "")
        )  # fmt: skip
    written = parent if st is None else final  # where the temp directory goes
    if not os.access(written, os.W_OK | os.X_OK):  # said by a preview too
        code = errno.EROFS if os.statvfs(written).f_flag & os.ST_RDONLY else errno.EACCES
        raise InputError(f"cannot restore into {destination}: {os.strerror(code)}")
    return final
