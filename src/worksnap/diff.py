"""Diff: what changed between two captured states, as file changes, git patches and stats.

Renames are exact: a path that disappeared and a path that appeared with the
same content (and type) are one rename. `git_patch` writes a change as `git diff`
does, so `git apply` takes the output of `worksnap diff`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import zlib
from collections.abc import Callable, Container

import msgspec

from worksnap.manifest import Entry, Manifest
from worksnap.paths import Digest, fs_path, is_under
from worksnap.plan import Op, Plan
from worksnap.tree import Dir, Read
from worksnap.treewalk import diff_trees, entry_of

_BINARY_SNIFF = 8000  # as git: a NUL in the first 8000 bytes means binary


class FileChange(msgspec.Struct, frozen=True):
    """One path that differs. `op` is M, A, D or R (renamed from `old_path`)."""

    op: str
    path: str
    old: Entry | None
    new: Entry | None
    old_path: str | None = None
    directory: bool = False
    """A directory a restore adds back (D) or removes (A), empty ones too
    (`restored_directories`): no content to show."""


def compare(
    old: Manifest, new: Manifest, *, only: Container[str] | None = None
) -> list[FileChange]:
    """Lists the files and symlinks that differ from `old` to `new` (`only`: at those paths)."""
    before = {e.path: e for e in old.entries if only is None or e.path in only}
    after = {e.path: e for e in new.entries if only is None or e.path in only}
    return _compare(before, after, set(new.dirs))


def restored(plan: Plan) -> list[FileChange]:
    """The changes since `plan.target` that restoring it takes back, sorted by path.

    What the restore leaves as it is is no change: a path either side leaves out (ignored,
    large, excluded by the target's recorded rules or by today's), or that is blocked. So
    `diff` and `status` say what `plan` does, and `diff | git apply -R` never removes a
    file that is in no snapshot.
    """
    touched = {c.path for c in plan.changes if c.op is not Op.BLOCKED}
    return compare(plan.target, plan.current, only=touched)


def restored_directories(plan: Plan) -> list[FileChange]:
    """The directories restoring `plan.target` adds back or removes, as `plan` lists them.

    A directory deleted since (D: the snapshot has one there, nothing else is) or added
    since (A), empty or not: what `restored` leaves out, since a patch cannot say it.
    """
    return [
        FileChange(c.op.value, c.path, None, None, directory=True)
        for c in plan.changes
        if (c.op is Op.DELETED and c.entry is None) or (c.op is Op.ADDED and c.was_dir)
    ]


def compare_trees(old: Digest, new: Digest, read: Read) -> list[FileChange]:
    """`compare` of two snapshots' root trees, reading only the subtrees that differ.

    Equal to `compare` of their flat views: an entry on both sides unchanged is never a
    change nor a rename's source, and the only directories `compare` asks about are
    paths that held an entry before, which `diff_trees` yields when they are one now.

    Raises:
        ManifestError: a tree object read is damaged or hostile; ObjectError: missing.
    """
    before: dict[str, Entry] = {}
    after: dict[str, Entry] = {}
    now_dirs: set[str] = set()
    for difference in diff_trees(old, new, read):  # all collected before any is used
        if difference.old is not None and (entry := entry_of(difference.path, difference.old)):
            before[difference.path] = entry
        if difference.new is not None and (entry := entry_of(difference.path, difference.new)):
            after[difference.path] = entry
        if isinstance(difference.new, Dir):
            now_dirs.add(difference.path)
    return _compare(before, after, now_dirs)


def _compare(
    before: dict[str, Entry], after: dict[str, Entry], now_dirs: set[str]
) -> list[FileChange]:
    changes: list[FileChange] = []
    # A path that is a directory now is never the source of a rename: git applies a
    # rename after what its patch creates below that path, which its link or file blocks.
    gone = {p: e for p, e in before.items() if p not in after}
    by_content: dict[tuple[str, str | None, str | None], list[str]] = {}
    for path in sorted(gone):
        entry = gone[path]
        by_content.setdefault((entry.type, entry.hash, entry.target), []).append(path)
    for path, entry in after.items():
        if path in before:
            if before[path] != entry:
                changes.append(FileChange("M", path, before[path], entry))
            continue
        sources = [
            p
            for p in by_content.get((entry.type, entry.hash, entry.target), [])
            if p not in now_dirs
        ]
        if sources:
            origin = sources[0]
            by_content[(entry.type, entry.hash, entry.target)].remove(origin)
            del gone[origin]
            changes.append(FileChange("R", path, before[origin], entry, old_path=origin))
        else:
            changes.append(FileChange("A", path, None, entry))
    changes.extend(FileChange("D", path, entry, None) for path, entry in gone.items())
    changes.sort(key=lambda c: c.path)
    return changes


def is_binary(data: bytes) -> bool:
    """True when `data` looks binary the way git decides it."""
    return b"\x00" in data[:_BINARY_SNIFF]


def _content(entry: Entry | None, read: Callable[[Entry], bytes]) -> bytes:
    if entry is None:
        return b""
    if entry.type == "symlink":
        return fs_path(entry.target or "")
    return read(entry)


def line_counts(change: FileChange, read: Callable[[Entry], bytes]) -> tuple[int, int] | None:
    """Returns (lines added, lines deleted), or None for binary content."""
    old, new = _content(change.old, read), _content(change.new, read)
    if is_binary(old) or is_binary(new):
        return None
    added = deleted = 0
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            deleted += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, deleted


def select(changes: list[FileChange], wanted: list[str]) -> list[FileChange]:
    """The changes at or below any of `wanted` (relative wire paths), as git's pathspec.

    A rename with one side outside them is the change of the side inside: a deletion of
    where it was, or an addition where it is (`diff -- d | git apply -R` after `mv d/x
    e/x` removed e/x, which `restore -- d` keeps: a review).
    """

    def inside(path: str | None) -> bool:
        return path is not None and any(is_under(path, w) for w in wanted)

    kept = []
    for c in changes:
        if c.op != "R" or inside(c.path) == inside(c.old_path):
            if inside(c.path):
                kept.append(c)
        elif inside(c.old_path):
            kept.append(FileChange("D", c.old_path or "", c.old, None))
        else:
            kept.append(FileChange("A", c.path, None, c.new))
    return sorted(kept, key=lambda c: c.path)


def unified(change: FileChange, read: Callable[[Entry], bytes]) -> str:
    """Returns `git_patch` of one change as text (bytes that are not UTF-8 replaced)."""
    return git_patch(change, read).decode("utf-8", "replace")


def git_patch(change: FileChange, read: Callable[[Entry], bytes], *, binary: bool = False) -> bytes:
    """Returns one change as git writes it (`git diff`), so that `git apply` takes it.

    `diff --git` headers with git's quoting of odd names, `index` lines with git's blob
    ids, mode changes, new and deleted files, exact renames (`similarity index 100%`),
    and a file that became a symlink (or back) as a deletion and an addition. Binary
    content is only named (`Binary files ... differ`), or with `binary` written as a
    `GIT binary patch` (literal hunks both ways, full blob ids, as `git diff --binary`).
    """
    old, new = change.old, change.new
    if old is not None and new is not None and old.type != new.type:
        gone = FileChange("D", change.old_path or change.path, old, None)
        made = FileChange("A", change.path, None, new)
        return git_patch(gone, read, binary=binary) + git_patch(made, read, binary=binary)
    old_path = change.old_path or change.path
    a_name, b_name = _quoted("a/", old_path), _quoted("b/", change.path)
    head = [b"diff --git " + a_name + b" " + b_name]
    old_mode, new_mode = _git_mode(old), _git_mode(new)
    if old is None:
        head.append(b"new file mode " + new_mode)
    elif new is None:
        head.append(b"deleted file mode " + old_mode)
    elif old_mode != new_mode:
        head += [b"old mode " + old_mode, b"new mode " + new_mode]
    if change.op == "R":
        head += [
            b"similarity index 100%",
            b"rename from " + _quoted("", old_path),
            b"rename to " + _quoted("", change.path),
        ]
    before, after = _content(old, read), _content(new, read)
    if old is not None and new is not None and before == after:
        return b"\n".join(head) + b"\n"
    is_bin = is_binary(before) or is_binary(after)
    full = binary and is_bin
    ids = [_blob_id(before) if old else _NO_BLOB, _blob_id(after) if new else _NO_BLOB]
    short = [i if full else i[:_ABBREV] for i in ids]
    same_mode = (
        b" " + new_mode if old is not None and new is not None and old_mode == new_mode else b""
    )
    head.append(b"index " + short[0] + b".." + short[1] + same_mode)
    a_file = a_name if old is not None else b"/dev/null"
    b_file = b_name if new is not None else b"/dev/null"
    if is_bin:
        if not full:
            head.append(b"Binary files " + a_file + b" and " + b_file + b" differ")
            return b"\n".join(head) + b"\n"
        head.append(b"GIT binary patch")
        return b"\n".join(head) + b"\n" + _binary_hunk(after) + _binary_hunk(before)
    if not before and not after:
        return b"\n".join(head) + b"\n"
    # As git: a name with a space ends with a tab, so that GNU patch takes all of it.
    a_file += b"\t" if old is not None and " " in old_path else b""
    b_file += b"\t" if new is not None and " " in change.path else b""
    head += [b"--- " + a_file, b"+++ " + b_file]
    return b"\n".join(head) + b"\n" + _hunks(before, after)


_ABBREV = 7
_NO_BLOB = b"0" * 40
_CONTEXT = 3
_NO_NEWLINE = b"\\ No newline at end of file\n"
_B85_LINE = 52  # bytes of deflated data per line of a binary hunk, as git writes them
_C_ESCAPES = {
    7: b"a",
    8: b"b",
    9: b"t",
    10: b"n",
    11: b"v",
    12: b"f",
    13: b"r",
    34: b'"',
    92: b"\\",
}


def _git_mode(entry: Entry | None) -> bytes:
    if entry is None:
        return b""
    if entry.type == "symlink":
        return b"120000"
    return b"100%03o" % entry.mode


def _blob_id(data: bytes) -> bytes:
    """Git's object id of a blob with these bytes (SHA-1 of a `blob N` header, NUL, them)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest().encode()


