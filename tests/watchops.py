"""Random file operations of every kind a watcher must see, for the differential tests.

`Ops` drives one tree with a seeded generator: writes of the same and of a new
size, creates, deletes, renames within and across directories, a directory moved
away and recreated with new contents, `mkdir -p` chains, rmdir, chmod, symlink
creation and swaps, writes through a hard link from another directory, edits of
every ignore-rule source (`.gitignore` anywhere, `info/exclude`, the global
excludes file), `git add -f` of an ignored file, `git rm -r --cached` of a directory, a
directory made a nested repository and made none again, and whole-second mtimes set with
`os.utime`. Each op returns a short description, so a failure can say what led to it.
`records_hold` checks a watched capture's stat records against the tree.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from worksnap import Workspace
from worksnap.fsio import file_state
from worksnap.manifest import Manifest

NAMES = ["a", "b", "src", "lib", "build", "docs", "x y", "n\u00e9", "deep", "keep"]
FILES = ["main.py", "util.py", "a.log", "keep.log", "b.o", "README", "data.bin", "z", ".hidden"]
PATTERNS = ["*.log", "!keep.log", "build/", "*.o", "/docs", "deep/**/z", "lib", "!lib/", "x*"]


class Ops:
    """Random operations on the tree at `root`.

    Args:
        root: the workspace (a git repository when `git_dir` is given).
        rnd: the seeded generator.
        git_dir: the repository's git directory (for `info/exclude`, `git add -f`).
        global_excludes: the global excludes file git uses here.
        outside: a directory outside the root (for moves away and outside links).
        watched: the directories (relative wire paths) a watcher watches now, that is
            the ones captured: a new hard link is made in one of them. A link made
            in an ignored directory, or outside the tree, after the watcher last
            looked at the file raises no event at all (docs/performance.md).
        hard_links: include writes through hard links (and new ones).
        budget: past this many files in the tree, a step removes a directory or a file
            instead: creates outnumber removals, and a long run's tree (so each step's
            cost) would grow without end (tens of thousands of paths in 100,000 steps).
    """

    def __init__(
        self,
        root: Path,
        rnd: random.Random,
        *,
        git_dir: Path | None = None,
        global_excludes: Path | None = None,
        outside: Path | None = None,
        watched: Callable[[], list[str]] | None = None,
        hard_links: bool = True,
        budget: int | None = None,
    ) -> None:
        self.root = root
        self.rnd = rnd
        self.git_dir = git_dir
        self.global_excludes = global_excludes
        self.outside = outside
        self.watched = watched
        self.outer_links: list[Path] = []
        self.held: list[tuple[BinaryIO, str, int]] = []
        """Descriptors kept open across steps (`hold_descriptor`), and how each was made."""
        self._watched_inodes: dict[str, int] = {}
        """Names outside the tree of files inside it, linked before the watch began."""
        self.counter = 0
        self.budget = budget
        self.pruned = 0
        """Steps that removed something because the tree was over `budget`."""
        ops: list[tuple[int, Callable[[], str]]] = [
            (12, self.write_same_size),
            (10, self.write_new_size),
            (10, self.create),
            (6, self.delete),
            (4, self.rename_within),
            (4, self.rename_across),
            (2, self.move_dir_away_and_recreate),
            (3, self.mkdir_p),
            (2, self.rmdir),
            (3, self.chmod),
            (3, self.symlink),
            (3, self.gitignore),
            (2, self.utime_whole_second),
            (1, self.move_dir_within),
        ]
        if hard_links:
            ops += [(3, self.hard_link_write), (2, self.outer_link_write)]
            ops += [(2, self.descriptor_write), (2, self.hold_descriptor), (3, self.held_write)]
        if git_dir is not None:
            ops += [(1, self.info_exclude), (1, self.git_add_force), (1, self.git_rm_cached)]
            ops += [(1, self.nest), (1, self.unnest)]
        if global_excludes is not None:
            ops.append((1, self.global_exclude))
        self.ops = [op for weight, op in ops for _ in range(weight)]

    # -- picking -------------------------------------------------------------

    def _walk(self) -> tuple[list[str], list[str]]:
        dirs: list[str] = [str(self.root)]
        files: list[str] = []
        pending = [str(self.root)]
        while pending:
            with os.scandir(pending.pop()) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in (".git", ".worksnap"):
                        dirs.append(entry.path)
                        pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.path)
        return dirs, files  # paths as strings: a Path each costs more than the walk

    def _dir(self) -> Path:
        return Path(self.rnd.choice(self._walk()[0]))

    def _subdir(self) -> Path | None:
        dirs = self._walk()[0][1:]
        return Path(self.rnd.choice(dirs)) if dirs else None

    def _file(self) -> Path | None:
        files = self._walk()[1]
        return Path(self.rnd.choice(files)) if files else None

    def _data(self, size: int | None = None) -> bytes:
        self.counter += 1
        size = self.rnd.choice([0, 1, 7, 100, 3000]) if size is None else size
        stamp = f"{self.counter}:".encode()
        return (stamp * (size // len(stamp) + 1))[:size]

    def _name(self) -> str:
        return self.rnd.choice(FILES + NAMES)

    # -- the operations --------------------------------------------------------

    def step(self) -> str:
        """Does one random operation; returns what it did."""
        if self.budget is not None and len(self._walk()[1]) > self.budget:
            self.pruned += 1
            return self.rnd.choice([self.rmdir, self.delete])()
        return self.rnd.choice(self.ops)()

    def write_same_size(self) -> str:
        path = self._file()
        if path is None:
            return self.create()
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.write(self._data(size))
        return f"write same size {path}"

    def write_new_size(self) -> str:
        path = self._file()
        if path is None:
            return self.create()
        path.write_bytes(self._data(path.stat().st_size + self.rnd.choice([1, 13, 700])))
        return f"write new size {path}"

    def create(self) -> str:
        path = self._dir() / self._name()
        if path.is_dir() and not path.is_symlink():
            path = path / self._name()
        if path.is_symlink() or path.is_dir():
            return "create skipped"
        path.write_bytes(self._data())
        return f"create {path}"

    def delete(self) -> str:
        path = self._file()
        if path is None:
            return "delete skipped"
        path.unlink()
        return f"delete {path}"

    def rename_within(self) -> str:
        path = self._file()
        if path is None:
            return "rename skipped"
        target = path.parent / self._name()
        if target.is_dir() or target == path:
            return "rename skipped"
        os.rename(path, target)
        return f"rename {path} -> {target}"

    def rename_across(self) -> str:
        path = self._file()
        if path is None:
            return "rename skipped"
        target = self._dir() / path.name
        if target.is_dir() or target == path:
            return "rename skipped"
        os.rename(path, target)
        return f"rename {path} -> {target}"

    def move_dir_away_and_recreate(self) -> str:
        path = self._subdir()
        if path is None:
            return self.mkdir_p()
        self.counter += 1  # a fresh name: two moves with no write between once met
        if self.outside is not None and self.rnd.random() < 0.3:
            away = self.outside / f"away{self.counter}"
            while away.exists():  # an earlier walk's, on the same folder (its counter too)
                self.counter += 1
                away = self.outside / f"away{self.counter}"
            shutil.move(str(path), away)
        else:
            away = path.with_name(path.name + f".bak{self.counter}")
            os.rename(path, away)
        path.mkdir()
        (path / self.rnd.choice(FILES)).write_bytes(self._data())
        if self.rnd.random() < 0.5:
            (path / "lib").mkdir()
            (path / "lib" / self.rnd.choice(FILES)).write_bytes(self._data())
        return f"move {path} away to {away} and recreate it"

    def move_dir_within(self) -> str:
        path = self._subdir()
        if path is None:
            return self.mkdir_p()
        self.counter += 1  # a fresh name: moved{N} in the same place was ENOTEMPTY
        target = self._dir() / f"moved{self.counter}"
        if str(target).startswith(str(path) + "/"):
            return "move skipped"
        os.rename(path, target)
        return f"move {path} -> {target}"

    def mkdir_p(self) -> str:
        depth = self.rnd.randint(1, 6)
        path = self._dir().joinpath(*(self.rnd.choice(NAMES) for _ in range(depth)))
        try:
            path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            return "mkdir -p skipped"
        if self.rnd.random() < 0.7 and not (path / "main.py").is_dir():
            (path / "main.py").write_bytes(self._data())
        return f"mkdir -p {path}"

    def rmdir(self) -> str:
        path = self._subdir()
        if path is None:
            return "rmdir skipped"
        shutil.rmtree(path)
        return f"rm -r {path}"

    def chmod(self) -> str:
        path = self._file()
        if path is None:
            return "chmod skipped"
        mode = self.rnd.choice([0o644, 0o755, 0o600, 0o444])
        path.chmod(mode)
        return f"chmod {mode:o} {path}"

    def symlink(self) -> str:
        directory = self._dir()
        link = directory / self.rnd.choice(["ln", "link", "a.log", "cur"])
        target = self.rnd.choice(["main.py", "../x", "lib", "nowhere", f"t{self.counter}"])
        if link.is_dir() and not link.is_symlink():
            return "symlink skipped"
        if link.is_symlink() or link.exists():
            # Swap as `ln -sfn` does: a new link renamed over the old name.
            temp = directory / f".ln{self.counter}"
            os.symlink(target, temp)
            os.rename(temp, link)
            return f"swap symlink {link} -> {target}"
        os.symlink(target, link)
        return f"symlink {link} -> {target}"

    def hard_link_write(self) -> str:
        path = self._file()
        if path is None:
            return "hard link skipped"
        # Only in a directory watched now: one made since the last capture (a directory
        # moved away and made again at its path) is not watched until the next, and a
        # link written and then removed there is out of any watcher's sight.
        watched = [d for d in self.watched() if self._still_watched(d)] if self.watched else [""]
        if not watched:
            return "hard link skipped"
        other = self.root / self.rnd.choice(watched) / f"hl{self.counter}"
        if other.exists() or other.is_symlink() or not other.parent.is_dir():
            return "hard link skipped"
        os.link(path, other)
        size = other.stat().st_size
        with open(other, "r+b") as f:  # written through the other name, in place
            f.write(self._data(size))
        # Then the name may lose the inode written: `path` changed, and no event says so.
        fate = self.rnd.choice(["kept", "kept", "replaced", "moved on and replaced", "removed"])
        if fate == "removed":
            other.unlink()
        elif fate != "kept":
            if fate == "moved on and replaced":
                moved = other.with_name(f"{other.name}m")
                os.rename(other, moved)
                other = moved
            donor = other.with_name(f"{other.name}d")
            donor.write_bytes(self._data())
            os.rename(donor, other)  # another file renamed onto the name
        return f"hard link {path} as {other}, written through it, {fate}"

    def descriptor_write(self) -> str:
        """A file given a second name and opened by one of the two; that name is then taken
        by another file (renamed onto it, or removed and made again) or removed, and the
        descriptor is written through: the event names where it was opened, the bytes
        change under the file's other name."""
        held = self._hold()
        if held is None:
            return "descriptor write skipped"
        f, what = held
        with f:
            f.write(self._data())
        return f"{what}, wrote through the descriptor"

    def hold_descriptor(self) -> str:
        """As `descriptor_write`, but the descriptor stays open across snapshots (and
        restores): `held_write` writes through it later."""
        held = self._hold()
        if held is None:
            return "descriptor hold skipped"
        f, what = held
        # Its directory, to tell whether it is removed by the time of a write.
        self.held.append((f, what, os.open(os.path.dirname(f.name), os.O_PATH | os.O_DIRECTORY)))
        if len(self.held) > 4:
            self._release(self.held.pop(0))
        return f"{what}, kept the descriptor open"

    def held_write(self) -> str:
        """Writes through a descriptor `hold_descriptor` kept open (and closes it, now and then)."""
        if not self.held:
            return self.write_same_size()
        f, what, directory = held = self.rnd.choice(self.held)
        if os.fstat(directory).st_nlink == 0:
            # The directory of the name it was opened by was removed, and with it every
            # watch and mark on it: nothing is heard (docs/performance.md).
            self._release(held)
            self.held.remove(held)
            return f"descriptor dropped, its directory removed: {what}"
        f.seek(self.rnd.choice([0, 0, 3]))
        f.write(self._data())
        if self.rnd.random() < 0.2:
            self._release(held)
            self.held.remove(held)
        return f"wrote through the descriptor held since: {what}"

    def close(self) -> None:
        """Closes the descriptors `hold_descriptor` kept open."""
        for held in self.held:
            self._release(held)
        self.held.clear()

    @staticmethod
    def _release(held: tuple[BinaryIO, str, int]) -> None:
        held[0].close()
        os.close(held[2])

    def _hold(self) -> tuple[BinaryIO, str] | None:
        path = self._file()
        watched = [d for d in self.watched() if self._still_watched(d)] if self.watched else [""]
        if path is None or not watched:
            return None
        other = self.root / self.rnd.choice(watched) / f"fd{self.counter}"
        if other.exists() or other.is_symlink() or not other.parent.is_dir():
            return None
        os.link(path, other)
        opened, kept = self.rnd.choice([(other, path), (path, other)])
        here = Path(os.path.relpath(path.parent, self.root)).as_posix()
        if here not in [d or "." for d in watched]:
            # Opened by a name in an ignored directory, one that goes before any capture
            # saw the file linked: nothing is heard there (docs/performance.md).
            opened, kept = other, path
        f = open(opened, "r+b", buffering=0)  # noqa: SIM115  (closed by its caller)
        how = self.rnd.choice(["renamed onto", "removed and made again", "removed"])
        if how == "renamed onto":
            donor = opened.with_name(f"{opened.name}d")
            donor.write_bytes(self._data())
            os.rename(donor, opened)
        else:
            opened.unlink()
            if how == "removed and made again":
                opened.write_bytes(self._data())
        return f, f"linked {path} as {other}, opened {opened}, {how} (the file is {kept})"

    def note_watched(self) -> None:
        """Remembers which directory each path of `watched` is: a capture just watched them."""
        self._watched_inodes = {}
        for d in self.watched() if self.watched is not None else []:
            with contextlib.suppress(OSError):
                self._watched_inodes[d] = os.lstat(self.root / d).st_ino

    def _still_watched(self, d: str) -> bool:
        try:
            return os.lstat(self.root / d).st_ino == self._watched_inodes.get(d)
        except OSError:
            return False

    def link_outside(self, count: int) -> None:
        """Gives `count` files of the tree a second name outside it (before any watch)."""
        assert self.outside is not None
        for path in self._walk()[1][:count]:
            self.counter += 1
            outer = self.outside / f"outer{self.counter}"
            os.link(path, outer)
            self.outer_links.append(outer)

    def outer_link_write(self) -> str:
        if not self.outer_links:
            return "outer link skipped"
        outer = self.rnd.choice(self.outer_links)
        size = outer.stat().st_size
        with open(outer, "r+b") as f:
            f.write(self._data(size))
        return f"write through the outer link {outer}"

    def gitignore(self) -> str:
        path = self._dir() / ".gitignore"
        if path.is_dir() or path.is_symlink():
            return "gitignore skipped"
        return self._edit_rules(path)

    def info_exclude(self) -> str:
        assert self.git_dir is not None
        path = self.git_dir / "info" / "exclude"
        path.parent.mkdir(exist_ok=True)
        return self._edit_rules(path)

    def global_exclude(self) -> str:
        assert self.global_excludes is not None
        self.global_excludes.parent.mkdir(parents=True, exist_ok=True)
        return self._edit_rules(self.global_excludes)

    def _edit_rules(self, path: Path) -> str:
        lines = path.read_text().splitlines() if path.exists() else []
        if lines and self.rnd.random() < 0.4:
            lines.remove(self.rnd.choice(lines))
        else:
            lines.append(self.rnd.choice(PATTERNS))
        text = "".join(line + "\n" for line in lines)
        if path.exists() and self.rnd.random() < 0.3 and len(text) == path.stat().st_size:
            with open(path, "r+b") as f:  # same size, in place
                f.write(text.encode())
        else:
            path.write_text(text)
        return f"rules {path}: {lines}"

    def git_add_force(self) -> str:
        path = self._file()
        if path is None:
            return "git add skipped"
        rel = path.relative_to(self.root)
        subprocess.run(
            ["git", "add", "-f", "--", str(rel)], cwd=self.root, check=False, capture_output=True
        )
        return f"git add -f {rel}"

    def git_rm_cached(self) -> str:
        path = self._subdir()
        if path is None:
            return "git rm skipped"
        rel = path.relative_to(self.root)
        subprocess.run(
            ["git", "rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", str(rel)],
            cwd=self.root, check=False, capture_output=True,
        )  # fmt: skip
        return f"git rm -r --cached {rel}"

    def nest(self) -> str:
        """Makes a directory a nested repository (unless git tracks something in it)."""
        path = self._subdir()
        if path is None or (path / ".git").exists():
            return "nest skipped"
        for name in ("objects", "refs", "info"):
            (path / ".git" / name).mkdir(parents=True)
        (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (path / ".git" / "info" / "exclude").write_text(self.rnd.choice(PATTERNS) + "\n")
        return f"nested repository {path}"

    def unnest(self) -> str:
        nested = [d for d in self._walk()[0][1:] if os.path.isdir(os.path.join(d, ".git"))]
        if not nested:
            return "unnest skipped"
        path = Path(self.rnd.choice(nested))
        shutil.rmtree(path / ".git")
        return f"no longer a repository {path}"

    def utime_whole_second(self) -> str:
        path = self._file()
        if path is None:
            return "utime skipped"
        st = path.stat()
        if self.rnd.random() < 0.5:
            # A same-size write that puts the old whole-second mtime back.
            with open(path, "r+b") as f:
                f.write(self._data(st.st_size))
        second = st.st_mtime_ns // 10**9 * 10**9
        os.utime(path, ns=(second, second))
        return f"utime whole second {path}"


def records_hold(ws: Workspace, root: Path, taken: Manifest) -> tuple[int, int]:
    """Asserts each stat record is of a file `taken` holds, with its digest if it is as then.

    A record may be older than its file's state (a hard link made elsewhere moves the
    ctime with no event where the file is): then it vouches for nothing. Returns how
    many records are of files as they are now, and how many there are.
    """
    table = ws._capture._caches.stat_table()
    files = {e.path: e.hash for e in taken.entries if e.type == "file"}
    assert table.keys() <= files.keys(), sorted(table.keys() - files.keys())
    now = 0
    for rel, (state, digest) in table.items():
        if state == file_state(os.lstat(root / rel)):
            assert digest == files[rel], rel
            now += 1
    return now, len(table)
