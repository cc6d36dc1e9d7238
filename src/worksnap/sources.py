"""Sources: what ignore decisions depend on besides the `.gitignore` files in the tree.

- `Sources`: the files base rules were read from (`info/exclude`, the global excludes
  file, the git config files that may name it, `.gitignore` files above the root, a
  `.git` above the root) and the environment naming them, with their stamps, so that
  a long-lived workspace can tell when to read them again.
- `Tracked`: the paths git's index tracks, which are never ignored (`git add -f`),
  exactly as `git status` treats them.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from blake3 import blake3

from worksnap.fsio import Stamp, read_regular, stamp_of
from worksnap.gitindex import GitDirs, find_git_dirs, work_tree_index
from worksnap.paths import fs_path

_HEX = re.compile(rb"[0-9a-fA-F]+")

RACY_SOURCE_NS = 2_000_000_000
"""A rule source changed this close to when it was read may have changed again within
the same timestamp tick (whole seconds on some file systems): it is read again."""


def source_stamp(path: str) -> Stamp | None:
    """What says a rule source (or git's index) changed: its inode, size and times."""
    try:
        st = os.stat(path)  # info/exclude and the global file are followed, as git does
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        # A repository's `.git`: only its coming and going matters (git writes in it all
        # the time).
        return (st.st_ino, -1, 0, 0)
    return stamp_of(st)


def _content(path: str) -> bytes | None:
    """A digest of what a source holds now, as far as rules are read (None: nothing there).

    None too for a directory. The bytes were kept up to 1 MiB: a same-size edit past
    that left a long-lived workspace under the old rules.
    """
    data = read_regular(path, MAX_RULE_BYTES)
    return None if data is None else blake3(data, max_threads=1).digest()


MAX_RULE_BYTES = 64 << 20
"""A rule file is read up to this (no real one comes near), and compared as far."""
_MAX_GITLINK = 64 * 1024  # a `.git` file or `commondir`: one path (a FIFO there hung scans)


def _environment() -> tuple[tuple[str, str], ...]:
    """The variables that decide which git config and excludes files apply."""
    return tuple(
        sorted(
            (name, value)
            for name, value in os.environ.items()
            if name.startswith("GIT_CONFIG") or name in ("HOME", "XDG_CONFIG_HOME")
        )
    )


class Sources:
    """The files base rules were read from (or that would change them if they appeared).

    `unchanged` re-stats them: a dozen `stat` calls, cheap enough for every capture,
    so a long-lived workspace (the daemon's) follows edits to `info/exclude`, the
    global excludes file, `core.excludesFile` in any git config file, a `.gitignore`
    above the root, a `.git` appearing above it, and the environment naming them.
    A source whose stamp moved, or moved too recently to be sure of it (within
    `RACY_SOURCE_NS`), is read and compared byte for byte; only a difference in
    what it holds makes the rules be read again.
    """

    __slots__ = ("entries", "env")

    def __init__(self, entries: list[list[object]], env: tuple[tuple[str, str], ...]) -> None:
        self.entries = entries
        """[path, stamp, content, time its content was last compared] for each source."""
        self.env = env

    @classmethod
    def watch(cls, paths: list[str], read_at: int) -> Sources:
        """Stamps and reads `paths` now (before the rules are read from them)."""
        entries: list[list[object]] = [[p, source_stamp(p), _content(p), read_at] for p in paths]
        return cls(entries, _environment())

    def unchanged(self) -> bool:
        """True when no source changed since the rules were read (False: read them again)."""
        if _environment() != self.env:
            return False
        for entry in self.entries:
            path, stamp, content, checked_at = entry
            now = source_stamp(str(path))
            if (
                now == stamp
                and now is not None
                and max(now[2], now[3]) < int(checked_at) - RACY_SOURCE_NS  # type: ignore[call-overload]
            ):
                continue
            if now is None and stamp is None:
                continue
            if now is None or stamp is None or -1 in (now[1], stamp[1]):  # type: ignore[index]
                return False  # a source (or a repository's `.git`) appeared, went or moved
            checked = time.time_ns()
            if _content(str(path)) != content:
                return False
            entry[1], entry[3] = now, checked
        return True


def source_files(
    root: Path, top: Path, common_dir: Path | None, git_dir: Path | None, global_file: Path | None
) -> list[str]:
    """Every file whose change can change the base rules of `root`."""
    files = [str(directory / ".git") for directory in (root, *root.parents)]  # repositories
    if git_dir is not None and common_dir is not None:
        files += [str(common_dir / "info" / "exclude"), str(common_dir / "config")]
        files.append(str(git_dir / "config.worktree"))
        parts = root.relative_to(top).parts
        files += [str(top.joinpath(*parts[:depth]) / ".gitignore") for depth in range(len(parts))]
    if global_file is not None:
        files.append(str(global_file))
    return files + config_files()


def config_files() -> list[str]:
    """The system and global git config files, where git looks for them."""
    env = os.environ
    files: list[str] = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        home = env.get("HOME")
        xdg = env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else None)
        if xdg:
            files.append(os.path.join(xdg, "git", "config"))
        if home:
            files.append(os.path.join(home, ".gitconfig"))
    return files


