"""Checkpoints: light per-turn records of the files a turn is about to change, with no tree scan.

`begin` opens an empty checkpoint (a manifest of kind `checkpoint`) and makes it
the session's open one; `capture_before` adds the before-image of each named
file to it (the first capture of a path wins; a missing file is recorded as
absent). A rewind to a checkpoint sets back just those paths (see
`history.checkpoint_target`), with every guarantee of a restore.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from worksnap.capture import Capture
from worksnap.catalog import Catalog
from worksnap.errors import InputError, shown
from worksnap.fsio import MODES, DirTree
from worksnap.history import CHECKPOINT, Sessions
from worksnap.ignore import ignore_checker
from worksnap.lock import Locks
from worksnap.manifest import (
    VERSION,
    Entry,
    Manifest,
    check_meta,
    check_step,
    new_id,
    now_rfc3339,
    one_line,
    tree_digest,
)
from worksnap.paths import Root, ancestors, fs_path, relative_to, wire_name
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
        no_checkpoint = f"no open checkpoint in session {session!r}: run `worksnap begin` first"
        if not self._store.exists():
            raise InputError(no_checkpoint)  # and no store is made to say so (exit 2)
        self._catalog.upgrade_if_needed()
        # Exclusive: captures from parallel tool calls (threads or processes) each
        # rewrite the checkpoint, and none may lose another's before-images. The open
        # one is read under the lock, so a `begin` meanwhile is seen.
        with self._locks.exclusive("capture"):
            state = self._sessions.load(session)
            if state.checkpoint is None:
                raise InputError(no_checkpoint)
            checkpoint = self._catalog.load(state.checkpoint, session)
            entries = {e.path: e for e in checkpoint.entries}
            absent = set(checkpoint.absent)
            large = set(checkpoint.large)
            ignored = set(checkpoint.ignored)
            dirs = set(checkpoint.dirs)
            ignored_now = self._ignored_now()
            for rel in (r for path in paths for r in self._written(path)):
                if rel in entries or rel in absent or rel in large or rel in ignored:
                    continue  # the first capture wins
                if ignored_now(rel):
                    ignored.add(rel)  # a restore never touches it: nothing to keep
                    continue
                if rel in dirs:
                    if self._a_directory_now(rel):  # refused as the first capture is
                        raise InputError(f"{shown(rel)!r} is not a file or symlink")
                    continue  # a directory when the turn began: its files have their images
                parent = rel.rpartition("/")[0]
                if any(d in entries or d in absent or d in large for d in ancestors(parent)):
                    absent.add(rel)  # below what was a file, or nothing, when the turn began
                    continue
                entry = self._before_image(rel)
                if entry is None:
                    absent.add(rel)
                    top = _first_not_a_directory(self._root.path, parent)
                    if top is not None and top[1] is None and top[0] not in dirs:
                        absent.add(top[0])  # nothing there: what a turn makes below it goes
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
            # A turn went on after an undo: redo would now undo its new edits (as a new
            # snapshot clears redo; a review found undo then skipping this checkpoint).
            self._sessions.clear_redo(session)
            return self._catalog.replace(updated)

    def _written(self, path: str | os.PathLike[str]) -> list[str]:
        """The paths a write to the named `path` changes: where it leads, and its link.

        The path is walked as the kernel walks it (a symlink before a `..` is followed
        first): a directory above it that is a symlink leads to the path returned. A
        symlink at the path is returned with the path it leads to, when that is inside
        the root and not left out (a write through the link changes that one).

        Raises:
            InputError: what `Root.named` refuses; a symlink above the path, or at it
                (to anything but a directory), leads outside the root, or cannot be
                followed (a path longer than PATH_MAX); one above it leads into what
                is never captured.
        """
        root = self._root
        rel = root.named(path)
        parent, name = os.path.split(os.path.join(os.fsencode(root.path), os.fsencode(path)))
        if name not in (b"", b".", b"..") and _through_a_symlink(root, parent):
            followed = _followed(parent, path)
            if followed is None:  # a write there fails too
                raise InputError(f"{shown(os.fspath(path))!r}: its symbolic links make a loop")
            reached = os.fsdecode(os.path.join(followed, name))
            if relative_to(root.path, reached) is None:
                raise InputError(
                    f"{shown(os.fspath(path))!r} is reached through a symbolic link that leads "
                    f"outside {root.path}"
                )
            rel = root.named(reached)
        parent_rel, _, leaf = rel.rpartition("/")
        with DirTree(root.path) as tree:
            try:
                mode = os.lstat(fs_path(leaf), dir_fd=tree.dir_fd(parent_rel)).st_mode
                is_link = stat.S_ISLNK(mode)
            except OSError:
                is_link = False  # nothing there (or not reached): the capture says what it is
        if not is_link:
            return [rel]
        followed = _followed(os.path.join(os.fsencode(root.path), fs_path(rel)), path)
        if followed is None or os.path.isdir(followed):
            return [rel]  # a loop, or a directory: a write there fails
        leads = os.fsdecode(followed)
        if relative_to(root.path, leads) is None:
            raise InputError(
                f"{shown(os.fspath(path))!r} is a symbolic link to {shown(leads)!r}, outside "
                f"{root.path}: what is written through it cannot be rewound"
            )
        try:
            target = root.named(leads)
        except InputError:
            return [rel]  # into `.git`, the store or what is excluded: never touched
        return [rel] if target == rel else [rel, target]

    def _a_directory_now(self, rel: str) -> bool:
        """Whether a directory (not a symlink to one) is at `rel` now."""
        parent, _, name = rel.rpartition("/")
        with DirTree(self._root.path) as tree:
            try:
                st = os.stat(fs_path(name), dir_fd=tree.dir_fd(parent), follow_symlinks=False)
            except OSError:
                return False  # nothing there, or not reached: no directory to refuse
        return stat.S_ISDIR(st.st_mode)

    def _before_image(self, rel: str) -> Entry | Literal["large"] | None:
        """Stores and returns a path's current file or symlink (its before-image).

        Returns None when nothing is there, "large" for a file over the size cap.

        Raises:
            InputError: something other than a file or symlink is there, or a directory
                above it became a symlink since `_written` looked.
        """
        parent, _, name = rel.rpartition("/")
        raw = fs_path(name)
        capture = self._capture
        with DirTree(self._root.path) as tree:
            # Through a descriptor walked down from the root: never through a symlinked
            # parent, and no depth is too deep (no absolute path is built).
            try:
                dir_fd = tree.dir_fd(parent)
                st = os.stat(raw, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            except NotADirectoryError:
                found = _first_not_a_directory(self._root.path, parent)
                blocker = None if found is None else found[1]
                if blocker is None or stat.S_ISLNK(blocker) or stat.S_ISDIR(blocker):
                    raise InputError(  # it changed since `_written` looked, or as it looked
                        f"{shown(rel)!r}: a directory above it changed while it was captured "
                        "(a symbolic link now, or then); capture it again"
                    ) from None
                return None  # below a file: nothing there
            except OSError as exc:
                raise InputError(f"{shown(rel)!r}: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                return Entry(
                    path=rel, type="symlink", mode=st.st_mode & 0o777,
                    target=wire_name(os.fsdecode(os.readlink(raw, dir_fd=dir_fd))),
                )  # fmt: skip
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{shown(rel)!r} is not a file or symlink")
            if st.st_size > capture.max_file_bytes:
                return "large"
            digest, st = capture.hash_and_store(rel, store_objects=True, tree=tree)
        self._store.flush()
        return Entry(path=rel, type="file", mode=MODES[st.st_mode & 0o777], hash=digest,
                     size=st.st_size)  # fmt: skip

    def _ignored_now(self) -> Callable[[str], bool]:
        """`ignored(rel)`: whether today's rules leave a file out, as a scan would.

        Reads only the `.gitignore` files of the directories above the paths asked
        about (never through a symlink); a file git tracks is never ignored. git's
        index is read only for a path the rules ignore (what it adds only un-ignores).
        """
        rules = self._capture.rules()

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
            tracked = self._capture.tracked(rules)
            if tracked is not None and tracked.holds(directory):
                return False  # git walks a directory it tracks something in as its own
            with DirTree(self._root.path) as tree:
                try:
                    os.lstat(".git", dir_fd=tree.dir_fd(directory))
                except OSError:
                    return False
                return True

        by_rules = ignore_checker(rules, gitignore, None, nested)
        with_index: Callable[[str, bool], bool] | None = None  # made once, when first asked

        def ignored_now(rel: str) -> bool:
            nonlocal with_index
            if not by_rules(rel, False):
                return False
            tracked = self._capture.tracked(rules)
            if tracked is None or not tracked.enters_any:
                return tracked is None or not tracked.is_tracked(rel)
            if with_index is None:
                with_index = ignore_checker(rules, gitignore, tracked.enters_whole, nested)
            return not tracked.is_tracked(rel) and with_index(rel, False)

        return ignored_now


def _through_a_symlink(root: Root, parent: bytes) -> bool:
    """True when the kernel's walk of `parent` (absolute) meets a symlink below the root.

    Without one, `..` undoes the component before it, as a lexical walk does: each
    directory the walk reaches, before each `..` and at its end, is looked at through
    descriptors, so a deep path with no symlink never needs `realpath`.
    """
    parts = parent.split(b"/")
    ends = [i for i, part in enumerate(parts) if part == b".."] + [len(parts)]
    for end in ends:
        above = os.fsdecode(os.path.normpath(b"/".join(parts[:end]) or b"/"))
        directory = relative_to(root.path, above) if above != root.path else ""
        if directory is None:
            continue  # above the root: `named` decides
        found = _first_not_a_directory(root.path, directory)
        if found is not None and found[1] is not None and stat.S_ISLNK(found[1]):
            return True
    return False


def _first_not_a_directory(root: str, directory: str) -> tuple[str, int | None] | None:
    """The first path from `root` down to `directory` that is no directory, and its mode.

    Its mode is None when nothing is there; the whole is None when every one is a
    directory. Walked through descriptors, so no depth is too deep.
    """
    with DirTree(root) as tree:
        for above in reversed(list(ancestors(directory))):
            try:
                tree.dir_fd(above)
            except FileNotFoundError:
                return above, None
            except OSError:
                up, _, name = above.rpartition("/")
                try:
                    return above, os.lstat(fs_path(name), dir_fd=tree.dir_fd(up)).st_mode
                except OSError:
                    return above, None  # gone since
    return None


def _followed(path: bytes, named: str | os.PathLike[str]) -> bytes | None:
    """`path` with every symlink followed (`realpath`); None for a loop.

    Raises:
        InputError: one cannot be followed (a path longer than PATH_MAX).
    """
    try:
        return os.path.realpath(path, strict=True)
    except FileNotFoundError:
        return os.path.realpath(path)  # a part not there yet: the rest is followed
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        if exc.errno == errno.EINVAL:  # a link read was a link no longer
            raise InputError(
                f"{shown(os.fspath(named))!r}: a directory above it changed while it was "
                "captured (a symbolic link now, or then); capture it again"
            ) from None
        raise InputError(
            f"{shown(os.fspath(named))!r}: cannot follow its symbolic links ({exc.strerror})"
        ) from None
