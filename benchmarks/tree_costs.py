"""What format 2 trees cost: bytes stored per snapshot and per change, and walk times.

Builds a snapshot in memory shaped like the reference tree (47k files: five vendored
SVG icon sets of 2,100 to 10,600 files each in one directory, the rest a source tree
shaped like ``build_workspace.py --synthetic``, plus ignored, large and excluded
paths), or reads a real directory (``--dir``; its files are hashed, nothing is stored).
Then reports, for 47k and 200k files:

* total tree bytes and objects, against the format 1 manifest (JSON, and zstd as stored),
  and what hex digests instead of 32 raw bytes would add;
* bytes a snapshot adds: nothing changed; 5 files modified in the 5 largest directories
  (the worst case); 5 in random directories; 5 modified and 1 added in random directories;
* times (best of --repeat): encode (flat to trees), flatten (trees to flat, what
  ``show --json`` needs), decode alone, diff and change count of two snapshots 10 files
  apart, gc marking.

With ``--sweep`` it first compares split settings (SPLIT_BYTES, PART_MAX, mask bits) on the
47k tree: the bytes a worst-case 5-file change adds, and the total. These are the bytes of
the objects, before the packs store a changed one as a delta against its previous version;
what a store grows by is ``trees_vs_git.py``'s (issue 13's session).

    python benchmarks/tree_costs.py
    python benchmarks/tree_costs.py --sweep
    python benchmarks/tree_costs.py --dir /tmp/worksnap-bench/ref/root
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import zstandard

from worksnap import tree as tree_mod
from worksnap.flatbuild import from_flat
from worksnap.manifest import VERSION, Entry, Manifest, encode_manifest, tree_digest
from worksnap.paths import Digest, ancestors
from worksnap.record import Record, encode_record
from worksnap.tree import Builder, Built, decode_node
from worksnap.treewalk import (
    Flat,
    children,
    count_changes,
    diff_trees,
    flatten,
    reachable,
)

ICON_SETS = [7_500, 9_100, 10_600, 3_200, 2_100]  # files in one directory each


def _split(text: str) -> list[str]:
    return text.split()


_ICON_WORDS = _split(
    "account alert arrow bell book calendar camera card chart chat check chevron circle "
    "clock cloud code cog copy credit database delete device dots download edit email eye "
    "file filter flag folder format heart help home image information key label layers "
    "lightbulb link lock login map menu message microphone minus music network note "
    "outline pencil phone play plus power printer radio refresh reply search send server "
    "settings share shield star sync table tag text thumb timer tools trash truck upload "
    "user video view volume wallet web wifi window wrench zoom left right up down bold "
    "box off on multiple variant remove add sharp round filled two tone"
)
_WORDS = _split(
    "src lib core util test tests docs api model view handler service client server config "
    "data io parser render cache store index plugin schema types runtime build"
)
_EXTS = [".py", ".ts", ".js", ".md", ".json", ".txt", ".css", ".html", ".yaml", ".rs", ".svg"]


def _digest(rnd: random.Random) -> str:
    return rnd.randbytes(32).hex()


def synthetic(n_files: int, seed: int) -> Manifest:
    """A snapshot of about `n_files` files shaped like the reference tree (no files written)."""
    rnd = random.Random(seed)
    entries: list[Entry] = []
    dirs: set[str] = set()
    ignored: list[str] = ["node_modules", ".venv"]
    excluded: list[str] = [".git", ".worksnap"]
    large: list[str] = []
    for number, count in enumerate(ICON_SETS):
        base = f"web/vendor/icons{number}/svg"
        dirs.update(("web", "web/vendor", f"web/vendor/icons{number}", base))
        names: set[str] = set()
        while len(names) < count:
            words = rnd.sample(_ICON_WORDS, rnd.randint(2, 4))
            names.add("-".join(words) + ".svg")
        for name in names:
            entries.append(_file(f"{base}/{name}", rnd, rnd.randint(300, 3000)))
    # The rest: nested directories with exponentially many files, as build_workspace.py.
    tree_dirs = ["py"]
    dirs.add("py")
    while len(entries) < n_files:
        parent = tree_dirs[-1 - int(rnd.expovariate(0.15)) % len(tree_dirs)]
        if parent.count("/") >= 7:
            parent = "py"
        directory = f"{parent}/{rnd.choice(_WORDS)}_{len(tree_dirs)}"
        tree_dirs.append(directory)
        dirs.add(directory)
        for i in range(max(1, int(rnd.expovariate(1 / 18)))):
            name = f"{rnd.choice(_WORDS)}_{i}{rnd.choice(_EXTS)}"
            size = min(int(rnd.lognormvariate(7.0, 1.1)), 1_000_000)
            entries.append(_file(f"{directory}/{name}", rnd, size))
        if rnd.random() < 0.1:
            ignored.append(f"{directory}/__pycache__")
        if rnd.random() < 0.01:
            large.append(f"{directory}/dump_{len(large)}.bin")
    unique = {e.path: e for e in entries}
    ordered = sorted(unique.values(), key=lambda e: e.path)
    taken = set(unique) | dirs
    return _manifest(
        ordered,
        sorted(dirs),
        sorted(p for p in set(ignored) if p not in taken),
        sorted(p for p in set(large) if p not in taken),
        sorted(excluded),
    )


def _file(path: str, rnd: random.Random, size: int) -> Entry:
    return Entry(path=path, type="file", mode=0o644, hash=_digest(rnd), size=size)


def _manifest(
    entries: list[Entry], dirs: list[str], ignored: list[str], large: list[str], excluded: list[str]
) -> Manifest:
    return Manifest(
        version=VERSION, id="000000000000", root="/bench", kind="step", step=1,
        time="2026-01-01T00:00:00.000000Z", max_file_bytes=2 << 20,
        tree=tree_digest(entries, dirs), entries=entries, dirs=dirs, ignored=ignored,
        large=large, excluded=excluded,
    )  # fmt: skip


def from_directory(path: Path) -> Manifest:
    """A capture of a real directory (hashed, ignore rules applied, nothing stored)."""
    from worksnap.workspace import Workspace

    with tempfile.TemporaryDirectory() as store:
        return Workspace(path, store=store).capture(store_objects=False)


class Store:
    """Objects in a dictionary, counting what each build adds."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.added: list[int] = []

    def write(self, digest: Digest, data: bytes) -> None:
        if digest not in self.objects:
            self.objects[digest] = data
            self.added.append(len(data))

    def read(self, digest: Digest) -> bytes:
        return self.objects[digest]

    def build(self, flat: Flat) -> tuple[Digest, int, int]:
        """Builds `flat`; returns its root and the objects and bytes it added."""
        self.added = []
        root, _ = from_flat(flat, self.write, SPLIT[0])
        return root, len(self.added), sum(self.added)


