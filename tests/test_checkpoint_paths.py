"""What `capture` records for a path that is not a plain file below plain directories.

A checkpoint holds the before-image of each file a turn is about to change. A write to a
path goes where its symlinks lead, a path the ignore rules leave out is never restored,
and a turn may turn a file into a directory or back: each is recorded so that a rewind
sets back what the turn changed, or the capture says what it could not keep.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path

import pytest

from tests.compat.gitrun import GIT, clean_git_env, git, init_repo
from tests.conftest import run_cli, write
from worksnap import InputError, Workspace
from worksnap.plan import Plan


def test_a_path_through_a_symlinked_directory_records_the_file_it_reaches(root: Path) -> None:
    write(root, "d/e", "original")
    os.symlink("d", root / "L")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before(["L/e", "L/new"])
    assert [e.path for e in checkpoint.entries] == ["d/e"]
    assert checkpoint.absent == ["d/new"]
    write(root, "L/e", "edited by the agent")  # the tool writes the path it was given
    write(root, "L/new", "made by the agent")
    assert ws.rewind(1).ok
    assert (root / "d/e").read_text() == "original"
    assert not (root / "d/new").exists()
    assert os.readlink(root / "L") == "d"


def test_a_symlink_is_recorded_with_the_file_it_leads_to(root: Path) -> None:
    write(root, "d/e", "original")
    os.symlink("d/e", root / "link")
    os.symlink("nowhere-yet", root / "dangling")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before(["link", "dangling"])
    assert [e.path for e in checkpoint.entries] == ["d/e", "dangling", "link"]
    assert checkpoint.absent == ["nowhere-yet"]
    write(root, "link", "written through the link")
    write(root, "dangling", "made through the link")
    assert ws.rewind(1).ok
    assert (root / "d/e").read_text() == "original"
    assert os.readlink(root / "link") == "d/e"
    assert not (root / "nowhere-yet").exists()
    assert os.readlink(root / "dangling") == "nowhere-yet"


def test_a_path_a_symlink_leads_outside_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    write(tmp_path / "outside", "e", "not ours")
    os.symlink(tmp_path / "outside", root / "L")
    os.symlink(tmp_path / "outside" / "e", root / "link")
    ws = Workspace(root)
    ws.begin(step=1)
    with pytest.raises(InputError, match=r"'L/e' is reached through a symbolic link .* outside"):
        ws.capture_before(["L/e"])
    # A write through the link changes a file outside, which no rewind can set back.
    with pytest.raises(InputError, match=r"'link' is a symbolic link to .*, outside .* rewound"):
        ws.capture_before(["link"])
    os.symlink(tmp_path, root / "to_a_directory")  # a write there fails: the link alone
    checkpoint = ws.capture_before(["to_a_directory"])
    assert [e.path for e in checkpoint.entries] == ["to_a_directory"]


def test_a_symlink_leading_into_git_records_only_itself(root: Path) -> None:
    write(root, ".git/config", "[core]\n")
    os.symlink(".git/config", root / "link")
    ws = Workspace(root)
    ws.begin(step=1)
    assert [e.path for e in ws.capture_before(["link"]).entries] == ["link"]


def test_an_ignored_path_is_named_as_ignored_and_not_captured(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, ".gitignore", ".env\nbuild/\n")
    write(root, ".env", "SECRET=1")
    write(root, "a", "a")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before([".env", "a", "build/out.o"])
    assert [e.path for e in checkpoint.entries] == ["a"]
    assert checkpoint.ignored == [".env", "build/out.o"]
    assert checkpoint.absent == []
    code, out, err = run_cli(capsys, root, "--json", "capture", ".env")
    assert code == 0
    assert '"ignored": [".env", "build/out.o"]' in out
    assert "'.env' is ignored" in err
    assert "a rewind leaves it as it is" in err


def test_a_file_git_tracks_is_captured_whatever_the_rules_say(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if GIT is None:
        pytest.skip("git is not installed")
    clean_git_env(monkeypatch, tmp_path / "home")
    init_repo(root)
    write(root, ".gitignore", "*.log\n")
    write(root, "fixture.log", "tracked")
    git(root, "add", "-f", "fixture.log")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before(["fixture.log", "debug.log"])
    assert [e.path for e in checkpoint.entries] == ["fixture.log"]
    assert checkpoint.ignored == ["debug.log"]


def turn_makes_x_a_file(root: Path) -> Workspace:
    """A turn that captured x/y, then made the directory x a file: its workspace."""
    write(root, "x/y", "before")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["x/y"])
    (root / "x/y").unlink()
    (root / "x").rmdir()
    write(root, "x", "the turn made x a file")
    return ws


def test_a_directory_made_a_file_within_a_turn_keeps_the_turns_first_state(root: Path) -> None:
    ws = turn_makes_x_a_file(root)
    checkpoint = ws.capture_before(["x"])  # x was a directory when the turn began
    assert [e.path for e in checkpoint.entries] == ["x/y"]
    assert checkpoint.absent == []
    write(root, "x", "edited again")
    assert ws.rewind(1).ok
    assert (root / "x/y").read_text() == "before"


def test_a_file_made_a_directory_within_a_turn_keeps_the_turns_first_state(root: Path) -> None:
    write(root, "x", "a file")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["x"])
    (root / "x").unlink()
    write(root, "x/y", "the turn made x a directory")
    checkpoint = ws.capture_before(["x/y"])  # nothing could be below the file x
    assert [e.path for e in checkpoint.entries] == ["x"]
    assert checkpoint.absent == ["x/y"]


def test_a_file_in_the_way_of_a_captured_files_directory_goes_and_is_kept(root: Path) -> None:
    ws = turn_makes_x_a_file(root)
    result = ws.rewind(1)
    assert result.ok, result.error
    assert (root / "x/y").read_text() == "before"
    assert result.pre_restore is not None
    kept = ws.load(result.pre_restore)
    assert [(e.path, e.type) for e in kept.entries] == [("x", "file")]


def test_the_directories_a_turn_made_go_with_the_files_it_made_there(root: Path) -> None:
    write(root, "keep/old", "there before")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before(["new/deep/f", "keep/made/g"])
    assert checkpoint.absent == ["keep/made", "keep/made/g", "new", "new/deep/f"]
    write(root, "new/deep/f", "made by the turn")
    write(root, "keep/made/g", "made by the turn")
    write(root, "new/deep/user", "the user's, never named")
    assert ws.rewind(1).ok
    assert not (root / "keep/made").exists()
    assert (root / "keep/old").read_text() == "there before"
    assert not (root / "new/deep/f").exists()
    assert (root / "new/deep/user").read_text() == "the user's, never named"


def test_a_file_that_cannot_come_back_past_files_no_checkpoint_named_is_shown_blocked(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "x", "a file when the turn began")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["x"])
    (root / "x").unlink()
    ws.capture_before(["x/made"])
    write(root, "x/made", "by the agent")
    write(root, "x/other", "by a shell command no hook saw")
    plan = ws.plan_restore(ws.load("step:1"))
    assert [(c.op.value, c.path) for c in plan.changes] == [("B", "x"), ("A", "x/made")]
    code, out, _ = run_cli(capsys, root, "rewind", "1", "--dry-run")
    assert code == 0
    assert "  B  x" in out
    assert "1 blocked (left as they are)" in out
    result = ws.rewind(1)
    assert result.ok and result.blocked == ["x"]
    assert not (root / "x/made").exists()
    assert (root / "x/other").read_text() == "by a shell command no hook saw"


def test_a_dotdot_after_a_symlinked_directory_is_walked_as_the_kernel_walks_it(
    root: Path,
) -> None:
    write(root, "d/sub/x", "x")
    write(root, "d/e", "orig")
    write(root, "e", "the root's e, never written")
    os.symlink("d/sub", root / "L")
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before(["L/../e"])
    assert [e.path for e in checkpoint.entries] == ["d/e"]
    write(root, "L/../e", "edited through L/..")  # the kernel: L is d/sub, so L/.. is d
    assert (root / "d/e").read_text() == "edited through L/.."
    assert ws.rewind(1).ok
    assert (root / "d/e").read_text() == "orig"


MB = 1 << 20


def rows(plan: Plan) -> list[tuple[str, str]]:
    """A plan's `!` rows: (path, why)."""
    return [(u.path, u.why) for u in plan.unprotected]


