"""Paths inside a workspace: the wire form, the checks a path must pass, and walking up.

Paths are kept in *wire form* everywhere inside worksnap: the UTF-8 text of the
name, except that a byte that is not part of valid UTF-8 is written as a NUL
character followed by two lowercase hex digits (NUL can never occur in a POSIX
name, so the escape is unambiguous and every valid UTF-8 name is its own wire
form). `fs_path` turns a wire path back into the exact bytes of the name.

String functions (and `Root`, a root with what is never captured in it) that the
scan, the applier and the manifest checks all stand on.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Container, Iterable
from typing import NewType

import msgspec

from worksnap.errors import InputError, shown

RelPath = NewType("RelPath", str)
"""A slash-separated path relative to the root, in wire form."""

Digest = NewType("Digest", str)
"""64 lowercase hex characters: the BLAKE3 digest of an object's bytes."""

_NUL = "\x00"
_ESCAPE = re.compile("\x00([89a-f][0-9a-f])")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
# `X:\` or `X:/`: absolute on Windows only. Here (POSIX) `C:\x` is one legal name and
# `C:/x` a file in a directory `C:`: whatever a snapshot captures, a restore accepts.
_DRIVE = re.compile(r"[A-Za-z]:[\\/]") if os.name == "nt" else None
# Code points HFS+ ignores when it compares names, so `.g\u200cit` opens `.git` there.
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


def is_digest(text: str) -> bool:
    """True when `text` has the form of a digest (64 lowercase hex characters)."""
    return _HEX64.match(text) is not None


