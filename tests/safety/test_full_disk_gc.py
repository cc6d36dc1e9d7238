"""gc on a really full disk: what only dropped snapshots needed goes before anything is written.

`worksnap gc` is what a person runs when the disk is full. It used to write the packs
holding dead objects anew (their kept objects in a new pack) before removing any old
one, so on a full disk it failed and freed nothing, even where whole packs and loose
files held nothing a kept snapshot needs. The store here is a real tmpfs that the
user's own file fills to its last byte; the workspace is elsewhere. Processes are real
(the command line in a child), and so is every kill.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes
from worksnap.packcodec import decode_rows

from ..conftest import tree_state, write
from ..legacy import downgrade
from .faults import killed_at_call
from .test_disk_full import mounted_tmpfs, used, worksnap
from .test_kill import SRC

pytestmark = pytest.mark.slow  # mounts, real processes

KIB = 1 << 10
GC_JSON = {"snapshots", "objects", "bytes", "dropped", "dry_run"}
"""The keys `gc --json` has always printed (README, JSON contract: fields are only added)."""


def fill(mount: Path) -> Path:
    """Fills the file system at `mount` to its last byte with a file of the user's."""
    filler = mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4 * KIB, 1):
            chunk = b"\xff" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left"):
        (mount / "one-byte").write_bytes(b"x")  # really full: not one byte more
    return filler


def notes(version: int) -> bytes:
    """A text file an agent edits: each version a few lines apart from the one before."""
    lines = [f"line {i}: {hash_bytes(str(i).encode())}\n" for i in range(2500)]
    for i in range(version):
        lines[100 * i + 7] = f"line {100 * i + 7}: edited in version {i + 1}\n"
    return "".join(lines).encode()


@dataclass(frozen=True)
class History:
    """The snapshots `make_history` took: the one kept, its tree, and those dropped."""

    kept: str
    state: dict[bytes, object]
    dropped: list[str]
    base_pack: str
    """The pack holding only what `main`'s second snapshot added: notes.txt's first
    version, the base the kept version is stored against, and that snapshot's root tree."""
    kept_notes: str
    """The digest of the kept notes.txt, stored against the first version."""


def packs_of(store: Path) -> dict[str, tuple[list[str], dict[int, str]]]:
    """Each published pack's digests and the bases its index names, by row."""
    found = {}
    for index in (store / "packs").glob("*.idx"):
        digests, rows = decode_rows(index.read_bytes(), index.stem)
        found[index.stem] = (digests, dict(rows.bases))
    return found


def make_history(root: Path, store: Path, *, big: int = 700 * KIB) -> History:
    """`main`: keep/a.bin; then notes.txt; then notes.txt edited (stored against the
    version before). Then a session `junk` takes snapshots of build output: files of
    `big` bytes each (a pack of their own per snapshot) and one over 1 MiB (loose).
    Dropping `main`'s older snapshots and the session `junk` leaves whole packs and a
    loose file that nothing kept needs, and a pack (`base_pack`) that nothing kept
    needs but the base of a kept object stored against it."""
    write(root, "keep/a.bin", os.urandom(300 * KIB))
    with Workspace(root, store=store) as ws:
        first = ws.snapshot().id
        before = set(packs_of(store))
        write(root, "notes.txt", notes(1))
        second = ws.snapshot()
        (base_pack,) = set(packs_of(store)) - before
        write(root, "notes.txt", notes(2))
        kept = ws.snapshot().id
        state = tree_state(root)
    dropped = [first, second.id]
    with Workspace(root, store=store, session="junk") as ws:
        for n in range(2):
            write(root, f"build/out{n}.bin", junk(n, big))
            if n == 0:
                write(root, "build/blob.bin", os.urandom(1200 * KIB))  # a loose object
            dropped.append(ws.snapshot().id)
    shutil.rmtree(root / "build")
    kept_notes = hash_bytes(notes(2))
    packs = packs_of(store)
    digests, _ = packs[base_pack]
    assert set(digests) == {hash_bytes(notes(1)), second.tree}  # neither is kept
    (holder,) = [name for name, (d, _) in packs.items() if kept_notes in d]
    held, bases = packs[holder]
    assert bases[held.index(kept_notes)] == hash_bytes(notes(1))[:32]  # a delta on it
    return History(kept, state, dropped, base_pack, kept_notes)


