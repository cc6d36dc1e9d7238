"""Output: how the command line writes for people (paths, sizes, plurals, colours, progress).

Shared by cli.py and restoring.py. Standard library only: `--help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worksnap.progress import Progress

_PROGRESS_EVERY_SECONDS = 0.1
_CLEAR_LINE = "\r\x1b[K"
_WORDS = {"hash": "hashing", "apply": "restoring", "verify": "verifying", "write": "writing"}


def display(path: str) -> str:
    """Returns a path as one printable line: quoted with escapes when it needs them."""
    if path.isprintable() and path.strip() == path and '"' not in path:
        return path
    out = []
    for ch in path:
        if ch == "\x00":
            out.append("\\x")  # a wire-form escape: NUL then two hex digits
        elif ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(_escaped(ch))
    return '"' + "".join(out) + '"'


def printable(text: str) -> str:
    r"""Text someone else wrote (a label, a kind, meta, a session) as a terminal shows it.

    Every character `str.isprintable` refuses (the C0 and C1 controls such as ESC, CR,
    BEL and CSI, DEL, line separators, bidirectional and other format characters) is
    written as its escape, `\x1b`, `\r`, `\x9b`, `\u202e`, as `display` writes a
    path's, so a label cannot move the cursor, retitle the window or hide text; the
    rest stays as it is, so a plain label reads unchanged. The one function every
    human output of such text goes through; `--json` carries the text exactly.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    r"""A character as a person can read it: `\t`, `\x1b`, `\x9b`, `\u202e`."""
    return ch.encode("unicode_escape").decode("ascii")


def plural(count: int, word: str, words: str | None = None) -> str:
    """`1 path`, `2 paths`, `0 paths` (`words`: an irregular plural)."""
    return f"{count} {word if count == 1 else words or word + 's'}"


def human_bytes(size: int) -> str:
    """`512 B`, `1.5 KiB`, `2.0 MiB`, `3.1 GiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def age(then: datetime, now: datetime) -> str:
    """How long ago `then` was, in one short unit (`42s`, `3h`, `5d`)."""
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def styled(text: str, code: str) -> str:
    """`text` in an ANSI style (`31` red, `2` dim) when stdout is a terminal that wants colour."""
    if not sys.stdout.isatty() or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def emit_json(value: object) -> None:
    """Writes one JSON document (and a newline) to stdout."""
    PROGRESS.clear()
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")


def write_bytes(data: bytes) -> None:
    """Writes raw bytes to stdout, all of them (a reader gone away raises BrokenPipeError).

    A buffered write that the pipe takes only in part returns the part it wrote and
    drops the rest without a word; this loop writes the rest, so the error is seen.
    """
    PROGRESS.clear()
    sys.stdout.flush()
    out = sys.stdout.buffer
    view = memoryview(data)
    while view:
        view = view[out.write(view) or 0 :]
    out.flush()


def say(*lines: str) -> None:
    """Prints lines for a person on stdout, after clearing any progress line."""
    PROGRESS.clear()
    for line in lines:
        print(line)


def warn(message: str) -> None:
    """One line on stderr: `worksnap: MESSAGE` (what it quotes escaped by `printable`)."""
    PROGRESS.clear()
    print(f"worksnap: {printable(message)}", file=sys.stderr)


class ProgressLine(threading.local):
    """Progress on stderr, only on a terminal: one line, redrawn at most ten times a second.

    It is cleared (`clear`) before anything else is printed, so no result is glued to it.
    Its state is each thread's: the daemon runs commands in threads, each with its own
    stderr (`clientctx`).
    """

    def __init__(self) -> None:
        self.shown = False
        self._last = 0.0

    def reporter(self, enabled: bool) -> Callable[[Progress], None]:
        """The callback to give a workspace: progress when `enabled`, notices always.

        A notice (who holds the store a command waits for) is one line of its own.
        """
        self.shown = False
        self._last = 0.0

        def report(progress: Progress) -> None:
            if progress.note:
                warn(progress.note)
                return
            if not enabled:
                return
            now = time.monotonic()
            if now - self._last < _PROGRESS_EVERY_SECONDS and progress.done != progress.total:
                return
            self._last = now
            word = _WORDS.get(progress.what, progress.what)
            sys.stderr.write(f"{_CLEAR_LINE}{word} {progress.done}/{progress.total}")
            sys.stderr.flush()
            self.shown = True

        return report

    def show(self, text: str, *, last: bool = False) -> None:
        """Draws `text` as the progress line (at most ten times a second, unless `last`)."""
        now = time.monotonic()
        if now - self._last < _PROGRESS_EVERY_SECONDS and not last:
            return
        self._last = now
        sys.stderr.write(f"{_CLEAR_LINE}{text}")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        """Erases the progress line, if one is shown."""
        if self.shown:
            sys.stderr.write(_CLEAR_LINE)
            sys.stderr.flush()
            self.shown = False


PROGRESS = ProgressLine()
"""The progress line of this thread's command."""

if TYPE_CHECKING:
    from collections.abc import Callable