def git_name(path: str) -> str:
    """A path as `git diff --stat` and `--numstat` print it: quoted as the patch's headers."""
    return _quoted("", path).decode("ascii")  # (every byte over 0x7e is escaped)


def _quoted(prefix: str, path: str) -> bytes:
    """`prefix` + path as git prints it: in double quotes with C escapes when it must be."""
    raw = prefix.encode() + fs_path(path)
    if not any(b < 0x20 or b in (0x22, 0x5C) or b >= 0x7F for b in raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in _C_ESCAPES:
            out += b"\\" + _C_ESCAPES[b]
        elif b < 0x20 or b >= 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')


def _hunks(before: bytes, after: bytes) -> bytes:
    """The `@@` hunks between two texts, with three lines of context, as git writes them."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out = bytearray()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(_CONTEXT):
        first, last = group[0], group[-1]
        out += b"@@ -%s +%s @@\n" % (_range(first[1], last[2]), _range(first[3], last[4]))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += b"".join(_line(b" ", line) for line in old[i1:i2])
                continue
            out += b"".join(_line(b"-", line) for line in old[i1:i2])
            out += b"".join(_line(b"+", line) for line in new[j1:j2])
    return bytes(out)


def _range(start: int, stop: int) -> bytes:
    length = stop - start
    if length == 1:
        return b"%d" % (start + 1)
    return b"%d,%d" % (start + 1 if length else start, length)


def _line(mark: bytes, line: bytes) -> bytes:
    return mark + line if line.endswith(b"\n") else mark + line + b"\n" + _NO_NEWLINE


def _binary_hunk(data: bytes) -> bytes:
    """A `literal` hunk of a GIT binary patch: the bytes deflated, in base 85 lines."""
    packed = zlib.compress(data)
    out = bytearray(b"literal %d\n" % len(data))
    for at in range(0, len(packed), _B85_LINE):
        chunk = packed[at : at + _B85_LINE]
        size = len(chunk)
        out += bytes([ord("A") + size - 1 if size <= 26 else ord("a") + size - 27])
        out += base64.b85encode(chunk, pad=True) + b"\n"
    return bytes(out + b"\n")
