"""A hostile or damaged store: nothing outside it touched, nothing hangs, errors are one line.

The store may arrive with a cloned repository (`.worksnap/` checked in by someone
else), so every file and folder in it is input: a symlink is refused, never
followed; a FIFO, socket or device is refused, never opened for a blocking read;
every read is bounded. Each command runs as a real process with a timeout, since
the failures these tests guard against were hangs and runaway reads.
"""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.legacy import downgrade
from worksnap import Workspace
from worksnap.layout import StorePaths

from .conftest import STORE, cli, tree_state, write
from .test_kill import SRC

pytestmark = pytest.mark.slow  # real processes, some of which used to hang


def worksnap(*args: str, timeout: float = 30, memory: int | None = None) -> tuple[int, str, str]:
    """Runs the command line in a child process; a hang or a runaway read fails the test."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    try:
        out = subprocess.run(
            [sys.executable, "-m", "worksnap", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
            preexec_fn=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"worksnap {' '.join(args)} hung (more than {timeout} s)")
    return out.returncode, out.stdout, out.stderr


def one_error_line(err: str, *words: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("worksnap: error: "), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], err


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory outside the workspace and the store that nothing may touch."""
    path = tmp_path / "victim"
    write(path, "important.txt", "precious\n")
    write(path, "ab/cdef", "also precious\n")
    return path


def _paths(root: Path) -> StorePaths:
    return StorePaths(str(root / STORE))


def _snapshot(root: Path) -> str:
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        return ws.snapshot().id


# -- item 6: links inside the store are refused, never followed -------------------


@pytest.mark.parametrize("folder", ["packs", "objects", "snapshots", "manifests", "cache"])
def test_a_shipped_store_with_a_linked_folder_touches_nothing_outside(
    root: Path, victim: Path, folder: str
) -> None:
    """A cloned `.worksnap/<folder> -> ../../victim` with a retention config: nothing outside.

    (Made private, as a store of one's own is: one as git clones it, 0755, is refused
    before anything in it is read, `test_a_store_folder_others_may_enter_is_refused`.)
    """
    write(root, "a.txt", "alpha\n")
    store = root / STORE
    store.mkdir(mode=0o700)
    write(store, "config.json", '{"retention": {"keep_last": 1}}')
    os.symlink(os.path.relpath(victim, store), store / folder)
    before = tree_state(victim, skip=())
    for _ in range(2):  # a snapshot makes (or checks) every folder of the store first
        code, _, err = worksnap("--root", str(root), "snapshot")
        assert code == 2, err
        one_error_line(err, folder, "symlink")
    for command in (["gc"], ["list"], ["verify"]):
        code, _, err = worksnap("--root", str(root), *command)
        if code != 0:  # a command that does not reach the folder does not notice it
            assert code == 2, err
            one_error_line(err, folder, "symlink")
    assert tree_state(victim, skip=()) == before


def test_a_linked_objects_folder_never_makes_gc_delete_outside(root: Path, victim: Path) -> None:
    _snapshot(root)
    store = root / STORE
    os.rename(store / "objects", store / "objects.real")
    os.symlink(victim, store / "objects")
    before = tree_state(victim, skip=())
    code, _, err = worksnap("--root", str(root), "gc", "--keep-last", "1")
    assert code == 2, err
    one_error_line(err, "objects", "symlink")
    assert tree_state(victim, skip=()) == before


LINKED_FILES = {
    "config.json": [["snapshot"], ["gc"]],
    "pins.json": [["gc", "--keep-last", "5"], ["pin", "latest"]],
    "root": [["snapshot"], ["restore", "latest", "--yes"]],
    "journal.json": [["snapshot"], ["restore", "latest", "--yes"], ["recover"]],
    "lock": [["snapshot"], ["restore", "latest", "--yes"], ["gc", "--keep-last", "5"]],
    "lock.gate": [["snapshot"], ["restore", "latest", "--yes"], ["gc", "--keep-last", "5"]],
    "lock.steps": [["run", "--snapshots", "--", "true"]],
    "cache/stat": [["snapshot"], ["restore", "latest", "--yes"], ["plan", "latest"]],
    "cache/stat.log": [["snapshot"], ["plan", "latest"]],
    "sessions/default.json": [["undo"], ["snapshot"]],
}


