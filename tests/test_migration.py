"""The migration of a format 1 store to format 2: every snapshot kept exactly, crash-safe.

Format 1 stores are made the way an older worksnap left them (`tests.legacy.downgrade`:
a format 1 manifest and summary per snapshot, no record). The crash tests run
`worksnap upgrade` in real processes and kill them with SIGKILL: at each point of the
per-snapshot sequence (`migration.STOP_POINTS`, through the test knob), and at random
times in a seeded loop (`WORKSNAP_MIGRATE_KILLS` runs; derandomized by default).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from tests.conftest import tree_state, write
from tests.legacy import downgrade
from worksnap import Workspace
from worksnap.cli import main
from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes
from worksnap.manifest import Entry, summarize, tree_digest
from worksnap.migration import STOP_AFTER_ENV, STOP_POINTS

SRC = str(Path(__file__).resolve().parent.parent / "src")
STORE = ".worksnap"


def run(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs worksnap in a process of its own, as a user (or an agent) would."""
    environment = {**os.environ, "PYTHONPATH": SRC, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )


def history(root: Path, steps: int = 6) -> None:
    """Snapshots of a varied tree: sessions, a checkpoint, an undo, odd names, left-out paths."""
    write(root, ".gitignore", "build/\n*.log\n")
    write(root, "build/out.o", "ignored")
    write(root, "debug.log", "ignored")
    write(root, "big.bin", b"\0" * 5000)
    write(root, os.fsencode("caf") + b"\xe9.txt", "latin-1 name")
    write(root, "tab\there.txt", "tab")
    write(root, "a-b", "sorts before a/")
    (root / "empty").mkdir()
    os.symlink("a-b", root / "link")
    ws = Workspace(root, max_file_bytes=4096, exclude=("secret",))
    write(root, "secret/key", "never captured")
    for step in range(steps):
        write(root, f"a/{step % 3}/file{step}.py", f"print({step})\n" * (step + 1))
        write(root, "a/shared.txt", f"version {step}\n")
        ws.snapshot(step=step, label=f"step {step}", attach={"notes": f"n{step}".encode()})
    other = Workspace(root, session="other", max_file_bytes=4096, exclude=("secret",))
    other.snapshot(label="in another session")
    ws.begin(step=steps)
    ws.capture_before(["a/shared.txt", "new.txt", "big.bin"])
    write(root, "a/shared.txt", "edited\n")
    ws.undo()
    ws.close()
    other.close()


def cli(*args: str) -> tuple[int, str, str]:
    """Runs the command line in this process (stdout with a byte buffer, as `show` needs)."""
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    out.flush()
    return code, out.buffer.getvalue().decode(), err.getvalue()  # type: ignore[attr-defined]


def shown(root: Path) -> dict[str, dict[str, object]]:
    """`show --json` of every snapshot, and `list --json --all`, by id (the CLI, in-process)."""
    code, out, err = cli("--root", str(root), "--json", "list", "--all")
    assert code == 0, err
    found: dict[str, dict[str, object]] = {}
    for row in json.loads(out):
        code, one, err = cli("--root", str(root), "--json", "show", row["id"])
        assert code == 0, err
        found[row["id"]] = {"show": json.loads(one), "list": row}
    return found


def same_but_trees(
    before: dict[str, dict[str, object]],
    after: dict[str, dict[str, object]],
    *,
    mixed: bool = False,
) -> None:
    """Every snapshot is as it was, but `tree`; equal trees stay equal, different ones different.

    `mixed`: the store is half migrated, so two equal trees may be named in two forms.
    """
    assert sorted(before) == sorted(after)
    pairs: set[tuple[object, object]] = set()
    for snapshot_id, old in before.items():
        new = after[snapshot_id]
        for view in ("show", "list"):
            a, b = dict(old[view]), dict(new[view])  # type: ignore[call-overload]
            pairs.add((a.pop("tree"), b.pop("tree")))
            assert a == b, (snapshot_id, view)
    olds = [a for a, _ in pairs]
    news = [b for _, b in pairs]
    assert mixed or (len(set(olds)) == len(olds) and len(set(news)) == len(news))  # a bijection


