"""Tree building for captures: each directory encoded again only when its children changed.

A long-lived capture (the daemon's, an agent runtime's `Workspace`) builds the trees of
every snapshot. Most directories are as they were: `TreeMemo` remembers, per directory,
its children as last built and the result, and takes that result again (nothing
encoded, checked, hashed or written) when the children are equal and, for a capture
that stores, the directory's top object is still in the store.

`TreeMemo` is a second implementation of `flatbuild.from_flat` (the slow, obvious one,
which the migration uses): same placement of every path, same trees, same left-out paths no
tree holds. `tests/test_treebuild.py` and the watched differential test hold them equal.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterable, Mapping

import msgspec
from blake3 import blake3

from worksnap.caches import TREE_CACHE_VERSION, Caches, TreeRecord, TreeTable
from worksnap.errors import WorksnapError
from worksnap.flatbuild import Places, child_of, same_file
from worksnap.manifest import Entry, Manifest
from worksnap.paths import Digest, with_parents
from worksnap.scanparts import DirScan
from worksnap.store import ObjectStore
from worksnap.tree import (
    FORMAT,
    Built,
    Child,
    Dir,
    File,
    Index,
    Node,
    Read,
    Symlink,
    Write,
    decode_node,
    encode_directory,
)
from worksnap.treewalk import Flat, Loose, Nodes, children

_Key = tuple[tuple[Child, ...], tuple[tuple[str, str], ...]]
_Memo = tuple[_Key | None, Built, tuple[str, ...], bytes]
"""(children, the directory as built, its objects, the key's digest); children None when
the memo keeps only the digest (`TreeMemo`'s `children`)."""

_key_encoder = msgspec.msgpack.Encoder()
_KEY_PREFIX = b"worksnap tree key %d %d\0" % (FORMAT, TREE_CACHE_VERSION)


def key_digest(key: _Key) -> bytes:
    """The tree cache's key for a directory's children: BLAKE3 of their msgpack encoding.

    Every field of every child is encoded (tag, name, mode, size, digest or target, and
    each subdirectory's tree digest), under the tree format and cache version: two
    directories with one digest have the same tree.
    """
    return blake3(_KEY_PREFIX + _key_encoder.encode(key)).digest()


class TreeMemo:
    """The trees of the last capture, per directory, to build the next one from.

    Attributes:
        encoded: directories encoded by the last `build` (the others were taken again).
        cached: of those taken again, how many came from the tree cache (`known`), not
            from this memo.
        new: the tree cache records of the directories the last `build` encoded.
        unseen: directories whose children the last `build` took from the memo unseen
            (`clean`).

    Args:
        children: keep each directory's children, which a watched capture takes whole
            for a clean directory and `previous` answers from. Without them a directory
            is taken again when its children's digest (`key_digest`) is equal, and the
            memo costs a few objects a directory instead of one per file (a cold capture
            of 200k files without a watcher: 38 MB less at its peak).
    """

    def __init__(self, *, children: bool = True) -> None:
        self._children = children
        self._dirs: dict[str, _Memo] = {}
        self._files: dict[str, dict[str, str]] = {}  # `previous`'s lookups, per directory
        self._loose = False  # the last build left paths out of every tree
        self._stored = False  # every object of the last build is stored (none swept since)
        self.encoded = 0
        self.cached = self.unseen = 0
        self.new: TreeTable = {}
        self.bases: dict[str, str] = {}
        """Each object the last `build` wrote: the object its directory had before (a
        store's compression hint, `ObjectStore.add_tree`'s `base`)."""

    def forget(self) -> None:
        """Drops everything remembered (the next build encodes every directory)."""
        self._dirs = {}
        self._stored = False
        self._files = {}

    def holds(self, dirs: Iterable[str], clean: Container[str]) -> bool:
        """True when a `build` with `clean` takes the children of each of `dirs` from the memo."""
        if self._loose or not self._children:
            return False
        known = self._dirs
        return all(d in known and d in clean for d in dirs)

    def previous(self, rel: str, read: Read | None = None) -> str | None:
        """The digest file `rel` had in the last build (a base for its new version), or None.

        Without the children kept, the directory's tree is read through `read` (None, or
        a tree that cannot be read: no answer; it is only a compression hint).
        """
        parent, _, name = rel.rpartition("/")
        names = self._files.get(parent)
        if names is None:
            if (hit := self._dirs.get(parent)) is None:
                return None
            if hit[0] is not None:
                # Kept in name order: the one asked for, not a map of the directory.
                kept = hit[0][0]
                at = bisect.bisect_left(kept, name, key=_name)
                child = kept[at] if at < len(kept) else None
                if isinstance(child, File) and child.name == name:
                    return child.digest.hex()
                return None
            if read is None:
                return None
            try:
                files = [c for c in children(hit[1].digest, read) if type(c) is File]
            except WorksnapError:
                files = []  # not stored (a preview's), or damaged: no hint from it
            names = self._files[parent] = {c.name: c.digest.hex() for c in files}
        return names.get(name)

    def root_bytes(self) -> int:
        """The bytes of the files of the last build (as `Manifest.entries` add up)."""
        return self._dirs[""][1].bytes

    @property
    def size(self) -> int:
        """How many directories the last `build` had."""
        return len(self._dirs)

    def digests(self) -> Callable[[str], str | None]:
        """The digest each directory's tree had in the last `build` (not the next one)."""
        memo = self._dirs  # replaced, never changed, by the next build

        def digest(d: str) -> str | None:
            hit = memo.get(d)
            return None if hit is None else hit[1].digest

        return digest

    def records(self) -> TreeTable:
        """The tree cache records of every directory of the last `build`."""
        return {memo[3]: _record(memo) for memo in self._dirs.values()}

    def build(
        self,
        flat: Flat,
        write: Write,
        *,
        stored: Container[str] | None,
        known: Mapping[bytes, TreeRecord] | None = None,
        clean: Container[str] = frozenset(),
        older: Callable[[str], tuple[str, ...]] | None = None,
        made: Callable[[Digest, Node], None] | None = None,
    ) -> tuple[Digest, Loose]:
        """Builds the trees of a capture's flat view; returns `flatbuild.from_flat`'s answer.

        Args:
            flat: what the capture found (entries, dirs, left-out paths; all sorted).
            write: stores a new object (`add_tree`), or discards it.
            stored: the digests the store holds (a capture that stores: a directory is
                taken again only if its top object is there), or None (nothing is stored).
            known: the tree cache (what another process built): a directory this memo
                does not hold with the same children is taken from it, on the same terms.
            clean: directories whose files, symlinks and left-out children the caller
                vouches are those of the last `build` (a watched capture's directories
                without events): their paths in `flat` are not looked at again, their
                children are taken from the memo (only their subdirectories' trees are
                compared). Ignored where the memo does not hold the directory, or when
                the last build left paths out of every tree.
            older: where the memo does not hold a directory, the objects it had in an
                earlier build (compression bases only: `bases`).
            made: told of each object encoded, decoded (`Nodes.add`).

        Raises:
            ManifestError: a path's parent is not a captured directory, or a path repeats.
        """
        leaves: dict[str, list[Child]] = {"": [], **{d: [] for d in flat.dirs}}
        subdirs: dict[str, list[str]] = {"": [], **{d: [] for d in flat.dirs}}
        places = Places(flat, leaves)
        last = self._dirs
        # What stands for a clean directory's children (none of theirs is placed).
        reused: dict[str, tuple[Child, ...]] = (
            {d: hit[0][0] for d, hit in last.items() if d in clean and hit[0] is not None}
            if not self._loose
            else {}
        )
        self.unseen = len(reused)
        for d in flat.dirs:
            parent, name = places.directory(d)
            subdirs[parent].append(name)
        olds: dict[str, dict[str, Child]] = {}  # a directory's children as last built
        for entry in flat.entries:
            parent, _, name = entry.path.rpartition("/")
            if parent in reused:
                continue
            places.entry(entry.path)
            old = olds.get(parent)
            if old is None:
                hit = last.get(parent)
                kids = hit[0][0] if hit is not None and hit[0] is not None else ()
                old = olds[parent] = {c.name: c for c in kids}
            was = old.get(name)
            # The same child as last built: that object (a directory's unchanged files are
            # not held twice while its new tree is built, nor after; a file's is known
            # without making the new one).
            if was is None or not same_file(was, entry):
                child = child_of(name, entry)
                was = was if was == child else child
            leaves[parent].append(was)
        loose = places.left_outs(flat, skip=reused)
        memo: dict[str, _Memo] = {}
        built: dict[str, Built] = {}
        self.encoded = self.cached = 0
        self.new = {}
        self.bases = {}
        # Reverse path order reaches every directory after all of its subdirectories.
        order = [*sorted(flat.dirs, reverse=True), ""]
        if stored is None or self._stored:
            # A clean directory with clean subtrees is as the memo has it (every object of
            # the last build is stored): only the others, and those above them, are visited.
            gone = last.keys() - leaves.keys()
            todo = with_parents({d for d in order if d not in reused} | gone)
            memo = {d: last[d] for d in order if d not in todo}
            order = [d for d in order if d in todo]
        for d in order:
            prefix = f"{d}/" if d else ""
            subs = sorted(
                (name, built.pop(sub) if (sub := prefix + name) in built else memo[sub][1])
                for name in subdirs[d]
            )
            own = reused.get(d)
            key: _Key = (
                own if own is not None else tuple(sorted(leaves.pop(d), key=_name)),
                tuple((name, sub.digest) for name, sub in subs),
            )
            hit = last.get(d)
            digest_of_key = key_digest(key) if hit is None or hit[0] is None else None
            same = hit is not None and (
                hit[3] == digest_of_key if hit[0] is None else hit[0] == key
            )
            # Every object of the directory (a split one's parts may be older than its
            # index, in another pack): each must still be there to be named again.
            if hit is not None and same and (stored is None or _all_in(hit[2], stored)):
                memo[d] = hit
                built[d] = hit[1]
                continue
            digest_of_key = digest_of_key or key_digest(key)
            kept = key if self._children else None
            record = known.get(digest_of_key) if known is not None else None
            if (
                record is not None
                and record[0] in record[3]  # its top object is one of those checked
                and (stored is None or _all_in(record[3], stored))
            ):
                memo[d] = (kept, Built(Digest(record[0]), record[1], record[2]), record[3],
                           digest_of_key)  # fmt: skip
                built[d] = memo[d][1]
                self.cached += 1
                continue
            children = list(key[0])
            children.extend(Dir(name=name, tree=bytes.fromhex(sub.digest)) for name, sub in subs)
            children.sort(key=_name)
            encoded = encode_directory(children, f"new tree of {d or '.'!r}")
            before = hit[2] if hit is not None else older(d) if older is not None else ()
            for i, ((digest, data), node) in enumerate(
                zip(encoded.objects, encoded.nodes, strict=True)
            ):
                if before:  # the part at the same place, or the old top for the new one
                    self.bases[digest] = before[
                        -1 if i == len(encoded.objects) - 1 else min(i, len(before) - 1)
                    ]
                write(digest, data)
                if made is not None:
                    made(digest, node)
            files = sum(1 for c in key[0] if type(c) in (File, Symlink))
            files += sum(sub.files for _, sub in subs)
            size = sum(c.size for c in key[0] if type(c) is File)
            size += sum(sub.bytes for _, sub in subs)
            objects = tuple(digest for digest, _ in encoded.objects)
            memo[d] = (kept, Built(encoded.digest, files, size), objects, digest_of_key)
            built[d] = memo[d][1]
            self.new[digest_of_key] = _record(memo[d])
            self.encoded += 1
        self._dirs, self._files = memo, {}
        self._loose = bool(loose.ignored or loose.large or loose.excluded)
        self._stored = stored is not None
        return built[""].digest, loose


def unchanged_dirs(
    memory: Mapping[str, DirScan], remember: Mapping[str, DirScan] | None, dirty: set[str]
) -> set[str]:
    """The directories a watched scan took whole from memory: `TreeMemo.build`'s `clean`.

    Less those in `dirty`, where a file's entry was made again (not the last capture's).

    Args:
        memory: what the last committed scan remembered, per directory.
        remember: this scan's (None: not watched, nothing is clean).
        dirty: directories with a file whose entry was not the last capture's.
    """
    if remember is None:
        return set()
    return {d for d, part in memory.items() if remember.get(d) is part} - dirty


def _record(memo: _Memo) -> TreeRecord:
    built = memo[1]
    return (built.digest, built.files, built.bytes, memo[2])


def _all_in(digests: tuple[str, ...], stored: Container[str]) -> bool:
    return all(digest in stored for digest in digests)


def _name(child: Child) -> str:
    return child.name


class CaptureTrees:
    """A capture engine's trees: each capture's built from the last one's (`TreeMemo`).

    Remembers what the last capture that stored its trees left out of them, so that
    saving that snapshot does not build them again (`stored`). With `nodes`, the nodes it
    encodes are kept there for the comparisons that follow (`Nodes.add`): only when the
    memo keeps `children`, which the nodes then share (else a cold capture would hold
    a node cache's worth of children more at its peak).
    """

    def __init__(
        self,
        store: ObjectStore,
        caches: Caches | None = None,
        *,
        children: bool = True,
        nodes: Nodes | None = None,
    ) -> None:
        self._store = store
        self._caches = caches
        self.memo = TreeMemo(children=children)
        self._made = nodes.add if nodes is not None and children else None
        self._built: tuple[str, Loose, int] | None = None

    def build(
        self, flat: Flat, store_objects: bool, swept: bool, *,
        clean: Container[str] = frozenset(),
        changed: tuple[list[Entry], Iterable[str]] | None = None,
    ) -> Digest:  # fmt: skip
        """Builds a capture's trees (stored when `store_objects`); returns the root's digest.

        `swept`: a gc swept objects since the last capture (nothing remembered is trusted).
        `clean`: directories whose children are as at the last build (`TreeMemo.build`).
        `changed`: every entry of `flat` outside some `clean` directories, and those
        directories: the entries looked at when the memo holds each of them (else all).
        A process's first build takes unchanged directories from the tree cache (`caches`,
        read once); later ones from the memo. What was encoded goes to the tree cache.
        """
        if swept:
            self.memo.forget()
        if changed is not None and self.memo.holds(changed[1], clean):
            # The memo takes those directories' children whole: their entries go unread.
            flat = Flat(changed[0], flat.dirs, flat.ignored, flat.large, flat.excluded)
        write = self._add_tree if store_objects else _discard
        stored = self._store.indexed() if store_objects else None
        caches = self._caches
        known = caches.tree_table() if caches is not None else None
        older = None
        if known is not None and store_objects and not self.memo.size:
            # A new process: compress the directories it encodes against their trees in
            # the last build of any process (the tree cache's LAST_ROOT), read on demand.
            last = known.get(LAST_ROOT)
            if last is not None and stored is not None and last[0] in stored:
                older = _OlderTrees(Digest(last[0]), self._store.read, stored)
        memo = self.memo
        root, loose = memo.build(
            flat, write, stored=stored, known=known, clean=clean, older=older, made=self._made
        )
        if caches is not None:
            latest = {LAST_ROOT: (root, 0, 0, ())} if store_objects else {}
            new = {**memo.new, **latest} if memo.new else memo.new
            caches.add_trees(new, lambda: {**memo.records(), **latest}, memo.size)
        if store_objects:
            self._built = (root, loose, memo.root_bytes())
        return root

    def took(self, root: str, loose: Loose, total: int) -> None:
        """Notes a capture's trees as stored, without a build (`lastcapture.Keeper`)."""
        self._built = (root, loose, total)

    def previous(self, rel: str) -> str | None:
        """The digest file `rel` had in the last capture's trees (see `TreeMemo.previous`)."""
        return self.memo.previous(rel, self._store.read)

    def _add_tree(self, digest: Digest, data: bytes) -> None:
        self._store.add_tree(digest, data, base=self.memo.bases.get(digest))

    def stored(self, manifest: Manifest) -> tuple[Loose, int] | None:
        """What a captured manifest's stored trees leave out, and its files' bytes.

        None: not known to be stored. Given to `Catalog.save`, it spares building the
        trees again, and adding up every file's size.
        """
        built = self._built
        return built[1:] if built is not None and built[0] == manifest.tree else None


LAST_ROOT = b""
"""The tree cache's record of the last stored build's root tree (its digest first), under
a key no directory has (theirs are 32 bytes): not a directory, never taken as one."""


class _OlderTrees:
    """The objects each directory had in an earlier build, found from its root tree.

    Only compression bases: anything that cannot be read (swept, damaged, not a packed
    object, so never a large one read whole) gives none.
    """

    def __init__(self, root: Digest, read: Read, packed: Container[str]) -> None:
        self._read = read
        self._packed = packed
        self._tops: dict[str, str | None] = {"": root}
        self._subdirs: dict[str, dict[str, str]] = {}

    def __call__(self, d: str) -> tuple[str, ...]:
        """The directory's objects in `encode_directory`'s order, or none.

        A split one's parts come first, then each level of its index, then its top: each
        new part is compressed against the old part at its place, as the memo does.
        """
        top = self._top(d)
        if top is None:
            return ()
        layers = [[top]]
        try:
            while True:
                nodes = [decode_node(self._read(Digest(n)), f"tree {n}") for n in layers[-1]]
                if not all(isinstance(node, Index) for node in nodes):
                    break
                layers.append([s.node.hex() for n in nodes for s in n.spans])  # type: ignore[union-attr]
        except WorksnapError:
            return (top,)
        return tuple(digest for layer in reversed(layers) for digest in layer)

    def _top(self, d: str) -> str | None:
        # Down from the nearest directory known, without recursion: a tree 1,000 deep
        # raised RecursionError here at its second snapshot (a review; the walks allow
        # 2,048, `treewalk.MAX_DEPTH`).
        below = []
        while d not in self._tops:
            below.append(d)
            d = d.rpartition("/")[0]
        for path in reversed(below):
            parent, _, name = path.rpartition("/")
            above, found = self._tops[parent], None
            if above is not None and above in self._packed:
                subdirs = self._subdirs.get(above)
                if subdirs is None:
                    try:
                        kids = list(children(Digest(above), self._read))
                    except WorksnapError:
                        kids = []
                    subdirs = {c.name: c.tree.hex() for c in kids if type(c) is Dir}
                    self._subdirs[above] = subdirs
                found = subdirs.get(name)
            self._tops[path] = found
        return self._tops[below[0]] if below else self._tops[d]


def _discard(digest: Digest, data: bytes) -> None:
    """A tree object's `write` when nothing is stored (a capture that only compares)."""
