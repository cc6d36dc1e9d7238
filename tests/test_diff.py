"""Diff between snapshots and the workspace: unified text, stats, renames."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap import Workspace
from worksnap.cli import main
from worksnap.diff import line_counts, unified


def test_diff_lists_changes_with_renames(root: Path) -> None:
    write(root, "kept.txt", "line 1\nline 2\nline 3\n")
    write(root, "old_name.py", "print('moved')\n")
    write(root, "removed.txt", "bye\n")
    write(root, "image.bin", b"\x00\x01\x02")
    ws = Workspace(root)
    snap = ws.snapshot()
    write(root, "kept.txt", "line 1\nline two\nline 3\nline 4\n")
    os.rename(root / "old_name.py", root / "new_name.py")
    (root / "removed.txt").unlink()
    write(root, "image.bin", b"\x00\x09")
    write(root, "added.txt", "hello\n")
    changes, read = ws.diff(snap.id)
    assert [(c.op, c.path, c.old_path) for c in changes] == [
        ("A", "added.txt", None),
        ("M", "image.bin", None),
        ("M", "kept.txt", None),
        ("R", "new_name.py", "old_name.py"),
        ("D", "removed.txt", None),
    ]
    by_path = {c.path: c for c in changes}
    assert line_counts(by_path["kept.txt"], read) == (2, 1)
    assert line_counts(by_path["image.bin"], read) is None
    text = unified(by_path["kept.txt"], read)
    assert "-line 2\n" in text and "+line two\n" in text and "+line 4\n" in text
    assert "Binary files a/image.bin and b/image.bin differ" in unified(by_path["image.bin"], read)
    assert "rename from old_name.py" in unified(by_path["new_name.py"], read)


def test_diff_between_two_snapshots(root: Path) -> None:
    write(root, "a.txt", "one\n")
    ws = Workspace(root)
    first = ws.snapshot()
    write(root, "a.txt", "two\n")
    second = ws.snapshot()
    write(root, "a.txt", "three (not in either snapshot)\n")
    changes, read = ws.diff(first.id, second.id)
    assert [(c.op, c.path) for c in changes] == [("M", "a.txt")]
    assert "+two\n" in unified(changes[0], read)


def test_cli_diff_stat_numstat_json(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(root, "a.txt", "1\n2\n")
    write(root, "b.bin", b"\x00")
    assert main(["--root", str(root), "snapshot"]) == 0
    write(root, "a.txt", "1\n2\n3\n")
    write(root, "b.bin", b"\x00\x01")
    capsys.readouterr()
    assert main(["--root", str(root), "diff", "latest", "--numstat"]) == 0
    assert capsys.readouterr().out.splitlines() == ["1\t0\ta.txt", "-\t-\tb.bin"]
    assert main(["--root", str(root), "diff", "latest", "--stat"]) == 0
    stat = capsys.readouterr().out
    assert "a.txt |    1 +" in stat and "b.bin | Bin" in stat
    assert "2 files changed, 1 insertion(+), 0 deletions(-)" in stat
    assert main(["--root", str(root), "--json", "diff", "latest"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0] == {
        "op": "M", "path": "a.txt", "from": None, "added": 1, "deleted": 0, "binary": False,
    }  # fmt: skip


def test_a_path_that_became_a_directory_is_never_a_rename_source(root: Path) -> None:
    """git applies a rename after what its patch creates below the source: keep them apart."""
    os.symlink("nowhere", root / "M")
    ws = Workspace(root)
    snap = ws.snapshot()
    (root / "M").unlink()
    (root / "M" / "c").mkdir(parents=True)
    os.symlink("nowhere", root / "M" / "c" / "link")  # the same link, one level down
    write(root, "M/b/f", "hi\n")
    changes, _ = ws.diff(snap.id)
    assert [(c.op, c.path, c.old_path) for c in changes] == [
        ("D", "M", None),
        ("A", "M/b/f", None),
        ("A", "M/c/link", None),
    ]


def test_cli_diff_stat_quotes_names_as_the_patch_does_and_says_nothing_of_no_change(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `diff --stat` quoted names as Python does ("bad\xffname") where the patch quotes
    # them as git does ("bad\377name"), and said " 0 files changed" where git says nothing.
    write(root, b"bad\xffname", "1\n")
    write(root, "tab\there", "1\n")
    write(root, "caf\u00e9", "1\n")
    assert main(["--root", str(root), "snapshot"]) == 0
    capsys.readouterr()
    assert main(["--root", str(root), "diff", "latest", "--stat"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["--root", str(root), "diff", "latest", "--numstat"]) == 0
    assert capsys.readouterr().out == ""
    for name in (b"bad\xffname", "tab\there", "caf\u00e9"):
        write(root, name, "2\n")
    assert main(["--root", str(root), "diff", "latest"]) == 0
    patch = capsys.readouterr().out
    quoted = ['"bad\\377name"', '"caf\\303\\251"', '"tab\\there"']
    for q in quoted:
        assert f'--- "a/{q[1:]}\n' in patch, (q, patch)
    assert main(["--root", str(root), "diff", "latest", "--numstat"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"1\t1\t{q}" for q in quoted]
    assert main(["--root", str(root), "diff", "latest", "--stat"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        *(f" {q:<13} |    2 +-" for q in quoted),
        " 3 files changed, 3 insertions(+), 3 deletions(-)",
    ]


def test_paths_after_the_refs_are_read_as_git_reads_them_without_dashdash(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`diff src/x.py` is the diff of that file since latest, as `git diff src/x.py` is.

    A git user types it without `--`; it was refused ("ref 'src/x.py' is too short",
    "unrecognized arguments"). A word that is both a ref and a path is refused, never
    guessed; with `--` it is read as before.
    """
    from tests.conftest import run_cli, run_here

    write(root, "src/x.py", "x = 1\n")
    write(root, "src/y.py", "y = 1\n")
    write(root, "top.txt", "top\n")
    ws = Workspace(root)
    first = ws.snapshot().id
    write(root, "src/x.py", "x = 2\n")
    write(root, "top.txt", "top 2\n")
    second = ws.snapshot().id
    write(root, "src/y.py", "y = 2\n")

    def changed(*args: str) -> list[str]:
        code, out, err = run_cli(capsys, root, "--json", "diff", *args)
        assert code == 0, err
        return [row["path"] for row in json.loads(out)]

    assert changed() == ["src/y.py"]
    assert changed("src/x.py") == []  # (the same since latest)
    assert changed("src/y.py", "top.txt") == ["src/y.py"]
    assert changed(first, "src") == ["src/x.py", "src/y.py"]
    assert changed(first, second, "top.txt") == ["top.txt"]
    assert changed(first, second, "--", "top.txt") == ["top.txt"]
    code, out, err = run_cli(capsys, root, "diff", first, "--numstat", "top.txt")  # (as git)
    assert (code, out) == (0, "1\t1\ttop.txt\n"), err
    monkeypatch.chdir(root / "src")  # found from the directory: paths are relative to it
    code, out, err = run_here(capsys, "--json", "diff", first, "y.py")
    assert (code, [row["path"] for row in json.loads(out)]) == (0, ["src/y.py"]), err

    # Refused in one line, nothing guessed: a file named like a ref, a third ref, neither.
    write(root, "latest", "a file\n")
    code, out, err = run_cli(capsys, root, "diff", "latest")
    assert (code, out) == (2, "")
    assert "'latest' is both a ref and a path: put the paths after `--`" in err
    assert changed("--", "latest") == ["latest"]
    assert changed("latest", "--") == ["latest", "src/y.py"]
    for args, said in [
        ((first, second, "latest~1"), "'latest~1' is a third REF (at most two)"),
        ((first, second, "latest~1", "--"), "'latest~1' before `--` is a third REF"),
        (("nosuchfile",), "no snapshot matches 'nosuchfile' (and no path is there"),
        ((first, "gone.txt"), "'gone.txt' is no ref and no path; paths go after `--`"),
    ]:
        code, out, err = run_cli(capsys, root, "diff", *args)
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert said in err
