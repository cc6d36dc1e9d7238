"""`restore REF --to DIR`: an existing empty DIR is filled in place, its preview
(`--dry-run`) is the real run's plan and refuses what the real run refuses, and what
it cannot use is said in plain words.

The commands run for real on real directories; a process that drops its privileges
(`setpriv`) stands for an unprivileged user where the suite runs as root.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import disk_fills_after, tree_state, write
from tests.conftest import run_cli as run
from worksnap import Workspace
from worksnap.progress import Progress

SRC = str(Path(__file__).resolve().parent.parent / "src")


def snapshotted(root: Path) -> dict[bytes, object]:
    """A workspace with files, a directory, an empty directory and a link; snapshot taken."""
    write(root, "a.txt", "a\n")
    write(root, "d/x.txt", "x\n")
    write(root, "d/run.sh", "#!/bin/sh\n", mode=0o755)
    (root / "empty").mkdir()
    os.symlink("a.txt", root / "link")
    Workspace(root).snapshot()
    return tree_state(root)


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".worksnap-extract")]


# -- 1. an existing empty directory is filled, never replaced -------------------


def test_an_empty_directory_is_filled_in_place_keeping_its_inode_and_mode(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = snapshotted(root)
    out_dir = tmp_path / "private"
    out_dir.mkdir(mode=0o700)
    os.chmod(out_dir, 0o700)
    before = os.stat(out_dir)
    held = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)  # a shell sitting in it
    try:
        code, out, err = run(capsys, root, "restore", "latest", "--yes", "--to", str(out_dir))
        assert code == 0, err
        assert out.startswith("wrote 6 paths of snapshot ")
        after = os.stat(out_dir)
        assert (after.st_ino, stat.S_IMODE(after.st_mode)) == (before.st_ino, 0o700)
        assert tree_state(out_dir) == state
        # The directory the shell holds is the one written, not a deleted one.
        assert sorted(os.listdir(held)) == ["a.txt", "d", "empty", "link"]
    finally:
        os.close(held)
    assert leftovers(tmp_path) == [] and leftovers(out_dir) == []


def test_dot_from_inside_an_empty_directory_fills_it(root: Path, tmp_path: Path) -> None:
    state = snapshotted(root)
    here = tmp_path / "here"
    here.mkdir()
    inode = os.stat(here).st_ino
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    env.update(PYTHONPATH=SRC, WORKSNAP_NO_DAEMON="1")
    # A real process whose working directory is the destination, as a shell's would be.
    done = subprocess.run(
        [sys.executable, "-P", "-m", "worksnap", "--root", str(root), "restore", "latest",
         "--yes", "--to", "."],
        cwd=here, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tree_state(here) == state and os.stat(here).st_ino == inode


def test_a_name_made_in_the_directory_meanwhile_is_never_replaced(
    root: Path, tmp_path: Path
) -> None:
    """A file a person makes in DIR while the files are written stops the moves at its
    name (the kernel checks and renames in one step, `renameat2` with `RENAME_NOREPLACE`):
    it keeps its bytes, and what was moved before it is taken back."""
    snapshotted(root)  # top level, in the order moved: a.txt, d, empty, link
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    inode = os.stat(out_dir).st_ino

    def person(report: Progress) -> None:
        if report.what == "write" and report.done == report.total:
            (out_dir / "empty").write_bytes(b"mine\n")

    result = Workspace(root, progress=person).restore_to("latest", out_dir)
    assert not result.ok
    assert "empty" in (result.error or "") and "appeared meanwhile" in (result.error or "")
    assert result.restored == []
    assert os.listdir(out_dir) == ["empty"] and os.stat(out_dir).st_ino == inode
    assert (out_dir / "empty").read_bytes() == b"mine\n"


def test_a_failure_while_writing_leaves_the_empty_directory_empty(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(20):
        write(root, f"d/f{i}.txt", f"file {i}")
    Workspace(root).snapshot()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    disk_fills_after(monkeypatch, 7)
    result = Workspace(root).restore_to("latest", out_dir)
    assert not result.ok and "No space left on device" in (result.error or "")
    assert os.listdir(out_dir) == []


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounts need root")
def test_an_empty_mount_point_is_filled(root: Path, tmp_path: Path) -> None:
    state = snapshotted(root)
    point = tmp_path / "mnt"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        result = Workspace(root).restore_to("latest", point)
        assert result.ok, result.error
        assert tree_state(point) == state
    finally:
        subprocess.run(["umount", str(point)], check=True)


# -- 2. --dry-run is the real run's preview --------------------------------------


def test_dry_run_json_is_the_plan_document_with_to(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshotted(root)
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, root, "--json", "restore", "latest", "--to", str(out_dir),
                         "--dry-run")  # fmt: skip
    assert code == 0, err
    preview = json.loads(out)
    target = Workspace(root).resolve("latest")
    assert preview == {
        "target": target,
        "changes": [{"op": "D", "path": p}
                    for p in ["a.txt", "d", "d/run.sh", "d/x.txt", "empty", "link"]],
        "unprotected": [],
        "to": str(out_dir),
    }  # fmt: skip
    assert not out_dir.exists()
    code, out, _ = run(capsys, root, "restore", "latest", "--to", str(out_dir), "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "  a.txt", "  d/", "  d/run.sh", "  d/x.txt", "  empty/", "  link",
        f"would write 6 paths of snapshot {target} into {out_dir}",
    ]  # fmt: skip
    assert not out_dir.exists()


def test_dry_run_refuses_what_the_real_run_refuses(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshotted(root)
    full = tmp_path / "full"
    write(full, "keep", "keep")
    ro_link = tmp_path / "to-root"
    os.symlink(root, ro_link)
    cases = [
        ["--to", str(root)],
        ["--to", str(root / "inside")],
        ["--to", str(full)],
        ["--to", str(root / ".worksnap" / "x")],
        ["--to", str(tmp_path / "no" / "parent")],
        ["--to", str(ro_link)],
        ["no/such/path", "--to", str(tmp_path / "typo")],
    ]
    for case in cases:
        real = run(capsys, root, "restore", "latest", "--yes", *case)
        preview = run(capsys, root, "restore", "latest", "--dry-run", *case)
        assert real[0] == 2 and real[1] == "", (case, real)
        assert preview == real, case
        assert run(capsys, root, "--json", "restore", "latest", "--dry-run", *case) == real
    assert not (tmp_path / "typo").exists()
    assert os.listdir(full) == ["keep"]


def test_dry_run_honours_the_path_selection(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshotted(root)
    preview = json.loads(run(capsys, root, "--json", "restore", "latest", "d/x.txt", "--to",
                             str(tmp_path / "sel"), "--dry-run")[1])  # fmt: skip
    result = json.loads(run(capsys, root, "--json", "restore", "latest", "d/x.txt", "--to",
                            str(tmp_path / "sel"))[1])  # fmt: skip
    assert [c["path"] for c in preview["changes"]] == ["d", "d/x.txt"]
    assert sorted(result["restored"]) == ["d", "d/x.txt"]


def test_a_path_the_snapshot_does_not_hold_is_refused_as_in_place(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshotted(root)
    in_place = run(capsys, root, "restore", "latest", "no/such/path", "--yes")
    typo = tmp_path / "typo"
    to = run(capsys, root, "restore", "latest", "no/such/path", "--yes", "--to", str(typo))
    assert in_place[0] == 2 and "'no/such/path' is not in snapshot" in in_place[2]
    assert to == in_place
    assert not typo.exists()
    # A path only the workspace has: nothing of it to write.
    write(root, "new.txt", "new")
    code, _, err = run(capsys, root, "restore", "latest", "new.txt", "--to", str(typo))
    assert code == 2 and "'new.txt' is not in snapshot" in err and not typo.exists()


# -- 4. what cannot be used is said plainly ----------------------------------------


def test_a_symlink_to_an_empty_directory_is_followed(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = snapshotted(root)
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    os.symlink(target, link)
    code, out, err = run(capsys, root, "restore", "latest", "--yes", "--to", str(link))
    assert code == 0, err
    assert out.endswith(f"into {link}\n")
    assert os.path.islink(link) and tree_state(target) == state
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "nowhere", dangling)
    code, out, err = run(capsys, root, "restore", "latest", "--yes", "--to", str(dangling))
    assert (code, out) == (2, "")
    assert err == (
        f"worksnap: error: cannot restore into {dangling}: it is a symbolic link to "
        f"{tmp_path / 'nowhere'}, which is not a directory\n"
    )
    assert not (tmp_path / "nowhere").exists()


def _unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs worksnap as a process that permissions bind (root without the overrides)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    env.update(PYTHONPATH=SRC, WORKSNAP_NO_DAEMON="1")
    command = [sys.executable, "-P", "-m", "worksnap", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root, and no setpriv to drop the permission overrides")
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
                   *command]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                          timeout=120)  # fmt: skip


def test_a_destination_it_may_not_write_is_named_not_a_temp_path(
    root: Path, tmp_path: Path
) -> None:
    snapshotted(root)
    read_only = tmp_path / "ro"
    read_only.mkdir()
    (read_only / "empty").mkdir()
    closed = tmp_path / "closed"  # (not searchable: a review's exit 1, "error: PATH: ...")
    closed.mkdir(mode=0o000)
    locked = tmp_path / "locked"  # (there, but not readable: the same, a second review)
    locked.mkdir(mode=0o000)
    os.chmod(read_only / "empty", 0o555)
    os.chmod(read_only, 0o555)
    try:
        for dest in (read_only / "out", read_only / "empty", closed / "d", locked):
            for option in ("--yes", "--dry-run"):  # the preview refuses it alike
                done = _unprivileged("--root", str(root), "restore", "latest", option, "--to",
                                     str(dest))  # fmt: skip
                assert (done.returncode, done.stdout) == (2, ""), option
                assert done.stderr == (
                    f"worksnap: error: cannot restore into {dest}: Permission denied\n"
                ), option
        assert sorted(os.listdir(read_only)) == ["empty"] and os.listdir(read_only / "empty") == []
    finally:
        os.chmod(read_only / "empty", 0o755)
        os.chmod(read_only, 0o755)
        closed.chmod(0o755)
        locked.chmod(0o755)


# -- a run killed with SIGKILL leaves its temp directory: named, never removed ------


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


def test_a_killed_runs_temp_directory_is_named_and_never_removed(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whose it is cannot be known for sure (a run in another pid namespace, a user's
    directory of that name): a run never removes one; the one in DIR is named."""
    state = snapshotted(root)
    out_dir = tmp_path / "out"
    killed = out_dir / f".worksnap-extract-{dead_pid()}-k1ll3d"
    write(killed, "d/x.txt", "half written\n")
    write(out_dir, "a.txt", "a\n")  # moved in before the kill
    for dry_run in (["--dry-run"], []):
        code, _, err = run(capsys, root, "restore", "latest", "--to", str(out_dir), *dry_run)
        assert code == 2
        assert f"it holds {killed.name}, the temp directory of a `restore --to`" in err
    assert (killed / "d/x.txt").read_text() == "half written\n"
    beside = tmp_path / "beside"
    other = beside / f".worksnap-extract-{dead_pid()}-another"
    write(other, "f", "not this run's\n")
    code, _, err = run(capsys, root, "restore", "latest", "--to", str(beside / "new"))
    assert code == 0, err
    assert tree_state(beside / "new") == state
    assert (other / "f").read_text() == "not this run's\n"
    assert leftovers(beside) == [other.name]
