"""Guard rails: roots that must never be restored over, and a damaged store that stays usable."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tests.conftest import flip_middle, packed, unpacked
from tests.legacy import downgrade
from worksnap import InputError, Workspace
from worksnap.manifest import decode_manifest, encode_manifest

from .conftest import STORE, cli, tree_state, write


@pytest.mark.parametrize("command", ["snapshot", "list", "recover"])
def test_slash_is_refused_as_root_without_force(command: str) -> None:
    code, out, err = cli("--root", "/", command)
    assert (code, out) == (2, "")
    # (named as a root, not as a snapshot: `list` would snapshot nothing; review I 01)
    assert err == (
        "worksnap: error: refusing / as a workspace root: it is / or your home directory, "
        "and a snapshot would take all of it (pass --force if you really mean it)\n"
    )
    assert not os.path.exists("/" + STORE)


def test_home_is_refused_as_root_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    write(home, "notes.txt", "mine")
    monkeypatch.setenv("HOME", str(home))
    os.symlink(home, tmp_path / "via-link")
    for root in (home, tmp_path / "via-link", Path(str(home) + "/")):
        code, _, err = cli("--root", str(root), "snapshot")
        assert code == 2, err
        assert "home directory" in err
    assert not (home / STORE).exists()
    code, _, err = cli("--root", str(home), "--force", "snapshot")
    assert code == 0, err  # --force is the way to mean it
    assert (home / STORE).is_dir()


def test_slash_is_allowed_with_force_for_reading() -> None:
    code, _, err = cli("--root", "/", "--force", "--json", "list")
    assert code == 0, err


@pytest.mark.parametrize("where", ["the root", "above the root"])
def test_store_that_is_or_holds_the_root_is_refused(root: Path, where: str) -> None:
    write(root, "a.txt", "a")
    store = root if where == "the root" else root.parent
    before = tree_state(root, skip=())
    code, _, err = cli("--root", str(root), "--store", str(store), "snapshot")
    assert code == 2
    assert "must not be the root or contain it" in err
    assert tree_state(root, skip=()) == before
    with pytest.raises(InputError):
        Workspace(root, store=store)


@pytest.fixture
def two_snapshots(root: Path) -> tuple[Workspace, str, str]:
    write(root, "a.txt", "first\n")
    ws = Workspace(root)
    first = ws.snapshot(label="first").id
    write(root, "a.txt", "second\n")
    second = ws.snapshot(label="second").id
    ws.close()
    return ws, first, second


def _too_new(data: bytes) -> bytes:
    manifest = decode_manifest(data, "x")
    return encode_manifest(msgspec.structs.replace(manifest, version=99))


DAMAGE = {
    "truncated": lambda data: data[: len(data) // 3],
    "too new": _too_new,
    "not json": lambda data: b"\x00\xff garbage",
    "empty": lambda data: b"",
    "nested too deep": lambda data: b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


# A manifest is stored compressed: damage to its JSON (inside an intact frame) and damage
# to the frame itself are both refused.
MANIFEST_DAMAGE = {
    **{
        name: lambda raw, damage=damage: packed(damage(unpacked(raw)))
        for name, damage in DAMAGE.items()
    },
    "frame byte flipped": flip_middle,
    "frame truncated": lambda raw: raw[: len(raw) // 2],
}


RECORD_DAMAGE = {
    **DAMAGE,
    "too new": lambda data: data.replace(b'"version":2', b'"version":99', 1),
    "unknown field": lambda data: data[:-2] + b',"x":1}\n',
    "another id": lambda data: data.replace(b'"id":"', b'"id":"0', 1).replace(
        b'","root"', b'","root"', 1
    ),
}


@pytest.mark.parametrize("damage", RECORD_DAMAGE)
def test_damaged_record_breaks_neither_list_nor_other_restores(
    root: Path, two_snapshots: tuple[Workspace, str, str], damage: str
) -> None:
    _, first, second = two_snapshots
    path = root / STORE / "snapshots" / f"{second}.json"
    path.write_bytes(RECORD_DAMAGE[damage](path.read_bytes()))

    code, out, err = cli("--root", str(root), "--json", "list")
    assert code == 0, err
    assert {s["id"] for s in msgspec.json.decode(out)} == {first}
    assert f"snapshot {second}" in err
    assert "skipped" in err

    code, _, err = cli("--root", str(root), "restore", second, "--yes")
    assert code == 2
    assert f"manifest {second}" in err

    code, out, _ = cli("--root", str(root), "--json", "verify")
    report = msgspec.json.decode(out)
    assert code == 1
    assert len(report["problems"]) == 1
    assert second in report["problems"][0]

    code, _, err = cli("--root", str(root), "restore", first, "--yes")
    assert code == 0, err
    assert (root / "a.txt").read_text() == "first\n"


@pytest.mark.parametrize("damage", MANIFEST_DAMAGE)
def test_damaged_manifest_breaks_neither_list_nor_other_restores(
    root: Path, two_snapshots: tuple[Workspace, str, str], damage: str
) -> None:
    _, first, second = two_snapshots
    downgrade(root / STORE)  # a format 1 store, as an older worksnap left it
    path = root / STORE / "manifests" / f"{second}.json"
    path.write_bytes(MANIFEST_DAMAGE[damage](path.read_bytes()))

    code, out, err = cli("--root", str(root), "--json", "list")
    assert code == 0, err
    assert {s["id"] for s in msgspec.json.decode(out)} == {first, second}

    code, _, err = cli("--root", str(root), "restore", second, "--yes")
    assert code == 2
    assert f"manifest {second}" in err

    code, out, _ = cli("--root", str(root), "--json", "verify")
    report = msgspec.json.decode(out)
    assert code == 1
    assert len(report["problems"]) == 1
    assert second in report["problems"][0]

    code, _, err = cli("--root", str(root), "restore", first, "--yes")
    assert code == 0, err
    assert (root / "a.txt").read_text() == "first\n"


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_summary_is_reported_and_skipped_by_list(
    root: Path, two_snapshots: tuple[Workspace, str, str], damage: str
) -> None:
    _, first, second = two_snapshots
    downgrade(root / STORE)  # a format 1 store, as an older worksnap left it
    path = root / STORE / "summaries" / f"{second}.json"
    data = path.read_bytes()
    path.write_bytes(DAMAGE[damage](data) if damage != "too new" else data[:-1] + b',"x":1}')

    code, out, err = cli("--root", str(root), "--json", "list")
    assert code == 0, err
    listed = {s["id"] for s in msgspec.json.decode(out)}
    if damage == "too new":
        assert listed == {first, second}  # an unknown field is no damage
    else:
        assert listed == {first}
        assert f"snapshot {second}" in err
        assert "skipped" in err
    code, _, err = cli("--root", str(root), "restore", first, "--yes")
    assert code == 0, err


def test_a_directory_that_is_not_a_store_is_never_made_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review I 08: `--store .git` (stores do live in the git directory) made a store in
    git's own directory, and `gc` deleted every git object it found under `objects/`;
    `--store src` (for `--root src`) wrote `*` into `src/.gitignore`, so git ignored the
    sources. A directory holding anything no store holds is refused before any write."""
    import subprocess

    root = tmp_path / "project"
    write(root, "src/app.py", "print(1)\n")
    git = ["git", "-C", str(root), "-c", "user.name=n", "-c", "user.email=e@x"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    before = {p: p.read_bytes() for p in (root / ".git").rglob("*") if p.is_file()}
    for store, holds in [(root / ".git", "COMMIT_EDITMSG, HEAD, "), (root / "src", "app.py,")]:
        for command in (["snapshot"], ["config", "max-file-bytes", "1M"], ["begin"]):
            code, out, err = cli("--root", str(root), "--store", str(store), *command)
            assert (code, out) == (2, ""), (command, err)
            assert err.startswith(f"worksnap: error: refusing to make a store in {store}: it holds")
            assert holds in err and err.count("\n") == 1
    assert {p: p.read_bytes() for p in (root / ".git").rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(root / "src")) == ["app.py"]
    # What is a store's, or nothing at all, is taken as before.
    for store in (tmp_path / "new", tmp_path / "empty", root / ".git" / "worksnap"):
        if store.name == "empty":
            store.mkdir()
        code, _, err = cli("--root", str(root), "--store", str(store), "snapshot")
        assert code == 0, err
        (store / ".tmp-left-by-a-kill").write_bytes(b"")
        code, _, err = cli("--root", str(root), "--store", str(store), "snapshot")
        assert code == 0, err
    # A store's own name being written (`NAME.tmp-HEX`, by a first command running beside
    # this one, or left by one killed there) is a store's: two threads taking their first
    # snapshots at once had one refused, "it holds root.tmp-f1a4b480e4f3".
    killed = tmp_path / "killed"
    write(killed, "root.tmp-f1a4b480e4f3", "")
    code, _, err = cli("--root", str(root), "--store", str(killed), "snapshot")
    assert code == 0, err
    write(tmp_path / "other", "notes.tmp-f1a4b480e4f3", "")  # not a name of ours
    code, _, err = cli("--root", str(root), "--store", str(tmp_path / "other"), "snapshot")
    assert code == 2 and "it holds notes.tmp-f1a4b480e4f3" in err, err
