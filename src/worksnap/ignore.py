"""Ignore rules, decided exactly as git decides them.

Sources, from lowest to highest precedence (as `git status` reads them): the
global excludes file, `$GIT_DIR/info/exclude`, then `.gitignore` files from the
repository top down to the directory of the path. The deepest file with a
matching pattern decides, and within a file the last matching pattern. A nested
repository starts afresh with its own sources, as git run inside it would.

Each pattern is translated to a regular expression over the raw bytes of the
path (RE2 in Latin-1 mode: one byte is one character, as in git's wildmatch),
and each ignore file becomes one RE2 set, so one pass over a path finds every
pattern of the file that matches it. docs/ignore-rules.md lists the rules and
the git quirks reproduced here.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import re2
from blake3 import blake3

from worksnap.errors import InputError
from worksnap.fsio import read_regular
from worksnap.paths import ancestors, fs_path
from worksnap.sources import (
    MAX_RULE_BYTES,
    Sources,
    common_dir_of,
    find_top,
    git_dir_of,
    source_files,
)

_BOM = b"\xef\xbb\xbf"

_OPTIONS = re2.Options()
_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # one byte, one character
_OPTIONS.dot_nl = True  # names may contain newlines
_OPTIONS.never_capture = True
_OPTIONS.log_errors = False
_OPTIONS.max_mem = 64 << 20  # a budget, used as needed: a 400 kB line compiles (8 MiB: 90 kB)

_SLASH, _BACKSLASH, _STAR, _QUESTION = ord("/"), ord("\\"), ord("*"), ord("?")
_OPEN, _CLOSE, _COLON, _DASH = ord("["), ord("]"), ord(":"), ord("-")

# The character classes of git's wildmatch. git's own ctype table is ASCII only,
# whatever the locale, and its isspace() leaves out \v and \f.
_LOWER = frozenset(range(ord("a"), ord("z") + 1))
_UPPER = frozenset(range(ord("A"), ord("Z") + 1))
_DIGIT = frozenset(range(ord("0"), ord("9") + 1))
_GRAPH = frozenset(range(0x21, 0x7F))
_CLASSES: dict[bytes, frozenset[int]] = {
    b"alnum": _LOWER | _UPPER | _DIGIT,
    b"alpha": _LOWER | _UPPER,
    b"blank": frozenset(b" \t"),
    b"cntrl": frozenset([*range(0x20), 0x7F]),
    b"digit": _DIGIT,
    b"graph": _GRAPH,
    b"lower": _LOWER,
    b"print": _GRAPH | {0x20},
    b"punct": _GRAPH - _LOWER - _UPPER - _DIGIT,
    b"space": frozenset(b" \t\n\r"),
    b"upper": _UPPER,
    b"xdigit": _DIGIT | frozenset(b"abcdefABCDEF"),
}


def _literal(data: bytes) -> str:
    """Returns a regular expression matching exactly `data`."""
    return "".join(chr(c) if c < 0x80 and chr(c).isalnum() else f"\\x{c:02x}" for c in data)


def _char_class(chars: set[int]) -> str:
    """Returns a regular expression matching one byte of `chars` (not empty)."""
    parts: list[str] = []
    items = sorted(chars)
    start = 0
    for end in range(len(items)):
        if end + 1 == len(items) or items[end + 1] != items[end] + 1:
            low, high = items[start], items[end]
            parts.append(f"\\x{low:02x}" if low == high else f"\\x{low:02x}-\\x{high:02x}")
            start = end + 1
    return "[" + "".join(parts) + "]"


_NOT_SLASH = _char_class(set(range(1, 256)) - {_SLASH})


def _bracket(p: bytes, i: int) -> tuple[set[int], int] | None:
    """Parses the bracket expression that opens at `p[i]`, step for step as wildmatch does.

    Returns the bytes it matches and the index after it, or None where wildmatch
    gives up (no closing `]`, an unknown `[:class:]`): the pattern then matches
    nothing. `]` first is literal, a backslash escapes, and after a range or a
    class a `-` is literal again.
    """
    n = len(p)
    i += 1
    negated = i < n and p[i] in b"!^"
    if negated:
        i += 1
    chars: set[int] = set()
    prev = 0  # the previous character, 0 after a range or a class
    while True:
        if i >= n:
            return None
        c = p[i]
        if c == _BACKSLASH:
            i += 1
            if i >= n:
                return None
            c = p[i]
            chars.add(c)
        elif c == _DASH and prev and i + 1 < n and p[i + 1] != _CLOSE:
            i += 1
            c = p[i]
            if c == _BACKSLASH:
                i += 1
                if i >= n:
                    return None
                c = p[i]
            chars.update(range(prev, c + 1))  # a reversed range matches nothing
            c = 0
        elif c == _OPEN and i + 1 < n and p[i + 1] == _COLON:
            end = p.find(b"]", i + 2)
            if end < 0:
                return None
            if end == i + 2 or p[end - 1] != _COLON:
                chars.add(_OPEN)  # no ":]" before the next "]": a literal "["
            else:
                members = _CLASSES.get(p[i + 2 : end - 1])
                if members is None:
                    return None
                chars.update(members)
                i = end
                c = 0
        else:
            chars.add(c)
        prev = c
        i += 1
        if i < n and p[i] == _CLOSE:
            break
    matched = {c for c in range(1, 256) if (c in chars) != negated}
    matched.discard(_SLASH)  # never matches a slash
    return matched, i + 1


def _wildmatch(p: bytes, *, pathname: bool) -> str | None:
    """Translates a wildmatch pattern; None when it can match nothing.

    With `pathname` (a pattern with a slash), `**` between slashes or at an end
    of `p` crosses directories. `p` is what git hands to wildmatch: for such a
    pattern, what follows its literal prefix, so `**` at the start of `p`
    counts as following a slash even when the prefix ends otherwise.
    """
    out: list[str] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == _BACKSLASH:
            if i + 1 == n:
                return None  # a trailing backslash matches nothing
            out.append(_literal(p[i + 1 : i + 2]))
            i += 2
        elif c == _QUESTION:
            out.append(_NOT_SLASH)
            i += 1
        elif c == _STAR:
            j = i
            while j < n and p[j] == _STAR:
                j += 1
            if (
                pathname
                and j - i >= 2
                and (i == 0 or p[i - 1] == _SLASH)
                and (j == n or p[j] == _SLASH or p[j : j + 2] == b"\\/")
            ):
                if j < n and p[j] == _SLASH:
                    out.append("(?:.*/)?")  # "**/": no directory, or any number of them
                    j += 1
                else:
                    out.append(".*")  # "/**" at the end; "**\/" is not optional in git
            else:
                out.append(_NOT_SLASH + "*")
            i = j
        elif c == _OPEN:
            parsed = _bracket(p, i)
            if parsed is None or not parsed[0]:
                return None
            out.append(_char_class(parsed[0]))
            i = parsed[1]
        else:
            out.append(_literal(p[i : i + 1]))
            i += 1
    return "".join(out)


def _simple_length(p: bytes) -> int:
    """The length of the literal start of a pattern (up to its first glob character)."""
    for i, c in enumerate(p):
        if c in b"*?[\\":
            return i
    return len(p)


def _trim_trailing_spaces(line: bytes) -> bytes:
    """Drops trailing spaces (not tabs) unless escaped; the escaping backslash stays."""
    end = len(line)
    while end and line[end - 1] == 0x20:
        end -= 1
    if end == len(line):
        return line
    backslashes = 0
    while backslashes < end and line[end - 1 - backslashes] == _BACKSLASH:
        backslashes += 1
    if backslashes % 2:
        end += 1  # "\ " keeps that space
    return line[:end]


def translate(line: bytes) -> tuple[str, bool, bool] | None:
    """Translates one line of an ignore file as git's dir.c parses it.

    Returns (regular expression over a path relative to the file's directory,
    negated, directories only), or None for a line that can match nothing.
    The line has its end of line and trailing spaces already removed.
    """
    negated = line.startswith(b"!")
    if negated:
        line = line[1:]
    dir_only = line.endswith(b"/")
    if dir_only:
        line = line[:-1]  # only one: "foo//" keeps a slash and matches nothing
    if not line:
        return None
    if b"/" not in line:
        # No slash: matched against the last component of the path only.
        body = _wildmatch(line, pathname=False)
        return None if body is None else ("(?:.*/)?" + body, negated, dir_only)
    prefix = _simple_length(line)
    if line.startswith(b"/"):
        line = line[1:]
        prefix -= 1
    # git compares the literal prefix first and wildmatches only the rest.
    body = _wildmatch(line[prefix:], pathname=True)
    return None if body is None else (_literal(line[:prefix]) + body, negated, dir_only)


def pattern_lines(data: bytes) -> list[bytes]:
    """Splits an ignore file into pattern lines as git does.

    A UTF-8 BOM is skipped; lines end at LF, one CR before it goes; empty lines
    and lines starting with `#` are skipped; a line ends at a NUL byte (git reads
    it as a C string); trailing spaces go unless escaped.
    """
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    lines: list[bytes] = []
    for raw in data.split(b"\n"):
        if not raw or raw.startswith(b"#"):
            continue
        line = raw[:-1] if raw.endswith(b"\r") else raw
        lines.append(_trim_trailing_spaces(line.partition(b"\0")[0]))
    return lines


_CHUNK = 500
_CHUNK_BYTES = 16 << 10
"""Patterns per RE2 set: at most `_CHUNK`, and no more than `_CHUNK_BYTES` of regex but
for one longer line on its own. One set for a huge file would outgrow RE2's memory
budget (500 lines of 190 bytes failed to compile under the default 8 MiB, a review), and
a set's matches run out of memory where a lone regex falls back: chunks stay small."""


