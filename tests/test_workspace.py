"""The core promises of snapshot, plan and restore, on real files."""

from __future__ import annotations

import ctypes
import gc
import itertools
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from tests.conftest import packed, tree_state, unpacked, write
from tests.legacy import downgrade
from worksnap import (
    InputError,
    ManifestError,
    ObjectError,
    Op,
    RecoveryError,
    Retention,
    Workspace,
)
from worksnap.cli import main
from worksnap.diskstore import DiskStore
from worksnap.layout import StorePaths
from worksnap.manifest import encode_manifest
from worksnap.paths import fs_path


def changes(ws: Workspace, ref: str = "latest") -> list[tuple[str, str]]:
    return [(c.op.value, c.path) for c in ws.plan_restore(ws.load(ref)).changes]


def restore_exactly(ws: Workspace, ref: str) -> None:
    result = ws.restore(ref)
    assert result.ok, result.error
    assert changes(ws, ref) == []


def test_fresh_snapshot_plans_nothing(root: Path) -> None:
    write(root, "a.txt", "a")
    write(root, "d/b.txt", "b")
    (root / "empty").mkdir()
    ws = Workspace(root)
    ws.snapshot()
    assert changes(ws) == []


def test_snapshot_records_entries_dirs_and_metadata(root: Path) -> None:
    write(root, "x/y.txt", "hello", mode=0o640)
    (root / "x" / "empty").mkdir()
    os.symlink("y.txt", root / "x" / "link")
    ws = Workspace(root)
    m = ws.snapshot(kind="step", step=4, label="first line\nsecond")
    assert m.version == 1
    assert m.root == str(root.resolve())
    assert (m.kind, m.step, m.label) == ("step", 4, "first line")
    assert m.dirs == ["x", "x/empty"]
    by_path = {e.path: e for e in m.entries}
    file = by_path["x/y.txt"]
    assert (file.type, file.mode, file.size) == ("file", 0o640, 5)
    assert file.hash is not None and len(file.hash) == 64
    link = by_path["x/link"]
    assert (link.type, link.target, link.hash, link.size) == ("symlink", "y.txt", None, None)
    assert m.time.endswith("Z") and "T" in m.time
    # Stored as a record naming its trees; `show --json` is the flat manifest.
    record = msgspec.json.decode((root / ".worksnap" / "snapshots" / f"{m.id}.json").read_bytes())
    assert (record["version"], record["id"], record["tree"]) == (2, m.id, m.tree)
    assert ws.show_bytes(m.id) == encode_manifest(m)


