"""Tree objects (format 2): one per captured directory, stored and addressed like file contents.

A directory is the sorted list of its children: each one a name (one wire-form
component) and what is there, captured or left out (`File`, `Symlink`, `Dir`,
`Ignored`, `Large`, `Excluded`). No time, inode or device is recorded, so touching
or restoring a file never changes a tree. Each object is canonical msgpack
(`encode_node`), and its digest is BLAKE3 of exactly those bytes, so two equal
directories are one object and a walk can skip a subtree whose digest is equal.

A directory whose listing encodes to more than `SPLIT_BYTES` bytes is split into
parts at content-defined boundaries of its sorted names (`cut`), listed by index
nodes whose spans are cut the same way, level by level, until one `Index` node
holds them all: one change rewrites one part and one node per index level, not
the whole listing. docs/format.md ("Format 2: trees") has the bytes.

Pure: objects go out through a `write(digest, data)` function (see `Builder`);
nothing here knows about packs. `treewalk.py` reads trees back.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterable, Sequence
from itertools import islice, pairwise
from typing import TypeVar

import msgspec
from blake3 import blake3

from worksnap.errors import ManifestError
from worksnap.hash import hash_bytes
from worksnap.paths import Digest, is_canonical, is_git_name

FORMAT = 2
"""The tree format this worksnap writes and the newest it reads (manifest format 2)."""

MAX_OBJECT = 1 << 20
"""No tree object is larger (1 MiB). What worksnap writes stays under `PART_MAX` plus one
child (a child holds at most a 255-byte name and a 4 KiB link target, 3x as escapes), so
about 78 KiB; a larger object is refused before it is decoded."""

SPLIT_BYTES = 32768
"""A directory whose children encode to more than this (about 500 children) is split into
parts (when the cut finds at least two): one change then rewrites one part of about 8 KiB
per level instead of the whole listing. Packs store a changed tree as a delta against its
previous version, so a rewritten part costs tens of bytes whatever its size, and what a
change adds is mostly a fixed cost per object (an index row of about 57 bytes and a zstd
frame). Issue 13's 200-step session on the 47k-file tree grew the store by 880,598 bytes
with directories split over 4 KiB into parts of about 2 KiB, and by 768,689 with this
split (git after `git gc`: 686 KB; benchmarks/trees_vs_git.py, docs/performance.md)."""

PART_MAX = 65536
"""A part (or index node) never grows past this many bytes of children (unless one child
alone is bigger)."""

BOUNDARY_MASK = 0x7F
"""A part ends after a name whose hash has these bits clear (1 in 128) once it holds two
children: parts average about 128 children (8 KiB of 64-byte children). There is no
minimum size, so whether a part ends after a name depends on that name and on whether it
begins its part, not on where the part began: adding or removing a name rewrites its own
part, or two when it or the next part's first name ends one (docs/format.md)."""


class Split(msgspec.Struct, frozen=True):
    """Where a writer cuts a large directory (the three settings above).

    The cut is the writer's choice alone: readers and walks take any valid split. Tests
    pass a smaller one so that a few hundred files reach parts and index levels.
    """

    over: int = SPLIT_BYTES
    part_max: int = PART_MAX
    mask: int = BOUNDARY_MASK


SPLIT = Split()

MAX_LEVELS = 32
"""Index levels of one directory. Every level at least halves the node count (every index
node but a level's last holds at least two spans: a span, at most a 765-byte name and a
digest, is far smaller than `PART_MAX`), so 32 is never reached."""

Read = Callable[[Digest], bytes]
"""Returns an object's bytes (the store's `read`)."""

Write = Callable[[Digest, bytes], object]
"""Stores an object under its digest (the store's `add`; storing one twice does nothing)."""


class _Child(
    msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True, tag_field="kind"
):
    name: str


class File(_Child, frozen=True, tag=0):
    """A captured regular file: its permission bits, size and the digest of its bytes."""

    mode: int
    size: int
    digest: bytes
    """32 raw bytes: BLAKE3 of the file's contents (an object in the store)."""


