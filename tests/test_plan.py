"""Table tests of the planner: plan_restore and select_paths on in-memory manifests.

No file is touched: each case is two trees (the workspace now, the snapshot) and the
changes a restore must make, as (op, path, was a directory now).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.trees import Spec, tree
from worksnap.paths import ancestors, under_any
from worksnap.plan import Op, Plan, _Sorted, plan_restore, rollback_target, select_paths

Changes = list[tuple[str, str, bool]]


def never_ignored(path: str, is_dir: bool) -> bool:
    return False


def changes(plan: Plan) -> Changes:
    return [(c.op.value, c.path, c.was_dir) for c in plan.changes]


# (now, then, options for both trees, expected changes)
PLANS: dict[str, tuple[dict[str, Spec], dict[str, Spec], dict[str, object], Changes]] = {
    "same tree": ({"a": "1", "d/b": "2"}, {"a": "1", "d/b": "2"}, {}, []),
    "content": ({"a": "new"}, {"a": "old"}, {}, [("M", "a", False)]),
    "mode": ({"a": ("file", "x", 0o755)}, {"a": ("file", "x", 0o644)}, {}, [("M", "a", False)]),
    "link target": ({"l": ("link", "x")}, {"l": ("link", "y")}, {}, [("M", "l", False)]),
    "file to link": ({"l": "text"}, {"l": ("link", "text")}, {}, [("M", "l", False)]),
    "added file": ({"a": "1", "b": "2"}, {"a": "1"}, {}, [("A", "b", False)]),
    "deleted file": ({"a": "1"}, {"a": "1", "b": "2"}, {}, [("D", "b", False)]),
    "added dir": (
        {"a": "1", "d/x": "x", "d/e/y": "y"},
        {"a": "1"},
        {},
        [("A", "d", True), ("A", "d/e", True), ("A", "d/e/y", False), ("A", "d/x", False)],
    ),
    "deleted dir": ({}, {"d/x": "x"}, {}, [("D", "d", False), ("D", "d/x", False)]),
    "empty dir added": ({"e": "/"}, {}, {}, [("A", "e", True)]),
    "empty dir deleted": ({}, {"e": "/"}, {}, [("D", "e", False)]),
    "file now, dir then": (
        {"d": "file"},
        {"d/x": "x"},
        {},
        [("M", "d", False), ("D", "d/x", False)],
    ),
    "dir now, file then": (
        {"d/x": "x"},
        {"d": "file"},
        {},
        [("M", "d", True), ("A", "d/x", False)],
    ),
    "ignored now is never touched": (
        {"a": "1"},
        {"a": "1", "build/out": "o"},
        {"ignored": ("build",)},
        [],
    ),
    "large is never touched": ({"big": "now"}, {"big": "then"}, {"large": ("big",)}, []),
    "below an exclusion is never touched": (
        {"secret/k": "now"},
        {},
        {"excluded": ("secret",)},
        [],
    ),
    "a dir of ignored files where a file was is blocked": (
        {"build/main.o": "o", "build/notes": "n"},
        {"build": "file"},
        {"ignored": ("build/main.o",)},
        [("B", "build", True), ("A", "build/notes", False)],
    ),
    "a dir holding a large file where a link was is blocked": (
        {"l/big": "b"},
        {"l": ("link", "x")},
        {"large": ("l/big",)},
        [("B", "l", True)],
    ),
    "a dir keeps what is protected below it": (
        {"d/a": "1", "d/b.log": "log"},
        {},
        {"ignored": ("d/b.log",)},
        [("A", "d/a", False)],
    ),
}


@pytest.mark.parametrize("case", PLANS)
def test_plan_restore(case: str) -> None:
    now, then, options, expected = PLANS[case]
    plan = plan_restore(
        tree(now, **options),  # type: ignore[arg-type]
        tree(then, snapshot_id="111111111111", **options),  # type: ignore[arg-type]
        ignored_by_target=never_ignored,
    )
    assert changes(plan) == expected
    assert plan.target.id == "111111111111"
    assert [c.path for c in plan.changes] == sorted(c.path for c in plan.changes)


def test_plan_restore_keeps_what_the_target_s_rules_ignore() -> None:
    """A restore of an older .gitignore never turns files it ignores into deletions."""
    now = tree({".gitignore": "", "x.log": "log", "keep/y.log": "y", "a": "1"})
    then = tree({".gitignore": "*.log\n", "a": "1"}, snapshot_id="111111111111")

    def logs(path: str, is_dir: bool) -> bool:
        return path.endswith(".log")

    plan = plan_restore(now, then, ignored_by_target=logs)
    # keep/ holds only an ignored file: it stays, as that file does.
    assert changes(plan) == [("M", ".gitignore", False)]


def test_plan_restore_entries_are_the_target_s() -> None:
    now, then = tree({"a": "new", "b": "gone"}), tree({"a": "old", "c": "back"})
    plan = plan_restore(now, then, ignored_by_target=never_ignored)
    by_path = {c.path: c for c in plan.changes}
    assert by_path["a"].entry == then.entries[0]
    assert by_path["b"].entry is None
    assert by_path["c"].entry == then.entries[1]
    assert plan.counts() == {"M": 1, "A": 1, "D": 1, "B": 0}


# -- select_paths ----------------------------------------------------------------

NOW: dict[str, Spec] = {"src/a.py": "a2", "src/new.py": "n", "junk/x": "x", "top": "t2"}
THEN: dict[str, Spec] = {"src/a.py": "a1", "lib/b.py": "b", "top": "t1"}

SELECTIONS: dict[str, tuple[list[str], Changes]] = {
    "one file": (["top"], [("M", "top", False)]),
    "a directory and below": (["src"], [("M", "src/a.py", False), ("A", "src/new.py", False)]),
    "a deleted file recreates its directory": (
        ["lib/b.py"],
        [("D", "lib", False), ("D", "lib/b.py", False)],
    ),
    "a removal stays inside the selection": (["junk/x"], [("A", "junk/x", False)]),
    "the whole removal when all of it is selected": (
        ["junk"],
        [("A", "junk", True), ("A", "junk/x", False)],
    ),
    "several paths": (
        ["top", "src/a.py"],
        [("M", "src/a.py", False), ("M", "top", False)],
    ),
    "nothing there": (["elsewhere"], []),
}


@pytest.mark.parametrize("case", SELECTIONS)
def test_select_paths(case: str) -> None:
    paths, expected = SELECTIONS[case]
    plan = plan_restore(tree(NOW), tree(THEN), ignored_by_target=never_ignored)
    selected = select_paths(plan, paths)
    assert changes(selected) == expected
    assert (selected.target, selected.current) == (plan.target, plan.current)
    assert all(c.op in Op for c in selected.changes)


def test_select_paths_never_replaces_a_directory_above_the_selection() -> None:
    """The snapshot has a file where a directory now holds more than what was selected.

    The file is not a parent to make: replacing the directory would remove what was
    not selected (the chaos test found `rmdir: Directory not empty`).
    """
    plan = plan_restore(
        tree({"x/a": "1", "x/b": "2"}), tree({"x": "file"}), ignored_by_target=never_ignored
    )
    assert changes(plan) == [("M", "x", True), ("A", "x/a", False), ("A", "x/b", False)]
    assert changes(select_paths(plan, ["x/a"])) == [("A", "x/a", False)]
    assert changes(select_paths(plan, ["x"])) == changes(plan)


# -- rollback_target ---------------------------------------------------------------

# (now, pre, touched, expected): the state a rollback of a restore that touched those
# paths aims at. What the restore did not touch stays as it is now.
ROLLBACKS: dict[str, tuple[dict[str, Spec], dict[str, Spec], list[str], dict[str, Spec]]] = {
    "untouched edits stay": (
        {"a": "restored", "b": "edited later"},
        {"a": "before", "b": "before"},
        ["a"],
        {"a": "before", "b": "edited later"},
    ),
    "what the restore made goes": ({"x": "made"}, {}, ["x"], {}),
    "a dir the restore made stays for what was added in it later": (
        {"d/x": "made", "d/later": "new"},
        {},
        ["d", "d/x"],
        {"d/later": "new"},
    ),
    "a dir the restore made goes when nothing else is in it": (
        {"d/x": "made", "d/e": "/"},
        {},
        ["d", "d/e", "d/x"],
        {},
    ),
    "a file where a dir was": ({"p": "file"}, {"p/x": "x"}, ["p", "p/x"], {"p/x": "x"}),
    "a dir where a file was: what is in the way goes": (
        {"p/x": "made", "p/later": "new"},
        {"p": "file"},
        ["p", "p/x"],
        {"p": "file"},
    ),
    "a parent replaced by a file later is made a dir again": (
        {"d": "a file, later"},
        {"d/a": "a"},
        ["d/a"],
        {"d/a": "a"},
    ),
    "a link set back": (
        {"l": ("link", "new")},
        {"l": ("link", "old")},
        ["l"],
        {"l": ("link", "old")},
    ),
    "nothing touched": ({"a": "now"}, {"a": "before"}, [], {"a": "now"}),
}


@pytest.mark.parametrize("case", ROLLBACKS)
def test_rollback_target(case: str) -> None:
    now, pre, touched, expected = ROLLBACKS[case]
    aim = rollback_target(tree(now), tree(pre, snapshot_id="222222222222"), touched)
    wanted = tree(expected)
    assert (aim.entries, aim.dirs, aim.tree) == (wanted.entries, wanted.dirs, wanted.tree)
    assert aim.id == "222222222222"


_NAMES = st.sampled_from(["a", "a-b", "a.b", "a!", "b", "ab", "a b", "\u00e9"])


@given(st.sets(st.lists(_NAMES, min_size=1, max_size=4).map("/".join)),
       st.lists(_NAMES, min_size=1, max_size=3).map("/".join))  # fmt: skip
def test_whether_a_path_lies_below_a_directory_is_found_by_bisection(
    paths: set[str], directory: str
) -> None:
    """The planner's `_Sorted.any_below` (sorted on first use, bisect) agrees with every
    path's parents."""
    parents = {a for p in paths for a in ancestors(p.rpartition("/")[0])}
    assert _Sorted(lambda: paths).any_below(directory) == (directory in parents)


@given(st.sets(st.lists(_NAMES, min_size=1, max_size=4).map("/".join)),
       st.lists(_NAMES, min_size=1, max_size=5).map("/".join))  # fmt: skip
def test_whether_a_path_is_at_or_below_one_of_some_paths_agrees_with_its_ancestors(
    paths: set[str], path: str
) -> None:
    """`under_any`, the planner's loop, says what `any` over `ancestors` says (names that
    sort between a directory and its children included: `a-b`, `a.b`, `a!`)."""
    assert under_any(path, paths) == any(a in paths for a in ancestors(path))
