"""SIGTERM and SIGHUP stop a command that changes the tree as Ctrl-C does: it rolls back.

An MCP client stops its stdio server with SIGTERM, and so do `timeout`, systemd and
`docker stop`; a terminal closing sends SIGHUP. Their default action ended the process
wherever it was: a review found a restore cut off half-applied, with a journal, and
nothing said. `on_stop` turns them into `Stopped`, a KeyboardInterrupt, so the rollback
and the one line that says how the tree was left (`errors.Interrupted`) are Ctrl-C's
own; the command line then exits 128 + the signal's number, as a shell reports it.

A signal whose handler is not the default (ignored under `nohup`, or someone else's)
is left alone. Imports only C modules (`_signal`, `_thread`): the client (client.py)
names signals from here, and its start must stay fast.
"""

from __future__ import annotations

from _thread import _local

TYPE_CHECKING = False  # as in client.py: typing is not imported at run time
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any
else:
    import _signal  # the C module: `signal` itself imports enum and functools (12 ms)

SIGINT = _signal.SIGINT

STOPPING = (_signal.SIGTERM, _signal.SIGHUP)
"""The signals that stop a command (besides Ctrl-C's SIGINT)."""

NAMES: dict[int, str] = {
    _signal.SIGINT: "SIGINT",
    _signal.SIGTERM: "SIGTERM",
    _signal.SIGHUP: "SIGHUP",
}


class _Caught(_local):
    """The signal that stopped this thread's command, if one did.

    The daemon runs each client's command in a thread of its own, stopped by that
    client's signal (`came`).
    """

    signum: int | None = None


_caught = _Caught()


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP came: raised where Ctrl-C's KeyboardInterrupt would be.

    Attributes:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(NAMES.get(signum, f"signal {signum}"))
        self.signum = signum


def stop(signum: int, frame: Any) -> None:
    """The handler `on_stop` installs by default: raises `Stopped` (each time it comes)."""
    raise came(signum)


def came(signum: int) -> KeyboardInterrupt:
    """What to raise when `signum` stops this thread's command.

    `Stopped`, or Ctrl-C's own KeyboardInterrupt for SIGINT; `said` and `exit_code`
    then name the signal.
    """
    _caught.signum = signum
    return KeyboardInterrupt() if signum == SIGINT else Stopped(signum)


def default(signum: int) -> None:
    """Puts `signum` back to its default action (a second one ends the process at once)."""
    _signal.signal(signum, _signal.SIG_DFL)


def caught() -> int | None:
    """The number of the last signal that stopped this thread's command (`came`), if any."""
    return _caught.signum


def exit_code() -> int:
    """What the command line exits with after an interrupt: 128 + the signal's number."""
    return 128 + (caught() or _signal.SIGINT)


def said(state: str, signum: int | None = None) -> str:
    """The one line an interrupted command prints: "interrupted", by what, how it left the tree.

    `signum`: the signal (default: the one `stop` caught; none: Ctrl-C's).
    """
    signum = caught() if signum is None else signum
    by = f" by {NAMES[signum]}" if signum in NAMES and signum != SIGINT else ""
    return f"worksnap: interrupted{by}{f'; {state}' if state else ''}"


class on_stop:  # lower case: used as the function it was, `with on_stop():`
    """Runs the body with `handler` for SIGTERM and SIGHUP; their handlers are put back after.

    Only a signal at its default action gets it; none outside the main thread. A class,
    not `contextlib.contextmanager`: contextlib would cost the client (client.py) 4 ms.
    """

    def __init__(self, handler: Callable[[int, Any], None] = stop) -> None:
        self._handler = handler
        self._previous: list[tuple[int, Any]] = []

    def __enter__(self) -> None:
        _caught.signum = None
        try:
            for stopping in STOPPING:
                if _signal.getsignal(stopping) == _signal.SIG_DFL:
                    _signal.signal(stopping, self._handler)
                    self._previous.append((stopping, _signal.SIG_DFL))
        except ValueError:  # not the main thread: Python runs handlers there only
            pass

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, old in self._previous:
            _signal.signal(signum, old)
        self._previous.clear()