def v1_store(root: Path) -> dict[str, dict[str, object]]:
    history(root)
    downgrade(root / STORE)
    assert not any((root / STORE / "snapshots").iterdir())
    return shown(root)


def test_upgrade_migrates_every_snapshot_and_keeps_each_one_exactly(root: Path) -> None:
    before = v1_store(root)
    state = tree_state(root)

    dry = run(root, "--json", "upgrade", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sorted(json.loads(dry.stdout)["migrated"]) == sorted(before)
    assert len(list((root / STORE / "manifests").iterdir())) == len(before)  # nothing written

    done = run(root, "--json", "upgrade")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "migrated": sorted(before), "finished": [], "left": [], "dry_run": False,
    }  # fmt: skip
    assert list((root / STORE / "manifests").iterdir()) == []
    assert not (root / STORE / "summaries").exists() or not any(
        (root / STORE / "summaries").iterdir()
    )
    same_but_trees(before, shown(root))
    verified = run(root, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert tree_state(root) == state  # the workspace is never touched
    again = run(root, "--json", "upgrade")
    assert json.loads(again.stdout)["migrated"] == []


def test_the_first_write_migrates_and_reads_do_not(root: Path) -> None:
    before = v1_store(root)
    assert run(root, "--json", "plan", "latest").returncode == 0  # a read: no migration
    assert len(list((root / STORE / "manifests").iterdir())) == len(before)
    snap = run(root, "--json", "snapshot", "--step", "99")
    assert snap.returncode == 0, snap.stderr
    assert list((root / STORE / "manifests").iterdir()) == []
    after = shown(root)
    new_id = json.loads(snap.stdout)["id"]
    assert after.pop(new_id)["list"]["changed"] is not None  # counted against a migrated one
    same_but_trees(before, after)
    assert run(root, "verify").returncode == 0


def test_undo_planned_on_a_store_not_migrated_yet_picks_what_undo_does(root: Path) -> None:
    write(root, "a.txt", "one")
    ws = Workspace(root)
    ws.snapshot(step=1)
    write(root, "a.txt", "two")
    second = ws.snapshot(step=2)
    ws.close()
    downgrade(root / STORE)
    write(root, "a.txt", "three")
    ws = Workspace(root)
    assert ws.plan_undo().target.id == second.id  # the current tree differs: back to step 2
    write(root, "a.txt", "two")
    assert ws.plan_undo().target.id != second.id  # equal to step 2 now: further back
    assert ws.undo().ok  # migrates first, then undoes to the same target
    assert (root / "a.txt").read_text() == "one"


def test_a_damaged_format_1_manifest_is_left_and_reported(root: Path) -> None:
    before = v1_store(root)
    damaged = sorted(before)[0]
    (root / STORE / "manifests" / f"{damaged}.json").write_bytes(b"{not json")
    done = run(root, "--json", "upgrade")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert damaged not in report["migrated"] and len(report["migrated"]) == len(before) - 1
    assert len(report["left"]) == 1 and damaged in report["left"][0]
    assert os.listdir(root / STORE / "manifests") == [f"{damaged}.json"]
    verified = run(root, "--json", "verify")
    assert verified.returncode == 1
    assert [damaged in p for p in json.loads(verified.stdout)["problems"]] == [True]
    snap = run(root, "snapshot")  # a write still works: the damaged one stays as it was
    assert snap.returncode == 0, snap.stderr


@pytest.mark.parametrize("point", STOP_POINTS)
@pytest.mark.parametrize("count", [1, 3])
def test_kill_9_during_the_migration_leaves_a_store_the_next_command_finishes(
    root: Path, point: str, count: int
) -> None:
    before = v1_store(root)
    killed = run(root, "upgrade", env={STOP_AFTER_ENV: f"{count}:{point}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    records = len(os.listdir(root / STORE / "snapshots"))
    assert records == count - (point != "record")  # it died exactly where it was told
    same_but_trees(before, shown(root), mixed=True)  # readable as it is, half migrated
    done = run(root, "--json", "upgrade")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["finished"]) == (1 if point == "record" else 0)
    assert list((root / STORE / "manifests").iterdir()) == []
    same_but_trees(before, shown(root))
    assert run(root, "verify").returncode == 0
    gc = run(root, "gc")  # sweeps the trees of a pack the killed process never published
    assert gc.returncode == 0, gc.stderr
    assert run(root, "verify").returncode == 0
    same_but_trees(before, shown(root))


KILLS = int(os.environ.get("WORKSNAP_MIGRATE_KILLS", "6"))


@pytest.mark.slow
def test_kill_9_at_random_times_until_the_migration_is_done(root: Path) -> None:
    rng = random.Random(int(os.environ.get("WORKSNAP_MIGRATE_SEED", "13")))
    history(root, steps=30)
    downgrade(root / STORE)
    # The kills are spread over what one whole upgrade takes here (a fixed range once
    # outlasted it: every process finished before its kill).
    start = time.monotonic()
    assert run(root, "upgrade").returncode == 0
    whole = time.monotonic() - start
    downgrade(root / STORE)
    before = shown(root)
    environment = {**os.environ, "PYTHONPATH": SRC}
    kills = 0
    for _ in range(KILLS):
        process = subprocess.Popen(
            [sys.executable, "-m", "worksnap", "--root", str(root), "upgrade"],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.2, 0.9) * whole)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
        same_but_trees(before, shown(root), mixed=True)  # whatever state it was killed in
    done = run(root, "--json", "upgrade")
    assert done.returncode == 0, done.stderr
    assert list((root / STORE / "manifests").iterdir()) == []
    same_but_trees(before, shown(root))
    assert run(root, "verify").returncode == 0
    assert kills > 0


def test_a_worksnap_older_than_format_2_sweeps_nothing_after_the_migration(root: Path) -> None:
    """The migration leaves the format 1 packs where they are; a worksnap older than format
    2, which sees no format 1 manifest after it, took every one for dead, and its gc deleted
    the files of every migrated snapshot (stop 42's review, with the worksnap of `0f3755a^`).
    That gc walks the pack indexes in name order and decodes each as a list of (digest,
    offset, size) before it deletes its pack: the migration's `!older-worksnap-stop.idx`
    comes first and does not decode so, which stops it before any deletion. A gc of today
    keeps it, and reads the store as before."""
    before = v1_store(root)
    done = run(root, "upgrade")
    assert done.returncode == 0, done.stderr
    packs = root / STORE / "packs"
    first = sorted(p.name for p in packs.iterdir() if p.name.endswith(".idx"))[0]
    assert first == "!older-worksnap-stop.idx"
    with pytest.raises(msgspec.DecodeError):  # (ValidationError is one)
        msgspec.msgpack.Decoder(list[tuple[str, int, int]]).decode((packs / first).read_bytes())
    for command in (["gc"], ["verify"]):
        done = run(root, *command)
        assert done.returncode == 0, done.stderr
    assert (packs / first).exists()
    same_but_trees(before, shown(root))


def test_a_manifest_naming_a_path_in_the_store_is_left_not_migrated(root: Path) -> None:
    """Every command refuses a format 1 manifest that names a path inside the store; the
    migration took it (`migrated`, exit 0) and deleted it (stop 42's review). It is left
    as it is and reported, as a damaged one is (docs/format.md)."""
    before = v1_store(root)
    hostile = sorted(before)[0]
    store = DiskStore(str(root / STORE))
    manifest = store.load_manifest(hostile)
    entry = Entry(
        path=f"{STORE}/config.json", type="file", mode=0o644, hash=hash_bytes(b"{}"), size=2
    )
    entries = sorted([*manifest.entries, entry], key=lambda e: e.path)
    dirs = sorted([*manifest.dirs, STORE])
    manifest = msgspec.structs.replace(manifest, entries=entries, dirs=dirs)
    manifest = msgspec.structs.replace(manifest, tree=tree_digest(manifest.entries, manifest.dirs))
    store.save_manifest(manifest, summarize(manifest))
    store.close()
    done = run(root, "--json", "upgrade")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert hostile not in report["migrated"] and len(report["left"]) == 1
    assert "inside the store" in report["left"][0]
    assert os.listdir(root / STORE / "manifests") == [f"{hostile}.json"]
