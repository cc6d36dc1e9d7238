"""Golden transcripts: every command's output, exit code and the store's files, byte for byte.

One deterministic scenario runs every command of the command line, plain and with
`--json`, including the error cases, and the transcript is compared with the
checked-in `tests/golden/cli.txt`; a second, smaller one records the store's files
(names and decoded contents) in `tests/golden/store.txt`. Only what is random by
design is replaced by a placeholder: snapshot ids (numbered in order of first
appearance, so which id is which still shows), pack names, times, ages, the
temporary directory, and the size of the store on disk (compressed files whose
content holds ids and times).

The scenario runs in real processes (`python -m worksnap`, slow) and in this process
(through `main`, for the quick loop); both must give the same transcript.

After a deliberate change of output, rewrite the files with
`WORKSNAP_UPDATE_GOLDEN=1 pytest tests/test_golden.py` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import zstandard

from tests.conftest import ZSTD_MAGIC
from worksnap.cli import main
from worksnap.paths import is_digest

GOLDEN = Path(__file__).parent / "golden"
SRC = str(Path(__file__).resolve().parent.parent / "src")
UPDATE = bool(os.environ.get("WORKSNAP_UPDATE_GOLDEN"))

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")
_PACK = re.compile(r"(?<![0-9a-f])[0-9a-f]{16}(?=\.(pack|idx))")
_REPOSITORY = re.compile(r'(?<="repository": ")[0-9a-f]{32}(?=")')  # a remote's random id
# The AGE column of `list` (right-aligned in 5, then two spaces and CHANGED).
_AGE = re.compile(r"(?m)^(<ID\d+>[* ] .*?)(?: {3}\d| {2}\d\d| \d{3}|\d{4})[smhd](  +(?:-|\d+)  )")
_AGO = re.compile(r"\b\d+[smhd] ago\b")
_STORE_BYTES = re.compile(
    r'("store_bytes": )\d+|(store on disk: )[\d.]+ (B|KiB|MiB)|(snapshots?, )[\d.]+ (B|KiB|MiB)'
    r"|(\()[\d.]+ (?:B|KiB|MiB)(?= freed\))"
)
"""Sizes on disk: a delta's size depends on the base it was made against, which depends
on which stat records a capture could trust (the racy margin: the machine's load). A gc's
freed bytes moved from 1.0 KiB to 1022 B on a loaded machine."""


class Normaliser:
    """Replaces what is random by design, keeping which id is which."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = [str(tmp), os.path.realpath(tmp)]
        self.ids: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        text = text.replace(sys.executable, "<PYTHON>")
        for prefix in sorted(set(self.tmp), key=len, reverse=True):
            text = text.replace(prefix, "<TMP>")
        text = _TIME.sub("<TIME>", text)
        text = _PACK.sub("<PACK>", text)
        text = _REPOSITORY.sub("<REPOSITORY>", text)
        text = _ID.sub(self._id, text)
        text = _AGE.sub(lambda m: f"{m.group(1)}<AGE>{m.group(2)}", text)
        text = _AGO.sub("<AGE> ago", text)
        return _STORE_BYTES.sub(
            lambda m: (m.group(1) or m.group(2) or m.group(4) or m.group(6)) + "<SIZE>", text
        )

    def _id(self, match: re.Match[str]) -> str:
        return self.ids.setdefault(match.group(0), f"<ID{len(self.ids) + 1}>")


class Recorder:
    """Runs commands (in a process or in this one) and records a normalised transcript."""

    def __init__(self, tmp: Path, *, in_process: bool, capfd: pytest.CaptureFixture[str]) -> None:
        self.tmp = tmp
        self.root = tmp / "ws"
        self.in_process = in_process
        self.capfd = capfd
        self.normalise = Normaliser(tmp)
        self.lines: list[str] = []
        home = tmp / "home"
        home.mkdir()
        # Nothing of the developer's git configuration or worksnap settings may leak in.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "WORKSNAP_"))}
        self.env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            GIT_CONFIG_NOSYSTEM="1",
            WORKSNAP_NO_DAEMON="1",
            PYTHONIOENCODING="utf-8",
            PYTHONPATH=SRC,
        )

    def note(self, text: str) -> None:
        """Records what the scenario does between commands."""
        self.lines.append(f"# {text}")

    def __call__(self, *args: str, root: Path | None = None) -> tuple[int, str, str]:
        """Runs `worksnap --root ROOT ARGS` and records its exit code, stdout and stderr."""
        argv = ["--root", str(root or self.root), *args]
        code, out, err = self._process(argv) if not self.in_process else self._here(argv)
        shown = " ".join(json.dumps(a) if not re.fullmatch(r"[\w:./=-]+", a) else a for a in args)
        if root is not None:
            shown = f"--root {root.name} {shown}"
        self.lines.append(self.normalise(f"$ worksnap {shown}"))
        self.lines.append(f"[exit {code}]")
        for name, text in (("stdout", out), ("stderr", err)):
            if text:
                self.lines.append(f"--- {name}")
                self.lines.extend(self.normalise(text).split("\n"))
        return code, out, err

    def _process(self, argv: list[str]) -> tuple[int, str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "worksnap", *argv],
            capture_output=True,
            env=self.env,
            cwd=self.tmp,
            timeout=120,
            check=False,
        )
        return done.returncode, _text(done.stdout), _text(done.stderr)

    def _here(self, argv: list[str]) -> tuple[int, str, str]:
        self.capfd.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = self.capfd.readouterr()
        return code, out, err

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The same environment for the in-process runs as the subprocesses get."""
    home = tmp_path / "home-here"
    home.mkdir()
    for name in [n for n in os.environ if n.startswith(("GIT_", "WORKSNAP_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("WORKSNAP_NO_DAEMON", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def put(root: Path, rel: str | bytes, data: str | bytes, mode: int = 0o644) -> None:
    """Writes a file with an exact mode (the scenario must not depend on the umask)."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def build_project(root: Path, outside: Path) -> None:
    root.mkdir()
    put(root, "README.md", "hello\n")
    put(root, "app.py", "print('v1')\n")
    put(root, "src/lib.py", "x = 1\ny = 2\nz = 3\n")
    put(root, "src/util.py", "def f():\n    return 1\n")
    put(root, "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
    put(root, "data.bin", b"\x00\x01binary\x00" * 8)
    put(root, ".gitignore", "*.log\nbuild/\n")
    put(root, "debug.log", "ignored\n")
    put(root, "build/out.o", "ignored dir\n")
    put(root, b"caf\xe9.txt", "not UTF-8\n")
    put(root, "tab\there.txt", "odd name\n")
    put(root, "big.dat", "B" * 5000)
    put(root, "secret/key", "never captured\n")
    (root / "empty").mkdir()
    os.symlink("app.py", root / "link")
    put(outside, "notes.txt", "notes for step 1\n")


def edit_project(root: Path) -> None:
    put(root, "app.py", "print('v2')\nprint('more')\n")
    (root / "README.md").unlink()
    put(root, "junk/x", "added\n")
    (root / "bin" / "run.sh").chmod(0o644)
    put(root, "src/lib.py", "x = 1\ny = 20\nz = 3\nw = 4\n")
    os.rename(root / "src" / "util.py", root / "src" / "helpers.py")
    (root / "empty").rmdir()
    put(root, "empty", "a file now\n")


def damage_an_object(store: Path, data: bytes) -> None:
    """Flips a byte of the stored object holding `data` (in its pack)."""
    for pack in sorted((store / "packs").glob("*.pack")):
        raw = pack.read_bytes()
        at = raw.find(data)
        if at >= 0:
            pack.write_bytes(raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :])
            return
    raise AssertionError("object not found")