class Tracked:
    """The paths git's index tracks below a root: never ignored (`git add -f`), as in git.

    Paths are raw bytes relative to the root. A sparse index's directory entry
    (ending in `/`) stands for the files git tracks below it, outside the sparse
    checkout's cone: which ones only git's objects tell, so no path below it counts as
    tracked (a file made there is judged by the rules, as `git status` judges it: a
    review found ignored build output captured and overwritten), but the directory
    `holds` some. `gitlinks`: the paths among them tracked as another repository's
    commit (a submodule's).
    """

    __slots__ = ("_dirs", "_sparse", "gitlinks", "paths")

    def __init__(self, paths: frozenset[bytes], gitlinks: frozenset[bytes] = frozenset()) -> None:
        self.paths = paths
        self.gitlinks = gitlinks
        self._sparse = tuple(p for p in paths if p.endswith(b"/"))
        self._dirs: frozenset[bytes] | None = None

    def is_tracked(self, rel: str) -> bool:
        """True when git tracks the path (wire form, relative to the root)."""
        return fs_path(rel) in self.paths

    def holds(self, rel_dir: str) -> bool:
        """True when git tracks something below the directory."""
        if self._dirs is None:
            dirs: set[bytes] = set()
            for path in self.paths:
                end = path.rfind(b"/", 0, len(path) - 1)
                while end > 0:
                    parent = path[:end]
                    if parent in dirs:
                        break
                    dirs.add(parent)
                    end = path.rfind(b"/", 0, end)
            self._dirs = frozenset(dirs)
        raw = fs_path(rel_dir)
        return raw in self._dirs or any(raw.startswith(d) for d in self._sparse)

    @property
    def enters_any(self) -> bool:
        """True when git tracks some directory itself (see `enters_whole`)."""
        return bool(self.gitlinks)

    def enters_whole(self, rel_dir: str) -> bool:
        """True when git tracks the directory itself, as a gitlink (a submodule's).

        A path tracked as a file or symlink that is a directory now is not: git sees
        the file deleted and decides about the directory as about any untracked one.
        """
        return fs_path(rel_dir) in self.gitlinks

    def changed_since(self, other: Tracked | None) -> set[bytes]:
        """The paths tracked by one of the two and not the other, or tracked otherwise."""
        if other is None:
            return set(self.paths)
        return set(self.paths ^ other.paths) | (self.gitlinks ^ other.gitlinks)


def is_git_dir(path: Path) -> bool:
    """Whether `path` looks like a git directory to git: HEAD, objects and refs."""
    common = common_dir_of(path)
    return _valid_head(path / "HEAD") and all((common / d).is_dir() for d in ("objects", "refs"))


def _valid_head(head: Path) -> bool:
    """Whether git takes `head` for a HEAD (its `validate_headref`).

    That is a symlink to `refs/...`, "ref:" and `refs/...`, or an object id. A review
    found a `HEAD` of garbage taken for a repository's (git walks such a directory under
    the outer rules) and a symlinked one not.
    """
    try:
        return os.readlink(head).startswith("refs/")
    except OSError:
        pass  # not a symlink (or none at all: then nothing is read below)
    data = read_regular(head, 255) or b""
    if data.startswith(b"ref:"):
        return data[4:].lstrip(b" \t\n\r").startswith(b"refs/")  # (git's isspace)
    return any(len(data) >= n and _HEX.fullmatch(data[:n]) for n in (40, 64))


def common_dir_of(git_dir: Path) -> Path:
    """Returns the directory holding a git directory's shared parts (`info/exclude` too)."""
    data = read_regular(git_dir / "commondir", _MAX_GITLINK)
    if data is None:
        return git_dir
    return (git_dir / data.decode("utf-8", "surrogateescape").strip()).resolve()


def git_dir_of(top: Path) -> Path | None:
    """Returns the git directory of a work tree at `top` (follows a `gitdir:` file), or None.

    None also when `top/.git` is no repository (git then treats `top` as a
    plain directory).
    """
    dot_git = top / ".git"
    if dot_git.is_dir():
        git_dir = dot_git
    else:
        data = read_regular(dot_git, _MAX_GITLINK)
        text = data.decode("utf-8", "surrogateescape") if data is not None else ""
        if not text.startswith("gitdir: "):
            return None
        git_dir = (top / text[len("gitdir: ") :].rstrip("\r\n")).resolve()
    return git_dir if is_git_dir(git_dir) else None


def find_top(root: Path) -> tuple[Path, Path] | None:
    """Returns the nearest work tree at or above `root` and its git directory, or None."""
    for candidate in (root, *root.parents):
        git_dir = git_dir_of(candidate)
        if git_dir is not None:
            return candidate, git_dir
    return None


def _work_tree(root: Path) -> tuple[Path, GitDirs] | None:
    found = find_top(root)
    if found is None:
        return None
    dirs = find_git_dirs(found[0])
    return None if dirs is None else (found[0], dirs)


def index_file(root: Path) -> str | None:
    """The index of the repository `root` is in (it may not exist yet); None outside one."""
    found = _work_tree(root)
    return None if found is None else str(found[1].index_file)


def tracked_below(root: Path) -> Tracked | None:
    """What git tracks below `root` (None outside a repository).

    Raises:
        InputError: the index is damaged (named in the message).
    """
    found = _work_tree(root)
    if found is None:
        return None
    top, dirs = found
    index = work_tree_index(dirs.git_dir)
    paths, gitlinks = index.paths, index.gitlinks
    parts = root.relative_to(top).parts
    if parts:
        below = os.fsencode("/".join(parts)) + b"/"
        cut = len(below)
        paths = frozenset(p[cut:] for p in paths if p.startswith(below) and len(p) > cut)
        gitlinks = frozenset(p[cut:] for p in gitlinks if p.startswith(below) and len(p) > cut)
    return Tracked(paths, gitlinks)
