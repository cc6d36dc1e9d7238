"""The remote's fast paths against the obvious slow ones, on random packs (seeded).

- `Repository.read_objects` (ranges coalesced, fetched a few at a time) against one
  `get_range` per object;
- `TreeReader` (a tree pack fetched whole on first use) against the same;
- indexes from the local cache against indexes fetched from the remote.

`WORKSNAP_REMOTE_STEPS` (default 20) and `WORKSNAP_REMOTE_SEED` (default 1) set the run.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from worksnap.hash import hash_bytes
from worksnap.paths import Digest
from worksnap.remote.packs import PackBuilder
from worksnap.remote.repository import (
    Location,
    Repository,
    locations,
    pack_key,
    unpack_object,
)
from worksnap.remote.s3 import open_memory
from worksnap.remote.treereader import TreeReader

STEPS = int(os.environ.get("WORKSNAP_REMOTE_STEPS", "20"))
SEED = int(os.environ.get("WORKSNAP_REMOTE_SEED", "1"))


def random_object(rng: random.Random) -> bytes:
    size = rng.choice([0, 1, 17, 300, 4096, rng.randrange(70_000)])
    if rng.random() < 0.5:
        return rng.randbytes(size)
    return (rng.choice([b"ab", b"hello world\n", b"\x00"]) * size)[:size]


def slow_read(repo: Repository, digest: str, where: Location) -> bytes:
    frame = repo.transport.get_range(pack_key(where.pack), where.offset, where.length)
    return unpack_object(frame, where, digest, repo.url)


def test_fast_reads_equal_slow_reads(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    checked = 0
    for step in range(STEPS):
        repo = Repository.open(open_memory(), cache=str(tmp_path / f"cache{step}"), create=True)
        pool = [random_object(rng) for _ in range(rng.randrange(1, 60))]
        for _ in range(rng.randrange(1, 5)):
            builder = PackBuilder(trees=rng.random() < 0.5)
            seen: set[str] = set()
            for data in rng.sample(pool, rng.randrange(1, len(pool) + 1)):
                digest = hash_bytes(data)
                if digest not in seen:
                    seen.add(digest)
                    builder.add(digest, data)
            repo.put_pack(builder)
        fetched = Repository.open(repo.transport, create=False).load_indexes()
        cached = Repository.open(
            repo.transport, cache=str(tmp_path / f"cache{step}")
        ).load_indexes()
        assert cached == fetched
        places = locations(fetched)
        wanted = [(d, w) for d, w in places.items() if rng.random() < 0.7]
        wanted += rng.sample(wanted, min(len(wanted), rng.randrange(3)))  # repeats
        gap, span = rng.choice([0, 1, 100, 1 << 16]), rng.choice([1, 5000, 1 << 20])
        fast = list(repo.read_objects(wanted, gap=gap, span=span))
        slow = {d: slow_read(repo, d, w) for d, w in wanted}
        assert dict(fast) == slow, (step, gap, span)
        assert len(fast) == len(slow)  # each object once
        reader = TreeReader(repo, places)
        for digest in rng.sample(sorted(places), len(places)):
            assert reader(Digest(digest)) == slow_read(repo, digest, places[digest])
            checked += 1
    assert checked > STEPS  # the loop did work


def test_a_tree_pack_s_large_contents_are_not_fetched_with_its_trees(tmp_path: Path) -> None:
    """A small push writes one pack, its trees and file contents together. A review saw
    `remote gc`, which needs only the trees, unpack every content of such a pack into
    memory (three compressible 900 MB files: 2.8 GB). Objects over 1 MiB come only when
    asked for, one at a time."""
    repo = Repository.open(open_memory(), cache=str(tmp_path / "cache"), create=True)
    tree, small, large = b"a tree's bytes", b"a small file\n", b"\x00" * (5 << 20)
    builder = PackBuilder(trees=True)
    for data in (tree, small, large):
        builder.add(hash_bytes(data), data)
    repo.put_pack(builder)
    places = locations(repo.load_indexes())
    reader = TreeReader(repo, places)
    assert reader(hash_bytes(tree)) == tree
    assert set(reader.fetched) == {hash_bytes(tree), hash_bytes(small)}
    assert reader(hash_bytes(large)) == large  # still read when asked for
