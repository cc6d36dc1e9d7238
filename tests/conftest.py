"""Shared helpers: build real trees and read back their exact state."""

from __future__ import annotations

import json
import os
import select
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zstandard

from worksnap.hash import read_file
from worksnap.paths import Digest
from worksnap.scan import Scan, WalkStats, scan_tree
from worksnap.tree import Split
from worksnap.workspace import Seams, Workspace

# Tests must not see the developer's git configuration or store override.
for _name in [n for n in os.environ if n.startswith("GIT_")] + [
    "WORKSNAP_STORE",
    "WORKSNAP_SESSION",
]:
    os.environ.pop(_name, None)
# Commands run in the test's own process (or the one it starts): a daemon started by
# itself on a big test tree would run them elsewhere (a kill -9 would miss it). The
# daemon's tests opt in (they drop this variable).
os.environ["WORKSNAP_NO_DAEMON"] = "1"


def write(root: Path, rel: str | bytes, data: bytes | str = b"", mode: int | None = None) -> Path:
    """Writes a file (creating parents); `rel` may be bytes for names that are not UTF-8."""
    path = Path(os.fsdecode(os.path.join(os.fsencode(root), os.fsencode(rel))))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def tree_state(root: Path, *, skip: tuple[str, ...] = (".worksnap",)) -> dict[bytes, object]:
    """Everything a restore or a rollback must reproduce, by raw path.

    File bytes, permission bits and link counts, symlink targets (never followed),
    and every directory with its permission bits, empty ones included.
    """
    state: dict[bytes, object] = {}
    base = os.fsencode(root)
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = os.path.relpath(dirpath, base)
        if rel_dir == b".":
            dirnames[:] = [d for d in dirnames if os.fsdecode(d) not in skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                with open(full, "rb") as f:
                    state[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_nlink, f.read())
    return state


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def packed(data: bytes) -> bytes:
    """`data` as worksnap stores manifests and caches: one zstd frame with size and checksum."""
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def unpacked(data: bytes) -> bytes:
    """What a store file holds, read with zstandard directly (not with worksnap's reader)."""
    assert data.startswith(ZSTD_MAGIC), data[:16]
    return zstandard.ZstdDecompressor().decompress(data)


def flip_middle(data: bytes) -> bytes:
    """`data` with one bit of its middle byte flipped."""
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0x01]) + data[mid + 1 :]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


SMALL_SPLIT = Split(over=4096, part_max=8192, mask=0xF)
"""Splits directories over 4 KiB into parts of about 16 children (1 name in 16 ends one),
so a test of a few hundred files reaches parts and index levels. The split is the
writer's choice alone: readers, walks and comparisons take any valid split
(docs/format.md), and tests/test_tree.py covers the real one with directories of tens
of thousands of entries."""


# -- seams: see what a workspace does, without patching worksnap --------------


def tick(root: Path) -> None:
    """Waits until the file system's clock has moved on (one timestamp tick, a few ms).

    After it, any change gets times newer than every time recorded before: what a
    test needs between caching a stat and changing the file, when the workspace's
    racy margin is 0. The probe file is made beside `root`, not in it.
    """
    probe = root.parent / ".tick-probe"
    probe.write_bytes(b"")
    first = probe.stat().st_ctime_ns
    while True:
        os.utime(probe)  # sets its ctime to the file system's now
        if probe.stat().st_ctime_ns != first:
            probe.unlink()
            return
        time.sleep(0.001)


class Hashes:
    """Records every file a workspace reads and hashes (through `Seams.read_file`).

    Its workspaces trust a file's cached digest as soon as its times are older than
    the scan (`racy_margin_ns`, 0 by default): nothing waits for the racy margin.
    """

    def __init__(self, *, racy_margin_ns: int = 0) -> None:
        self.paths: list[str] = []
        # (each capture walks: the caches of the walk are what is counted)
        self.seams = Seams(read_file=self._read_file, racy_margin_ns=racy_margin_ns,
                           last_capture=False)  # fmt: skip

    def _read_file(
        self, path: str | bytes, rel: str, *, keep: bool, dir_fd: int | None = None, **kw: Any
    ) -> tuple[Digest, bytes | None, os.stat_result]:
        self.paths.append(rel)
        return read_file(path, rel, keep=keep, dir_fd=dir_fd, **kw)

    def counted(self) -> list[str]:
        """Forgets what was hashed so far; returns the list the next reads go to."""
        self.paths.clear()
        return self.paths

    def open(self, root: Path, **options: Any) -> Workspace:
        return Workspace(root, seams=self.seams, **options)


class Walks:
    """Records what every scan of a workspace listed and matched (through `Seams.scan_tree`).

    Its workspaces have a racy margin of 0, like `Hashes`', and every capture walks.
    """

    def __init__(self) -> None:
        self.stats = WalkStats()
        self.seams = Seams(scan_tree=self._scan_tree, racy_margin_ns=0, last_capture=False)

    def _scan_tree(self, *args: Any, **kwargs: Any) -> Scan:
        return scan_tree(*args, stats=self.stats, **kwargs)

    def listed(self) -> list[str]:
        """Forgets what was listed so far; returns the list later listings go to."""
        self.stats.listed.clear()
        return self.stats.listed

    def matched(self) -> list[str]:
        """Forgets what was matched so far; returns the list later matches go to."""
        self.stats.matched.clear()
        return self.stats.matched

    def patched(self) -> list[str]:
        """Forgets what was patched so far; returns the list later patches go to."""
        self.stats.patched.clear()
        return self.stats.patched

    def restatted(self) -> bool:
        """Whether a walk since the last call stat-ed every file taken from memory again."""
        done, self.stats.restatted = self.stats.restatted, False
        return done

    def open(self, root: Path, **options: Any) -> Workspace:
        return Workspace(root, seams=self.seams, **options)


def run_cli(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str, str]:
    """Runs a command line in this process on `root`: (exit code, stdout, stderr)."""
    return run_here(capsys, "--root", str(root), *args)


def disk_fills_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    """Makes the `writes`-th `os.write` from now fail with ENOSPC (the OS boundary)."""
    real_write = os.write
    calls: list[int] = []

    def failing_write(fd: int, data: bytes | memoryview) -> int:
        calls.append(fd)
        if len(calls) == writes:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_write)


def run_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs a command line in this process as a shell in the current directory would."""
    from worksnap.cli import main

    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> object:
    """Runs `--json` and a command line in this process; asserts exit 0; the parsed output."""
    code, out, err = run_cli(capsys, root, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def terminal_output(
    controller: int, child: subprocess.Popen[bytes], *, answer: bytes | None = None
) -> tuple[bytes, bool]:
    """What a process showed on its pseudo-terminal (`controller`) until it closed it.

    With `answer`, it is typed once the `[y/N] ` question shows; a process that waits a
    minute showing nothing more is killed (a question that went where no one sees it).
    Returns what was shown and whether the answer was typed. Closes `controller`.
    """
    shown, asked = b"", False
    while True:
        if answer is not None and not asked and b"[y/N] " in shown:
            os.write(controller, answer)
            asked = True
        ready, _, _ = select.select([controller], [], [], 60)
        if not ready:
            if answer is not None:
                child.kill()
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    return shown, asked
