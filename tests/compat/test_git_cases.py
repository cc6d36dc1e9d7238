"""Deterministic differential cases: every tricky pattern against one universe of paths.

Random trees find the surprises; these make sure that each corner case is met
on every run: each pattern (or small group of lines) gets a directory of its
own holding the same universe of paths, so one `git ls-files` call judges
thousands of (pattern, path) pairs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .gitrun import GIT, clean_git_env, git, init_repo, untracked
from .harness import capture, compare
from .treegen import FIXED, Tree

pytestmark = [
    pytest.mark.slow,  # compared with real git
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
]

# Files (and the directories they imply) present in every case directory.
UNIVERSE: list[bytes] = [
    *(
        b"b abc a.o x.log keep.log notes.txt B.TXT .hidden #hash !bang"
        b" xa xm xz x- x] x[ x: x! xl ]x -x 1x Zz fo foo\xc2\xa0 \xc3\xa9 ab\xc3\xa9 ab\xc3"
        b" \xff x\xe9y xy x\xc3\xa9y"
    ).split(),
    b" lead",
    b"trail ",
    b"two  ",
    b"two ",
    b"sp ace",
    b"tab\t",
    b"tab",
    b"b[r]",
    b"br",
    b"st*r",
    b"q?",
    b"back\\sl",
    b"a\\",
    b"\\",
    b"**",
    b"nl\nx",
    b"nl",
    b"cr\r",
    b"cr",
    b"vt\x0b",
    b"a/b",
    b"a/c",
    b"a/x/b",
    b"a/x/y/b",
    b"a/bx/y",
    b"a/bz",
    b"ab/c",
    b"foo/bar",
    b"foo/keep",
    b"foo/a/bar",
    b"fooX/bar",
    b"fooX/a/bar",
    b"doc/x.txt",
    b"doc/x.log",
    b"doc/sub/y.txt",
    b"build/f",
    b"sub/build",
    b"sub/a/b",
    b"node_modules/keep",
    b"node_modules/x",
    b"deep/node_modules/y",
    b"x/y/z.o",
]
SYMLINKS: dict[bytes, bytes] = {b"ldir": b".", b"lfile": b"a.o", b"build2": b"build"}

# Groups of lines that only mean something together.
GROUPS: list[list[bytes]] = [
    [b"*.log", b"!keep.log"],
    [b"build/", b"!build/"],
    [b"a/b**", b"!a/bx/"],
    [b"foo/**", b"!foo/keep"],
    [b"foo/", b"!foo/keep"],
    [b"*", b"!*/", b"!*.o"],
    [b"/*", b"!/a", b"/a/*", b"!/a/x"],
    [b"doc/", b"!doc/x.txt"],
    [b"!x.log", b"*.log"],
    [b"ldir/", b"lfile/", b"build2/"],
    [b"ldir", b"!build2"],
    [b"**/node_modules/", b"!node_modules/"],
    [b"a", b"!a/"],
    [b"*[[:upper:]]*", b"![[:upper:]]*"],
]
# Lines that stand alone, beyond treegen's FIXED list.
SINGLES: list[bytes] = [
    b"a/**\\/b",
    b"/a[!x]b",
    b"a[/]b",
    b"a\0b",
    b"x.log\0junk",
    b"x[z-a]",
    b"x[a-z]",
    b"x[!a-l]",
    b"x[\\]]",
    b"x[]]",
    b"x[!]]",
    b"x[\\\\]",
    b"x[\xc3\xa9]y",
    b"x[\x80-\xff]y",
    b"x??y",
    b"x?y",
    b"[[:punct:]]*",
    b"*[[:space:]]",
    b"*[[:cntrl:]]",
    b"foo\xc2\xa0",
    b"foo\xc2\xa0 ",
    b"two\\ \\ ",
    b"tab\\\t",
    b"\\ lead",
    b"\\\\",
    b"a/",
    b"/a/b",
    b"a/b/",
    b"a/*/b",
    b"a/**/b/",
    b"**/b",
    b"**/x/*",
    b"*/b",
    b"*/*/b",
    b"x/**/*.o",
    b"**/*.o",
    b"/**/b",
    b"sub/**/b",
    b"**/sub",
    b"sub/",
    b"build",
    b"/build/",
    b"deep/**",
    b"deep/**/",
    b"node_modules",
    b"a/**/",
]


def _case_tree() -> Tree:
    tree = Tree(seed=-1)
    cases = [[line] for line in [*FIXED, *SINGLES]] + GROUPS
    for number, lines in enumerate(cases):
        case = b"c%03d" % number
        tree.dirs.append(case)
        for path in UNIVERSE:
            full = case + b"/" + path
            parent = full.rpartition(b"/")[0]
            if parent not in tree.dirs:
                tree.dirs.append(parent)
            tree.files[full] = b"x"
        for name, target in SYMLINKS.items():
            tree.symlinks[case + b"/" + name] = target
        tree.files[case + b"/.gitignore"] = b"\n".join(lines) + b"\n"
    return tree


def _can_name_bytes(where: Path) -> bool:
    """False on file systems that refuse names that are not UTF-8 (macOS)."""
    try:
        (where / os.fsdecode(b"\xff")).touch()
    except OSError:
        return False
    (where / os.fsdecode(b"\xff")).unlink()
    return True


@pytest.fixture
def top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty work tree directory, git in a clean environment."""
    clean_git_env(monkeypatch, tmp_path / "home")
    path = tmp_path / "tree"
    path.mkdir()
    if not _can_name_bytes(path):
        pytest.skip("this file system refuses names that are not UTF-8")
    return path


