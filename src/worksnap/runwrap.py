"""Run wrapper: snapshot before a command, while it runs once the tree settles, and after.

What `worksnap run` does, as a function any front end can call.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

import msgspec

from worksnap.errors import InputError
from worksnap.manifest import Manifest, tree_digest
from worksnap.session import STEP, Session
from worksnap.stopsignals import on_stop
from worksnap.workspace import Workspace

NOT_FOUND = 127
"""The exit status of a command that does not exist, as a shell reports it."""
NOT_EXECUTABLE = 126
"""The exit status of a command that exists but cannot be run, as a shell reports it."""


class Outcome(msgspec.Struct):
    """How a wrapped command ended.

    Attributes:
        command: the program and its arguments.
        exit_code: its exit status as a shell says it (127: not found, 126: not executable,
            128 + N: killed by signal N).
        snapshots: the snapshots taken around it, in order (none when it never started).
        error: why it could not be started, or None.
    """

    command: list[str]
    exit_code: int
    snapshots: list[Manifest] = msgspec.field(default_factory=list)
    error: str | None = None


def run_wrapped(
    ws: Workspace,
    command: Sequence[str],
    *,
    every: float | None,
    step: int | None,
    stdout: int | None = None,
    numbered: Session | None = None,
) -> Outcome:
    """Snapshots, runs `command`, snapshots again; returns how it ended.

    With `every`, the tree is captured every `every` seconds while the command
    runs, and snapshotted once it has changed and then stayed the same for a
    whole interval (kind `run-settled`). The snapshots are labelled with the
    command line; their kinds are `run-before` and `run-after`. A command that
    cannot be started leaves no snapshot behind.

    Raises:
        InputError: `every` is not above 0 (nor finite); nothing is run.

    Args:
        ws: the workspace.
        command: the program and its arguments.
        every: seconds between checks while it runs, above 0 (None: no checks).
        step: the agent step the snapshots belong to.
        stdout: where the command's standard output goes (a descriptor; None: ours).
        numbered: take every snapshot as the next numbered step of this session
            (kind `step`, `meta.run` saying `before`, `settled` or `after`), so that
            a later `rewind N` can name it (`run --snapshots`); `step` is then unused.
    """
    if every is not None and not 0 < every < math.inf:  # 0 would poll without a pause
        raise InputError(f"every={every!r}: give a time above 0 seconds, or None")
    argv = list(command)
    problem = _cannot_start(argv[0])
    if problem is not None:
        return Outcome(argv, problem[0], error=problem[1])
    label = " ".join(argv)

    def snapshot(when: str) -> Manifest:
        if numbered is not None:
            return numbered.step(kind=STEP, label=label, meta={"run": when})
        return ws.snapshot(kind=f"run-{when}", step=step, label=label, automatic=True)

    taken = [snapshot("before")]
    # In front at a terminal, the command shares our process group, so the terminal's
    # Ctrl-C and hangup reach it as they reach us. Anywhere else it gets a group of its
    # own: a signal to our group (`timeout`, `kill -- -PGID`) or to us alone then reaches
    # it once, through us (a review: SIGTERM ended the wrapper, the command ran on
    # unseen; forwarded always, a group's signal came to the command twice).
    in_front = _in_front()
    try:
        if in_front:
            child = subprocess.Popen(argv, stdout=stdout)
        elif sys.version_info >= (3, 11):
            child = subprocess.Popen(argv, stdout=stdout, process_group=0)
        else:  # (3.10 has no process_group: a session is a group of its own too)
            child = subprocess.Popen(argv, stdout=stdout, start_new_session=True)
    except OSError as exc:
        ws.drop(taken[0].id)  # it never ran: nothing to take back
        code = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
        return Outcome(argv, code, error=f"cannot run {argv[0]!r}: {exc.strerror}")

    def pass_on(signum: int) -> None:
        if in_front and signum != signal.SIGTERM:
            return  # the terminal sent it to the command too
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum) if in_front else os.killpg(child.pid, signum)

    last = seen = _content(taken[0])
    with on_stop(lambda signum, frame: pass_on(signum)):  # we wait, then snapshot
        while True:
            try:
                code = child.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                pass
            except KeyboardInterrupt:
                pass_on(signal.SIGINT)
                continue
            try:
                # Snapshot only once the tree has stopped changing for a whole interval.
                now = _content(ws.capture(store_objects=False))
                if now == seen and now != last:
                    taken.append(snapshot("settled"))
                    last = _content(taken[-1])
                seen = now
            except KeyboardInterrupt:  # (while looking: the command is still waited for)
                pass_on(signal.SIGINT)
    taken.append(snapshot("after"))
    # Killed by signal N: 128 + N, as a shell says it (a review found 256 - N as the exit).
    return Outcome(argv, 128 - code if code < 0 else code, taken)


def _in_front() -> bool:
    """Whether our process group is the one in front at our controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _content(manifest: Manifest) -> str:
    """What a restore could change, as a digest: the entries and dirs (format 1's `tree`).

    Not `manifest.tree`: a format 2 root tree also names the ignored, large and excluded
    paths, and a command that only writes those (`__pycache__/`, a log) changed nothing
    a snapshot protects.
    """
    return tree_digest(manifest.entries, manifest.dirs)


def _cannot_start(program: str) -> tuple[int, str] | None:
    """Why `program` cannot be started, as a shell would say (None: it can be tried)."""
    if "/" not in program:
        if shutil.which(program) is None:
            return NOT_FOUND, f"{program}: command not found; nothing was run"
        return None
    if not os.path.exists(program):
        return NOT_FOUND, f"{program}: no such file; nothing was run"
    if os.path.isdir(program) or not os.access(program, os.X_OK):
        return NOT_EXECUTABLE, f"{program}: not an executable file; nothing was run"
    return None