def test_every_snapshot_gets_an_id_and_unchanged_writes_no_objects(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    first = ws.snapshot()
    added = ws.store.added
    second = ws.snapshot()
    assert first.id != second.id
    assert ws.store.added == added
    assert first.tree == second.tree
    assert [s.id for s in ws.list()] == [second.id, first.id]


def test_store_hides_itself_from_git_and_is_never_captured(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    m = ws.snapshot()
    assert (root / ".worksnap" / ".gitignore").read_bytes() == b"*\n"
    assert all(not e.path.startswith(".worksnap") for e in m.entries)
    assert ".worksnap" in m.excluded


def test_modified_added_deleted_detected_and_undone(root: Path) -> None:
    write(root, "keep.txt", "same")
    write(root, "mod.txt", "before")
    write(root, "gone/deep.txt", "deleted later")
    ws = Workspace(root)
    snap = ws.snapshot()
    before = tree_state(root)
    write(root, "mod.txt", "after")
    write(root, "new.txt", "added")
    write(root, "newdir/sub/f", "added deep")
    (root / "gone" / "deep.txt").unlink()
    (root / "gone").rmdir()
    assert changes(ws, snap.id) == [
        ("D", "gone"),
        ("D", "gone/deep.txt"),
        ("M", "mod.txt"),
        ("A", "new.txt"),
        ("A", "newdir"),
        ("A", "newdir/sub"),
        ("A", "newdir/sub/f"),
    ]
    restore_exactly(ws, snap.id)
    assert tree_state(root) == before


def test_mode_only_change_is_modified(root: Path) -> None:
    write(root, "run.sh", "#!/bin/sh\n", mode=0o644)
    ws = Workspace(root)
    snap = ws.snapshot()
    (root / "run.sh").chmod(0o755)
    assert changes(ws, snap.id) == [("M", "run.sh")]
    restore_exactly(ws, snap.id)
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o644


def test_type_changes_between_file_dir_and_symlink(root: Path) -> None:
    write(root, "was_file", "f")
    write(root, "was_dir/inner", "i")
    os.symlink("was_file", root / "was_link")
    ws = Workspace(root)
    snap = ws.snapshot()
    before = tree_state(root)
    (root / "was_file").unlink()
    write(root, "was_file/now_inside", "x")
    (root / "was_dir" / "inner").unlink()
    (root / "was_dir").rmdir()
    write(root, "was_dir", "now a file")
    (root / "was_link").unlink()
    write(root, "was_link", "now a file")
    plan = {p: op for op, p in changes(ws, snap.id)}
    assert plan["was_file"] == "M" and plan["was_dir"] == "M" and plan["was_link"] == "M"
    restore_exactly(ws, snap.id)
    assert tree_state(root) == before


def test_symlinks_recorded_by_target_never_followed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside, "secret.txt", "do not touch")
    os.symlink(outside, root / "out")
    os.symlink("missing/target", root / "dangling")
    os.symlink(outside / "secret.txt", root / "outfile")
    ws = Workspace(root)
    snap = ws.snapshot()
    by_path = {e.path: e for e in snap.entries}
    assert by_path["out"].target == str(outside)
    assert by_path["dangling"].target == "missing/target"
    assert by_path["outfile"].type == "symlink"
    assert not any(e.path.startswith("out/") for e in snap.entries)
    outside_before = tree_state(outside)
    for name in ("out", "dangling", "outfile"):
        (root / name).unlink()
    write(root, "out", "a file where the link was")
    restore_exactly(ws, snap.id)
    assert os.readlink(root / "dangling") == "missing/target"
    assert os.readlink(root / "out") == str(outside)
    assert tree_state(outside) == outside_before


def test_large_files_listed_and_never_touched(root: Path) -> None:
    write(root, "small.txt", "s")
    write(root, "big.bin", b"x" * 100)
    ws = Workspace(root, max_file_bytes=50)
    snap = ws.snapshot()
    assert snap.large == ["big.bin"]
    assert [e.path for e in snap.entries] == ["small.txt"]
    write(root, "big.bin", b"y" * 200)
    assert changes(ws, snap.id) == []
    (root / "big.bin").unlink()
    assert changes(ws, snap.id) == []
    restore_exactly(ws, snap.id)
    assert not (root / "big.bin").exists()


def test_ignored_and_excluded_paths_untouched(root: Path) -> None:
    write(root, ".gitignore", "*.log\nbuild/\n")
    write(root, "app.py", "print()")
    write(root, "debug.log", "old log")
    write(root, "build/out.o", "obj")
    write(root, "secrets/key", "k")
    ws = Workspace(root, exclude=("secrets",))
    snap = ws.snapshot()
    assert snap.ignored == ["build", "debug.log"]
    assert "secrets" in snap.excluded
    write(root, "debug.log", "new log")
    write(root, "build/new.o", "new obj")
    write(root, "secrets/key", "changed key")
    write(root, "secrets/other", "new secret")
    write(root, "fresh.log", "created after")
    ignored_state = {
        k: v for k, v in tree_state(root).items() if not k.startswith((b"app", b".gitignore"))
    }
    write(root, "app.py", "broken")
    assert changes(ws, snap.id) == [("M", "app.py")]
    restore_exactly(ws, snap.id)
    after = {k: v for k, v in tree_state(root).items() if not k.startswith((b"app", b".gitignore"))}
    assert after == ignored_state


def test_git_dirs_excluded_and_nested_repos_captured(root: Path) -> None:
    write(root, ".git/HEAD", "ref: refs/heads/main\n")
    write(root, "vendor/lib/.git", "gitdir: ../../.git/modules/lib\n")
    write(root, "vendor/lib/code.py", "x = 1")
    write(root, "nested/.git/config", "[core]\n")
    write(root, "nested/file.txt", "inside a nested repo")
    ws = Workspace(root)
    snap = ws.snapshot()
    paths = {e.path for e in snap.entries}
    assert paths == {"vendor/lib/code.py", "nested/file.txt"}
    assert set(snap.excluded) >= {".git", "vendor/lib/.git", "nested/.git"}
    assert ws.store_dir == str(root / ".git" / "worksnap")  # where git clean never looks
    git_state = [(root / ".git", ("worksnap",)), (root / "nested" / ".git", ())]
    git_before = tuple(tree_state(path, skip=skip) for path, skip in git_state)
    write(root, ".git/HEAD", "changed by git")
    write(root, "nested/.git/config", "changed too")
    (root / "vendor" / "lib" / "code.py").unlink()
    git_now = tuple(tree_state(path, skip=skip) for path, skip in git_state)
    assert changes(ws, snap.id) == [("D", "vendor/lib/code.py")]
    restore_exactly(ws, snap.id)
    assert tuple(tree_state(path, skip=skip) for path, skip in git_state) == git_now
    assert git_now != git_before


def test_empty_dirs_recreated_and_added_dirs_removed(root: Path) -> None:
    (root / "empty" / "nested").mkdir(parents=True)
    ws = Workspace(root)
    snap = ws.snapshot()
    (root / "empty" / "nested").rmdir()
    (root / "junk" / "deeper").mkdir(parents=True)
    write(root, "junk/file", "x")
    assert changes(ws, snap.id) == [
        ("D", "empty/nested"),
        ("A", "junk"),
        ("A", "junk/deeper"),
        ("A", "junk/file"),
    ]
    restore_exactly(ws, snap.id)
    assert (root / "empty" / "nested").is_dir()
    assert not (root / "junk").exists()


def test_added_dir_holding_ignored_files_is_kept(root: Path) -> None:
    write(root, ".gitignore", "*.tmp\n")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "work/a.py", "a")
    write(root, "work/cache.tmp", "ignored, must survive")
    assert changes(ws, snap.id) == [("A", "work/a.py")]
    restore_exactly(ws, snap.id)
    assert (root / "work" / "cache.tmp").read_text() == "ignored, must survive"


