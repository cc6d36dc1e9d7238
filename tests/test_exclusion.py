"""Exclusions as a runtime needs them: SQLite side files, globs, the store's config, restores."""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec
import pytest

from tests.conftest import tree_state, write
from worksnap import Workspace
from worksnap.cli import main
from worksnap.errors import InputError
from worksnap.exclusion import compile_rules, exclusion_root, rule_set


def paths_of(ws: Workspace) -> set[str]:
    return {e.path for e in ws.snapshot().entries}


def test_an_excluded_database_takes_its_side_files(tmp_path: Path) -> None:
    for name in ("events.db", "events.db-wal", "events.db-shm", "events.db-journal", "keep.db-x"):
        write(tmp_path, name, name)
    with Workspace(tmp_path, exclude=("events.db",)) as ws:
        assert paths_of(ws) == {"keep.db-x"}


def test_a_glob_matches_at_any_depth_and_anchored_only_at_the_top(tmp_path: Path) -> None:
    for name in (".agent-1.json", "sub/.agent-2.json", "sub/agent.json", "build/x.tmp",
                 "sub/build/y.tmp", "cache/a", "cache.txt"):  # fmt: skip
        write(tmp_path, name, "x")
    rules = (".agent-*.json", "/build/*.tmp", "cach[e]/")
    with Workspace(tmp_path, exclude=rules) as ws:
        assert paths_of(ws) == {"sub/agent.json", "sub/build/y.tmp", "cache.txt"}


