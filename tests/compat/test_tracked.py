"""Files git tracks belong to the workspace whatever the ignore rules say, as `git status` shows.

Random trees (treegen.py), in which some files git ignores are then added with
`git add -f` (in ignored directories too, at any depth). worksnap must capture
exactly the files `git ls-files` tracks (those on disk) plus what `git ls-files
--others --exclude-standard` lists as untracked, and everything it calls ignored
must be listed by `git status --porcelain --ignored` (a directory as itself when git
shows it whole). Raise the number of trees with WORKSNAP_COMPAT_TREES.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from worksnap import Workspace
from worksnap.paths import fs_path
from worksnap.workspace import Seams

from .gitrun import GIT, clean_git_env, git, split_z, untracked
from .harness import capture
from .treegen import generate

pytestmark = [
    pytest.mark.slow,  # compared with real git, on random trees
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

TREES = int(os.environ.get("WORKSNAP_COMPAT_TREES", "300")) // 5


def _status_ignored(top: Path) -> set[bytes]:
    out = git(top, "status", "--porcelain=v1", "-z", "--ignored")
    found = set()
    for record in split_z(out):
        if record.startswith(b"!! "):
            found.add(record[3:].rstrip(b"/"))
    return found


def _holds_no_file(top: Path, path: bytes) -> bool:
    """An empty directory (or one holding only directories): git never lists one."""
    full = os.path.join(os.fsencode(top), path)
    if os.path.islink(full) or not os.path.isdir(full):
        return False
    return all(not files for _, _, files in os.walk(full))


def _on_disk(top: Path, path: bytes) -> bool:
    full = os.path.join(os.fsencode(top), path)
    return os.path.islink(full) or os.path.isfile(full)


def _repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, exclude: str = "", gitignore: str = ""
) -> Path:
    """A new repository at `tmp_path/tree` with these rules, in a clean git environment."""
    clean_git_env(monkeypatch, tmp_path / "home")
    top = tmp_path / "tree"
    top.mkdir()
    git(top, "init", "-q")
    if exclude:
        (top / ".git" / "info" / "exclude").write_text(exclude)
    if gitignore:
        (top / ".gitignore").write_text(gitignore)
    return top


def _tracked_file_now_a_directory(top: Path) -> None:
    """`x y` tracked as a file (`git add -f`), now a directory holding `docs/a.txt`."""
    (top / "x y").write_text("a file, tracked\n")
    git(top, "add", "-f", "--", "x y")
    (top / "x y").unlink()
    (top / "x y" / "docs").mkdir(parents=True)
    (top / "x y" / "docs" / "a.txt").write_text("ignored by git\n")


@pytest.mark.parametrize("seed", range(TREES))
def test_tracked_files_in_ignored_places(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    xdg = clean_git_env(monkeypatch, home)
    top = tmp_path / "tree"
    top.mkdir()
    tree = generate(seed + 10_000)
    btop = os.fsencode(top)
    tree.build(btop)
    tree.setup_git(btop, os.fsencode(home), os.fsencode(xdg))
    ignored_files = [
        p
        for p in split_z(git(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard"))
        if not any(p.startswith(r + b"/") for r in tree.repos if r)
    ]
    rnd = random.Random(seed)
    chosen = [p for p in ignored_files if rnd.random() < 0.4]
    for path in chosen:
        git(top, "add", "-f", "--", path)
    tracked = {p for p in split_z(git(top, "ls-files", "-z", "--cached")) if _on_disk(top, p)}
    expected = tracked | untracked(btop)
    captured, ignored = capture(top, tmp_path / "store")
    shown = _status_ignored(top)
    wrong_ignored = [
        p
        for p in ignored
        if p in tracked
        or (
            not any(p == s or p.startswith(s + b"/") for s in shown)
            and not any(p.startswith(r + b"/") or p == r for r in tree.repos if r)
        )
    ]
    if captured != expected or wrong_ignored:
        pytest.fail(
            f"worksnap disagrees with git about tracked files (seed {seed})\n"
            f"{tree.describe()}\nadded with -f: {sorted(chosen)}\n"
            f"captured, not tracked nor untracked: {sorted(captured - expected)}\n"
            f"tracked or untracked, not captured: {sorted(expected - captured)}\n"
            f"ignored by worksnap, not shown ignored by git: {sorted(wrong_ignored)}",
            pytrace=False,
        )


def test_a_listing_made_outside_tracked_only_mode_is_not_taken_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory entered normally, then for git's tracked files only, is listed again.

    Found by the per-process differential walk (seed 14): `x y` is tracked as a file but
    is an ignored directory on disk (entered whole), then `git add -f` of a file inside it
    drops that entry (entered for tracked files only). The listing cached the first time
    said `docs` was a directory to capture: taken again, it captured what git ignores.
    """
    top = _repo(tmp_path, monkeypatch, exclude="x*\n")
    _tracked_file_now_a_directory(top)
    (top / "x y" / "keep").mkdir()
    (top / "x y" / "keep" / "t.txt").write_text("to be tracked\n")
    time.sleep(0.05)  # older than the racy margin below: listings are cached

    def cached(store: Path) -> tuple[set[bytes], list[bytes]]:
        with Workspace(top, store=store, seams=Seams(racy_margin_ns=10_000_000)) as ws:
            manifest = ws.snapshot()  # (a capture that stores nothing makes no store)
        return {fs_path(e.path) for e in manifest.entries}, [fs_path(p) for p in manifest.ignored]

    store = tmp_path / "store"
    cached(store)  # lists `x y` as entered whole, and caches that listing
    git(top, "add", "-f", "--", "x y/keep/t.txt")  # the file entry `x y` goes
    captured, ignored = cached(store)
    fresh, fresh_ignored = capture(top, tmp_path / "fresh-store")
    assert (captured, ignored) == (fresh, fresh_ignored)
    assert captured == {b"x y/keep/t.txt"}
    assert b"x y/docs" in ignored


