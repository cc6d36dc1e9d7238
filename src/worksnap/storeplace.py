"""The store's own folder: where it is, resolved once, and made private to its maker.

`resolve_store` follows a store given through a symlink once, and refuses a link a
restore could move; `make_store_dir` makes the folder a store's files go in.
"""

from __future__ import annotations

import contextlib
import os
import stat

from worksnap.errors import ForeignStoreError, InputError, shown
from worksnap.layout import StorePaths
from worksnap.paths import relative_to

DIR_MODE = 0o777
"""A store's folders: what the umask leaves (`storedir.FILE_MODE` says why)."""


def make_store_dir(path: str) -> None:
    """Makes the store's own folder, if missing: only its maker may enter it.

    It holds a copy of every file captured, a private one too (a 0600 file, one in a
    0700 folder), and made as the umask leaves it (0755) any user could read them (a
    review). In a setgid folder, the way a group shares its work (as `git init
    --shared`), it takes what the umask leaves, for the group. Folders above it are
    made as the umask leaves them.
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    shared = os.stat(parent).st_mode & stat.S_ISGID
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, DIR_MODE if shared else 0o700)


def check_own(path: str, fd: int) -> os.stat_result:
    """Refuses a store folder that is not one worksnap made for its user; returns its stat.

    A store holds a copy of every file captured, a private one too. A `.worksnap` link
    (git commits it, so it comes with a clone) or a `.git` file naming another git
    directory can lead to a folder of another user, who would read those copies and
    could plant records a restore acts on; or to a folder of one's own that others may
    enter, where the packs are as readable as it. `make_store_dir` makes a store's
    folder its maker's alone, or, in a setgid folder of one of the user's groups, the
    group's. A folder of one's own that others may enter (anyone, or a group's: anyone
    but the group) is made so when it holds nothing but what a store does (made by hand
    for a store, a store made before stop 44); one that holds anything else is refused,
    its mode left as it is, and so is another user's (as git refuses a repository of
    another owner). A file system that keeps no modes, or is read-only, is used as it is.

    Args:
        path: the store folder (for the message).
        fd: the store folder, opened.

    Raises:
        ForeignStoreError: the folder is another user's, or others may enter it and it
            holds what no store does.
    """
    st = os.fstat(fd)
    grouped = check_owner(path, st)
    loose = stat.S_IMODE(st.st_mode) & (0o007 if grouped else 0o077)
    if not loose:
        return st
    if strange := StorePaths(path).foreign(os.listdir(fd)):
        raise not_a_store(path, strange)  # (a home folder a link leads to, say)
    if st.st_uid == os.geteuid():
        with contextlib.suppress(OSError):  # read-only, or no modes (vfat): as it is
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & (~0o007 if grouped else 0o700))
            return os.fstat(fd)
    return st  # a member's of the group, older: its maker makes it so at its next command


def check_owner(path: str, st: os.stat_result) -> bool:
    """Refuses a store folder of another user but a group's; True for a group's (`check_own`).

    A group's: setgid, of one of the user's groups. (One of a group the user is not in is
    the user's own: its maker's alone, not shared with strangers.) Also asked when the
    folder cannot be entered, so that the refusal names its owner (it said "config.json
    is not valid (Permission denied)": a review).

    Raises:
        ForeignStoreError: another user's folder, not a setgid one of the user's groups.
    """
    grouped = bool(st.st_mode & stat.S_ISGID) and (
        st.st_gid == os.getegid() or st.st_gid in os.getgroups()
    )
    if st.st_uid != os.geteuid() and not grouped:
        raise ForeignStoreError(
            f"store {shown(path)} belongs to another user (uid {st.st_uid}): worksnap keeps "
            f"its copies of your files only in a folder of your own (or your group's, a "
            f"setgid folder); name another with --store, or remove what leads there"
        )
    return grouped


def not_a_store(path: str, strange: list[str]) -> ForeignStoreError:
    """The refusal of a folder that holds what no store does (`strange`, sorted)."""
    shown_names = ", ".join(strange[:3]) + (", ..." if len(strange) > 3 else "")
    return ForeignStoreError(
        f"refusing to make a store in {path}: it holds {shown_names}, which no worksnap "
        "store does (name a new or empty directory, or an existing store)"
    )


def resolve_store(root: str, store: str) -> tuple[str, set[str]]:
    """Resolves a store path once; returns it and the paths of the root it takes up.

    A store may be reached through a symlink (`.worksnap -> /elsewhere/store`): the
    link is part of the store's path, so it is never captured, restored or removed,
    like the store itself. A link inside the root that a restore could change (one
    on the way to the store, or one that leads back into the root) is refused: the
    next command would find another store, or none, and strand its journal.

    Args:
        root: the workspace root (absolute, resolved).
        store: the store path as given (absolute).

    Returns:
        The resolved store directory, and the relative wire paths of the root that
        are the store's (the directory itself, the link that leads to it).

    Raises:
        InputError: the store is, or holds, the root, or a restore could move it.
    """
    real = os.path.realpath(store)
    if real == root or root.startswith(real.rstrip("/") + "/"):
        # A restore would treat the store's own files as workspace files.
        raise InputError(f"store {store} must not be the root or contain it")
    taken: set[str] = set()
    parts = [part for part in store.split("/") if part]
    current = "/"
    for depth, part in enumerate(parts):
        candidate = os.path.join(current, part)
        if not os.path.islink(candidate):
            current = candidate
            continue
        current = os.path.realpath(candidate)
        link = relative_to(root, candidate)
        if link is None:
            continue  # a link outside the root: no restore changes it
        if depth < len(parts) - 1 or current == root or relative_to(root, current) is not None:
            raise InputError(
                f"store {store} is reached through the link {link} inside the root, which "
                f"a restore could change (or remove): name the store by its real path "
                f"({real}) or keep it outside the root"
            )
        taken.add(link)  # the last link, leading out of the root: it stands for the store
    inside = relative_to(root, real)
    if inside is not None:
        taken.add(inside)
    return real, taken