def wire_name(name: str) -> str:
    """Returns the wire form of a name as `os` functions return it (surrogate-escaped)."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(
            f"{_NUL}{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in name
        )
    return name


def fs_path(path: str) -> bytes:
    """Returns the exact bytes of a wire-form path."""
    if _NUL not in path:
        return path.encode("utf-8", "surrogatepass")
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(path):
        out += path[pos : match.start()].encode("utf-8", "surrogatepass")
        out.append(int(match.group(1), 16))
        pos = match.end()
    out += path[pos:].encode("utf-8", "surrogatepass")
    return bytes(out)


def is_canonical(text: str) -> bool:
    """True when a wire-form string has no NUL except canonical escapes of non-UTF-8 bytes."""
    if _NUL not in text:
        return True
    raw = fs_path(text)
    return b"\x00" not in raw and wire_name(os.fsdecode(raw)) == text


def is_git_name(component: str) -> bool:
    """True for every spelling git itself refuses as a path component.

    As git's `verify_path` with core.protectNTFS and core.protectHFS: any case
    (`.GIT`), trailing dots and spaces (`.git. .`), an NTFS stream
    (`.git::$INDEX_ALLOCATION`), the NTFS short name (`git~1`), and HFS+
    ignorable code points anywhere (`.g\u200cit`).
    """
    if component.isascii():  # the common case, asked for every name a scan sees
        lowered = component.lower()
        if not lowered.startswith((".git", "git~1")):
            return False
        return lowered.partition(":")[0].rstrip(". ") in (".git", "git~1")
    name = _HFS_IGNORED.sub("", component).lower().partition(":")[0].rstrip(". ")
    return name in (".git", "git~1")


def may_hold_git_name(path: str) -> bool:
    """False when no component of `path` can be a spelling of `.git` (checked per path)."""
    if not path.isascii():
        return True  # HFS+ ignorable code points can hide one: check each component
    lowered = path.lower()
    return ".git" in lowered or "git~1" in lowered


def in_git(path: str) -> bool:
    """True when a component of `path` is a spelling of `.git` (`is_git_name`)."""
    return may_hold_git_name(path) and any(is_git_name(part) for part in path.split("/"))


def check_path(path: str, what: str) -> str | None:
    """Returns why `path` is not a safe, normal wire-form relative path, or None when it is."""
    if not path:
        return f"{what} has an empty path"
    if path.startswith("/") or (_DRIVE is not None and _DRIVE.match(path)):
        return f"{what} {shown(path)!r} is absolute"
    if os.sep != "/" and "\\" in path:
        return f"{what} {shown(path)!r} has a backslash"
    bounded = f"/{path}/"  # every component between slashes: three searches, no split
    if "//" in bounded or "/./" in bounded or "/../" in bounded:
        return f"{what} {shown(path)!r} has an empty, '.' or '..' component"
    if not is_canonical(path):
        return f"{what} {shown(path)!r} has a NUL byte or a non-canonical escape"
    return None


def real_root(root: str | os.PathLike[str], *, force: bool) -> str:
    """The real path of a workspace root, once it passed the checks every root must pass.

    Raises:
        InputError: the root is not a directory, is `/` or home without `force`, or its
            own path is not valid UTF-8.
    """
    if not os.path.isdir(root):
        raise InputError(f"root {os.fspath(root)!r} is not a directory")
    real = os.path.realpath(root)
    if not force and real in ("/", os.path.realpath(os.path.expanduser("~"))):
        raise InputError(
            f"refusing {real} as a workspace root: it is / or your home directory, "
            "and a snapshot would take all of it (pass --force if you really mean it)"
        )
    try:
        real.encode()
    except UnicodeEncodeError:
        # Records and caches name the root as JSON text (docs/format.md): every snapshot
        # ended in a traceback, after its objects were written (a review). Names inside
        # the tree are wire paths, any bytes.
        shown_bytes = repr(os.fsencode(shown(real)))[1:]
        raise InputError(
            f"root {shown_bytes}: a root's own path must be valid UTF-8 "
            "(names inside the tree need not be): rename or move the directory"
        ) from None
    return real


def is_under(path: str, parent: str) -> bool:
    """True when `path` is `parent` or lies below it (both relative wire paths)."""
    return path == parent or path.startswith(parent + "/")


def ancestors(path: str) -> Iterable[str]:
    """Yields `path` and every directory above it, deepest first."""
    while path:
        yield path
        path = path.rpartition("/")[0]


def with_parents(paths: Iterable[str]) -> set[str]:
    """`paths` and every directory above one of them, the root ("") included."""
    out = {""}
    for path in paths:
        up = path
        while up not in out:
            out.add(up)
            up = up.rpartition("/")[0]
    return out


def under_any(path: str, paths: Container[str]) -> bool:
    """True when `path` is one of `paths` or lies below one (`ancestors`, without a generator).

    A plan asks it of every path that differs: the loop costs half of `any` over `ancestors`.
    """
    while path:
        if path in paths:
            return True
        path = path.rpartition("/")[0]
    return False


def relative_to(root: str, path: str) -> str | None:
    """Returns `path` (absolute) relative to `root` in wire form, or None if outside it."""
    rel = os.path.relpath(path, root)
    if rel in {".", ".."} or rel.startswith("../"):
        return None
    return wire_name(rel)


def cwd_below(root: str) -> str | None:
    """The current directory relative to `root` (wire form), when below it; else None."""
    try:
        return relative_to(root, os.getcwd())
    except OSError:
        return None  # removed already


class Root(msgspec.Struct, frozen=True):
    """A workspace root and what is never captured nor touched in it.

    Attributes:
        path: absolute and symlink-resolved.
        wire: `path` in wire form (what manifests record).
        store_rel: the store's path inside the root (wire form), or None when outside.
        exclude: relative wire paths never captured nor touched (the store among them),
            and patterns (see `exclusion.py`).
        covered: whether the patterns and side files of `exclude` cover a path or a
            directory above it (None: `exclude` holds only paths).
    """

    path: str
    wire: str
    store_rel: str | None
    exclude: frozenset[str]
    covered: Callable[[str], bool] | None = None

    def inside(self, path: str | os.PathLike[str], what: str) -> str:
        """Returns a path given relative to the root, or absolute, as a safe wire path inside it.

        Raises:
            InputError: the path is outside the root, the root itself, or not a normal path.
        """
        absolute = os.path.normpath(os.path.join(self.path, os.fspath(path)))
        if absolute == self.path:
            raise InputError(
                f"{what} {shown(os.fspath(path))!r} is the root ({self.path}) itself, "
                "not a path inside it"
            )
        rel = relative_to(self.path, absolute)
        if rel is None:  # spelled through a symlink to the root or above it (`$PWD/x`, as git)
            parent, name = os.path.split(absolute)
            rel = relative_to(self.path, os.path.join(os.path.realpath(parent), name))
        if rel is None or check_path(rel, what) is not None:
            raise InputError(f"{what} {shown(os.fspath(path))!r} is not a path inside {self.path}")
        return rel

    def selection(
        self, paths: Iterable[str | os.PathLike[str]] | None, *, named: bool = True
    ) -> list[str] | None:
        """Returns the paths a caller selected, as `named` (else `inside`) returns them.

        None, the whole tree, when `paths` is None or one of them is the root itself
        (`.` at the top, `..` below it: as git takes them), so that naming the root
        does exactly what naming nothing does. The others are checked all the same.

        Raises:
            InputError: a path outside the root, excluded (`named`), empty, or not normal.
        """
        if paths is None:
            return None
        given = [os.fspath(p) for p in paths]
        if "" in given:  # an unset variable in a script: never the whole tree (as git)
            raise InputError("an empty path is not a path: name the root as '.'")
        top = [os.path.normpath(os.path.join(self.path, p)) == self.path for p in given]
        rels = [
            self.named(p) if named else self.inside(p, "path")
            for p, is_root in zip(given, top, strict=True)
            if not is_root
        ]
        return None if any(top) else rels

    def named(self, path: str | os.PathLike[str]) -> str:
        """Returns a path a caller named, inside the root and outside what is never captured.

        Raises:
            InputError: outside the root, excluded, the store, or inside a `.git`.
        """
        rel = self.inside(path, "path")
        # Every spelling of .git the scan leaves out, not only the exact name.
        if (
            any(is_under(rel, excluded) for excluded in self.exclude)
            or (self.covered is not None and self.covered(rel))
            or in_git(rel)
        ):
            raise InputError(
                f"{shown(rel)!r} is excluded (the store, .git, --exclude or `config exclude`)"
            )
        return rel

    def here(self) -> str | None:
        """Where this process runs, as a relative wire path, when below the root (else None).

        A restore keeps it, and the directories above it, where it would remove them
        (`plan.keep_standing`).
        """
        return cwd_below(self.path)

    def special(self, rel: str) -> bool:
        """True when a FIFO, socket or device is at `rel` now (never captured: excluded).

        A look only (`lstat`, links not followed at the end), for a preview to report.
        """
        try:
            mode = os.lstat(os.path.join(os.fsencode(self.path), fs_path(rel))).st_mode
        except OSError:
            return False
        return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))

    def probe(self, rel: str) -> tuple[int, int] | None:
        """A file's size and newest time now (None: gone); for `plan.unprotected`."""
        try:
            st = os.lstat(os.path.join(os.fsencode(self.path), fs_path(rel)))
        except OSError:
            return None
        return st.st_size, max(st.st_mtime_ns, st.st_ctime_ns)