@pytest.mark.parametrize("name", LINKED_FILES)
def test_a_linked_file_in_the_store_is_refused(root: Path, victim: Path, name: str) -> None:
    _snapshot(root)
    path = root / STORE / name
    path.unlink(missing_ok=True)
    path.parent.mkdir(exist_ok=True)
    os.symlink(victim / "important.txt", path)
    before = tree_state(victim, skip=())
    for command in LINKED_FILES[name]:
        code, _, err = worksnap("--root", str(root), *command)
        assert code == 2, (command, err)
        one_error_line(err, name, "symlink")
    assert tree_state(victim, skip=()) == before


def test_a_linked_daemon_log_is_never_truncated(root: Path, victim: Path) -> None:
    _snapshot(root)
    log = Path(_paths(root).daemon_log)
    log.unlink(missing_ok=True)
    os.symlink(victim / "important.txt", log)
    code, _, err = worksnap("--root", str(root), "daemon", "start")
    try:
        assert code == 2, err
        one_error_line(err, "daemon.log", "symlink")
    finally:
        worksnap("--root", str(root), "daemon", "stop")
    assert (victim / "important.txt").read_text() == "precious\n"


# -- item 8: FIFOs, devices and sockets in the store: refused at once ----------


def _fifo(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("journal.json", ["snapshot"]),
        ("journal.json", ["restore", "latest", "--yes"]),
        ("root", ["snapshot"]),
        ("config.json", ["snapshot"]),
        ("config.json", ["gc"]),
        ("pins.json", ["gc", "--keep-last", "1"]),
        ("cache/stat", ["snapshot"]),
        ("cache/stat.log", ["snapshot"]),
        ("cache/dirs", ["snapshot"]),
        ("packs/0000000000000000.idx", ["snapshot"]),
        ("packs/0000000000000000.idx", ["verify"]),
        ("packs", ["snapshot"]),
        ("sessions/default.json", ["undo"]),
        ("lock.holder", ["gc"]),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_a_fifo_in_the_store_is_refused_without_hanging(
    root: Path, name: str, command: list[str]
) -> None:
    _snapshot(root)
    _fifo(root / STORE / name)
    code, _, err = worksnap("--root", str(root), *command, timeout=20)
    if name == "lock.holder":
        assert code == 0, err  # only a waiting process reads it, and it has nobody to wait for
        return
    assert code == 2, err
    one_error_line(err, name, "FIFO")


@pytest.mark.parametrize("kind", ["record", "format 1 summary"])
def test_a_fifo_record_or_summary_is_reported_and_skipped_by_list(root: Path, kind: str) -> None:
    first = _snapshot(root)
    write(root, "b.txt", "beta\n")
    with Workspace(root) as ws:
        second = ws.snapshot().id
    if kind == "record":
        _fifo(Path(_paths(root).record(second)))
    else:
        downgrade(root / STORE)  # a store an older worksnap left
        _fifo(Path(_paths(root).summary(second)))
    code, out, err = worksnap("--root", str(root), "--json", "list", timeout=20)
    assert code == 0, err
    assert [s["id"] for s in msgspec.json.decode(out)] == [first]
    assert second in err and "FIFO" in err


def test_a_device_in_the_store_is_refused_without_reading_it(root: Path) -> None:
    """A `cache/stat` that is /dev/zero (a device node, or a link to one) cannot eat memory."""
    _snapshot(root)
    stat_cache = Path(_paths(root).stat_cache)
    stat_cache.unlink(missing_ok=True)
    os.mknod(stat_cache, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    code, _, err = worksnap("--root", str(root), "snapshot", timeout=20, memory=1 << 30)
    assert code == 2, err
    one_error_line(err, "cache/stat", "device")
    stat_cache.unlink()
    os.symlink("/dev/zero", stat_cache)
    code, _, err = worksnap("--root", str(root), "snapshot", timeout=20, memory=1 << 30)
    assert code == 2, err
    one_error_line(err, "cache/stat", "symlink")


def test_an_oversized_store_file_is_refused_not_read(root: Path) -> None:
    _snapshot(root)
    with open(_paths(root).config, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of zeros that would be read whole
    code, _, err = worksnap("--root", str(root), "snapshot", timeout=20, memory=1 << 30)
    assert code == 2, err
    one_error_line(err, "config.json", "more than")


# -- item 8: a damaged pack index ------------------------------------------------


def _damage_indexes(root: Path) -> list[Path]:
    packs = Path(_paths(root).packs)
    damaged = sorted(packs.glob("*.idx"))
    for index in damaged:
        index.write_bytes(index.read_bytes()[:7])  # truncated mid-record
    return damaged


def test_a_damaged_pack_index_is_named_and_the_rest_keeps_working(root: Path) -> None:
    write(root, "a.txt", "only in the first snapshot\n")
    write(root, "keep.txt", "in every snapshot\n")
    with Workspace(root) as ws:
        first = ws.snapshot().id
    (damaged,) = _damage_indexes(root)
    write(root, "a.txt", "changed since\n")

    # A snapshot does not need the damaged pack: what is on disk is stored again.
    code, out, err = worksnap("--root", str(root), "snapshot")
    assert code == 0, err
    second = out.strip()
    # verify names the damaged index and what to do, and the snapshot that needs it.
    code, out, err = worksnap("--root", str(root), "verify")
    assert code == 1, err
    assert "Traceback" not in err
    assert f"pack index {damaged}" in out and "move both files out of the store" in out
    # The first snapshot's trees were in that pack too: the snapshot cannot be read.
    assert f"manifest {first}: tree object" in out and f"{damaged} may have held it" in out
    assert f"{second}:" not in out  # everything the new snapshot needs is there
    # A restore that needs it fails before any change, naming the damaged index.
    before = tree_state(root)
    code, _, err = worksnap("--root", str(root), "restore", first, "--yes")
    assert code == 2  # the snapshot itself (its trees) is unreadable
    one_error_line(err, "missing", str(damaged))
    assert tree_state(root) == before
    # A restore that does not need it works; so do list and gc.
    write(root, "a.txt", "changed again\n")
    code, _, err = worksnap("--root", str(root), "restore", second, "--yes")
    assert code == 0, err
    assert (root / "a.txt").read_text() == "changed since\n"
    assert worksnap("--root", str(root), "list")[0] == 0
    code, _, err = worksnap("--root", str(root), "gc", "--keep-last", "1")
    assert code == 0, err
    assert damaged.exists()  # what it indexes is unknown: gc leaves it, verify keeps saying so


def test_an_index_that_decodes_to_nonsense_is_damage_not_an_allocation(root: Path) -> None:
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        first = ws.snapshot().id
    (index,) = Path(_paths(root).packs).glob("*.idx")
    tag, version, records = msgspec.msgpack.decode(index.read_bytes())
    records[0][2] = 1 << 40  # a stored size of 1 TiB: a read would allocate it
    index.write_bytes(msgspec.msgpack.encode([tag, version, records]))
    code, _, err = cli("--root", str(root), "restore", first, "--yes")
    assert code == 2, err  # its trees were in that pack: the snapshot cannot be read
    one_error_line(err, "missing", str(index))
    write(root, "a.txt", "changed\n")
    code, _, err = worksnap("--root", str(root), "restore", first, "--yes", memory=1 << 30)
    assert code == 2
    one_error_line(err, "missing", str(index))
    assert (root / "a.txt").read_text() == "changed\n"


# -- item 7: the store path itself ------------------------------------------------


def test_a_store_reached_through_a_link_is_never_captured_nor_restored(
    root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "store"
    write(root, "a.txt", "alpha\n")
    code, before_link, err = worksnap("--root", str(root), "--store", str(elsewhere), "snapshot")
    assert code == 0, err
    os.symlink(elsewhere, root / STORE)  # from now on the default store is reached via a link
    write(root, "b.txt", "beta\n")
    code, out, err = worksnap("--root", str(root), "snapshot")
    assert code == 0, err
    code, shown, err = worksnap("--root", str(root), "--json", "show", out.strip())
    assert code == 0, err
    manifest = msgspec.json.decode(shown)
    assert STORE not in [e["path"] for e in manifest["entries"]]
    assert STORE in manifest["excluded"]
    # Restoring the snapshot taken before the link existed leaves the link alone.
    code, out, err = worksnap("--root", str(root), "--json", "plan", before_link.strip())
    assert code == 0, err
    assert [c["path"] for c in msgspec.json.decode(out)["changes"]] == ["b.txt"]
    code, _, err = worksnap("--root", str(root), "restore", before_link.strip(), "--yes")
    assert code == 0, err
    assert os.readlink(root / STORE) == str(elsewhere)
    code, _, err = worksnap("--root", str(root), "undo")
    assert code == 0, err
    assert (root / "b.txt").read_text() == "beta\n"


@pytest.mark.parametrize("how", ["the store is a link into the root", "a link on the way"])
def test_a_store_that_a_restore_could_move_is_refused(root: Path, how: str) -> None:
    write(root, "a.txt", "alpha\n")
    (root / "data").mkdir()
    if how == "the store is a link into the root":
        os.symlink("data/store", root / STORE)
        args = ["--root", str(root)]
        named = STORE
    else:
        os.symlink("data", root / "link")
        args = ["--root", str(root), "--store", str(root / "link" / "store")]
        named = "link"
    before = tree_state(root, skip=())
    code, _, err = worksnap(*args, "snapshot")
    assert code == 2, err
    one_error_line(err, named, "a restore could change")
    assert tree_state(root, skip=()) == before


# -- a store folder that is not one's own ------------------------------------------

OTHER_UID = 54321
"""Another user: a number only, no account needed."""


def _nothing_written(folder: Path, before: set[str]) -> None:
    assert {str(p.relative_to(folder)) for p in folder.rglob("*")} == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to another user")
@pytest.mark.parametrize("how", ["link", "gitdir"])
def test_a_store_folder_of_another_user_is_refused(root: Path, tmp_path: Path, how: str) -> None:
    """A review pointed a project's store at another user's folder: a `.worksnap` link
    (which git commits, so it comes with a clone) or a `.git` file naming another git
    directory. The folder was used as it was, the store's files made 0644 in it, and that
    user read a 0600 file's bytes from the packs. It is refused before anything is written
    there, as git refuses a repository of another owner."""
    write(root, "creds.txt", "token=SECRET\n")
    (root / "creds.txt").chmod(0o600)
    theirs = tmp_path / "theirs"
    if how == "link":
        (theirs / "snapshots").mkdir(parents=True)
        (root / STORE).symlink_to(theirs)
    else:
        (theirs / "worksnap" / "snapshots").mkdir(parents=True)
        (theirs / "HEAD").write_text("ref: refs/heads/main\n")
        (theirs / "objects").mkdir()
        (theirs / "refs").mkdir()
        (root / ".git").write_text(f"gitdir: {theirs}\n")
    for path in [theirs, *theirs.rglob("*")]:
        os.chown(path, OTHER_UID, OTHER_UID)
        path.chmod(0o777)
    before = {str(p.relative_to(theirs)) for p in theirs.rglob("*")}
    code, _, err = worksnap("--root", str(root), "snapshot")
    assert code == 2, err
    one_error_line(err, "belongs to another user (uid 54321)")
    _nothing_written(theirs, before)


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o701])
@pytest.mark.parametrize("folder", ["empty", "store", "config"])
def test_a_store_folder_others_may_enter_is_made_private(
    root: Path, tmp_path: Path, mode: int, folder: str
) -> None:
    """The same review's `.worksnap` link to an empty folder of one's own that others may
    enter: packs made there were 0644, so any user read a private file's bytes. A folder
    of one's own that holds nothing but what a store does (empty, made by hand with a
    `config.json`, or a store made before stop 44, 0755) is made its maker's alone, as
    worksnap makes a store's folder, before anything is written there."""
    write(root, "creds.txt", "token=SECRET\n")
    (root / "creds.txt").chmod(0o600)
    made = tmp_path / "made"
    made.mkdir()
    if folder == "store":
        with Workspace(root, store=made) as ws:
            ws.snapshot()
    elif folder == "config":
        write(made, "config.json", '{"retention": {"keep_last": 5}}')
    made.chmod(mode)
    (root / STORE).symlink_to(made)
    code, _, err = worksnap("--root", str(root), "snapshot")
    assert code == 0, err
    assert stat.S_IMODE(made.stat().st_mode) == mode & 0o700
    assert (made / "snapshots").is_dir()


def test_a_folder_of_other_things_is_never_made_a_store(root: Path, tmp_path: Path) -> None:
    """A `.worksnap` link to a folder that holds other things (a home folder, 0755) is
    refused, nothing written there, its mode left as it is."""
    write(root, "creds.txt", "token=SECRET\n")
    home = tmp_path / "home"
    write(home, ".profile", "export A=1\n")
    home.chmod(0o755)
    (root / STORE).symlink_to(home)
    code, _, err = worksnap("--root", str(root), "snapshot")
    assert code == 2, err
    one_error_line(err, "refusing to make a store in", "it holds .profile")
    _nothing_written(home, {".profile"})
    assert stat.S_IMODE(home.stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_store_of_another_user_that_cannot_be_entered_names_its_owner(root: Path) -> None:
    """A review ran worksnap where another user's store (0700) could not be entered: it
    said "config ... is not valid (Permission denied)", not whose store it is."""
    write(root, "a.txt", "alpha\n")
    with Workspace(root) as ws:
        ws.snapshot()
    store = root / STORE
    for path in [store, *store.rglob("*")]:
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--",
         sys.executable, "-m", "worksnap", "--root", str(root), "snapshot"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr, f"belongs to another user (uid {OTHER_UID})")


TEAM_GID = 54322
"""A group the test process is not in."""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a folder to a group")
def test_a_store_in_a_setgid_folder_of_a_group_one_is_not_in_is_one_s_own(
    root: Path, tmp_path: Path
) -> None:
    """A review made a store in a setgid folder (2777) of a group its user was not in: the
    store was made 2755 for that group, its packs 0644, and anyone read a private file's
    bytes. Only a setgid folder of one of the user's groups is a group's store; this one
    is its maker's alone."""
    write(root, "creds.txt", "token=SECRET\n")
    (root / "creds.txt").chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 0, TEAM_GID)
    shared.chmod(0o2777)
    store = shared / "store"
    code, _, err = worksnap("--root", str(root), "--store", str(store), "snapshot")
    assert code == 0, err
    assert stat.S_IMODE(store.stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root")
def test_a_store_others_may_enter_on_a_read_only_mount_is_read_as_it_is(
    root: Path, tmp_path: Path
) -> None:
    """A review mounted a 0755 store read-only: every command, `list` too, failed at the
    chmod that makes such a store private, naming another file ("journal.json: Read-only
    file system"). A folder that cannot be made private is used as it is: nothing new can
    be written there anyway."""
    write(root, "a.txt", "alpha\n")
    store = tmp_path / "store"
    with Workspace(root, store=store) as ws:
        ws.snapshot()
    store.chmod(0o755)
    subprocess.run(["mount", "--bind", str(store), str(store)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(store)], check=True)
        code, out, err = worksnap("--root", str(root), "--store", str(store), "list")
        assert code == 0 and "manual" in out, err
        assert stat.S_IMODE(store.stat().st_mode) == 0o755
    finally:
        subprocess.run(["umount", str(store)], check=True)