def _modified(m: Manifest, paths: list[str], rnd: random.Random, *, add: int = 0) -> Flat:
    chosen = set(paths)
    entries = [
        Entry(path=e.path, type="file", mode=e.mode, hash=_digest(rnd), size=e.size)
        if e.path in chosen
        else e
        for e in m.entries
    ]
    for path in paths[:add]:
        entries.append(
            Entry(path=path + ".new", type="file", mode=0o644, hash=_digest(rnd), size=100)
        )
    entries.sort(key=lambda e: e.path)
    return Flat(entries, m.dirs, m.ignored, m.large, m.excluded)


def _record(m: Manifest, root: str) -> int:
    return len(
        encode_record(
            Record(
                version=2, id="0123456789ab", root="/home/someone/projects/bench", kind="step",
                step=123, time=m.time, max_file_bytes=m.max_file_bytes, tree=root,
                label="agent step 123: edit five files", session="default",
                parent="ba9876543210", files=len(m.entries),
                bytes=sum(e.size or 0 for e in m.entries), changed=5,
            )
        )
    )  # fmt: skip


def _by_dir(m: Manifest) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for e in m.entries:
        found.setdefault(e.path.rpartition("/")[0], []).append(e.path)
    return found


def _best(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


SPLIT = [tree_mod.SPLIT]
"""The split every build here uses (`sweep` tries others)."""

IDX_ENTRY = 57
"""Bytes a pack index spends on each object: msgpack [digest, stored, raw, base], as
measured on issue 13's session (344,759 bytes for 6,092 objects)."""


def change_costs(m: Manifest, seed: int, trials: int) -> dict[str, tuple[float, float, int]]:
    """Per kind of change, over `trials` draws: mean objects, mean and largest bytes added.

    Bytes are the new tree objects plus the record; each draw starts from the same
    snapshot.
    """
    rnd = random.Random(seed)
    store = Store()
    root, _, _ = store.build(Flat.of(m))
    record = _record(m, root)
    by_dir = _by_dir(m)
    biggest = sorted(by_dir, key=lambda d: len(by_dir[d]), reverse=True)[:5]
    ordered = sorted(by_dir)
    fullest = _fullest(store, root, 5)

    def cost(flat: Flat) -> tuple[int, int]:
        new: dict[str, int] = {}

        def write(digest: Digest, data: bytes) -> None:
            if digest not in store.objects:
                new[digest] = len(data)

        from_flat(flat, write, SPLIT[0])
        return len(new), sum(new.values()) + record

    scenarios: dict[str, Callable[[], Flat]] = {
        "nothing changed": lambda: Flat.of(m),
        "5 modified, 5 largest dirs": lambda: _modified(
            m, [rnd.choice(by_dir[d]) for d in biggest], rnd
        ),
        "5 modified, 5 fullest trees": lambda: _modified(
            m, [rnd.choice(by_dir[d]) for d in fullest], rnd
        ),
        "5 modified, 5 random dirs": lambda: _modified(
            m, [rnd.choice(by_dir[d]) for d in rnd.sample(ordered, 5)], rnd
        ),
        "5 modified + 1 added, random dirs": lambda: _modified(
            m, [rnd.choice(by_dir[d]) for d in rnd.sample(ordered, 5)], rnd, add=1
        ),
    }
    out: dict[str, tuple[float, float, int]] = {}
    for name, make in scenarios.items():
        runs = [cost(make()) for _ in range(1 if name == "nothing changed" else trials)]
        out[name] = (
            sum(r[0] for r in runs) / len(runs),
            sum(r[1] for r in runs) / len(runs),
            max(r[1] for r in runs),
        )
    return out


def _fullest(store: Store, root: Digest, count: int) -> list[str]:
    """The directories whose own tree object (or largest part) is largest: the worst case
    for one change, as a directory just under the split rewrites a whole `SPLIT_BYTES`."""
    largest: dict[str, int] = {}
    stack = [("", root)]
    while stack:
        path, digest = stack.pop()
        data = store.objects[digest]
        node = decode_node(data, "x")
        sizes = [len(data)]
        kids: list[tree_mod.Child] = []
        if isinstance(node, tree_mod.Index):
            kids = list(children(digest, store.read))
            sizes = [len(store.objects[d]) for d in _parts(store, node)]
        else:
            kids = node.children
        if any(isinstance(c, tree_mod.File) for c in kids):
            largest[path] = max(sizes)
        prefix = f"{path}/" if path else ""
        stack.extend(
            (prefix + c.name, Digest(c.tree.hex())) for c in kids if isinstance(c, tree_mod.Dir)
        )
    return sorted(largest, key=lambda d: largest[d], reverse=True)[:count]


def _parts(store: Store, node: tree_mod.Index) -> list[str]:
    found = []
    for span in node.spans:
        sub = decode_node(store.objects[span.node.hex()], "x")
        found.extend(_parts(store, sub) if isinstance(sub, tree_mod.Index) else [span.node.hex()])
    return found


Groups = dict[str, tuple[list[tree_mod.Child], list[str]]]


def groups(flat: Flat) -> Groups:
    """Each directory's leaves and subdirectory names: what a capture hands the builder."""
    found: Groups = {"": ([], [])}
    for d in flat.dirs:
        found[d] = ([], [])
    for d in flat.dirs:
        parent, _, name = d.rpartition("/")
        found[parent][1].append(name)
    for e in flat.entries:
        parent, _, name = e.path.rpartition("/")
        if e.type == "symlink":
            assert e.target is not None
            child: tree_mod.Child = tree_mod.Symlink(name=name, mode=e.mode, target=e.target)
        else:
            assert e.hash is not None
            assert e.size is not None
            child = tree_mod.File(name=name, mode=e.mode, size=e.size, digest=bytes.fromhex(e.hash))
        found[parent][0].append(child)
    for paths, make in (
        (flat.ignored, lambda n: tree_mod.Ignored(name=n)),
        (flat.large, lambda n: tree_mod.Large(name=n, size=None)),
        (flat.excluded, lambda n: tree_mod.Excluded(name=n)),
    ):
        for path in paths:
            parent, _, name = path.rpartition("/")
            if parent in found:
                found[parent][0].append(make(name))
    return found


def capture_build(
    found: Groups, reuse: dict[str, Built] | None = None, changed: set[str] | None = None
) -> dict[str, Built]:
    """Builds bottom-up as a capture would; with `reuse`, only `changed` directories encode."""
    builder = Builder(lambda digest, data: None, SPLIT[0])
    built: dict[str, Built] = {}
    for d in sorted(found, reverse=True):  # subdirectories first; the root ("") last
        if reuse is not None and changed is not None and d not in changed:
            if d.rpartition("/")[0] in changed:  # below an unchanged one: not even visited
                builder.reuse(d, reuse[d])
                built[d] = reuse[d]
        else:
            leaves, subdirs = found[d]
            built[d] = builder.directory(d, leaves, subdirs)
    builder.root()
    return built


def sizes(m: Manifest) -> dict[str, int]:
    store = Store()
    _, objects, size = store.build(Flat.of(m))
    digests = Counter[str]()
    for data in store.objects.values():
        node = decode_node(data, "bench")
        if isinstance(node, tree_mod.Index):
            digests["spans"] += len(node.spans)
        else:
            digests["digests"] += sum(
                1 for c in node.children if isinstance(c, tree_mod.File | tree_mod.Dir)
            )
    flat_json = encode_manifest(m)
    return {
        "tree objects": objects,
        "tree bytes": size,
        "largest object": max(len(d) for d in store.objects.values()),
        "hex digests would add": 32 * (digests["digests"] + digests["spans"]),
        "format 1 manifest JSON": len(flat_json),
        "format 1 manifest zstd (as stored)": len(zstandard.compress(flat_json, 1)),
    }


def timings(m: Manifest, repeat: int, seed: int) -> dict[str, float]:
    rnd = random.Random(seed)
    store = Store()
    flat = Flat.of(m)
    root, _, _ = store.build(flat)
    ten = [e.path for e in rnd.sample(m.entries, 10)]
    other, _, _ = store.build(_modified(m, ten, rnd))
    blobs = list(store.objects.values())
    found = groups(flat)
    first = capture_build(found)
    five = [e.path for e in rnd.sample(m.entries, 5)]
    edited = groups(_modified(m, five, rnd))
    changed = {d for p in five for d in ancestors(p.rpartition("/")[0])} | {""}
    out = {
        "capture builds every directory (cold)": _best(repeat, lambda: capture_build(found)),
        "capture builds 5 changed dirs + ancestors": _best(
            repeat, lambda: capture_build(edited, first, changed)
        ),
        "migrate (format 1 manifest to trees)": _best(
            repeat, lambda: from_flat(flat, lambda d, b: None, SPLIT[0])
        ),
        "decode every object": _best(repeat, lambda: [decode_node(b, "x") for b in blobs]),
        "flatten (trees to flat)": _best(repeat, lambda: flatten(root, store.read)),
        "format 1 tree digest (for comparison)": _best(
            repeat, lambda: tree_digest(m.entries, m.dirs)
        ),
        "diff, 10 files apart": _best(repeat, lambda: list(diff_trees(root, other, store.read))),
        "change count, 10 files apart": _best(
            repeat, lambda: count_changes(root, other, store.read)
        ),
        "gc marking (2 snapshots)": _best(
            repeat, lambda: set(reachable([root, other], store.read))
        ),
    }
    assert flatten(root, store.read) == flat
    assert count_changes(root, other, store.read) == 10
    return out


def sweep(m: Manifest, seed: int) -> None:
    print("\nsplit settings: bytes 5 modified files add (largest of 10 draws) in the 5 largest")
    print("directories, in the 5 with the largest tree objects, and in random ones (mean)")
    print(f"{'split':>6} {'max':>6} {'1 in':>5} {'avg part':>9} {'objects':>8} "
          f"{'total':>10} {'largest':>8} {'fullest':>8} {'random':>8}")  # fmt: skip
    saved = SPLIT[0]
    try:
        for split, high, bits in (
            (4096, 8192, 4), (8192, 16384, 5), (16384, 32768, 6), (32768, 65536, 7),
            (65536, 131072, 8),
        ):  # fmt: skip
            SPLIT[0] = tree_mod.Split(over=split, part_max=high, mask=(1 << bits) - 1)
            store = Store()
            _, objects, total = store.build(Flat.of(m))
            parts = [len(d) for d in store.objects.values() if d[1:8] == b"\xa6wspart"]
            costs = change_costs(m, seed, 10)
            avg = sum(parts) // max(1, len(parts))
            print(
                f"{split:>6} {high:>6} {1 << bits:>5} {avg:>9} {objects:>8} "
                f"{total:>10} {costs['5 modified, 5 largest dirs'][2]:>8} "
                f"{costs['5 modified, 5 fullest trees'][2]:>8} "
                f"{costs['5 modified, 5 random dirs'][1]:>8.0f}"
            )
    finally:
        SPLIT[0] = saved


def report(name: str, m: Manifest, repeat: int, seed: int, trials: int) -> None:
    biggest = max(Counter(e.path.rpartition("/")[0] for e in m.entries).values())
    print(f"\n== {name}: {len(m.entries)} files, {len(m.dirs)} dirs, largest dir {biggest} files")
    for key, value in sizes(m).items():
        print(f"  {key:<40} {value:>12,}")
    print(f"  bytes a snapshot adds, trees + record (mean and largest of {trials} draws; a pack")
    print(f"  index adds about {IDX_ENTRY} bytes per object):")
    for key, (objects, mean, largest) in change_costs(m, seed, trials).items():
        print(f"    {key:<38} {mean:>9,.0f} {largest:>9,}  ({objects:.1f} tree objects)")
    print(f"  times (best of {repeat}):")
    for key, seconds in timings(m, repeat, seed).items():
        print(f"    {key:<38} {seconds * 1000:>9.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, help="measure a capture of this directory instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trials", type=int, default=20, help="draws of each kind of change")
    parser.add_argument("--sweep", action="store_true", help="compare split settings first")
    parser.add_argument("--sizes", default="47000,200000", help="synthetic tree sizes")
    args = parser.parse_args()
    print(
        f"split: over {SPLIT[0].over} bytes; parts of at most {SPLIT[0].part_max} "
        f"bytes, 1 name in {SPLIT[0].mask + 1} ends one"
    )
    if args.dir:
        report(str(args.dir), from_directory(args.dir), args.repeat, args.seed, args.trials)
        return 0
    counts = [int(n) for n in args.sizes.split(",")]
    if args.sweep:
        sweep(synthetic(counts[0], args.seed), args.seed)
    for n in counts:
        report(f"synthetic {n}", synthetic(n, args.seed), args.repeat, args.seed, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
