"""The store lock: a waiting writer goes before readers that come after it; kill -9 is safe.

Every holder here is a real process. Orders are read from one log file that each
process appends to (O_APPEND: lines land whole, in the order they were written),
never from clocks. The waiting message is checked with an injected clock.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import worksnap
from worksnap.errors import LockError
from worksnap.layout import StorePaths
from worksnap.lock import StoreLock

SRC = str(Path(worksnap.__file__).resolve().parents[1])
PATIENCE = 60.0  # seconds before a test gives up on an event that must come

# argv: store, name, exclusive (0/1), log, purpose, rounds (0: hold until a line on stdin).
LOCKER = r"""
import os, sys, time
from worksnap.lock import StoreLock
store, name, exclusive, log, purpose, rounds = sys.argv[1:7]

def note(event):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{name} {event}\n".encode())
    os.close(fd)

print("trying", flush=True)
for i in range(int(rounds) or 1):
    note("arrives")
    with StoreLock(store, exclusive=exclusive == "1", timeout=120, purpose=purpose):
        note("acquired")
        if rounds == "0":
            print("acquired", flush=True)
            sys.stdin.readline()
        else:
            time.sleep(0.01)  # long enough for the readers' holds to overlap
        note("released")
"""


class Locker:
    """One process that takes the store lock (and holds it until `release`, if asked)."""

    started: ClassVar[list[Locker]] = []

    def __init__(
        self,
        store: Path,
        name: str,
        *,
        exclusive: bool,
        log: Path,
        purpose: str = "",
        rounds: int = 0,
    ) -> None:
        self.name = name
        args = [str(store), name, "01"[exclusive], str(log), purpose, str(rounds)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": SRC},
        )
        Locker.started.append(self)
        self.said("trying")

    def said(self, line: str) -> None:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline()
        assert got == line + "\n", (self.name, got, self.proc.stderr and self.proc.stderr.read())

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        _, err = self.proc.communicate(timeout=PATIENCE)
        assert self.proc.returncode == 0, (self.name, err)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=PATIENCE)
        assert self.proc.returncode == -signal.SIGKILL


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store"
    path.mkdir()
    yield path
    for locker in Locker.started:  # a failed test leaves no process behind
        if locker.proc.poll() is None:
            locker.proc.kill()
        locker.proc.communicate()
    Locker.started.clear()


def events(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def gate_held(store: Path) -> bool:
    """True while a writer holds the gate (waiting or holding): a shared probe fails.

    The probe only ever holds the gate shared, for an instant, like a reader.
    """
    fd = os.open(StorePaths(str(store)).lock_gate, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.005)


# -- writer preference -------------------------------------------------------------


def test_a_waiting_writer_goes_before_readers_that_arrive_after_it(
    store: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    inside = Locker(store, "R0", exclusive=False, log=log)
    inside.said("acquired")
    writer = Locker(store, "W", exclusive=True, log=log, rounds=1)
    wait_for("the writer waits at the gate", lambda: gate_held(store))
    # These would share the lock with R0 at once without writer preference.
    late = [Locker(store, f"R{i}", exclusive=False, log=log, rounds=1) for i in (1, 2, 3)]
    wait_for("the late readers arrive", lambda: sum("arrives" in e for e in events(log)) >= 4)
    assert "W acquired" not in events(log)  # R0 is still inside
    inside.release()
    for locker in [inside, writer, *late]:
        locker.finish()
    order = events(log)
    assert order.index("R0 released") < order.index("W acquired")
    for i in (1, 2, 3):
        assert order.index("W released") < order.index(f"R{i} acquired"), order


def test_a_writer_gets_in_while_readers_keep_overlapping(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    readers = [Locker(store, f"R{i}", exclusive=False, log=log, rounds=10_000) for i in range(3)]
    wait_for("the readers overlap", lambda: most_inside(events(log)) >= 2)
    writer = Locker(store, "W", exclusive=True, log=log, rounds=1)
    wait_for("the writer waits at the gate", lambda: gate_held(store))
    with open(log, "a") as f:
        f.write("-- gate held\n")
    writer.finish()  # it waits only for the readers inside when it came, not for a gap
    for reader in readers:
        reader.proc.kill()
        reader.proc.communicate(timeout=PATIENCE)
    order = events(log)
    marker, acquired = order.index("-- gate held"), order.index("W acquired")
    for i, event in enumerate(order[marker:], start=marker):
        if event.startswith("R") and event.endswith(" arrives"):
            name = event.split()[0]
            got = next((j for j in range(i, len(order)) if order[j] == f"{name} acquired"), None)
            assert got is None or got > acquired, f"{name} overtook the writer: {order[marker:]}"


def most_inside(order: list[str]) -> int:
    """The most readers that held the lock at once, by the log."""
    inside = most = 0
    for event in order:
        if event.startswith("R"):
            inside += event.endswith(" acquired") - event.endswith(" released")
            most = max(most, inside)
    return most


# -- kill -9 ---------------------------------------------------------------------------


def test_kill_of_a_waiting_writer_lets_the_queued_readers_in(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    inside = Locker(store, "R0", exclusive=False, log=log)
    inside.said("acquired")
    writer = Locker(store, "W", exclusive=True, log=log)
    wait_for("the writer waits at the gate", lambda: gate_held(store))
    queued = Locker(store, "R1", exclusive=False, log=log)
    writer.kill()
    queued.said("acquired")  # beside R0, which still holds the lock
    assert not gate_held(store)
    with StoreLock(str(store), exclusive=False, timeout=PATIENCE):
        pass
    for reader in (inside, queued):
        reader.release()
        reader.finish()
    with StoreLock(str(store), exclusive=True, timeout=PATIENCE):
        pass
    assert "W acquired" not in events(log)


def test_kill_of_a_holding_writer_leaves_no_lock(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    writer = Locker(store, "W", exclusive=True, log=log, purpose="restore")
    writer.said("acquired")
    waiting_reader = Locker(store, "R", exclusive=False, log=log)
    waiting_writer = Locker(store, "W2", exclusive=True, log=log)
    writer.kill()

    # Both get it in turn, whichever first; nothing was left behind.
    def holders() -> list[str]:
        return [e.split()[0] for e in events(log) if e.endswith(" acquired")]

    wait_for("one of them gets the lock", lambda: len(holders()) > 1)
    first = holders()[1]
    for locker in sorted((waiting_reader, waiting_writer), key=lambda x: x.name != first):
        locker.said("acquired")
        locker.release()
        locker.finish()
    with StoreLock(str(store), exclusive=True, timeout=PATIENCE):
        pass
    with StoreLock(str(store), exclusive=False, timeout=PATIENCE):
        pass


def test_kill_of_a_reader_inside_lets_the_waiting_writer_in(store: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    inside = Locker(store, "R0", exclusive=False, log=log)
    inside.said("acquired")
    writer = Locker(store, "W", exclusive=True, log=log)
    wait_for("the writer waits at the gate", lambda: gate_held(store))
    inside.kill()
    writer.said("acquired")
    writer.release()
    writer.finish()


# -- the waiting message -----------------------------------------------------------------


class FakeClock:
    """Monotonic seconds that move only when the lock sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def waiting(
    store: Path, *, exclusive: bool, clock: FakeClock, messages: list[tuple[float, str]]
) -> StoreLock:
    return StoreLock(
        str(store),
        exclusive=exclusive,
        timeout=5.0,
        notice_after=1.0,
        on_wait=lambda message: messages.append((clock.now, message)),
        clock=clock,
        sleep=clock.sleep,
    )