def _compile_chunks(patterns: list[tuple[bytes, bool]]) -> list[tuple[re2.Set, list[bool]]]:
    """Compiles (regex, negated) pairs into RE2 sets (`_CHUNK`), the last lines first."""
    chunks: list[tuple[re2.Set, list[bool]]] = []
    start = 0
    while start < len(patterns):
        end, size = start, 0
        while end < len(patterns) and end - start < _CHUNK:
            size += len(patterns[end][0])
            if size > _CHUNK_BYTES and end > start:
                break
            end += 1
        regex_set = re2.Set.FullMatchSet(_OPTIONS)
        for regex, _ in patterns[start:end]:
            regex_set.Add(regex)
        regex_set.Compile()  # raises re2.error only for a line of megabytes (`compile_ignore_file`)
        chunks.insert(0, (regex_set, [negated for _, negated in patterns[start:end]]))
        start = end
    return chunks


class Matcher:
    """One compiled ignore file: which of its lines decides for a path."""

    __slots__ = ("dirs", "files")

    def __init__(self, patterns: list[tuple[str, bool, bool]]) -> None:
        # Lines ending in "/" only ever match directories: files are asked without them.
        self.dirs = _compile_chunks([(r.encode("ascii"), n) for r, n, _ in patterns])
        self.files = _compile_chunks([(r.encode("ascii"), n) for r, n, d in patterns if not d])

    def decide(self, text: bytes, *, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included by a `!` line) or None (no line matches)."""
        for regex_set, negated in self.dirs if is_dir else self.files:
            found = regex_set.Match(text)
            if found is not None:
                # RE2 reports matches in no particular order: the last line wins.
                return not negated[max(found)]
        return None


@lru_cache(maxsize=4096)
def compile_ignore_file(data: bytes) -> Matcher | None:
    """Compiles the bytes of one ignore file; None when no pattern in it can match."""
    patterns = [p for p in map(translate, pattern_lines(data)) if p is not None]
    try:
        return Matcher(patterns) if patterns else None
    except re2.error:
        line = max(pattern_lines(data), key=len)
        raise InputError(
            f"an ignore rule of {len(line):,} bytes is too long for worksnap to match: "
            f"{line[:40].decode(errors='replace')!r}... (in a .gitignore, info/exclude or the "
            "global excludes file)"
        ) from None


class Level:
    """One ignore file: its patterns and where its paths are relative to.

    A path relative to the root (as bytes) becomes relative to this file's
    directory by dropping its first `strip` bytes (the file's directory below
    the root, and a slash) and prepending `prefix` (the root below the file's
    directory and a slash, for files that apply from above the root).
    """

    __slots__ = ("matcher", "prefix", "strip")

    def __init__(self, matcher: Matcher, *, strip: int = 0, prefix: bytes = b"") -> None:
        self.matcher = matcher
        self.strip = strip
        self.prefix = prefix


class Rules:
    """The ignore files in force in one directory, deepest first. Immutable.

    `root` is the absolute root the paths are relative to, when known: it lets
    `ignore_checker` find nested repositories on disk.
    """

    __slots__ = ("_all", "key", "levels", "outside", "root", "sources")

    def __init__(
        self,
        levels: tuple[Level, ...] = (),
        root: str | None = None,
        key: bytes = b"",
        sources: Sources | None = None,
    ) -> None:
        self.levels = levels
        self.root = root
        self.key = key
        """For rules from `base_rules`: a digest of every source read, so a cache of
        decisions made under them can tell when they changed."""
        self.sources = sources
        """For rules from `base_rules`: what they were read from (see `Sources.unchanged`)."""
        self._all: Rules | None = None
        self.outside: Rules | None = None
        """For rules from `ignore_all`: the rules in force where the ignored directory is,
        which a directory git tracks whole (a gitlink) inside it is entered under."""

    def ignore_all(self) -> Rules:
        """Rules that ignore every path: those inside an ignored directory (as git sees it)."""
        if self.outside is not None:
            return self  # already inside one
        if self._all is None:
            matcher = compile_ignore_file(b"*")
            assert matcher is not None
            self._all = Rules((Level(matcher),), self.root, self.key)
            self._all.outside = self
        return self._all

    def child(self, dir_path: str, data: bytes) -> Rules:
        """Returns the rules inside `dir_path` (wire form, "" for the root) given its .gitignore."""
        matcher = compile_ignore_file(data)
        if matcher is None:
            return self
        strip = len(fs_path(dir_path)) + 1 if dir_path else 0
        return Rules((Level(matcher, strip=strip), *self.levels), self.root, self.key, self.sources)

    def ignored(self, path: str, *, is_dir: bool) -> bool:
        """True when git would ignore `path` (wire form, relative to the root).

        The caller walks top-down and never asks about anything below an
        ignored directory: git never looks there, so nothing there can be
        re-included.
        """
        if not self.levels:
            return False
        text = fs_path(path)
        for level in self.levels:
            if level.strip or level.prefix:
                decided = level.matcher.decide(level.prefix + text[level.strip :], is_dir=is_dir)
            else:
                decided = level.matcher.decide(text, is_dir=is_dir)
            if decided is not None:
                return decided
        return False


def global_excludes_file(top: Path) -> Path | None:
    """Returns git's global excludes file for the work tree (or directory) at `top`.

    That is `core.excludesFile` (a relative path is relative to the top of the
    work tree; an empty value means none), else `$XDG_CONFIG_HOME/git/ignore`,
    else `~/.config/git/ignore`.
    """
    try:
        out = subprocess.run(
            ["git", "config", "--path", "--get", "core.excludesFile"],
            cwd=top,
            capture_output=True,
            timeout=10,
            check=False,
            env=dict(os.environ),  # the daemon gives each command its client's environment
        )
        if out.returncode == 0:
            configured = os.fsdecode(out.stdout.rstrip(b"\n"))
            return top / configured if configured else None
    except (OSError, subprocess.SubprocessError):
        pass  # no git on this machine: fall back to the default location, as git would
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        return Path(xdg) / "git" / "ignore"
    home = os.environ.get("HOME")
    return Path(home) / ".config" / "git" / "ignore" if home else None


def _read(path: Path | None, *, follow: bool) -> bytes:
    """Reads an ignore file; a missing or unreadable one counts as empty (as in git).

    git does not follow a symlinked `.gitignore` in the work tree (>= 2.32), but
    does follow `info/exclude` and the global file.
    """
    if path is None:
        return b""
    try:
        if not follow and path.is_symlink():
            return b""
    except OSError:
        return b""
    return read_regular(path, MAX_RULE_BYTES) or b""  # a FIFO there never hangs a scan


def _excludes(
    top: Path,
    git_dir: Path | None,
    *,
    strip: int,
    prefix: bytes,
    read: list[bytes],
    global_file: Path | None,
) -> list[Level]:
    """Returns the levels for `info/exclude` and the global file, in precedence order.

    What was read is appended to `read`.
    """
    levels: list[Level] = []
    sources: list[Path | None] = (
        [] if git_dir is None else [common_dir_of(git_dir) / "info" / "exclude"]
    )
    sources.append(global_file)
    for source in sources:
        read.append(_read(source, follow=True))
        matcher = compile_ignore_file(read[-1])
        if matcher is not None:
            levels.append(Level(matcher, strip=strip, prefix=prefix))
    return levels


def base_rules(root: Path) -> Rules:
    """Returns the rules in force at `root` before its own `.gitignore` is read.

    That is the global excludes file, the repository's `info/exclude`, and the
    `.gitignore` files between the repository top and `root`.
    """
    read_at = time.time_ns()
    found = find_top(root)
    top, git_dir = found if found is not None else (root, None)
    global_file = global_excludes_file(top)
    # Stamped before they are read: a change while reading shows at the next check.
    common = common_dir_of(git_dir) if git_dir is not None else None
    sources = Sources.watch(source_files(root, top, common, git_dir, global_file), read_at)
    parts = root.relative_to(top).parts
    below = os.fsencode("/".join(parts)) + b"/" if parts else b""
    read: list[bytes] = []
    levels = _excludes(top, git_dir, strip=0, prefix=below, read=read, global_file=global_file)
    for depth in range(len(parts)):
        directory = top.joinpath(*parts[:depth])
        read.append(_read(directory / ".gitignore", follow=False))
        matcher = compile_ignore_file(read[-1])
        if matcher is not None:
            rest = os.fsencode("/".join(parts[depth:])) + b"/"
            levels.insert(0, Level(matcher, prefix=rest))
    key = blake3(b"\0".join([os.fsencode(str(top)), below, *read]), max_threads=1).digest()
    return Rules(tuple(levels), str(root), key, sources)


def repo_rules(outer: Rules, dir_path: str) -> Rules | None:
    """Returns the rules at the top of a nested repository at `dir_path`, or None if none is there.

    git does not look into a nested repository; git run inside it reads only
    its own ignore files, so those are the ones that apply below `dir_path`.
    """
    if outer.root is None:
        return None
    top_name = os.path.join(outer.root, os.fsdecode(fs_path(dir_path)))
    if not os.path.lexists(os.path.join(top_name, ".git")):
        return None  # (the usual answer, in one lstat: a plan asks about every directory)
    top = Path(top_name)
    git_dir = git_dir_of(top)
    if git_dir is None:
        return None
    strip = len(fs_path(dir_path)) + 1
    levels = _excludes(
        top, git_dir, strip=strip, prefix=b"", read=[], global_file=global_excludes_file(top)
    )
    return Rules(tuple(levels), outer.root, outer.key)


def ignore_checker(
    base: Rules,
    gitignore: Callable[[str], bytes | None],
    whole: Callable[[str], bool] | None = None,
    nested: Callable[[str], bool] | None = None,
) -> Callable[[str, bool], bool]:
    """Returns `ignored(path, is_dir)` for a tree whose `.gitignore` files `gitignore` gives.

    `gitignore(directory)` returns the bytes of a directory's `.gitignore` (wire form,
    "" for the root), or None; it is asked once per directory, only about the
    directories above the paths asked about. Unlike `Rules.ignored`, the returned
    function may be asked about any path: it answers True for everything below an
    ignored directory, except below one that `whole` says was entered whole (git
    tracks it as a gitlink): that one is entered as the scan enters it, under the
    rules in force above the ignored directories it is in, and its own `.gitignore`.
    Nested repositories are the ones on disk now (a restore never touches `.git`);
    `nested(directory)`, when given, says whether one may be there (a `.git` is, and
    git's index tracks nothing in the directory: git walks that one as its own), so
    that only those directories are looked up by path. Directories are decided from
    the top down, so a path of any depth is decided without deep recursion.
    """
    rules_at: dict[str, Rules] = {}
    dir_ignored: dict[str, bool] = {}

    def rules_for(directory: str) -> Rules:
        if directory not in rules_at:
            outer = base
            if directory:
                outer = rules_for(directory.rpartition("/")[0])
                if nested is None or nested(directory):
                    outer = repo_rules(outer, directory) or outer
            # git reads no .gitignore inside an ignored directory.
            data = None if directory and is_ignored_dir(directory) else gitignore(directory)
            rules_at[directory] = outer.child(directory, data) if data else outer
        return rules_at[directory]

    def is_ignored_dir(directory: str) -> bool:
        if directory not in dir_ignored:
            dir_ignored[directory] = ignored(directory, True) and not (
                whole is not None and whole(directory)
            )
        return dir_ignored[directory]

    def ignored(path: str, is_dir: bool) -> bool:
        parent, _, _ = path.rpartition("/")
        if parent not in dir_ignored:
            for directory in reversed(list(ancestors(parent))):  # from the top: each asks
                if is_ignored_dir(directory):  # only about directories already decided
                    break
                rules_for(directory)
        if parent and is_ignored_dir(parent):
            return True
        return rules_for(parent).ignored(path, is_dir=is_dir)

    return ignored
