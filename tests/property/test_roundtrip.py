"""Properties: any tree restores exactly from any other; wire paths round-trip; diffs are exact."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import tree_state
from worksnap import Workspace
from worksnap.differences import differing
from worksnap.manifest import Entry
from worksnap.paths import fs_path, wire_name

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

names = st.sampled_from(
    [b"a", b"b", b"dir", b"x y", b"caf\xe9", b"\xff", b"new\nline", b"-n", b"\xc3\xa9", b"z"]
)
paths = st.lists(names, min_size=1, max_size=3).map(b"/".join)
contents = st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\r\n", b"\xef\xbb\xbf"]))
kinds = st.one_of(
    st.tuples(st.just("file"), contents, st.sampled_from([0o644, 0o755, 0o600])),
    st.tuples(st.just("link"), st.sampled_from([b"a", b"../x", b"/etc", b"dir/a"])),
    st.tuples(st.just("dir")),
)
trees = st.dictionaries(paths, kinds, max_size=8)


def build(root: Path, spec: dict[bytes, tuple[object, ...]]) -> None:
    """Creates what `spec` describes; entries that collide with an earlier one are skipped."""
    base = os.fsencode(root)
    for rel, kind in sorted(spec.items()):
        full = os.path.join(base, rel)
        parent = os.path.dirname(full)
        if not _plain_dirs_only(base, os.path.dirname(rel)):
            continue  # never create anything through a symlink (it may point outside)
        try:
            os.makedirs(parent, exist_ok=True)
            if kind[0] == "file":
                with open(full, "xb") as f:
                    f.write(kind[1])  # type: ignore[arg-type]
                os.chmod(full, kind[2])  # type: ignore[arg-type]
            elif kind[0] == "link":
                os.symlink(kind[1], full)  # type: ignore[arg-type]
            else:
                os.makedirs(full, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            continue


def _plain_dirs_only(base: bytes, rel_dir: bytes) -> bool:
    """True when every existing component of `rel_dir` is a real directory."""
    current = base
    for part in rel_dir.split(b"/") if rel_dir else []:
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.lexists(current) and not os.path.isdir(current)):
            return False
    return True


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=trees, after=trees)
def test_restore_of_any_tree_from_any_tree_is_exact(
    before: dict[bytes, tuple[object, ...]], after: dict[bytes, tuple[object, ...]]
) -> None:
    work = Path(tempfile.mkdtemp(prefix="worksnap-prop-"))
    try:
        root = work / "ws"
        root.mkdir()
        store = work / "store"
        build(root, before)
        expected = tree_state(root)
        ws = Workspace(root, store=store)
        snap = ws.snapshot()
        for child in root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        build(root, after)
        result = ws.restore(snap.id)
        assert result.ok, result.error
        assert tree_state(root) == expected
        assert ws.plan_restore(ws.load(snap.id)).changes == []
    finally:
        shutil.rmtree(work)


@given(st.binary(min_size=1, max_size=40).filter(lambda b: b"\x00" not in b))
def test_wire_form_round_trips_every_name(raw: bytes) -> None:
    wire = wire_name(os.fsdecode(raw))
    assert fs_path(wire) == raw
    wire.encode("utf-8")  # always valid Unicode, so JSON can carry it


def _entries(sizes: dict[int, int]) -> list[Entry]:
    return [
        Entry(path=f"d/{n:05d}", type="file", mode=0o644, hash=f"{size:064x}", size=size)
        for n, size in sorted(sizes.items())
    ]


@given(
    st.dictionaries(st.integers(0, 3000), st.integers(0, 3), max_size=900),
    st.dictionaries(st.integers(0, 3000), st.one_of(st.none(), st.integers(0, 3)), max_size=60),
)
def test_differing_finds_exactly_the_entries_not_on_both_sides(
    base: dict[int, int], edits: dict[int, int | None]
) -> None:
    changed = {**base, **{n: s for n, s in edits.items() if s is not None}}
    for n, s in edits.items():
        if s is None:
            changed.pop(n, None)
    old, new = _entries(base), _entries(changed)

    def key(e: Entry) -> tuple[object, ...]:
        return (e.path, e.type, e.mode, e.hash, e.size, e.target)

    only_old, only_new = differing(old, new)
    assert [key(e) for e in only_old] == sorted(set(map(key, old)) - set(map(key, new)))
    assert [key(e) for e in only_new] == sorted(set(map(key, new)) - set(map(key, old)))
