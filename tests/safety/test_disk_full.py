"""A full disk: a failed snapshot removes what it wrote; leftovers of dead writers are swept.

The store is a real tmpfs of a few MiB (mounted for the test: root only), filled up
by a snapshot of more than it can hold. Nothing half-written may stay to keep the
disk full; a pack a killed snapshot left is removed by the next snapshot, and a
pack another snapshot is still writing is not.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worksnap import Workspace
from worksnap.diskstore import DiskStore
from worksnap.fsio import write_all
from worksnap.hash import hash_bytes
from worksnap.layout import StorePaths

from .conftest import tree_state, write
from .test_kill import SRC

pytestmark = pytest.mark.slow  # mounts, real processes


def mounted_tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's spelling: "4m") at `tmp_path/small`, unmounted after."""
    if os.geteuid() != 0:
        pytest.fail("a tmpfs of a given size needs root (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[Path]:
    """A store directory on a tmpfs of 4 MiB, unmounted afterwards."""
    for mount in mounted_tmpfs(tmp_path, "4m"):
        yield mount / "store"


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def leftovers(store: Path) -> list[str]:
    """Packs without an index and temp files: what a writer that failed or died leaves."""
    paths = StorePaths(str(store))
    found = []
    for folder in (paths.packs, paths.manifests, paths.summaries, paths.dir):
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            pack, kind = paths.pack_file(name)
            unpublished = kind == "pack" and not os.path.exists(paths.pack_index(pack))
            if paths.is_temp(name) or (folder == paths.packs and unpublished):
                found.append(os.path.join(folder, name))
    for directory, _, names in os.walk(paths.objects):
        found += [os.path.join(directory, n) for n in names if paths.is_temp(n)]
    return found


def worksnap(*args: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "worksnap", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
        check=False,
        timeout=120,
    )
    return out.returncode, out.stderr


@pytest.mark.parametrize("size", ["small files (a pack)", "one large file (loose)"])
def test_a_snapshot_that_fills_the_disk_removes_what_it_wrote(
    root: Path, small_store: Path, size: str
) -> None:
    write(root, "first.txt", "fits\n")
    code, err = worksnap("--root", str(root), "--store", str(small_store), "snapshot")
    assert code == 0, err
    before = used(small_store.parent)
    if size == "small files (a pack)":
        for i in range(12):
            write(root, f"data/{i:02}.bin", os.urandom(500_000))  # 6 MB > 4 MiB
    else:
        write(root, "big.bin", os.urandom(6 << 20))
    args = (
        "--root",
        str(root),
        "--store",
        str(small_store),
        "snapshot",
        "--max-file-bytes",
        str(8 << 20),
    )
    code, err = worksnap(*args)
    assert code == 1, err
    assert "No space left on device" in err and "Traceback" not in err
    assert leftovers(small_store) == []
    assert used(small_store.parent) <= before + (64 << 10)  # a few inodes' worth at most
    # Once there is room again, the same snapshot succeeds and restores.
    for path in (root / "data").glob("*.bin") if size != "one large file (loose)" else []:
        if path.name > "03.bin":
            path.unlink()
    if size == "one large file (loose)":
        write(root, "big.bin", os.urandom(1 << 20))
    state = tree_state(root)
    code, err = worksnap(*args)
    assert code == 0, err
    code, err = worksnap("--root", str(root), "--store", str(small_store), "verify")
    assert code == 0, err
    assert tree_state(root) == state


KILLED_WRITER = r"""
import os, signal, sys
from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes
store = DiskStore(sys.argv[1])
store.create()
for i in range(3):
    blob = os.urandom(600_000)
    store.add(hash_bytes(blob), blob)  # the pack is written as it fills, indexed at flush
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_next_snapshot_sweeps_the_pack_of_a_killed_writer(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    write(root, "a.txt", "alpha\n")
    with Workspace(root, store=store) as ws:
        ws.snapshot()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(store)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL and killed.stdout == "written\n", killed.stderr
    (orphan,) = leftovers(store)
    assert os.path.getsize(orphan) > 1 << 20
    # A pack this process is writing right now must survive the same sweep.
    live = DiskStore(str(store))
    blobs = [os.urandom(700_000) for _ in range(2)]
    for blob in blobs:
        live.add(hash_bytes(blob), blob)
    (writing,) = [p for p in leftovers(store) if p != orphan]
    code, err = worksnap("--root", str(root), "--store", str(store), "snapshot")
    assert code == 0, err
    assert leftovers(store) == [writing]
    live.flush()
    live.close()
    assert leftovers(store) == []
    fresh = DiskStore(str(store))
    assert all(fresh.read(hash_bytes(blob)) == blob for blob in blobs)
    code, err = worksnap("--root", str(root), "--store", str(store), "verify")
    assert code == 0, err


def test_a_restore_that_fills_the_disk_rolls_back(tmp_path: Path) -> None:
    """The workspace and its store on a full tmpfs: the restore fails and rolls back cleanly.

    The rollback must not need room itself: nothing it captures is stored, and a cache
    that cannot be saved is simply not saved.
    """
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        root = mount / "ws"
        write(root, "big.bin", os.urandom(1 << 20))
        write(root, "notes.txt", "notes\n")
        code, err = worksnap("--root", str(root), "snapshot")
        assert code == 0, err
        with Workspace(root) as ws:
            target = ws.resolve("latest")
        (root / "big.bin").unlink()
        write(root, "notes.txt", "edited notes\n")
        with open(root / "filler", "wb") as f:  # the user's own data fills the disk
            while used(mount) < (4 << 20) - (96 << 10):
                f.write(os.urandom(16 << 10))
        before = tree_state(root)
        code, err = worksnap("--root", str(root), "--json", "restore", target, "--yes")
        assert code == 1, err
        assert tree_state(root) == before
        assert not (root / ".worksnap" / "journal.json").exists()
        (root / "filler").unlink()
        code, err = worksnap("--root", str(root), "restore", target, "--yes")
        assert code == 0, err
        assert (root / "notes.txt").read_text() == "notes\n"
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_rollback_on_a_full_disk_shrinks_files_before_it_grows_one(tmp_path: Path) -> None:
    """A restore shrinks `a` and grows `b`, then finds no room for `c`: its rollback must
    grow `a` back and shrink `b` back. In path order `a` needs the room `b` holds, and the
    rollback failed as well (the journal left for `recover`); writes that free room go
    first, so it fits.
    """
    mib = 1 << 20
    for mount in mounted_tmpfs(tmp_path, "8m"):
        root = mount / "ws"
        write(root, "a.bin", b"a")
        write(root, "b.bin", os.urandom(mib))
        write(root, "c.bin", os.urandom(mib))
        code, err = worksnap("--root", str(root), "snapshot")  # the target
        assert code == 0, err
        with Workspace(root) as ws:
            target = ws.resolve("latest")
        write(root, "a.bin", os.urandom(mib))
        write(root, "b.bin", b"b")
        write(root, "c.bin", b"c")
        code, err = worksnap("--root", str(root), "snapshot")  # so the pre-restore one is small
        assert code == 0, err
        with open(root / "filler", "wb") as f:  # the user's own data: 512 KiB stay free
            while used(mount) < (8 << 20) - (512 << 10):
                f.write(os.urandom(16 << 10))
        before = tree_state(root)
        code, err = worksnap("--root", str(root), "--json", "restore", target, "--yes")
        assert code == 1, err
        assert "so did the rollback" not in err
        assert tree_state(root) == before
        assert not (root / ".worksnap" / "journal.json").exists()


def test_a_write_that_fills_the_disk_leaves_its_buffer_free_to_change(small_store: Path) -> None:
    """A pack writer's buffer is a bytearray: `write_all` must not keep it exported after a
    failure. The OSError's traceback keeps `write_all`'s frame, and its views with it;
    resizing the buffer (the writer's next append or its clear) then raised BufferError
    instead of going on or reporting the full disk."""
    small_store.mkdir()
    pending = bytearray(os.urandom(6 * 1024 * 1024))  # more than the 4 MiB tmpfs holds
    fd = os.open(small_store / "pack", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left") as failed:
            write_all(fd, pending)
    finally:
        os.close(fd)
    assert failed.value.errno == errno.ENOSPC
    assert failed.value.__traceback__ is not None  # the frames are still held here
    pending.clear()
    pending += b"next"
    assert pending == b"next"
