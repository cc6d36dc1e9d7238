"""Which paths git tracks in a work tree, read from the repository's index file.

A file git tracks belongs to the workspace even when an ignore pattern matches it
(`git add -f`), exactly as `git status` treats it. This module only reads: it
finds the index of a work tree and lists its paths as raw bytes, relative to the
top of the work tree, the way `git ls-files -z --cached --sparse` prints them.

What is read (the format is git's `Documentation/gitformat-index.txt`):

- index versions 2, 3 (extended flags: skip-worktree, intent-to-add) and 4
  (path names prefix-compressed against the previous entry);
- SHA-1 or SHA-256 repositories (`extensions.objectFormat` in the config);
- the trailing checksum, which git itself only checks in `git fsck`: a damaged
  index is refused here rather than half-read (an all-zero checksum is git's
  `index.skipHash` and is accepted unchecked, as git does);
- a split index (`link` extension, `core.splitIndex`): the shared index
  `sharedindex.<hash>` beside it is read and merged as git merges it;
- a sparse index: a directory entry outside the sparse-checkout cone stands for
  every file below it (git's `ls-files --sparse` prints it the same way, with its
  trailing `/`); those files are skip-worktree, absent from the work tree;
- optional extensions (`TREE`, `REUC`, `UNTR`, `FSMN`, `EOIE`, `IEOT`) are
  skipped; a required extension this reader does not know is refused, as git does.

Where the index is: `<git-dir>/index`, with the git directory found from the work
tree's `.git` (a directory, or a `gitdir:` file as in linked work trees,
submodules and `--separate-git-dir`). The environment is deliberately not read:
`GIT_INDEX_FILE` and `GIT_DIR` are set by git for hooks and for `git commit`'s
temporary indexes, and a command run from such a hook must still see the work
tree's own index, the one `git status` shows in a plain shell.

Damage is an `InputError` with one line that names the file; a missing index (a
repository with nothing added yet) is not an error: it tracks nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import NamedTuple

from worksnap.errors import InputError

INDEX_MAX_BYTES = 1 << 30
"""Larger index files are refused: 1 GiB is about ten million entries."""

_SMALL_FILE_MAX_BYTES = 1 << 16  # a `.git` file, `commondir`, the repository config

_SIGNATURE = b"DIRC"
_HEADER = 12
_HASH_SIZES = {"sha1": 20, "sha256": 32}
_MIN_ENTRY = 62  # stat data and flags around a SHA-1, before the name: the smallest entry

# Entry flags (big-endian 16 bits after the object id), and the extended flags (v3+).
_NAME_MASK = 0x0FFF
_EXTENDED = 0x4000
_SKIP_WORKTREE = 0x4000
_INTENT_TO_ADD = 0x2000
_KNOWN_EXTENDED = _SKIP_WORKTREE | _INTENT_TO_ADD
_SLOW_FLAGS = _EXTENDED | _NAME_MASK
_MODE_OFFSET = 24
_DIR_MODE = 0o040000


class GitDirs(NamedTuple):
    """Where a work tree's repository data lives.

    Attributes:
        git_dir: the work tree's own git directory (for a linked work tree,
            `<common>/worktrees/<name>`); its `index` is the work tree's index.
        common_dir: the directory holding the config and objects shared by all
            work trees of the repository (the same as `git_dir` for the main one).
    """

    git_dir: Path
    common_dir: Path

    @property
    def index_file(self) -> Path:
        """The work tree's index file (it may not exist yet)."""
        return self.git_dir / "index"


class IndexContents(NamedTuple):
    """What an index says, by raw path relative to the top of the work tree.

    Attributes:
        version: the index format version (2, 3 or 4).
        paths: every path, as `git ls-files -z --cached --sparse` lists them
            (sparse directory entries included, with their trailing `/`).
        skip_worktree: paths git does not look for in the work tree (sparse
            checkout, `git update-index --skip-worktree`); sparse directories too.
        intent_to_add: paths added with `git add -N`, content not yet staged.
        sparse_dirs: directory entries of a sparse index, each ending in `/`.
        gitlinks: paths tracked as a commit of another repository (a submodule's).
    """

    version: int
    paths: frozenset[bytes]
    skip_worktree: frozenset[bytes]
    intent_to_add: frozenset[bytes]
    sparse_dirs: frozenset[bytes]
    gitlinks: frozenset[bytes] = frozenset()


