"""The transport contract, run against every backend; then each backend's own failure modes.

Backends: a directory (`file://`), obstore's in-memory store, and S3 through a
moto server on 127.0.0.1 started by these tests (see `s3server.py` for why its
requests are handled one at a time).
"""

from __future__ import annotations

import http.server
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import worksnap
from worksnap.errors import InputError, RemoteError
from worksnap.remote import RefusedStoreError, Transport, open_transport
from worksnap.remote.aws import resolve_s3_settings
from worksnap.remote.directory import DirectoryTransport
from worksnap.remote.s3 import RETRIES, open_memory

from .s3server import KEY_ID, SECRET, FakeS3, MotoServer, closed_port

SRC = str(Path(worksnap.__file__).resolve().parents[1])
BUCKET = "worksnap-tests"
MiB = 1 << 20

# The real AWS environment must not reach the client: obstore reads AWS_* itself.
for _name in [n for n in os.environ if n.startswith("AWS_")]:
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    server.create_bucket(BUCKET)
    yield server
    server.stop()


def s3_transport(moto: MotoServer, **env: str) -> Transport:
    return open_transport(f"s3://{BUCKET}/t-{secrets.token_hex(6)}", environ=moto.environ(**env))


@pytest.fixture(params=["file", "memory", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(request.param)


@pytest.fixture
def transport(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Transport:
    if backend == "file":
        return open_transport(f"file://{tmp_path}")
    if backend == "memory":
        return open_memory()
    return s3_transport(request.getfixturevalue("moto"))


# ---------------------------------------------------------------- the contract


def test_put_if_absent_creates_once_and_never_overwrites(transport: Transport) -> None:
    assert transport.put_if_absent("packs/ab/one", b"first") is True
    assert transport.put_if_absent("packs/ab/one", b"second") is False
    assert transport.get("packs/ab/one", max_bytes=100) == b"first"
    assert transport.put_if_absent("packs/ab/empty", b"") is True
    assert transport.get("packs/ab/empty", max_bytes=0) == b""


def test_get_of_a_missing_object_says_missing(transport: Transport) -> None:
    with pytest.raises(RemoteError) as caught:
        transport.get("packs/none", max_bytes=100)
    assert caught.value.reason == "missing"
    assert caught.value.key == "packs/none"


def test_get_refuses_an_object_larger_than_max_bytes(transport: Transport) -> None:
    transport.put_if_absent("big", b"x" * (MiB + 1))
    with pytest.raises(RemoteError, match="more than the 1048576 allowed"):
        transport.get("big", max_bytes=MiB)
    assert len(transport.get("big", max_bytes=MiB + 1)) == MiB + 1


def test_get_range_reads_a_slice_and_refuses_one_past_the_end(transport: Transport) -> None:
    transport.put_if_absent("obj", bytes(range(100)))
    assert transport.get_range("obj", 10, 5) == bytes(range(10, 15))
    assert transport.get_range("obj", 95, 5) == bytes(range(95, 100))
    assert transport.get_range("obj", 7, 0) == b""
    with pytest.raises(RemoteError):
        transport.get_range("obj", 96, 5)
    with pytest.raises(RemoteError):
        transport.get_range("missing", 0, 1)


def test_stat_gives_size_and_the_etag_a_ref_swap_accepts(transport: Transport) -> None:
    assert transport.stat("refs/a") is None
    assert transport.swap_ref("refs/a", b"1 nonce", None)
    found = transport.stat("refs/a")
    assert found is not None
    assert found.size == 7
    ref = transport.get_ref("refs/a")
    assert ref is not None
    assert found.etag == ref.etag
    assert transport.swap_ref("refs/a", b"2 nonce", found.etag)


def test_list_pages_through_more_keys_than_one_page(transport: Transport) -> None:
    keys = {f"many/{i // 100:02d}/{i:05d}": b"%d" % i for i in range(1001)}
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(lambda item: transport.put_if_absent(*item), keys.items()))
    transport.put_if_absent("manyx/not-under-many", b"-")
    transport.put_if_absent("other", b"-")

    listed = list(transport.list_keys("many"))
    assert sorted(e.key for e in listed) == sorted(keys)
    assert all(e.size == len(keys[e.key]) for e in listed)
    now = datetime.now(timezone.utc)
    assert all(abs(e.modified - now) < timedelta(minutes=5) for e in listed)
    assert {e.key for e in transport.list_keys()} == {*keys, "manyx/not-under-many", "other"}
    assert list(transport.list_keys("many/00/00001")) == []
    assert list(transport.list_keys("nothing")) == []


def test_refs_are_created_once_and_swapped_only_from_their_current_etag(
    transport: Transport,
) -> None:
    assert transport.get_ref("refs/s") is None
    assert transport.swap_ref("refs/s", b"1 a", None) is True
    assert transport.swap_ref("refs/s", b"1 b", None) is False
    first = transport.get_ref("refs/s")
    assert first is not None
    assert first.data == b"1 a"

    assert transport.swap_ref("refs/s", b"2 c", '"not-the-etag"') is False
    assert transport.swap_ref("refs/s", b"2 d", first.etag) is True
    assert transport.swap_ref("refs/s", b"3 e", first.etag) is False  # stale: someone won
    second = transport.get_ref("refs/s")
    assert second is not None
    assert second.data == b"2 d"
    assert second.etag != first.etag


def test_get_ref_is_bounded(transport: Transport) -> None:
    transport.swap_ref("refs/big", b"x" * 2000, None)
    with pytest.raises(RemoteError, match="more than the 1000 allowed"):
        transport.get_ref("refs/big", max_bytes=1000)


def test_delete_removes_objects_and_refs_and_ignores_missing_ones(transport: Transport) -> None:
    transport.put_if_absent("packs/x", b"x")
    transport.swap_ref("refs/d", b"1 x", None)
    old = transport.get_ref("refs/d")
    assert old is not None
    transport.delete("packs/x")
    transport.delete("refs/d")
    transport.delete("packs/never-was")
    assert transport.stat("packs/x") is None
    assert transport.get_ref("refs/d") is None
    assert list(transport.list_keys()) == []
    assert transport.swap_ref("refs/d", b"2 y", old.etag) is False  # deleted since it was read
    assert transport.swap_ref("refs/d", b"2 y", None) is True
    assert transport.put_if_absent("packs/x", b"again") is True


def test_probe_passes(transport: Transport) -> None:
    transport.probe()
    assert list(transport.list_keys()) == []  # the probe cleans up after itself


def test_keys_are_checked_before_any_request(transport: Transport) -> None:
    for bad in ("", "/a", "a/", "a//b", ".hidden", "a/../b", "a/.tmp-x", "sp ace", "é"):
        with pytest.raises(ValueError, match="not a valid remote key"):
            transport.put_if_absent(bad, b"x")
    with pytest.raises(ValueError, match="not a valid remote key"):
        transport.get("k" * 513, max_bytes=1)


def increment(transport: Transport, times: int, writer: str, barrier: threading.Barrier) -> int:
    """Adds 1 to the counter ref `times` times, retrying each on conflict; returns the retries.

    Every writer waits at `barrier` after its first read, so they surely race at least once.
    """
    retries = 0
    for n in range(times):
        while True:
            ref = transport.get_ref("refs/counter")
            value = int(ref.data.split()[0]) if ref else 0
            if n == 0 and retries == 0:
                barrier.wait()
            # The nonce keeps every write's bytes (and so its ETag) unique.
            if transport.swap_ref(
                "refs/counter", f"{value + 1} {writer}-{n}".encode(), ref.etag if ref else None
            ):
                break
            retries += 1
    return retries


def test_concurrent_compare_and_swap_from_threads_loses_no_update(transport: Transport) -> None:
    writers, times = 4, 10
    barrier = threading.Barrier(writers)
    with ThreadPoolExecutor(writers) as pool:
        retries = sum(
            pool.map(lambda w: increment(transport, times, f"t{w}", barrier), range(writers))
        )
    ref = transport.get_ref("refs/counter")
    assert ref is not None
    assert int(ref.data.split()[0]) == writers * times
    assert retries >= writers - 1  # all read 0 first: all but one lost the first round


# ------------------------------------------------------- probe against fakes


class OverwritingDirectory(DirectoryTransport):
    """A store that ignores `If-None-Match`: creating over an object replaces it."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.delete(key)
        return super().put_if_absent(key, data)


class BlindSwapDirectory(DirectoryTransport):
    """A store that ignores `If-Match`: every swap of an existing ref succeeds."""

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        current = self.get_ref(key)
        if expected_etag is not None and current is not None:
            expected_etag = current.etag
        return super().swap_ref(key, data, expected_etag)


@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (OverwritingDirectory, "a second create of the same object succeeded"),
        (BlindSwapDirectory, "a compare-and-swap with a wrong ETag succeeded"),
    ],
)
def test_probe_refuses_a_store_that_ignores_conditions(
    tmp_path: Path, fake: type[DirectoryTransport], reason: str
) -> None:
    store = fake(str(tmp_path))
    with pytest.raises(RefusedStoreError, match=reason) as caught:
        store.probe()
    assert isinstance(caught.value, InputError)
    assert caught.value.exit_code == 2
    assert "\n" not in str(caught.value)
    assert list(store.list_keys()) == []


def test_probe_refuses_an_s3_server_that_drops_the_conditional_headers() -> None:
    server = MotoServer(ignore_conditions=True)
    try:
        server.create_bucket("ignores-conditions")
        store = open_transport("s3://ignores-conditions/p", environ=server.environ())
        with pytest.raises(RefusedStoreError, match="If-None-Match is ignored"):
            store.probe()
    finally:
        server.stop()


# -------------------------------------------------------------- S3 failures


def test_wrong_credentials_give_one_line_without_the_secret(moto: MotoServer) -> None:
    store = s3_transport(moto, AWS_SECRET_ACCESS_KEY="wrong-secret-value")
    moto.require_auth(True)
    try:
        for call in (
            lambda: store.put_if_absent("k", b"x"),
            lambda: store.get("k", max_bytes=10),
            lambda: list(store.list_keys()),
            lambda: store.swap_ref("refs/r", b"1 x", None),
        ):
            with pytest.raises(RemoteError) as caught:
                call()
            message = str(caught.value)
            assert "access denied (InvalidAccessKeyId)" in message
            assert "\n" not in message
            assert "wrong-secret-value" not in message
            assert KEY_ID not in message
            assert caught.value.exit_code == 1
    finally:
        moto.require_auth(False)


def test_connection_refused_gives_one_line_in_bounded_time() -> None:
    port = closed_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    store = open_transport(f"s3://{BUCKET}/p", environ=env)
    for call in (
        lambda: store.put_if_absent("k", b"x"),
        lambda: store.swap_ref("refs/r", b"1 x", None),
    ):
        start = time.monotonic()
        with pytest.raises(RemoteError) as caught:
            call()
        assert time.monotonic() - start < 15
        assert str(caught.value).endswith(
            f": cannot connect to http://127.0.0.1:{port} "
            f"(connection refused, after {RETRIES} retries)"
        )
        assert "\n" not in str(caught.value)


def test_a_missing_bucket_is_named(moto: MotoServer) -> None:
    store = open_transport("s3://no-such-bucket-here/p", environ=moto.environ())
    with pytest.raises(RemoteError, match="no such bucket 'no-such-bucket-here'"):
        store.put_if_absent("k", b"x")
    with pytest.raises(RemoteError, match="no such bucket"):
        list(store.list_keys())
    with pytest.raises(RemoteError, match="no such bucket"):
        store.get("k", max_bytes=10)
    with pytest.raises(RemoteError, match="no such bucket"):
        store.get_ref("refs/r")


def test_throttling_is_retried_a_bounded_number_of_times() -> None:
    requests = []

    def slow_down(handler: http.server.BaseHTTPRequestHandler) -> None:
        requests.append(handler.command)
        body = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
        handler.send_response(503)
        handler.send_header("Content-Type", "application/xml")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    server = FakeS3(slow_down)
    try:
        env = {
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }
        store = open_transport("s3://throttled/p", environ=env)
        for call in (
            lambda: store.put_if_absent("k", b"x"),
            lambda: store.swap_ref("refs/r", b"1 x", None),
        ):
            requests.clear()
            start = time.monotonic()
            with pytest.raises(RemoteError, match=r"throttling requests \(SlowDown\)") as caught:
                call()
            assert time.monotonic() - start < 15
            assert len(requests) == RETRIES + 1
            assert "\n" not in str(caught.value)
    finally:
        server.stop()


def test_an_s3_object_larger_than_max_bytes_is_refused_from_its_headers() -> None:
    sent = [0]

    def huge(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(1 << 40))
        handler.send_header("ETag", '"0123"')
        handler.send_header("Last-Modified", "Mon, 30 Nov 2026 10:00:00 GMT")
        handler.end_headers()
        zeros = bytes(64 << 10)
        try:
            while sent[0] < 1 << 30:
                handler.wfile.write(zeros)
                sent[0] += len(zeros)
        except OSError:
            pass  # the client hung up, as it should

    server = FakeS3(huge)
    try:
        env = {
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }
        store = open_transport("s3://huge/p", environ=env)
        start = time.monotonic()
        with pytest.raises(RemoteError, match="is 1099511627776 bytes, more than the"):
            store.get("k", max_bytes=MiB)
        assert time.monotonic() - start < 10
        assert sent[0] < 64 * MiB  # what the socket buffers took, not the object
    finally:
        server.stop()


# -------------------------------------------------------- file:// specifics


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    (tmp_path / "packs").mkdir()
    with open(tmp_path / "packs" / "huge", "wb") as f:
        f.truncate(1 << 40)  # sparse: reading it whole would take hours
    store = open_transport(f"file://{tmp_path}")
    start = time.monotonic()
    with pytest.raises(RemoteError, match="is 1099511627776 bytes"):
        store.get("packs/huge", max_bytes=MiB)
    assert time.monotonic() - start < 1


def test_the_directory_backend_hides_its_own_files_and_stray_ones(tmp_path: Path) -> None:
    """Its own files and names no key has are not listed; a link or a FIFO under a key's
    name is refused, never passed over (a gc that did not see a ref deleted its records)."""
    store = open_transport(f"file://{tmp_path}")
    store.swap_ref("refs/r", b"1 x", None)
    (tmp_path / "refs" / ".tmp-leftover").write_bytes(b"half")
    (tmp_path / "with space").write_bytes(b"stray")
    assert [e.key for e in store.list_keys()] == ["refs/r"]
    os.symlink("/etc/passwd", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RemoteError, match=r"(fifo: is a FIFO|link: is a symlink), not a regular"):
        list(store.list_keys())
    for key in ("link", "fifo"):
        with pytest.raises(RemoteError):
            store.get(key, max_bytes=MiB)


def test_a_missing_directory_is_reported_not_created(tmp_path: Path) -> None:
    store = open_transport(f"file://{tmp_path}/absent")
    for call in (
        lambda: store.put_if_absent("a/b", b"x"),
        lambda: store.get("a/b", max_bytes=1),
        lambda: store.stat("a/b"),
        lambda: list(store.list_keys()),
        lambda: store.swap_ref("refs/r", b"1", None),
    ):
        with pytest.raises(RemoteError, match="no such directory"):
            call()
    assert not (tmp_path / "absent").exists()


COUNTER = r"""
import sys
from worksnap.remote import open_transport

store, times, writer = open_transport(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for n in range(times):
    while True:
        ref = store.get_ref("refs/counter")
        value = int(ref.data.split()[0]) if ref else 0
        data = f"{value + 1} {writer}-{n}".encode()
        if store.swap_ref("refs/counter", data, ref.etag if ref else None):
            break
"""


def test_concurrent_compare_and_swap_from_processes_loses_no_update(tmp_path: Path) -> None:
    writers, times = 3, 15
    env = {**os.environ, "PYTHONPATH": SRC}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                COUNTER,
                f"file://{tmp_path}",
                str(times),
                f"p{n}",
            ],
            env=env,
        )
        for n in range(writers)
    ]
    assert [child.wait(timeout=120) for child in children] == [0] * writers
    ref = open_transport(f"file://{tmp_path}").get_ref("refs/counter")
    assert ref is not None
    assert int(ref.data.split()[0]) == writers * times


KILLED = r"""
import os, signal, stat, sys
from worksnap.remote.directory import DirectoryTransport

root, operation, step, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def is_dir(fd):
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False

STEPS = {
    "open temp": ("open", lambda path, flags, *a, **k: bool(flags & os.O_EXCL)),
    "write": ("write", lambda *a, **k: True),
    "fsync file": ("fsync", lambda fd: not is_dir(fd)),
    "link": ("link", lambda *a, **k: True),
    "rename": ("replace", lambda *a, **k: True),
    "unlink temp": ("unlink", lambda *a, **k: True),
    "fsync dir": ("fsync", is_dir),
    "never": ("getpid", lambda *a, **k: False),
}
func, test = STEPS[step]
real = getattr(os, func)
armed = False

def wrapper(*args, **kwargs):
    if armed and test(*args, **kwargs):
        print("reached", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

setattr(os, func, wrapper)
store = DirectoryTransport(root)
data = bytes(range(256)) * (size // 256)
if operation == "put":
    armed = True
    store.put_if_absent("packs/ab/object", data)
elif operation == "swap":
    old = store.get_ref("refs/main")
    armed = True
    store.swap_ref("refs/main", b"new " + data, old.etag)
else:
    print("start", flush=True)
    n = 0
    while True:
        store.put_if_absent(f"packs/{n}", data + b"%d" % n)
        n += 1
print("finished", flush=True)
"""

PUT_STEPS = ["open temp", "write", "fsync file", "link", "unlink temp", "fsync dir", "never"]
SWAP_STEPS = ["open temp", "write", "fsync file", "rename", "unlink temp", "fsync dir", "never"]


def run_killed(root: Path, operation: str, step: str, size: int) -> str:
    child = subprocess.run(
        [sys.executable, "-c", KILLED, str(root), operation, step, str(size)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if step == "never":
        assert child.returncode == 0, child.stderr
        assert child.stdout == "finished\n"
    else:
        assert child.returncode == -signal.SIGKILL, child.stderr
        assert child.stdout == "reached\n"  # the fault point was really reached
    return child.stdout


@pytest.mark.parametrize("step", PUT_STEPS)
def test_a_put_killed_at_any_step_leaves_no_partial_object(tmp_path: Path, step: str) -> None:
    size = 8 * MiB
    data = bytes(range(256)) * (size // 256)
    run_killed(tmp_path, "put", step, size)
    store = DirectoryTransport(str(tmp_path))
    visible = list(store.list_keys())
    assert [e.key for e in visible] in ([], ["packs/ab/object"])
    if visible:
        assert store.get("packs/ab/object", max_bytes=size) == data
    assert (store.stat("packs/ab/object") is not None) == bool(visible)
    # The next writer completes it (or finds it complete).
    assert store.put_if_absent("packs/ab/object", data) is not bool(visible)
    assert store.get("packs/ab/object", max_bytes=size) == data


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_a_swap_killed_at_any_step_leaves_the_old_or_the_new_ref(tmp_path: Path, step: str) -> None:
    size = MiB
    store = DirectoryTransport(str(tmp_path))
    assert store.swap_ref("refs/main", b"old", None)
    run_killed(tmp_path, "swap", step, size)
    ref = store.get_ref("refs/main", max_bytes=2 * size)
    assert ref is not None
    assert ref.data in (b"old", b"new " + bytes(range(256)) * (size // 256))
    # The dead writer's lock went with it: the next swap is not kept waiting.
    start = time.monotonic()
    assert store.swap_ref("refs/main", b"next", ref.etag)
    assert time.monotonic() - start < 1


def test_puts_killed_at_random_moments_leave_only_whole_objects(tmp_path: Path) -> None:
    size = 32 * MiB
    data = bytes(range(256)) * (size // 256)
    rng = random.Random(1)
    for _ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(tmp_path), "loop", "never", str(size)],
            env={**os.environ, "PYTHONPATH": SRC},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "start\n"
        time.sleep(rng.uniform(0, 0.4))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    store = DirectoryTransport(str(tmp_path))
    for entry in store.list_keys():
        n = entry.key.removeprefix("packs/")
        assert store.get(entry.key, max_bytes=2 * size) == data + n.encode()


# ------------------------------------------------------------ URLs, settings


def test_open_transport_accepts_file_and_s3_urls_only(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "HOME": "/nonexistent"}
    assert open_transport(f"file://{tmp_path}").url == f"file://{tmp_path}"
    assert open_transport("file://localhost/srv/x").url == "file:///srv/x"
    assert open_transport("s3://my-bucket/a/b/", environ=env).url == "s3://my-bucket/a/b"
    assert open_transport("s3://my-bucket", environ=env).url == "s3://my-bucket"
    for url, message in [
        ("http://example.com/x", "speaks s3://bucket/prefix and file:///path"),
        ("/plain/path", "speaks s3://bucket/prefix and file:///path"),
        ("file://relative/path", "three slashes"),
        ("file:", "absolute path"),
        ("s3://Bad_Bucket/p", "not a valid bucket name"),
        ("s3://bucket/a//b", "the prefix may hold only"),
        ("s3://bucket/.hidden", "the prefix may hold only"),
        ("s3://bucket/p?x=1", "no query"),
    ]:
        with pytest.raises(InputError, match=message):
            open_transport(url, environ=env)


def test_credentials_in_a_url_are_refused_and_not_repeated() -> None:
    with pytest.raises(InputError) as caught:
        open_transport("s3://AKIDEXAMPLE:very-secret@bucket/p", environ={})
    assert "credentials do not belong in a URL" in str(caught.value)
    assert "very-secret" not in str(caught.value)
    assert "AKIDEXAMPLE" not in str(caught.value)


def test_the_core_does_not_import_the_s3_client(tmp_path: Path) -> None:
    code = (
        "import sys, worksnap.remote, worksnap.cli\n"
        f"worksnap.remote.open_transport('file://{tmp_path}').probe()\n"
        "assert 'obstore' not in sys.modules, 'obstore imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": SRC})


def write_aws_files(home: Path, credentials: str = "", config: str = "") -> None:
    (home / ".aws").mkdir(parents=True, exist_ok=True)
    (home / ".aws" / "credentials").write_text(credentials)
    (home / ".aws" / "config").write_text(config)


def test_settings_come_from_the_environment_first(tmp_path: Path) -> None:
    write_aws_files(
        tmp_path,
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n",
        "[default]\nregion = eu-west-1\nendpoint_url = http://files.example\n",
    )
    env = {
        "HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "ENVKEY",
        "AWS_SECRET_ACCESS_KEY": "envsecret",
        "AWS_SESSION_TOKEN": "envtoken",
        "AWS_REGION": "eu-north-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }
    settings = resolve_s3_settings(env)
    assert (settings.access_key_id, settings.secret_access_key) == ("ENVKEY", "envsecret")
    assert settings.session_token == "envtoken"
    assert (settings.region, settings.endpoint) == ("eu-north-1", "http://127.0.0.1:9")
    assert settings.source == "environment"
    assert "envsecret" not in repr(settings)
    assert "ENVKEY" not in repr(settings)
    assert resolve_s3_settings({**env, "AWS_ENDPOINT_URL_S3": "http://s3only"}).endpoint == (
        "http://s3only"
    )


def test_settings_come_from_the_profile_in_the_aws_files(tmp_path: Path) -> None:
    write_aws_files(
        tmp_path,
        "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
        "[work]\naws_access_key_id = WORKKEY\naws_secret_access_key = worksecret\n",
        "[default]\nregion = eu-west-1\n"
        "[profile work]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:8333\n"
        "[profile cfgonly]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n"
        "[profile sso]\nsso_session = corp\n",
    )
    home = {"HOME": str(tmp_path)}
    default = resolve_s3_settings(home)
    assert (default.access_key_id, default.region, default.endpoint) == (
        "DEFKEY",
        "eu-west-1",
        None,
    )
    work = resolve_s3_settings({**home, "AWS_PROFILE": "work"})
    assert (work.access_key_id, work.secret_access_key) == ("WORKKEY", "worksecret")
    assert (work.region, work.endpoint) == ("ap-south-1", "http://127.0.0.1:8333")
    assert work.source == f"profile work in {tmp_path}/.aws/credentials"
    assert resolve_s3_settings({**home, "AWS_PROFILE": "cfgonly"}).access_key_id == "CFGKEY"
    assert resolve_s3_settings({**home, "AWS_PROFILE": "cfgonly"}).region == "us-east-1"
    with pytest.raises(InputError, match="through sso_session, which worksnap does not read"):
        resolve_s3_settings({**home, "AWS_PROFILE": "sso"})
    with pytest.raises(InputError, match="AWS_PROFILE names the profile 'nope'"):
        resolve_s3_settings({**home, "AWS_PROFILE": "nope"})
    other = tmp_path / "elsewhere"
    other.write_text("[default]\naws_access_key_id = OTHER\naws_secret_access_key = s\n")
    assert (
        resolve_s3_settings({**home, "AWS_SHARED_CREDENTIALS_FILE": str(other)}).access_key_id
        == "OTHER"
    )


def test_settings_refuse_missing_or_half_credentials_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no AWS credentials"):
        resolve_s3_settings({"HOME": str(tmp_path)})
    with pytest.raises(InputError, match="AWS_SECRET_ACCESS_KEY is not set"):
        resolve_s3_settings({"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "K"})
    write_aws_files(tmp_path, "aws_secret_access_key = leaked-if-quoted\n[broken")
    with pytest.raises(InputError, match="cannot read the AWS file") as caught:
        resolve_s3_settings({"HOME": str(tmp_path)})
    assert "leaked-if-quoted" not in str(caught.value)


def test_threads_share_one_transport_safely(moto: MotoServer) -> None:
    # obstore's client is used from many threads at once by the contract tests; this
    # checks that answers do not cross between threads.
    store = s3_transport(moto)
    barrier = threading.Barrier(8)

    def put_and_read(n: int) -> bytes:
        barrier.wait()
        store.put_if_absent(f"t/{n}", b"%d" % n * 1000)
        return store.get(f"t/{n}", max_bytes=10_000)

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(put_and_read, range(8))) == [b"%d" % n * 1000 for n in range(8)]
