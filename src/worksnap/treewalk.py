"""Walks over tree objects: the flat view, flat to trees, diffs that skip equal subtrees, gc marks.

Every object read is checked against its digest and decoded strictly (`tree.decode_node`);
a split directory's parts must fall in the ranges its index gives, in order. Walks are
iterative (no recursion limit), refuse trees deeper than `MAX_DEPTH` directories, and
stop after `MAX_PATHS` paths: a cycle cannot exist among objects named by their digest,
but a few shared subtrees can describe exponentially many paths.

Order: v1 manifests, the planner and the diff sort by full wire path (Python string
order). Children are stored sorted by name, which is not the same order when a name
holds a character below `/`: `a-b` < `a/x` but `a` < `a-b`. So a walk visits a
directory's contents where `name + "/"` sorts among its siblings (what git does with
tree entries), and yields the directory itself where `name` sorts: full-path order.
"""

from __future__ import annotations

import heapq
import threading
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable, Iterator
from itertools import pairwise
from operator import attrgetter

import msgspec

from worksnap.errors import ManifestError
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Digest
from worksnap.tree import (
    Child,
    Dir,
    Excluded,
    File,
    Ignored,
    Index,
    Large,
    Node,
    Part,
    Read,
    Symlink,
    decode_node,
    node_digest,
)

MAX_DEPTH = 2048
"""Directories below the root (a path of 4096 bytes holds at most 2048 components)."""

MAX_PATHS = 10_000_000
"""Paths one walk yields at most (a format 1 manifest of 1 GiB, the cap, holds fewer)."""


class Loose(msgspec.Struct, frozen=True):
    """Left-out paths that cannot sit in a tree, kept in the snapshot record instead.

    Their parent is not a captured directory (a checkpoint's `large`), or their name is
    taken there already.
    """

    ignored: list[str] = msgspec.field(default_factory=list)
    large: list[str] = msgspec.field(default_factory=list)
    excluded: list[str] = msgspec.field(default_factory=list)


class Flat(msgspec.Struct, frozen=True):
    """The flat view of a snapshot: exactly the path fields of a format 1 manifest."""

    entries: list[Entry]
    dirs: list[str]
    ignored: list[str]
    large: list[str]
    excluded: list[str]

    @classmethod
    def of(cls, manifest: Manifest) -> Flat:
        """The path fields of a manifest."""
        return cls(
            manifest.entries, manifest.dirs, manifest.ignored, manifest.large, manifest.excluded
        )


class Difference(msgspec.Struct, frozen=True):
    """A path whose child differs between two trees (None: nothing there on that side).

    A directory on both sides is never a difference itself; what differs below it is.
    """

    path: str
    old: Child | None
    new: Child | None


# -- reading ---------------------------------------------------------------------


def _load(digest: Digest, read: Read, where: str) -> Node:
    if isinstance(read, Nodes):
        return read.node(digest, where)
    return _checked(digest, read(digest), where)


def _checked(digest: Digest, data: bytes, where: str) -> Node:
    source = f"tree {digest} of {where!r}"
    if node_digest(data) != digest:
        raise ManifestError(source, "its bytes do not match its digest (damaged?)")
    return decode_node(data, source)


