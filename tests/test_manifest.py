"""The manifest's JSON form: canonical, and stable as optional fields are added."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import write
from worksnap import Workspace
from worksnap.manifest import decode_manifest, encode_manifest


def test_optional_fields_at_their_default_are_not_written(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    plain = json.loads(ws.show_bytes(ws.snapshot().id))
    for key in ("label", "session", "meta", "attachments", "absent"):
        assert key not in plain
    for key in ("version", "id", "root", "kind", "step", "time", "max_file_bytes", "tree"):
        assert key in plain
    assert plain["step"] is None  # required, so written even when null
    labelled = json.loads(ws.show_bytes(ws.snapshot(label="x", meta={"k": "v"}).id))
    assert (labelled["label"], labelled["meta"]) == ("x", {"k": "v"})


def test_a_manifest_from_before_a_field_existed_stays_canonical(root: Path) -> None:
    # A writer that knew only the required fields produces exactly what we write today,
    # so adding an optional field never turns stored manifests into "edited by hand".
    write(root, "a.txt", "a")
    ws = Workspace(root)
    snap = ws.snapshot()
    stored = ws.show_bytes(snap.id)
    older = {k: v for k, v in json.loads(stored).items() if k not in ("label", "meta")}
    data = json.dumps(older, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    assert data == stored
    assert encode_manifest(decode_manifest(data, "older")) == data


def test_unsorted_entries_are_refused(root: Path) -> None:
    import pytest

    from tests.safety.conftest import hostile, plant
    from worksnap import ManifestError

    write(root, "a.txt", "a")
    write(root, "b.txt", "b")
    ws = Workspace(root)
    base = ws.snapshot()
    swapped = hostile(base, entries=list(reversed(base.entries)))
    snapshot_id = plant(root, swapped)
    with pytest.raises(ManifestError, match="not sorted"):
        ws.load(snapshot_id)
