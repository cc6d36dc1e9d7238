"""Run wrapper: snapshot before a command, while it runs once the tree settles, and after.

What `worksnap run` does, as a function any front end can call.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence

from worksnap.errors import InputError
from worksnap.workspace import Workspace

_INTERRUPTED_GRACE_SECONDS = 0.1


def run_wrapped(
    ws: Workspace, command: Sequence[str], *, every: float | None, step: int | None
) -> int:
    """Snapshots, runs `command`, snapshots again; returns the command's exit status.

    With `every`, the tree is captured every `every` seconds while the command
    runs, and snapshotted once it has changed and then stayed the same for a
    whole interval (kind `run-settled`). The snapshots are labelled with the
    command line; their kinds are `run-before` and `run-after`.

    Args:
        ws: the workspace.
        command: the program and its arguments.
        every: seconds between checks while it runs (None: no checks).
        step: the agent step the snapshots belong to.

    Raises:
        InputError: the command cannot be started (the `run-before` snapshot stays).
    """
    label = " ".join(command)
    last = ws.snapshot(kind="run-before", step=step, label=label).tree
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        raise InputError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    seen = last
    while True:
        try:
            code = child.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            # Snapshot only once the tree has stopped changing for a whole interval.
            now = ws.capture(store_objects=False).tree
            if now == seen and now != last:
                last = ws.snapshot(kind="run-settled", step=step, label=label).tree
            seen = now
        except KeyboardInterrupt:
            time.sleep(_INTERRUPTED_GRACE_SECONDS)  # the child got the same SIGINT
    ws.snapshot(kind="run-after", step=step, label=label)
    return code
