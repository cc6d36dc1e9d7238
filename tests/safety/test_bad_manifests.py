"""Bad input: a hostile or damaged manifest is refused before the first change.

Every case plants a manifest straight into `<store>/manifests/` (the way an
attacker, a bad disk or a hand edit would) and asks the command line to
restore it: exit 2, one clear error line, and the workspace, the store's
manifests and the journal exactly as before. Most cases plant plain JSON (the
format before manifests were compressed, still read); a selection is planted
again as a zstd frame, and damaged or oversized frames are refused too.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import zstandard

from tests.conftest import flip_middle, packed, unpacked
from worksnap.frames import MAX_UNPACKED
from worksnap.hash import hash_bytes
from worksnap.manifest import Entry, Manifest, encode_manifest, new_id
from worksnap.paths import Digest, fs_path
from worksnap.record import encode_record, record_of
from worksnap.tree import (
    MAX_OBJECT,
    Child,
    Dir,
    File,
    Index,
    Part,
    Span,
    Symlink,
    Tree,
    encode_node,
    node_digest,
)
from worksnap.treewalk import Loose
from worksnap.workspace import Workspace

from .conftest import STORE, cli, file_entry, hostile, plant, store_files, tree_state, write

REPAIR_ADVICE = (
    "damaged object: `worksnap verify --repair` makes the next snapshot store again what is still "
    "on disk"
)

Build = Callable[[Manifest, Path], "Manifest | bytes"]


def _canonical(base: Manifest) -> bytes:
    return encode_manifest(hostile(base))


def _entries(*extra: Entry, dirs: tuple[str, ...] = ()) -> Build:
    """A manifest with the base's entries plus `extra` (and extra dirs)."""

    def build(base: Manifest, _root: Path) -> Manifest:
        entries = sorted([*base.entries, *extra], key=lambda e: e.path)
        return hostile(base, entries=entries, dirs=sorted([*base.dirs, *dirs]))

    return build


def _entry(path: str, **changes: object) -> Build:
    return _entries(file_entry(path, **changes))


def _link(path: str, target: str, **changes: object) -> Build:
    fields: dict[str, object] = {"path": path, "type": "symlink", "mode": 0o777, "target": target}
    fields.update(changes)
    return _entries(Entry(**fields))  # type: ignore[arg-type]


def _raw(edit: Callable[[bytes], bytes]) -> Build:
    return lambda base, _root: edit(_canonical(base))


def _pretty(base: Manifest, _root: Path) -> bytes:
    return json.dumps(json.loads(_canonical(base)), indent=2).encode()


def _field(**changes: object) -> Build:
    return lambda base, _root: hostile(base, **changes)


def _misfiled(snapshot_id: str | None = None) -> Build:
    """A manifest stored under a valid file name that holds another (or an invalid) id."""

    def build(base: Manifest, root: Path) -> bytes:
        data = encode_manifest(hostile(base, id=snapshot_id) if snapshot_id else hostile(base))
        name = "0123456789ab"
        (root / STORE / "manifests").mkdir(exist_ok=True)
        (root / STORE / "manifests" / f"{name}.json").write_bytes(data)
        return b"<planted>" + name.encode()

    return build


def _stale_tree(base: Manifest, _root: Path) -> Manifest:
    # A flipped mode bit with the old tree digest: damage that is still valid JSON.
    entries = [msgspec.structs.replace(e, mode=e.mode ^ 0o001) for e in base.entries]
    return msgspec.structs.replace(hostile(base), entries=entries)


