"""Properties of format 2 trees: each fast walk equals its slow, obviously correct counterpart.

- flat -> trees -> flat is the identity (`from_flat`, `flatten`);
- `diff_trees` yields exactly the paths whose content differs, in full-path order,
  as a comparison of every path of the two trees does (a brute-force diff);
- `count_changes` equals format 1's `catalog.count_changes` of the two flat views;
- `reachable` equals a plain recursive walk of every object;
- `undo_target` over root trees decides as format 1's entries-and-dirs digest did;
- the quick check of a directory's names and values never passes what the
  child-by-child check refuses.

Hypothesis (derandomized in CI) shrinks a failure to a small tree; the seeded
sessions (`test_seeded_session`) run long: WORKSNAP_TREE_SESSIONS sessions of
WORKSNAP_TREE_STEPS snapshots each, with directories large enough to be split in
two index levels. Rerun one with `-k "test_seeded_session[SEED]"`. Directories are
split at a small scale, so a few hundred files reach parts and index
levels (`SMALL_SPLIT`); the walks never depend on where a writer cut.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SMALL_SPLIT
from tests.trees import summary
from worksnap.catalog import count_changes as flat_count_changes
from worksnap.diff import compare, compare_trees
from worksnap.differences import LastDifferences, flat_differences, tree_differences
from worksnap.errors import ManifestError, ObjectError
from worksnap.flatbuild import from_flat
from worksnap.hash import hash_bytes
from worksnap.history import SessionState, undo_target
from worksnap.manifest import VERSION, Entry, Manifest, tree_digest
from worksnap.paths import Digest
from worksnap.plan import plan_restore
from worksnap.tree import (
    Builder,
    Child,
    Dir,
    Excluded,
    File,
    Ignored,
    Index,
    Large,
    Symlink,
    _check_child,
    _plain_names,
    _plain_values,
    decode_node,
)
from worksnap.treewalk import (
    Flat,
    Nodes,
    count_changes,
    diff_trees,
    flatten,
    reachable,
)

pytestmark = pytest.mark.slow  # many examples, and long seeded sessions


settings.register_profile(
    "ci", derandomize=True, max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=1500, deadline=None)
settings.load_profile(
    os.environ.get("WORKSNAP_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "dev")
)

SESSIONS = int(os.environ.get("WORKSNAP_TREE_SESSIONS", "8"))
STEPS = int(os.environ.get("WORKSNAP_TREE_STEPS", "20"))

# Names whose name order and full-path order disagree (below "/": " ", "!", "-", "."),
# a wire escape, non-ASCII, and case.
NAMES = ["a", "a b", "a!", "a-b", "a.b", "a0", "b", "B", "\x00e9", "\u00e9", "z"]

Spec = tuple[object, ...]
"""What is at a path: ("file", mode, text), ("link", target), ("dir",), ("ignored",),
("large", size or None), ("excluded",)."""

Model = dict[str, Spec]


class Objects(dict[str, bytes]):
    def write(self, digest: Digest, data: bytes) -> None:
        self.setdefault(digest, data)

    def read(self, digest: Digest) -> bytes:
        if digest not in self:
            raise ObjectError(digest, "missing")  # as a store says it
        return self[digest]


# -- building both forms from a model -------------------------------------------------


@functools.cache
def _digest(text: str) -> bytes:
    return bytes.fromhex(hash_bytes(text.encode()))


def child_of(name: str, spec: Spec) -> Child:
    kind = spec[0]
    if kind == "file":
        text = str(spec[2])
        return File(name=name, mode=int(spec[1]),  # type: ignore[call-overload]
                    size=len(text.encode()), digest=_digest(text))  # fmt: skip
    if kind == "link":
        return Symlink(name=name, mode=0o777, target=str(spec[1]))
    if kind == "ignored":
        return Ignored(name=name)
    if kind == "large":
        return Large(name=name, size=spec[1])  # type: ignore[arg-type]
    return Excluded(name=name)


def build(model: Model, objects: Objects) -> Digest:
    """Builds a model's trees with the capture's builder, bottom-up."""
    leaves: dict[str, list[Child]] = {"": []}
    subdirs: dict[str, list[str]] = {"": []}
    for path, spec in model.items():
        if spec[0] == "dir":
            leaves.setdefault(path, [])
            subdirs.setdefault(path, [])
    for path, spec in model.items():
        parent, _, name = path.rpartition("/")
        if spec[0] == "dir":
            subdirs[parent].append(name)
        else:
            leaves[parent].append(child_of(name, spec))
    builder = Builder(objects.write, SMALL_SPLIT)
    for d in sorted(subdirs, reverse=True):
        builder.directory(d, leaves[d], subdirs[d])
    return builder.root().digest


def manifest_of(model: Model) -> Manifest:
    """The format 1 manifest of a model (a large file's size is not in format 1)."""
    entries = []
    for path in sorted(model):
        spec = model[path]
        if spec[0] in ("file", "link"):
            child = child_of(path, spec)
            entries.append(
                Entry(path=path, type="file", mode=child.mode,  # type: ignore[union-attr]
                      hash=child.digest.hex(), size=child.size)  # type: ignore[union-attr]
                if isinstance(child, File)
                else Entry(path=path, type="symlink", mode=0o777, target=str(spec[1]))
            )  # fmt: skip
    dirs = sorted(p for p, s in model.items() if s[0] == "dir")

    def of(kind: str) -> list[str]:
        return sorted(p for p, s in model.items() if s[0] == kind)

    return Manifest(
        version=VERSION, id="000000000000", root="/r", kind="step", step=None,
        time="2026-01-01T00:00:00.000000Z", max_file_bytes=1 << 21,
        tree=tree_digest(entries, dirs), entries=entries, dirs=dirs, ignored=of("ignored"),
        large=of("large"), excluded=of("excluded"),
    )  # fmt: skip


# -- the slow, obviously correct versions ---------------------------------------------------


def comparable(child: Child | Spec | None) -> object:
    """A child or a spec, as what a diff compares (a directory's contents are not it)."""
    if child is None:
        return None
    if isinstance(child, tuple):
        return None if child[0] == "dir" else comparable(child_of("-", child))
    if isinstance(child, Dir):
        return None
    return (type(child).__name__, *(msgspec_fields(child)[1:]))


def msgspec_fields(child: Child) -> tuple[object, ...]:
    return tuple(getattr(child, f) for f in child.__struct_fields__)


def brute_diff(a: Model, b: Model) -> list[tuple[str, object, object]]:
    """Every path on either side whose content differs, sorted by full path."""
    out = []
    for path in sorted(a.keys() | b.keys()):
        x, y = kind_of(a.get(path)), kind_of(b.get(path))
        if x != y and not (x is not None and y is not None and x[0] == y[0] == "dir"):
            out.append((path, x, y))
    return out


@functools.cache
def _kind_of(spec: Spec) -> tuple[object, object]:
    return (spec[0], comparable(spec))


def kind_of(spec: Spec | None) -> tuple[object, object] | None:
    return None if spec is None else _kind_of(spec)


def diff_as_specs(a: Digest, b: Digest, objects: Objects) -> list[tuple[str, object, object]]:
    def spec_kind(child: Child | None) -> object:
        if child is None:
            return None
        kind = {File: "file", Symlink: "link", Dir: "dir", Ignored: "ignored", Large: "large",
                Excluded: "excluded"}[type(child)]  # fmt: skip
        return (kind, comparable(child))

    return [(d.path, spec_kind(d.old), spec_kind(d.new)) for d in diff_trees(a, b, objects.read)]


def brute_reachable(roots: list[Digest], objects: Objects) -> set[str]:
    """Every object below the roots, by plain recursion over decoded objects."""
    found: set[str] = set()

    def visit(digest: str) -> None:
        found.add(digest)
        node = decode_node(objects[digest], digest)
        if isinstance(node, Index):
            for span in node.spans:
                visit(span.node.hex())
            return
        for child in node.children:
            if isinstance(child, Dir):
                visit(child.tree.hex())
            elif isinstance(child, File):
                found.add(child.digest.hex())

    for root in roots:
        visit(root)
    return found


def check_one(model: Model, objects: Objects) -> Digest:
    """Builds a model's trees and checks them alone; returns the root."""
    root = build(model, objects)
    assert build(model, Objects()) == root  # deterministic, whatever the store holds
    flat = Flat.of(manifest_of(model))
    assert flatten(root, objects.read) == flat
    # Format 1 to trees and back (the migration): the identity.
    migrated = Objects()
    again, loose = from_flat(flat, migrated.write, SMALL_SPLIT)
    assert flatten(again, migrated.read, loose=loose) == flat
    return root


def check_pair(a: Model, ra: Digest, b: Model, rb: Digest, objects: Objects) -> None:
    """Checks every walk over two built models against its brute-force version."""
    assert diff_as_specs(ra, rb, objects) == brute_diff(a, b)
    assert diff_as_specs(rb, ra, objects) == brute_diff(b, a)
    assert count_changes(ra, rb, objects.read) == flat_count_changes(manifest_of(a), manifest_of(b))
    # `diff` between two snapshots walks their trees: equal to the flat comparison.
    assert compare_trees(ra, rb, objects.read) == compare(manifest_of(a), manifest_of(b))
    assert compare_trees(rb, ra, objects.read) == compare(manifest_of(b), manifest_of(a))
    assert (ra == rb) == (comparable_model(a) == comparable_model(b))
    marked = list(reachable([ra, rb], objects.read))
    assert len(marked) == len(set(marked))
    assert set(marked) == brute_reachable([ra, rb], objects)


def comparable_model(model: Model) -> dict[str, object]:
    return {p: (s[0], comparable(s)) for p, s in model.items()}


# -- hypothesis ---------------------------------------------------------------------------

specs = st.one_of(
    st.tuples(st.just("file"), st.sampled_from([0o644, 0o755, 0o600]), st.sampled_from("xyz")),
    st.tuples(st.just("link"), st.sampled_from(["a", "../x", "/etc", "\x00ff"])),
    st.tuples(st.just("dir")),
    st.tuples(st.just("ignored")),
    st.tuples(st.just("large"), st.sampled_from([None, 0, 5 << 30])),
    st.tuples(st.just("excluded")),
)
paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)


