"""The shape of trees that came from elsewhere, checked once per directory object.

A pull takes another store's trees, and `verify --remote` vouches for them. Each object
passing its codec's checks alone (`treewalk.reachable`) is not enough: a split
directory's parts must hold the names its index gives them, a snapshot may be no deeper
than `MAX_DEPTH` directories nor hold more than `MAX_PATHS` paths, and a file's size is
the size of its contents. A checked load (`treewalk.flatten`) refuses all of these, so
a pull that stored such a snapshot stored one that `verify` then named and `restore`
refused; and 44 objects naming one subtree twice at each of 40 levels made `show` and
`status` walk 2^40 paths (a review). Here each directory object is read once, however
many directories and snapshots share it, and its counts are added up, not walked.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from worksnap.errors import ManifestError
from worksnap.paths import Digest
from worksnap.tree import Dir, File, Read
from worksnap.treewalk import MAX_DEPTH, MAX_PATHS, children


def check_shape(
    roots: Iterable[Digest],
    read: Read,
    *,
    max_paths: int = MAX_PATHS,
    max_depth: int = MAX_DEPTH,
) -> dict[str, set[int]]:
    """Refuses trees a checked load refuses; returns the sizes each file digest is given.

    Args:
        roots: root tree digests (of the snapshots to check).
        read: returns an object's bytes.
        max_paths: the most paths one snapshot may hold (`treewalk.flatten`'s).
        max_depth: the most directories below a root (`treewalk.flatten`'s).

    Returns:
        For each file digest, every size a tree gives it: the caller compares them with
        the bytes it fetches (one that differs is refused by `verify` and `restore`).

    Raises:
        ManifestError: an object is damaged, not canonical, hostile or out of place
            (`treewalk.children`), or a snapshot is too deep or holds too many paths.
        ObjectError: `read` could not find a tree object.
    """
    sizes: dict[str, set[int]] = {}
    done: dict[str, tuple[int, int]] = {}  # directory -> (paths below, directories deep)

    def opened(digest: str, where: str) -> _Frame:
        kids = list(children(Digest(digest), read, where))
        for child in kids:
            if type(child) is File:
                sizes.setdefault(child.digest.hex(), set()).add(child.size)
        subs = [child.tree.hex() for child in kids if type(child) is Dir]
        return _Frame(digest, subs, 0, len(kids))

    for root in roots:
        if root in done:
            continue
        frames = [opened(root, ".")]
        on_path: set[str] = {root}
        while frames:
            frame = frames[-1]
            if frame.at < len(frame.subs):
                sub = frame.subs[frame.at]
                frame.at += 1
                if sub in done:
                    continue
                if sub in on_path:  # (digests name contents: only a forged one could)
                    raise ManifestError(f"tree {root}", f"holds tree {sub} inside itself")
                if len(frames) > max_depth:
                    raise ManifestError(f"tree {root}", f"deeper than {max_depth} directories")
                frames.append(opened(sub, sub))
                on_path.add(sub)
                continue
            frames.pop()
            on_path.discard(frame.digest)
            paths = frame.own + sum(done[s][0] for s in frame.subs)
            depth = max((done[s][1] + 1 for s in frame.subs), default=0)
            if paths > max_paths:
                raise ManifestError(f"tree {root}", f"holds more than {max_paths} paths")
            if depth > max_depth:
                raise ManifestError(f"tree {root}", f"deeper than {max_depth} directories")
            done[frame.digest] = (paths, depth)
    return sizes


class _Frame(msgspec.Struct):
    """A directory being added up: its subdirectories, the next to visit, its own children."""

    digest: str
    subs: list[str]
    at: int
    own: int


def size_problem(digest: str, data: bytes, sizes: dict[str, set[int]]) -> str | None:
    """What is wrong with an object's bytes against the sizes trees give it (None: nothing)."""
    wrong = sorted(s for s in sizes.get(digest, ()) if s != len(data))
    if not wrong:
        return None
    return f"object {digest} holds {len(data)} bytes where a tree names {wrong[0]}"
