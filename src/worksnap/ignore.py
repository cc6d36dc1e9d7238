"""Ignore rules, decided exactly as git decides them.

Sources, from lowest to highest precedence (as `git status` reads them):
the global excludes file, `$GIT_DIR/info/exclude`, then `.gitignore` files from
the repository top down to the directory of the path; the deepest file with a
decisive match wins. Matching works on the raw bytes of names (decoded as
Latin-1 so that one byte is one character, as in git's wildmatch).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pathspec import GitIgnoreSpec

from worksnap.manifest import fs_path

_BOM = b"\xef\xbb\xbf"


@lru_cache(maxsize=4096)
def compile_ignore_file(data: bytes) -> GitIgnoreSpec | None:
    """Compiles the bytes of one ignore file; None when it holds no pattern."""
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    # git splits on LF only and drops one CR before it (CRLF ignore files work).
    lines = [line[:-1] if line.endswith(b"\r") else line for line in data.split(b"\n")]
    text = [line.decode("latin-1") for line in lines if line and not line.startswith(b"#")]
    if not text:
        return None
    spec = GitIgnoreSpec.from_lines(text, backend="re2")
    return spec if len(spec) else None


def match_form(path: str) -> str:
    """Returns a wire path as the Latin-1 text the matcher sees (one byte, one character)."""
    return path if path.isascii() else fs_path(path).decode("latin-1")


class Level:
    """One ignore file: its compiled patterns and where its paths are relative to.

    A path relative to the root becomes relative to this file's directory by
    dropping `strip` (the file's directory below the root) and prepending
    `prefix` (the root below the file's directory, for files above the root).
    """

    __slots__ = ("prefix", "spec", "strip")

    def __init__(self, spec: GitIgnoreSpec, *, strip: str = "", prefix: str = "") -> None:
        self.spec = spec
        self.strip = strip
        self.prefix = prefix


class Rules:
    """The ignore files in force in one directory, deepest first. Immutable."""

    __slots__ = ("levels",)

    def __init__(self, levels: tuple[Level, ...] = ()) -> None:
        self.levels = levels

    def child(self, dir_path: str, data: bytes) -> Rules:
        """Returns the rules inside `dir_path` (wire form, "" for the root) given its .gitignore."""
        spec = compile_ignore_file(data)
        if spec is None:
            return self
        strip = match_form(dir_path) + "/" if dir_path else ""
        return Rules((Level(spec, strip=strip), *self.levels))

    def ignored(self, path: str, *, is_dir: bool) -> bool:
        """True when git would ignore `path` (wire form, relative to the root).

        The caller walks top-down and never asks about anything below an
        ignored directory: git never looks there, so nothing there can be
        re-included.
        """
        if not self.levels:
            return False
        text = match_form(path) + "/" if is_dir else match_form(path)
        for level in self.levels:
            result = level.spec.check_file(level.prefix + text[len(level.strip) :])
            if result.include is not None:
                return result.include
        return False


def _git_dir(top: Path) -> Path | None:
    """Returns the common git directory of the work tree at `top` (follows `gitdir:` files)."""
    dot_git = top / ".git"
    if dot_git.is_file():
        try:
            text = dot_git.read_text(encoding="utf-8", errors="surrogateescape").strip()
        except OSError:
            return None
        if not text.startswith("gitdir:"):
            return None
        git_dir = (top / text[len("gitdir:") :].strip()).resolve()
    elif dot_git.is_dir():
        git_dir = dot_git
    else:
        return None
    commondir = git_dir / "commondir"
    if commondir.is_file():
        try:
            git_dir = (git_dir / commondir.read_text(encoding="utf-8").strip()).resolve()
        except OSError:
            return None
    return git_dir


def _find_top(root: Path) -> Path | None:
    """Returns the nearest directory at or above `root` that has a `.git`, or None."""
    for candidate in (root, *root.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def global_excludes_file(root: Path) -> Path:
    """Returns git's global excludes file: `core.excludesFile`, else the XDG default."""
    try:
        out = subprocess.run(
            ["git", "config", "--path", "--get", "core.excludesFile"],
            cwd=root,
            capture_output=True,
            timeout=10,
            check=False,
        )
        configured = os.fsdecode(out.stdout.strip())
        if out.returncode == 0 and configured:
            return Path(configured).expanduser()
    except (OSError, subprocess.SubprocessError):
        pass  # no git on this machine: fall back to the default location, as git would
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(xdg) / "git" / "ignore"


def _read(path: Path) -> bytes:
    """Reads an ignore file; a missing or unreadable one counts as empty (as in git)."""
    try:
        if path.is_symlink():
            return b""  # git (>= 2.32) does not follow a symlinked ignore file
        return path.read_bytes()
    except OSError:
        return b""


def base_rules(root: Path) -> Rules:
    """Returns the rules in force at `root` before its own `.gitignore` is read.

    That is the global excludes file, the repository's `info/exclude`, and the
    `.gitignore` files between the repository top and `root`.
    """
    top = _find_top(root)
    anchor = top if top is not None else root
    below_top = match_form(root.relative_to(anchor).as_posix()) if root != anchor else ""
    levels: list[Level] = []
    sources = [global_excludes_file(root)]
    if top is not None and (git_dir := _git_dir(top)) is not None:
        sources.append(git_dir / "info" / "exclude")
    for source in sources:
        spec = compile_ignore_file(_read(source))
        if spec is not None:
            levels.insert(0, Level(spec, prefix=below_top + "/" if below_top else ""))
    if below_top:
        parts = root.relative_to(anchor).parts
        for depth in range(len(parts)):
            directory = anchor.joinpath(*parts[:depth])
            spec = compile_ignore_file(_read(directory / ".gitignore"))
            if spec is not None:
                rest = "/".join(parts[depth:])
                levels.insert(0, Level(spec, prefix=match_form(rest) + "/"))
    return Rules(tuple(levels))


def ignore_checker(base: Rules, gitignores: dict[str, bytes]) -> Callable[[str, bool], bool]:
    """Returns `ignored(path, is_dir)` for a tree whose `.gitignore` files are `gitignores`.

    `gitignores` maps a directory (wire form, "" for the root) to the bytes of its
    `.gitignore`. Unlike `Rules.ignored`, the returned function may be asked
    about any path: it answers True for everything below an ignored directory.
    """
    rules_at: dict[str, Rules] = {}
    dir_ignored: dict[str, bool] = {}

    def rules_for(directory: str) -> Rules:
        if directory not in rules_at:
            parent, _, _ = directory.rpartition("/")
            outer = base if not directory else rules_for(parent)
            data = gitignores.get(directory)
            rules_at[directory] = outer.child(directory, data) if data else outer
        return rules_at[directory]

    def ignored(path: str, is_dir: bool) -> bool:
        parent, _, _ = path.rpartition("/")
        if parent:
            if parent not in dir_ignored:
                dir_ignored[parent] = ignored(parent, True)
            if dir_ignored[parent]:
                return True
        return rules_for(parent).ignored(path, is_dir=is_dir)

    return ignored