def consistent(raw: dict[str, Spec], big: int) -> Model:
    """A model from drawn paths: parents made directories, paths below a non-directory dropped.

    `big`: that many files in one more directory (130 fill a part, so it is split).
    """
    model: Model = {}
    for path in sorted(raw, key=lambda p: (p.count("/"), p)):
        above = list(_ancestors(path.rpartition("/")[0]))
        if all(model.get(a, ("dir",)) == ("dir",) for a in above):
            model.update(dict.fromkeys(above, ("dir",)))
            model[path] = raw[path]
    if big:
        holder = next((p for p, s in sorted(model.items()) if s[0] == "dir"), "")
        base = f"{holder}/many" if holder else "many"
        if model.get(base, ("dir",)) == ("dir",):
            model[base] = ("dir",)
            for i in range(big):
                model[f"{base}/icon-{i:04d}.svg"] = ("file", 0o644, f"{i}")
    return model


def _ancestors(path: str) -> Iterator[str]:
    while path:
        yield path
        path = path.rpartition("/")[0]


trees = st.builds(consistent, st.dictionaries(paths, specs, max_size=14),
                  st.sampled_from([0, 0, 0, 200, 600]))  # fmt: skip


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Model, Model]:
    """A tree and an edited copy of it (so most subtrees are shared)."""
    a = draw(trees)
    b = dict(a)
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["edit", "remove", "add", "kind", "many"]))
        keys = sorted(b)
        if op == "add" or not keys:
            extra = draw(trees)
            b = consistent({**b, **extra}, 0)
            continue
        path = draw(st.sampled_from(keys))
        if op == "edit" and b[path][0] == "file":
            b[path] = ("file", b[path][1], str(b[path][2]) + "!")
        elif op == "remove":
            b = {p: s for p, s in b.items() if p != path and not p.startswith(path + "/")}
        elif op == "kind":
            b = {p: s for p, s in b.items() if not p.startswith(path + "/")}
            b[path] = draw(specs.filter(lambda s: s[0] != "dir"))
        elif op == "many":
            many = [p for p in keys if "/icon-" in p]
            if many:
                p = draw(st.sampled_from(many))
                b[p] = ("file", 0o644, "changed")
    return a, b


