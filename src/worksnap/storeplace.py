"""The store's own folder: where it is, resolved once, and made private to its maker.

`resolve_store` follows a store given through a symlink once, and refuses a link a
restore could move; `make_store_dir` makes the folder a store's files go in.
"""

from __future__ import annotations

import contextlib
import os
import stat

from worksnap.errors import InputError
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
