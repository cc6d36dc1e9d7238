"""One test per ignore rule, on real files: what a scan captures and what it calls ignored.

The expected answers are git's (2.39), checked by hand and by tests/compat.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from worksnap.errors import InputError
from worksnap.ignore import Rules, base_rules, compile_ignore_file, ignore_checker
from worksnap.paths import wire_name
from worksnap.scan import scan_tree

HAS_GIT = shutil.which("git") is not None


@pytest.fixture(autouse=True)
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home: no global excludes file or git config but what a test writes."""
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


def write(root: Path, rel: str | bytes, data: bytes | str = b"") -> Path:
    """Writes a file, creating its parents; `rel` may be bytes (names that are not UTF-8)."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def make_repo(top: Path) -> Path:
    """Makes `top` a work tree by hand (what git checks: HEAD, objects, refs); returns .git."""
    git_dir = top / ".git"
    (git_dir / "objects").mkdir(parents=True)
    (git_dir / "refs").mkdir()
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    return git_dir


def scan(root: Path) -> tuple[set[str], set[str]]:
    """Returns (captured files and symlinks, ignored paths) of a scan of `root`."""
    found = scan_tree(str(root), base_rules(root), exclude=frozenset(), max_file_bytes=1 << 20)
    return {p for p, _ in found.files} | {p for p, _, _ in found.symlinks}, set(found.ignored)


def left_out(patterns: bytes, paths: Sequence[str | bytes], root: Path) -> set[str]:
    """Which of `paths` a root `.gitignore` of `patterns` keeps out of the capture."""
    write(root, ".gitignore", patterns)
    for path in paths:
        write(root, path)
    captured, _ = scan(root)
    return {wire_name(os.fsdecode(p)) for p in paths} - captured


# -- pattern syntax ----------------------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "paths", "expected"),
    [
        pytest.param(b"*.log\n", ["a.log", "d/b.log", "c.txt"], {"a.log", "d/b.log"}, id="glob"),
        pytest.param(b"*.log\n!keep.log\n", ["a.log", "keep.log"], {"a.log"}, id="negation"),
        pytest.param(b"!keep.log\n*.log\n", ["keep.log"], {"keep.log"}, id="last-line-wins"),
        pytest.param(b"/foo\n", ["foo", "d/foo"], {"foo"}, id="leading-slash-anchors"),
        pytest.param(b"d/foo\n", ["d/foo", "x/d/foo"], {"d/foo"}, id="inner-slash-anchors"),
        pytest.param(b"foo/\n", ["foo", "d/foo/x"], {"d/foo/x"}, id="trailing-slash-dirs-only"),
        pytest.param(b"d/*.c\n", ["d/a.c", "d/e/b.c"], {"d/a.c"}, id="star-stops-at-slash"),
        pytest.param(b"**/foo\n", ["foo", "a/b/foo"], {"foo", "a/b/foo"}, id="leading-starstar"),
        pytest.param(
            b"a/**/b\n",
            ["a/b", "a/x/y/b", "ab"],
            {"a/b", "a/x/y/b"},
            id="inner-starstar",
        ),
        pytest.param(
            b"foo/**\n!foo/keep\n",
            ["foo/a", "foo/keep"],
            {"foo/a"},
            id="trailing-starstar",
        ),
        pytest.param(b"**\n!keep\n", ["a", "keep"], {"a"}, id="starstar-alone"),
        pytest.param(b"a**b\n", ["axb", "a/b"], {"axb"}, id="starstar-inside-a-name"),
        pytest.param(b"a?\n", ["ab", "a", "abc"], {"ab"}, id="question-mark"),
        pytest.param(b"[ab]x\n", ["ax", "bx", "cx"], {"ax", "bx"}, id="bracket"),
        pytest.param(b"[!a]x\n", ["ax", "bx"], {"bx"}, id="bracket-negated"),
        pytest.param(b"[^a]x\n", ["ax", "bx"], {"bx"}, id="bracket-caret"),
        pytest.param(b"x[a-c]\n", ["xb", "xd"], {"xb"}, id="bracket-range"),
        pytest.param(b"x[]a]\n", ["x]", "xa", "xb"], {"x]", "xa"}, id="bracket-close-first"),
        pytest.param(b"x[\\]]\n", ["x]", "x\\"], {"x]"}, id="bracket-escape"),
        pytest.param(
            b"x[a-c-e]\n",
            ["x-", "xd", "xe"],
            {"x-", "xe"},
            id="bracket-dash-after-range",
        ),
        pytest.param(b"x[[:punct:]]\n", ["x!", "x~", "x1"], {"x!", "x~"}, id="class-punct"),
        pytest.param(b"x[a-]\n", ["xa", "x-", "xb"], {"xa", "x-"}, id="bracket-dash-last"),
        pytest.param(b"x[z-a]\n", ["xa", "xz", "xm"], {"xz"}, id="bracket-reversed-range"),
        pytest.param(b"x[[:digit:]]\n", ["x1", "xa"], {"x1"}, id="bracket-class"),
        pytest.param(b"x[[:space:]]\n", ["x ", "x\x0b"], {"x "}, id="class-space-no-vt"),
        pytest.param(b"x[[:bogus:]]\n", ["xb", "x:"], set(), id="bracket-bad-class"),
        pytest.param(b"a[b\n*.o\n", ["a[b", "ab", "c.o"], {"c.o"}, id="bracket-unclosed"),
        pytest.param(b"/a[/]b\n", ["a/b"], set(), id="bracket-never-slash"),
        pytest.param(b"\\#hash\n#foo\n", ["#hash", "#foo"], {"#hash"}, id="escaped-hash"),
        pytest.param(b"\\!bang\n", ["!bang"], {"!bang"}, id="escaped-bang"),
        pytest.param(b"trail\\ \n", ["trail ", "trail"], {"trail "}, id="escaped-space"),
        pytest.param(b"foo  \n", ["foo", "foo "], {"foo"}, id="trailing-spaces-dropped"),
        pytest.param(b"two\\  \n", ["two ", "two  "], {"two "}, id="escaped-then-plain"),
        pytest.param(b"tab\t\n", ["tab\t", "tab"], {"tab\t"}, id="trailing-tab-kept"),
        pytest.param(b"a.log\r\nb.log\r\n", ["a.log", "b.log"], {"a.log", "b.log"}, id="crlf"),
        pytest.param(b"\xef\xbb\xbfa.log\n", ["a.log"], {"a.log"}, id="utf8-bom"),
        pytest.param(b"a.log", ["a.log"], {"a.log"}, id="no-final-newline"),
        pytest.param(b"a\\\n", ["a\\", "a"], set(), id="trailing-backslash"),
        pytest.param(b"x.log\0junk\n", ["x.log"], {"x.log"}, id="nul-ends-line"),
        pytest.param(b"foo//\n", ["foo/x"], set(), id="double-slash"),
        # git compares the literal start of a pattern, then wildmatches the rest:
        # there "**" counts as following a slash.
        pytest.param(
            b"foo**/bar\n",
            ["foo/bar", "fooX/a/bar"],
            {"foo/bar", "fooX/a/bar"},
            id="q1",
        ),
        pytest.param(
            b"a/**\\/b\n",
            ["a/b", "a/x/b", "a/x/y/b"],
            {"a/x/b", "a/x/y/b"},
            id="starstar-escaped-slash",
        ),
    ],
)
def test_pattern(patterns: bytes, paths: list[str], expected: set[str], root: Path) -> None:
    assert left_out(patterns, paths, root) == expected


def test_question_mark_matches_one_byte(root: Path) -> None:
    # "é" is two bytes in UTF-8: git's ? matches a byte, not a character.
    assert left_out(b"a?\na??x\n", ["aé", "ab", "aéx"], root) == {"ab", "aéx"}


def test_names_that_are_not_utf8(root: Path) -> None:
    paths: list[str | bytes] = [b"\xff.log", b"x\xe9y", b"keep"]
    assert left_out(b"*.log\nx?y\n", paths, root) == {"\x00ff.log", "x\x00e9y"}


def test_non_ascii_pattern_matches_its_bytes(root: Path) -> None:
    # A pattern is bytes too: [é] is a set of two bytes, neither of which is "é".
    assert left_out("é\nx[é]\n".encode(), ["é", "xé", b"x\xc3"], root) == {
        "é",
        "x\x00c3",
    }


def test_symlink_is_never_a_directory(root: Path) -> None:
    (root / "real").mkdir()
    write(root, "real/f")
    (root / "link").symlink_to("real")
    (root / "flink").symlink_to("real/f")
    write(root, ".gitignore", b"link/\nflink/\n")
    captured, _ = scan(root)
    assert {"link", "flink"} <= captured
    write(root, ".gitignore", b"link\n")
    captured, ignored = scan(root)
    assert "link" not in captured
    assert "link" in ignored


def test_huge_ignore_file_last_line_still_wins(root: Path) -> None:
    # Large files are compiled in several RE2 sets; the later lines must still win.
    lines = [b"*.log", *(b"x%d*[ab]?/**/y*" % i for i in range(2500)), b"!keep.log"]
    assert left_out(b"\n".join(lines), ["a.log", "keep.log"], root) == {"a.log"}


def test_an_ignore_file_of_long_lines_compiles_and_matches(root: Path) -> None:
    # 500 anchored paths of about 190 bytes (a generated ignore list) made one RE2 set
    # outgrow RE2's memory: every snapshot died with "failed to compile Set" (a review).
    # A single line of 200 kB is a pattern git matches too.
    deep = "/".join(f"{i:02d}" + "d" * 28 for i in range(6))
    listed = [f"/build/{deep}/{n:03d}/*.js" for n in range(500)]
    patterns = "\n".join(["secret.env", *listed])
    paths = ["secret.env", "a.txt", f"build/{deep}/042/x.js", f"build/{deep}/042/x.ts"]
    assert left_out(patterns.encode(), paths, root) == {"secret.env", f"build/{deep}/042/x.js"}
    long_path = "/".join(f"{i:04d}" + "n" * 195 for i in range(1000))  # 200 kB
    matcher = compile_ignore_file(f"/{long_path}\n".encode())
    assert matcher is not None
    assert matcher.decide(long_path.encode(), is_dir=False) is True
    assert matcher.decide(long_path.encode() + b"x", is_dir=False) is None


def test_an_ignore_rule_too_long_to_match_is_refused_in_one_line(root: Path) -> None:
    # git matches a line of megabytes; RE2 cannot compile one within its memory budget.
    write(root, ".gitignore", b"*.log\n/" + b"ab/" * 400_000 + b"\n")
    with pytest.raises(InputError, match=r"^an ignore rule of 1,200,001 bytes is too long "):
        scan(root)


def test_rules_without_any_file_ignore_nothing() -> None:
    assert not Rules().ignored("anything", is_dir=True)
    assert compile_ignore_file(b"# only a comment\n\n   \n!\n/\n") is None


# -- where the rules come from -----------------------------------------------


def test_each_gitignore_is_relative_to_its_directory(root: Path) -> None:
    write(root, "sub/.gitignore", b"/x\n")
    for path in ("x", "sub/x", "sub/deeper/x"):
        write(root, path)
    captured, ignored = scan(root)
    assert ignored == {"sub/x"}
    assert {"x", "sub/deeper/x"} <= captured


def test_deeper_file_reincludes(root: Path) -> None:
    write(root, ".gitignore", b"*.log\n")
    write(root, "sub/.gitignore", b"!keep.log\n")
    for path in ("keep.log", "sub/keep.log", "sub/x.log"):
        write(root, path)
    captured, _ = scan(root)
    assert "sub/keep.log" in captured
    assert not {"keep.log", "sub/x.log"} & captured


def test_deeper_file_excludes_over_parent_negation(root: Path) -> None:
    write(root, ".gitignore", b"*.log\n!keep.log\n")
    write(root, "sub/.gitignore", b"keep.log\n")
    write(root, "keep.log")
    write(root, "sub/keep.log")
    captured, _ = scan(root)
    assert "keep.log" in captured
    assert "sub/keep.log" not in captured


def test_nothing_below_an_ignored_directory_comes_back(root: Path) -> None:
    write(root, ".gitignore", b"build/\n!build/keep\n")
    write(root, "build/.gitignore", b"!*\n")
    write(root, "build/keep")
    write(root, "build/sub/x")
    captured, ignored = scan(root)
    # The directory is listed once: the scan never looked inside.
    assert ignored == {"build"}
    assert captured == {".gitignore"}


def test_parent_negation_does_not_leak_into_child_paths(root: Path) -> None:
    # "!foo" re-includes the directory foo, not everything below it.
    write(root, ".gitignore", b"*.log\n")
    write(root, "a/.gitignore", b"foo\n!foo\n")
    write(root, "a/foo/x.log")
    write(root, "a/foo/y")
    captured, _ = scan(root)
    assert "a/foo/y" in captured
    assert "a/foo/x.log" not in captured


def test_symlinked_gitignore_is_not_read(root: Path) -> None:
    write(root, "rules", b"*.log\n")
    (root / ".gitignore").symlink_to("rules")
    write(root, "a.log")
    captured, _ = scan(root)
    assert "a.log" in captured


def test_info_exclude_of_the_repository(root: Path) -> None:
    git_dir = make_repo(root)
    write(git_dir, "info/exclude", b"*.o\n")
    write(root, "a.o")
    write(root, "sub/b.o")
    write(root, "c.c")
    captured, _ = scan(root)
    assert captured == {"c.c"}


def test_info_exclude_may_be_a_symlink(root: Path, tmp_path: Path) -> None:
    git_dir = make_repo(root)
    write(tmp_path, "shared-exclude", b"*.o\n")
    (git_dir / "info").mkdir()
    (git_dir / "info" / "exclude").symlink_to(tmp_path / "shared-exclude")
    write(root, "a.o")
    captured, _ = scan(root)
    assert captured == set()


def test_a_dot_git_that_is_no_repository_is_not_one(root: Path) -> None:
    # git checks HEAD, objects and refs; without them this is a plain directory.
    write(root, ".git/info/exclude", b"*.o\n")
    write(root, "a.o")
    captured, _ = scan(root)
    assert captured == {"a.o"}


@pytest.mark.parametrize(
    ("head", "is_repository"),
    [
        (b"ref: refs/heads/main\n", True),
        (b"ref:\t refs/heads/main", True),
        (b"0123456789abcdef0123456789abcdef01234567\n", True),  # a detached HEAD
        (b"0123456789abcdef0123456789abcdef01234567 and more", True),
        (b"garbage\n", False),
        (b"ref: heads/main\n", False),
        (b"0123456789abcdef\n", False),
        (b"0123456789abcdef", False),
        (b"ref:\x0brefs/heads/main", False),  # git's isspace() leaves out \v
        (b"", False),
        ("symlink refs/heads/unborn", True),  # git's old symlinked HEAD
        ("symlink heads/unborn", False),
        ("directory", False),
    ],
)
def test_a_nested_git_is_a_repository_only_if_git_would_accept_its_head(
    root: Path, head: bytes | str, is_repository: bool
) -> None:
    # git's validate_headref: a symlink to refs/..., "ref:" then refs/..., or an object id
    # (a review: a garbage HEAD was taken for a repository, a symlinked one was not).
    make_repo(root)
    write(root, ".gitignore", b"*.log\n")
    nested_git = make_repo(root / "sub")
    write(nested_git, "info/exclude", b"*.o\n")
    (nested_git / "HEAD").unlink()
    if isinstance(head, bytes):
        (nested_git / "HEAD").write_bytes(head)
    elif head == "directory":
        (nested_git / "HEAD").mkdir()
    else:
        (nested_git / "HEAD").symlink_to(head.split()[1])
    write(root, "sub/a.log")
    write(root, "sub/a.o")
    captured, _ = scan(root)
    inner = {"sub/a.log"} if is_repository else {"sub/a.o"}
    assert captured == {".gitignore", *inner}


def test_linked_work_tree_uses_the_common_info_exclude(tmp_path: Path) -> None:
    main_git = make_repo(tmp_path / "main")
    write(main_git, "info/exclude", b"*.o\n")
    private = main_git / "worktrees" / "wt"
    private.mkdir(parents=True)
    (private / "HEAD").write_text("ref: refs/heads/wt\n")
    (private / "commondir").write_text("../..\n")
    linked = tmp_path / "wt"
    write(linked, ".git", f"gitdir: {private}\n")
    write(linked, "a.o")
    write(linked, "b.c")
    captured, _ = scan(linked)
    assert captured == {"b.c"}


def test_global_excludes_at_xdg_config_home(root: Path, clean_home: Path) -> None:
    write(clean_home, ".config/git/ignore", b"*.tmp\n")
    write(root, "a.tmp")
    write(root, "b")
    captured, _ = scan(root)
    assert captured == {"b"}


def test_global_excludes_without_xdg(
    root: Path, clean_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    write(clean_home, ".config/git/ignore", b"*.tmp\n")
    write(root, "a.tmp")
    captured, _ = scan(root)
    assert captured == set()


@pytest.mark.skipif(not HAS_GIT, reason="core.excludesFile is read with git config")
@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("~/mine", {"b.log", "c"}),
        ("rel/mine", {"b.log", "c"}),
        ("", {"a.tmp", "b.log", "c"}),
    ],
)
def test_core_excludes_file(setting: str, expected: set[str], root: Path, clean_home: Path) -> None:
    # Set: it replaces the XDG file. Relative: to the work tree top. Empty: no file at all.
    make_repo(root)
    write(clean_home, ".gitconfig", f"[core]\n\texcludesFile = {setting}\n")
    write(clean_home, ".config/git/ignore", b"*.log\n")
    write(clean_home, "mine", b"*.tmp\n")
    write(root, "rel/mine", b"*.tmp\n")
    (root / "rel" / "mine").rename(root / "rel" / "mine.txt")
    (root / "rel" / "mine").symlink_to(clean_home / "mine")
    for path in ("a.tmp", "b.log", "c"):
        write(root, path)
    captured, _ = scan(root)
    assert captured - {"rel/mine", "rel/mine.txt"} == expected


def test_deepest_source_wins(root: Path, clean_home: Path) -> None:
    # Precedence: .gitignore (deepest first) > info/exclude > global file.
    git_dir = make_repo(root)
    write(clean_home, ".config/git/ignore", b"*.a\n*.b\n*.c\n")
    write(git_dir, "info/exclude", b"!*.b\n!*.c\n")
    write(root, ".gitignore", b"*.c\n")
    for path in ("x.a", "x.b", "x.c"):
        write(root, path)
    captured, _ = scan(root)
    assert captured == {".gitignore", "x.b"}


def test_root_below_the_top_reads_gitignores_above(tmp_path: Path) -> None:
    top = tmp_path / "top"
    git_dir = make_repo(top)
    write(git_dir, "info/exclude", b"/sub/root/from-info\n")
    write(top, ".gitignore", b"/sub/root/x.tmp\n*.log\n")
    write(top, "sub/.gitignore", b"root/y.tmp\n")
    root = top / "sub" / "root"
    for path in ("x.tmp", "y.tmp", "z.log", "from-info", "keep", "deeper/x.tmp"):
        write(root, path)
    captured, _ = scan(root)
    assert captured == {"keep", "deeper/x.tmp"}


def test_root_that_is_no_repository(root: Path, clean_home: Path) -> None:
    write(clean_home, ".config/git/ignore", b"*.tmp\n")
    write(root, ".gitignore", b"*.log\n")
    for path in ("a.tmp", "b.log", "c"):
        write(root, path)
    captured, _ = scan(root)
    assert captured == {".gitignore", "c"}


def test_nested_repository_has_its_own_rules(root: Path, clean_home: Path) -> None:
    make_repo(root)
    write(root, ".gitignore", b"*.log\nvendor/lib/dropped/\n")
    nested = root / "vendor" / "lib"
    nested_git = make_repo(nested)
    write(nested_git, "info/exclude", b"*.o\n")
    write(nested, ".gitignore", b"*.tmp\n")
    for path in ("a.log", "a.o", "a.tmp", "dropped/f"):
        write(nested, path)
    write(root, "b.o")
    captured, _ = scan(root)
    # Inside, git run in vendor/lib would show a.log and dropped/f, not a.o or a.tmp;
    # the outer repository's rules and info/exclude do not apply there.
    assert captured == {
        ".gitignore",
        "b.o",
        "vendor/lib/.gitignore",
        "vendor/lib/a.log",
        "vendor/lib/dropped/f",
    }


def test_nested_repository_itself_is_judged_by_the_outer_rules(root: Path) -> None:
    make_repo(root)
    write(root, ".gitignore", b"vendor/\n")
    make_repo(root / "vendor")
    write(root, "vendor/f")
    _, ignored = scan(root)
    assert ignored == {"vendor"}


# -- the restore planner's view ------------------------------------------------


def test_ignore_checker_agrees_with_the_scan(root: Path) -> None:
    make_repo(root)
    write(root, ".gitignore", b"*.log\nbuild/\n")
    write(root, "sub/.gitignore", b"!keep.log\n")
    make_repo(root / "nested")
    write(root, "nested/.gitignore", b"*.o\n")
    for path in (
        "a.log",
        "sub/keep.log",
        "sub/x.log",
        "nested/a.log",
        "nested/a.o",
        "c",
    ):
        write(root, path)
    gitignores = {"": b"*.log\nbuild/\n", "sub": b"!keep.log\n", "nested": b"*.o\n"}
    ignored = ignore_checker(base_rules(root), gitignores.get)
    assert not ignored("sub/keep.log", False)
    assert ignored("sub/x.log", False)
    assert not ignored("nested/a.log", False)
    assert ignored("nested/a.o", False)
    assert ignored("build", True)
    assert not ignored("build", False)
    assert ignored("build/anything/below", False)  # below an ignored directory