@given(pairs())
def test_every_walk_equals_its_brute_force(pair: tuple[Model, Model]) -> None:
    objects = Objects()
    a, b = pair
    check_pair(a, check_one(a, objects), b, check_one(b, objects), objects)


@st.composite
def left_out_pairs(draw: st.DrawFn) -> tuple[Model, Model]:
    """A tree, and a copy where only left-out paths (ignored, large, excluded) came or went,
    or (one draw in four) any edited copy: `pairs`."""
    if draw(st.integers(0, 3)) == 0:
        return draw(pairs())
    a = draw(trees)
    b = {p: s for p, s in a.items() if s[0] in ("file", "link", "dir") or draw(st.booleans())}
    left_out = specs.filter(lambda s: s[0] in ("ignored", "large", "excluded"))
    for path in draw(st.lists(paths, max_size=4)):
        parent = path.rpartition("/")[0]
        if path not in b and (not parent or b.get(parent) == ("dir",)):
            b[path] = draw(left_out)
    return a, b


@given(left_out_pairs())
def test_undo_decides_as_format_1_did(pair: tuple[Model, Model]) -> None:
    """`undo_target` on format 2 root trees picks what format 1's entries-and-dirs digest
    picked: a snapshot differing only in left-out paths is the current state."""
    objects = Objects()
    a, b = pair
    ra, rb = check_one(a, objects), check_one(b, objects)
    now, then = manifest_of(a), manifest_of(b)
    current = msgspec.structs.replace(now, tree=ra)
    flat = flatten(rb, objects.read)
    stored = msgspec.structs.replace(then, tree=rb, entries=flat.entries, dirs=flat.dirs)
    history = [summary("b00000000000", stored, second=1)]
    picked = undo_target(history, current, SessionState(), load=lambda _: stored)
    assert (picked is not None) == (now.tree != then.tree)  # format 1: tree_digest


