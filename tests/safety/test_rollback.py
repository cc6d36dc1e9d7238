"""All or nothing: a restore that fails part-way is rolled back automatically.

Each step of an apply (unlink, rmdir, mkdir, open, write, fchmod, fsync of a
file or a directory, symlink, rename) is made to fail, at its first and at its
last use, with EIO, ENOSPC and EACCES. Every time the workspace must end up
byte-identical to how it was before (content, modes, symlinks, empty
directories), and the result must report both the failure and the rollback.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

import worksnap
from worksnap import ConflictError, ObjectError, Progress, RestoreError, Workspace
from worksnap.apply import Result, apply_plan
from worksnap.workspace import Seams

from .conftest import STORE, cli, store_files, tree_state, write
from .faults import STEPS, Faults, build_scenario

SRC = str(Path(worksnap.__file__).resolve().parents[1])

_COUNTS: Counter[str] = Counter()


def _step_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often the scenario's restore uses each step (measured once)."""
    if not _COUNTS:
        with monkeypatch.context() as patch:
            faults = Faults(patch)
            (tmp_path / "count").mkdir()
            ws, target = build_scenario(tmp_path / "count", faults.seams)
            with ws:
                assert ws.restore(target).ok
        _COUNTS.update(faults.counts)
    return _COUNTS


def test_the_scenario_uses_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _step_counts(tmp_path, monkeypatch)
    assert set(counts) == set(STEPS), counts


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EACCES], ids=errno.errorcode.get)
@pytest.mark.parametrize("position", ["first", "last"])
@pytest.mark.parametrize("step", STEPS)
def test_failure_at_any_step_rolls_back_to_identical_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, position: str, code: int
) -> None:
    counts = _step_counts(tmp_path, monkeypatch)
    root = tmp_path / "ws"
    root.mkdir()
    faults = Faults(monkeypatch)
    ws, target = build_scenario(root, faults.seams)
    before = tree_state(root)
    faults.fail_step, faults.errno = step, code
    faults.fail_at = 1 if position == "first" else counts[step]
    with ws:
        result = ws.restore(target)
    assert faults.failed == 1
    assert not result.ok
    assert os.strerror(code) in (result.error or "")
    assert result.rolled_back
    assert result.pre_restore is not None
    assert tree_state(root) == before
    assert not (root / STORE / "journal.json").exists()