def test_restoring_gitignore_does_not_delete_what_it_ignores(root: Path) -> None:
    write(root, ".gitignore", "*.log\n")
    write(root, "a.py", "a")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, ".gitignore", "")  # the agent dropped the rule ...
    write(root, "run.log", "precious output")  # ... and now this is not ignored
    plan = changes(ws, snap.id)
    assert plan == [("M", ".gitignore")]
    restore_exactly(ws, snap.id)
    assert (root / "run.log").read_text() == "precious output"


def test_content_round_trips_byte_exact(root: Path) -> None:
    contents = {
        "crlf.txt": b"line one\r\nline two\r\n",
        "bom.txt": b"\xef\xbb\xbfwith bom\n",
        "binary.bin": bytes(range(256)) * 4,
        "latin1.txt": b"caf\xe9 na\xefve\n",
        "empty": b"",
        "no-newline": b"end",
    }
    for name, data in contents.items():
        write(root, name, data)
    ws = Workspace(root)
    snap = ws.snapshot()
    for name in contents:
        write(root, name, b"clobbered\n")
    restore_exactly(ws, snap.id)
    for name, data in contents.items():
        assert (root / name).read_bytes() == data


@pytest.mark.parametrize(
    "name",
    [
        b"with space.txt",
        b" leading and trailing ",
        "unicod\u00e9 \u65e5\u672c.txt".encode(),
        b"tab\there",
        b"new\nline",
        b"back\\slash",
        b"-leading-dash",
        b"--",
        b"not-utf8-\xff\xfe",
        b"caf\xe9",
        b"dir \xe9/inner\xff",
    ],
)
def test_awkward_names_captured_and_restored_exactly(root: Path, name: bytes) -> None:
    write(root, name, b"content of " + name)
    ws = Workspace(root)
    snap = ws.snapshot()
    before = tree_state(root)
    assert {fs_path(e.path) for e in snap.entries} == {name}
    target = os.path.join(os.fsencode(root), name)
    os.unlink(target)
    assert [op for op, _ in changes(ws, snap.id)] == ["D"]
    restore_exactly(ws, snap.id)
    assert tree_state(root) == before
    with open(target, "wb") as f:
        f.write(b"modified")
    assert [op for op, _ in changes(ws, snap.id)] == ["M"]
    restore_exactly(ws, snap.id)
    assert tree_state(root) == before