class Nodes:
    """A `Read` that keeps the last tree nodes it read, and the last short comparisons.

    It keeps `keep` nodes, checked and decoded, holding `budget` children (and spans) in
    all, and `keep` comparisons of two directories (up to `_KEEP_DIFFERING` names each).
    An object is named by its content: a node read and checked once is that node ever
    after, and what differs between two is what differed. For a long-lived workspace's
    plans, which compare the same trees again (a plan, then its restore), and the changed
    count of each snapshot (the new trees of one are the old of the next); never for
    verify, which must read the store. Safe to share between threads.
    """

    def __init__(self, read: Read, keep: int = 1024, budget: int = 1 << 14) -> None:
        self._read, self._keep, self._budget, self._held = read, keep, budget, 0
        self._nodes: dict[Digest, Node] = {}
        self._pairs: dict[tuple[Digest, Digest], list[_Differs]] = {}
        self._lock = threading.Lock()

    def __call__(self, digest: Digest) -> bytes:
        """An object's bytes, from the store (what any other `Read` gives)."""
        return self._read(digest)

    def node(self, digest: Digest, where: str) -> Node:
        """The node `digest` names, read and checked the first time (as `children` does)."""
        with self._lock:
            node = self._nodes.get(digest)
        if node is None:
            node = _checked(digest, self._read(digest), where)
            self.add(digest, node)
        return node

    def add(self, digest: Digest, node: Node) -> None:
        """Keeps a node known to be what `digest` names (a capture's new one: never read)."""
        with self._lock:
            if digest not in self._nodes:
                self._nodes[digest] = node
                self._held += _width(node)
            while self._nodes and (len(self._nodes) > self._keep or self._held > self._budget):
                self._held -= _width(self._nodes.pop(next(iter(self._nodes))))  # the oldest

    def differing(
        self, a: Digest, b: Digest, compare: Callable[[], list[_Differs]]
    ) -> list[_Differs]:
        """What `compare` says differs between directories `a` and `b`, kept if it is short.

        Two digests name two contents: what differs between them never changes.
        """
        with self._lock:
            found = self._pairs.get((a, b))
        if found is None:
            found = compare()
            if len(found) <= _KEEP_DIFFERING:
                with self._lock:
                    self._pairs[(a, b)] = found
                    if len(self._pairs) > self._keep:
                        del self._pairs[next(iter(self._pairs))]  # the oldest
        return found


def _width(node: Node) -> int:
    """A node's children (or spans): what it costs `Nodes` to keep it."""
    return len(node.spans) if isinstance(node, Index) else len(node.children)


_Differs = tuple[str, Child | None, Child | None]
"""A name whose child differs between two versions of a directory, and the two children."""

_KEEP_DIFFERING = 256
"""The longest comparison of two directories `Nodes` keeps."""


def _hex(raw: bytes) -> Digest:
    return Digest(raw.hex())


class _Spot(msgspec.Struct, frozen=True):
    """A node of a directory still to read: the range of names it must hold, and what it is."""

    lo: str | None  # its first name (None: the directory's top node)
    hi: str | None  # every name is below this (None: no bound)
    level: int  # 0: a Tree or an Index (the top); 1: a Part; n > 1: an Index of level n - 1
    where: str


def _open(digest: Digest, spot: _Spot, read: Read) -> Node:
    """Reads one node of a directory and checks that it is what and where its parent says."""
    node = _load(digest, read, spot.where)
    source = f"tree {digest} of {spot.where!r}"
    if spot.level == 0:
        if isinstance(node, Part):
            raise ManifestError(source, "a part where a directory was expected")
        return node
    if spot.level == 1 and not isinstance(node, Part):
        raise ManifestError(source, "not a part, where its index lists one")
    if spot.level > 1 and not (isinstance(node, Index) and node.level == spot.level - 1):
        raise ManifestError(source, "not an index of the level below its parent's")
    first, last = (
        (node.children[0].name, node.children[-1].name)
        if isinstance(node, Part)
        else (node.spans[0].first, node.spans[-1].first)  # type: ignore[union-attr]
    )
    if first != spot.lo or (spot.hi is not None and last >= spot.hi):
        raise ManifestError(source, "holds names outside the range its index gives")
    return node


def _spots(node: Index, spot: _Spot, skip: Container[bytes] = ()) -> Iterator[tuple[Digest, _Spot]]:
    """The nodes an index lists (but those in `skip`), each with the range of names it must hold."""
    his: list[str | None] = [s.first for s in node.spans[1:]]
    his.append(spot.hi)
    for span, hi in zip(node.spans, his, strict=True):
        if span.node not in skip:
            # Below level 1 lie parts (spot level 1); below level n, indexes of level n - 1.
            yield _hex(span.node), _Spot(span.first, hi, node.level, spot.where)


def children(digest: Digest, read: Read, where: str = ".") -> Iterator[Child]:
    """Yields a directory's children in name order, reading a split one part by part.

    Raises:
        ManifestError: an object is damaged, not canonical, hostile or out of place.
        ObjectError: `read` could not find an object.
    """
    yield from _children(digest, _Spot(None, None, 0, where), read)


def _children(digest: Digest, spot: _Spot, read: Read) -> Iterator[Child]:
    node = _open(digest, spot, read)
    if isinstance(node, Index):
        # Recursion is bounded: each level goes down by one, from at most MAX_LEVELS.
        for sub, sub_spot in _spots(node, spot):
            yield from _children(sub, sub_spot, read)
    else:
        yield from node.children