def test_a_name_and_a_slash_is_a_directories_only_rule_at_any_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache/` was the path `cache` (top only): `sub/cache/f` was captured (revJ's review)."""
    for name in ("cache/a", "sub/cache/b", "sub/deep/cache/c", "other/cache", "cache.txt",
                 "keep/x", "top/keep/y"):  # fmt: skip
        write(tmp_path, name, "x")
    kept = {"other/cache", "cache.txt"}  # a file named cache is no directory
    with Workspace(tmp_path, exclude=("cache/", "keep/")) as ws:
        assert paths_of(ws) == kept
    assert main(["--root", str(tmp_path), "snapshot"]) == 0
    monkeypatch.chdir(tmp_path / "sub")  # a pattern is read from the root, wherever one is
    assert main(["config", "exclude", "add", "cache/", "keep/"]) == 0
    capsys.readouterr()
    assert main(["--json", "config", "exclude"]) == 0
    assert json.loads(capsys.readouterr().out)["exclude"] == ["cache/", "keep/"]
    with Workspace(tmp_path) as ws:
        assert paths_of(ws) == kept
    assert main(["config", "exclude", "remove", "cache/", "keep/"]) == 0


@pytest.mark.parametrize("rule", ["cache//", "sub/cache/", "./cache/"])
def test_a_path_with_another_slash_stays_a_path(tmp_path: Path, rule: str) -> None:
    """Only `name/` became a pattern: these name one path, as before (and `/cache/` in
    the store's config is the path `cache`, as every configured path is from the root)."""
    for name in ("cache/a", "sub/cache/b", "x/sub/cache/c"):
        write(tmp_path, name, "x")
    top = rule.strip("./") == "cache"
    expected = ({"sub/cache/b"} if top else {"cache/a"}) | {"x/sub/cache/c"}
    with Workspace(tmp_path, exclude=(rule,)) as ws:
        assert paths_of(ws) == expected
    with Workspace(tmp_path) as ws:
        configured = ["/" + rule.removeprefix("./")]
        ws.change_config(lambda c: msgspec.structs.replace(c, exclude=configured))
        assert paths_of(ws) == expected


def test_a_glob_takes_the_side_files_of_what_it_matches(tmp_path: Path) -> None:
    for name in ("a/t.sqlite", "a/t.sqlite-wal", "b/u.sqlite-journal", "c.txt"):
        write(tmp_path, name, "x")
    with Workspace(tmp_path, exclude=("*.sqlite",)) as ws:
        assert paths_of(ws) == {"c.txt"}


@pytest.mark.parametrize("bad", ["!*.db", "a\nb*", "", "../x"])
def test_a_rule_that_cannot_be_an_exclusion_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InputError):
        Workspace(tmp_path, exclude=(bad,))


def test_the_store_s_config_excludes_for_every_snapshot(tmp_path: Path) -> None:
    write(tmp_path, "notes.md", "n")
    write(tmp_path, "run/trace.jsonl", "t")
    root = str(tmp_path)
    assert main(["--root", root, "config", "exclude", "add", "*.jsonl", "--json"]) == 0
    with Workspace(tmp_path) as ws:
        assert paths_of(ws) == {"notes.md"}
        assert ws.snapshot().exclude == ["/*.jsonl"]
    config = json.loads(Path(Workspace(tmp_path).store_dir, "config.json").read_text())
    assert config["exclude"] == ["*.jsonl"]
    assert main(["--root", root, "config", "exclude", "remove", "*.jsonl"]) == 0
    with Workspace(tmp_path) as ws:
        assert paths_of(ws) == {"notes.md", "run/trace.jsonl"}


@pytest.mark.parametrize("watch", [False, True])
def test_a_long_lived_workspace_follows_a_config_change(tmp_path: Path, watch: bool) -> None:
    write(tmp_path, "a.log", "1")
    write(tmp_path, "b.txt", "2")
    with Workspace(tmp_path, watch=watch) as ws:
        assert paths_of(ws) == {"a.log", "b.txt"}
        assert main(["--root", str(tmp_path), "config", "exclude", "add", "*.log"]) == 0
        assert paths_of(ws) == {"b.txt"}
        write(tmp_path, "sub/c.log", "3")  # a new name, classified by the new rules
        assert main(["--root", str(tmp_path), "config", "exclude", "remove", "*.log"]) == 0
        assert paths_of(ws) == {"a.log", "b.txt", "sub/c.log"}


def test_config_exclude_lists_and_refuses_what_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path)
    assert main(["--root", root, "config", "exclude", "add", "a.db", "*.tmp"]) == 0
    assert main(["--root", root, "config", "exclude", "add", "a.db"]) == 0  # once only
    capsys.readouterr()
    assert main(["--root", root, "--json", "config", "exclude"]) == 0
    assert json.loads(capsys.readouterr().out)["exclude"] == ["a.db", "*.tmp"]
    assert main(["--root", root, "config", "exclude", "remove", "b.db"]) == 2
    assert "not in this store's config" in capsys.readouterr().err


def test_config_exclude_remove_reads_a_path_from_the_current_directory_as_add_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In sub/, `add local.txt` stored sub/local.txt and `remove local.txt` was refused."""
    write(tmp_path, "sub/local.txt", "x")
    write(tmp_path, "local.txt", "y")
    assert main(["--root", str(tmp_path), "snapshot"]) == 0
    monkeypatch.chdir(tmp_path / "sub")
    assert main(["config", "exclude", "add", "local.txt", "*.tmp"]) == 0
    assert main(["--root", str(tmp_path), "config", "exclude", "add", "local.txt"]) == 0
    assert main(["config", "exclude", "remove", "local.txt", "*.tmp"]) == 0
    capsys.readouterr()
    assert main(["--json", "config", "exclude"]) == 0
    assert json.loads(capsys.readouterr().out)["exclude"] == ["local.txt"]  # the top one stays
    assert main(["config", "exclude", "remove", "local.txt"]) == 2
    assert "'sub/local.txt' is not in this store's config" in capsys.readouterr().err


def test_a_restore_leaves_what_the_target_excluded_even_if_new(tmp_path: Path) -> None:
    write(tmp_path, "keep.txt", "v1")
    with Workspace(tmp_path, exclude=("*.tmp", "state.db")) as ws:
        target = ws.snapshot(step=1)
    write(tmp_path, "keep.txt", "v2")
    write(tmp_path, "new/scratch.tmp", "agent temp")  # appeared after, under no rule now
    write(tmp_path, "state.db-wal", "wal")
    with Workspace(tmp_path) as ws:  # today's settings exclude nothing
        result = ws.restore(target.id)
    assert result.ok
    assert (tmp_path / "keep.txt").read_text() == "v1"
    assert (tmp_path / "new/scratch.tmp").read_text() == "agent temp"
    assert (tmp_path / "state.db-wal").read_text() == "wal"


def test_a_restore_does_not_bring_back_what_is_excluded_now(tmp_path: Path) -> None:
    write(tmp_path, "trace/run.jsonl", "old trace")
    write(tmp_path, "app.py", "v1")
    with Workspace(tmp_path) as ws:
        target = ws.snapshot(step=1)
    (tmp_path / "trace/run.jsonl").unlink()
    write(tmp_path, "app.py", "v2")
    with Workspace(tmp_path, exclude=("*.jsonl",)) as ws:
        plan = ws.plan_restore(ws.load(target.id))
        assert [c.path for c in plan.changes] == ["app.py"]
        assert ws.apply(plan).ok
    assert not (tmp_path / "trace/run.jsonl").exists()
    assert (tmp_path / "app.py").read_text() == "v1"


def test_a_restore_keeps_a_directory_that_holds_an_excluded_file(tmp_path: Path) -> None:
    write(tmp_path, "a.txt", "a")
    with Workspace(tmp_path, exclude=("*.db",)) as ws:
        target = ws.snapshot()
        write(tmp_path, "d/x.db", "db")
        write(tmp_path, "d/y.txt", "y")
        before = tree_state(tmp_path, skip=(".worksnap",))
        result = ws.restore(target.id)
    assert result.ok, result.error
    after = tree_state(tmp_path, skip=(".worksnap",))
    assert after[b"d/x.db"] == before[b"d/x.db"]
    assert b"d/y.txt" not in after


def test_an_excluded_path_cannot_be_named_for_a_restore_or_a_checkpoint(tmp_path: Path) -> None:
    write(tmp_path, "a.db-wal", "w")
    with Workspace(tmp_path, exclude=("a.db", "*.log")) as ws:
        ws.snapshot()
        ws.begin(step=1)
        for name in ("a.db-wal", "x/y.log"):
            with pytest.raises(InputError, match="excluded"):
                ws.capture_before([name])


def test_excluded_by_pattern_is_recorded_in_the_manifest(tmp_path: Path) -> None:
    write(tmp_path, "x.tmp", "t")
    with Workspace(tmp_path, exclude=("*.tmp", "secret")) as ws:
        manifest = ws.snapshot()
    assert manifest.exclude == ["/*.tmp", "secret"]
    assert manifest.excluded == [".worksnap", "x.tmp"]


def test_compiled_rules_cover_parents_and_only_directories_for_a_slash() -> None:
    compiled = compile_rules(rule_set(["logs"], ["cache/", "*.db"]))
    assert compiled.covers("logs/a/b", is_dir=False)
    assert compiled.covers("x/cache/y", is_dir=False)
    assert not compiled.excludes("cache", is_dir=False)
    assert compiled.excludes("cache", is_dir=True)
    assert compiled.excludes("deep/er/v.db-shm", is_dir=False)
    assert not compiled.covers("logsx", is_dir=False)


def test_a_root_s_configured_path_rule_is_relative_to_the_root(tmp_path: Path) -> None:
    os.mkdir(tmp_path / "sub")
    root = exclusion_root(str(tmp_path), None, (), ["/sub/x.db", "y.db"])
    assert root.exclude == frozenset({"sub/x.db", "y.db"})
    with pytest.raises(InputError):
        exclusion_root(str(tmp_path), None, ("../outside",), [])


def test_a_file_added_since_is_removed_when_only_directories_are_excluded(
    tmp_path: Path,
) -> None:
    """Found by the property test: an added file was taken for a directory (`*/`)."""
    write(tmp_path, "keep.txt", "k")
    with Workspace(tmp_path, exclude=("*/",)) as ws:
        target = ws.snapshot()
        write(tmp_path, "added", "new file")
        write(tmp_path, "dir/inner", "excluded with its directory")
        assert ws.restore(target.id).ok
    assert not (tmp_path / "added").exists()
    assert (tmp_path / "dir/inner").read_text() == "excluded with its directory"
