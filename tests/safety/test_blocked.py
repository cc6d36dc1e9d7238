"""A path a restore cannot change is shown as blocked before anything changes; the rest restores.

The snapshot has a file where a directory now holds ignored files (`build` became
`build/main.o`): the directory cannot go (its ignored files are never touched), so
the file cannot come back. The plan says so (`B`, op "B" in `--json`), and a
restore leaves that one path as it is and restores everything else.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import msgspec
import pytest

from worksnap import Op, Workspace

from .conftest import cli, tree_state, write


def _scenario(root: Path) -> str:
    write(root, ".gitignore", "*.o\n")
    write(root, "build", "a file, once\n")
    write(root, "a.txt", "alpha\n")
    write(root, "src/old.c", "old\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
    (root / "build").unlink()
    write(root, "build/main.o", "an ignored object file\n")
    write(root, "build/notes.txt", "not ignored: the target has no such file\n")
    write(root, "a.txt", "edited\n")
    (root / "src" / "old.c").unlink()
    return target


def test_the_plan_shows_the_blocked_path_and_changes_nothing(root: Path) -> None:
    target = _scenario(root)
    before = tree_state(root)
    code, out, err = cli("--root", str(root), "--json", "plan", target)
    assert code == 0, err
    changes = msgspec.json.decode(out)["changes"]
    assert changes == [
        {"op": "M", "path": "a.txt"},
        {"op": "B", "path": "build"},
        {"op": "A", "path": "build/notes.txt"},
        {"op": "D", "path": "src/old.c"},
    ]
    code, out, err = cli("--root", str(root), "plan", target)
    assert code == 0, err
    assert "  B  build\n" in out and "1 blocked" in out
    assert tree_state(root) == before
    with Workspace(root) as ws:
        plan = ws.plan_restore(ws.load(target))
    assert [c.path for c in plan.blocked] == ["build"]
    assert plan.blocked[0].op is Op.BLOCKED


def test_the_restore_leaves_the_blocked_path_and_restores_the_rest(root: Path) -> None:
    target = _scenario(root)
    code, out, err = cli("--root", str(root), "--json", "restore", target, "--yes")
    assert code == 0, err
    result = msgspec.json.decode(out)
    assert result["error"] is None and not result["rolled_back"]
    assert result["blocked"] == ["build"]
    assert sorted(result["restored"]) == ["a.txt", "build/notes.txt", "src/old.c"]
    assert (root / "a.txt").read_text() == "alpha\n"
    assert (root / "src" / "old.c").read_text() == "old\n"
    assert (root / "build" / "main.o").read_text() == "an ignored object file\n"
    assert not (root / "build" / "notes.txt").exists()
    # Once the ignored files are gone, the same restore brings the file back.
    (root / "build" / "main.o").unlink()
    code, out, err = cli("--root", str(root), "restore", target, "--yes")
    assert code == 0, err
    assert (root / "build").read_text() == "a file, once\n"


def test_the_text_restore_warns_about_the_blocked_path(root: Path) -> None:
    target = _scenario(root)
    code, out, err = cli("--root", str(root), "restore", target, "--yes")
    assert code == 0, err
    assert out.startswith("restored 3 paths")
    assert err == (
        "worksnap: warning: build left as it is: a directory holding what no restore touches "
        "(ignored or excluded files, a FIFO, socket or device; for a checkpoint, files it never "
        "named), where the snapshot has a file\n"
    )


def test_a_directory_holding_what_the_target_s_rules_ignore_is_blocked_too(root: Path) -> None:
    """Now `a/x.tmp` is not ignored (no `.gitignore`); the target ignores `*.tmp`, so the
    restore keeps it, and `a` cannot become the target's file. The plan said `M a`, and
    the restore failed at `a` ("Directory not empty") and rolled back every time, the
    rest never restored (hostile review). `a` is blocked; the rest restores."""
    write(root, ".gitignore", "*.tmp\n")
    write(root, "a", "file\n")
    write(root, "other", "keep\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
        (root / ".gitignore").unlink()
        (root / "a").unlink()
        write(root, "a/x.tmp", "scratch\n")
        write(root, "other", "changed\n")
        plan = ws.plan_restore(ws.load(target))
        assert {c.path: c.op for c in plan.changes} == {
            ".gitignore": Op.DELETED,
            "a": Op.BLOCKED,
            "other": Op.MODIFIED,
        }
        result = ws.restore(target)
    assert result.ok and result.blocked == ["a"]
    assert (root / "a/x.tmp").read_text() == "scratch\n"
    assert (root / "other").read_text() == "keep\n" and (root / ".gitignore").exists()


def _special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:  # a socket: bound, then left behind as a file system entry
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))


@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_fifo_or_socket_where_the_snapshot_has_something_is_blocked_and_named(
    root: Path, kind: str, where: str
) -> None:
    """Special files are never captured, so never removed: the path is shown as blocked
    (it was left out in silence, the restore saying the tree matched), the rest restores,
    and once the user removes it the restore brings the snapshot's entry back."""
    write(root, "a.txt", "alpha\n")
    write(root, "p/x.txt" if where == "directory" else "p", "the snapshot's\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
    shutil.rmtree(root / "p") if where == "directory" else (root / "p").unlink()
    _special(root / "p", kind)
    write(root, "a.txt", "edited\n")
    code, out, err = cli("--root", str(root), "--json", "plan", target)
    assert code == 0, err
    assert msgspec.json.decode(out)["changes"] == [
        {"op": "M", "path": "a.txt"},
        {"op": "B", "path": "p"},
    ]
    code, out, err = cli("--root", str(root), "--force", "restore", target)
    assert code == 0, err
    assert "p left as it is: a FIFO, socket or device" in err
    assert (root / "a.txt").read_text() == "alpha\n"
    assert stat.S_ISFIFO(os.lstat(root / "p").st_mode) == (kind == "fifo")
    assert stat.S_ISSOCK(os.lstat(root / "p").st_mode) == (kind == "socket")
    (root / "p").unlink()
    with Workspace(root) as ws:
        assert ws.restore(target).ok
        assert ws.plan_restore(ws.load(target)).changes == []
    assert (root / ("p/x.txt" if where == "directory" else "p")).read_text() == "the snapshot's\n"


def test_a_path_excluded_by_a_rule_is_not_blocked_but_left_in_silence(root: Path) -> None:
    """What today's rules exclude is never touched, as documented: no `B` for it."""
    write(root, "a.txt", "alpha\n")
    write(root, "p", "the snapshot's\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
    write(root, "p", "now excluded\n")
    with Workspace(root, exclude=["p"]) as ws:
        assert ws.plan_restore(ws.load(target)).changes == []
    (root / "p").unlink()
    os.mkfifo(root / "p")  # excluded by a rule too: no `B` (removing it would change nothing)
    with Workspace(root, exclude=["p"]) as ws:
        assert ws.plan_restore(ws.load(target)).changes == []


def test_a_recovery_that_meets_a_fifo_names_it(root: Path) -> None:
    """A restore killed after its steps; a FIFO then takes the place of a file it removed:
    `recover` said "1 path put back", the file still missing, and no word of the FIFO."""
    import subprocess
    import sys

    write(root, "a.txt", "a\n")
    child = f"""
import os
from worksnap import Workspace
from worksnap.workspace import Seams
from worksnap.apply import apply_plan
root = {str(root)!r}
with Workspace(root) as ws:
    target = ws.snapshot().id
open(root + "/a.txt", "w").write("b\\n")
open(root + "/p", "w").write("only in the pre-restore snapshot\\n")
def killed(*args, **kwargs):
    apply_plan(*args, **kwargs)
    os._exit(9)
with Workspace(root, seams=Seams(apply_plan=killed)) as ws:
    ws.restore(target)
"""
    assert subprocess.run([sys.executable, "-c", child], check=False).returncode == 9
    assert not (root / "p").exists()
    os.mkfifo(root / "p")
    code, out, err = cli("--root", str(root), "recover", "--yes")
    assert code == 0, err
    assert "rolled back an interrupted restore" in out
    assert "p left as it is: a FIFO, socket or device" in err
    assert (root / "a.txt").read_text() == "b\n"
    assert stat.S_ISFIFO(os.lstat(root / "p").st_mode)  # never removed


@pytest.mark.parametrize("now", ["directory", "file"])
def test_what_came_where_the_snapshot_had_a_fifo_is_added_since(root: Path, now: str) -> None:
    """A review's snapshot held a FIFO at `p` (never captured: listed as excluded, like a
    path a rule excludes); then `p` became a directory of new files, or a file. `plan`
    said the tree matched, `status` named nothing, and a restore kept them in silence,
    though they are in no snapshot. A FIFO is left out for its type, not by a rule: what
    is at its path now is added since, removed by a restore and kept by the pre-restore
    snapshot. A path a rule excluded (the snapshot's, today's) and `.git` stay untouched."""
    write(root, "a.txt", "alpha\n")
    os.mkfifo(root / "p")
    write(root, "ruled/kept.txt", "excluded by the snapshot's rule\n")
    with Workspace(root, exclude=["ruled"]) as ws:
        target = ws.snapshot().id
        assert "p" in ws.load(target).excluded
    (root / "p").unlink()
    write(root, "p/file.txt" if now == "directory" else "p", "came since\n")
    write(root, "ruled/new.txt", "came since, under the snapshot's rule\n")
    code, out, err = cli("--root", str(root), "--json", "plan", target)
    assert code == 0, err
    added = [{"op": "A", "path": "p"}]
    if now == "directory":
        added = [{"op": "A", "path": "p"}, {"op": "A", "path": "p/file.txt"}]
    assert msgspec.json.decode(out)["changes"] == added
    code, out, err = cli("--root", str(root), "--json", "status")
    assert code == 0, err
    assert [c["path"] for c in msgspec.json.decode(out)["changes"]] == [a["path"] for a in added]
    code, out, err = cli("--root", str(root), "--json", "restore", "--yes", target)
    assert code == 0, err
    pre = msgspec.json.decode(out)["pre_restore"]
    assert not os.path.lexists(root / "p")
    assert (root / "ruled/new.txt").exists()  # the snapshot's rule: never touched
    with Workspace(root) as ws:
        kept = {e.path for e in ws.load(pre).entries}
    assert ("p/file.txt" if now == "directory" else "p") in kept
