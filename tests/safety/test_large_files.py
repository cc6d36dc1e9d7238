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


def peak_rss(*args: str) -> tuple[int, int, str]:
    """Runs worksnap; returns its exit code, its peak RSS in bytes, and its stderr."""
    child = subprocess.Popen(
        [sys.executable, "-m", "worksnap", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )
    assert child.stderr is not None
    err = child.stderr.read().decode()
    child.stderr.close()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss * 1024, err  # ru_maxrss is in KiB on Linux


def test_a_large_file_goes_through_every_stage_in_bounded_memory(root: Path) -> None:
    big = root / "big.bin"
    with open(big, "wb") as f:
        f.truncate(SIZE)
        f.seek(SIZE // 2)
        f.write(b"a few bytes that are not zero")
    args = ("--root", str(root))
    code, peak, err = peak_rss(*args, "snapshot", "--max-file-bytes", str(2 * SIZE))
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"snapshot peaked at {peak >> 20} MiB"
    code, peak, err = peak_rss(*args, "verify")
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"verify peaked at {peak >> 20} MiB"
    big.unlink()
    code, peak, err = peak_rss(*args, "restore", "latest", "--yes")
    assert code == 0, err
    assert peak < PEAK_LIMIT, f"restore peaked at {peak >> 20} MiB"
    assert big.stat().st_size == SIZE
    with open(big, "rb") as f:
        f.seek(SIZE // 2)
        assert f.read(29) == b"a few bytes that are not zero"
