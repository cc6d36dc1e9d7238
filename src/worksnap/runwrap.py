"""Run wrapper: snapshot before a command, while it runs once the tree settles, and after.

What `worksnap run` does, as a function any front end can call.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections.abc import Sequence

import msgspec

from worksnap.errors import InputError
from worksnap.manifest import Manifest, tree_digest
from worksnap.session import STEP, Session
from worksnap.workspace import Workspace

_INTERRUPTED_GRACE_SECONDS = 0.1
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
    try:
        child = subprocess.Popen(argv, stdout=stdout)
    except OSError as exc:
        ws.drop(taken[0].id)  # it never ran: nothing to take back
        code = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
        return Outcome(argv, code, error=f"cannot run {argv[0]!r}: {exc.strerror}")
    last = seen = _content(taken[0])
    while True:
        try:
            code = child.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            # Snapshot only once the tree has stopped changing for a whole interval.
            now = _content(ws.capture(store_objects=False))
            if now == seen and now != last:
                taken.append(snapshot("settled"))
                last = _content(taken[-1])
            seen = now
        except KeyboardInterrupt:
            time.sleep(_INTERRUPTED_GRACE_SECONDS)  # the child got the same SIGINT
    taken.append(snapshot("after"))
    # Killed by signal N: 128 + N, as a shell says it (a review found 256 - N as the exit).
    return Outcome(argv, 128 - code if code < 0 else code, taken)


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