def test_a_file_that_cannot_come_back_past_a_large_file_is_shown_blocked(root: Path) -> None:
    write(root, "d/a", "before")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["d/a"])
    (root / "d/a").unlink()
    (root / "d").rmdir()
    write(root, "d", b"\1" * (3 * MB))  # over the cap: in no snapshot, never replaced
    plan = ws.plan_restore(ws.load("step:1"))
    assert [(c.op.value, c.path) for c in plan.changes] == [("B", "d/a")]
    assert rows(plan) == [("d", "added")]
    result = ws.rewind(1)
    assert result.ok and result.blocked == ["d/a"]
    assert (root / "d").read_bytes() == b"\1" * (3 * MB)


def test_a_rewind_shows_the_large_files_its_checkpoints_knew_and_no_others(root: Path) -> None:
    write(root, "big", b"\1" * (3 * MB))
    write(root, "other.bin", b"\2" * (3 * MB))  # never named by a checkpoint
    ws = Workspace(root)
    ws.begin(step=1)
    assert ws.capture_before(["big"]).large == ["big"]
    (root / "big").unlink()
    ws.begin(step=2)
    ws.capture_before(["new.bin"])
    write(root, "new.bin", b"\3" * (3 * MB))
    write(root, "other.bin", b"\4" * (3 * MB))
    assert rows(ws.plan_restore(ws.load("step:1"))) == [("big", "deleted"), ("new.bin", "added")]
    assert rows(ws.plan_restore(ws.load("step:2"))) == [("new.bin", "added")]