def test_wrong_root_refused_with_nothing_changed(root: Path, tmp_path: Path) -> None:
    write(root, "a.txt", "a")
    store = tmp_path / "store"
    snap = Workspace(root, store=store).snapshot()
    other = tmp_path / "other"
    other.mkdir()
    write(other, "b.txt", "b")
    before = tree_state(other)
    with pytest.raises(InputError, match="belongs to"):
        Workspace(other, store=store).snapshot()
    with pytest.raises(ManifestError, match="belongs to"):
        Workspace(other, store=store).load(snap.id)
    assert tree_state(other) == before


def test_missing_object_refused_with_nothing_changed(root: Path) -> None:
    write(root, "a.txt", "original")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "a.txt", "edited")
    ws.close()
    store = DiskStore(str(root / ".worksnap"))
    file_digest = snap.entries[0].hash
    assert file_digest is not None
    pack, offset, size = store._load_index()[file_digest][:3]
    with open(store.paths.pack(pack), "r+b") as f:  # only the file's bytes, not the trees
        f.seek(offset)
        f.write(b"\0" * size)
    ws = Workspace(root)
    before = tree_state(root)
    with pytest.raises(ObjectError):
        ws.restore(snap.id)
    assert tree_state(root) == before
    for pack_file in (root / ".worksnap" / "packs").glob("*.pack"):
        pack_file.write_bytes(b"")  # the trees too: the snapshot itself is unreadable
    ws = Workspace(root)
    with pytest.raises(ManifestError, match="tree object"):
        ws.restore(snap.id)
    assert tree_state(root) == before