def _walk_order(kids: list[Child]) -> list[Child]:
    """Returns children in the order of full paths: a directory's contents where `name/` sorts.

    Only a directory followed by a name that starts with its own and a character below
    `/` moves (`a` before `a-b`, `a/x` after it); mostly nothing does (returned as is).
    """
    for i, (a, b) in enumerate(pairwise(kids)):
        if type(a) is Dir and b.name < a.name + "/":
            return kids[:i] + sorted(kids[i:], key=_walk_key)
    return kids


def _walk_key(child: Child) -> str:
    return child.name + "/" if type(child) is Dir else child.name


# -- the flat view -----------------------------------------------------------------


def entry_of(path: str, child: Child) -> Entry | None:
    """The format 1 entry of a file or symlink child (None for any other child)."""
    if type(child) is File:
        return Entry(path=path, type="file", mode=child.mode, hash=child.digest.hex(),
                     size=child.size)  # fmt: skip
    if type(child) is Symlink:
        return Entry(path=path, type="symlink", mode=child.mode, target=child.target)
    return None


Subtrees = Callable[[str, Digest], Flat | None]
"""The flat view below a directory (its path, its tree's digest) known without reading it:
the last capture's, when its tree there is that very digest (`Capture.subtree`)."""


def flatten(
    root: Digest,
    read: Read,
    *,
    loose: Loose | None = None,
    max_paths: int = MAX_PATHS,
    known: Subtrees | None = None,
) -> Flat:
    """Returns the flat view of a snapshot's trees, sorted exactly as format 1 sorts it.

    Args:
        root: the root tree's digest.
        read: returns an object's bytes.
        loose: the record's left-out paths that no tree holds (merged in).
        max_paths: refuse a tree of more paths than this.
        known: the flat view below a directory whose tree is known (equal digests:
            equal trees): taken as it is, its entries shared, instead of read.

    Raises:
        ManifestError: an object is damaged, not canonical or hostile; the tree is
            deeper than `MAX_DEPTH` or holds more than `MAX_PATHS` paths.
        ObjectError: `read` could not find an object.
    """
    entries: list[Entry] = []
    dirs, ignored, large, excluded = list[str](), list[str](), list[str](), list[str]()
    leaves: dict[type, list[str]] = {Ignored: ignored, Large: large, Excluded: excluded}
    top = _walk_order(list(children(root, read)))
    # (prefix, depth, children in walk order, position): a frame per open directory.
    stack: list[tuple[str, int, list[Child], int]] = [("", 0, top, 0)]
    count = len(top)  # paths met so far (each directory's children, once)
    while stack:
        prefix, depth, kids, at = stack.pop()
        if count > max_paths:
            raise ManifestError(f"tree {root}", f"holds more than {max_paths} paths")
        for i in range(at, len(kids)):
            child = kids[i]
            path = prefix + child.name
            if isinstance(child, Dir):
                if depth == MAX_DEPTH:
                    raise ManifestError(f"tree {root}", f"deeper than {MAX_DEPTH} directories")
                dirs.append(path)
                below = known(path, _hex(child.tree)) if known is not None else None
                if below is not None:  # this very tree, as captured: nothing to read or check
                    entries += below.entries
                    dirs += below.dirs
                    continue
                stack.append((prefix, depth, kids, i + 1))
                sub = _walk_order(list(children(_hex(child.tree), read, path)))
                count += len(sub)
                stack.append((path + "/", depth + 1, sub, 0))
                break
            entry = entry_of(path, child)
            if entry is not None:
                entries.append(entry)
            else:
                leaves[type(child)].append(path)
    # Walk order puts `a-b` before the directory `a` (its contents sort after `a-b`).
    dirs.sort()
    if loose is not None:
        ignored = _merged(ignored, loose.ignored)
        large = _merged(large, loose.large)
        excluded = _merged(excluded, loose.excluded)
    return Flat(entries, dirs, ignored, large, excluded)