@given(trees)
def test_trees_round_trip_through_the_flat_view(model: Model) -> None:
    objects = Objects()
    root = build(model, objects)
    flat = flatten(root, objects.read)
    assert flat == Flat.of(manifest_of(model))
    again, loose = from_flat(flat, objects.write, SMALL_SPLIT)
    assert flatten(again, objects.read, loose=loose) == flat


hostile_names = st.one_of(
    st.sampled_from(["", ".", "..", ".git", ".GIT", "git~1", ".g\u200cit", ".gitignore",
                     "a/b", "a\x00b", "\x0041", "\x00e9", "\u00e9", "\\", "\udc80", "ok"]),
    st.text(min_size=0, max_size=4),
)  # fmt: skip
hostile_children = st.lists(
    st.one_of(
        st.builds(File, name=hostile_names, mode=st.integers(-2, 0o1001),
                  size=st.integers(-1, 3), digest=st.binary(min_size=31, max_size=33)),
        st.builds(Symlink, name=hostile_names, mode=st.integers(-2, 0o1001),
                  target=hostile_names),
        st.builds(Dir, name=hostile_names, tree=st.binary(min_size=31, max_size=33)),
        st.builds(Ignored, name=hostile_names),
        st.builds(Large, name=hostile_names, size=st.one_of(st.none(), st.integers(-1, 2))),
        st.builds(Excluded, name=hostile_names),
    ),
    max_size=5,
)  # fmt: skip


@given(hostile_children)
def test_the_quick_check_never_passes_what_the_slow_check_refuses(kids: list[Child]) -> None:
    if _plain_names([c.name for c in kids]) and _plain_values(kids):
        for child in kids:
            _check_child(child, "x")  # must not raise


# -- seeded sessions ------------------------------------------------------------------------


def _edit(model: Model, rnd: random.Random) -> Model:
    """One agent step: a few files modified, added, removed; now and then a bigger change."""
    b = dict(model)
    files = sorted(p for p, s in b.items() if s[0] == "file")
    dirs = ["", *sorted(p for p, s in b.items() if s[0] == "dir")]
    for path in rnd.sample(files, min(len(files), rnd.randint(0, 5))):
        b[path] = ("file", b[path][1], f"{rnd.random():.6f}")
    for _ in range(rnd.randint(0, 2)):
        parent = rnd.choice(dirs)
        name = rnd.choice(NAMES) + rnd.choice(["", ".py", "-1", "/x"])
        path = f"{parent}/{name}" if parent else name
        above_all = _ancestors(path.rpartition("/")[0])
        if path not in b and all(b.get(a, ("dir",)) == ("dir",) for a in above_all):
            for above in _ancestors(path.rpartition("/")[0]):
                b[above] = ("dir",)
            b[path] = rnd.choice([("file", 0o644, "new"), ("link", "a"), ("ignored",),
                                  ("large", 7), ("excluded",), ("dir",)])  # fmt: skip
    roll = rnd.random()
    if roll < 0.1 and files:
        gone = rnd.choice(dirs[1:] or [""])
        b = {p: s for p, s in b.items() if p != gone and not p.startswith(gone + "/")}
    elif roll < 0.2:
        holder = rnd.choice(dirs)
        base = f"{holder}/big{rnd.randint(0, 2)}" if holder else "big"
        if b.get(base, ("dir",)) == ("dir",) and all(
            b.get(a, ("dir",)) == ("dir",) for a in _ancestors(holder)
        ):
            b = {p: s for p, s in b.items() if not p.startswith(base + "/")}
            b[base] = ("dir",)
            for i in range(rnd.choice([200, 1500, 6000])):
                b[f"{base}/{rnd.choice(NAMES)}-{i:05d}.svg"] = ("file", 0o644, str(i))
    elif roll < 0.3:
        # Modify, add and remove inside a big directory: one part or two, and the index.
        many = [p for p in files if "/big" in p or p.startswith("big/")]
        for path in rnd.sample(many, min(len(many), 3)):
            if rnd.random() < 0.5:
                b[path] = ("file", 0o644, "edited")
            else:
                del b[path]
    return b


