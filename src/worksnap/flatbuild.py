"""Flat to trees: a snapshot's flat view (entries, directories, left-out paths) as tree objects.

`from_flat` is the slow, obvious builder: every directory placed and encoded, bottom up.
The migration and the catalog use it for format 1 manifests; `treebuild.TreeMemo` is its
fast second implementation for captures, held equal to it by `tests/test_treebuild.py`
and the watched differential test. Both place paths with `Places`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping

from worksnap.errors import ManifestError
from worksnap.manifest import Entry
from worksnap.paths import Digest
from worksnap.tree import (
    SPLIT,
    Builder,
    Child,
    Excluded,
    File,
    Ignored,
    Large,
    Split,
    Symlink,
    Write,
)
from worksnap.treewalk import Flat, Loose


def from_flat(flat: Flat, write: Write, split: Split = SPLIT) -> tuple[Digest, Loose]:
    """Builds the trees of a format 1 snapshot (the migration, and tests).

    `flatten` gives back exactly `flat` for a manifest that passes
    `manifest.check_manifest` and whose `ignored`, `large` and `excluded` are sorted
    without repeats, as worksnap writes them (they are sets: a repeat is kept once).
    A large file migrated from format 1 has no size (format 1 kept none). `split` says
    where a large directory is cut (tests pass a small one).

    Returns:
        The root tree's digest, and the left-out paths no tree can hold.

    Raises:
        ManifestError: an entry's parent is not a captured directory, or a path repeats.
    """
    leaves: dict[str, list[Child]] = {"": [], **{d: [] for d in flat.dirs}}
    subdirs: dict[str, list[str]] = {"": [], **{d: [] for d in flat.dirs}}
    places = Places(flat, leaves)
    for d in flat.dirs:
        parent, name = places.directory(d)
        subdirs[parent].append(name)
    for entry in flat.entries:
        parent, name = places.entry(entry.path)
        leaves[parent].append(child_of(name, entry))
    loose = places.left_outs(flat)
    builder = Builder(write, split)
    # Reverse path order reaches every directory after all of its subdirectories.
    for d in sorted(flat.dirs, reverse=True):
        builder.directory(d, leaves.pop(d), subdirs.pop(d))
    builder.directory("", leaves[""], subdirs[""])
    return builder.root().digest, loose


class Places:
    """Places each path of a flat view in its directory (parent, name).

    A directory or entry without a parent, or repeating a directory, is refused here; a
    name repeated among a directory's entries is refused where the directory is encoded
    (`encode_directory`), so no set of names is kept per directory (at 200k files those
    were 4 MB of a cold snapshot's peak RSS): only one with left-out paths gets one.
    """

    __slots__ = ("_dirs", "_leaves", "_names")

    def __init__(self, flat: Flat, leaves: Mapping[str, list[Child]]) -> None:
        self._dirs = {"", *flat.dirs}
        if len(self._dirs) != len(flat.dirs) + 1:
            seen = {""}
            for d in flat.dirs:
                if d in seen:
                    raise _unplaced(f"directory {d!r}")
                seen.add(d)
        self._leaves = leaves
        self._names: dict[str, set[str]] = {}

    def directory(self, path: str) -> tuple[str, str]:
        """Where directory `path` goes."""
        parent, _, name = path.rpartition("/")
        if parent not in self._dirs:
            raise _unplaced(f"directory {path!r}")
        return parent, name

    def entry(self, path: str) -> tuple[str, str]:
        """Where the file or symlink at `path` goes (all are placed before any left-out)."""
        parent, _, name = path.rpartition("/")
        if parent not in self._dirs or path in self._dirs:
            raise _unplaced(repr(path))
        return parent, name

    def left_outs(self, flat: Flat, skip: Container[str] = frozenset()) -> Loose:
        """Places the left-out paths of `flat`; returns those no tree can hold.

        A repeat is placed once (they are sets); a path in a directory of `skip` is not.
        """
        loose = Loose()
        for make, paths, left in _left_out_kinds(flat, loose):
            previous = None
            for path in paths:
                if path == previous or path.rpartition("/")[0] in skip:
                    continue
                previous = path
                spot = self._left_out(path)
                if spot is None:
                    left.append(path)
                else:
                    self._leaves[spot[0]].append(make(spot[1]))
        return loose

    def _left_out(self, path: str) -> tuple[str, str] | None:
        """Where a left-out path goes; None when it has no parent or its name is taken."""
        parent, _, name = path.rpartition("/")
        if parent not in self._dirs or path in self._dirs:
            return None
        names = self._names.get(parent)
        if names is None:
            names = self._names[parent] = {c.name for c in self._leaves[parent]}
        if name in names:
            return None
        names.add(name)
        return parent, name


def _unplaced(what: str) -> ManifestError:
    return ManifestError("flat manifest", f"{what} has no parent or repeats")


def _left_out_kinds(
    flat: Flat, loose: Loose
) -> list[tuple[Callable[[str], Child], list[str], list[str]]]:
    """For each kind of left-out path: its child's maker, `flat`'s paths, and `loose`'s."""
    return [
        (lambda name: Ignored(name=name), flat.ignored, loose.ignored),
        (lambda name: Large(name=name, size=None), flat.large, loose.large),
        (lambda name: Excluded(name=name), flat.excluded, loose.excluded),
    ]


def child_of(name: str, entry: Entry) -> Child:
    """The tree child named `name` that stands for `entry` (a file or a symlink)."""
    if entry.type == "symlink":
        if entry.target is None:
            raise ManifestError("flat manifest", f"symlink {entry.path!r} has no target")
        return Symlink(name=name, mode=entry.mode, target=entry.target)
    if entry.hash is None or entry.size is None:
        raise ManifestError("flat manifest", f"file {entry.path!r} has no hash or size")
    try:
        digest = bytes.fromhex(entry.hash)
    except ValueError:
        raise ManifestError("flat manifest", f"file {entry.path!r} has a bad hash") from None
    return File(name=name, mode=entry.mode, size=entry.size, digest=digest)


def same_file(child: Child, entry: Entry) -> bool:
    """True when `child` is a file and `child_of(child.name, entry)` would equal it."""
    return (
        type(child) is File
        and entry.type == "file"
        and entry.size == child.size
        and entry.mode == child.mode
        and entry.hash == child.digest.hex()
    )