def stored_alone(packs: dict[str, tuple[list[str], dict[int, str]]], digest: str) -> bool:
    """True when a published pack holds `digest` compressed alone (on no base)."""
    return any(digest in d and d.index(digest) not in b for d, b in packs.values())


def junk(n: int, size: int) -> bytes:
    """The bytes of the n-th build output (the same each time: a test writes one back)."""
    return random.Random(n).randbytes(size)


def restores_exactly(root: Path, store: Path, history: History, out: Path) -> None:
    """`verify` is clean and the kept snapshot restores byte for byte."""
    shutil.rmtree(out, ignore_errors=True)
    with Workspace(root, store=store) as ws:
        assert ws.verify() == []
        result = ws.restore_to(history.kept, out)
    assert result.error is None, result.error
    assert tree_state(out) == history.state


@pytest.fixture
def full(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 6 MiB for the store (the caller fills it), unmounted afterwards."""
    yield from mounted_tmpfs(tmp_path, "6m")


def test_gc_on_a_full_disk_frees_what_only_dropped_snapshots_needed(
    tmp_path: Path, full: Path
) -> None:
    root, store = tmp_path / "ws", full / "store"
    history = make_history(root, store)
    fill(full)
    before = used(full)
    code, out, err = _gc_json(root, store, "--keep-last", "1", "--drop-session", "junk")
    assert code == 0, err  # before: "No space left on device", nothing freed
    report = json.loads(out)
    assert set(report) >= GC_JSON
    assert report["snapshots"] == len(history.dropped) == len(report["dropped"])
    assert set(report["dropped"]) == set(history.dropped)
    assert report["dry_run"] is False
    assert report["objects"] >= 4 and report["bytes"] > 2 * 700 * KIB + 1200 * KIB
    assert used(full) < before - 2 * (1 << 20)
    packs = packs_of(store)
    assert history.base_pack not in packs  # the orphan's base went after it was stored again
    assert stored_alone(packs, history.kept_notes)
    restores_exactly(root, store, history, tmp_path / "out")


def _gc_json(root: Path, store: Path, *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), "--store", str(store),
         "--json", "gc", *args],
        capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_gc_on_a_disk_too_full_for_the_generation_file_frees_whole_packs_first(
    tmp_path: Path, full: Path
) -> None:
    """Snapshots dropped before (so this gc removes no record, which would free a block):
    not even `generation` fits. The whole dead packs go first; a long-lived workspace
    that read their indexes learns it, and stores again what it finds swept."""
    root, store = tmp_path / "ws", full / "store"
    history = make_history(root, store)
    with Workspace(root, store=store, session="junk") as ws:
        for snapshot_id in history.dropped:
            ws.drop(snapshot_id)
    with Workspace(root, store=store, session="junk") as daemon:  # long-lived
        daemon.snapshot()  # of main's tree: no object is new, but its index is read
        fill(full)
        code, out, err = _gc_json(root, store)
        assert code == 0, err  # before: "No space left on device", nothing freed
        assert json.loads(out)["bytes"] > 2 * 700 * KIB + 1200 * KIB
        assert stored_alone(packs_of(store), history.kept_notes)
        (full / "filler").unlink()
        blob = junk(0, 700 * KIB)
        write(root, "build/out0.bin", blob)  # back: the daemon had it stored, then swept
        again = daemon.snapshot().id
        assert daemon.verify() == []
    shutil.rmtree(root / "build")
    restores_exactly(root, store, history, tmp_path / "out")
    code, err = worksnap("--root", str(root), "--store", str(store), "--session", "junk",
                         "restore", again, "--to", str(tmp_path / "again"))  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "again" / "build" / "out0.bin").read_bytes() == blob


def test_gc_that_cannot_finish_on_a_full_disk_says_what_it_freed_and_what_is_left(
    tmp_path: Path, full: Path
) -> None:
    """The packs to write anew need more room than the dead ones freed: exit 1, one line
    with the bytes freed, what stays and what it takes; with room, gc finishes."""
    root, store = tmp_path / "ws", full / "store"
    write(root, "keep/a.bin", os.urandom(900 * KIB))  # both under 1 MiB: packed
    write(root, "gone.bin", os.urandom(900 * KIB))  # beside a.bin in the first pack
    with Workspace(root, store=store) as ws:
        ws.snapshot()
        (root / "gone.bin").unlink()
        ws.snapshot()
        state = tree_state(root)
    with Workspace(root, store=store, session="junk") as ws:
        write(root, "build/out.bin", os.urandom(100 * KIB))
        ws.snapshot()
    shutil.rmtree(root / "build")
    fill(full)
    code, err = worksnap("--root", str(root), "--store", str(store), "gc", "--keep-last", "1",
                         "--drop-session", "junk")  # fmt: skip
    assert code == 1 and err.count("\n") == 1, err
    assert "No space left on device" in err and str(store) in err
    said = re.search(r"freed ([\d,]+) bytes.*; ([\d,]+) bytes more stay in \d+ packs? .*"
                     r"takes about ([\d,]+) bytes: .*run `worksnap gc` again", err)  # fmt: skip
    assert said is not None, err
    freed, left, needed = (int(n.replace(",", "")) for n in said.groups())
    assert 100 * KIB <= freed < 200 * KIB, err  # the build output's pack
    assert left >= 900 * KIB, err  # gone.bin
    assert 900 * KIB < needed < 1000 * KIB, err  # a.bin, written anew
    with Workspace(root, store=store) as ws:
        assert ws.verify() == []
    (full / "filler").unlink()
    code, out, err = _gc_json(root, store)
    assert code == 0, err
    assert json.loads(out)["bytes"] >= 900 * KIB  # gone.bin, at last
    with Workspace(root, store=store) as ws:
        assert ws.restore_to("latest", tmp_path / "out").error is None
    assert tree_state(tmp_path / "out") == state


# `worksnap` with the n-th unlink, rename, write or fsync of the process a kill -9.
KILLED_AT_CALL = killed_at_call(1, "from worksnap.cli import main\nsys.exit(main(sys.argv[2:]))")


@pytest.mark.parametrize("dropped", ["by this gc", "before (no room for generation)"])
def test_gc_on_a_full_disk_killed_at_any_call_loses_nothing(
    tmp_path: Path, full: Path, dropped: str
) -> None:
    """kill -9 at every unlink, rename, write and fsync of `worksnap gc` on a full disk:
    `verify` is clean, the kept snapshot restores byte for byte, the orphan's base pack is
    there until the orphan is stored again alone, and a long-lived store that remembers
    an object gone says so at its next `sync`; the next gc (still on the full disk)
    finishes, and the store is clean again."""
    root, template = tmp_path / "ws", tmp_path / "template"
    history = make_history(root, template, big=300 * KIB)
    command = ["gc", "--keep-last", "1", "--drop-session", "junk"]
    if dropped != "by this gc":
        with Workspace(root, store=template, session="junk") as ws:
            for snapshot_id in history.dropped:
                ws.drop(snapshot_id)
        command = ["gc"]
    store = full / "store"
    for n in range(1, 1000):
        shutil.rmtree(store, ignore_errors=True)
        (full / "filler").unlink(missing_ok=True)
        args = list(command)
        shutil.copytree(template, store, symlinks=True)
        fill(full)
        daemon = DiskStore(str(store))
        daemon.sync()
        remembered = set(daemon.digests())
        child = subprocess.run(
            [sys.executable, "-c", KILLED_AT_CALL, str(n), "--root", str(root),
             "--store", str(store), *args],
            capture_output=True, text=True, check=False, timeout=120,
            env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
        )  # fmt: skip
        killed = child.returncode == -signal.SIGKILL
        assert killed or child.returncode == 0, child.stderr
        fresh = DiskStore(str(store))
        gone = {d for d in remembered if not fresh.has(d)}
        noticed = daemon.sync()
        fresh.close()
        daemon.close()  # (a store left open keeps the tmpfs busy: it would not unmount)
        assert noticed or not gone, f"killed at call {n}: {len(gone)} gone unnoticed"
        packs = packs_of(store)
        assert history.base_pack in packs or stored_alone(packs, history.kept_notes), (
            f"killed at call {n}: the orphan's base went before it was stored again"
        )
        restores_exactly(root, store, history, tmp_path / "out")
        with Workspace(root, store=store) as ws:
            if not any(s.session == "junk" for s in ws.list(all_sessions=True)):
                args = [a for a in args if a not in ("--drop-session", "junk")]
        code, err = worksnap("--root", str(root), "--store", str(store), *args)
        assert code == 0, f"killed at call {n}: {err}"
        restores_exactly(root, store, history, tmp_path / "out")
        if not killed:
            break  # the gc ran to its end: every call was a kill point
    assert n > 10


def test_gc_of_a_format_1_store_on_a_full_disk_makes_room_before_it_migrates(
    tmp_path: Path, full: Path
) -> None:
    """The review: `gc --keep-last 1` migrated first, failed writing a record ("No space
    left on device", naming it and nothing to do) and freed nothing."""
    root, store = tmp_path / "ws", full / "store"
    root.mkdir()
    with Workspace(root, store=store) as ws:
        for i in range(5):
            for j in range(40):
                write(root, f"d{j}/f", f"{i} {j}\n")
            ws.snapshot(step=i)
    downgrade(store)
    filler = fill(full)
    code, err = worksnap("--root", str(root), "--store", str(store), "upgrade")
    assert code == 1 and "free some space, then run the command again" in err
    before = used(full)
    code, out, err = _gc_json(root, store, "--keep-last", "1")
    assert code == 0, err
    assert json.loads(out)["snapshots"] == 4 and used(full) < before
    filler.unlink()
    code, err = worksnap("--root", str(root), "--store", str(store), "upgrade")
    assert code == 0, err
    with Workspace(root, store=store) as ws:
        assert [s.step for s in ws.list()] == [4] and ws.verify() == []
        assert not ws.store.legacy_ids()
        assert ws.restore("latest").ok


def test_on_a_full_store_disk_each_command_says_so_and_what_to_do(tmp_path: Path) -> None:
    """The store on a full disk, the project elsewhere (stop 44's review): `restore` said
    "object ...: unreadable: No space left on device", as if the store were damaged (the
    pre-restore snapshot's buffered pack, drained to be read back); `snapshot` gave the
    bare errno, without what to do; and a `gc` with nothing to drop failed, only its merge
    of small packs out of room. Each says the disk is full and to free space; that gc
    succeeds; the tree is untouched and the store intact once there is room."""
    rng = random.Random(44)
    root = tmp_path / "project"
    for i in range(100):
        write(root, f"d{i % 10}/f{i}", rng.randbytes(i * 20).hex())
    for mount in mounted_tmpfs(tmp_path, "4m"):
        store = mount / "store"
        where = ["--root", str(root), "--store", str(store)]
        for label in ("one", "two", "three"):
            write(root, "d1/f1", label)
            assert worksnap(*where, "snapshot", "-m", label)[0] == 0
        (root / "new.bin").write_bytes(rng.randbytes(500 * KIB))
        before = tree_state(root)
        filler = fill(mount)
        full = "No space left on device: free some space, then run the command again"
        for command in (["restore", "latest", "--yes"], ["snapshot"]):
            code, err = worksnap(*where, *command)
            assert code == 1 and err.count("\n") == 1, (command, err)
            assert err.rstrip().endswith(full) and "unreadable" not in err, (command, err)
            assert tree_state(root) == before
        code, err = worksnap(*where, "gc", "--keep-last", "50")
        assert code == 0, err  # nothing to drop: only the merge wanted room
        filler.unlink()
        assert worksnap(*where, "verify")[0] == 0
        assert worksnap(*where, "restore", "latest", "--yes")[0] == 0
        assert (root / "d1" / "f1").read_text() == "three" and not (root / "new.bin").exists()
