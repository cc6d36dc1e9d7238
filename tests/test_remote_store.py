"""Push from one real workspace's format 2 store, pull into another's, rewind there byte-exact.

The local side is `remote.local.StoreSide` over the stores `Workspace` itself writes
(records and trees of format 2), on `file://` and on S3 through moto.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from worksnap.remote import open_transport
from worksnap.remote.gc import verify
from worksnap.remote.local import StoreSide
from worksnap.remote.repository import Repository
from worksnap.remote.sync import pull, push
from worksnap.workspace import Workspace

from .conftest import tree_state, write
from .s3server import MotoServer

BUCKET = "worksnap-store"

for _name in [n for n in os.environ if n.startswith("AWS_")]:
    os.environ.pop(_name, None)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@pytest.fixture(params=["file", "s3"])
def repo_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "file":
        (tmp_path / "remote").mkdir()
        return f"file://{tmp_path}/remote", {}
    server: MotoServer = request.getfixturevalue("moto")
    return f"s3://{BUCKET}/s-{secrets.token_hex(6)}", server.environ()


def side(ws: Workspace) -> StoreSide:
    """The workspace's store, bound to its root (read from a record it wrote)."""
    ids = ws.store.ids()
    record = ws.store.load_record(ids[0])
    assert record is not None
    return StoreSide(ws.store, record.root)


def test_a_snapshot_pushed_from_one_root_rewinds_byte_exact_in_another(
    repo_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = repo_url
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    a_root.mkdir()
    b_root.mkdir()
    write(a_root, "src/main.py", "one\n")
    write(a_root, "run.sh", "#!/bin/sh\n", mode=0o755)
    write(a_root, b"caf\xe9/\xff.txt", b"bytes")
    (a_root / "empty" / "deeper").mkdir(parents=True)
    os.symlink("src/main.py", a_root / "link")
    write(a_root, "big.bin", secrets.token_bytes(1_500_000))
    a = Workspace(a_root)
    a.snapshot(kind="step", step=1)
    first = tree_state(a_root)
    write(a_root, "src/main.py", "two\n")
    (a_root / "run.sh").unlink()
    a.snapshot(kind="step", step=2)
    second = tree_state(a_root)
    push(side(a), Repository.open(open_transport(url, environ=env), create=True), "default")

    write(b_root, "unrelated.txt", "b's own file\n")
    b = Workspace(b_root)
    b.snapshot()  # b's store exists and is bound to b
    pulled = pull(side(b), Repository.open(open_transport(url, environ=env)), "default")
    assert len(pulled.snapshots) == 2
    b.rewind(1)
    assert tree_state(b_root) == first
    b.rewind(2)
    assert tree_state(b_root) == second
    assert b.verify() == []
    assert verify(Repository.open(open_transport(url, environ=env))).problems == []
