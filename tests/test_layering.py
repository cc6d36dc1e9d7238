"""The module layout holds: imports only go down, no circles, one owner of the store's names.

Every import of every module counts: at module level, inside functions, and under
`TYPE_CHECKING`. docs/design.md draws the same levels.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "worksnap"
TESTS = Path(__file__).resolve().parent

LEVELS: dict[str, int] = {
    # 0: no knowledge of snapshots; paths, bytes, files, names
    "errors": 0,
    "stopsignals": 0,
    "paths": 0,
    "fanotify": 0,
    "mounts": 0,
    "layout": 0,
    "fsio": 0,
    "hash": 0,
    "frames": 0,
    "progress": 0,
    "gitindex": 0,
    "storedir": 0,
    "storeplace": 0,
    "packcodec": 0,
    "objectindex": 0,
    "multipack": 0,
    "packsweep": 0,
    "damagedcopies": 0,
    # the remote's transports: bytes under keys, conditional writes; nothing of snapshots
    "remote": 0,
    "remote.transport": 0,
    "remote.aws": 0,
    "remote.directory": 0,
    "remote.s3": 0,
    "remote.backends": 0,
    # 1: the records and the settings
    "manifest": 1,
    "config": 1,
    "tree": 1,
    "treewalk": 1,
    "treeshape": 1,
    "flatbuild": 1,
    "treebuild": 2,
    "record": 1,
    "remote.formats": 1,
    "remote.packs": 1,
    # 2: one mechanism each
    "store": 2,
    "diskstore": 2,
    "diskformat1": 2,
    "diskrecords": 2,
    "memstore": 2,
    "caches": 2,
    "lock": 2,
    "ignore": 2,
    "sources": 2,
    "exclusion": 2,
    "watch": 2,
    "scan": 2,
    "scanparts": 2,
    "carry": 2,
    "lastcapture": 2,
    "written": 2,
    "audit": 2,
    "differences": 2,
    "plan": 2,
    "journal": 2,
    "apply": 2,
    "retention": 2,
    "history": 2,
    "diff": 2,
    "remote.repository": 2,
    "remote.indexcache": 2,
    "remote.treereader": 2,
    # 3: one responsibility each, built from the mechanisms
    "capture": 3,
    "catalog": 3,
    "verifying": 3,
    "migration": 3,
    "transaction": 3,
    "checkpoints": 3,
    "maintenance": 3,
    "extract": 3,
    "remote.sync": 3,
    "remote.local": 3,
    "remote.gc": 3,
    # 4: the API
    "workspace": 4,
    "session": 4,
    # 5: front ends
    "views": 5,
    "runwrap": 5,
    "arguments": 5,
    "cmdpaths": 5,
    "output": 5,
    "invocation": 5,
    "cli": 5,
    "restoring": 5,
    "inspection": 5,
    "completion": 5,
    "daemon": 5,
    "client": 5,
    "clientctx": 5,
    "autostart": 5,
    "hooks": 5,
    "agentcli": 5,
    "remotecli": 5,
    "mcpserver": 5,
    "__main__": 5,
    "__init__": 5,
}

# Names of files and folders inside a store. Only layout.py may spell them.
STORE_NAMES = {
    ".worksnap", "journal.json", "pins.json", "config.json", "daemon.sock", "daemon.log",
    "lock.holder", "packs", "manifests", "summaries", "generation", "cache", "damaged-copies",
    ".pack", ".idx", ".json", ".tmp-",
}  # fmt: skip
# Words that are store names only where a path is built from them ("root" is also a
# JSON key, "objects" a gc count, "dirs" a manifest field, ...).
PATH_WORDS = {"root", "objects", "sessions", "dirs", "stat", "lock"}
_PATH_CALLS = {
    "join", "Path", "open", "stat", "lstat", "unlink", "makedirs", "listdir", "exists",
    "isdir", "write_atomic", "rmdir", "mkdir", "replace", "rename",
}  # fmt: skip


def modules() -> dict[str, Path]:
    """Every module by dotted name below `worksnap` (a package's `__init__` by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if len(parts) > 1 and parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _module_of(dotted: list[str], names: set[str]) -> str:
    """The longest prefix of `dotted` (below `worksnap`) that names a module."""
    for end in range(len(dotted), 0, -1):
        if ".".join(dotted[:end]) in names:
            return ".".join(dotted[:end])
    return "__init__"


def imported(module: str, path: Path) -> set[str]:
    """The worksnap modules `module` imports, anywhere in it."""
    names = set(modules())
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "worksnap":
                    found.add(_module_of(parts[1:], names))
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            parts = node.module.split(".")
            if parts[0] != "worksnap" or node.level:
                continue
            # from worksnap[.package] import x: x is a module, or a name of that module
            found.update(_module_of([*parts[1:], a.name], names) for a in node.names)
    found.discard(module)
    return found


def graph() -> dict[str, set[str]]:
    return {name: imported(name, path) for name, path in modules().items()}


def test_every_module_has_a_level() -> None:
    assert set(modules()) == set(LEVELS), "add new modules to LEVELS (and to docs/design.md)"


def test_imports_only_go_down() -> None:
    upward = [
        f"{module} (level {LEVELS[module]}) imports {target} (level {LEVELS[target]})"
        for module, targets in graph().items()
        for target in sorted(targets)
        if LEVELS[target] > LEVELS[module]
    ]
    assert upward == []


def test_no_import_circles() -> None:
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                circles.append([*trail[trail.index(target) :], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_client_loads_only_the_layout_and_the_signal_names() -> None:
    """The daemon's client runs on every command: the engine is imported only when needed.

    `stopsignals` imports only C modules (`_signal`, `_thread`): the client names a
    signal as a command without a daemon does.
    """
    tree = ast.parse((SRC / "client.py").read_text())
    at_load: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("worksnap"):
            at_load.add(node.module or "")
        elif isinstance(node, ast.Import):
            at_load.update(a.name for a in node.names if a.name.startswith("worksnap"))
    assert at_load == {"worksnap.layout", "worksnap.stopsignals"}


def test_the_client_imports_nothing_it_does_not_need(tmp_path: Path) -> None:
    """No argparse, msgspec, json, re, typing, dataclasses or hashlib: a forwarded command
    stays cheap, also when it finds its store from a subdirectory of a git work tree
    (`layout.locate` walks up, and names a store below the top with a hash)."""
    import subprocess
    import sys

    (tmp_path / "proj" / ".git" / "worksnap" / "manifests").mkdir(parents=True)
    (tmp_path / "proj" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    deep = tmp_path / "proj" / "src" / "pkg"
    deep.mkdir(parents=True)
    script = (
        "import sys, worksnap.client as c; found = c.forwardable(['list']); "
        "print(*sorted(sys.modules)); print(found[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True, text=True, check=True, cwd=deep,
        env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    modules, store = done.stdout.splitlines()
    assert store == str(tmp_path / "proj" / ".git" / "worksnap")  # it did walk up
    loaded = set(modules.split())
    heavy = {"argparse", "msgspec", "json", "re", "typing", "socket", "enum", "worksnap.cli",
             "dataclasses", "hashlib", "_hashlib", "inspect"}  # fmt: skip
    assert loaded & heavy == set()
    assert {m for m in loaded if m.startswith("worksnap")} == {
        "worksnap", "worksnap.client", "worksnap.layout", "worksnap.stopsignals"
    }  # fmt: skip


# -- the store's names --------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (of modules, classes, functions, fields)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for child in body if isinstance(body, list) else []:
            if (
                isinstance(child, ast.Expr)
                and isinstance(child.value, ast.Constant)
                and isinstance(child.value.value, str)
            ):
                found.add(id(child.value))
    return found


def _builds_a_path(parent: ast.AST, node: ast.AST) -> bool:
    """True when `node` is an argument of a call that takes paths, or a `/` operand."""
    if isinstance(parent, ast.Call) and node in parent.args:
        func = parent.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _PATH_CALLS
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div)


def store_names_in(source: str) -> Iterator[tuple[int, str]]:
    """Yields (line, name) for each store file or folder name the code spells."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    for parent in ast.walk(tree):
        for node in ast.iter_child_nodes(parent):
            if not isinstance(node, ast.Constant) or id(node) in docs:
                continue
            value = node.value.decode("utf-8", "replace") if isinstance(node.value, bytes) else None
            value = node.value if isinstance(node.value, str) else value
            if value is None:
                continue
            parts = set(value.split("/")) if "/" in value else set()
            if (
                value in STORE_NAMES
                or parts & (STORE_NAMES | PATH_WORDS)
                or (value in PATH_WORDS and _builds_a_path(parent, node))
            ):
                yield node.lineno, value


def test_only_the_layout_spells_the_store_s_names() -> None:
    spelled = [
        f"{name}.py:{line}: {value!r}"
        for name, path in modules().items()
        if name != "layout"
        for line, value in store_names_in(path.read_text())
    ]
    assert spelled == [], "ask layout.StorePaths instead"


def test_the_layout_spells_every_name() -> None:
    found = {value for _, value in store_names_in((SRC / "layout.py").read_text())}
    assert found >= STORE_NAMES | PATH_WORDS  # the check above is not vacuous


@pytest.mark.parametrize(
    ("code", "spelled"),
    [
        ('os.path.join(store, "root")', True),
        ('Path(store) / "objects"', True),
        ('open(os.path.join(d, "cache", "stat"), "rb")', True),
        ('PATH = "a/sessions/x"', True),
        ('NAME = "journal.json"', True),
        ('f"{snapshot_id}.json"', True),
        ('x = b".worksnap"', True),
        ('{"root": root, "snapshots": count}', False),
        ('view["objects"] = 3', False),
        ('if field == "dirs": pass', False),
        ('def f():\n    """Reads <store>/journal.json and packs/."""', False),
        ('TMP = b".worksnap-"', False),
    ],
)
def test_the_name_check_itself(code: str, spelled: bool) -> None:
    assert bool(list(store_names_in(code))) is spelled


# -- tests use seams, not patches of worksnap ----------------------------------


def _worksnap_names(tree: ast.AST) -> set[str]:
    """The names a test module binds to worksnap modules and their classes or functions."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "worksnap":
                    bound.add(alias.asname or "worksnap")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("worksnap"):
            bound.update(alias.asname or alias.name for alias in node.names)
    return bound


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches_of_worksnap(source: str) -> Iterator[str]:
    """Yields each `setattr` that patches worksnap, and each script that reaches inside it."""
    tree = ast.parse(source)
    ours = _worksnap_names(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setattr", "delattr")
            and node.args
        ):
            target = node.args[0]
            named = target.value if isinstance(target, ast.Constant) else None
            if (isinstance(named, str) and named.startswith("worksnap")) or (
                _root_name(target) in ours
            ):
                yield f"line {node.lineno}: patches {ast.unparse(target)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            script = node.value
            if "worksnap" in script and "import" in script:
                try:
                    inner = ast.parse(script)
                except SyntaxError:
                    continue
                inner_ours = _worksnap_names(inner)
                for sub in ast.walk(inner):
                    if (
                        isinstance(sub, ast.Attribute)
                        and _root_name(sub) in inner_ours
                        and (sub.attr.startswith("_") or isinstance(sub.ctx, ast.Store))
                    ):
                        yield f"line {node.lineno}: a script reaches {ast.unparse(sub)}"


def test_no_test_patches_worksnap() -> None:
    found = [
        f"{path.relative_to(TESTS)}: {what}"
        for path in sorted(TESTS.rglob("*.py"))
        for what in patches_of_worksnap(path.read_text())
    ]
    assert found == [], "inject a seam (workspace.Seams, a constructor parameter) instead"


@pytest.mark.parametrize(
    ("code", "patched"),
    [
        ('import worksnap.workspace\nmonkeypatch.setattr(worksnap.workspace, "x", 1)', True),
        ('from worksnap import scan\nmonkeypatch.setattr(scan, "_classify", f)', True),
        ('from worksnap.store import DiskStore\npatch.setattr(DiskStore, "add", f)', True),
        ('monkeypatch.setattr("worksnap.hash._CHUNK", 16)', True),
        ('S = """\nimport worksnap.workspace as W\nW.apply_plan = f\n"""', True),
        ('S = """\nfrom worksnap import daemon\ndaemon._peer_uid(s)\n"""', True),
        ('import os\nmonkeypatch.setattr(os, "rename", f)', False),
        ('monkeypatch.setattr("builtins.input", f)', False),
        ('S = """\nfrom worksnap.workspace import Seams, Workspace\nWorkspace(r)\n"""', False),
    ],
)
def test_the_patch_check_itself(code: str, patched: bool) -> None:
    assert bool(list(patches_of_worksnap(code))) is patched


def test_no_module_grows_into_a_god_object() -> None:
    """The facade stays thin and every other module holds one responsibility."""
    limits = {"workspace": 699}  # issue 10: under 700
    too_long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text().splitlines())) > limits.get(name, 600)
    }
    assert too_long == {}
