"""The git index reader against `git ls-files`, in a clean git environment.

Every index here is written by real git (versions 2, 3 and 4, split, sparse,
SHA-256, linked work trees, submodules); damaged ones are git's, then damaged.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worksnap.errors import InputError
from worksnap.gitindex import (
    INDEX_MAX_BYTES,
    GitDirs,
    find_git_dirs,
    read_index,
    tracked_paths,
)

from .compat.gitrun import GIT, clean_git_env, git, init_repo, split_z
from .conftest import write

pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty repository with an identity, in a git environment of the test's own."""
    clean_git_env(monkeypatch, tmp_path / "home")
    top = tmp_path / "repo"
    top.mkdir()
    init_repo(top)
    _identify(top)
    return top


def _identify(top: Path) -> None:
    git(top, "config", "user.name", "Test")
    git(top, "config", "user.email", "test@example.com")


def ls_files(top: Path | bytes) -> set[bytes]:
    """What git lists as tracked; a sparse index's directories as themselves."""
    return set(split_z(git(top, "ls-files", "-z", "--cached", "--sparse")))


def tagged(top: Path, tag: bytes) -> set[bytes]:
    """Paths `git ls-files -t` tags with `tag` (S: skip-worktree)."""
    lines = split_z(git(top, "ls-files", "-z", "-t", "--cached", "--sparse"))
    return {line[2:] for line in lines if line[:2] == tag + b" "}


def own(top: Path) -> frozenset[bytes]:
    dirs = find_git_dirs(top)
    assert dirs is not None
    return tracked_paths(dirs.git_dir)


def index_info(top: Path, entries: list[tuple[str, bytes]], *, stage: int = 0) -> None:
    """Adds entries (mode, path) for the empty blob, without files: any name, any number."""
    blob = git(top, "hash-object", "-w", "--stdin", stdin=b"").strip()
    suffix = b" %d" % stage if stage else b""
    records = b"".join(
        mode.encode() + b" " + blob + suffix + b"\t" + path + b"\0" for mode, path in entries
    )
    git(top, "update-index", "-z", "--add", "--index-info", stdin=records)


def set_version(top: Path, version: int) -> None:
    git(top, "update-index", "--index-version", str(version))
    written = int.from_bytes((top / ".git" / "index").read_bytes()[4:8], "big")
    assert written == version or (version == 2 and written == 3)  # 3 if it has extended flags


def damage(top: Path, change: bytes) -> Path:
    """Writes `change` as the repository's index; returns the index path."""
    index = top / ".git" / "index"
    index.write_bytes(change)
    return index


def sealed(body: bytes) -> bytes:
    """`body` with a SHA-1 trailer that matches it, so only the damage inside is seen."""
    return body + hashlib.sha1(body).digest()


# -- what git tracks ---------------------------------------------------------------

LONG = b"/".join([b"d" * 200] * 25) + b"/long-name.txt"  # over 4095 bytes: no length in flags


def populate(top: Path, *, extended: bool = True) -> dict[str, set[bytes]]:
    """A repository with every kind of entry; returns the paths that carry each flag.

    Without `extended`, no skip-worktree nor intent-to-add entry: git writes an
    index that has one as version 3 at least.
    """
    write(top, ".gitignore", "*.log\nbuild/\n")
    write(top, "src/main.py", "print()\n")
    write(top, b"caf\xe9/na\xefve \xff.txt", "latin-1 names\n")
    write(top, "gone.txt", "soon untracked\n")
    write(top, "fixtures/sample.log", "ignored, but forced in\n")
    write(top, "build/keep.o", "ignored directory, forced\n")
    write(top, "sparse/away.txt", "skip-worktree\n")
    write(top, "frozen.txt", "assume unchanged\n")
    git(top, "add", ".")
    git(top, "add", "-f", "fixtures/sample.log", "build/keep.o")
    git(top, "rm", "-q", "--cached", "gone.txt")
    git(top, "update-index", "--assume-unchanged", "frozen.txt")
    index_info(top, [("100644", LONG), ("100755", b"x" * 4094), ("100644", b"y" * 4095)])
    index_info(top, [("100644", b"many/%04d/entry-%d.txt" % (i % 97, i)) for i in range(3000)])
    for stage in (1, 2, 3):  # an unmerged path, as a conflicted merge leaves it
        index_info(top, [("100644", b"conflicted.txt")], stage=stage)
    if not extended:
        return {"skip": set(), "intent": set()}
    write(top, "later.txt", "intent to add\n")
    git(top, "add", "-N", "later.txt")
    git(top, "update-index", "--skip-worktree", "sparse/away.txt")
    return {"skip": {b"sparse/away.txt"}, "intent": {b"later.txt"}}


