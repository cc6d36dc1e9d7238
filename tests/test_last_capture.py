"""The last capture taken again without a walk (`lastcapture.py`): never other than a walk.

Each test takes snapshots the way a plain command does (a new `Workspace` each time)
and checks, for each, whether the walk ran and that the snapshot is what a walk finds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
import zstandard

from tests.coarse_fs import coarse_fs, coarse_tmp  # noqa: F401
from tests.test_watch_differential import differences, plain_capture
from worksnap.errors import StoreError
from worksnap.flatbuild import from_flat
from worksnap.lastcapture import SPLIT_AT
from worksnap.manifest import Manifest
from worksnap.treewalk import Flat
from worksnap.workspace import Seams, Workspace

MARGIN = Seams(racy_margin_ns=20_000_000)
SRC = str(Path(__file__).resolve().parent.parent / "src")


def snap(root: Path, store: Path, *, seams: Seams = MARGIN, settle: float = 0.03,
         **options: object) -> tuple[Manifest, bool]:  # fmt: skip
    """A snapshot by a new workspace (as a command takes one); whether it walked the tree."""
    time.sleep(settle)  # every change older than the margin
    with Workspace(root, store=store, seams=seams, **options) as ws:  # type: ignore[arg-type]
        taken = ws.snapshot()
        walked = ws._capture.last.taken == 0
    return taken, walked


def same_as_a_walk(root: Path, tmp: Path, taken: Manifest, **options: object) -> None:
    """The snapshot holds exactly what a walk with no cache finds, in the same trees."""
    plain = plain_capture(root, tmp / f"plain-{time.monotonic_ns()}", **options)  # type: ignore[arg-type]
    assert differences(taken, plain) == []
    assert taken.tree == from_flat(Flat.of(plain), lambda digest, data: None)[0]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel in ("a/one.txt", "a/b/two.txt", "c/three.py", "top.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\n")
    (root / ".gitignore").write_text("*.log\n")
    (root / "a" / "noise.log").write_text("ignored\n")
    return root


def test_an_unchanged_tree_is_not_walked_again(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    first, walked = snap(tree, store)
    assert walked
    again, walked = snap(tree, store)
    assert not walked
    assert again.id != first.id
    assert again.tree == first.tree
    same_as_a_walk(tree, tmp_path, again)


def test_modified_files_are_hashed_and_their_trees_built(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(tree, store)
    snap(tree, store)
    (tree / "a" / "b" / "two.txt").write_text("changed\n")
    (tree / "top.md").write_text("longer than it was\n")
    os.chmod(tree / "c" / "three.py", 0o755)
    taken, walked = snap(tree, store)
    assert not walked
    same_as_a_walk(tree, tmp_path, taken)
    with Workspace(tree, store=store) as ws:
        assert ws.load(taken.id).entries == taken.entries  # its trees are stored
        restored = tmp_path / "restored"
        ws.restore_to(taken.id, restored)
    assert (restored / "a" / "b" / "two.txt").read_text() == "changed\n"
    assert os.stat(restored / "c" / "three.py").st_mode & 0o777 == 0o755


@pytest.mark.parametrize(
    "change",
    [
        "add a file",
        "remove a file",
        "add a directory",
        "rewrite a .gitignore",
        "replace a file by a symlink",
        "grow a file over the cap",
        "shrink a large file under it",
        "rename a directory",
    ],
)
def test_what_a_walk_must_decide_is_walked(tree: Path, tmp_path: Path, change: str) -> None:
    store = tmp_path / "store"
    (tree / "c" / "big.bin").write_bytes(b"x" * 5000)
    snap(tree, store, max_file_bytes=4096)
    snap(tree, store, max_file_bytes=4096)
    if change == "add a file":
        (tree / "a" / "new.txt").write_text("new\n")
    elif change == "remove a file":
        (tree / "a" / "one.txt").unlink()
    elif change == "add a directory":
        (tree / "a" / "b" / "d").mkdir()
    elif change == "rewrite a .gitignore":
        (tree / ".gitignore").write_text("*.py\n")  # same directory, same names
    elif change == "replace a file by a symlink":
        (tree / "top.md").unlink()
        (tree / "top.md").symlink_to("a/one.txt")
    elif change == "grow a file over the cap":
        (tree / "a" / "one.txt").write_bytes(b"y" * 5000)
    elif change == "shrink a large file under it":
        (tree / "c" / "big.bin").write_bytes(b"small")
    else:
        (tree / "a").rename(tree / "z")
    taken, walked = snap(tree, store, max_file_bytes=4096)
    assert walked
    same_as_a_walk(tree, tmp_path, taken, max_file_bytes=4096)
    again, walked = snap(tree, store, max_file_bytes=4096)
    assert not walked  # and the walk kept what the next one takes
    assert again.tree == taken.tree


def test_other_rules_a_cap_or_exclusions_are_walked(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(tree, store)
    snap(tree, store)
    taken, walked = snap(tree, store, exclude=("c",))
    assert walked
    assert "c" in taken.excluded
    taken, walked = snap(tree, store, max_file_bytes=4)
    assert walked
    assert "top.md" in taken.large
    info = tree / "info-exclude"
    info.write_text("*.md\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    taken, walked = snap(tree, store)
    assert walked  # git's rules and index now apply


def test_git_adding_an_ignored_file_is_seen(tree: Path, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    store = tmp_path / "store"
    time.sleep(0.2)  # git's index older than its racy margin
    snap(tree, store)
    _, walked = snap(tree, store)
    assert not walked
    subprocess.run(["git", "-C", str(tree), "add", "-f", "a/noise.log"], check=True)
    time.sleep(0.2)
    taken, walked = snap(tree, store)
    assert walked
    assert "a/noise.log" in {e.path for e in taken.entries}  # git tracks it: captured
    same_as_a_walk(tree, tmp_path, taken)


def test_objects_gone_from_the_store_are_stored_again(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(tree, store)
    first, _ = snap(tree, store)
    for pack in (store / "packs").iterdir():
        pack.unlink()  # damage: every object gone
    taken, walked = snap(tree, store)
    assert walked  # the store's objects are not as kept
    assert taken.tree == first.tree
    with Workspace(tree, store=store) as ws:
        assert ws.load(taken.id).entries == taken.entries
        restored = tmp_path / "restored"
        ws.restore_to(taken.id, restored)
    assert (restored / "a" / "b" / "two.txt").read_text() == "a/b/two.txt\n"


def test_a_damaged_or_foreign_kept_capture_is_not_used(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    snap(tree, store)
    kept = store / "cache" / "capture"
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 0xFF
    kept.write_bytes(bytes(data))
    (tree / "top.md").write_text("changed\n")
    taken, walked = snap(tree, store)
    assert walked
    same_as_a_walk(tree, tmp_path, taken)
    kept.unlink()
    kept.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError):
        snap(tree, store)


def test_a_moved_file_in_the_forked_half_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "big"
    for d in range(64):
        (root / f"d{d:02}").mkdir(parents=True)
        for f in range(SPLIT_AT // 64 + 2):
            (root / f"d{d:02}" / f"f{f}.txt").write_text(f"{d} {f}\n")
    store = tmp_path / "store"
    snap(root, store)
    snap(root, store)
    # Directories alternate between the two processes: touch both halves.
    (root / "d01" / "f3.txt").write_text("odd\n")
    (root / "d02" / "f4.txt").write_text("even\n")
    taken, walked = snap(root, store)
    assert not walked
    same_as_a_walk(root, tmp_path, taken)
    (root / "d05" / "new.txt").write_text("new\n")  # a directory changed, on the child's side
    taken, walked = snap(root, store)
    assert walked
    same_as_a_walk(root, tmp_path, taken)


def test_a_racy_rewrite_on_a_coarse_file_system(coarse_tmp: Path, tmp_path: Path) -> None:  # noqa: F811
    """Same size, same second: a state kept within its tick is hashed again, never trusted."""
    root = coarse_tmp / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("aaaa\n")
    store = tmp_path / "store"
    time.sleep(1.1)  # the directories older than a tick: their listings are kept
    first, _ = snap(root, store, settle=0)
    (root / "sub" / "f.txt").write_text("aaaa\n")  # rewritten now: its state is within a tick
    _, walked = snap(root, store, settle=0)
    assert not walked
    (root / "sub" / "f.txt").write_text("bbbb\n")  # again, likely within the same second
    third, walked = snap(root, store, settle=0)
    assert not walked
    assert {e.path: e.hash for e in third.entries}["sub/f.txt"] != {
        e.path: e.hash for e in first.entries
    }["sub/f.txt"]
    same_as_a_walk(root, tmp_path, third)


def test_names_that_are_not_utf8(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    odd = os.fsencode(root) + b"/d\xe9j\xe0"
    os.makedirs(odd)
    with open(odd + b"/caf\xe9.txt", "wb") as f:
        f.write(b"one\n")
    with open(odd + b"/.gitignore", "wb") as f:
        f.write(b"*.log\n")
    store = tmp_path / "store"
    snap(root, store)
    _, walked = snap(root, store)
    assert not walked
    with open(odd + b"/caf\xe9.txt", "wb") as f:
        f.write(b"two, longer\n")
    taken, walked = snap(root, store)
    assert not walked
    same_as_a_walk(root, tmp_path, taken)
    with open(odd + b"/.gitignore", "wb") as f:
        f.write(b"*.txt\n")  # in place: only the .gitignore's stamp moves
    taken, walked = snap(root, store)
    assert walked
    same_as_a_walk(root, tmp_path, taken)


def test_a_loose_object_removed_is_stored_again(tree: Path, tmp_path: Path) -> None:
    """A review: the store's witness saw packs only; a file of 1 MiB or more is loose."""
    (tree / "big.bin").write_bytes(os.urandom(1 << 20))
    store = tmp_path / "store"
    snap(tree, store)
    snap(tree, store)
    for folder in (store / "objects").iterdir():
        for loose in folder.iterdir():
            loose.unlink()
    taken, walked = snap(tree, store)
    assert walked
    with Workspace(tree, store=store) as ws:
        assert ws.verify() == []
        ws.restore_to(taken.id, tmp_path / "restored")
    assert (tmp_path / "restored" / "big.bin").read_bytes() == (tree / "big.bin").read_bytes()


