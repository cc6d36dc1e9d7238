"""Progress: how far long work (hashing, restoring) has got, for whoever shows it."""

from __future__ import annotations

from collections.abc import Callable

import msgspec


class Progress(msgspec.Struct, frozen=True):
    """A report on long work: `done` of `total` units of `what` ("hash", "apply").

    A report with a `note` is a one-line notice instead, to show as it is: `what`
    "wait" says that the store is busy and who holds it (after a second of waiting).
    """

    what: str
    done: int
    total: int
    note: str = ""


class Reporter:
    """Passes reports to a callback that may be replaced between calls (or be None)."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[Progress], None] | None = None) -> None:
        self.callback = callback

    def __call__(self, what: str, done: int, total: int) -> None:
        """Reports `done` of `total` units of `what`."""
        if self.callback is not None:
            self.callback(Progress(what, done, total))

    def notice(self, what: str, note: str) -> None:
        """Passes on a one-line notice about `what` (e.g. "wait": who holds the store)."""
        if self.callback is not None:
            self.callback(Progress(what, 0, 0, note))