@pytest.mark.parametrize("version", [2, 3, 4])
def test_each_index_version_lists_what_git_lists(repo: Path, version: int) -> None:
    flagged = populate(repo, extended=version > 2)
    set_version(repo, version)
    contents = read_index(repo / ".git" / "index")
    assert contents is not None
    assert contents.version == version
    expected = ls_files(repo)
    assert contents.paths == expected
    assert own(repo) == expected
    assert contents.skip_worktree == flagged["skip"] == tagged(repo, b"S")
    assert contents.intent_to_add == flagged["intent"]
    assert contents.sparse_dirs == frozenset()
    assert {b"fixtures/sample.log", b"build/keep.o", LONG, b"conflicted.txt"} <= contents.paths
    assert b"gone.txt" not in contents.paths
    assert len(contents.paths) > 3000


def test_a_repository_with_no_index_tracks_nothing(repo: Path) -> None:
    assert not (repo / ".git" / "index").exists()
    assert read_index(repo / ".git" / "index") is None
    assert own(repo) == frozenset()


def test_the_environment_does_not_choose_the_index(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(repo, "mine.txt", "x")
    git(repo, "add", "mine.txt")
    other = tmp_path / "other-index"
    shutil.copy(repo / ".git" / "index", other)
    git(repo, "rm", "-q", "--cached", "mine.txt")
    # A hook or `git commit` sets these for git's own temporary index.
    monkeypatch.setenv("GIT_INDEX_FILE", str(other))
    monkeypatch.setenv("GIT_DIR", str(tmp_path))
    assert own(repo) == frozenset()


# No '.' nor '~' in a component: git refuses `.git`, `..` and (NTFS rules) `GIT~1`.
components = st.binary(min_size=1, max_size=12).filter(
    lambda c: not any(b in c for b in (b"/", b"\0", b".", b"~"))
)
names = st.lists(components, min_size=1, max_size=4).map(b"/".join)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(paths=st.sets(names, min_size=1, max_size=40))
def test_random_names_in_every_version(
    paths: set[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_git_env(monkeypatch, tmp_path / "home")
    # A path that is also a directory of another is a conflict git refuses: keep the file.
    files = {p for p in paths if not any(q.startswith(p + b"/") for q in paths)}
    top = Path(tempfile.mkdtemp(dir=tmp_path))
    init_repo(top)
    index_info(top, [("100644", p) for p in sorted(files)])
    for version in (2, 3, 4):
        if version == 3:  # extended flags from here on
            git(top, "update-index", "--skip-worktree", "--", os.fsdecode(min(files)))
        set_version(top, version)
        assert own(top) == ls_files(top) == files


# -- index layouts: split, sparse, SHA-256 -------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4])
def test_split_index_merges_its_shared_index(repo: Path, version: int) -> None:
    populate(repo, extended=version > 2)
    git(repo, "config", "core.splitIndex", "true")
    git(repo, "config", "splitIndex.maxPercentChange", "100")  # never fold it back
    git(repo, "update-index", "--index-version", str(version), "--split-index")
    # Replace, delete and add entries of the shared index from the split one.
    write(repo, "src/main.py", "print('changed')\n")
    git(repo, "add", "src/main.py")
    git(repo, "rm", "-q", "--cached", "frozen.txt", "fixtures/sample.log")
    write(repo, "added.txt", "new\n")
    git(repo, "add", "added.txt")
    if version > 2:
        git(repo, "update-index", "--no-skip-worktree", "sparse/away.txt")
        git(repo, "update-index", "--skip-worktree", "src/main.py")
    shared = list((repo / ".git").glob("sharedindex.*"))
    assert shared, "git did not split the index"
    contents = read_index(repo / ".git" / "index")
    assert contents is not None
    assert contents.version == version
    assert contents.paths == ls_files(repo)
    assert {b"added.txt", b"src/main.py"} <= contents.paths
    assert not {b"frozen.txt", b"fixtures/sample.log"} & contents.paths
    assert contents.skip_worktree == tagged(repo, b"S")
    assert contents.skip_worktree == ({b"src/main.py"} if version > 2 else set())

    for path in shared:
        path.unlink()
    with pytest.raises(InputError, match=r"shared index sharedindex\.\w+ is missing") as caught:
        read_index(repo / ".git" / "index")
    assert "\n" not in str(caught.value)


def gitlinks_of(top: Path) -> set[bytes]:
    """Paths git lists with mode 160000 (a submodule's commit)."""
    lines = split_z(git(top, "ls-files", "-z", "--stage"))
    return {line.split(b"\t", 1)[1] for line in lines if line.startswith(b"160000 ")}


@pytest.mark.parametrize(("version", "split"), [(2, False), (3, False), (4, False), (4, True)])
def test_gitlinks_are_told_from_files(repo: Path, version: int, split: bool) -> None:
    commit = "1" * 40
    index_info(repo, [("100644", b"a.txt"), ("120000", b"link"), ("100755", b"tool")])
    for path in ("sub", "deep/er/sub", "x"):
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    if split:
        git(repo, "config", "splitIndex.maxPercentChange", "100")
        git(repo, "update-index", "--split-index")
        # In the split part: a gitlink turned into a file, and a new gitlink.
        git(repo, "update-index", "--force-remove", "x")
        index_info(repo, [("100644", b"x")])
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},later")
    if version == 3:  # written as 3 only with extended flags: an intent to add
        write(repo, "new.txt", "intent to add\n")
        git(repo, "add", "-N", "new.txt")
    set_version(repo, version)
    contents = read_index(repo / ".git" / "index")
    assert contents is not None
    assert contents.gitlinks == gitlinks_of(repo)
    expected = {b"sub", b"deep/er/sub"} | ({b"later"} if split else {b"x"})
    assert contents.gitlinks == expected


def test_sparse_index_lists_directories_as_git_does(repo: Path) -> None:
    for d in ("in", "out", "far/deep"):
        for i in range(3):
            write(repo, f"{d}/f{i}.txt", f"{d} {i}\n")
    write(repo, "top.txt", "top\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "tree")
    git(repo, "sparse-checkout", "init", "--cone", "--sparse-index")
    git(repo, "sparse-checkout", "set", "in")
    contents = read_index(repo / ".git" / "index")
    assert contents is not None
    if not contents.sparse_dirs:
        pytest.fail("git 2.39 should write a sparse index here")
    assert contents.sparse_dirs == {b"out/", b"far/"}
    assert contents.paths == ls_files(repo)
    assert contents.sparse_dirs <= contents.skip_worktree
    assert {b"in/f0.txt", b"top.txt"} <= contents.paths
    # Expanded, git lists the files inside; each lies below one sparse directory.
    everything = set(split_z(git(repo, "ls-files", "-z", "--cached")))
    hidden = everything - contents.paths
    assert hidden
    assert all(any(p.startswith(d) for d in contents.sparse_dirs) for p in hidden)


def test_sha256_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_git_env(monkeypatch, tmp_path / "home")
    top = tmp_path / "repo"
    top.mkdir()
    git(top, "init", "-q", "--object-format=sha256", ".")
    populate(top)
    for version in (2, 3, 4):
        set_version(top, version)
        assert own(top) == ls_files(top)
    with pytest.raises(InputError, match="damaged"):
        read_index(top / ".git" / "index")  # read as SHA-1, nothing is where it should be


def test_an_all_zero_checksum_is_not_checked(repo: Path) -> None:
    """git's `index.skipHash` writes no checksum; git reads such an index as is."""
    populate(repo)
    index = repo / ".git" / "index"
    expected = own(repo)
    data = index.read_bytes()
    index.write_bytes(data[:-20] + bytes(20))
    assert own(repo) == expected


# -- where the index is ------------------------------------------------------------------


def test_linked_worktree_has_its_own_index(repo: Path, tmp_path: Path) -> None:
    write(repo, "a.txt", "a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", "-b", "other", str(linked))
    write(linked, "only-here.log", "x\n")
    write(linked, ".gitignore", "*.log\n")
    git(linked, "add", "-f", "only-here.log")
    assert find_git_dirs(linked) == GitDirs(
        git_dir=(repo / ".git" / "worktrees" / "linked").resolve(),
        common_dir=(repo / ".git").resolve(),
    )
    assert own(linked) == ls_files(linked) == {b"a.txt", b"only-here.log"}
    assert own(repo) == ls_files(repo) == {b"a.txt"}


def test_submodule_index_is_found_through_its_gitdir_file(repo: Path, tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    init_repo(upstream)
    _identify(upstream)
    write(upstream, "lib.c", "int x;\n")
    git(upstream, "add", "lib.c")
    git(upstream, "commit", "-q", "-m", "lib")
    write(repo, "main.c", "int main;\n")
    git(repo, "add", "main.c")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream), "sub")
    assert (repo / "sub" / ".git").is_file()
    dirs = find_git_dirs(repo / "sub")
    assert dirs == GitDirs(
        git_dir=(repo / ".git" / "modules" / "sub").resolve(),
        common_dir=(repo / ".git" / "modules" / "sub").resolve(),
    )
    assert own(repo / "sub") == ls_files(repo / "sub") == {b"lib.c"}
    assert own(repo) == ls_files(repo) == {b".gitmodules", b"main.c", b"sub"}


def test_separate_git_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_git_env(monkeypatch, tmp_path / "home")
    top = tmp_path / "repo"
    top.mkdir()
    init_repo(top, git_dir=os.fsencode(tmp_path / "elsewhere.git"))
    write(top, "a.txt", "a\n")
    git(top, "add", "a.txt")
    assert own(top) == ls_files(top) == {b"a.txt"}


def test_where_there_is_no_repository(tmp_path: Path) -> None:
    assert find_git_dirs(tmp_path) is None
    (tmp_path / ".git").write_text("not a gitdir line\n")
    with pytest.raises(InputError, match="not a git directory"):
        find_git_dirs(tmp_path)
    (tmp_path / ".git").write_text("gitdir: ../nowhere\n")
    with pytest.raises(InputError, match="not a directory"):
        find_git_dirs(tmp_path)


# -- damaged indexes: one clear line each --------------------------------------------------


def refused(index: Path, match: str) -> str:
    with pytest.raises(InputError, match=match) as caught:
        read_index(index)
    message = str(caught.value)
    assert "\n" not in message
    assert str(index) in message
    return message


@pytest.mark.parametrize("keep", [0, 11, 12, 100, -21, -1])
def test_truncated_index_is_refused(repo: Path, keep: int) -> None:
    populate(repo)
    data = (repo / ".git" / "index").read_bytes()
    refused(damage(repo, data[:keep]), "truncated|checksum")


@pytest.mark.parametrize("version", [2, 4])
def test_truncated_entries_are_called_truncated(repo: Path, version: int) -> None:
    populate(repo)
    set_version(repo, version)
    data = (repo / ".git" / "index").read_bytes()
    refused(damage(repo, sealed(data[: len(data) // 2])), "truncated|damaged")


def test_bad_checksum_is_refused(repo: Path) -> None:
    populate(repo)
    data = bytearray((repo / ".git" / "index").read_bytes())
    data[-1] ^= 0x01
    refused(damage(repo, bytes(data)), "checksum does not match")
    data[-1] ^= 0x01
    data[len(data) // 2] ^= 0x40  # inside the entries
    refused(damage(repo, bytes(data)), "damaged")


@pytest.mark.parametrize("version", [0, 1, 5, 0xFFFFFFFF])
def test_unknown_version_is_refused(repo: Path, version: int) -> None:
    populate(repo)
    data = (repo / ".git" / "index").read_bytes()
    changed = data[:4] + version.to_bytes(4, "big") + data[8:-20]
    refused(damage(repo, sealed(changed)), f"version {version}; versions 2 to 4")


def test_not_an_index_is_refused(repo: Path) -> None:
    refused(damage(repo, sealed(b"PACK" + bytes(40))), "not a git index")


@pytest.mark.parametrize("count", [0xFFFFFFFF, 1 << 20])
def test_huge_entry_count_is_refused_before_reading_entries(repo: Path, count: int) -> None:
    populate(repo)
    data = (repo / ".git" / "index").read_bytes()
    changed = data[:8] + count.to_bytes(4, "big") + data[12:-20]
    refused(damage(repo, sealed(changed)), "entries cannot fit")


def test_fewer_entries_than_written_is_damage(repo: Path) -> None:
    populate(repo)
    data = (repo / ".git" / "index").read_bytes()
    count = int.from_bytes(data[8:12], "big")
    changed = data[:8] + (count - 1).to_bytes(4, "big") + data[12:-20]
    refused(damage(repo, sealed(changed)), "damaged")


def test_extensions_required_and_optional(repo: Path) -> None:
    write(repo, "a.txt", "a\n")
    git(repo, "add", "a.txt")
    data = (repo / ".git" / "index").read_bytes()[:-20]
    optional = data + b"ZZZZ" + (3).to_bytes(4, "big") + b"abc"
    damage(repo, sealed(optional))
    assert own(repo) == {b"a.txt"}
    required = data + b"zzzz" + (3).to_bytes(4, "big") + b"abc"
    refused(damage(repo, sealed(required)), "needs the extension 'zzzz'")
    overrun = data + b"ZZZZ" + (300).to_bytes(4, "big") + b"abc"
    refused(damage(repo, sealed(overrun)), "runs past its end")


def test_unknown_extended_flags_are_refused(repo: Path) -> None:
    write(repo, "a.txt", "a\n")
    git(repo, "add", "a.txt")
    git(repo, "update-index", "--skip-worktree", "a.txt")
    data = bytearray((repo / ".git" / "index").read_bytes())
    assert data[4:8] == (3).to_bytes(4, "big")
    data[12 + 63] |= 0x01  # the low byte of the first entry's extended flags
    refused(damage(repo, sealed(bytes(data[:-20]))), "unknown extended flags")


def test_what_is_not_a_regular_file_is_refused_without_blocking(repo: Path) -> None:
    index = repo / ".git" / "index"
    os.mkfifo(index)
    refused(index, "not a regular file")
    index.unlink()
    index.mkdir()
    refused(index, "not a regular file")


def test_absurd_size_is_refused_before_reading(repo: Path) -> None:
    index = repo / ".git" / "index"
    with open(index, "wb") as f:
        f.truncate(INDEX_MAX_BYTES + 1)  # sparse: costs no disk
    assert stat.S_ISREG(os.stat(index).st_mode)
    refused(index, "too large")