def test_every_pattern_against_the_universe(top: Path, tmp_path: Path) -> None:
    tree = _case_tree()
    tree.build(os.fsencode(top))
    init_repo(top)
    compare(tree, top, top, tmp_path / "store")


def test_character_classes_byte_for_byte(top: Path, tmp_path: Path) -> None:
    # Every byte a name can hold, against each class and the bracket corner cases.
    patterns = [b"x[[:%s:]]" % c for c in b"alnum alpha blank cntrl digit graph".split()]
    patterns += [b"x[[:%s:]]" % c for c in b"lower print punct space upper xdigit".split()]
    patterns += [b"x[![:alpha:]]", b"x[!a-y]", b"x[\x80-\xfe]", b"x?", b"x[]-]", b"x[--/]"]
    tree = Tree(seed=-2)
    for number, pattern in enumerate(patterns):
        case = b"k%02d" % number
        tree.dirs.append(case)
        tree.files[case + b"/.gitignore"] = pattern + b"\n"
        for byte in range(1, 256):
            if byte != ord("/"):
                tree.files[case + b"/x" + bytes([byte])] = b"x"
    tree.build(os.fsencode(top))
    init_repo(top)
    compare(tree, top, top, tmp_path / "store")


@pytest.mark.parametrize(
    "setting",
    ["unset", "unset-no-xdg", "empty", "relative", "tilde", "absolute-symlink", "missing"],
)
def test_global_excludes_file_setting(
    setting: str, top: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    xdg_file = home / ".config" / "git" / "ignore"
    xdg_file.write_bytes(b"*.log\n")
    config = {
        "unset": None,
        "unset-no-xdg": None,
        "empty": "",
        "relative": "rules/ignore",
        "tilde": "~/my-ignore",
        "absolute-symlink": str(home / "link-ignore"),
        "missing": str(home / "nothing-here"),
    }[setting]
    if setting == "unset-no-xdg":
        # Without XDG_CONFIG_HOME git falls back to ~/.config/git/ignore.
        monkeypatch.delenv("XDG_CONFIG_HOME")
        (home / ".config" / "git" / "ignore").write_bytes(b"*.o\n")
    if config is not None:
        (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {config}\n")
    (home / "my-ignore").write_bytes(b"*.o\n")
    (home / "real-ignore").write_bytes(b"notes.txt\n")
    (home / "link-ignore").symlink_to(home / "real-ignore")
    tree = Tree(seed=-3, excludes_file=setting)
    tree.dirs += [b"rules", b"sub"]
    tree.files.update(
        {b"rules/ignore": b"a.o\n", b"a.o": b"", b"x.log": b"", b"notes.txt": b"", b"sub/b.o": b""}
    )
    tree.build(os.fsencode(top))
    init_repo(top)
    compare(tree, top, top, tmp_path / "store")
    # A relative setting is relative to the top of the work tree, wherever the root is.
    compare(tree, top, top / "sub", tmp_path / "store2")


def test_linked_worktree_reads_the_common_info_exclude(top: Path, tmp_path: Path) -> None:
    # A linked work tree has a `.git` file; info/exclude lives in the common directory.
    (top / "tracked").write_bytes(b"x")
    init_repo(top)
    git(top, "add", "tracked")
    git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    (top / ".git" / "info").mkdir()
    (top / ".git" / "info" / "exclude").write_bytes(b"*.o\n")
    linked = tmp_path / "linked"
    git(top, "worktree", "add", "-q", str(linked))
    for name in ("a.o", "b.c"):
        (linked / name).write_bytes(b"")
    captured, ignored = capture(linked, tmp_path / "store")
    # worksnap also captures the tracked file, which git does not list as untracked.
    assert captured - {b"tracked"} == untracked(os.fsencode(linked)) == {b"b.c"}
    assert ignored == [b"a.o"]
