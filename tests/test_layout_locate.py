"""`layout.locate`: the root and store a command finds from its directory (no git needed).

The git-compat suite (tests/compat/test_git_discovery.py) runs the same rules in real
repositories; here they are table tests on hand-made `.git` directories and files.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap.layout import Location, git_dir, locate, store_location


def repo(path: Path) -> Path:
    """A directory git would take for a work tree's top (its `.git` has a HEAD)."""
    write(path, ".git/HEAD", "ref: refs/heads/main\n")
    return path


def store(directory: Path) -> Path:
    """Makes `directory` look like a store that exists (what `DiskStore.exists` checks)."""
    (directory / "manifests").mkdir(parents=True)
    return directory


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WORKSNAP_STORE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_outside_git_the_current_directory_and_its_worksnap(tmp_path: Path) -> None:
    here = tmp_path / "plain" / "dir"
    here.mkdir(parents=True)
    assert locate(str(here)) == Location(str(here), str(here / ".worksnap"), "cwd")


def test_in_a_work_tree_the_top_and_its_git_directory(tmp_path: Path) -> None:
    top = repo(tmp_path / "proj")
    deep = top / "a" / "b"
    deep.mkdir(parents=True)
    assert locate(str(deep)) == Location(str(top), str(top / ".git" / "worksnap"), "git")
    store(top / ".git" / "worksnap")
    assert locate(str(deep)) == Location(str(top), str(top / ".git" / "worksnap"), "store")


def test_the_nearest_store_wins_even_above_a_nested_work_tree(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    store(outer / ".worksnap")
    inner = repo(outer / "vendor" / "inner")
    assert locate(str(inner)) == Location(str(outer), str(outer / ".worksnap"), "store")
    store(inner / ".git" / "worksnap")
    assert locate(str(inner / ".git")) == Location(  # even from inside its git directory
        str(inner), str(inner / ".git" / "worksnap"), "store"
    )


def test_an_older_worksnap_in_the_root_comes_first(tmp_path: Path) -> None:
    top = repo(tmp_path / "proj")
    store(top / ".worksnap")
    store(top / ".git" / "worksnap")
    assert locate(str(top)) == Location(str(top), str(top / ".worksnap"), "store")
    assert store_location(str(top), None) == str(top / ".worksnap")


def test_a_git_file_names_the_git_directory(tmp_path: Path) -> None:
    real = repo(tmp_path / "elsewhere" / "modules" / "lib").parent / "lib" / ".git"
    top = tmp_path / "proj" / "lib"
    write(top, ".git", f"gitdir: {os.path.relpath(real, top)}\n")
    assert git_dir(str(top)) == str(real)
    assert locate(str(top)).store == str(real / "worksnap")


@pytest.mark.parametrize(
    "dot_git",
    ["gitdir: ../nowhere\n", "gitdir: /\n", "not a gitdir line\n", "gitdir: a\ngitdir: b\n"],
)
def test_a_git_file_that_names_no_git_directory_keeps_the_store_home(
    tmp_path: Path, dot_git: str
) -> None:
    top = tmp_path / "proj"
    write(top, ".git", dot_git)
    assert git_dir(str(top)) is None
    assert locate(str(top)) == Location(str(top), str(top / ".worksnap"), "git")


def test_a_git_folder_without_head_is_not_a_repository(tmp_path: Path) -> None:
    top = tmp_path / "proj"
    (top / ".git").mkdir(parents=True)
    assert git_dir(str(top)) is None
    assert locate(str(top)).store == str(top / ".worksnap")


def test_a_root_below_the_top_gets_a_store_of_its_own_in_the_git_directory(
    tmp_path: Path,
) -> None:
    top = repo(tmp_path / "proj")
    (top / "pkg").mkdir()
    own = locate(str(tmp_path), root=str(top / "pkg")).store
    assert own.startswith(str(top / ".git" / "worksnap-")) and own != str(top / ".git" / "worksnap")
    assert own == locate(str(tmp_path), root=str(top / "pkg")).store  # the same every time
    store(Path(own))
    assert locate(str(top / "pkg")) == Location(str(top / "pkg"), own, "store")
    assert locate(str(top)).store == str(top / ".git" / "worksnap")


def test_a_store_named_in_the_environment_brings_its_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = repo(tmp_path / "proj")
    (top / "src").mkdir()
    named = store(tmp_path / "stores" / "proj")
    write(named, "root", f"{top}\n")
    monkeypatch.setenv("WORKSNAP_STORE", str(named))
    assert locate(str(top / "src")) == Location(str(top), str(named), "store")
    other = tmp_path / "other"
    other.mkdir()
    assert locate(str(other)) == Location(str(other), str(named), "cwd")  # refused later
    assert locate(str(other), store=str(tmp_path / "s2")).store == str(tmp_path / "s2")


def test_home_and_slash_are_never_found_by_walking_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    store(home / ".worksnap")
    project = home / "project"
    project.mkdir()
    assert locate(str(project)) == Location(str(project), str(project / ".worksnap"), "cwd")
    assert locate(str(home), root=str(home)).store == str(home / ".worksnap")  # when named


def test_fifos_and_links_where_files_are_expected_neither_hang_nor_lead_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO at `.git` or at a named store's `root` file would block a plain open()."""
    top = tmp_path / "proj"
    top.mkdir()
    os.mkfifo(top / ".git")
    assert git_dir(str(top)) is None
    assert locate(str(top)) == Location(str(top), str(top / ".worksnap"), "git")
    named = store(tmp_path / "named")
    os.mkfifo(named / "root")
    monkeypatch.setenv("WORKSNAP_STORE", str(named))
    assert locate(str(top)) == Location(str(top), str(named), "git")  # not bound: cwd's
    (named / "root").unlink()
    write(tmp_path, "elsewhere-root", f"{top}\n")
    os.symlink(tmp_path / "elsewhere-root", named / "root")  # a link is not the binding
    assert locate(str(top)).found == "git"