@pytest.mark.parametrize("stored", ["record", "format 1 manifest"])
def test_too_new_version_refused(
    root: Path, stored: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    snap = ws.snapshot()
    ws.close()
    if stored == "record":
        path = root / ".worksnap" / "snapshots" / f"{snap.id}.json"
        path.write_bytes(path.read_bytes().replace(b'"version":2', b'"version":99', 1))
    else:
        downgrade(root / ".worksnap")
        path = root / ".worksnap" / "manifests" / f"{snap.id}.json"
        data = unpacked(path.read_bytes())
        path.write_bytes(packed(data.replace(b'"version":1', b'"version":99', 1)))
    with pytest.raises(ManifestError, match="newer than this worksnap reads"):
        Workspace(root).load(snap.id)
    capsys.readouterr()
    assert main(["--root", str(root), "show", snap.id]) == 2
    err = capsys.readouterr().err
    # Not "upgrade worksnap": `worksnap upgrade` migrates a store, which cannot help here.
    assert err.endswith("; install a newer worksnap\n") and "upgrade" not in err, err


def test_failure_mid_apply_stops_and_reports_not_restored(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worksnap.apply import apply_plan

    for name in ("a", "b", "c"):
        write(root, f"{name}.txt", name)
    ws = Workspace(root)
    snap = ws.snapshot()
    for name in ("a", "b", "c"):
        write(root, f"{name}.txt", "edited " + name)
    plan = ws.plan_restore(ws.load(snap.id))
    real_rename = os.rename

    def failing_rename(src: object, dst: object, **kw: object) -> None:
        if dst == b"b.txt":
            raise OSError(28, "No space left on device")
        real_rename(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", failing_rename)  # the OS boundary
    result = apply_plan(str(root), plan, ws.store.read_chunks)
    assert result.restored == ["a.txt"]
    assert result.not_restored == ["b.txt", "c.txt"]
    assert result.error == "b.txt: No space left on device"
    assert (root / "c.txt").read_text() == "edited c"
    assert sorted(os.listdir(root)) == [".worksnap", "a.txt", "b.txt", "c.txt"]


def test_failed_restore_rolls_back(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "a.txt", "edited a")
    write(root, "b.txt", "edited b")
    write(root, "added.txt", "added")
    before = tree_state(root)
    real_rename = os.rename
    calls = {"n": 0}

    def rename_fails_once(src: object, dst: object, **kw: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(5, "Input/output error")
        real_rename(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename_fails_once)  # the OS boundary
    result = ws.restore(snap.id)
    assert not result.ok and result.rolled_back
    assert result.error is not None and "Input/output error" in result.error
    assert tree_state(root) == before
    assert not (root / ".worksnap" / "journal.json").exists()


def test_refs_resolve(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    one = ws.snapshot(step=1)
    two = ws.snapshot(step=2)
    three = ws.snapshot(step=1)
    assert ws.resolve("latest") == three.id
    assert ws.resolve("step:1") == three.id
    assert ws.resolve("step:2") == two.id
    assert ws.resolve(one.id) == one.id
    # An all-digit prefix reads as a step and is refused with a hint (tested below); ids
    # are random, so about one in 40 starts with 8 digits: take a prefix with a letter.
    prefix = next((one.id[:n] for n in range(8, len(one.id)) if not one.id[:n].isdigit()), one.id)
    assert ws.resolve(prefix) == one.id
    with pytest.raises(InputError, match="no snapshot"):
        ws.resolve("step:9")
    with pytest.raises(InputError, match="no snapshot"):
        ws.resolve("zzzz")
    with pytest.raises(InputError, match="no snapshot"):
        ws.resolve("")
    with pytest.raises(InputError, match="did you mean step:2"):
        ws.resolve("2")
    # Two stored ids sharing a 4-character prefix (planted: their manifests are not read).
    manifests = root / ".worksnap" / "manifests"
    manifests.mkdir()  # as in a store from before format 2
    for twin in ("abcd00000001", "abcd00000002"):
        (manifests / f"{twin}.json").write_bytes(b"")
    with pytest.raises(InputError, match="too short: give at least 4 characters"):
        ws.resolve("abc")
    with pytest.raises(InputError, match="ambiguous: it matches 2 snapshots"):
        ws.resolve("abcd")
    assert ws.resolve("abcd00000002") == "abcd00000002"


def test_root_guard_refuses_home_and_filesystem_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError, match="home"):
        Workspace("/")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(InputError, match="home"):
        Workspace(tmp_path)
    assert Workspace(tmp_path, force=True).root == str(tmp_path.resolve())


def test_plan_is_sorted_and_counts(root: Path) -> None:
    write(root, "b.txt", "b")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "a.txt", "a")
    write(root, "c.txt", "c")
    (root / "b.txt").unlink()
    plan = ws.plan_restore(ws.load(snap.id))
    assert [c.path for c in plan.changes] == ["a.txt", "b.txt", "c.txt"]
    assert [c.op for c in plan.changes] == [Op.ADDED, Op.DELETED, Op.ADDED]
    assert plan.counts() == {"M": 0, "A": 2, "D": 1, "B": 0}


def test_plan_never_changes_a_tree_with_a_restore_pending(root: Path) -> None:
    import json

    write(root, "a.txt", "target state")
    ws = Workspace(root)
    target = ws.snapshot()
    write(root, "a.txt", "edited")
    pre = ws.snapshot(kind="before")  # stands in for the pre-restore snapshot
    journal = {"target": target.id, "pre_restore": pre.id, "pid": 1, "host": "gone"}
    (root / ".worksnap" / "journal.json").write_text(json.dumps(journal))
    write(root, "a.txt", "half-restored")  # where the killed restore stopped
    before = tree_state(root)
    with pytest.raises(RecoveryError, match="worksnap recover"):
        ws.plan_restore(ws.load(target.id))
    assert tree_state(root) == before
    assert (root / ".worksnap" / "journal.json").exists()


def test_restore_of_selected_paths_only(root: Path) -> None:
    write(root, "src/app.py", "good app")
    write(root, "src/lib.py", "good lib")
    write(root, "docs/guide.md", "good guide")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "src/app.py", "broken app")
    write(root, "src/lib.py", "edited lib, keep it")
    write(root, "src/new.py", "new file, keep it")
    (root / "docs" / "guide.md").unlink()
    (root / "docs").rmdir()
    write(root, "notes.txt", "keep me too")
    plan = ws.plan_restore(ws.load(snap.id), paths=["src/app.py", "docs/guide.md"])
    assert [(c.op.value, c.path) for c in plan.changes] == [
        ("D", "docs"),
        ("D", "docs/guide.md"),
        ("M", "src/app.py"),
    ]
    assert ws.restore(snap.id, paths=[str(root / "src" / "app.py"), "docs"]).ok
    assert (root / "src" / "app.py").read_text() == "good app"
    assert (root / "docs" / "guide.md").read_text() == "good guide"
    assert (root / "src" / "lib.py").read_text() == "edited lib, keep it"
    assert (root / "src" / "new.py").exists()
    assert (root / "notes.txt").exists()
    with pytest.raises(InputError, match="not a path inside"):
        ws.plan_restore(ws.load(snap.id), paths=["../elsewhere"])


def test_selected_directory_removal_only_when_all_of_it_is_selected(root: Path) -> None:
    write(root, "keep.txt", "k")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "junk/a.txt", "a")
    write(root, "junk/b.txt", "b")
    plan = ws.plan_restore(ws.load(snap.id), paths=["junk/a.txt"])
    assert [(c.op.value, c.path) for c in plan.changes] == [("A", "junk/a.txt")]
    plan = ws.plan_restore(ws.load(snap.id), paths=["junk"])
    assert [(c.op.value, c.path) for c in plan.changes] == [
        ("A", "junk"),
        ("A", "junk/a.txt"),
        ("A", "junk/b.txt"),
    ]


def _descriptors() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            pass
    return sorted(found)


@pytest.mark.parametrize("watch", [False, True])
def test_a_workspace_dropped_unclosed_releases_its_descriptors(root: Path, watch: bool) -> None:
    # A runtime that makes a workspace per step and never closes it must not run out
    # of descriptors (the usual limit is 1024), as a dropped file object closes its own.
    write(root, "a.txt", "0")
    Workspace(root).close()
    gc.collect()  # what other tests dropped
    before = _descriptors()
    for step in range(5):
        write(root, "a.txt", str(step))
        ws = Workspace(root, watch=watch)
        first = ws.snapshot()
        write(root, "b.txt", str(step))
        assert ws.restore(first.id).ok
        del ws
    gc.collect()
    assert _descriptors() == before


def _in_threads(read: Callable[[Workspace, int], object], shared: Workspace) -> list[str]:
    """Runs `read(view, seed)` in four threads, each on its own `shared.view` (what
    `daemon.WorkspacePool.open` gives reading commands), interleaving every few bytecodes
    (a tiny switch interval); returns what failed."""
    failures: list[str] = []

    def run(seed: int) -> None:
        view = shared.view(session="default", progress=None)
        for n in range(150):
            try:
                read(view, seed + n)
            except Exception as exc:  # any failure is the finding
                failures.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return failures


def _snapshots(root: Path, count: int) -> list[str]:
    ids = []
    with Workspace(root) as ws:
        for n in range(count):
            write(root, f"f{n}", f"{n}\n" * 50)
            ids.append(ws.snapshot().id)
    return ids


def test_reading_commands_sharing_a_workspace_across_threads_never_fail(root: Path) -> None:
    # Two loads at once evicted the same remembered manifest ("dictionary changed size",
    # a KeyError): an error to the client.
    ids = _snapshots(root, 12)
    with Workspace(root) as shared:
        failures = _in_threads(lambda view, n: view.load(ids[n % 12]), shared)
    assert failures == []


def test_a_reading_thread_keeps_its_store_descriptor_through_a_close_or_a_new_store(
    root: Path, tmp_path: Path
) -> None:
    # A store directory replaced (found by `refresh`) or the daemon's `drop_all` after a
    # failed command closed the store's descriptor under the other reading threads:
    # "Bad file descriptor", snapshots listed as damaged. Here both happen all along,
    # the store swapped with an identical copy (RENAME_EXCHANGE: always a sound store).
    ids = _snapshots(root, 6)
    store, twin = root / ".worksnap", tmp_path / "twin"
    shutil.copytree(store, twin, symlinks=True)
    libc = ctypes.CDLL(None, use_errno=True)
    stop, swaps = threading.Event(), []
    shared = Workspace(root)

    def disturb() -> None:
        while not stop.is_set():
            assert libc.renameat2(-100, bytes(store), -100, bytes(twin), 2) == 0  # exchange
            shared.close()
            swaps.append(1)
            time.sleep(0.001)

    def read(view: Workspace, n: int) -> None:
        assert {s.id for s in view.list()} == set(ids), view.problems
        assert view.file_bytes(ids[5], "f5")[1] == b"5\n" * 50
        view.load(ids[n % 6])

    disturber = threading.Thread(target=disturb)
    disturber.start()
    try:
        failures = _in_threads(read, shared)
    finally:
        stop.set()
        disturber.join()
        shared.close()
    assert failures == []
    assert len(swaps) > 10  # the store was swapped and closed all along (not failed at once)


def test_each_reading_thread_is_told_the_problems_of_its_own_listing(root: Path) -> None:
    # `problems` was the shared catalog's: one thread's `list` read another's. Snapshot
    # X's record flips between sound and damaged: each listing names X or reports it.
    ids = _snapshots(root, 6)
    record = Path(StorePaths(str(root / ".worksnap")).record(ids[2]))
    good, stop, flips = record.read_bytes(), threading.Event(), []

    def flip() -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            flipped = record.with_name(record.name + ".tmp-flip")
            flipped.write_bytes(b"{damaged" if n % 2 else good)
            os.replace(flipped, record)
            flips.append(n)

    def read(view: Workspace, n: int) -> None:
        listed = ids[2] in {s.id for s in view.list()}
        assert listed != any(ids[2] in line for line in view.problems), view.problems

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        with Workspace(root) as shared:
            failures = _in_threads(read, shared)
    finally:
        stop.set()
        flipper.join()
    assert failures == []
    assert len(flips) > 10  # the record flipped all along


@pytest.mark.parametrize("gc_before", ["load_id", "check"])
def test_verify_during_a_gc_finds_no_damage_in_what_the_gc_removed(
    root: Path, gc_before: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verify lists the snapshots, loads each, then reads their objects, with no lock: a gc
    # in between made a listed snapshot "unknown" (an error) or its swept objects
    # "missing" (damage reported in a sound store). Over 1 MiB, each version is a file of
    # its own that the gc unlinks (a pack read before would still be open, and readable).
    with Workspace(root) as ws:
        for n in range(3):
            write(root, "f", f"version {n}\n" * 150_000)
            ws.snapshot()
    with Workspace(root) as reader, Workspace(root) as other:
        target = reader._catalog if gc_before == "load_id" else reader.store
        original = getattr(target, gc_before)

        def gc_then(*args: object, **kwargs: object) -> object:
            monkeypatch.setattr(target, gc_before, original)  # once
            assert other.gc(Retention(keep_last=1)).snapshots == 2
            return original(*args, **kwargs)

        monkeypatch.setattr(target, gc_before, gc_then)
        assert reader.verify() == []
        assert getattr(target, gc_before) == original  # the gc did run in between