def find_git_dirs(work_tree: Path) -> GitDirs | None:
    """Finds the repository of the work tree whose top is `work_tree`.

    Looks only at `work_tree/.git` (no walk upwards, no environment): a directory
    is the git directory; a file says `gitdir: <path>` (relative to the work tree).
    A git directory with a `commondir` file is a linked work tree's, whose common
    directory that file names (relative to the git directory).

    Returns:
        The directories, or None when `work_tree` has no `.git`.

    Raises:
        InputError: `.git` is a file that does not name a git directory.
    """
    dot_git = work_tree / ".git"
    try:
        st = os.stat(dot_git)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise InputError(f"cannot read {dot_git}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        git_dir = dot_git
    else:
        text = _read_small(dot_git).rstrip(b"\r\n")
        if not text.startswith(b"gitdir: ") or b"\n" in text:
            raise InputError(f"{dot_git} is not a git directory nor a 'gitdir:' file")
        git_dir = Path(os.path.realpath(work_tree / os.fsdecode(text[len(b"gitdir: ") :])))
        if not git_dir.is_dir():
            raise InputError(f"{dot_git} names {git_dir}, which is not a directory")
    return GitDirs(git_dir=git_dir, common_dir=_common_dir(git_dir))


def tracked_paths(git_dir: Path) -> frozenset[bytes]:
    """The paths the index of `git_dir` tracks, as `git ls-files -z --cached --sparse` does.

    Args:
        git_dir: a work tree's own git directory (`GitDirs.git_dir`).

    Returns:
        Raw paths relative to the top of the work tree; empty when there is no index.

    Raises:
        InputError: the index (or its shared index) is damaged, truncated, too
            large, of an unknown version, or needs an extension not known here.
    """
    return work_tree_index(git_dir).paths


def work_tree_index(git_dir: Path) -> IndexContents:
    """What the index of `git_dir` says (nothing when there is no index).

    Raises:
        InputError: as for `tracked_paths`.
    """
    contents = read_index(git_dir / "index", object_format=_object_format(_common_dir(git_dir)))
    return contents if contents is not None else _NO_INDEX


def read_index(index: Path, *, object_format: str = "sha1") -> IndexContents | None:
    """Reads one index file (and the shared index it links to, if split).

    Args:
        index: the index file.
        object_format: the repository's hash, `sha1` or `sha256`.

    Returns:
        Its contents, or None when the file does not exist.

    Raises:
        InputError: as for `tracked_paths`.
    """
    if object_format not in _HASH_SIZES:
        raise InputError(f"{index}: unknown object format {object_format!r}")
    try:
        data = _read_bounded(index, INDEX_MAX_BYTES)
    except FileNotFoundError:
        return None
    parsed = _parse(data, str(index), object_format)
    names, special = parsed.names, parsed.special
    if parsed.link is not None and any(parsed.link.base):
        names, special = _merge_shared(index, parsed, object_format)
    skip = {names[i] for i, bits in special.items() if bits & _SKIP_WORKTREE}
    intent = {names[i] for i, bits in special.items() if bits & _INTENT_TO_ADD}
    dirs = {names[i] for i, bits in special.items() if bits & _SPARSE_DIR}
    gitlinks = {names[i] for i, bits in special.items() if bits & _GITLINK}
    return IndexContents(
        version=parsed.version,
        paths=frozenset(names),
        skip_worktree=frozenset(skip),
        intent_to_add=frozenset(intent),
        sparse_dirs=frozenset(dirs),
        gitlinks=frozenset(gitlinks),
    )


_NO_INDEX = IndexContents(
    version=2,
    paths=frozenset(),
    skip_worktree=frozenset(),
    intent_to_add=frozenset(),
    sparse_dirs=frozenset(),
)


# -- parsing ---------------------------------------------------------------------

_SPARSE_DIR = 0x10000  # not a git bit: marks a sparse directory entry in `special`
_GITLINK = 0x20000  # nor this one: marks a gitlink (mode 160000) in `special`
_TYPE_AT = _MODE_OFFSET + 2  # the byte holding the four object type bits of the mode
_GITLINK_TYPE = 0xE0  # 0o160000 >> 8


class _Link(NamedTuple):
    """The `link` extension: the shared index's id, then its delete and replace bitmaps."""

    base: bytes
    bitmaps: bytes


class _Parsed(NamedTuple):
    version: int
    names: list[bytes]
    special: dict[int, int]  # entry position -> extended flags (and _SPARSE_DIR)
    link: _Link | None
    checksum: bytes


def _parse(data: bytes, where: str, object_format: str) -> _Parsed:
    """Parses a whole index file; any damage is an InputError naming `where`."""
    hash_size = _HASH_SIZES[object_format]
    if len(data) < _HEADER + hash_size:
        raise InputError(f"git index {where} is truncated ({len(data)} bytes)")
    if data[:4] != _SIGNATURE:
        raise InputError(f"{where} is not a git index (no DIRC signature)")
    version = int.from_bytes(data[4:8], "big")
    if version not in (2, 3, 4):
        raise InputError(f"git index {where} has version {version}; versions 2 to 4 are known")
    count = int.from_bytes(data[8:12], "big")
    limit = len(data) - hash_size
    if count > (limit - _HEADER) // _MIN_ENTRY:
        raise InputError(
            f"git index {where} is damaged: {count} entries cannot fit in {len(data)} bytes"
        )
    try:
        if version == 4:
            names, special, pos = _entries_v4(data, count, hash_size)
        else:
            names, special, pos = _entries_v2(data, count, hash_size)
    except (IndexError, ValueError):
        pos = len(data)  # ran off the end (or found no NUL): reported just below
    except _Damage as exc:
        raise InputError(f"git index {where} is damaged: {exc}") from None
    if pos > limit:
        raise InputError(f"git index {where} is truncated: its entries run past its end")
    link: _Link | None = None
    # As git does, fewer than 8 bytes left before the checksum are no extension.
    while pos + 8 <= limit:
        signature = data[pos : pos + 4]
        size = int.from_bytes(data[pos + 4 : pos + 8], "big")
        start, pos = pos + 8, pos + 8 + size
        if pos > limit:
            raise InputError(f"git index {where} is damaged: an extension runs past its end")
        if signature == b"link":
            if size < hash_size:
                raise InputError(f"git index {where} has a damaged 'link' extension")
            link = _Link(
                base=data[start : start + hash_size], bitmaps=data[start + hash_size : pos]
            )
        elif signature == b"sdir" or b"A"[0] <= signature[0] <= b"Z"[0]:
            continue  # optional (upper case), or the sparse-index marker
        elif signature.isalpha():
            raise InputError(
                f"git index {where} needs the extension {signature.decode()!r}, "
                "which is not known here"
            )
        else:
            raise InputError(f"git index {where} is damaged: unreadable data after its entries")
    # Checked last, so that a truncated file is called truncated. git itself only
    # checks it in `git fsck`; it costs 4 ms for 50,000 entries.
    checksum = data[limit:]
    if any(checksum):  # all zero: written with index.skipHash, nothing to check
        expected = hashlib.new(object_format, memoryview(data)[:limit]).digest()
        if checksum != expected:
            raise InputError(f"git index {where} is damaged: its checksum does not match")
    return _Parsed(version=version, names=names, special=special, link=link, checksum=checksum)


class _Damage(Exception):
    """An inconsistency inside an entry; `_parse` turns it into an InputError."""


def _entries_v2(data: bytes, count: int, hash_size: int) -> tuple[list[bytes], dict[int, int], int]:
    """Entries of a version 2 or 3 index: names padded with NULs to a multiple of 8 bytes.

    The loop is the cost of reading an index (0.4 us an entry): the common entry
    (no extended flags, a name shorter than 4095 bytes) takes the shortest path.
    """
    names: list[bytes] = []
    append = names.append
    special: dict[int, int] = {}
    flags_at = 40 + hash_size
    pos = _HEADER
    for i in range(count):
        at = pos + flags_at
        flags = data[at] << 8 | data[at + 1]
        start = at + 2
        if flags & _SLOW_FLAGS >= _NAME_MASK:  # extended flags, or a name of 4095 bytes or more
            if flags & _EXTENDED:
                start += 2
                _extended(data, i, pos, start - 2, special)
            length = flags & _NAME_MASK
            end = data.index(0, start) if length == _NAME_MASK else start + length
        else:
            end = start + (flags & _NAME_MASK)  # the top bits: assume-unchanged, stage
        if data[end]:
            raise _Damage(f"entry {i} has no end to its name")
        append(data[start:end])
        if data[pos + _TYPE_AT] & 0xF0 == _GITLINK_TYPE:
            special[i] = special.get(i, 0) | _GITLINK
        pos += (end - pos + 8) & ~7
    return names, special, pos


def _entries_v4(data: bytes, count: int, hash_size: int) -> tuple[list[bytes], dict[int, int], int]:
    """Entries of a version 4 index: each name is a suffix of the previous one's prefix.

    Each entry holds a varint (how many bytes to drop from the end of the previous
    name) and the NUL-terminated rest, unpadded; the name length in the flags is
    the full length, as git reads it.
    """
    names: list[bytes] = []
    append = names.append
    special: dict[int, int] = {}
    flags_at = 40 + hash_size
    pos = _HEADER
    previous = b""
    for i in range(count):
        at = pos + flags_at
        flags = data[at] << 8 | data[at + 1]
        start = at + 2
        if flags & _EXTENDED:
            start += 2
            _extended(data, i, pos, start - 2, special)
        strip = data[start]
        start += 1
        if strip & 0x80:
            strip, start = _varint(data, start - 1)
        keep = len(previous) - strip
        if keep < 0:
            raise _Damage(f"entry {i} drops more of the previous name than it has")
        length = flags & _NAME_MASK
        if length == _NAME_MASK:
            end = data.index(0, start)
        else:
            end = start + length - keep
            if end < start:
                raise _Damage(f"entry {i} has a name shorter than the prefix it keeps")
        if data[end]:
            raise _Damage(f"entry {i} has no end to its name")
        previous = previous[:keep] + data[start:end]
        append(previous)
        if data[pos + _TYPE_AT] & 0xF0 == _GITLINK_TYPE:
            special[i] = special.get(i, 0) | _GITLINK
        pos = end + 1
    return names, special, pos


def _extended(data: bytes, i: int, pos: int, at: int, special: dict[int, int]) -> None:
    """Records the extended flags (at `at`) of entry `i` (at `pos`) that has some."""
    extended = data[at] << 8 | data[at + 1]
    if extended & ~_KNOWN_EXTENDED:
        raise _Damage(f"entry {i} has unknown extended flags {extended:#06x}")
    if extended:
        special[i] = _special(data, pos, extended)


def _special(data: bytes, pos: int, extended: int) -> int:
    """The flags kept for an entry with extended flags; marks sparse directory entries."""
    mode = int.from_bytes(data[pos + _MODE_OFFSET : pos + _MODE_OFFSET + 4], "big")
    if extended & _SKIP_WORKTREE and mode == _DIR_MODE:
        return extended | _SPARSE_DIR
    return extended


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decodes git's offset varint (varint.c): 7 bits a byte, each continuation adds one."""
    byte = data[pos]
    value = byte & 0x7F
    pos += 1
    while byte & 0x80:
        value += 1
        if value >= 1 << 57:
            raise _Damage("a name prefix length overflows")
        byte = data[pos]
        pos += 1
        value = (value << 7) + (byte & 0x7F)
    return value, pos


def _ewah_bits(data: bytes, pos: int, size: int) -> tuple[list[int], int]:
    """The set bits of one serialized EWAH bitmap (git's ewah/ewah_io.c), ascending.

    Layout: bit count (u32), word count (u32), that many 64-bit words, and the
    position of the last run-length word (u32). Each run-length word holds a
    running bit (bit 0), a run of that bit in whole words (bits 1-32), and the
    number of literal words that follow it (bits 33-63). Every set bit must be
    below `size` (the entries it marks), which also bounds a hostile run.

    Returns:
        The positions of the set bits, and where the next bitmap starts.
    """
    words = int.from_bytes(data[pos + 4 : pos + 8], "big")
    pos += 8
    end = pos + 8 * words + 4
    if end > len(data):
        raise _Damage("a bitmap runs past its extension")
    bits: list[int] = []
    at = 0
    i = 0
    while i < words:
        marker = int.from_bytes(data[pos + 8 * i : pos + 8 * i + 8], "big")
        run = ((marker >> 1) & 0xFFFFFFFF) * 64
        if marker & 1:
            if at + run > size:
                raise _Damage("a bitmap marks entries that do not exist")
            bits.extend(range(at, at + run))
        at += run
        literals = marker >> 33
        i += 1
        if i + literals > words:
            raise _Damage("a bitmap's words run past its end")
        for _ in range(literals):
            word = int.from_bytes(data[pos + 8 * i : pos + 8 * i + 8], "big")
            while word:
                low = word & -word
                bits.append(at + low.bit_length() - 1)
                word ^= low
            at += 64
            i += 1
    if bits and bits[-1] >= size:
        raise _Damage("a bitmap marks entries that do not exist")
    return bits, end


def _merge_shared(
    index: Path, split: _Parsed, object_format: str
) -> tuple[list[bytes], dict[int, int]]:
    """Entries of a split index merged into its shared index, as git's merge_base_index does.

    The shared entries at the replace bitmap's positions take the flags of the split
    index's first entries, in order (those have empty names: the name stays the
    shared one's); the delete bitmap's positions go; the split index's other
    entries are added.
    """
    assert split.link is not None
    where = str(index)
    shared_path = index.parent / f"sharedindex.{split.link.base.hex()}"
    try:
        data = _read_bounded(shared_path, INDEX_MAX_BYTES)
    except FileNotFoundError:
        raise InputError(
            f"git index {where} is split, and its shared index {shared_path.name} is missing"
        ) from None
    shared = _parse(data, str(shared_path), object_format)
    if shared.link is not None:
        raise InputError(f"git index {shared_path} is damaged: a shared index is split itself")
    if shared.checksum != split.link.base:
        raise InputError(f"git index {where} is damaged: its shared index has another checksum")
    size = len(shared.names)
    bitmaps = split.link.bitmaps
    delete: set[int] = set()
    replace: list[int] = []
    if bitmaps:
        try:
            deleted, pos = _ewah_bits(bitmaps, 0, size)
            replace, pos = _ewah_bits(bitmaps, pos, size)
        except (_Damage, IndexError) as exc:
            raise InputError(f"git index {where} has a damaged 'link' extension: {exc}") from None
        if pos != len(bitmaps):
            raise InputError(f"git index {where} has a damaged 'link' extension")
        delete = set(deleted)
    if len(replace) > len(split.names):
        raise InputError(f"git index {where} is damaged: it replaces more entries than it has")
    special = dict(shared.special)
    for k, position in enumerate(replace):
        if split.names[k] or position in delete:
            raise InputError(f"git index {where} is damaged: bad replacement of entry {position}")
        # The replacing entry brings its own flags and mode; the name stays.
        if k in split.special:
            special[position] = split.special[k]
        else:
            special.pop(position, None)
    names: list[bytes] = []
    merged: dict[int, int] = {}
    for position, name in enumerate(shared.names):
        if position in delete:
            continue
        if position in special:
            merged[len(names)] = special[position]
        names.append(name)
    for k in range(len(replace), len(split.names)):
        if not split.names[k]:
            raise InputError(f"git index {where} is damaged: an added entry has no name")
        if k in split.special:
            merged[len(names)] = split.special[k]
        names.append(split.names[k])
    return names, merged


# -- small files -----------------------------------------------------------------


def _read_bounded(path: Path, cap: int) -> bytes:
    """A regular file's bytes, refused if larger than `cap`; never blocks on a FIFO.

    Raises:
        FileNotFoundError: there is no such file.
        InputError: it is not a regular file, too large, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path} is not a regular file")
        if st.st_size > cap:
            raise InputError(f"{path} is too large ({st.st_size} bytes; at most {cap})")
        chunks = []
        left = st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break  # shrank while read: the parser reports it truncated
            chunks.append(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _read_small(path: Path) -> bytes:
    try:
        return _read_bounded(path, _SMALL_FILE_MAX_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{path} does not exist") from None


def _common_dir(git_dir: Path) -> Path:
    """The common directory of `git_dir` (itself unless it is a linked work tree's)."""
    try:
        common = _read_small(git_dir / "commondir").rstrip(b"\r\n")
    except InputError:
        return git_dir
    return Path(os.path.realpath(git_dir / os.fsdecode(common)))  # as git resolves it


def _object_format(common_dir: Path) -> str:
    """The repository's hash from `extensions.objectFormat` in its config (default `sha1`).

    A minimal reading of git's config syntax: enough for this one key, which git
    only accepts in the repository's own config file (never from an include).
    """
    try:
        text = _read_small(common_dir / "config")
    except InputError:
        return "sha1"
    section = b""
    found = b"sha1"
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(b"["):
            section = line[1:].split(b"]", 1)[0].strip().lower()
            line = line.split(b"]", 1)[1].strip() if b"]" in line else b""
        if section != b"extensions" or b"=" not in line:
            continue
        key, _, value = line.partition(b"=")
        if key.strip().lower() == b"objectformat":
            found = value.split(b"#", 1)[0].split(b";", 1)[0].strip().strip(b'"').lower()
    return found.decode("ascii", "replace")
