"""Hostile review of the packs: sweeps against duplicates, kills and long-lived readers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from worksnap.diskstore import DiskStore
from worksnap.hash import hash_bytes

from .test_kill import SRC

# A sweep that kills itself (SIGKILL) as it removes its first old pack file: its index
# is already gone, so are the objects only that pack held.
SWEEP_KILLED_MID_DELETE = r"""
import os, signal, sys
from worksnap.diskstore import DiskStore
real_unlink = os.unlink
def unlink(path, *args, **kwargs):
    if str(path).endswith(".pack"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_unlink(path, *args, **kwargs)
os.unlink = unlink
DiskStore(sys.argv[1]).sweep({sys.argv[2]})
"""


def test_a_sweep_killed_after_its_first_removal_is_seen_by_a_long_lived_store(
    tmp_path: Path,
) -> None:
    """A daemon's store, loaded before a gc that was killed part-way, must learn at its
    next `sync` that objects are gone: else it takes a swept object for stored and
    records a snapshot that needs it (the file's bytes are then nowhere)."""
    directory = str(tmp_path / "store")
    dead, kept = b"a file a dropped snapshot held\n" * 50, b"a file still in a snapshot\n"
    d, k = hash_bytes(dead), hash_bytes(kept)
    writer = DiskStore(directory)
    writer.create()
    writer.add(d, dead)
    writer.flush()
    writer.add(k, kept)
    writer.flush()
    writer.close()
    daemon = DiskStore(directory)  # long-lived: the daemon's, or a Workspace's
    daemon.sync()
    assert daemon.has(d)
    child = subprocess.run(
        [sys.executable, "-c", SWEEP_KILLED_MID_DELETE, directory, k],
        env={**os.environ, "PYTHONPATH": SRC},
        check=False,
    )
    assert child.returncode == -signal.SIGKILL
    fresh = DiskStore(directory)
    assert not fresh.has(d)  # the kill came after the removal of its pack's index
    fresh.close()
    # The file comes back (an agent reverts an edit): the daemon syncs under the lock,
    # as every capture does, and stores what it does not have.
    daemon.sync()
    daemon.add(d, dead)
    daemon.flush()
    daemon.close()
    after = DiskStore(directory)
    assert after.read(d) == dead
    assert after.read(k) == kept
    after.close()
