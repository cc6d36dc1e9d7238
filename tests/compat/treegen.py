"""Random trees full of names and ignore patterns that hit git's corner cases.

Everything is bytes: names need not be UTF-8, and patterns are written byte
for byte. A tree is a pure function of its seed, so a failure is reproduced by
its seed alone.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from .gitrun import init_repo

# Names that meet the patterns below: glob characters, escapes, leading `#`/`!`,
# leading and trailing spaces, tabs, newlines, CR, multi-byte UTF-8 and bytes
# that are not UTF-8 at all (`?` matches one byte in git).
NAMES: list[bytes] = [
    b"a",
    b"b",
    b"ab",
    b"foo",
    b"bar",
    b"build",
    b"doc",
    b"src",
    b"x.log",
    b"keep.log",
    b"a.o",
    b"notes.txt",
    b"B.TXT",
    b"node_modules",
    b".hidden",
    b"dir.d",
    b"#hash",
    b"!bang",
    b" lead",
    b"trail ",
    b"two  ",
    b"sp ace",
    b"tab\t",
    b"b[r]",
    b"st*r",
    b"q?",
    b"back\\sl",
    b"**",
    b"-x",
    b"x-",
    b"]x",
    b"nl\nx",
    b"cr\r",
    "é".encode(),
    "abé".encode(),
    "日本".encode(),
    b"\xff",
    b"ab\xc3",
    b"x\xe9y",
    b"1x",
    b"Zz",
    b"a\\",
    b"vt\x0b",
    b"xz",
]

# Patterns that stand alone: every feature of the gitignore format, and the
# inputs where a naive translation to regular expressions goes wrong.
FIXED: list[bytes] = [
    b"*.log",
    b"!keep.log",
    b"*.o",
    b"!*.o",
    b"build/",
    b"/build",
    b"!build/",
    b"doc/*.txt",
    b"doc/**/*.txt",
    b"**/foo",
    b"**/foo/bar",
    b"foo/**",
    b"a/**/b",
    b"a/**",
    b"**/",
    b"**",
    b"/**",
    b"*",
    b"*/",
    b"!*/",
    b"!*",
    b"*.*",
    b"?",
    b"??",
    b"a?",
    b"[ab]",
    b"[!a]",
    b"[^a]*",
    b"[a-c]*",
    b"[[:alpha:]]*",
    b"[[:digit:][:punct:]]*",
    b"[[:punct:]]*",
    b"*[[:space:]]*",
    b"*[[:upper:]]*",
    b"[[:bogus:]]*",
    b"[[:al]*",
    b"x[z-a]",
    b"x[a-]",
    b"[]]x",
    b"[\\]]x",
    b"[a-c-e]*",
    b"a[",
    b"\\#hash",
    b"#hash",
    b"\\!bang",
    b"!bang",
    b"trail\\ ",
    b"trail ",
    b"two\\  ",
    b" lead",
    b"sp\\ ace",
    b"tab\t",
    b"b\\[r\\]",
    b"b[[]r[]]",
    b"b[r]",
    b"st\\*r",
    b"q\\?",
    b"back\\\\sl",
    b"back\\sl",
    b"\\",
    b"a\\",
    b"\\**",
    "é".encode(),
    b"ab?",
    b"ab??",
    b"ab\xc3",
    b"\xff",
    b"[\xc3]*",
    b"*\xa9",
    b"x?y",
    b"foo**/bar",
    b"a/b**",
    b"a**",
    b"**a",
    b"***",
    b"a/***/b",
    b"a/**\\/b",
    b"foo//",
    b"/",
    b"!",
    b"/*",
    b"/*/",
    b"*/*",
    b"*/*/",
    b"foo/*",
    b"foo/*/",
    b".*",
    b".hidden",
    b"node_modules/",
    b"!node_modules/keep",
    b"**/node_modules/**",
    b"nl",
    b"cr\r",
    b"!/foo",
    b"/foo/",
    b"foo/",
    b"a\0b",
    b"/a[!x]b",
    b"a[/]b",
    b"ab/**\\/c",
]

GLOB_SPECIAL = b"\\*?["


@dataclass
class Tree:
    """A tree to build: every path relative to its root, as bytes."""

    seed: int
    files: dict[bytes, bytes] = field(default_factory=dict)
    dirs: list[bytes] = field(default_factory=list)
    symlinks: dict[bytes, bytes] = field(default_factory=dict)
    repos: list[bytes] = field(default_factory=list)
    """Nested repositories (git init), deepest last."""
    gitfile_repos: list[bytes] = field(default_factory=list)
    """The nested repositories whose `.git` is a file pointing elsewhere."""
    fake_git: list[bytes] = field(default_factory=list)
    """Directories with a `.git` directory that is no repository: git walks in."""
    fake_gitfile: list[bytes] = field(default_factory=list)
    """Directories with a `.git` file that is no `gitdir:` file: git walks in (but refuses
    to run in them or below them)."""
    info_exclude: dict[bytes, bytes] = field(default_factory=dict)
    """Repository ("" for the top) -> its info/exclude."""
    global_excludes: bytes | None = None
    excludes_file: str | None = None
    """Where the global excludes live: None (the XDG default), "LINK" (the XDG default
    is a symlink), or core.excludesFile set to "~/global-ignore", "ABS" (an absolute
    path) or "REL" (a path relative to the work tree's top)."""

    def build(self, root: bytes) -> None:
        """Creates the tree under `root` (an empty directory)."""
        for d in self.dirs:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        for path, data in self.files.items():
            with open(os.path.join(root, path), "wb") as f:
                f.write(data)
        for path, target in self.symlinks.items():
            os.symlink(target, os.path.join(root, path))
        for d in self.fake_git:
            os.makedirs(os.path.join(root, d, b".git", b"refs"))
        for d in self.fake_gitfile:
            with open(os.path.join(root, d, b".git"), "wb") as f:
                f.write(b"not a gitdir line\n")

    def setup_git(self, root: bytes, home: bytes, xdg: bytes, *, top: bool = True) -> None:
        """Writes the global excludes, makes the nested repositories and, with `top`, `root`.

        Without `top`, `root` stays a plain directory (its info/exclude is skipped)
        and `init_top` makes it a repository later.
        """
        self._global(root, home, xdg)
        for number, repo in enumerate(self.repos):
            # Some nested repositories keep their git directory elsewhere (a `.git` file).
            elsewhere = root + b"-gitdirs/%d" % number if repo in self.gitfile_repos else None
            self._info(init_repo(os.path.join(root, repo), git_dir=elsewhere), repo)
        if top:
            self.init_top(root)

    def init_top(self, root: bytes) -> None:
        """Makes `root` a repository, with its info/exclude."""
        self._info(init_repo(root), b"")

    def _info(self, git_dir: bytes, repo: bytes) -> None:
        if repo in self.info_exclude:
            info = os.path.join(git_dir, b"info")
            os.makedirs(info, exist_ok=True)
            with open(os.path.join(info, b"exclude"), "wb") as f:
                f.write(self.info_exclude[repo])

    def _global(self, root: bytes, home: bytes, xdg: bytes) -> None:
        if self.global_excludes is None:
            return
        default = os.path.join(xdg, b"git", b"ignore")
        where = {
            None: default,
            "LINK": os.path.join(home, b"real-ignore"),
            "~/global-ignore": os.path.join(home, b"global-ignore"),
            "ABS": os.path.join(home, b"abs-ignore"),
            "REL": os.path.join(root, b"rel-ignore"),
        }[self.excludes_file]
        with open(where, "wb") as f:
            f.write(self.global_excludes)
        if self.excludes_file == "LINK":
            os.symlink(where, default)
        elif self.excludes_file is not None:
            value = {"ABS": where, "REL": b"rel-ignore"}.get(self.excludes_file, b"~/global-ignore")
            with open(os.path.join(home, b".gitconfig"), "wb") as f:
                f.write(b"[core]\n\texcludesFile = " + value + b"\n")

    def ignore_files(self) -> list[tuple[bytes, bytes]]:
        """Every ignore file and its bytes, for a failure message."""
        found = [(p, d) for p, d in sorted(self.files.items()) if p.endswith(b".gitignore")]
        found += [
            (b"<.gitignore symlink> " + p, t)
            for p, t in self.symlinks.items()
            if p.endswith(b".gitignore")
        ]
        found += [(b"<info/exclude of> " + r, d) for r, d in self.info_exclude.items()]
        if self.global_excludes is not None:
            where = os.fsencode(self.excludes_file or "XDG default")
            found.append((b"<global excludes: " + where + b">", self.global_excludes))
        return found

    def describe(self) -> str:
        """The seed and every ignore file, for a failure message."""
        lines = [f"seed {self.seed}; nested repos {self.repos} (.git file: {self.gitfile_repos})"]
        lines.append(f"  not repositories: .git dir {self.fake_git}, .git file {self.fake_gitfile}")
        lines += [f"  {p!r}: {d!r}" for p, d in self.ignore_files()]
        return "\n".join(lines)


def _escape(name: bytes) -> bytes:
    out = b"".join(b"\\" + bytes([c]) if c in GLOB_SPECIAL else bytes([c]) for c in name)
    if out[:1] in (b"#", b"!"):
        out = b"\\" + out
    if out.endswith(b" "):
        out = out[:-1] + b"\\ "
    return out


def _globbed(rng: random.Random, name: bytes) -> bytes:
    """Turns a name into a glob that should still match it (mostly)."""
    if not name:
        return b"*"
    pos = rng.randrange(len(name))
    head, char, tail = _escape(name[:pos]), name[pos : pos + 1], _escape(name[pos + 1 :])
    kind = rng.randrange(7)
    if kind == 0:
        return head + b"?" + tail
    if kind == 1:
        return head + b"*"
    if kind == 2:
        return b"*" + tail
    if kind == 3:
        return head + b"[" + char.replace(b"\\", b"\\\\").replace(b"]", b"\\]") + b"x]" + tail
    if kind == 4:
        return head + b"[!" + char + b"]" + tail  # misses on purpose, or bracket trouble
    if kind == 5:
        return head + b"**" + tail
    return head + b"[[:alpha:][:digit:]]" + tail


def _pattern_for(rng: random.Random, rel: bytes, is_dir: bool) -> bytes:
    """A pattern aimed at the path `rel` (relative to the ignore file's directory)."""
    parts = rel.split(b"/")
    name = parts[-1]
    lit = _escape(name)
    kind = rng.randrange(12)
    if kind == 0:
        pat = lit
    elif kind == 1:
        pat = b"/" + b"/".join(_escape(p) for p in parts)
    elif kind == 2:
        pat = b"/".join(_escape(p) for p in parts)
    elif kind == 3:
        pat = b"**/" + lit
    elif kind == 4:
        pat = _escape(parts[0]) + b"/**"
    elif kind == 5:
        pat = _escape(parts[0]) + b"/**/" + lit
    elif kind == 6:
        pat = _globbed(rng, name)
    elif kind == 7:
        pat = b"/".join(_globbed(rng, p) if rng.random() < 0.5 else _escape(p) for p in parts)
    elif kind == 8:
        pat = name  # unescaped: glob characters in the name act as globs
    elif kind == 9:
        pat = b"*" + name[-2:]
    elif kind == 10:
        pat = _escape(parts[0]) + b"/*" if len(parts) > 1 else b"*/" + lit
    else:
        pat = b"/".join(b"*" if rng.random() < 0.4 else _escape(p) for p in parts)
    if rng.random() < (0.5 if is_dir else 0.15):
        pat += b"/"
    if rng.random() < 0.3:
        pat = b"!" + pat
    return pat


def _ignore_file(rng: random.Random, targets: list[tuple[bytes, bool]]) -> bytes:
    """The bytes of one ignore file aimed at `targets` (relative path, is a directory)."""
    lines: list[bytes] = []
    for _ in range(rng.randint(1, 7)):
        roll = rng.random()
        if roll < 0.55 and targets:
            rel, is_dir = rng.choice(targets)
            lines.append(_pattern_for(rng, rel, is_dir))
        elif roll < 0.92:
            lines.append(rng.choice(FIXED))
        elif roll < 0.96:
            lines.append(b"# a comment")
        else:
            lines.append(b"")
    if rng.random() < 0.1:
        i = rng.randrange(len(lines))
        lines[i] += b"  "  # trailing spaces git strips
    eol = b"\r\n" if rng.random() < 0.2 else b"\n"
    data = eol.join(lines)
    if rng.random() < 0.8:
        data += eol
    if rng.random() < 0.1:
        data = b"\xef\xbb\xbf" + data
    return data


def generate(seed: int, *, nested: bool = True) -> Tree:
    """Returns the random tree for `seed`."""
    rng = random.Random(seed)
    tree = Tree(seed)
    kinds: dict[bytes, bool] = {}  # every path -> is a real directory

    def fill(directory: bytes, depth: int) -> None:
        for _ in range(rng.randint(1, 5 if depth else 7)):
            name = rng.choice(NAMES)
            path = directory + b"/" + name if directory else name
            if path in kinds:
                continue
            roll = rng.random()
            if roll < 0.3 and depth < 3:
                kinds[path] = True
                tree.dirs.append(path)
                fill(path, depth + 1)
            elif roll < 0.4:
                kinds[path] = False
                target = rng.choice([b".", b"..", rng.choice(NAMES), b"nowhere", b"../" + name])
                tree.symlinks[path] = target
            else:
                kinds[path] = False
                tree.files[path] = b"x"

    fill(b"", 0)
    if nested:
        for d in tree.dirs:
            roll = rng.random()
            if roll < 0.06:
                tree.repos.append(d)  # possibly inside another nested repository
                if rng.random() < 0.3:
                    tree.gitfile_repos.append(d)
            elif roll < 0.075:
                tree.fake_git.append(d)
            elif roll < 0.09:
                tree.fake_gitfile.append(d)

    def below(directory: bytes) -> list[tuple[bytes, bool]]:
        if not directory:
            return list(kinds.items())
        start = directory + b"/"
        return [(p[len(start) :], k) for p, k in kinds.items() if p.startswith(start)]

    for d in [b"", *tree.dirs]:
        if rng.random() < (0.85 if not d else 0.4):
            where = d + b"/.gitignore" if d else b".gitignore"
            data = _ignore_file(rng, below(d))
            roll = rng.random()
            if roll < 0.04:
                # git does not follow a symlinked .gitignore inside the work tree
                tree.files[where + b".real"] = data
                tree.symlinks[where] = b".gitignore.real"
            elif roll < 0.06:
                tree.dirs.append(where)  # a directory named .gitignore is no ignore file
                tree.files[where + b"/x"] = data
            else:
                tree.files[where] = data
    for repo in [b"", *tree.repos]:
        if rng.random() < 0.3:
            tree.info_exclude[repo] = _ignore_file(rng, below(repo))
    if rng.random() < 0.3:
        tree.global_excludes = _ignore_file(rng, below(b""))
        tree.excludes_file = rng.choice([None, None, "~/global-ignore", "ABS", "LINK", "REL"])
    return tree
