"""Format 2 snapshot records: canonical JSON, refusals, and the views built from them."""

from __future__ import annotations

import json

import msgspec
import pytest

from tests.trees import tree
from worksnap.errors import ManifestError
from worksnap.flatbuild import from_flat
from worksnap.manifest import encode_manifest, summarize
from worksnap.paths import Digest
from worksnap.record import (
    VERSION,
    Record,
    check_record,
    decode_record,
    encode_record,
    loose_of,
    manifest_of,
    record_of,
    summary_of,
)
from worksnap.treewalk import Flat, flatten

ROOT = "/home/someone/projects/app"


def record(**changes: object) -> Record:
    fields: dict[str, object] = {
        "version": VERSION, "id": "0123456789ab", "root": ROOT, "kind": "step", "step": 12,
        "time": "2026-11-30T10:36:06.578508Z", "max_file_bytes": 2 << 20, "tree": "ab" * 32,
        "label": "agent step 12: edit the parser", "parent": "ba9876543210", "files": 47012,
        "bytes": 312_000_000, "changed": 5,
    }  # fmt: skip
    fields.update(changes)
    return Record(**fields)  # type: ignore[arg-type]


def test_a_record_is_a_few_hundred_bytes_of_canonical_json() -> None:
    data = encode_record(record())
    assert len(data) < 400
    assert data.endswith(b"}\n")
    assert json.loads(data)["tree"] == "ab" * 32
    assert list(json.loads(data))[:3] == ["version", "id", "root"]
    assert decode_record(data, "r") == record()
    # Defaults are left out, so a field added later with a default reads old records.
    assert b"session" not in data and b"meta" not in data and b"absent" not in data


def _edited(edit: dict[str, object]) -> bytes:
    doc = json.loads(encode_record(record()))
    doc.update(edit)
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


BAD_RECORDS: dict[str, tuple[bytes, str]] = {
    "not JSON": (b"\x28\xb5\x2f\xfd", "not a valid snapshot record"),
    "no version": (b"{}\n", "not a valid snapshot record"),
    "newer": (
        _edited({"version": 3}),
        "newer than this worksnap reads (2); install a newer worksnap",
    ),
    "a format 1 manifest": (encode_manifest(tree({"a": "1"})), "version 1 is not a snapshot"),
    "unknown field": (_edited({"surprise": 1}), "not a valid snapshot record"),
    "pretty-printed": (
        json.dumps(json.loads(encode_record(record())), indent=1).encode() + b"\n",
        "not in the canonical form",
    ),
    "no newline": (encode_record(record()).rstrip(), "not in the canonical form"),
    "default written out": (_edited({"session": "default"}), "not in the canonical form"),
    "duplicate key": (
        encode_record(record()).replace(b'"kind":"step"', b'"kind":"step","kind":"x"'),
        "not in the canonical form",
    ),
    "deeply nested": (
        b'{"version":2,"meta":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        "not a valid snapshot record",
    ),
    "wrong type": (_edited({"files": "many"}), "not a valid snapshot record"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_record_is_refused_with_one_line(case: str) -> None:
    data, why = BAD_RECORDS[case]
    with pytest.raises(ManifestError) as caught:
        decode_record(data, "snapshots/0123456789ab.json")
    assert why in str(caught.value)
    assert "\n" not in str(caught.value)


BAD_VALUES: dict[str, tuple[dict[str, object], str]] = {
    "another root": ({"root": "/elsewhere"}, "worksnap rebind"),
    "bad id": ({"id": "../../etc"}, "bad id"),
    "bad parent": ({"parent": "ZZ"}, "bad id"),
    "bad tree": ({"tree": "ab" * 31}, "bad tree digest"),
    "negative step": ({"step": -1}, "negative"),
    "negative files": ({"files": -1}, "negative"),
    "negative changed": ({"changed": -3}, "negative"),
    "bad time": ({"time": "yesterday"}, "bad time"),
    "unsorted absent": ({"kind": "checkpoint", "absent": ["b", "a"]}, "not sorted"),
    "repeated large": ({"large": ["a", "a"]}, "not sorted"),
    "absent outside": ({"absent": ["../x"]}, "'.' or '..'"),
    "absent .git": ({"absent": [".git/config"]}, "inside a .git directory"),
    "ignored absolute": ({"ignored": ["/etc"]}, "is absolute"),
    "attachment name": ({"attachments": {"a/b": "cd" * 32}}, "bad attachment"),
    "attachment digest": ({"attachments": {"log": "nope"}}, "bad attachment"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_record_with_bad_values_is_refused(case: str) -> None:
    changes, why = BAD_VALUES[case]
    with pytest.raises(ManifestError, match=why.replace(".", r"\.").replace("(", r"\(")):
        check_record(record(**changes), root=ROOT, source="r")


def test_good_values_pass_and_excluded_may_name_git() -> None:
    check_record(record(excluded=[".git", "sub/.GIT"], kind="checkpoint", absent=["new.py"],
                        attachments={"log": "cd" * 32}, changed=None, parent=None),
                 root=ROOT, source="r")  # fmt: skip


def test_show_and_list_views_match_format_1_for_a_migrated_snapshot() -> None:
    old = tree(
        {"src/a.py": "print(1)", "src/b": ("link", "a.py"), "docs": "/"},
        snapshot_id="0123456789ab", kind="step", step=4, ignored=("node_modules",),
        large=("iso",), excluded=(".git",), session="agent",
    )  # fmt: skip
    old = msgspec.structs.replace(old, meta={"model": "m1"}, label="four")
    objects: dict[str, bytes] = {}
    root, loose = from_flat(Flat.of(old), objects.__setitem__)
    rec = record_of(old, root, loose, parent="ba9876543210", changed=3)
    assert decode_record(encode_record(rec), "r") == rec
    check_record(rec, root=old.root, source="r")
    flat = flatten(Digest(rec.tree), objects.__getitem__, loose=loose_of(rec))
    shown = manifest_of(rec, flat)
    # Byte for byte what format 1 printed, but for the tree digest (now the root tree's).
    assert encode_manifest(shown) == encode_manifest(msgspec.structs.replace(old, tree=root))
    assert summary_of(rec) == msgspec.structs.replace(summarize(old, changed=3), tree=root)


def test_a_checkpoint_maps_onto_a_partial_tree_and_its_record() -> None:
    checkpoint = tree({"src/a.py": "before"}, kind="checkpoint", large=("data/huge.bin",),
                      absent=("src/new.py",))  # fmt: skip
    objects: dict[str, bytes] = {}
    root, loose = from_flat(Flat.of(checkpoint), objects.__setitem__)
    rec = record_of(checkpoint, root, loose)
    assert (rec.absent, rec.large) == (["src/new.py"], ["data/huge.bin"])
    flat = flatten(Digest(rec.tree), objects.__getitem__, loose=loose_of(rec))
    assert manifest_of(rec, flat) == msgspec.structs.replace(checkpoint, tree=root)