def scenario(run: Recorder) -> None:
    root, outside = run.root, run.tmp / "outside"
    build_project(root, outside)
    run.note("a project with ignored files, odd names, a symlink, an empty dir")
    run("--version")
    run("list")
    run("--json", "list")
    run("status")
    run("plan", "latest")
    run("undo")
    run(
        "snapshot", "--step", "1", "--label", "first snapshot", "--meta", "owner=agent",
        "--attach", f"notes={outside / 'notes.txt'}", "--exclude", "secret",
        "--max-file-bytes", "4K",
    )  # fmt: skip
    run.note("the size cap is the store's now; back to the default")
    run("config")
    run("config", "--json")
    run("config", "max-file-bytes", "none")
    run("config", "max-file-bytes")
    run("config", "max-file-bites", "1M")
    run(
        "--json", "snapshot", "--step", "2", "--kind", "step", "--label", "second\nline two",
        "--exclude", "secret",
    )  # fmt: skip
    run("--session", "other", "snapshot", "--label", "in another session")
    run("--session", "other", "--json", "snapshot", "--step", "1")
    run("list")
    run("--json", "list")
    run("list", "--all")
    run("--json", "list", "--all")
    run("show", "step:1")
    run("--json", "show", "step:1")
    run("show", "latest")
    run("show", "step:1", "src", "link")
    run("cat", "step:1", "src/lib.py")
    run("cat", "step:1", "big.dat")
    run("cat", "step:1", "nope.txt")
    run("list", "--limit", "1")
    run("list", "--kind", "step", "--json")
    run("status", "--json")
    run("attachment", "step:1", "notes")

    run.note("edit: modify, delete, add, chmod, rename, dir to file")
    edit_project(root)
    run("plan", "step:2")
    run("--json", "plan", "step:2")
    run("plan", "step:2", "src", "junk")
    run("--json", "plan", "step:2", "app.py")
    run("restore", "step:2", "--dry-run")
    run("--json", "restore", "step:2", "--dry-run")
    run("plan", "latest", "--", "nothing-here")
    run("status")
    run("diff", "step:2")
    run("diff")
    run("diff", "step:2", "--", "src", "README.md")
    run("diff", "step:2", "--stat")
    run("diff", "step:2", "--numstat")
    run("--json", "diff", "step:2")
    run("diff", "step:1", "step:2", "--stat")
    run("--json", "diff", "step:1", "step:2")

    run("restore", "step:2", "no/such/path", "--yes")
    run("restore", "step:2", "--to", str(run.tmp / "copy"))
    run("--json", "restore", "step:1", "src", "--to", str(run.tmp / "copy2"))
    run("restore", "step:2", "--to", str(root / "inside"))
    run("restore", "step:2", "--to", str(run.tmp / "copy"))
    run("restore", "step:2", "--yes")
    run("plan", "step:2")
    run("list")
    run("plan", "latest")
    run("undo", "--dry-run")
    run("undo")
    run("redo", "--dry-run")
    run("redo")
    run("--json", "undo")
    run("--json", "redo")
    run("redo")
    run("--json", "redo")
    run("rewind", "1", "--yes")
    run("--json", "rewind", "2", "--yes")
    run("restore", "step:1", "app.py", "--yes")
    run("--json", "restore", "step:2", "--yes")
    run("list")

    run("verify")
    run("--json", "verify")
    run("verify", "step:1")
    run("recover")
    run("recover", "--dry-run")
    run("--json", "recover")

    run.note("a turn with a light checkpoint")
    run("begin", "--step", "5", "--label", "turn five")
    run("capture", "app.py", "new.txt", "src/lib.py")
    put(root, "app.py", "print('changed by the turn')\n")
    put(root, "new.txt", "created by the turn\n")
    run("--json", "capture", "app.py", "README.md")
    run("--json", "begin", "--step", "6", "--label", "turn six", "--meta", "k=v")
    run("--json", "capture", "src/lib.py")
    put(root, "src/lib.py", "changed in turn six\n")
    run("list")
    run("plan", "step:5")
    run("--json", "rewind", "6", "--yes")
    run("rewind", "5", "--yes")

    run.note("retention")
    run("pin", "step:1")
    run("--json", "pin", "step:2")
    run("unpin", "step:2")
    run("--json", "unpin", "step:2")
    run("du")
    run("--json", "du")
    run("gc", "--keep-last", "6", "--dry-run")
    run("gc", "--keep-last", "0")
    run("gc", "--keep-last", "6")
    run("--json", "gc", "--keep-last", "3")
    run("gc", "--drop-session", "other")
    run("list", "--all")
    run("du")
    run("gc")
    (root / ".worksnap" / "config.json").write_text('{"retention": {"keep_last": 2}}')
    run.note("config.json: keep_last 2")
    run("snapshot", "--label", "retention runs after it")
    run("list")
    run("--json", "gc")
    run("verify")

    run.note("run wraps a command")
    code = "print('hello from the command'); open('made.txt', 'w').write('x')"
    run("run", "--step", "7", "--", sys.executable, "-c", code)
    quiet = "import time; time.sleep(0.3)"  # the tree never changes: no settled snapshot
    run("--json", "run", "--every", "0.05", "--", sys.executable, "-c", quiet)
    run("run", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    run("list")

    run.note("a file over the cap goes")
    put(root, "huge.bin", "H" * 9000)
    run("config", "max-file-bytes", "8K")
    run("snapshot", "--step", "9", "--label", "huge.bin left out")
    (root / "huge.bin").unlink()
    run("plan", "step:9")
    run("--json", "plan", "step:9")
    run("config", "max-file-bytes", "none")

    run.note("a remote on a shared disk")
    (run.tmp / "remote").mkdir()
    remote = f"file://{run.tmp / 'remote'}"
    run("remote", "list")
    run("push")
    run("remote", "add", "origin", remote)
    run("--json", "remote", "add", "second", remote)
    run("remote", "list")
    run("remote", "list", "-v")
    run("--json", "remote", "list")
    run("push")
    run("push", "origin")
    run("remote", "remove", "second")
    run("--json", "remote", "remove", "second")
    run("--json", "push", "origin", "latest")
    run("pull")
    run("--json", "pull", "origin")
    run("verify", "--remote", "origin")
    run("--json", "verify", "--remote", "origin")
    run("remote", "gc", "origin", "--dry-run", "--keep-last", "1")
    run("--json", "remote", "gc", "origin")
    run("remote", "add", "creds", "s3://key:secret@bucket/prefix")
    run("remote", "add", "bad name", remote)
    run("remote", "add", "nowhere", f"file://{run.tmp / 'no-such-dir'}")
    run("pull", "origin", "zzzz")
    run("remote", "gc", "elsewhere")

    run.note("error cases")
    run("show", "nosuchref")
    run("show", "1")
    run("show", "zzz")  # not hex: no id can start so (a 4-hex prefix could)
    run("snapshot", "--kind", "pre-restore")
    run("snapshot", "--kind", "undo")
    run("--json", "show", "nosuchref")
    run("plan", "step:99")
    run("restore", "step:x", "--yes")
    run("rewind", "x")
    run("snapshot", "--step", "-1")
    run("--session", "bad name", "list")
    run("capture", "app.py")
    run("--session", "fresh", "undo")
    run("--session", "fresh", "redo")
    run("attachment", "step:1", "nope")
    run("run")
    run("run", "--", str(run.tmp / "no-such-command"))
    run("plan", "latest", "../outside")
    run("capture", ".git/config")
    run("gc", "--max-age", "bogus")
    run("daemon", "status")
    run("--json", "daemon", "status")
    run("daemon", "stop")
    (root / ".worksnap" / "config.json").write_text('{"retention": {"keep_lats": 2}}')
    run.note("config.json with a typo")
    run("snapshot")
    (root / ".worksnap" / "config.json").unlink()
    run("--root", str(run.tmp / "missing"), "list")
    put(root, "only-in-step-8.txt", "unique bytes for step 8\n")
    run("--json", "snapshot", "--step", "8")
    damage_an_object(root / ".worksnap", b"unique bytes for step 8\n")
    run.note("one stored object damaged")
    run("verify", "step:8")
    run("--json", "verify", "step:8")
    run("restore", "step:8", "--yes")

    run.note("the project moves")
    moved = run.tmp / "moved"
    shutil.move(root, moved)
    run("list", root=moved)
    run("rebind", root=moved)
    run("--json", "rebind", root=moved)
    run("list", root=moved)
    run("--json", "verify", "step:1", root=moved)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), text.splitlines(), "expected", "actual", lineterm=""
        )
        pytest.fail(f"{name} differs (WORKSNAP_UPDATE_GOLDEN=1 rewrites it):\n" + "\n".join(diff))