def test_a_path_tracked_as_a_file_that_is_now_an_ignored_directory_stays_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git tracks `x y` as a file; on disk it is a directory its ignore rules exclude.

    git sees the file deleted and the directory ignored, contents and all: a gitlink
    (a submodule's entry) is the only tracked path git enters as a directory.
    """
    top = _repo(tmp_path, monkeypatch, exclude="x*\n")
    _tracked_file_now_a_directory(top)
    (top / "kept.txt").write_text("untracked, not ignored\n")
    # A gitlink at an ignored path: its directory is entered, as before.
    (top / "xsub").mkdir()
    (top / "xsub" / "inside.txt").write_text("in a submodule's place\n")
    commit = "1" * 40
    git(top, "update-index", "--add", "--cacheinfo", f"160000,{commit},xsub")
    others = git(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
    assert split_z(others) == [b"x y/docs/a.txt"]
    captured, ignored = capture(top, tmp_path / "store")
    assert captured == {b"kept.txt", b"xsub/inside.txt"}
    assert b"x y" in ignored


def test_a_watched_workspace_sees_a_gitlink_become_a_file_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same path set, one entry's mode changed: the ignored directory is decided again."""
    top = _repo(tmp_path, monkeypatch, exclude="x*\n")
    (top / "xsub").mkdir()
    (top / "xsub" / "inside.txt").write_text("in a submodule's place\n")
    git(top, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},xsub")
    with Workspace(top, store=tmp_path / "store", watch=True) as ws:
        assert {fs_path(e.path) for e in ws.snapshot().entries} == {b"xsub/inside.txt"}
        git(top, "update-index", "--force-remove", "xsub")
        blob = git(top, "hash-object", "-w", "--stdin", stdin=b"").strip().decode()
        git(top, "update-index", "--add", "--cacheinfo", f"100644,{blob},xsub")
        after = ws.snapshot()
    assert [e.path for e in after.entries] == []
    assert (set(), [b"xsub"]) == capture(top, tmp_path / "fresh-store")
    assert after.ignored == ["xsub"]


def _gitlink(top: Path, path: str) -> None:
    git(top, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},{path}")


def test_a_gitlink_inside_an_ignored_directory_is_entered_whole_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`vendor/` is entered for git's files only; its gitlink `vendor/xsub` whole, as `xsub`."""
    top = _repo(tmp_path, monkeypatch, gitignore="xsub\nvendor/\n*.o\n")
    for where in ("xsub", "vendor/xsub"):
        (top / where / "deep").mkdir(parents=True)
        (top / where / "inside.txt").write_text("in a submodule's place\n")
        (top / where / "deep" / "b.o").write_text("ignored by the rules above it\n")
        _gitlink(top, where)
    (top / "vendor" / "other.txt").write_text("untracked in an ignored directory\n")
    captured, ignored = capture(top, tmp_path / "store")
    assert captured == {b".gitignore", b"xsub/inside.txt", b"vendor/xsub/inside.txt"}
    assert {b"vendor/other.txt", b"xsub/deep/b.o", b"vendor/xsub/deep/b.o"} <= set(ignored)


def test_the_audit_is_not_fooled_by_a_change_to_gits_index_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git add -f`, or a gitlink made a file entry: no file changed, nothing was missed."""
    top = _repo(tmp_path, monkeypatch, exclude="*.log\nx*\n")
    (top / "a.log").write_text("ignored\n")
    (top / "xsub").mkdir()
    (top / "xsub" / "inside.txt").write_text("in a submodule's place\n")
    _gitlink(top, "xsub")
    with Workspace(top, store=tmp_path / "store", watch=True) as ws:
        ws.snapshot()
        assert ws.audit() == []
        git(top, "add", "-f", "a.log")
        assert ws.audit() == []
        git(top, "update-index", "--force-remove", "xsub")
        blob = git(top, "hash-object", "-w", "--stdin", stdin=b"").strip().decode()
        git(top, "update-index", "--add", "--cacheinfo", f"100644,{blob},xsub")
        assert ws.audit() == []
        after = ws.snapshot()
    assert {fs_path(e.path) for e in after.entries} == {b"a.log"}
    assert after.ignored == ["xsub"]


def test_a_restore_removes_what_was_added_in_a_gitlink_at_an_ignored_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target captured the directory whole: a file not in it did not exist then."""
    top = _repo(tmp_path, monkeypatch, gitignore="x*\nvendor/\n")
    for where in ("xsub", "vendor/xsub"):
        (top / where).mkdir(parents=True)
        (top / where / "inside.txt").write_text("v1\n")
        _gitlink(top, where)
    (top / "vendor" / "untracked.txt").write_text("ignored: never touched\n")
    with Workspace(top, store=tmp_path / "store") as ws:
        snap = ws.snapshot()
        for where in ("xsub", "vendor/xsub"):
            (top / where / "inside.txt").write_text("v2\n")
            (top / where / "new.txt").write_text("added after the snapshot\n")
            (top / where / "newdir").mkdir()
            (top / where / "xtra").mkdir()  # ignored there too, by `x*`: never touched
        (top / "vendor" / "later.txt").write_text("ignored, new: never touched\n")
        ws.restore(snap.id)
    assert capture(top, tmp_path / "fresh-store")[0] == {
        b".gitignore",
        b"xsub/inside.txt",
        b"vendor/xsub/inside.txt",
    }
    for where in ("xsub", "vendor/xsub"):
        assert (top / where / "inside.txt").read_text() == "v1\n"
        assert sorted(os.listdir(top / where)) == ["inside.txt", "xtra"]
    assert sorted(os.listdir(top / "vendor")) == ["later.txt", "untracked.txt", "xsub"]


def _commit(top: Path) -> None:
    git(top, "add", "-A")
    git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")


def _git_view(top: Path) -> set[bytes]:
    """What git would have in a snapshot: the files it tracks on disk, and the untracked
    (those of an untracked nested repository as git run in it lists them)."""
    tracked = {p for p in split_z(git(top, "ls-files", "-z")) if _on_disk(top, p)}
    return tracked | untracked(os.fsencode(top))


def _tracked_folder_made_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`sub/tracked.txt` committed (`*.log` ignored), then `git init` in `sub`, whose own
    rules ignore `*.txt`; `sub/new.txt` and `sub/x.log` made after."""
    top = _repo(tmp_path, monkeypatch, gitignore="*.log\n")
    (top / "sub").mkdir()
    (top / "sub" / "tracked.txt").write_text("tracked\n")
    _commit(top)
    git(top / "sub", "init", "-q")
    (top / "sub" / ".git" / "info" / "exclude").write_text("*.txt\n")
    (top / "sub" / "new.txt").write_text("untracked\n")
    (top / "sub" / "x.log").write_text("ignored\n")
    return top


def test_a_directory_git_tracks_files_in_is_walked_under_its_rules_with_a_git_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git init` (or a clone) in a directory the repository tracks files in.

    git's walk asks the index before it looks for a nested repository: a directory it
    tracks something in is its own, under its own rules (`sub/x.log` ignored, `sub/new.txt`
    untracked). worksnap took it for a nested repository: it captured the ignored file,
    which a restore then deleted, and left out the untracked one (a review).
    """
    top = _tracked_folder_made_a_repository(tmp_path, monkeypatch)
    (top / "other").mkdir()  # a nested repository git tracks nothing in keeps its own rules
    git(top / "other", "init", "-q")
    (top / "other" / ".git" / "info" / "exclude").write_text("*.txt\n")
    (top / "other" / "a.txt").write_text("ignored inside\n")
    (top / "other" / "b.log").write_text("not ignored inside\n")
    assert b"sub/x.log" in _status_ignored(top)
    captured, ignored = capture(top, tmp_path / "store")
    assert captured == _git_view(top)  # nested repositories' files under their own rules
    assert {b"sub/new.txt", b"other/b.log"} <= captured
    assert b"sub/x.log" in ignored
    # The restore planner judges as the scan does: the ignored file is no file added since.
    with Workspace(top, store=tmp_path / "store") as ws:
        snap = ws.snapshot()
        (top / "sub" / "y.log").write_text("ignored too\n")
        (top / "other" / "c.txt").write_text("ignored inside too\n")
        (top / "sub" / "z.txt").write_text("added since\n")
        assert [(c.op.value, c.path) for c in ws.plan_restore(snap).changes] == [("A", "sub/z.txt")]
        ws.restore(snap.id)
    assert (top / "sub" / "y.log").exists() and (top / "other" / "c.txt").exists()
    assert not (top / "sub" / "z.txt").exists()


def test_a_sparse_directory_entry_tracks_nothing_git_would_call_untracked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse index keeps `out/` for what is outside the cone: not every path below it.

    A file made there that the rules ignore is ignored for git (`!! out/a.o`); worksnap
    took everything below the entry as tracked, captured it, and a restore overwrote it
    (a review).
    """
    top = _repo(tmp_path, monkeypatch, gitignore="*.o\n")
    for name in ("in/f", "out/g", "out/deep/h"):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(name)
    _commit(top)
    git(top, "sparse-checkout", "set", "--cone", "--sparse-index", "in")
    assert b"out/" in split_z(git(top, "ls-files", "-z", "--sparse"))  # a sparse entry
    (top / "out" / "deep").mkdir(parents=True)
    (top / "out" / "a.o").write_text("build output\n")
    (top / "out" / "deep" / "b.o").write_text("build output\n")
    (top / "out" / "new.c").write_text("untracked\n")
    assert {b"out/a.o", b"out/deep/b.o"} <= _status_ignored(top)
    captured, ignored = capture(top, tmp_path / "store")
    assert captured == _git_view(top)
    assert {"out/a.o", "out/deep/b.o"} <= {os.fsdecode(p) for p in ignored}


@pytest.mark.parametrize("watch", [False, True], ids=["listing cache", "watched"])
def test_a_long_lived_workspace_decides_again_when_a_directory_becomes_a_repository_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, watch: bool
) -> None:
    """A directory with a `.git` is a nested repository only while git tracks nothing in it.

    Each step turns its rules over (the outer repository's, or its own) with no change
    to its listing, or with only its `.git` gone: every capture must be a fresh one's,
    and git's. The listing cache kept what a directory's children were under a nested
    repository's rules after its `.git` was removed.
    """
    top = _tracked_folder_made_a_repository(tmp_path, monkeypatch)
    blob = git(top, "hash-object", "-w", "--", "sub/tracked.txt").strip().decode()
    steps = {
        "tracked": lambda: None,
        "untracked": lambda: git(top, "rm", "-r", "-q", "--cached", "sub"),
        "tracked again": lambda: git(
            top, "update-index", "--add", "--cacheinfo", f"100644,{blob},sub/tracked.txt"
        ),
        "untracked again": lambda: git(top, "rm", "-r", "-q", "--cached", "sub"),
        "no .git": lambda: shutil.rmtree(top / "sub" / ".git"),
    }
    with Workspace(top, store=tmp_path / "store", watch=watch, seams=Seams(racy_margin_ns=0)) as ws:
        for n, (step, change) in enumerate(steps.items()):
            change()
            for _ in range(2):  # the second from what the first recorded
                mine = {fs_path(e.path) for e in ws.snapshot().entries}
                fresh, _ = capture(top, tmp_path / f"fresh-{n}")
                assert (step, mine) == (step, fresh)
                assert (step, mine) == (step, _git_view(top))