def subtrees_of(last: Manifest, digest_of: Callable[[str], str | None]) -> Subtrees:
    """The flat view below a directory of `last`, a capture whose trees had `digest_of`.

    Only for a directory whose tree is the digest asked about, and below which `last`
    left nothing out (a left-out path may be held by the tree or by the record): the
    entries are `last`'s own, shared.
    """
    path_of = attrgetter("path")

    def below(path: str, digest: Digest) -> Flat | None:
        if digest_of(path) != digest:
            return None
        start, end = path + "/", path + "0"  # "0" follows "/": every path below, no other
        for left_out in (last.ignored, last.large, last.excluded):
            at = bisect_left(left_out, start)
            if at < len(left_out) and left_out[at] < end:
                return None
        first = bisect_left(last.entries, start, key=path_of)
        entries = last.entries[first : bisect_left(last.entries, end, key=path_of)]
        first = bisect_left(last.dirs, start)
        return Flat(entries, last.dirs[first : bisect_left(last.dirs, end)], [], [], [])

    return below


def _merged(a: list[str], b: list[str]) -> list[str]:
    return list(heapq.merge(a, b)) if b else a


# -- comparing two trees ------------------------------------------------------------------


def diff_trees(
    old: Digest | None, new: Digest | None, read: Read, *, max_paths: int = MAX_PATHS
) -> Iterator[Difference]:
    """Yields the paths whose child differs between two trees, in full-path order.

    Reads only what differs: a subtree (or a part of a split directory) whose digest
    is equal on both sides is skipped unread. A directory on one side only is walked
    whole (each path below it is a difference). A bad object raises when it is reached,
    after the differences before it were yielded: a caller that acts on them collects
    them all first (as a planner does), so nothing is used before everything is checked.

    Args:
        old: the root tree digest of one side (None: an empty tree).
        new: the other side's.
        read: returns an object's bytes.
        max_paths: refuse to yield more differences than this.

    Raises:
        ManifestError: an object read is damaged, not canonical or hostile.
        ObjectError: `read` could not find an object.
    """
    # A stack of what is still to yield: a difference, or two directories to compare.
    stack: list[Difference | tuple[str, Digest | None, Digest | None, int]] = []
    if old != new:
        stack.append(("", old, new, 0))
    count = 0
    while stack:
        item = stack.pop()
        if isinstance(item, Difference):
            count += 1
            if count > max_paths:
                raise ManifestError("tree diff", f"more than {max_paths} paths differ")
            yield item
            continue
        prefix, a, b, depth = item
        if depth > MAX_DEPTH:
            raise ManifestError("tree diff", f"deeper than {MAX_DEPTH} directories")
        events: list[tuple[str, Difference | tuple[str, Digest | None, Digest | None, int]]] = []
        for name, x, y in _differing(a, b, read, prefix.rstrip("/") or "."):
            path = prefix + name
            x_dir, y_dir = type(x) is Dir, type(y) is Dir
            if not (x_dir and y_dir):
                events.append((name, Difference(path, x, y)))
            if x_dir or y_dir:
                events.append((name + "/", (
                    path + "/",
                    _hex(x.tree) if x_dir else None,  # type: ignore[union-attr]
                    _hex(y.tree) if y_dir else None,  # type: ignore[union-attr]
                    depth + 1,
                )))  # fmt: skip
        events.sort(key=lambda event: event[0])
        stack.extend(event for _, event in reversed(events))


def _differing(a: Digest | None, b: Digest | None, read: Read, where: str) -> Iterable[_Differs]:
    """(name, old child, new child) for each name whose child differs, by name."""
    if isinstance(read, Nodes) and a is not None and b is not None:
        return read.differing(a, b, lambda: list(_compared(a, b, read, where)))
    return _compared(a, b, read, where)


def _compared(a: Digest | None, b: Digest | None, read: Read, where: str) -> Iterator[_Differs]:
    old, new = _unshared(a, b, read, where)
    if [x.name for x in old] == [y.name for y in new]:
        # The same names (files modified, none added or removed): compared pair by pair.
        for was, now in zip(old, new, strict=True):
            if was != now:
                yield was.name, was, now
        return
    i = j = 0
    while i < len(old) or j < len(new):
        x = old[i] if i < len(old) else None
        y = new[j] if j < len(new) else None
        if y is None or (x is not None and x.name < y.name):
            yield x.name, x, None  # type: ignore[union-attr]
            i += 1
        elif x is None or y.name < x.name:
            yield y.name, None, y
            j += 1
        else:
            if x != y:
                yield x.name, x, y
            i += 1
            j += 1


