"""The per-directory listing cache and the inotify watcher only ever save work.

Workspaces opened through `Walks` record what each scan listed and matched, and have
a racy margin of 0, so listings are trusted at once; `tick` lets the clock move on
where a change must not hide behind a cached stamp.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import ZSTD_MAGIC, Walks, flip_middle, tick, tree_state, write
from worksnap import Workspace

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux")


def paths(ws: Workspace) -> dict[str, str | None]:
    return {e.path: e.hash for e in ws.snapshot().entries}


def test_unchanged_directories_are_not_listed_again(root: Path) -> None:
    write(root, "a/one.txt", "1")
    write(root, "b/two.txt", "2")
    walks = Walks()
    ws = walks.open(root)
    ws.snapshot()
    ws.snapshot()  # listings recorded (old enough to trust: the margin is 0)
    listed = walks.listed()
    walks.open(root).snapshot()  # a fresh process reads the cache from the store
    assert listed == []
    tick(root)
    write(root, "b/three.txt", "3")
    assert "b/three.txt" in paths(walks.open(root))
    assert listed == ["b"]


def test_gitignore_change_relists_below_it(root: Path) -> None:
    write(root, ".gitignore", "")
    write(root, "sub/keep.log", "log")
    ws = Walks().open(root)
    ws.snapshot()
    assert "sub/keep.log" in paths(ws)
    st = (root / ".gitignore").stat()
    tick(root)
    (root / ".gitignore").write_text("*.log")  # content only: the root dir is unchanged
    os.utime(root / ".gitignore", ns=(st.st_atime_ns, st.st_mtime_ns))
    # Old enough to trust at once (margin 0): only the stamp check can tell.
    snap = ws.snapshot()
    assert "sub/keep.log" not in {e.path for e in snap.entries}
    assert snap.ignored == ["sub/keep.log"]


def test_exclusions_are_part_of_the_cache_key(root: Path) -> None:
    write(root, "secret/key", "k")
    write(root, "a.txt", "a")
    walks = Walks()
    walks.open(root).snapshot()
    walks.open(root).snapshot()
    snap = walks.open(root, exclude=("secret",)).snapshot()
    assert [e.path for e in snap.entries] == ["a.txt"]
    assert "secret" in snap.excluded


def test_replaced_child_types_are_seen(root: Path) -> None:
    write(root, "d/x", "file")
    ws = Walks().open(root)
    ws.snapshot()
    ws.snapshot()
    tick(root)
    (root / "d" / "x").unlink()
    (root / "d" / "x").mkdir()
    write(root, "d/x/inner", "i")
    snap = ws.snapshot()
    assert [e.path for e in snap.entries] == ["d/x/inner"]
    assert snap.dirs == ["d", "d/x"]


@linux_only
def test_watched_workspace_sees_every_kind_of_change(root: Path) -> None:
    write(root, "a/one.txt", "1")
    write(root, "a/deep/two.txt", "2")
    write(root, "b/three.txt", "3")
    ws = Workspace(root, watch=True)
    plain = Workspace(root)
    first = ws.snapshot()
    assert ws.snapshot().tree == first.tree
    changes = [
        lambda: write(root, "a/one.txt", "changed"),
        lambda: write(root, "a/deep/new.txt", "new"),
        (root / "b" / "three.txt").unlink,
        lambda: (root / "a" / "one.txt").chmod(0o600),
        lambda: os.rename(root / "a" / "deep", root / "moved"),
        lambda: write(root, "moved/later.txt", "inside the moved dir"),
        lambda: os.symlink("a", root / "link"),
        (root / "b").rmdir,
        lambda: write(root, ".gitignore", "*.txt\n"),
        lambda: write(root, ".gitignore", ""),
    ]
    for change in changes:
        change()
        watched = ws.snapshot()
        assert watched.tree == plain.capture(store_objects=False).tree, change
        assert watched.entries == plain.capture(store_objects=False).entries
    ws.close()


@linux_only
def test_watched_snapshot_of_quiet_tree_reads_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, "a/one.txt", "1")
    ws = Workspace(root, watch=True)
    first = ws.snapshot()

    def no_stat(*args: object, **kwargs: object) -> None:
        raise AssertionError("a quiet watched tree needs no lstat")

    monkeypatch.setattr(os, "lstat", no_stat)
    again = ws.snapshot()
    assert again.tree == first.tree
    assert again.id != first.id
    monkeypatch.undo()
    write(root, "a/one.txt", "2")
    assert ws.snapshot().tree != first.tree
    ws.close()


@linux_only
def test_watched_workspace_restores_exactly(root: Path) -> None:
    write(root, "a.txt", "a")
    write(root, "d/b.txt", "b")
    ws = Workspace(root, watch=True)
    snap = ws.snapshot()
    before = tree_state(root)
    write(root, "a.txt", "edited")
    write(root, "d/new.txt", "new")
    assert ws.restore(snap.id).ok
    assert tree_state(root) == before
    assert ws.snapshot().tree == snap.tree
    ws.close()


@linux_only
def test_watched_snapshot_after_a_preview_stores_every_object(root: Path) -> None:
    write(root, "a.txt", "first")
    ws = Workspace(root, watch=True)
    ws.snapshot()
    write(root, "a.txt", "second")
    ws.plan_restore(ws.load("latest"))  # hashes a.txt without storing it
    snap = ws.snapshot()  # nothing happened since the preview
    assert ws.verify(snap.id) == []
    write(root, "a.txt", "third")
    assert ws.restore(snap.id).ok
    assert (root / "a.txt").read_text() == "second"
    ws.close()


def test_changed_directory_matches_only_new_names(root: Path) -> None:
    write(root, ".gitignore", "*.log\n")
    for i in range(20):
        write(root, f"icons/i{i}.svg", "<svg/>")
    write(root, "icons/old.log", "ignored")
    walks = Walks()
    ws = walks.open(root)
    ws.snapshot()
    ws.snapshot()
    asked = walks.matched()
    tick(root)
    write(root, "icons/new.svg", "<svg/>")
    write(root, "icons/new.log", "ignored too")
    snap = ws.snapshot()
    assert sorted(asked) == ["icons/new.log", "icons/new.svg"]
    assert "icons/new.svg" in {e.path for e in snap.entries}
    assert snap.ignored == ["icons/new.log", "icons/old.log"]


@linux_only
def test_watched_in_place_writes_cross_the_size_cap_both_ways(root: Path) -> None:
    write(root, "d/grow.bin", b"x" * 10)
    write(root, "d/other.txt", "o")
    ws = Workspace(root, watch=True, max_file_bytes=100)
    plain = Workspace(root, max_file_bytes=100)
    ws.snapshot()
    for data in (b"y" * 500, b"z" * 20, b"w" * 700):
        with open(root / "d" / "grow.bin", "r+b") as f:  # in place: same inode, events by name
            f.write(data)
            f.truncate(len(data))
        watched = ws.snapshot()
        expected = plain.capture(store_objects=False)
        assert (watched.entries, watched.large) == (expected.entries, expected.large)
    ws.close()


@pytest.mark.parametrize("damage", ["byte flipped", "truncated"])
def test_damaged_listing_cache_frame_is_ignored(root: Path, damage: str) -> None:
    write(root, "a/one.txt", "1")
    write(root, "b/two.txt", "2")
    walks = Walks()
    ws = walks.open(root)
    ws.snapshot()
    expected = paths(ws)  # listings recorded (old enough to trust: the margin is 0)
    path = root / ".worksnap" / "cache" / "dirs"
    raw = path.read_bytes()
    assert raw.startswith(ZSTD_MAGIC)
    path.write_bytes(flip_middle(raw) if damage == "byte flipped" else raw[: len(raw) // 2])
    listed = walks.listed()
    assert paths(walks.open(root)) == expected
    assert sorted(listed) == ["", "a", "b"]  # dropped whole: every directory listed again


@linux_only
def test_watched_directory_with_new_and_removed_files_stats_only_those(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root, ".gitignore", "*.log\n")
    for i in range(30):
        write(root, f"icons/i{i}.svg", f"<svg {i}/>")
    ws = Workspace(root, watch=True)
    plain = Workspace(root)
    ws.snapshot()
    stated: list[str] = []
    real = os.lstat

    def counting(path: str, *args: object, **kwargs: object) -> os.stat_result:
        stated.append(os.fsdecode(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", counting)
    (root / "icons" / "i3.svg").unlink()
    write(root, "icons/new.svg", "<svg new/>")
    write(root, "icons/i7.svg", "<svg seven, in place/>")
    os.rename(root / "icons" / "i9.svg", root / "icons" / "renamed.svg")
    write(root, "icons/noise.log", "ignored")
    snap = ws.snapshot()
    files = {os.path.basename(p) for p in stated if "icons/" in p}  # relative to a dir fd
    # The 26 files no event named are not looked at again (.git, .gitignore: the rules;
    # noise.log: a name written to is asked whether it has other names).
    assert files <= {"new.svg", "i7.svg", "renamed.svg", ".gitignore", ".git", "icons", "noise.log"}
    assert {"new.svg", "i7.svg", "renamed.svg"} <= files
    monkeypatch.undo()
    assert snap.entries == plain.capture(store_objects=False).entries
    assert snap.ignored == ["icons/noise.log"]
    ws.close()


@linux_only
def test_watched_directory_sees_names_reused_for_other_things(root: Path) -> None:
    for i in range(10):
        write(root, f"d/f{i}.txt", str(i))
    ws = Workspace(root, watch=True)
    plain = Workspace(root)
    ws.snapshot()
    changes = [
        # removed and created again under the same name, with new bytes of the same size
        lambda: ((root / "d" / "f1.txt").unlink(), write(root, "d/f1.txt", "X")),
        # a file replaced by a directory of the same name, and back
        lambda: ((root / "d" / "f2.txt").unlink(), write(root, "d/f2.txt/inner", "in")),
        lambda: (
            (root / "d" / "f2.txt" / "inner").unlink(),
            (root / "d" / "f2.txt").rmdir(),
            write(root, "d/f2.txt", "2"),
        ),
        # a file replaced by a symlink, and a rename over an existing name
        lambda: ((root / "d" / "f3.txt").unlink(), os.symlink("f4.txt", root / "d" / "f3.txt")),
        lambda: os.rename(root / "d" / "f5.txt", root / "d" / "f6.txt"),
        # a listing change and an in-place write in the same directory, in one go
        lambda: (write(root, "d/new.txt", "n"), write(root, "d/f7.txt", "77")),
        lambda: write(root, "d/.gitignore", "f8.txt\n"),
    ]
    for change in changes:
        change()
        watched = ws.snapshot()
        current = plain.capture(store_objects=False)
        assert watched.entries == current.entries, change
        assert (watched.dirs, watched.ignored) == (current.dirs, current.ignored)
    ws.close()


@linux_only
def test_a_watched_workspace_sorts_files_by_each_captures_own_cap(root: Path) -> None:
    """Differential: a watched workspace (what the daemon keeps), its cap changing between
    captures, against a plain one with the same cap. What the watcher remembers was
    sorted into files and large by the cap of its capture: another cap must not reuse it.

    Seeded; WORKSNAP_CAP_STEPS sets how many steps (60 in CI).
    """
    import random

    from worksnap.workspace import Seams

    steps = int(os.environ.get("WORKSNAP_CAP_STEPS", "60"))
    rng = random.Random(0)
    caps = [100, 1000, 5000, 2 << 20]
    names = [f"d{d}/f{f}" for d in range(3) for f in range(4)]
    for name in names:
        write(root, name, b"x" * rng.choice([50, 500, 3000, 9000]))
    seams = Seams(racy_margin_ns=0)
    watched = Workspace(root, watch=True, seams=seams)
    for step in range(steps):
        if rng.random() < 0.5:  # a file changes size (or none does: a quiet tree)
            write(root, rng.choice(names), b"y" * rng.choice([50, 500, 3000, 9000]))
        cap = rng.choice(caps)
        watched.set_config("max-file-bytes", str(cap))
        got = watched.capture(store_objects=rng.random() < 0.3)
        with Workspace(root, max_file_bytes=cap, seams=seams) as plain:
            want = plain.capture(store_objects=False)
        assert (got.large, got.entries, got.max_file_bytes) == (
            want.large, want.entries, cap,
        ), step  # fmt: skip
    watched.close()