@pytest.mark.parametrize("exclusive", [False, True])
def test_one_waiting_message_after_the_threshold_names_the_writer(
    store: Path, tmp_path: Path, exclusive: bool
) -> None:
    holder = Locker(store, "W", exclusive=True, log=tmp_path / "log", purpose="restore")
    holder.said("acquired")
    clock = FakeClock()
    messages: list[tuple[float, str]] = []
    who = f"held by pid {holder.proc.pid} on {socket.gethostname()}: restore"
    with pytest.raises(LockError, match=re.escape(f"busy ({who})")):
        waiting(store, exclusive=exclusive, clock=clock, messages=messages).__enter__()
    assert clock.now >= 5.0  # it waited out its whole timeout
    assert len(messages) == 1
    (at, message) = messages[0]
    assert at >= 1.0
    assert message == f"waiting for store {store} ({who})"
    holder.release()
    holder.finish()


def test_a_writer_waiting_for_readers_says_so(store: Path, tmp_path: Path) -> None:
    reader = Locker(store, "R", exclusive=False, log=tmp_path / "log")
    reader.said("acquired")
    Path(StorePaths(str(store)).lock_holder).write_text("pid 1 on elsewhere (a stale note)\n")
    clock = FakeClock()
    messages: list[tuple[float, str]] = []
    with pytest.raises(LockError, match="shared by snapshots in progress"):
        waiting(store, exclusive=True, clock=clock, messages=messages).__enter__()
    assert [m for _, m in messages] == [
        f"waiting for store {store} (shared by snapshots in progress)"
    ]
    # Giving up let go of the gate and took the writer's note away.
    assert not gate_held(store)
    assert not Path(StorePaths(str(store)).lock_holder).exists()
    with StoreLock(str(store), exclusive=False, timeout=0.0):
        pass
    reader.release()
    reader.finish()


def test_no_message_without_a_wait_and_none_by_default(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    messages: list[tuple[float, str]] = []
    with waiting(store, exclusive=True, clock=clock, messages=messages):
        assert (
            Path(StorePaths(str(store)).lock_holder).read_text()
            == f"pid {os.getpid()} on {socket.gethostname()}\n"
        )
    assert messages == []
    assert not Path(StorePaths(str(store)).lock_holder).exists()
    holder = Locker(store, "W", exclusive=True, log=tmp_path / "log")
    holder.said("acquired")
    with pytest.raises(LockError):
        StoreLock(str(store), exclusive=False, timeout=0.3).__enter__()
    assert capsys.readouterr() == ("", "")
    holder.release()
    holder.finish()


def test_the_step_lock_is_one_at_a_time_and_leaves_the_store_lock_free(store: Path) -> None:
    """A step is numbered under `lock.steps` alone: a second numbering waits (and gives
    up, saying why), while a writer and readers of the store lock go on as ever."""
    from worksnap.lock import StepLock

    with StepLock(str(store)):
        with pytest.raises(
            LockError, match=r"busy \(another step of a session is being numbered\)"
        ):
            StepLock(str(store), timeout=0.2).__enter__()
        with StoreLock(str(store), exclusive=True, timeout=0.0):
            pass  # a restore or gc does not wait for a numbering
        with StoreLock(str(store), exclusive=False, timeout=0.0):
            pass
        assert not Path(StorePaths(str(store)).lock_holder).exists()
    with StepLock(str(store), timeout=0.0):  # let go on leaving
        pass
