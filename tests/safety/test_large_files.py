"""Large files are hashed, stored, verified and restored in bounded pieces: memory stays flat.

Each command runs as a real process and its peak resident memory is read from the
kernel (`wait4`'s rusage): it must not grow with the file. A file of 512 MiB
(sparse, so it costs no disk until stored) would need over 512 MiB if it were
read whole, as `verify` and `restore` once did; the bound allows the interpreter
and a few MiB of buffers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_kill import SRC

pytestmark = pytest.mark.slow  # half a gigabyte through real processes

SIZE = 512 << 20
PEAK_LIMIT = 96 << 20
"""Far below SIZE; worksnap peaks near 30 MiB whatever the size (measured, 1 GiB)."""


LAUNCHER = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""
"""Runs a command and prints its exit code and peak RSS (KiB), from a process of its own.

A child's `ru_maxrss` starts at its parent's peak: exec records the peak of the memory
it replaces, and a child spawned with vfork replaces its parent's. Measured straight
from pytest, a command that stayed near 30 MiB showed pytest's 120 MiB late in a full
run (issue 11's #15: the suite must be deterministic). The launcher is a fresh small
interpreter, so what it passes on is its own few MiB."""


def peak_rss(*argv: str) -> tuple[int, int, str]:
    """Runs `argv`; returns its exit code, its own peak RSS in bytes, and its stderr."""
    launcher = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
        check=True,
    )
    code, kib = launcher.stdout.split()
    return int(code), int(kib) * 1024, launcher.stderr  # ru_maxrss is in KiB on Linux


def worksnap(*args: str) -> tuple[int, int, str]:
    """Runs worksnap; returns its exit code, its peak RSS in bytes, and its stderr."""
    return peak_rss(sys.executable, "-m", "worksnap", *args)


def test_the_peak_measured_is_the_commands_own_not_its_parents() -> None:
    """A parent holding more than the bound does not lend its peak to the command."""
    ballast = bytearray(PEAK_LIMIT + (32 << 20))
    for at in range(0, len(ballast), 4096):
        ballast[at] = 1  # touched: resident
    code, peak, err = peak_rss(sys.executable, "-c", "pass")
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"an empty interpreter measured {peak >> 20} MiB"
    assert len(ballast) > PEAK_LIMIT  # held until the measure is taken


def test_a_large_file_goes_through_every_stage_in_bounded_memory(root: Path) -> None:
    big = root / "big.bin"
    with open(big, "wb") as f:
        f.truncate(SIZE)
        f.seek(SIZE // 2)
        f.write(b"a few bytes that are not zero")
    args = ("--root", str(root))
    code, peak, err = worksnap(*args, "snapshot", "--max-file-bytes", str(2 * SIZE))
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"snapshot peaked at {peak >> 20} MiB"
    code, peak, err = worksnap(*args, "verify")
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"verify peaked at {peak >> 20} MiB"
    big.unlink()
    code, peak, err = worksnap(*args, "restore", "latest", "--yes")
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"restore peaked at {peak >> 20} MiB"
    assert big.stat().st_size == SIZE
    with open(big, "rb") as f:
        f.seek(SIZE // 2)
        assert f.read(29) == b"a few bytes that are not zero"