def _start(rnd: random.Random) -> Model:
    model: Model = {}
    for _ in range(rnd.randint(5, 40)):
        parts = [rnd.choice(NAMES) for _ in range(rnd.randint(1, 4))]
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if model.setdefault(above, ("dir",)) != ("dir",):
                break
        else:
            model.setdefault("/".join(parts), ("file", 0o644, str(rnd.random())))
    return model


def session(seed: int) -> Iterator[tuple[int, int, list[Model]]]:
    """A seeded session: each snapshot paired with the one before and a random earlier one.

    Yields (index of the old one, index of the new one, the snapshots so far).
    """
    rnd = random.Random(seed)
    history = [_start(rnd)]
    for _ in range(STEPS):
        history.append(_edit(history[-1], rnd))
        yield len(history) - 2, len(history) - 1, history
        yield rnd.randrange(len(history)), len(history) - 1, history


@pytest.mark.parametrize("seed", range(SESSIONS))
def test_seeded_session(seed: int) -> None:
    objects = Objects()
    roots: list[Digest] = []
    for old, new, history in session(seed):
        while len(roots) < len(history):
            roots.append(check_one(history[len(roots)], objects))
        check_pair(history[old], roots[old], history[new], roots[new], objects)
    assert set(reachable(roots, objects.read)) == brute_reachable(roots, objects)


def test_the_sessions_do_split_directories() -> None:
    # The seeded sessions are only worth their time if they reach split directories.
    levels = set()
    for seed in range(min(SESSIONS, 3)):
        objects = Objects()
        for _, new, history in session(seed):
            build(history[new], objects)
        for data in objects.values():
            node = decode_node(data, "x")
            if isinstance(node, Index):
                levels.add(node.level)
    assert levels >= {1, 2}


def test_hostile_children_are_refused_by_the_builder() -> None:
    with pytest.raises(ManifestError):
        Builder(Objects().write).directory("", [Ignored(name="a/b")], [])


@given(pairs())
def test_a_plan_from_trees_equals_the_plan_from_flat_views(pair: tuple[Model, Model]) -> None:
    """`differences.tree_differences` (what a restore's plan reads) equals `flat_differences`, and
    so does the plan made of it; through `Nodes`, the same again when its nodes are kept."""
    objects = Objects()
    a, b = pair
    now = msgspec.structs.replace(manifest_of(a), tree=check_one(a, objects))
    then = msgspec.structs.replace(manifest_of(b), tree=check_one(b, objects))
    flat = flat_differences(now, then)
    nodes = Nodes(objects.read, keep=4)  # small: nodes are dropped and read again
    for read in (objects.read, nodes, nodes):
        assert tree_differences(now, then, read) == flat
    # Kept for the pair last asked (a restore after its preview reads nothing again).
    reads: list[str] = []
    last = LastDifferences(lambda digest: reads.append(digest) or objects.read(digest))
    assert last(now, then) == flat
    first = len(reads)
    assert last(now, then) == flat
    assert len(reads) == first
    assert last(then, now) == flat_differences(then, now)
    missing = msgspec.structs.replace(now, tree="0" * 64)  # a capture that stored nothing
    assert last(missing, then) == flat_differences(missing, then)
    assert last(now, then) == flat
    if now.tree != then.tree:  # else `plan_restore` returns before it looks
        plans = [
            plan_restore(now, then, ignored_by_target=lambda p, d: p.endswith("1"),
                         differences=differences).changes
            for differences in (flat, tree_differences(now, then, nodes), None)
        ]  # fmt: skip
        assert plans[0] == plans[1] == plans[2]