def test_a_captured_file_ignored_now_is_shown_even_at_the_same_size(root: Path) -> None:
    write(root, ".gitignore", "")
    write(root, "conf.json", "C1")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before(["conf.json", ".gitignore"])
    write(root, ".gitignore", "conf.json\n")
    write(root, "conf.json", "C2")  # the same size, after the checkpoint
    plan = ws.plan_restore(ws.load("step:1"))
    assert [(u.path, u.why, u.size) for u in plan.unprotected] == [("conf.json", "ignored", 2)]
    assert ws.rewind(1).ok
    assert (root / "conf.json").read_text() == "C2"  # in no snapshot: never overwritten


def test_a_path_deeper_than_path_max_through_a_symlink_is_refused_not_guessed(
    root: Path,
) -> None:
    deep = "/".join(["d" * 200 + str(i) for i in range(25)])  # about 5,000 characters
    fd = os.open(root, os.O_RDONLY)
    for part in deep.split("/"):
        os.mkdir(part, dir_fd=fd)
        inner = os.open(part, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.symlink("..", "L", dir_fd=fd)
    os.close(fd)
    ws = Workspace(root)
    ws.begin(step=1)
    with pytest.raises(InputError, match="cannot follow its symbolic links"):
        ws.capture_before([f"{deep}/L/q"])
    with pytest.raises(InputError, match="cannot follow its symbolic links"):
        ws.capture_before([f"{deep}/L"])


def test_a_directory_swapped_for_a_symlink_during_a_capture_is_never_recorded_absent(
    root: Path,
) -> None:
    write(root, "P/f", "orig")
    write(root, "other/f", "other")
    os.symlink("other", root / "Q")
    libc = ctypes.CDLL(None, use_errno=True)
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE: P is always there, whole
    p, q = os.fsencode(root / "P"), os.fsencode(root / "Q")
    if libc.renameat2(at_cwd, p, at_cwd, q, exchange) != 0:
        pytest.skip(f"renameat2: {os.strerror(ctypes.get_errno())}")
    ws = Workspace(root)
    stop = threading.Event()

    def swap() -> None:  # P: the directory, then a symlink to other, and back
        while not stop.is_set():
            libc.renameat2(at_cwd, p, at_cwd, q, exchange)

    swapper = threading.Thread(target=swap)
    swapper.start()
    refused = []
    try:
        for step in range(1, 301):
            ws.begin(step=step)
            try:
                checkpoint = ws.capture_before(["P/f"])
            except InputError as exc:
                refused.append(str(exc))  # met the swap: said so, nothing recorded
                continue
            assert checkpoint.absent == [], (step, checkpoint.absent)
    finally:
        stop.set()
        swapper.join()
    assert all("capture it again" in why for why in refused), refused


def test_a_file_a_checkpoint_had_as_absent_that_is_ignored_now_is_shown(root: Path) -> None:
    write(root, ".gitignore", "")
    ws = Workspace(root)
    ws.begin(step=1)
    ws.capture_before([".gitignore", "out.txt"])
    write(root, ".gitignore", "out.txt\n")
    write(root, "out.txt", "GENERATED")  # made by the turn, then ignored by it
    plan = ws.plan_restore(ws.load("step:1"))
    assert [(c.op.value, c.path) for c in plan.changes] == [("M", ".gitignore")]
    assert [(u.path, u.why, u.size) for u in plan.unprotected] == [("out.txt", "ignored", 9)]


def test_a_dotdot_deeper_than_path_max_with_no_symlink_is_walked_without_realpath(
    root: Path,
) -> None:
    deep = "/".join(["d" * 48] * 90)  # about 4,400 characters
    fd = os.open(root, os.O_RDONLY)
    for part in [*deep.split("/"), "x"]:
        os.mkdir(part, dir_fd=fd)
        inner = os.open(part, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    ws = Workspace(root)
    ws.begin(step=1)
    checkpoint = ws.capture_before([f"{root}/{deep}/x/../f"])  # as the CLI makes it, absolute
    assert checkpoint.absent == [f"{deep}/f"]


def test_a_checkpoint_records_the_stores_size_cap(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, root, "config", "max-file-bytes", "10M")[0] == 0
    code, out, _ = run_cli(capsys, root, "--json", "begin", "--step", "1")
    assert code == 0
    assert Workspace(root).load(json.loads(out)["id"]).max_file_bytes == 10 << 20  # M: MiB


def test_a_directory_is_refused_even_after_a_file_in_it_was_captured(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "lib/one.py", "one")
    write(root, "lib/two.py", "two")
    ws = Workspace(root)
    ws.begin(step=1)
    with pytest.raises(InputError, match="'lib' is not a file or symlink"):
        ws.capture_before(["lib"])
    ws.capture_before(["lib/one.py"])  # lib is now among the checkpoint's directories
    with pytest.raises(InputError, match="'lib' is not a file or symlink"):
        ws.capture_before(["lib"])  # not a silent success that left lib/two.py out
    code, _, err = run_cli(capsys, root, "capture", "lib")
    assert code == 2
    assert "'lib' is not a file or symlink" in err
