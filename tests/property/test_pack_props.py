"""Properties of version 2 packs: any objects against any bases read back exactly, before and
after a sweep that keeps any subset of them (docs/format.md, "Packs")."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes

pytestmark = pytest.mark.slow  # hypothesis runs many examples

settings.register_profile(
    "ci", derandomize=True, max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=1500, deadline=None)
settings.load_profile(
    os.environ.get("WORKSNAP_HYPOTHESIS") or ("ci" if os.environ.get("CI") else "dev")
)

# Each object: a fresh blob, or an edit of an earlier one (so deltas are worth taking),
# with a base hint that is an earlier object, itself, a digest never stored, or none.
edits = st.tuples(
    st.integers(0, 1 << 16),  # which earlier object to edit (modulo how many there are)
    st.integers(0, 1 << 16),  # where
    st.binary(max_size=40),  # what goes in
    st.integers(0, 64),  # how much is cut out
)
steps = st.lists(
    st.tuples(
        st.one_of(st.binary(max_size=3000), edits),
        st.one_of(st.none(), st.integers(0, 1 << 16), st.just("self"), st.just("nowhere")),
        st.booleans(),  # flush after it
    ),
    min_size=1,
    max_size=40,
)


def _build(plan: list[tuple[object, object, bool]]) -> list[tuple[bytes, str | None]]:
    blobs: list[bytes] = []
    out: list[tuple[bytes, str | None]] = []
    for what, hint, _ in plan:
        if isinstance(what, bytes) or not blobs:
            blob = what if isinstance(what, bytes) else b"first"
        else:
            assert isinstance(what, tuple)
            which, at, text, cut = what
            old = blobs[which % len(blobs)]
            at %= len(old) + 1
            blob = old[:at] + text + old[at + cut :]
        base: str | None
        if hint is None:
            base = None
        elif hint == "self":
            base = hash_bytes(blob)
        elif hint == "nowhere":
            base = hash_bytes(b"never stored")
        else:
            assert isinstance(hint, int)
            base = hash_bytes(blobs[hint % len(blobs)]) if blobs else None
        blobs.append(blob)
        out.append((blob, base))
    return out


@given(plan=steps, keep=st.lists(st.booleans(), min_size=40, max_size=40))
def test_objects_against_any_bases_read_back_exactly(
    plan: list[tuple[object, object, bool]], keep: list[bool]
) -> None:
    objects = _build(plan)
    with tempfile.TemporaryDirectory() as tmp:
        store = DiskStore(os.path.join(tmp, "s"))
        store.create()
        for (blob, base), (_, _, flush) in zip(objects, plan, strict=True):
            store.add(hash_bytes(blob), blob, base=base)
            assert store.read(hash_bytes(blob)) == blob
            if flush:
                store.flush()
        store.flush()
        store.close()
        every = {hash_bytes(blob): blob for blob, _ in objects}
        fresh = DiskStore(os.path.join(tmp, "s"))
        for digest, blob in every.items():
            assert fresh.read(digest) == blob
            fresh.check(digest)
        live = {d for i, d in enumerate(every) if keep[i % len(keep)]}
        fresh.sweep(live)
        fresh.close()
        after = DiskStore(os.path.join(tmp, "s"))
        assert set(after.digests()) == live
        for digest in live:
            assert after.read(digest) == every[digest]
            after.check(digest)
        after.close()  # descriptors: a test of the suite runs with a limit of 256