def test_cli_reports_the_failure_and_the_rollback(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, target = build_scenario(root)
    ws.close()
    before = tree_state(root)
    faults = Faults(monkeypatch)
    faults.fail_step, faults.fail_at, faults.errno = "rename", 2, errno.ENOSPC
    code, out, _ = cli(
        "--root", str(root), "--json", "restore", target, "--yes", seams=faults.seams
    )
    report = msgspec.json.decode(out)
    assert code == 1
    assert "No space left on device" in report["error"]
    assert report["rolled_back"] is True
    assert report["pre_restore"]
    assert report["not_restored"]
    assert tree_state(root) == before


def test_object_damaged_after_verification_is_caught_while_writing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def apply_with_bad_bytes(root_: str, plan, read_object, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:  # the restore, not its rollback
            return apply_plan(root_, plan, lambda d: [b"rotten", *read_object(d)], **kwargs)
        return apply_plan(root_, plan, read_object, **kwargs)

    ws, target = build_scenario(root, Seams(apply_plan=apply_with_bad_bytes))
    before = tree_state(root)
    with ws:
        result = ws.restore(target)
    assert "do not match its digest" in (result.error or "")
    assert result.rolled_back
    assert tree_state(root) == before


def test_interrupt_mid_apply_rolls_back_at_once(root: Path) -> None:
    ws, target = build_scenario(root)
    before = tree_state(root)

    def progress(report: Progress) -> None:
        if report.what == "apply" and report.done == 3:
            raise KeyboardInterrupt

    ws.progress = progress
    with ws, pytest.raises(KeyboardInterrupt):
        ws.restore(target)
    assert tree_state(root) == before
    assert not (root / STORE / "journal.json").exists()


# Ctrl-C (a real SIGINT, sent by the process to itself) at the third step of the restore's
# apply, and what its rollback (the second apply) meets: nothing, Ctrl-C again at its first
# step, or a failure (its apply reports one).
_CTRL_C_MID_APPLY = r"""
import os, signal, sys
from worksnap import apply, cli
from worksnap.workspace import Seams
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a shell starts a foreground job
signal.signal(signal.SIGHUP, signal.SIG_DFL)  # (the tests may run under nohup, which ignores it)
rollback, sent, calls = sys.argv[1], getattr(signal, sys.argv[2]), []

def ctrl_c_at(step, progress):
    def report(done, total):
        if done == step:
            os.kill(os.getpid(), sent)
        if progress is not None:
            progress(done, total)
    return report

def apply_plan(root, plan, read, **kwargs):
    calls.append(plan)
    if len(calls) == 1:
        kwargs["progress"] = ctrl_c_at(3, kwargs.get("progress"))
    elif rollback == "interrupted too":
        kwargs["progress"] = ctrl_c_at(1, None)
    elif rollback == "failing":
        return apply.Result(target=plan.target.id, error="an injected EIO")
    return apply.apply_plan(root, plan, read, **kwargs)

sys.exit(cli.main(sys.argv[3:], seams=Seams(apply_plan=apply_plan)))
"""


@pytest.mark.parametrize("rollback", ["done", "interrupted too", "failing"])
def test_ctrl_c_mid_apply_says_how_it_left_the_tree(root: Path, rollback: str) -> None:
    # A review: Ctrl-C rolled the tree back, and all it said was "worksnap: interrupted",
    # so the user had to assume a half-restored tree. Now the one line says how it was
    # left; when the rollback did not finish, what a failed rollback says (recover).
    ws, target = build_scenario(root)
    ws.close()
    before = tree_state(root)
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_MID_APPLY, rollback, "SIGINT", "--root", str(root),
         "restore", target, "--yes"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    if rollback == "done":
        assert lines[0] == (
            "worksnap: interrupted; the workspace was rolled back to how it was before"
        )
        assert tree_state(root) == before
        assert not (root / STORE / "journal.json").exists()
        return
    if rollback == "interrupted too":
        assert lines[0].startswith("worksnap: interrupted; a restore was interrupted (journal ")
        assert "the workspace may be partly restored; run `worksnap recover`" in lines[0]
    else:
        assert re.fullmatch(
            r"worksnap: interrupted; restore failed \(interrupted\) and so did the rollback "
            r"\(an injected EIO\); the pre-restore snapshot \w+ holds the earlier state "
            r"\(run `worksnap recover` to try again\)",
            lines[0],
        ), lines[0]
    assert (root / STORE / "journal.json").exists()
    assert tree_state(root) != before  # as it says: partly restored
    code, _, err = cli("--root", str(root), "recover")
    assert code == 0, err
    assert tree_state(root) == before


@pytest.mark.parametrize("sent", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("rollback", ["done", "interrupted too"])
def test_sigterm_or_sighup_mid_apply_rolls_back_as_ctrl_c(
    root: Path, sent: str, rollback: str
) -> None:
    # A review: an MCP client (or `timeout`, systemd, a terminal closing) stopping worksnap
    # mid-restore left the tree half-restored, with a journal, and nothing said. Now either
    # signal stops it as Ctrl-C does, and it exits 128 + the signal, as a shell reports it.
    ws, target = build_scenario(root)
    ws.close()
    before = tree_state(root)
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_MID_APPLY, rollback, sent, "--root", str(root),
         "restore", target, "--yes"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert done.returncode == 128 + int(getattr(signal, sent)), done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    if rollback == "done":
        assert lines[0] == (
            f"worksnap: interrupted by {sent}; the workspace was rolled back to how it was before"
        )
        assert tree_state(root) == before
        assert not (root / STORE / "journal.json").exists()
        return
    # A second one during the rollback stops it as a second Ctrl-C does: `recover` finishes.
    assert lines[0].startswith(f"worksnap: interrupted by {sent}; a restore was interrupted")
    assert "run `worksnap recover`" in lines[0]
    code, _, err = cli("--root", str(root), "recover")
    assert code == 0, err
    assert tree_state(root) == before


def test_failed_rollback_keeps_journal_and_recover_finishes_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        faults = Faults(patch, arm_calls=2)  # the restore and its rollback
        ws, target = build_scenario(root, faults.seams)
        before = tree_state(root)
        faults.fail_step, faults.fail_at, faults.persistent = "rename", 3, True
        with ws, pytest.raises(RestoreError, match="so did the rollback"):
            ws.restore(target)
    assert (root / STORE / "journal.json").exists()
    assert tree_state(root) != before
    code, out, err = cli("--root", str(root), "recover")
    assert code == 0, err
    assert "rolled back" in out
    assert tree_state(root) == before
    assert not (root / STORE / "journal.json").exists()


def test_any_later_command_finishes_an_interrupted_restore(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        faults = Faults(patch, arm_calls=2)
        ws, target = build_scenario(root, faults.seams)
        before = tree_state(root)
        faults.fail_step, faults.fail_at, faults.persistent = "mkdir", 1, True
        with ws, pytest.raises(RestoreError):
            ws.restore(target)
    code, _, err = cli("--root", str(root), "snapshot")
    assert code == 0, err
    assert tree_state(root) == before


def test_recover_with_nothing_to_recover(root: Path) -> None:
    # Not even a store yet: there is nothing to roll back, and that is not an error.
    assert cli("--root", str(root), "recover")[:2] == (0, "no interrupted restore to recover\n")
    assert not (root / STORE).exists()


@pytest.mark.parametrize("edit", ["content", "mode", "deleted", "added below", "type"])
def test_change_between_plan_and_apply_is_refused(root: Path, edit: str) -> None:
    ws, target = build_scenario(root)
    with ws:
        plan = ws.plan_restore(ws.load(target))
        if edit == "content":
            write(root, "mod.txt", "NEW content, longer\n")  # same size as what plan saw
        elif edit == "mode":
            (root / "mod.txt").chmod(0o600)
        elif edit == "deleted":
            (root / "mod.txt").unlink()
        elif edit == "added below":
            write(root, "addeddir/a/late.txt", "written after the plan\n")
        else:
            (root / "mod.txt").unlink()
            (root / "mod.txt").mkdir()
        before, manifests = tree_state(root), store_files(root)
        with pytest.raises(ConflictError) as refused:
            ws.apply(plan)
    assert refused.value.exit_code == 2
    assert tree_state(root) == before
    assert store_files(root) == manifests
    assert not (root / STORE / "journal.json").exists()


def test_untouched_change_between_plan_and_apply_is_kept(root: Path) -> None:
    ws, target = build_scenario(root)
    with ws:
        plan = ws.plan_restore(ws.load(target))
        write(root, "keep.txt", "edited, but the restore does not touch it\n")
        result = ws.apply(plan)
        assert result.ok
        pre = ws.load(result.pre_restore or "")
    assert (root / "keep.txt").read_text().startswith("edited")
    edited = len("edited, but the restore does not touch it\n")
    assert any(e.path == "keep.txt" and e.size == edited for e in pre.entries)


@pytest.mark.parametrize("damage", ["missing loose", "corrupt loose", "corrupt packed"])
def test_damaged_object_refuses_restore_with_nothing_changed(root: Path, damage: str) -> None:
    write(root, "big.bin", os.urandom(1 << 20))  # 1 MiB and more: stored loose
    write(root, "small.txt", "small and packed\n")
    with Workspace(root) as ws:
        snap = ws.snapshot()
        big = next(e.hash for e in snap.entries if e.path == "big.bin")
        assert big is not None
        write(root, "big.bin", b"changed")
        write(root, "small.txt", "changed too\n")
        before, manifests = tree_state(root), store_files(root)
        loose = root / STORE / "objects" / big[:2] / big[2:]
        if damage == "missing loose":
            loose.unlink()
        elif damage == "corrupt loose":
            data = bytearray(loose.read_bytes())
            data[12345] ^= 1
            loose.write_bytes(bytes(data))
        else:
            (pack,) = (root / STORE / "packs").glob("*.pack")
            pack.write_bytes(pack.read_bytes().replace(b"small and packed", b"small and PACKED"))
    code, out, err = cli("--root", str(root), "--json", "restore", snap.id, "--yes")
    assert code == 1
    assert out == ""
    assert "missing" in err or "damaged" in err
    assert tree_state(root) == before
    assert store_files(root) == manifests  # refused before the pre-restore snapshot
    with Workspace(root) as ws, pytest.raises(ObjectError):
        ws.restore(snap.id)


@pytest.mark.parametrize("edit", ["rewritten", "replaced", "created where the restore writes"])
def test_an_edit_made_while_the_restore_runs_is_never_overwritten_unstored(
    root: Path, edit: str
) -> None:
    """The pre-restore snapshot is taken once, then the objects are checked, the journal
    written and the steps run: seconds on a big tree. An editor saving a file the
    restore replaces later in that time lost the edit, in no snapshot (hostile review).
    Each write and removal now first checks that the path is still as captured; when it
    is not, the restore stops there and sets back what it changed, and only that: the
    edit stays on disk (the review of this fix found the rollback setting back every
    path, edits made meanwhile included, kept only in a `pre-recover` snapshot)."""
    for i in range(30):
        write(root, f"d/f{i:02}", f"v1 {i}\n")
    write(root, "zzz", "v1\n")
    write(root, "notes.txt", "notes v1\n")
    with Workspace(root) as ws:
        first = ws.snapshot().id
        for i in range(30):
            write(root, f"d/f{i:02}", f"v2 {i}\n")
        if edit == "created where the restore writes":
            (root / "zzz").unlink()
        else:
            write(root, "zzz", "v2\n")
        ws.snapshot()
        ws_progress_seen: list[int] = []

        def progress(p: Progress) -> None:
            if p.what == "apply" and not ws_progress_seen:  # after the first step
                ws_progress_seen.append(p.done)
                if edit == "replaced":
                    write(root, "zzz.new", "precious edit\n")
                    os.rename(root / "zzz.new", root / "zzz")
                else:
                    write(root, "zzz", "precious edit\n")
                write(root, "notes.txt", "notes edited meanwhile\n")  # not in the plan

        ws.progress = progress
        result = ws.restore(first)
        assert ws_progress_seen  # the edit was made while the steps ran
        assert not result.ok and result.rolled_back
        assert result.error is not None and "zzz" in result.error
        assert "changed while the restore ran" in result.error
    assert (root / "zzz").read_text() == "precious edit\n"
    assert (root / "notes.txt").read_text() == "notes edited meanwhile\n"
    assert all((root / f"d/f{i:02}").read_text() == f"v2 {i}\n" for i in range(30))


@pytest.mark.parametrize("damage", ["corrupt loose", "corrupt packed"])
def test_a_restore_never_replaces_a_file_whose_only_sound_copy_is_on_disk(
    root: Path, damage: str
) -> None:
    """The pre-restore capture stores nothing already in the store's index, so it never
    reads those objects; only the target's were checked. A file whose stored copy was
    damaged was then replaced by the restore, and `undo` found its bytes damaged: the
    only sound copy was gone (hostile review). Now the objects of what the restore
    replaces or removes are checked too, before anything changes."""
    big, small = os.urandom(1 << 20), "small and packed\n"
    write(root, "big.bin", big)  # 1 MiB and more: stored loose
    write(root, "small.txt", small)
    with Workspace(root) as ws:
        first = ws.snapshot()
        write(root, "big.bin", b"second")
        write(root, "small.txt", "second\n")
        second = ws.snapshot()
        write(root, "big.bin", big)  # back to the first's bytes: stored, not read again
        write(root, "small.txt", small)
        digest = next(e.hash for e in first.entries if e.path == "big.bin")
        assert digest is not None
        if damage == "corrupt loose":
            loose = root / STORE / "objects" / digest[:2] / digest[2:]
            data = bytearray(loose.read_bytes())
            data[12345] ^= 1
            loose.chmod(0o644)
            loose.write_bytes(bytes(data))
        else:
            for pack in (root / STORE / "packs").glob("*.pack"):
                pack.write_bytes(
                    pack.read_bytes().replace(b"small and packed", b"small and PACKED")
                )
        before = tree_state(root)
        with pytest.raises(ObjectError, match="damaged"):
            ws.restore(second.id)
    assert tree_state(root) == before
    assert (root / "big.bin").read_bytes() == big and (root / "small.txt").read_text() == small


def test_a_rollback_makes_a_removed_directory_again_with_its_own_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore removed `private/` (0700, added since the target), then failed; the
    rollback made it again with `mkdir(0o777)` and the umask: 0755, a private directory
    opened to everyone (hostile review). Modes are not in snapshots; the journal now
    keeps those of the directories a restore removes, for its rollback and a recovery."""
    root = tmp_path / "w"
    faults = Faults(monkeypatch)
    write(root, "zz/f", "one\n")
    with Workspace(root, seams=faults.seams) as ws:
        target = ws.snapshot().id
        write(root, "zz/f", "two\n")
        write(root, "private/inner/key", "secret\n")
        (root / "private" / "inner").chmod(0o750)
        (root / "private").chmod(0o700)
        before = tree_state(root)
        faults.fail_step, faults.fail_at = "rename", 1  # the write of zz/f, after the rmdirs
        result = ws.restore(target)
    assert faults.failed == 1 and not result.ok and result.rolled_back
    assert not (root / STORE / "journal.json").exists()
    assert (root / "private").stat().st_mode & 0o7777 == 0o700
    assert (root / "private" / "inner").stat().st_mode & 0o7777 == 0o750
    assert tree_state(root) == before


@pytest.mark.parametrize("found", ["a directory made", "a directory removed"])
def test_what_a_step_finds_in_its_way_is_a_conflict_too(root: Path, found: str) -> None:
    """A file put where the restore makes a directory (`mkdir`: EEXIST), one put in a
    directory it removes (`rmdir`: ENOTEMPTY): the run stopped, and the rollback set
    every path back, edits made meanwhile elsewhere included (review of d40b00c). They
    are conflicts: what the run changed goes back, the rest stays."""
    write(root, "keep/f", "kept\n")
    write(root, "notes.txt", "notes v1\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
        write(root, "a-added.txt", "added since: the first step removes it\n")
        if found == "a directory made":
            (root / "keep" / "f").unlink()
            (root / "keep").rmdir()
        else:
            write(root, "gone/inner.txt", "added since\n")
        seen: list[int] = []

        def progress(p: Progress) -> None:
            if p.what == "apply" and not seen:
                seen.append(p.done)
                write(root, "notes.txt", "notes edited meanwhile\n")
                if found == "a directory made":
                    write(root, "keep", "a file where the restore makes a directory\n")
                else:
                    write(root, "gone/late.txt", "written in a directory being removed\n")

        ws.progress = progress
        result = ws.restore(target)
    assert seen and not result.ok and result.rolled_back
    assert (root / "notes.txt").read_text() == "notes edited meanwhile\n"
    if found == "a directory made":
        assert (root / "keep").read_text() == "a file where the restore makes a directory\n"
    else:
        assert (root / "gone/late.txt").exists()
    assert (root / "a-added.txt").exists()  # what the run changed went back


def test_a_rollback_after_a_conflict_leaves_a_journal_of_what_it_changed(root: Path) -> None:
    """Killed during the partial rollback, the journal still listed every path of the
    plan, and the recovery set back the edit the conflict had spared (review of
    d40b00c). It now lists what the run changed before that rollback starts."""
    for i in range(5):
        write(root, f"f{i}", "v1\n")
    calls: list[int] = []

    def killed_rollback(*args: object, **kwargs: object) -> Result:
        calls.append(1)
        if len(calls) == 2:  # the rollback: as if killed before its first step
            raise KeyboardInterrupt
        return apply_plan(*args, **kwargs)  # type: ignore[arg-type]

    with Workspace(root, seams=Seams(apply_plan=killed_rollback)) as ws:
        target = ws.snapshot().id
        for i in range(5):
            write(root, f"f{i}", "v2\n")
        seen: list[int] = []

        def progress(p: Progress) -> None:
            if p.what == "apply" and p.done == 2 and not seen:
                seen.append(1)
                write(root, "f4", "edited meanwhile\n")

        ws.progress = progress
        with pytest.raises(KeyboardInterrupt):
            ws.restore(target)
    journal = msgspec.json.decode((root / STORE / "journal.json").read_bytes())
    assert journal["paths"] == ["f0", "f1", "f2", "f3"]  # f4 stopped it
    code, _, err = cli("--root", str(root), "recover")
    assert code == 0, err
    assert [(root / f"f{i}").read_text() for i in range(5)] == ["v2\n"] * 4 + ["edited meanwhile\n"]


def test_a_rollback_after_a_conflict_reads_rules_edited_meanwhile(root: Path) -> None:
    """The partial rollback aims at the tree as it is beside the paths it sets back, and
    read that tree's `.gitignore`, edited meanwhile, from the store: it was not stored
    ("missing from the store"), and the restore failed with a traceback (the watched
    differential walk, in CI)."""
    write(root, ".gitignore", "*.log\n")
    write(root, "a-new", "in the target only: the restore writes it, the rollback removes it\n")
    for i in range(5):
        write(root, f"f{i}", "v1\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
        (root / "a-new").unlink()
        for i in range(5):
            write(root, f"f{i}", "v2\n")
        seen: list[int] = []

        def progress(p: Progress) -> None:
            if p.what == "apply" and not seen:
                seen.append(1)
                write(root, ".gitignore", "*.log\n*.tmp\n")  # not in the plan
                write(root, "f4", "edited meanwhile\n")  # the conflict

        ws.progress = progress
        result = ws.restore(target)
    assert seen and not result.ok and result.rolled_back
    assert (root / ".gitignore").read_text() == "*.log\n*.tmp\n"
    assert (root / "f4").read_text() == "edited meanwhile\n"
    assert [(root / f"f{i}").read_text() for i in range(4)] == ["v2\n"] * 4
    assert not (root / "a-new").exists()


@pytest.mark.parametrize(
    "meanwhile", ["a file removed", "a directory removed", "a file for a directory"]
)
def test_what_the_restore_finds_gone_or_replaced_where_it_removes(
    root: Path, meanwhile: str
) -> None:
    """What the run removes was removed meanwhile: ENOENT failed the whole restore and
    rolled everything back, edits made meanwhile included; a file put where it removes
    a directory (ENOTDIR) did the same (review of 027c855). Gone is what the run wanted;
    a file in a directory's place is a conflict, kept with the other edits."""
    write(root, "notes.txt", "notes v1\n")
    write(root, "f", "v1\n")
    with Workspace(root) as ws:
        target = ws.snapshot().id
        write(root, "0added.txt", "added since\n")
        write(root, "gone/x", "added since\n")
        write(root, "f", "v2\n")
        seen: list[int] = []

        def progress(p: Progress) -> None:
            if p.what == "apply" and not seen:
                seen.append(1)
                write(root, "notes.txt", "notes edited meanwhile\n")
                if meanwhile == "a file removed":
                    (root / "0added.txt").unlink()
                else:
                    shutil.rmtree(root / "gone")
                    if meanwhile == "a file for a directory":
                        write(root, "gone", "a file where the restore removes a directory\n")

        ws.progress = progress
        result = ws.restore(target)
        if meanwhile == "a file for a directory":
            # gone/x, removed by the run, comes back: the file in its way is moved aside,
            # kept in the snapshot the message names (as after a kill: rollback_target).
            assert not result.ok and result.conflict and result.rolled_back
            kept = re.search(r"kept in snapshot ([0-9a-f]{12})", result.error or "")
            assert kept is not None, result.error
            assert ws.file_bytes(kept.group(1), "gone")[1].startswith(b"a file where")
    assert seen
    assert (root / "notes.txt").read_text() == "notes edited meanwhile\n"
    if meanwhile != "a file for a directory":
        assert result.ok, result.error
        assert not (root / "0added.txt").exists() and not (root / "gone").exists()
        assert (root / "f").read_text() == "v1\n"


@pytest.mark.parametrize("stopped_by", ["a conflict", "ctrl-c", "a kill, then recover"])
def test_an_edit_made_while_a_rollback_runs_is_never_overwritten(
    root: Path, stopped_by: str
) -> None:
    """A rollback (after a conflict, a Ctrl-C, or as `recover` after a kill) looked at the
    tree first (the edits made until then are kept), then applied its plan with no
    look at each path: an IDE's autosave or a second agent saving a file it was about
    to put back lost that save, in no snapshot (hostile review: 50 and 38 edits lost in two
    runs). Each step now first finds its path as that look did; one edited since keeps
    its edit, is named as left as it is, and the rollback goes on with the rest."""
    for i in range(5):
        write(root, f"f{i}", f"v1 {i}\n")
    calls: list[int] = []
    saved: list[int] = []
    edit = "saved while the rollback ran\n"

    def seam(root_: str, plan: object, read_object: Any, **kwargs: Any) -> Result:
        calls.append(1)
        if len(calls) == 1:  # the restore: f0..f3 written, then stopped

            def progress(done: int, total: int) -> None:
                if done == 4 and stopped_by == "a conflict":
                    write(root, "f4", "edited meanwhile\n")
                elif done == 4:
                    raise KeyboardInterrupt

            kwargs["progress"] = progress
        elif len(calls) == 2 and stopped_by == "a kill, then recover":
            raise KeyboardInterrupt  # killed before the rollback's first step
        else:  # the rollback: f1 is saved while it writes f0 back, after its look
            real_read = read_object

            def read_object(digest: str) -> Any:
                if not saved:  # once: as the rollback reads its first object
                    saved.append(1)
                    write(root, "f1", edit)
                return real_read(digest)

        return apply_plan(root_, plan, read_object, **kwargs)  # type: ignore[arg-type]

    with Workspace(root, seams=Seams(apply_plan=seam)) as ws:
        target = ws.snapshot().id
        for i in range(5):
            write(root, f"f{i}", f"v2 {i}\n")
        if stopped_by == "a conflict":
            result = ws.restore(target)
            assert not result.ok and result.conflict and result.rolled_back
        else:
            with pytest.raises(KeyboardInterrupt) as stopped:
                ws.restore(target)
            if stopped_by == "ctrl-c":
                assert "f1 (left as they are" in str(stopped.value), stopped.value
    if stopped_by == "a kill, then recover":
        assert (root / STORE / "journal.json").exists()
        code, _, err = cli("--root", str(root), "recover", seams=Seams(apply_plan=seam))
        assert code == 0, err
        assert "warning: f1 left as it is: it (or the directory holding it) was edited" in err
    assert len(calls) == 3 if stopped_by == "a kill, then recover" else len(calls) == 2
    assert saved and (root / "f1").read_text() == edit  # the newest edit wins, on disk
    assert [(root / f"f{i}").read_text() for i in (0, 2, 3)] == ["v2 0\n", "v2 2\n", "v2 3\n"]
    assert not (root / STORE / "journal.json").exists()
    if stopped_by == "a conflict":
        assert "f1" in result.blocked and result.edited == ["f1"]
        assert (root / "f4").read_text() == "edited meanwhile\n"
        # Not all as before, and said so (a review found "rolled back to how it was before").
        assert result.failure().endswith(
            "; the workspace was rolled back to how it was before, but for f1 (left as they "
            "are: in no snapshot)"
        ), result.failure()


def test_a_directory_a_rollback_removes_keeps_a_file_saved_into_it_meanwhile(root: Path) -> None:
    """The restore made `new/` and wrote `new/a`; its rollback removes both. A file saved
    into `new/` while it runs is in its way (`rmdir`: ENOTEMPTY): the rollback failed on
    it, the journal left for `recover`. It is an edit made meanwhile like any other: the
    directory stays with it, named as left as it is, and the rest goes back."""
    write(root, "new/a", "in the target\n")
    write(root, "zz", "v1\n")
    calls: list[int] = []

    def seam(root_: str, plan: object, read_object: Any, **kwargs: Any) -> Result:
        calls.append(1)
        if len(calls) == 1:

            def progress(done: int, total: int) -> None:
                if done == 2:  # `new/` and `new/a` made, `zz` not yet written
                    write(root, "zz", "edited meanwhile\n")

            kwargs["progress"] = progress
        else:
            write(root, "new/mine", "saved while the rollback ran\n")
        return apply_plan(root_, plan, read_object, **kwargs)  # type: ignore[arg-type]

    with Workspace(root, seams=Seams(apply_plan=seam)) as ws:
        target = ws.snapshot().id
        shutil.rmtree(root / "new")
        write(root, "zz", "v2\n")
        result = ws.restore(target)
    assert len(calls) == 2 and not result.ok and result.conflict and result.rolled_back
    assert result.edited == ["new"] and "new" in result.blocked
    assert sorted(os.listdir(root / "new")) == ["mine"]
    assert (root / "zz").read_text() == "edited meanwhile\n"
    assert not (root / STORE / "journal.json").exists()