class Symlink(_Child, frozen=True, tag=1):
    """A captured symbolic link (never followed)."""

    mode: int
    target: str
    """The link text in wire form."""


class Dir(_Child, frozen=True, tag=2):
    """A captured directory (no mode: worksnap neither records nor restores a directory's)."""

    tree: bytes
    """32 raw bytes: the digest of its `Tree`, or of its top `Index` when it is split."""


class Ignored(_Child, frozen=True, tag=3):
    """A file or directory the ignore rules leave out (nothing below it is looked at)."""


class Large(_Child, frozen=True, tag=4):
    """A file over the size cap: listed, not stored."""

    size: int | None
    """Its size when captured; None in a tree migrated from format 1, which kept none."""


class Excluded(_Child, frozen=True, tag=5):
    """Never captured nor touched.

    The store, any spelling of `.git`, a special file, or an `--exclude` path.
    """


Child = File | Symlink | Dir | Ignored | Large | Excluded
"""One child of a directory."""


class _Node(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    version: int


class Tree(_Node, frozen=True, tag="wstree"):
    """A whole directory: its children, strictly sorted by name."""

    children: list[Child]


class Part(_Node, frozen=True, tag="wspart"):
    """A run of a split directory's children (non-empty, strictly sorted by name)."""

    children: list[Child]


class Span(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """One entry of an `Index`: a node and the first name it holds."""

    first: str
    node: bytes
    """32 raw bytes: the digest of a `Part` (level 1) or of an `Index` one level down."""


class Index(_Node, frozen=True, tag="wsindex"):
    """A split directory's parts (or lower index nodes), in name order.

    Each span holds the names from its `first` up to the next span's `first` (or up to
    the end of the range the index itself covers).
    """

    level: int
    spans: list[Span]


Node = Tree | Part | Index
"""Any tree object."""


class _Header(msgspec.Struct, array_like=True):
    tag: str
    version: int


_T = TypeVar("_T")
_TAGS = ("wstree", "wspart", "wsindex")
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Node)
_header_decoder = msgspec.msgpack.Decoder(_Header)
_DIGEST_BYTES = 32
_NUL = "\x00"


def encode_node(node: Node) -> bytes:
    """Returns the one canonical byte string of a tree object (what is stored and hashed)."""
    return _encoder.encode(node)


def node_digest(data: bytes) -> Digest:
    """Returns the digest of a tree object's bytes (BLAKE3 of exactly those bytes)."""
    return hash_bytes(data)


def decode_node(data: bytes, source: str) -> Node:
    """Parses a tree object, refusing anything that is not exactly what worksnap writes.

    Args:
        data: the object's bytes (already checked against its digest by the reader).
        source: names the object in errors (its digest and where it was met).

    Raises:
        ManifestError: not canonical, of an unknown or newer format, or hostile.
    """
    if len(data) > MAX_OBJECT:
        raise ManifestError(source, f"tree object of {len(data)} bytes is over {MAX_OBJECT}")
    try:
        header = _header_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        # RecursionError: arrays nested 100,000 deep (msgspec recurses to skip them).
        raise ManifestError(source, f"not a worksnap tree object ({exc})") from None
    if header.tag not in _TAGS:
        raise ManifestError(source, f"not a worksnap tree object (tag {header.tag[:20]!r})")
    if header.version > FORMAT:
        raise ManifestError.too_new(source, "tree format", header.version, FORMAT)
    if header.version != FORMAT:
        raise ManifestError(source, f"unsupported tree format {header.version}")
    try:
        node = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ManifestError(source, f"not a valid tree object ({exc})") from None
    if encode_node(node) != data:
        raise ManifestError(source, "tree object not in the canonical form worksnap writes")
    check_node(node, source)
    return node


def check_node(node: Node, source: str) -> None:
    """Refuses a tree object whose values could make a walk or a restore wrong or unsafe.

    Checks the object alone; how objects fit together (a part's names within the range
    its index gives, levels going down by one) is checked by the walks.

    Raises:
        ManifestError: the first problem found.
    """
    if isinstance(node, Index):
        if not 1 <= node.level <= MAX_LEVELS:
            raise ManifestError(source, f"index level {node.level} outside 1..{MAX_LEVELS}")
        if not node.spans:
            raise ManifestError(source, "empty index")
        for span in node.spans:
            _check_name(span.first, source, excluded=True)
            if len(span.node) != _DIGEST_BYTES:
                raise ManifestError(source, f"span {span.first!r} has a bad digest")
        if any(a.first >= b.first for a, b in pairwise(node.spans)):
            raise ManifestError(source, "index spans out of order or overlapping")
        return
    if isinstance(node, Part) and not node.children:
        raise ManifestError(source, "empty part")
    check_children(node.children, source)


def check_children(children: Sequence[Child], source: str) -> None:
    """Refuses children that are unsorted, repeated, badly named or hold bad values.

    Raises:
        ManifestError: the first problem found.
    """
    names = [c.name for c in children]
    # Mostly in C: the 47k-file tree's objects are checked in 14 ms (30 ms child by child).
    if not (_plain_names(names) and _plain_values(children)):
        for child in children:  # the slow way, to say which child and why
            _check_child(child, source)
    if not all(map(operator.lt, names, islice(names, 1, None))):
        first = next(a for a, b in pairwise(names) if a >= b)
        raise ManifestError(source, f"children not sorted by name, or repeated, at {first!r}")


def _plain_names(names: list[str]) -> bool:
    """True when no name can be bad: a quick look at all of them at once, mostly in C.

    False sends the directory to the child-by-child check, which says what is wrong.
    """
    joined = "/".join(names)
    if (
        _NUL in joined  # escapes: checked one by one
        or joined.count("/") != len(names) - 1
        or "" in names
        or "." in names
        or ".." in names
        or (os.sep != "/" and "\\" in joined)
    ):
        return False
    if joined.isascii():
        # Every ASCII spelling of .git holds "git" in some case.
        return "git" not in joined.lower() or not any(is_git_name(n) for n in names)
    if not _encodable(joined):
        return False
    return not any(is_git_name(n) for n in names)  # HFS+ ignorable code points hide one


def _plain_values(children: Sequence[Child]) -> bool:
    """True when every mode, size and digest is in range (what `_check_child` asks)."""
    for c in children:
        if type(c) is File:
            # `mode >> 9` is 0 exactly for 0..0o777 (and -1 for a negative mode).
            if c.mode >> 9 or c.size < 0 or len(c.digest) != _DIGEST_BYTES:
                return False
        elif type(c) is Dir:
            if len(c.tree) != _DIGEST_BYTES:
                return False
        elif type(c) is Symlink:
            target = c.target
            if c.mode >> 9 or not target or not target.isascii() or _NUL in target:
                return False
        elif type(c) is Large and c.size is not None and c.size < 0:
            return False
    return True


def _check_child(child: Child, source: str) -> None:
    name = child.name
    _check_name(name, source, excluded=type(child) is Excluded)
    if type(child) is File:
        if not 0 <= child.mode <= 0o777:
            raise ManifestError(source, f"{name!r} has mode {child.mode:o} outside 0o777")
        if child.size < 0:
            raise ManifestError(source, f"{name!r} has a negative size")
        if len(child.digest) != _DIGEST_BYTES:
            raise ManifestError(source, f"{name!r} has a bad digest")
    elif type(child) is Symlink:
        if not 0 <= child.mode <= 0o777:
            raise ManifestError(source, f"{name!r} has mode {child.mode:o} outside 0o777")
        if not child.target or not is_canonical(child.target) or not _encodable(child.target):
            raise ManifestError(source, f"symlink {name!r} has a bad target")
    elif type(child) is Dir:
        if len(child.tree) != _DIGEST_BYTES:
            raise ManifestError(source, f"directory {name!r} has a bad tree digest")
    elif type(child) is Large and child.size is not None and child.size < 0:
        raise ManifestError(source, f"{name!r} has a negative size")


def _check_name(name: str, source: str, *, excluded: bool) -> None:
    if name in ("", ".", "..") or "/" in name or (os.sep != "/" and "\\" in name):
        raise ManifestError(source, f"bad name {name!r}")
    if (_NUL in name and not is_canonical(name)) or not _encodable(name):
        raise ManifestError(source, f"name {name!r} has a NUL byte or a non-canonical escape")
    if not excluded and is_git_name(name):
        # git never tracks any spelling of .git; worksnap never writes nor restores one.
        raise ManifestError(source, f"{name!r} is a .git name (only an excluded child may be)")


def _encodable(text: str) -> bool:
    """True when `text` holds no lone surrogate (wire form escapes such bytes)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- splitting ----------------------------------------------------------------


def _boundary(name: str, level: int, mask: int = BOUNDARY_MASK) -> bool:
    """True when a node may end after `name`: a hash of the name hits the mask.

    BLAKE3 of the name's UTF-8 bytes (behind one byte `level` above level 0, so each
    index level cuts independently); bits clear in the first byte. Not crc32: it is
    linear, and `icon-00001.svg`, `icon-00002.svg`, ... hit it in long periodic runs
    (gaps of 600 names where 16 are expected). 2.5 us a name, only in split directories;
    remembered, so a split directory encoded again pays it only for its new names (a
    name and a flag each: an LRU cache held seven objects a name, 2.7 MB of the daemon's
    memory for the reference tree's one split directory).
    """
    memo = _BOUNDARIES.get((level, mask))
    if memo is None:
        memo = _BOUNDARIES[(level, mask)] = {}
    hit = memo.get(name)
    if hit is None:
        if len(memo) >= _BOUNDARIES_KEPT:
            memo.clear()
        data = name.encode("utf-8")
        if level:
            data = bytes((level,)) + data
        hit = memo[name] = blake3(data).digest(1)[0] & mask == 0
    return hit


_BOUNDARIES: dict[tuple[int, int], dict[str, bool]] = {}
_BOUNDARIES_KEPT = 1 << 15  # names a (level, mask) remembers


def cut(names: Sequence[str], sizes: Sequence[int], level: int, split: Split = SPLIT) -> list[int]:
    """Returns where a run of children (level 0) or spans (level n) is cut into nodes.

    Content-defined: a node ends after a name whose hash hits the mask once it holds two
    items, or before the item that would take it past `split.part_max`. No minimum size: an
    added or removed item moves the cuts of its own node, or of the next one when that
    node's first item hits the mask, and every later cut stays.

    Returns:
        The end index of each node, the last one `len(names)`.
    """
    ends: list[int] = []
    held = count = 0
    for i, size in enumerate(sizes):
        if count and held + size > split.part_max:
            ends.append(i)
            held = count = 0
        held += size
        count += 1
        if count >= 2 and _boundary(names[i], level, split.mask):
            ends.append(i + 1)
            held = count = 0
    if count:
        ends.append(len(sizes))
    return ends


class Encoded(msgspec.Struct, frozen=True):
    """A directory's tree objects.

    `digest` is what its parent's `Dir` holds; `objects` are every object, the top one last,
    and `nodes` each of them as `decode_node` gives it back (in the same order).
    """

    digest: Digest
    objects: list[tuple[Digest, bytes]]
    nodes: list[Node]


def encode_directory(
    children: list[Child], source: str = "new tree", split: Split = SPLIT
) -> Encoded:
    """Encodes one directory, split into parts under an index when it is large.

    Args:
        children: every child, sorted by name (checked: a bad one is refused).
        source: names the directory in errors.
        split: where to cut it when it is large.

    Raises:
        ManifestError: a child is unsorted, repeated, badly named or holds a bad value.
    """
    check_children(children, source)
    whole = Tree(version=FORMAT, children=children)
    data = encode_node(whole)
    digest = node_digest(data)
    if len(data) <= split.over or len(children) < 2:
        return Encoded(digest, [(digest, data)], [whole])
    names = [c.name for c in children]
    ends = cut(names, [len(_encoder.encode(c)) for c in children], 0, split)
    if len(ends) == 1:
        return Encoded(digest, [(digest, data)], [whole])  # no place to cut: one part is all
    objects: list[tuple[Digest, bytes]] = []
    nodes: list[Node] = []
    spans = _spans(
        objects, nodes, [Part(version=FORMAT, children=c) for c in _runs(children, ends)]
    )
    level = 1
    while True:
        # Spans are cut like children, with the hash salted by level (independent cuts).
        sizes = [len(_encoder.encode(s)) for s in spans]
        ends = cut([s.first for s in spans], sizes, level, split)
        if len(ends) == 1:
            index = Index(version=FORMAT, level=level, spans=spans)
            top = encode_node(index)
            objects.append((node_digest(top), top))
            nodes.append(index)
            return Encoded(objects[-1][0], objects, nodes)
        if level == MAX_LEVELS:
            raise ManifestError(source, f"needs more than {MAX_LEVELS} index levels")
        runs = _runs(spans, ends)
        spans = _spans(objects, nodes, [Index(version=FORMAT, level=level, spans=r) for r in runs])
        level += 1


def _runs(items: list[_T], ends: list[int]) -> Iterable[list[_T]]:
    start = 0
    for end in ends:
        yield items[start:end]
        start = end


def _spans(
    objects: list[tuple[Digest, bytes]], made: list[Node], nodes: list[Part] | list[Index]
) -> list[Span]:
    """Encodes `nodes` into `objects` (and adds them to `made`); returns the spans listing them."""
    spans = []
    for node in nodes:
        data = encode_node(node)
        digest = node_digest(data)
        objects.append((digest, data))
        made.append(node)
        first = node.children[0].name if isinstance(node, Part) else node.spans[0].first
        spans.append(Span(first=first, node=bytes.fromhex(digest)))
    return spans


# -- building a snapshot's trees ------------------------------------------------


class Built(msgspec.Struct, frozen=True):
    """A directory as built: its digest, and the files (and symlinks) and bytes below it."""

    digest: Digest
    files: int
    bytes: int


class Builder:
    """Builds a snapshot's trees bottom-up, one directory at a time, writing each object.

    A capture hands it each directory after all of its subdirectories (reverse
    pre-order does), or hands over an unchanged directory's earlier `Built` with
    `reuse`, which encodes nothing. Only the directories whose parent is not built yet
    are held, so memory follows the width of the walk, not the size of the tree.

    Args:
        write: stores one object (`write(digest, data)`; one already stored is skipped).
        split: where a large directory is cut.
    """

    def __init__(self, write: Write, split: Split = SPLIT) -> None:
        self._write = write
        self._split = split
        self._pending: dict[str, Built] = {}

    def directory(self, rel: str, leaves: Iterable[Child], subdirs: Iterable[str]) -> Built:
        """Builds directory `rel` ("" for the root) and writes its objects.

        Args:
            rel: its wire path relative to the root.
            leaves: its children other than directories, in any order.
            subdirs: the names of its captured subdirectories, each built or reused already.

        Raises:
            ManifestError: a child is bad or repeated (see `check_children`).
            KeyError: a subdirectory was not built first.
        """
        children: list[Child] = list(leaves)
        if any(type(c) is Dir for c in children):
            raise TypeError("a subdirectory is named in `subdirs`, not given as a leaf")
        files = sum(1 for c in children if type(c) in (File, Symlink))
        size = sum(c.size for c in children if type(c) is File)
        prefix = f"{rel}/" if rel else ""
        for name in subdirs:
            sub = self._pending.pop(prefix + name)
            children.append(Dir(name=name, tree=bytes.fromhex(sub.digest)))
            files += sub.files
            size += sub.bytes
        children.sort(key=_name)
        encoded = encode_directory(children, f"new tree of {rel or '.'!r}", self._split)
        for digest, data in encoded.objects:
            self._write(digest, data)
        built = Built(encoded.digest, files, size)
        self._pending[rel] = built
        return built

    def reuse(self, rel: str, built: Built) -> None:
        """Takes directory `rel` as it was built before (unchanged since): nothing is encoded."""
        self._pending[rel] = built

    def root(self) -> Built:
        """Returns the root once it is built (every other directory has been taken in)."""
        root = self._pending.pop("")
        if self._pending:
            raise KeyError(f"built but not under the root: {sorted(self._pending)[:3]}")
        return root


def _name(child: Child) -> str:
    return child.name