def _unshared(
    a: Digest | None, b: Digest | None, read: Read, where: str
) -> tuple[list[Child], list[Child]]:
    """Returns the children of two versions of a directory, minus the parts both share.

    A part (or index node) with the same digest on both sides holds the same names
    on both, and no other node of either side holds them: it is left out unread.
    """
    top = _Spot(None, None, 0, where)
    fronts: tuple[dict[Digest, _Spot], dict[Digest, _Spot]] = (
        {a: top} if a is not None else {},
        {b: top} if b is not None else {},
    )
    leaves: tuple[dict[Digest, list[Child]], dict[Digest, list[Child]]] = ({}, {})
    while fronts[0] or fronts[1]:
        for digest in fronts[0].keys() & fronts[1].keys():
            del fronts[0][digest], fronts[1][digest]
        indexes: tuple[list[tuple[Index, _Spot]], list[tuple[Index, _Spot]]] = ([], [])
        for front, found, opened in zip(fronts, leaves, indexes, strict=True):
            for digest, spot in front.items():
                node = _open(digest, spot, read)
                if isinstance(node, Index):
                    opened.append((node, spot))
                else:
                    found[digest] = node.children
            front.clear()
        # What both sides' indexes list is left out before a spot is made for it: a large
        # directory's index lists hundreds of parts, nearly all of them shared.
        shared = {s.node for node, _ in indexes[0] for s in node.spans}.intersection(
            s.node for node, _ in indexes[1] for s in node.spans
        )
        for front, opened in zip(fronts, indexes, strict=True):
            for node, spot in opened:
                front.update(_spots(node, spot, shared))
    for digest in leaves[0].keys() & leaves[1].keys():
        del leaves[0][digest], leaves[1][digest]
    # Parts cover disjoint ranges (checked as read): in order of first name, one sorted run.
    return tuple(  # type: ignore[return-value]
        [c for run in sorted(filter(None, found.values()), key=lambda r: r[0].name) for c in run]
        for found in leaves
    )


def count_changes(old: Digest, new: Digest, read: Read) -> int:
    """Counts the paths (files, symlinks, directories) that differ: `list`'s CHANGED column.

    Equal to `catalog.count_changes` of the two flat views, at the cost of what changed.
    """
    return sum(1 for d in diff_trees(old, new, read) if _counted(d.old) != _counted(d.new))


def _counted(child: Child | None) -> object:
    """What format 1 compared at a path: the entry, "a directory", or nothing."""
    if type(child) in (File, Symlink):
        return child
    return "dir" if type(child) is Dir else None


# -- gc ------------------------------------------------------------------------


def reachable(roots: Iterable[Digest], read: Read) -> Iterator[Digest]:
    """Yields every object digest reachable from root tree digests, each once (gc marking).

    Tree objects and file contents alike; each tree object is read once, however many
    snapshots and directories share it. Attachments are the record's to add.

    Raises:
        ManifestError: an object read is damaged, not canonical or hostile. A gc must
            then stop: what an unreadable tree holds cannot be marked.
        ObjectError: `read` could not find a tree object.
    """
    yielded: set[str] = set()
    # A tree object's digest may also be some file's contents: trees are kept apart,
    # so being yielded as a file never stops a tree from being read.
    opened: set[str] = set()
    stack: list[tuple[Digest, bool]] = [(root, False) for root in roots]
    while stack:
        digest, is_part = stack.pop()
        if digest in opened:
            continue
        opened.add(digest)
        if digest not in yielded:
            yielded.add(digest)
            yield digest
        node = _load(digest, read, "gc mark")
        if isinstance(node, Part) != is_part:
            raise ManifestError(f"tree {digest}", "a part where a directory was expected, "
                                "or the other way round")  # fmt: skip
        if isinstance(node, Index):
            stack.extend((_hex(s.node), node.level == 1) for s in node.spans)
            continue
        for child in node.children:
            if type(child) is Dir:
                stack.append((_hex(child.tree), False))
            elif type(child) is File and (hexed := child.digest.hex()) not in yielded:
                yielded.add(hexed)
                yield Digest(hexed)