def test_a_pack_index_damaged_in_place_is_not_trusted(tree: Path, tmp_path: Path) -> None:
    """A review: the witness named the packs, and did not see one damaged where it lies."""
    store = tmp_path / "store"
    snap(tree, store)
    snap(tree, store)
    for index in (store / "packs").glob("*.idx"):
        data = bytearray(index.read_bytes())
        data[len(data) // 2] ^= 0xFF
        index.write_bytes(bytes(data))
    taken, walked = snap(tree, store)
    assert walked  # (and the walk stores again what the damaged index no longer finds)
    with Workspace(tree, store=store) as ws:
        ws.restore_to(taken.id, tmp_path / "restored")
    assert (tmp_path / "restored" / "a" / "b" / "two.txt").read_text() == "a/b/two.txt\n"


def test_a_kept_capture_not_as_keep_writes_it_is_not_used(tree: Path, tmp_path: Path) -> None:
    """A review: plain msgpack passed unchecked, and a group naming no entry raised."""
    store = tmp_path / "store"
    snap(tree, store)
    kept = store / "cache" / "capture"
    raw = zstandard.ZstdDecompressor().decompress(kept.read_bytes())
    for data in (raw, forged(raw)):
        kept.write_bytes(data)
        taken, walked = snap(tree, store)
        assert walked
        same_as_a_walk(tree, tmp_path, taken)


def forged(raw: bytes) -> bytes:
    """A checksummed kept capture whose first group names an entry past the last one."""
    fields = msgspec.msgpack.decode(raw)
    fields[6][0][3][0] = len(fields[7]) + 5
    return zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(
        msgspec.msgpack.encode(fields)
    )


def test_paths_too_long_for_a_look_are_walked(tmp_path: Path) -> None:
    """A review: a path past PATH_MAX failed every look, and the walk kept it again each time."""
    root = tmp_path / "ws"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(17):  # 4,267 bytes below the root: made a level at a time
        os.mkdir("d" * 250, dir_fd=fd)
        fd, above = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
        os.close(above)
    with open(os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("deep\n")
    os.close(fd)
    store = tmp_path / "store"
    snap(root, store)
    assert not (store / "cache" / "capture").exists()
    taken, walked = snap(root, store)
    assert walked
    same_as_a_walk(root, tmp_path, taken)


def many(root: Path) -> Path:
    """A tree of more files than one process looks at alone (`SPLIT_AT`)."""
    for d in range(25):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(SPLIT_AT // 25 + 20):
            (root / f"d{d}" / f"f{f}").write_text(f"{d}:{f}")
    return root


_STORM = """
import os, signal, sys, time
from worksnap.workspace import Seams, Workspace
ws = Workspace(sys.argv[1], store=sys.argv[2], seams=Seams(racy_margin_ns=0))
ws.snapshot(); ws.snapshot(); ws.capture(store_objects=False)
fds = len(os.listdir("/proc/self/fd"))
print("READY", flush=True)
armed, done, stopped = [False], [0], [0]
def handler(signum, frame):
    if armed[0]:
        armed[0] = False
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, handler)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        armed[0] = True
        ws.capture(store_objects=False)
        armed[0] = False
        done[0] += 1
    except KeyboardInterrupt:
        stopped[0] += 1
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    left = os.waitpid(-1, os.WNOHANG)[0]  # a zombie, or a child still there
except ChildProcessError:
    left = 0
print(f"REPORT {os.getpid()} done={done[0]} stopped={stopped[0]} children={left} "
      f"fds={len(os.listdir('/proc/self/fd')) - fds} taken={ws._capture.last.taken}", flush=True)
time.sleep(0.5)
os._exit(0)
"""


def test_stopping_signals_during_a_shared_look(tmp_path: Path) -> None:
    """A review: SIGINT to the group between fork and the child's `try` made the child run
    on as a second copy of the caller (it released the store's lock on its way out), and
    one to the parent there leaked the pipe and left a zombie."""
    root = many(tmp_path / "ws")
    with subprocess.Popen(
        [sys.executable, "-c", _STORM, str(root), str(tmp_path / "store"), "4"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": SRC},
    ) as child:  # fmt: skip
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            time.sleep(random.uniform(0.001, 0.02))
            os.killpg(child.pid, signal.SIGINT)  # the group: the look's child gets them too
        out = child.stdout.read()
        child.wait(timeout=60)
    reports = [line for line in out.splitlines() if line.startswith("REPORT")]
    assert len(reports) == 1, out  # one process: no child ran on
    fields = dict(part.split("=") for part in reports[0].split()[2:])
    # No child left, and no pipe: before, each interrupted look could leak two descriptors
    # (hundreds in a run). One may still leak where an interrupt lands between any open and
    # its `with` elsewhere in a capture (as in any Python code interrupted at random).
    assert fields["children"] == "0" and int(fields["fds"]) <= 2, reports[0]
    assert int(fields["stopped"]) > 0 and int(fields["taken"]) > 0, reports[0]


def test_a_fork_refused_or_sigchld_ignored_still_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review: a fork refused (a pids limit) leaked the pipe and walked every time; with
    SIGCHLD ignored, the child reaped by the kernel made every look fail."""
    root = many(tmp_path / "ws")
    store = tmp_path / "store"
    snap(root, store)
    with Workspace(root, store=store, seams=MARGIN) as ws:
        ws.snapshot()
        fds = len(os.listdir("/proc/self/fd"))

        def refused() -> int:
            raise BlockingIOError(11, "Resource temporarily unavailable")

        with monkeypatch.context() as m:
            m.setattr(os, "fork", refused)
            for _ in range(3):
                ws.capture(store_objects=False)
        assert len(os.listdir("/proc/self/fd")) == fds
        assert ws._capture.last.taken == 4
        previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        try:
            ws.capture(store_objects=False)
        finally:
            signal.signal(signal.SIGCHLD, previous)
        assert ws._capture.last.taken == 5