@pytest.mark.slow
def test_cli_transcript_in_processes(environment: Path, capfd: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder(environment, in_process=False, capfd=capfd)
    scenario(recorder)
    check("cli.txt", recorder.text())


def test_cli_transcript_in_this_process(
    environment: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    if UPDATE:
        pytest.skip("the files are written from the processes' run")
    recorder = Recorder(environment, in_process=True, capfd=capfd)
    scenario(recorder)
    check("cli.txt", recorder.text())


# -- the store on disk ---------------------------------------------------------


def store_scenario(run: Recorder) -> None:
    root = run.root
    root.mkdir()
    put(root, "a.txt", "alpha\n")
    put(root, "d/b.txt", "beta\n", 0o600)
    os.symlink("a.txt", root / "link")
    (root / "empty").mkdir()
    put(root, "big.bin", bytes(range(256)) * 4097)  # over 1 MiB: stored loose
    run("snapshot", "--step", "1", "--label", "one", "--attach", f"n={root / 'a.txt'}")
    put(root, "a.txt", "alpha, edited\n")
    run("--session", "s2", "snapshot", "--step", "2")
    run("snapshot", "--step", "2")
    run("--json", "undo")
    run("pin", "step:1")
    run("--session", "s2", "begin", "--step", "3")
    run("--session", "s2", "capture", "a.txt")
    run("--json", "list", "--all")  # names every snapshot, in order


def describe_store(store: Path, normalise: Normaliser) -> str:
    """Every file and folder of a store, and the decoded content of its metadata files.

    Pack names and snapshot ids are random, so the entries are sorted once those are
    replaced. The caches are checked, not listed: whether they are written at all depends
    on how long ago the files changed (the racy margin).
    """
    names: list[str] = []
    blocks: list[str] = []
    for path in store.rglob("*"):
        rel = path.relative_to(store).as_posix()
        if rel.startswith("cache/"):
            _check_cache(path, normalise)
            continue
        names.append(normalise(rel + ("/" if path.is_dir() else "")))
        if path.is_dir() or rel.startswith("objects/") or rel.endswith(".pack"):
            continue
        raw = path.read_bytes()
        lines = [normalise(f"== {rel}")]
        if raw.startswith(ZSTD_MAGIC):
            params = zstandard.get_frame_parameters(raw)
            content = zstandard.ZstdDecompressor().decompress(raw)
            lines.append(
                f"zstd frame: checksum {params.has_checksum}, "
                f"content size {params.content_size == len(content)}"
            )
            raw = content
        if rel.endswith(".idx"):
            tag, version, records = msgspec.msgpack.decode(raw)
            lines.append(f"{tag} {version}")
            lines.extend(
                f"{digest.hex()} {stored} {size} {base.hex() if base else '-'}"
                for digest, stored, size, base in records
            )
        else:
            lines.append(normalise(raw.decode("utf-8", "backslashreplace")).rstrip("\n"))
        blocks.append("\n".join(lines))
    return "\n".join([*sorted(names), "", *sorted(blocks)]) + "\n"


def _check_cache(path: Path, normalise: Normaliser) -> None:
    """`cache/stat` and `cache/dirs`: a checksummed zstd frame of msgpack [root, table].

    `cache/trees`: one of msgpack [version 1, root, table]; `cache/trees.log` and
    `cache/stat.log`: such frames of their base's shape, each after its length (4 bytes,
    big-endian). `cache/capture`: one of msgpack `lastcapture.LastCapture`.
    """
    raw = path.read_bytes()
    if path.name == "last.json":  # {session: [id, digest of the ids stored]}
        notes = msgspec.json.decode(raw)
        assert notes and all(is_digest(d) and len(i) == 12 for i, d in notes.values()), notes
        return
    frames = [raw]
    if path.name.endswith(".log"):
        frames = []
        while raw:
            length = int.from_bytes(raw[:4], "big")
            frames.append(raw[4 : 4 + length])
            raw = raw[4 + length :]
    for frame in frames:
        assert zstandard.get_frame_parameters(frame).has_checksum, path
        decoded = msgspec.msgpack.decode(zstandard.ZstdDecompressor().decompress(frame))
        if path.name == "capture":  # [1, key, witness, capture less entries, loose, bytes,
            # [[dir, stamp, .gitignore stamp, entry indexes, states]], entries]
            version, _, _, head, _, total, groups, entries = decoded
            assert version == 1, path
            assert normalise(head["root"]) == "<TMP>/ws", head
            files = sum(e["type"] == "file" for e in entries)
            assert head["entries"] == [] and files == sum(len(g[3]) for g in groups)
            assert total == sum(e["size"] for e in entries if e["type"] == "file")
            continue
        if path.name in ("trees", "trees.log"):
            version, *decoded = decoded
            assert version == 1, path
        cached_root, table = decoded
        assert normalise(cached_root) == "<TMP>/ws", cached_root
        assert isinstance(table, dict), path
    assert path.name in ("stat", "stat.log", "dirs", "trees", "trees.log", "capture"), path


@pytest.mark.slow
def test_store_files_in_processes(environment: Path, capfd: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder(environment, in_process=False, capfd=capfd)
    store_scenario(recorder)
    check("store.txt", recorder.text() + "\n" + describe_store(
        recorder.root / ".worksnap", recorder.normalise
    ))  # fmt: skip


def test_store_files_in_this_process(environment: Path, capfd: pytest.CaptureFixture[str]) -> None:
    if UPDATE:
        pytest.skip("the files are written from the processes' run")
    recorder = Recorder(environment, in_process=True, capfd=capfd)
    store_scenario(recorder)
    check("store.txt", recorder.text() + "\n" + describe_store(
        recorder.root / ".worksnap", recorder.normalise
    ))  # fmt: skip