CASES: dict[str, Build] = {
    # -- structure and version
    "truncated": _raw(lambda d: d[: len(d) // 2]),
    "empty file": _raw(lambda d: b""),
    "not json": _raw(lambda d: b"this is not json\n"),
    "nested too deep to parse": _raw(
        lambda d: b'{"version":1,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    ),
    "json but not an object": _raw(lambda d: b"[1, 2, 3]\n"),
    "duplicate key at top": _raw(
        lambda d: d.replace(b'{"version":1,', b'{"version":1,"version":1,', 1)
    ),
    "duplicate key in entry": _raw(lambda d: d.replace(b'{"path":', b'{"path":"zz","path":', 1)),
    "missing version": _raw(lambda d: d.replace(b'"version":1,', b"", 1)),
    "version as text": _raw(lambda d: d.replace(b'"version":1,', b'"version":"1",', 1)),
    "too-new version": _field(version=2),
    "version zero": _field(version=0),
    "unknown field": _raw(lambda d: d.replace(b'{"version":1,', b'{"version":1,"evil":1,', 1)),
    "not canonical (pretty-printed)": _pretty,
    "invalid utf-8 in json": _raw(lambda d: d.replace(b'"a.txt"', b'"a\xff.txt"', 1)),
    "file holds another id": _misfiled(),
    "tree digest does not match the entries": _stale_tree,
    "belongs to another root": _field(root="/somewhere/else"),
    "bad id": _misfiled("ZZZZZZZZZZZZ"),
    # -- repeated paths, also after normalising
    "path repeated": _entries(file_entry("a.txt")),
    "file repeats a dir": _entries(file_entry("src")),
    "dir repeated": lambda base, _r: hostile(base, dirs=[*base.dirs, base.dirs[0]]),
    "a//b repeats a/b": _entries(file_entry("src//main.py")),
    "a/./b repeats a/b": _entries(file_entry("src/./main.py")),
    "a/b/ repeats a/b": _entries(file_entry("src/main.py/")),
    # -- components
    "dot component": _entry("src/./new.py"),
    "dot path": _entry("."),
    "dotdot path": _entry(".."),
    "dotdot escape": _entry("../escaped.txt"),
    "dotdot inside": _entry("src/../../escaped.txt"),
    "empty path": _entry(""),
    "empty component": _entry("src//new.py"),
    "trailing slash": _entry("src/new.py/"),
    "dotdot dir": _entries(dirs=("..",)),
    # -- absolute
    "absolute /x": _entry("/tmp/escaped.txt"),
    "absolute //x": _entry("//tmp/escaped.txt"),
    # `C:\x` and `C:/x` are not absolute here (POSIX): tests/safety/test_names.py
    # -- NUL
    "NUL byte": _entry("a\x00b"),
    "NUL at end": _entry("ab\x00"),
    "escape of a valid byte": _entry("\x0041"),
    "escape of valid utf-8": _entry("\x00c3\x00a9"),
    "NUL in symlink target": _link("l", "a\x00b"),
    # -- .git in every spelling git protects
    ".git": _entries(file_entry(".git/config"), dirs=(".git",)),
    ".GIT": _entry(".GIT"),
    ".Git deeper": _entries(file_entry("src/.Git/hooks"), dirs=("src/.Git",)),
    ".git.": _entry(".git."),
    ".git trailing spaces and dots": _entry(".git . ."),
    "git~1": _entry("git~1"),
    "GIT~1": _entry("src/GIT~1"),
    ".git NTFS stream": _entry(".git::$INDEX_ALLOCATION"),
    ".git HFS ignorable": _entry(".g\u200cit"),
    ".git HFS BOM": _entry("\ufeff.GIT"),
    # -- the store
    "inside the store": _entries(
        file_entry(f"{STORE}/manifests/x.json"), dirs=(STORE, f"{STORE}/manifests")
    ),
    "the store itself": _entry(STORE),
    # -- shape of the tree
    "file is a parent": _entry("a.txt/child"),
    "parent not captured": _entry("nowhere/child"),
    # -- values
    "hash too short": _entry("h.txt", hash="ab" * 31 + "a"),
    "hash uppercase": _entry("h.txt", hash="AB" * 32),
    "hash not hex": _entry("h.txt", hash="zz" * 32),
    "hash missing": _entry("h.txt", hash=None),
    "negative size": _entry("h.txt", size=-1),
    "size missing": _entry("h.txt", size=None),
    "size not an integer": _entry("h.txt", size=1.5),
    "size a boolean": _entry("h.txt", size=True),
    "mode above 0o777": _entry("h.txt", mode=0o4755),
    "mode negative": _entry("h.txt", mode=-1),
    "mode not an integer": _entry("h.txt", mode="644"),
    "unknown type": _entry("h.txt", type="fifo"),
    "type dir": _entry("h.txt", type="dir"),
    "file with a target": _entry("h.txt", target="elsewhere"),
    "symlink with a hash": _link("l", "x", hash="ab" * 32),
    "symlink without target": _link("l", ""),
}


def _assert_restore_refused(root: Path, ref: str) -> str:
    """Restores `ref` by the command line: refused, nothing changed; returns the error line."""
    before, manifests = tree_state(root), store_files(root)

    code, out, err = cli("--root", str(root), "--json", "restore", ref, "--yes")

    assert code == 2, (out, err)
    assert out == ""
    assert err.startswith(f"worksnap: error: manifest {ref}"), err
    assert err.count("\n") == 1, err
    assert tree_state(root) == before
    assert store_files(root) == manifests  # not even a pre-restore snapshot
    assert not (root / STORE / "journal.json").exists()
    return err


@pytest.mark.parametrize("case", CASES)
def test_hostile_manifest_is_refused_before_any_change(project: Workspace, case: str) -> None:
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")  # a restore would have something to do
    base = project.load("latest")
    built = CASES[case](base, root)
    if isinstance(built, bytes) and built.startswith(b"<planted>"):
        ref = built[len(b"<planted>") :].decode()
    else:
        ref = plant(root, built)
    _assert_restore_refused(root, ref)


# The same checks run on the JSON inside a zstd frame.
PACKED_CASES = [
    "truncated",
    "duplicate key in entry",
    "too-new version",
    "not canonical (pretty-printed)",
    "tree digest does not match the entries",
    "belongs to another root",
    "dotdot escape",
    ".git",
    "inside the store",
    "hash not hex",
]


@pytest.mark.parametrize("case", PACKED_CASES)
def test_hostile_manifest_in_a_zstd_frame_is_refused(project: Workspace, case: str) -> None:
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")
    built = CASES[case](project.load("latest"), root)
    _assert_restore_refused(root, plant(root, built, pack=True))


def _forged_size(frame: bytes) -> bytes:
    # A frame header declaring 1 TiB (8-byte content size, checksum flag), then one block.
    return frame[:4] + b"\xc4\x00" + (1 << 40).to_bytes(8, "little") + b"\x01\x00\x00"


FRAMES: dict[str, Callable[[bytes], bytes]] = {
    "byte flipped in the middle": flip_middle,
    "truncated": lambda frame: frame[: len(frame) // 2],
    "last byte missing": lambda frame: frame[:-1],
    "checksum wrong": lambda frame: frame[:-1] + bytes([frame[-1] ^ 0x01]),
    "bytes after the frame": lambda frame: frame + b"\x00",
    "magic only": lambda frame: frame[:4],
    "declares 1 TiB": _forged_size,
    "without its content size": lambda frame: zstandard.ZstdCompressor(
        write_content_size=False, write_checksum=True
    ).compress(unpacked(frame)),
}


@pytest.mark.parametrize("damage", FRAMES)
def test_damaged_zstd_frame_is_refused(project: Workspace, damage: str) -> None:
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")
    intact = hostile(project.load("latest"))  # valid: only the frame is wrong
    ref = intact.id
    (root / STORE / "manifests").mkdir(exist_ok=True)
    (root / STORE / "manifests" / f"{ref}.json").write_bytes(
        FRAMES[damage](packed(encode_manifest(intact)))
    )
    err = _assert_restore_refused(root, ref)
    assert "zstd frame" in err


def test_frame_holding_more_than_the_bound_is_refused(project: Workspace) -> None:
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")
    manifest = hostile(project.load("latest"))
    size = MAX_UNPACKED + 1
    # A real frame of a manifest padded past the bound (32 KB on disk, 0.4 s to make).
    frame = io.BytesIO()
    with zstandard.ZstdCompressor(level=1, write_checksum=True).stream_writer(
        frame, size=size, closefd=False
    ) as writer:
        data = encode_manifest(manifest)
        writer.write(data)
        left = size - len(data)
        while left:
            writer.write(b" " * min(left, 1 << 22))
            left -= min(left, 1 << 22)
    ref = plant(root, frame.getvalue())
    err = _assert_restore_refused(root, ref)
    assert f"declares {size} bytes, more than the {MAX_UNPACKED} allowed" in err


def test_hostile_manifest_also_refused_by_plan_and_show(project: Workspace) -> None:
    root = Path(project.root)
    ref = plant(root, _entry("../escaped.txt")(project.load("latest"), root))  # type: ignore[arg-type]
    for command in ("plan", "show"):
        code, _, err = cli("--root", str(root), command, ref)
        assert code == 2
        assert "'..'" in err


ODD_NAMES: list[bytes] = [
    b"tab\there",
    b"new\nline",
    b"back\\slash",
    b"C:colon",
    b"a:b",
    b"\\\\server\\share",
    b" leading space",
    b"trailing space ",
    b"trailing dot.",
    b"..double-dot-prefix",
    b".gitignore",
    b".gitx",
    b".git-foo",
    b"git~2",
    b"caf\xc3\xa9",
    b"latin1-\xe9",
    b"\xff\xfe",
    b"\x01control",
    b"-dash",
    b"*?[glob]",
    "日本語".encode(),
]


def test_legitimate_odd_names_round_trip_exactly(root: Path) -> None:
    for i, name in enumerate(ODD_NAMES):
        write(root, name, f"top {i}\n".encode(), mode=0o640 if i % 2 else 0o644)
        write(root, b"d/" + name, f"content {i}\n".encode(), mode=0o600 if i % 2 else 0o755)
    os.mkdir(os.path.join(os.fsencode(root), b"dir-\xfe\tx"))
    os.symlink(b"target-\xff\nwith newline", os.path.join(os.fsencode(root), b"link-\xff"))
    with Workspace(root) as ws:
        ws.snapshot()
        expected = tree_state(root)
        for name in ODD_NAMES:
            os.unlink(os.path.join(os.fsencode(root), name))
            os.unlink(os.path.join(os.fsencode(root), b"d/" + name))
        os.rmdir(os.path.join(os.fsencode(root), b"dir-\xfe\tx"))
        os.unlink(os.path.join(os.fsencode(root), b"link-\xff"))
        write(root, b"d/\xfa-new", b"junk")
        result = ws.restore("latest")
    assert result.ok, result.error
    assert tree_state(root) == expected


def test_symlink_targets_are_text_never_followed(root: Path, outside: Path) -> None:
    targets = {
        "abs": str(outside / "secret.txt"),
        "up": "../outside/secret.txt",
        "dangling": "does/not/exist",
        "dir": str(outside),
        "self": "self",
    }
    for name, target in targets.items():
        os.symlink(target, root / name)
    with Workspace(root) as ws:
        manifest = ws.snapshot()
        assert {e.path: e.target for e in manifest.entries} == targets
        for name in targets:
            os.unlink(root / name)
            write(root, name, "now a file")
        outside_before = tree_state(outside)
        result = ws.restore(manifest.id)
    assert result.ok, result.error
    assert {n: os.readlink(root / n) for n in targets} == targets
    assert tree_state(outside) == outside_before


def test_planted_manifest_with_odd_but_legal_paths_restores(project: Workspace) -> None:
    # The validation refuses what is unsafe, not what is unusual.
    root = Path(project.root)
    data = b"odd\n"
    project.store.add(file_entry("x", data).hash, data)  # type: ignore[arg-type]
    project.store.flush()
    names = ["tab\there", "a:b", "back\\slash", "latin\x00e9", ".gitx"]
    build = _entries(*(file_entry(n, data) for n in names))
    ref = plant(root, build(project.load("latest"), root))  # type: ignore[arg-type]
    result = project.restore(ref)
    assert result.ok, result.error
    for name in names:
        assert (root / os.fsdecode(fs_path(name))).read_bytes() == data


# -- format 2: hostile trees and records -------------------------------------------------
#
# Planted the way an attacker or a bad disk would: tree objects straight into the store's
# packs (built with msgspec, which validates nothing on construction, so each is
# canonical except for its hostile part), and a record naming them.

_DATA = b"planted\n"


def _file(name: str, data: bytes = _DATA) -> File:
    return File(name=name, mode=0o644, size=len(data), digest=bytes.fromhex(hash_bytes(data)))


def _tree(*children: Child) -> bytes:
    return encode_node(Tree(version=2, children=list(children)))


def _put(ws: Workspace, data: bytes, digest: str | None = None) -> str:
    """Stores an object as it is (under its own digest unless told otherwise)."""
    digest = digest or node_digest(data)
    ws.store.add_tree(Digest(digest), data)
    ws.store.flush()
    return digest


def _record_file(at: Path, base: Manifest, top: str, /, **changes: object) -> str:
    """Writes a record of `base` naming tree `top`, with `changes`, under a new id."""
    record = record_of(base, top, Loose())
    record = msgspec.structs.replace(record, id=new_id(), **changes)
    (at / STORE / "snapshots" / f"{record.id}.json").write_bytes(encode_record(record))
    return record.id


def _plant_tree(*children: Child) -> Callable[[Workspace, Manifest, Path], str]:
    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        ws.store.add(Digest(hash_bytes(_DATA)), _DATA)
        return _record_file(root, base, _put(ws, _tree(*children)))

    return plant_it


def _deeper(*children: Child) -> Callable[[Workspace, Manifest, Path], str]:
    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        sub = _put(ws, _tree(*children))
        top = _tree(_file("a.txt"), Dir(name="src", tree=bytes.fromhex(sub)))
        return _record_file(root, base, _put(ws, top))

    return plant_it


def _deeper_at(name: str, *children: Child) -> Callable[[Workspace, Manifest, Path], str]:
    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        ws.store.add(Digest(hash_bytes(_DATA)), _DATA)
        sub = _put(ws, _tree(*children))
        return _record_file(root, base, _put(ws, _tree(Dir(name=name, tree=bytes.fromhex(sub)))))

    return plant_it


def _split(*parts: tuple[str, list[Child]]) -> Callable[[Workspace, Manifest, Path], str]:
    """A root split into parts, each under its span's first name (as a large directory is)."""

    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        ws.store.add(Digest(hash_bytes(_DATA)), _DATA)
        spans = [
            Span(
                first=first,
                node=bytes.fromhex(_put(ws, encode_node(Part(version=2, children=kids)))),
            )
            for first, kids in parts
        ]
        return _record_file(
            root, base, _put(ws, encode_node(Index(version=2, level=1, spans=spans)))
        )

    return plant_it


def _digest_mismatch(ws: Workspace, base: Manifest, root: Path) -> str:
    honest = _tree(_file("a.txt"))
    other = hash_bytes(b"some other object")
    return _record_file(root, base, _put(ws, honest, digest=other))


def _sub_digest_mismatch(ws: Workspace, base: Manifest, root: Path) -> str:
    sub = _put(ws, _tree(_file("b.txt")), digest=hash_bytes(b"not this subtree"))
    return _record_file(root, base, _put(ws, _tree(Dir(name="src", tree=bytes.fromhex(sub)))))


def _oversized(ws: Workspace, base: Manifest, root: Path) -> str:
    big = _tree(*(_file(f"f{i:07d}") for i in range(25_000)))  # over 1 MiB: stored loose
    assert len(big) > MAX_OBJECT
    return _record_file(root, base, _put(ws, big))


def _missing_tree(ws: Workspace, base: Manifest, root: Path) -> str:
    return _record_file(root, base, hash_bytes(b"no such tree"))


def _record_bytes(edit: Callable[[bytes], bytes]) -> Callable[[Workspace, Manifest, Path], str]:
    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        snapshot_id = _record_file(root, base, _put(ws, _tree()))
        path = root / STORE / "snapshots" / f"{snapshot_id}.json"
        path.write_bytes(edit(path.read_bytes()))
        return snapshot_id

    return plant_it


def _record_field(**changes: object) -> Callable[[Workspace, Manifest, Path], str]:
    def plant_it(ws: Workspace, base: Manifest, root: Path) -> str:
        return _record_file(root, base, _put(ws, _tree(_file("a.txt"))), **changes)

    return plant_it


V2_CASES: dict[str, Callable[[Workspace, Manifest, Path], str]] = {
    "tree holds ..": _plant_tree(_file("..")),
    "tree holds .": _plant_tree(_file(".")),
    "tree holds a slash": _plant_tree(_file("a/b")),
    "tree holds an empty name": _plant_tree(_file("")),
    "tree holds .git": _plant_tree(_file(".git")),
    "tree holds .GIT directory": _plant_tree(
        Dir(name=".GIT", tree=bytes.fromhex(node_digest(_tree())))
    ),
    "tree holds git~1": _plant_tree(_file("git~1")),
    "tree holds a NUL byte": _plant_tree(_file("a\x00b")),
    "tree holds an HFS+ .git": _plant_tree(_file(".g\u200cit")),
    "tree holds a symlink to a NUL target": _plant_tree(
        Symlink(name="l", mode=0o777, target="a\x00b")
    ),
    "split parts that overlap": _split(
        ("a", [_file("a"), _file("x")]), ("m", [_file("m"), _file("x")])
    ),
    "a part below its span's first name": _split(
        ("a", [_file("a")]), ("m", [_file("b"), _file("n")])
    ),
    "tree holds the store": _plant_tree(_file(STORE)),
    "tree holds a file in the store": _deeper_at(STORE, _file("config.json")),
    "subtree holds ..": _deeper(_file("..")),
    "subtree holds .git": _deeper(_file(".git")),
    "duplicate name": _plant_tree(_file("a.txt"), _file("a.txt")),
    "a file and a dir of one name": _plant_tree(
        _file("a"), Dir(name="a", tree=bytes.fromhex(node_digest(_tree())))
    ),
    "unsorted names": _plant_tree(_file("b.txt"), _file("a.txt")),
    "mode out of range": _plant_tree(File(name="a", mode=0o7777, size=1, digest=bytes(32))),
    "short digest": _plant_tree(File(name="a", mode=0o644, size=1, digest=bytes(31))),
    "digest does not match": _digest_mismatch,
    "subtree digest does not match": _sub_digest_mismatch,
    "oversized object": _oversized,
    "record names a missing tree": _missing_tree,
    "record with an unknown field": _record_bytes(lambda d: d[:-2] + b',"evil":1}\n'),
    "record of a newer version": _record_bytes(
        lambda d: d.replace(b'"version":2', b'"version":3', 1)
    ),
    "record not canonical": _record_bytes(lambda d: d.replace(b'"id"', b' "id"', 1)),
    "record truncated": _record_bytes(lambda d: d[: len(d) // 2]),
    "record for another root": _record_field(root="/somewhere/else"),
    "record with .. in ignored": _record_field(ignored=["../up"]),
    "record with a bad tree digest": _record_field(tree="not-a-digest"),
}


@pytest.mark.parametrize("case", V2_CASES)
def test_hostile_tree_or_record_is_refused_by_every_command(project: Workspace, case: str) -> None:
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")  # a restore would have something to do
    ref = V2_CASES[case](project, project.load("latest"), root)
    err = _assert_restore_refused(root, ref)
    assert "Traceback" not in err
    before, snapshots = tree_state(root), store_files(root)
    for command in ("plan", "show"):
        code, out, err = cli("--root", str(root), "--json", command, ref)
        assert (code, out) == (2, ""), (command, err)
        assert err.startswith(f"worksnap: error: manifest {ref}") and err.count("\n") == 1, err
    code, out, err = cli("--root", str(root), "--json", "verify", ref)
    assert code in (1, 2), err
    if code == 1:
        problems = json.loads(out)["problems"]
        assert ref in problems[0]
        # A tree's copy that is not its digest's bytes: also `--repair`'s advice.
        assert problems[1:] in ([], [f"1 {REPAIR_ADVICE}"]), problems
    else:
        assert err.startswith(f"worksnap: error: manifest {ref}"), err
    assert (tree_state(root), store_files(root)) == (before, snapshots)


def test_a_tree_naming_an_intact_object_with_another_size_is_refused(project: Workspace) -> None:
    """A tree entry `size: 3` for an intact 8-byte object: verify said all was intact, and a
    restore wrote the 8 bytes, after which `plan` showed the file modified for ever (stop
    42's review). The object's size is now compared with its entry's wherever it is read
    through first: the restore refuses before any change, and verify names it."""
    root = Path(project.root)
    write(root, "a.txt", "edited since\n")
    data = _DATA
    project.store.add(Digest(hash_bytes(data)), data)
    lying = File(
        name="a.txt", mode=0o644, size=len(data) - 5, digest=bytes.fromhex(hash_bytes(data))
    )
    ref = _record_file(root, project.load("latest"), _put(project, _tree(lying)))
    before, snapshots = tree_state(root), store_files(root)
    code, out, err = cli("--root", str(root), "--json", "restore", ref, "--yes")
    assert code == 1 and "worksnap: error: object" in err, err  # as for a damaged object
    assert f"holds {len(data)} bytes where the snapshot names {len(data) - 5}" in err, err
    assert err.count("\n") == 1 and (tree_state(root), store_files(root)) == (before, snapshots)
    code, out, err = cli("--root", str(root), "--json", "verify", ref)
    assert code == 1, err
    (problem,) = json.loads(out)["problems"]
    assert "a.txt" in problem and f"names {len(data) - 5}" in problem
