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


def test_push_after_pull_and_pull_after_pull_are_idempotent(
    repo_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """A pulled record is rebound to the pulling root: its bytes differ from the remote's.

    Pushing it back (by default or by name) must neither fail nor list a second copy,
    and pulling it again (by default or by name) must change nothing.
    """
    url, env = repo_url

    def repo() -> Repository:
        return Repository.open(open_transport(url, environ=env), create=True)

    a_root, b_root = tmp_path / "a", tmp_path / "b"
    a_root.mkdir()
    b_root.mkdir()
    write(a_root, "f.txt", "one\n")
    a = Workspace(a_root)
    first = a.snapshot(kind="step", step=1).id
    push(side(a), repo(), "default")
    ref_before, _ = repo().get_ref("default")
    write(b_root, "own.txt", "b\n")
    b = Workspace(b_root)
    own = b.snapshot(kind="step", step=7).id
    pull(side(b), repo(), "default")
    pulled = b.store.load_record(first)
    assert pulled is not None and pulled.root == str(b_root)
    records_b = {i: b.store.load_record(i) for i in b.store.ids()}

    # Push after pull: by default, then naming the pulled snapshot.
    assert push(side(b), repo(), "default").snapshots == [own]
    again = push(side(b), repo(), "default", ids=[first, own])
    assert again.objects == 0
    ref_after, _ = repo().get_ref("default")
    assert ref_before is not None and ref_after is not None
    listed = {s.id: s for s in ref_after.snapshots}
    assert listed[first] == {s.id: s for s in ref_before.snapshots}[first]
    assert sorted(listed) == sorted([first, own])

    # Pull after pull: by default and by name; nothing changes locally.
    assert pull(side(b), repo(), "default").snapshots == []
    pull(side(b), repo(), "default", ids=[first, own])
    assert {i: b.store.load_record(i) for i in b.store.ids()} == records_b

    # A third machine pulls everything, byte-exact as A pushed it.
    c_root = tmp_path / "c"
    c_root.mkdir()
    c = Workspace(c_root)
    write(c_root, "c.txt", "c\n")
    c.snapshot()
    pull(side(c), repo(), "default")
    c.rewind(1)
    assert (c_root / "f.txt").read_bytes() == b"one\n"
    assert verify(repo()).problems == []


def test_pulling_by_name_never_overwrites_a_different_local_snapshot(
    repo_url: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """48 random bits may collide: a local snapshot under a pulled id is kept, the pull refused."""
    import msgspec

    from worksnap.errors import RemoteError

    url, env = repo_url
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    a_root.mkdir()
    b_root.mkdir()
    write(a_root, "f.txt", "a\n")
    a = Workspace(a_root)
    first = a.snapshot().id
    push(side(a), Repository.open(open_transport(url, environ=env), create=True), "default")
    write(b_root, "g.txt", "b\n")
    b = Workspace(b_root)
    own = b.snapshot().id
    record = b.store.load_record(own)
    assert record is not None
    b.store.save_record(msgspec.structs.replace(record, id=first))
    before = b.store.load_record(first)
    with pytest.raises(RemoteError, match=f"{first}.*not overwritten"):
        pull(side(b), Repository.open(open_transport(url, environ=env)), "default", ids=[first])
    assert b.store.load_record(first) == before


@pytest.mark.parametrize("where", ["cache", "cache/remote", "repository"])
def test_a_symlink_planted_in_the_index_cache_is_never_written_through(
    repo_url: tuple[str, dict[str, str]], tmp_path: Path, where: str
) -> None:
    """The index cache lives in the store: a symlink there must not carry writes outside it."""
    from worksnap.cli import main

    url, env = repo_url
    root, elsewhere = tmp_path / "a", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    write(root, "f.txt", "x\n")
    os.environ.update(env)
    try:
        assert main(["--root", str(root), "snapshot"]) == 0
        assert main(["--root", str(root), "remote", "add", "origin", url]) == 0
        store = root / ".worksnap"
        repo = Repository.open(open_transport(url, environ=env))
        target = {
            "cache": store / "cache",
            "cache/remote": store / "cache" / "remote",
            "repository": store / "cache" / "remote" / repo.config.id,
        }[where]
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            import shutil

            shutil.rmtree(target)
        target.symlink_to(elsewhere)
        assert main(["--root", str(root), "push"]) == 0
        assert main(["--root", str(root), "verify", "--remote", "origin"]) == 0
    finally:
        for name in env:
            os.environ.pop(name, None)
    assert list(elsewhere.rglob("*")) == []


_DYING_PUSH = """
import os, signal, sys
from worksnap.remote.directory import DirectoryTransport
from worksnap.remote.local import StoreSide
from worksnap.remote.repository import Repository
from worksnap.remote.sync import push
from worksnap.workspace import Workspace

class Dying(DirectoryTransport):
    def _write_temp(self, directory, data, key):
        tmp = super()._write_temp(directory, data, key)
        if key.startswith("data/"):  # a pack's bytes are in the temp file, not yet linked
            os.kill(os.getpid(), signal.SIGKILL)
        return tmp

ws = Workspace(sys.argv[1])
record = ws.store.load_record(ws.store.ids()[0])
push(StoreSide(ws.store, record.root), Repository.open(Dying(sys.argv[2]), create=True), "default")
"""


def test_gc_removes_what_a_file_push_killed_mid_write_left_once_older_than_the_grace(
    tmp_path: Path,
) -> None:
    """A push killed between writing a pack's temp file and linking it left a `.tmp-*`
    file that no gc removed; gc now removes such files older than the grace period (a
    live writer's is seconds old), and nothing else: not a young one, not a link."""
    import subprocess
    import sys
    import time

    from worksnap.remote.gc import collect

    root, remote = tmp_path / "a", tmp_path / "remote"
    root.mkdir()
    remote.mkdir()
    write(root, "big.bin", secrets.token_bytes(200_000))
    Workspace(root).snapshot()
    command = [sys.executable, "-c", _DYING_PUSH, str(root), str(remote)]
    killed = subprocess.run(command, check=False)
    assert killed.returncode == -9
    left = [p for p in remote.rglob(".tmp-*") if p.is_file()]
    size = left[0].stat().st_size
    assert len(left) == 1 and size > 100_000  # the pack's bytes
    (tmp_path / "outside").write_text("not the remote's\n")
    link = left[0].parent / ".tmp-0123456789abcdef"
    link.symlink_to(tmp_path / "outside")
    young = left[0].parent / ".tmp-fedcba9876543210"
    young.write_bytes(b"a push writing now")
    hour_ago = time.time() - 3700
    for path in (left[0], link):
        os.utime(path, (hour_ago, hour_ago), follow_symlinks=False)
    repo = Repository.open(open_transport(f"file://{remote}"))
    dry = collect(repo, dry_run=True)
    assert dry.deleted_leftovers == 1 and left[0].exists()
    result = collect(repo)
    assert result.deleted_leftovers == 1 and result.deleted_bytes >= size
    assert not left[0].exists()
    assert young.exists() and link.is_symlink()
    assert (tmp_path / "outside").read_text() == "not the remote's\n"
    assert collect(repo).deleted_leftovers == 0
    push(side(Workspace(root)), repo, "default")  # the push done again: whole
    assert verify(repo).problems == []


def test_a_leftover_gc_may_not_remove_is_left_and_the_gc_succeeds(tmp_path: Path) -> None:
    """On a shared disk another user's temp file may not be this user's to remove: the
    sweep failed the whole gc, after its deletes, and every gc after it."""
    import subprocess
    import time

    from worksnap.remote.gc import collect

    root, remote = tmp_path / "a", tmp_path / "remote"
    root.mkdir()
    remote.mkdir()
    write(root, "a.txt", "a\n")
    Workspace(root).snapshot()
    repo = Repository.open(open_transport(f"file://{remote}"), create=True)
    push(side(Workspace(root)), repo, "default")
    locked = remote / "data" / "zz"
    locked.mkdir(parents=True)
    stuck = locked / ".tmp-deadbeef00000000"
    stuck.write_bytes(b"another user's")
    free = remote / "data" / ".tmp-0000000000000001"
    free.write_bytes(b"a dead push's")
    hour_ago = time.time() - 3700
    for path in (stuck, free):
        os.utime(path, (hour_ago, hour_ago))
    subprocess.run(["chattr", "+i", str(locked)], check=True)  # no unlink in it, even as root
    try:
        result = collect(repo)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert result.deleted_leftovers == 1
    assert stuck.exists() and not free.exists()
    assert verify(repo).problems == []


def test_a_temp_file_gone_before_its_link_is_a_remote_error_not_a_crash(tmp_path: Path) -> None:
    """A gc took a stalled push's temp file for a dead one's: the push says so in one line."""
    from worksnap.errors import RemoteError
    from worksnap.remote.directory import DirectoryTransport

    class Stalled(DirectoryTransport):
        def _write_temp(self, parent: int, data: bytes, key: str) -> str:
            tmp = super()._write_temp(parent, data, key)
            os.unlink(tmp, dir_fd=parent)  # what the gc did while this writer stalled
            return tmp

    (tmp_path / "remote").mkdir()
    with pytest.raises(RemoteError, match="data/ab/cd"):
        Stalled(str(tmp_path / "remote")).put_if_absent("data/ab/cd", b"bytes")


@pytest.mark.parametrize("planted", ["snapshots", "refs", "index", "data", "data/pack"])
def test_a_symlinked_folder_in_a_file_remote_never_carries_a_write_or_a_delete_out(
    tmp_path: Path, planted: str
) -> None:
    """On a shared disk anyone in the group can plant `snapshots -> /elsewhere`: push wrote
    records and refs through such a link, and `remote gc` deleted a file out there that
    looked like a record. Every folder below the remote is opened without following."""
    import time

    from worksnap.errors import RemoteError
    from worksnap.remote.gc import collect
    from worksnap.remote.repository import GRACE, pack_key

    root, remote, outside = tmp_path / "a", tmp_path / "remote", tmp_path / "outside"
    for folder in (root, remote, outside):
        folder.mkdir()
    write(root, "f.txt", "one\n")
    ws = Workspace(root)
    ws.snapshot()
    repo = Repository.open(open_transport(f"file://{remote}"), create=True)
    push(side(ws), repo, "default")
    # What gc would take for a dead push's record, a pack with no index, an index.
    pack = repo.load_indexes().popitem()[1].pack
    victims = {
        "aaaaaaaaaaaa.0123456789abcdef": b"precious\n",
        "default": b"a ref look-alike\n",
        pack: b"a pack look-alike\n",
        "b" * 64: b"an index look-alike\n",
    }
    for name, data in victims.items():
        (outside / name).write_bytes(data)
        (outside / pack[:2]).mkdir(exist_ok=True)
        (outside / pack[:2] / name).write_bytes(data)
    link = remote / (pack_key(pack).rpartition("/")[0] if planted == "data/pack" else planted)
    for path in sorted(link.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    link.rmdir()
    link.symlink_to(outside)
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}

    write(root, "f.txt", "two\n")
    ws.snapshot()
    later = time.time() + 4 * GRACE  # every file out there is old enough to delete
    # (A link deeper down was passed over by a listing: a gc that does not see a pack,
    # an index or a ref deletes what only it kept. It is refused as the others are.)
    with pytest.raises(RemoteError, match=r"is a symlink, not a (regular file or a )?folder"):
        push(side(ws), Repository.open(open_transport(f"file://{remote}")), "default")
    with pytest.raises(RemoteError, match=r"is a symlink, not a (regular file or a )?folder"):
        collect(Repository.open(open_transport(f"file://{remote}")), now=lambda: later)
    transport = open_transport(f"file://{remote}")
    key = pack_key(pack) if planted.startswith("data") else f"{planted}/{next(iter(victims))}"
    for action in (
        lambda: transport.delete(key),
        lambda: transport.put_if_absent(key.replace(pack, "c" * 64), b"new"),
        lambda: transport.get(key, max_bytes=100),
    ):
        with pytest.raises(RemoteError, match=r"is a symlink, not a folder"):
            action()
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


def test_gc_sweeps_temp_files_only_in_the_remote_s_own_folders(tmp_path: Path) -> None:
    """A `file://` remote in a shared folder: gc removed every old `.tmp-*` file below
    it, also another tool's in folders that are no part of the layout."""
    import time

    from worksnap.remote.gc import collect

    root, remote = tmp_path / "a", tmp_path / "share"
    remote.mkdir()
    write(root, "a.txt", "a\n")
    Workspace(root).snapshot()
    repo = Repository.open(open_transport(f"file://{remote}"), create=True)
    push(side(Workspace(root)), repo, "default")
    foreign = [remote / "someone-else" / "project" / ".tmp-draft", remote / "x" / ".tmp-1"]
    ours = [remote / ".tmp-0000000000000001", remote / "refs" / ".tmp-0000000000000002"]
    ours.append(remote / "data" / "ab" / ".tmp-0000000000000003")
    hour_ago = time.time() - 3700
    for path in [*foreign, *ours]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"old")
        os.utime(path, (hour_ago, hour_ago))
    assert collect(repo, dry_run=True).deleted_leftovers == len(ours)
    assert collect(repo).deleted_leftovers == len(ours)
    assert all(p.exists() for p in foreign) and not any(p.exists() for p in ours)


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_ref_that_is_not_a_file_stops_gc_and_verify_and_loses_nothing(
    tmp_path: Path, kind: str
) -> None:
    """A review turned a remote's ref into a symlink (or a FIFO): the listing passed over
    it, `verify --remote` said "0 snapshots ... all present and intact", and `remote gc`
    took the session for gone and deleted its record (its pack at the next gc): the
    snapshot was lost. A listing refuses what is neither a folder nor a file."""
    import time

    from worksnap.errors import RemoteError
    from worksnap.remote.gc import collect
    from worksnap.remote.repository import GRACE

    root, remote, elsewhere = tmp_path / "a", tmp_path / "remote", tmp_path / "elsewhere"
    for folder in (remote, elsewhere):
        folder.mkdir()
    write(root, "f.txt", "one\n")
    ws = Workspace(root)
    ws.snapshot()
    url = f"file://{remote}"
    push(side(ws), Repository.open(open_transport(url), create=True), "default")
    ref = remote / "refs" / "default"
    (elsewhere / "default").write_bytes(ref.read_bytes())
    ref.unlink()
    if kind == "symlink":
        ref.symlink_to(elsewhere / "default")
    else:
        os.mkfifo(ref)

    def state() -> dict[str, bytes | None]:  # (a FIFO is never opened: it would wait)
        found = {}
        for path in remote.rglob("*"):
            if not path.is_symlink() and path.is_file():
                found[str(path.relative_to(remote))] = path.read_bytes()
        return found

    before = state()
    later = time.time() + 4 * GRACE  # every file there is old enough to delete
    for attempt in (
        lambda: collect(Repository.open(open_transport(url)), now=lambda: later),
        lambda: verify(Repository.open(open_transport(url))),
    ):
        with pytest.raises(RemoteError, match=f"refs/default: is a {kind.replace('fifo', 'FIFO')}"):
            attempt()
    after = state()  # (a gc's lease and lock files may have been made; nothing else)
    assert {k: v for k, v in after.items() if k in before} == before


def test_gc_deletes_no_pack_while_a_listed_snapshot_needs_objects_no_index_places(
    tmp_path: Path,
) -> None:
    """A review moved away the index of the pack holding a snapshot's files: `verify
    --remote` named every object as in no pack, then `remote gc` deleted that pack as a
    killed push's (no index lists it): the only copy. While a listed snapshot needs an
    object no index places, no unindexed pack is deleted."""
    import time

    from worksnap.remote.gc import collect
    from worksnap.remote.repository import GRACE, index_key

    root, remote, elsewhere = tmp_path / "a", tmp_path / "remote", tmp_path / "elsewhere"
    for folder in (remote, elsewhere):
        folder.mkdir()
    for i in range(5):
        write(root, f"f{i}.bin", os.urandom(20_000))
    ws = Workspace(root)
    ws.snapshot()
    url = f"file://{remote}"
    repo = Repository.open(open_transport(url), create=True)
    push(side(ws), repo, "default", pack_bytes=50_000)  # (a small push's files go with its trees)
    data = [d for d, index in repo.load_indexes().items() if not index.trees]
    assert data
    moved = remote / index_key(data[0])  # (one of them)
    moved.rename(elsewhere / data[0])
    packs = sorted(str(p.relative_to(remote)) for p in (remote / "data").rglob("*") if p.is_file())
    later = time.time() + 4 * GRACE
    collect(Repository.open(open_transport(url)), now=lambda: later)
    kept = sorted(str(p.relative_to(remote)) for p in (remote / "data").rglob("*") if p.is_file())
    assert kept == packs
    (elsewhere / data[0]).rename(moved)
    other = tmp_path / "b"
    other.mkdir()
    ws_b = Workspace(other)
    pull(StoreSide(ws_b.store, ws_b.root), Repository.open(open_transport(url)), "default")
    assert ws_b.restore("latest").ok
    assert tree_state(other) == tree_state(root)
