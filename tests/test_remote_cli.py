"""`worksnap remote`, `push`, `pull` and `verify --remote` as real processes, on file:// and moto.

Each test drives the command line a user types (`python -m worksnap`), with the
remote's credentials in the environment as a user would set them. Kills are real
SIGKILLs of a pushing process.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from worksnap.remote import open_transport

from .conftest import tree_state, write
from .s3server import MotoServer

BUCKET = "worksnap-cli"
pytestmark = pytest.mark.slow  # real processes, kill -9, concurrency

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

    def keys(self, prefix: str) -> set[str]:
        return {e.key for e in open_transport(self.url, environ=self.env).list_keys(prefix)}


@pytest.fixture(params=["file", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    if request.param == "file":
        (tmp_path / "remote").mkdir()
        return Remote(f"file://{tmp_path}/remote", {})
    server: MotoServer = request.getfixturevalue("moto")
    return Remote(f"s3://{BUCKET}/c-{secrets.token_hex(6)}", server.environ())


def start(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`worksnap --root ROOT ARGS...` started in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(
    root: Path, *args: str, env: dict[str, str] | None = None, code: int | None = 0
) -> subprocess.CompletedProcess[str]:
    """Runs `worksnap --root ROOT ARGS...`; asserts its exit code (unless None)."""
    proc = start(root, *args, env=env)
    out, err = proc.communicate(timeout=300)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if code is not None:
        assert done.returncode == code, (done.returncode, out, err)
    return done


def doc(root: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """The `--json` document of a command that succeeds."""
    found = json.loads(run(root, "--json", *args, env=env).stdout)
    assert isinstance(found, dict)
    return found


def project(root: Path, seed: int = 0) -> None:
    """What a restore must keep: modes, symlinks, empty dirs, names that are not UTF-8."""
    write(root, "src/main.py", f"print({seed})\n")
    write(root, "src/run.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    write(root, "docs/readme.md", "read me\n" * 50)
    write(root, b"caf\xe9/\xff-name.txt", b"not utf-8 names")
    (root / "empty" / "deeper").mkdir(parents=True)
    os.symlink("../src/main.py", root / "docs" / "link")
    write(root, "big.bin", secrets.token_bytes(1_200_000))
    for i in range(30):
        write(root, f"many/f{i:03d}.txt", f"{seed} {i} " * 30)


def git(cwd: Path, *args: str) -> None:
    people = ("AUTHOR", "COMMITTER")
    names = {f"GIT_{who}_{what}": "t" for who in people for what in ("NAME", "EMAIL")}
    env = {**os.environ, **names, "HOME": str(cwd)}
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a failing command printed (asserting there is just one, no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worksnap: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def store_files(store: Path) -> dict[str, bytes]:
    """Every file of a store but its lock notes and caches, by relative path."""
    found = {}
    for path in sorted(store.rglob("*")):
        rel = str(path.relative_to(store))
        if path.is_file() and not rel.startswith(("lock", "cache")):
            found[rel] = path.read_bytes()
    return found


# -- the round trip ------------------------------------------------------------------


def test_push_then_pull_into_a_fresh_clone_rewinds_byte_exact(
    remote: Remote, tmp_path: Path
) -> None:
    a = tmp_path / "a"
    a.mkdir()
    project(a)
    git(a, "init", "-q")
    git(a, "add", "src", "docs")
    git(a, "commit", "-qm", "start")
    run(a, "snapshot", "--step", "1", "--kind", "step", env=remote.env)
    first = tree_state(a, skip=(".git",))
    write(a, "src/main.py", "changed\n")
    (a / "src" / "run.sh").chmod(0o700)
    (a / "docs" / "link").unlink()
    os.symlink("readme.md", a / "docs" / "link")
    run(a, "snapshot", "--step", "2", "--kind", "step", env=remote.env)
    second = tree_state(a, skip=(".git",))

    added = doc(a, "remote", "add", "origin", remote.url, env=remote.env)
    assert added["name"] == "origin" and added["url"] == remote.url
    pushed = doc(a, "push", env=remote.env)
    assert len(pushed["snapshots"]) == 2  # type: ignore[arg-type]
    assert pushed["objects"] and pushed["bytes"] and pushed["new_packs"]
    again = doc(a, "push", env=remote.env)
    assert again["snapshots"] == [] and again["objects"] == 0

    b = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(a), str(b))
    run(b, "remote", "add", "origin", remote.url, env=remote.env)
    listed = doc(b, "remote", "list")
    assert listed == {"remotes": [{"name": "origin", "url": remote.url}]}
    cloned = tree_state(b, skip=(".git",))
    pulled = doc(b, "pull", env=remote.env)
    assert sorted(pulled["snapshots"]) == sorted(pushed["snapshots"])  # type: ignore[type-var]
    assert doc(b, "pull", env=remote.env)["snapshots"] == []
    assert tree_state(b, skip=(".git",)) == cloned  # a pull never touches the tree
    assert not (b / "big.bin").exists()

    steps = json.loads(run(b, "--json", "list").stdout)
    assert sorted(s["step"] for s in steps) == [1, 2]
    run(b, "rewind", "1", "--yes")
    assert tree_state(b, skip=(".git",)) == first
    run(b, "rewind", "2", "--yes")
    assert tree_state(b, skip=(".git",)) == second
    out = tmp_path / "out"
    run(b, "restore", "step:1", "--to", str(out))
    assert tree_state(out) == first
    assert run(b, "verify").returncode == 0
    verified = doc(b, "verify", "--remote", "origin", env=remote.env)
    assert verified["problems"] == [] and verified["snapshots"] == 2

    # Pushed back from the clone: nothing new is listed; pulled again into a: nothing moves.
    assert doc(b, "push", "origin", "step:1", env=remote.env)["snapshots"] == []
    assert doc(a, "pull", env=remote.env)["snapshots"] == []
    shown = run(a, "remote", "list", "-v").stdout
    assert shown == f"origin\t{remote.url}\n"
    assert run(a, "remote", "list").stdout == "origin\n"


def test_remote_config_holds_no_credential_and_remove_forgets(
    remote: Remote, tmp_path: Path
) -> None:
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x")
    run(a, "remote", "add", "origin", remote.url, env=remote.env)
    store = a / ".worksnap"
    config = (store / "config.json").read_text()
    assert json.loads(config)["remotes"] == {"origin": {"url": remote.url}}
    for value in remote.env.values():
        if len(value) > 8 and not value.startswith(("http", "/")):
            assert value not in config
    done = run(a, "remote", "add", "x", "s3://key:secret-value@bucket/p", code=2)
    assert "secret-value" not in done.stderr + done.stdout
    one_line_error(done)
    one_line_error(run(a, "remote", "add", "origin", remote.url, env=remote.env, code=2))
    one_line_error(run(a, "remote", "add", "latest", remote.url, env=remote.env, code=2))
    one_line_error(run(a, "remote", "add", "ftp", "ftp://host/x", code=2))
    run(a, "remote", "remove", "origin")
    assert run(a, "remote", "list").stdout == ""
    one_line_error(run(a, "push", code=2))
    one_line_error(run(a, "remote", "remove", "origin", code=2))


# -- concurrency and kills -----------------------------------------------------------


def test_two_push_processes_at_once_lose_nothing(remote: Remote, tmp_path: Path) -> None:
    roots = []
    for i in range(2):
        root = tmp_path / f"m{i}"
        root.mkdir()
        project(root, seed=i)
        for step in range(3):
            write(root, "src/main.py", f"{i} step {step}\n")
            run(root, "--session", "shared", "snapshot", "--step", str(step), "--kind", "step")
        run(root, "remote", "add", "origin", remote.url, env=remote.env)
        roots.append(root)
    procs = [start(r, "--session", "shared", "--json", "push", env=remote.env) for r in roots]
    pushed: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        pushed += json.loads(out)["snapshots"]
    assert len(pushed) == 6
    c = tmp_path / "c"
    c.mkdir()
    run(c, "remote", "add", "origin", remote.url, env=remote.env)
    pulled = doc(c, "--session", "shared", "pull", env=remote.env)
    assert sorted(pulled["snapshots"]) == sorted(pushed)  # type: ignore[type-var]
    assert doc(c, "verify", "--remote", "origin", env=remote.env)["problems"] == []
    for i, root in enumerate(roots):
        listed = json.loads(run(root, "--session", "shared", "--json", "list").stdout)
        for snapshot in listed:
            out = tmp_path / f"out-{snapshot['id']}"
            run(c, "--session", "shared", "restore", snapshot["id"], "--to", str(out))
            assert (out / "src/main.py").read_text() == f"{i} step {snapshot['step']}\n"


def big_project(root: Path) -> None:
    """Enough data for several 8 MiB packs (files under the 2 MiB cap)."""
    for i in range(24):
        write(root, f"data/{i:02d}.bin", secrets.token_bytes(1_500_000))


def test_a_push_killed_half_way_is_completed_by_the_next(remote: Remote, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    project(a)
    big_project(a)
    run(a, "snapshot", "--step", "1", "--kind", "step")
    run(a, "remote", "add", "origin", remote.url, env=remote.env)
    proc = start(a, "push", env=remote.env)
    deadline = time.monotonic() + 120
    while not remote.keys("index") and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL  # killed half-way, not after it finished
    assert not remote.keys("refs")
    done = doc(a, "push", env=remote.env)
    assert len(done["snapshots"]) == 1  # type: ignore[arg-type]
    assert doc(a, "verify", "--remote", "origin", env=remote.env)["problems"] == []
    b = tmp_path / "b"
    b.mkdir()
    run(b, "remote", "add", "origin", remote.url, env=remote.env)
    run(b, "pull", env=remote.env)
    run(b, "rewind", "1", "--yes")
    assert tree_state(b) == tree_state(a)


def test_remote_gc_racing_a_push_loses_nothing(remote: Remote, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    project(a)
    big_project(a)
    run(a, "snapshot", "--step", "1", "--kind", "step")
    run(a, "remote", "add", "origin", remote.url, env=remote.env)
    run(a, "push", env=remote.env)
    write(a, "data/new.bin", secrets.token_bytes(1_000_000))
    run(a, "snapshot", "--step", "2", "--kind", "step")
    pusher = start(a, "push", env=remote.env)
    gcs = 0
    while pusher.poll() is None or gcs == 0:
        # Retention keeps the newest of the session; the sweep must keep all a push needs.
        run(a, "remote", "gc", "origin", "--keep-last", "5", env=remote.env)
        gcs += 1
    _, err = pusher.communicate(timeout=300)
    assert pusher.returncode == 0, err
    run(a, "remote", "gc", "origin", env=remote.env)
    assert doc(a, "verify", "--remote", "origin", env=remote.env)["problems"] == []
    b = tmp_path / "b"
    b.mkdir()
    run(b, "remote", "add", "origin", remote.url, env=remote.env)
    assert len(doc(b, "pull", env=remote.env)["snapshots"]) == 2  # type: ignore[arg-type]
    run(b, "rewind", "2", "--yes")
    assert tree_state(b) == tree_state(a)


# -- a damaged or hostile remote -----------------------------------------------------


def test_a_tampered_pack_is_refused_by_pull_and_the_store_unchanged(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    url = f"file://{tmp_path}/remote"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    project(a)
    run(a, "snapshot", "--step", "1", "--kind", "step")
    run(a, "remote", "add", "origin", url)
    run(a, "push")
    packs = sorted((tmp_path / "remote" / "data").rglob("*"))
    pack = max((p for p in packs if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 1
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    write(b, "own.txt", "b's own\n")
    run(b, "snapshot")
    run(b, "remote", "add", "origin", url)
    before = store_files(b / ".worksnap")
    tree = tree_state(b)
    done = run(b, "pull", code=1)
    assert "is damaged" in one_line_error(done)
    assert store_files(b / ".worksnap") == before
    assert tree_state(b) == tree
    assert run(b, "verify", "--remote", "origin", code=1).stdout


def test_wrong_credentials_give_one_line_and_no_secret(moto: MotoServer, tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x")
    run(a, "snapshot")
    url = f"s3://{BUCKET}/creds-{secrets.token_hex(4)}"
    run(a, "remote", "add", "origin", url, env=moto.environ())
    wrong = moto.environ(AWS_SECRET_ACCESS_KEY="not-the-secret-at-all")
    moto.require_auth(True)
    try:
        done = run(a, "push", env=wrong, code=1)
    finally:
        moto.require_auth(False)
    line = one_line_error(done)
    assert "not-the-secret-at-all" not in done.stdout + done.stderr
    assert url in line


def test_remote_add_refuses_a_store_without_conditional_writes(tmp_path: Path) -> None:
    server = MotoServer(ignore_conditions=True)
    try:
        server.create_bucket(BUCKET)
        a = tmp_path / "a"
        a.mkdir()
        write(a, "f.txt", "x")
        done = run(a, "remote", "add", "origin", f"s3://{BUCKET}/p", env=server.environ(), code=2)
    finally:
        server.stop()
    assert "conditional writes" in one_line_error(done)
    assert run(a, "remote", "list").stdout == ""


def test_remote_gc_refuses_a_grace_shorter_than_pushes_count_on(tmp_path: Path) -> None:
    """A push looks again at the packs it relies on once it has run half an hour; a gc
    with `--grace 10m` condemned and then deleted a running push's first packs, and the
    push wrote a ref naming a snapshot nobody could pull."""
    (tmp_path / "remote").mkdir()
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x")
    run(a, "snapshot")
    run(a, "remote", "add", "origin", f"file://{tmp_path}/remote")
    run(a, "push")
    err = one_line_error(run(a, "remote", "gc", "origin", "--grace", "10m", code=2))
    assert "shorter than the 1h every push counts on" in err
    run(a, "remote", "gc", "origin", "--grace", "2h")


def test_a_remote_named_on_pull_must_exist_and_ids_must_be_on_it(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    url = f"file://{tmp_path}/remote"
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x")
    run(a, "snapshot")
    run(a, "remote", "add", "origin", url)
    run(a, "push")
    one_line_error(run(a, "pull", "origin", "0000", code=2))
    one_line_error(run(a, "remote", "gc", "elsewhere", code=2))
    one_line_error(run(a, "verify", "--remote", "elsewhere", code=2))
    shutil.rmtree(tmp_path / "remote")
    one_line_error(run(a, "pull", code=1))


def test_a_file_remote_inside_the_root_or_the_store_or_holding_them_is_refused(
    tmp_path: Path,
) -> None:
    """A remote in the root was captured by the next snapshot, and a restore of an older one
    deleted it (other machines' pushes with it); one in the store mixed with its files."""
    a, outside = tmp_path / "a", tmp_path / "remote"
    a.mkdir()
    outside.mkdir()
    write(a, "f.txt", "x")
    run(a, "snapshot")
    (a / "backup").mkdir()
    (tmp_path / "into-root").symlink_to(a / "backup")
    for url in (
        f"file://{a}/backup",
        f"file://{a}/.worksnap",
        f"file://{a}/.worksnap/cache",
        f"file://{a}",
        f"file://{tmp_path}",
        f"file://{tmp_path}/into-root",
    ):
        assert "keep a remote outside" in one_line_error(
            run(a, "remote", "add", "origin", url, code=2)
        )
    assert run(a, "remote", "list").stdout == ""
    assert list((a / "backup").iterdir()) == []
    b, store = tmp_path / "b", tmp_path / "b-store"
    b.mkdir()
    write(b, "f.txt", "x")
    run(b, "--store", str(store), "snapshot")
    err = one_line_error(
        run(b, "--store", str(store), "remote", "add", "o", f"file://{store}/r", code=2)
    )
    assert "is inside the store" in err
    # A remote reached through a link that is turned into the root later.
    (tmp_path / "turned").symlink_to(outside)
    run(a, "remote", "add", "origin", f"file://{tmp_path}/turned")
    run(a, "push")
    (tmp_path / "turned").unlink()
    (tmp_path / "turned").symlink_to(a / "backup")
    for command in (
        ["push"],
        ["pull"],
        ["remote", "gc", "origin"],
        ["verify", "--remote", "origin"],
    ):
        assert "is inside the root" in one_line_error(run(a, *command, code=2))
    assert list((a / "backup").iterdir()) == []


def test_a_file_over_the_remote_s_object_limit_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    """A 1.1 GiB file (allowed locally with max-file-bytes 2G) was pushed, and then every
    reader refused its pack's index: push, pull, gc and verify failed from then on."""
    remote = tmp_path / "remote"
    remote.mkdir()
    a = tmp_path / "a"
    a.mkdir()
    write(a, "small.txt", "hi\n")
    with (a / "huge.bin").open("wb") as huge:
        huge.truncate(1100 << 20)  # sparse: the snapshot stores it in little room
    run(a, "config", "max-file-bytes", "2G")
    run(a, "snapshot")
    run(a, "remote", "add", "origin", f"file://{remote}")
    err = one_line_error(run(a, "push", code=1))
    assert "huge.bin, which is 1153433600 bytes, more than the 1073741824" in err
    assert {e.key for e in open_transport(f"file://{remote}").list_keys()} == {"config"}
    (a / "huge.bin").unlink()
    second = run(a, "snapshot").stdout.strip()
    run(a, "push", "origin", second)  # the others go by id
    assert run(a, "verify", "--remote", "origin").returncode == 0


def test_a_record_the_store_takes_is_pushed_and_pulled_and_a_larger_one_never_written(
    tmp_path: Path,
) -> None:
    """A checkpoint naming 16,000 paths a turn was about to create has a record over 1 MiB:
    the store takes records up to 16 MiB, but the remote's readers took 1 MiB, so once
    pushed it stopped every pull, gc and verify."""
    from worksnap.errors import RemoteError
    from worksnap.remote.repository import Repository
    from worksnap.workspace import Workspace

    remote, a, b = tmp_path / "remote", tmp_path / "a", tmp_path / "b"
    for folder in (remote, a, b):
        folder.mkdir()
    write(a, "main.py", "code\n")
    run(a, "snapshot", "-m", "base")
    run(a, "begin", "--step", "1", "-m", "turn")
    names = [
        f"out/generated-artifact-with-a-long-descriptive-name-{i:06d}.json" for i in range(16_000)
    ]
    for start in range(0, len(names), 4000):
        run(a, "capture", *names[start : start + 4000])
    run(a, "begin", "--step", "2")  # the turn is over: its checkpoint is pushed
    url = f"file://{remote}"
    run(a, "remote", "add", "origin", url)
    run(a, "push")
    records = list(open_transport(url).list_keys("snapshots"))
    assert max(e.size for e in records) > 1 << 20
    run(b, "remote", "add", "origin", url)
    assert len(doc(b, "pull")["snapshots"]) == 2  # type: ignore[arg-type]
    run(b, "remote", "gc", "origin")
    run(b, "verify", "--remote", "origin")
    # One the store could not read back is never written to the remote either.
    from worksnap.record import MAX_RECORD_BYTES

    ws = Workspace(a)
    record = ws.store.load_record(ws.store.ids()[0])
    assert record is not None
    huge = msgspec.structs.replace(record, absent=[f"x/{i:0700d}" for i in range(24_000)])
    repo = Repository.open(open_transport(url))
    with pytest.raises(RemoteError, match=f"more than the {MAX_RECORD_BYTES} a reader takes"):
        repo.put_record(huge)
    assert list(open_transport(url).list_keys("snapshots")) == records


def test_a_named_push_that_sends_objects_again_says_so(tmp_path: Path) -> None:
    """`push NAME ID` after the remote lost an index sent the objects again, and said
    "nothing to push (up to date)" while its JSON said objects: 2."""
    remote = tmp_path / "remote"
    remote.mkdir()
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x\n")
    snapshot = run(a, "snapshot").stdout.strip()
    run(a, "remote", "add", "origin", f"file://{remote}")
    run(a, "push")
    for index in (remote / "index").iterdir():
        index.unlink()
    said = run(a, "push", "origin", snapshot).stdout
    assert "up to date" not in said and "sent again 2 objects" in said, said
    assert run(a, "verify", "--remote", "origin").returncode == 0
    assert "up to date" in run(a, "push", "origin", snapshot).stdout


def test_a_push_past_a_lost_pack_says_so_on_stderr_and_in_its_json(tmp_path: Path) -> None:
    """A pack gone from the remote (its index kept): the push says what it sent again."""
    remote = tmp_path / "remote"
    remote.mkdir()
    a = tmp_path / "a"
    a.mkdir()
    write(a, "f.txt", "x\n")
    run(a, "snapshot")
    run(a, "remote", "add", "origin", f"file://{remote}")
    assert json.loads(run(a, "--json", "push").stdout)["lost_packs"] == []
    (pack,) = (p for p in (remote / "data").rglob("*") if p.is_file())
    pack.unlink()
    write(a, "g.txt", "y\n")
    run(a, "snapshot")
    done = run(a, "--json", "push")
    assert json.loads(done.stdout)["lost_packs"] == [pack.name]
    assert done.stderr == (
        "worksnap: origin: 1 pack an index names is missing, cut short or damaged on the "
        "remote: what this push needed of them was sent again; `worksnap verify --remote "
        "origin` names the snapshots that lost data (push them again by id)\n"
    )


OTHER_UID, TEAM_GID = 54321, 54322
"""Another user and the group both are in: numbers only, no account needed."""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_second_member_of_the_group_pushes_to_a_group_shared_file_remote(
    tmp_path: Path,
) -> None:
    """A review shared a `file://` remote between two users of one group (a setgid folder,
    umask 002, as `docs/remote.md` suggests for a team disk): the first one's lock files
    were made 0644 and opened for writing, so the second could never push."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, OTHER_UID, TEAM_GID)
    os.chmod(shared, 0o2775)
    url = f"file://{shared}"
    first, second = tmp_path / "first", tmp_path / "second"
    project(first, seed=1)
    project(second, seed=2)
    umask = os.umask(0o002)
    try:
        run(first, "snapshot")
        run(first, "remote", "add", "team", url)
        run(first, "push")
    finally:
        os.umask(umask)
    for path in [shared, *shared.rglob("*")]:  # what the first pushed is the other user's
        os.chown(path, OTHER_UID, TEAM_GID, follow_symlinks=False)
    run(second, "snapshot")
    as_member = [
        "setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner",
        f"--regid={TEAM_GID}", f"--groups={TEAM_GID}", "--", "sh", "-c",
        'umask 002 && exec "$@"', "sh", sys.executable, "-m", "worksnap", "--root",
        str(second),
    ]  # fmt: skip

    def member(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_member, *args], capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip

    assert member("remote", "add", "team", url).returncode == 0
    pushed = member("push")
    assert pushed.returncode == 0, pushed.stderr
    assert member("verify", "--remote", "team").returncode == 0
    run(first, "pull", "team")
    listed = json.loads(run(first, "--json", "list").stdout)
    assert len(listed) == 2  # its own and the member's


def test_an_open_checkpoint_is_held_back_until_its_turn_is_over(tmp_path: Path) -> None:
    """A review pushed right after `begin`: the empty checkpoint went to the remote, the
    turn's captures then rewrote it here, and the remote (whose records never change)
    kept the empty one, so a rewind pulled elsewhere set nothing back. The open checkpoint
    is held back, said so, refused when named; the next `begin` closes it, and it goes."""
    a, url = tmp_path / "a", f"file://{tmp_path}/remote"
    (tmp_path / "remote").mkdir()
    write(a, "f.txt", "before the turn\n")
    run(a, "snapshot", "--step", "0", "--kind", "step")
    run(a, "remote", "add", "origin", url)
    opened = json.loads(run(a, "--json", "begin", "--step", "1").stdout)["id"]
    pushed = doc(a, "push")
    assert pushed["held_back"] == [opened] and opened not in pushed["snapshots"]  # type: ignore[operator]
    said = run(a, "push").stdout
    assert f"held back the open checkpoint {opened}" in said, said
    assert opened in one_line_error(run(a, "push", "origin", opened, code=2))
    run(a, "capture", "f.txt")
    write(a, "f.txt", "edited by the turn\n")
    # The next turn closes the first one's checkpoint. A push that looks while `begin`
    # has saved the new checkpoint but not yet the session's state (put back here as
    # it was) must still hold the new one back: the newest checkpoint is the open one.
    state = a / ".worksnap" / "sessions" / "default.json"
    was = state.read_bytes()
    second = json.loads(run(a, "--json", "begin", "--step", "2").stdout)["id"]
    state.write_bytes(was)
    pushed = doc(a, "push")
    assert opened in pushed["snapshots"] and second not in pushed["snapshots"]  # type: ignore[operator]
    assert pushed["held_back"] == [second]

    b = tmp_path / "b"
    write(b, "f.txt", "edited by the turn\n")
    run(b, "remote", "add", "origin", url)
    run(b, "pull")
    run(b, "rewind", "1", "--yes")
    assert (b / "f.txt").read_text() == "before the turn\n"


def test_the_pull_help_example_rewinds_the_session_it_pulled(tmp_path: Path) -> None:
    """`pull --help` showed `pull origin --session agent-7 && worksnap rewind 3`: the
    rewind ran in the default session and restored its step 3, not the pulled one."""
    url = f"file://{tmp_path}/remote"
    (tmp_path / "remote").mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    for i in (1, 2, 3):
        write(a, "f", f"agent {i}\n")
        run(a, "--session", "agent-7", "snapshot", "--step", str(i), "--kind", "step")
        write(b, "f", f"mine {i}\n")
        run(b, "snapshot", "--step", str(i), "--kind", "step")
    run(a, "remote", "add", "origin", url)
    run(a, "push", "origin", "--session", "agent-7")
    run(b, "remote", "add", "origin", url)
    shown = subprocess.run(
        [sys.executable, "-m", "worksnap", "pull", "--help"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (example,) = (line for line in shown.splitlines() if "&&" in line)
    for command in example.split("examples:")[-1].split("&&"):
        words = command.split()
        assert words[0] == "worksnap", example
        run(b, *words[1:], *(["--yes"] if words[1] == "rewind" else []))
    assert (b / "f").read_text() == "agent 3\n"


@pytest.mark.parametrize("how", ["gc --keep-last 1", "gc --drop", "retention"])
def test_a_plain_pull_leaves_out_what_a_local_gc_dropped(tmp_path: Path, how: str) -> None:
    """Local retention dropped pulled snapshots and the next plain `pull` brought every one
    of them back, so a store that pulls and keeps retention never shrank (stop 41's
    review). The store now notes what a gc drops (`dropped`): a plain pull leaves those
    out and says so; named ids, or `--with-dropped`, bring them back."""
    url = f"file://{tmp_path}/remote"
    (tmp_path / "remote").mkdir()
    a, b = tmp_path / "a", tmp_path / "b"
    ids = []
    for i in (1, 2, 3):
        write(a, "f", f"{i}\n")
        ids.append(doc(a, "snapshot", "--step", str(i), "--kind", "step")["id"])
    run(a, "remote", "add", "origin", url)
    run(a, "push")
    b.mkdir()
    run(b, "remote", "add", "origin", url)
    assert sorted(doc(b, "pull")["snapshots"]) == sorted(ids)  # type: ignore[arg-type]
    if how == "gc --drop":
        run(b, "gc", "--drop", str(ids[0]), "--drop", str(ids[1]))
    elif how == "retention":
        run(b, "config", "keep-last", "1")
        write(b, "mine", "a snapshot of b's own, which runs the configured retention\n")
        run(b, "snapshot")
        run(b, "config", "keep-last", "none")
    else:
        run(b, "gc", "--keep-last", "1")
    kept = {s["id"] for s in json.loads(run(b, "--json", "list").stdout)}
    gone = sorted(set(map(str, ids)) - kept)
    assert str(ids[0]) in gone, kept
    again = doc(b, "pull")
    assert again["snapshots"] == [] and again["left_out"] == gone, again
    said = run(b, "pull").stdout
    assert f"left out {len(gone)} snapshot" in said and "--with-dropped" in said, said
    assert doc(b, "pull", gone[0])["snapshots"] == [gone[0]]
    assert doc(b, "pull", "--with-dropped")["snapshots"] == gone[1:]
    assert {s["id"] for s in json.loads(run(b, "--json", "list").stdout)} >= set(ids)


@pytest.mark.parametrize("holds", ["file", "tmp"])
def test_remote_add_makes_no_repository_where_something_else_is(tmp_path: Path, holds: str) -> None:
    """A review added another tool's folder as a remote: a repository was made in it, and
    `remote gc` later deleted that tool's old `.tmp-*` files below it. A folder that holds
    something, and no repository, is refused, nothing written there; an empty one, or a
    repository, is taken."""
    a = tmp_path / "a"
    write(a, "f.txt", "x")
    theirs = tmp_path / "theirs"
    write(theirs, "data/sub/.tmp-cache" if holds == "tmp" else "notes.txt", "theirs\n")
    before = tree_state(theirs)
    done = run(a, "remote", "add", "origin", f"file://{theirs}", code=2)
    assert "holds " in one_line_error(done) and "no worksnap repository" in done.stderr
    assert tree_state(theirs) == before
    empty = tmp_path / "empty"
    (empty / "lost+found").mkdir(parents=True)  # (a new file system's root: as empty)
    run(a, "remote", "add", "origin", f"file://{empty}")
    b = tmp_path / "b"
    write(b, "g.txt", "y")
    run(b, "remote", "add", "origin", f"file://{empty}")  # a repository there: taken


def test_remote_add_takes_a_place_that_holds_only_a_killed_probe_s_key(
    remote: Remote, tmp_path: Path
) -> None:
    """A probe killed part-way leaves `probe/KEY`: a folder holding it was taken, an S3
    prefix holding it refused as holding something else (a second review)."""
    open_transport(remote.url, environ=remote.env).put_if_absent(
        "probe/0123456789abcdef.object", b"left"
    )
    a = tmp_path / "a"
    write(a, "f.txt", "x")
    run(a, "remote", "add", "origin", remote.url, env=remote.env)
