"""Journal: the store's record of a restore under way, what a recovery rolls back to.

Written before the first change of a restore and removed (durably) once the tree is
either fully restored or fully rolled back; a journal still there means the restore
was interrupted. Read through the store's descriptor, bounded, and refused when
damaged with one line that says how to clear it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated

import msgspec

from worksnap.errors import (
    InputError,
    Interrupted,
    LockError,
    RecoveryError,
    RecoveryPending,
    StoreError,
)
from worksnap.frames import MAX_UNPACKED
from worksnap.layout import SESSION_NAME
from worksnap.lock import writer_inside
from worksnap.manifest import Manifest
from worksnap.storedir import StoreDir

DISCARD = (
    "run `worksnap recover --discard` to keep the tree as it is (a snapshot of it is "
    "taken first) and drop the journal"
)
"""What to run when a journal cannot be acted on."""


class Journal(msgspec.Struct, frozen=True, kw_only=True):
    """The store's journal, present while a restore runs: what to roll back, and to what."""

    target: str
    pre_restore: str
    pid: int
    host: str
    session: Annotated[str, msgspec.Meta(pattern=f"^{SESSION_NAME}$")] | None = None
    """The session of the restore (None: a journal written before it was recorded)."""
    paths: list[str] | None = None
    """Every path the restore's plan touches (None: written before they were recorded,
    and a recovery then rolls back every path that differs)."""
    kind: str | None = None
    """What ran: "pre-restore" (a restore), "undo", "redo", ... (None: an older journal)."""
    modes: dict[str, Annotated[int, msgspec.Meta(ge=0, le=0o7777)]] = {}
    """The permission bits of each directory the plan removes: snapshots hold none, and
    a rollback makes such a directory again with them, not with the umask's. (A review
    found a damaged journal's out-of-range mode stopping a recovery half-way with a
    traceback; it is refused as damaged, before anything changes.)"""


def read_journal(files: StoreDir) -> Journal | None:
    """The journal of an interrupted restore (None: there is none).

    Raises:
        RecoveryError: it is damaged; the message says how to clear it.
    """
    journal = files.paths.journal
    try:
        return msgspec.json.decode(files.read(journal, limit=MAX_UNPACKED), type=Journal)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, RecursionError) as exc:
        raise RecoveryError(
            f"the journal of an interrupted restore ({journal}) is damaged "
            f"({exc}); the workspace may be partly restored: {DISCARD}"
        ) from None


def rollback_snapshot(
    files: StoreDir, record: Journal, load: Callable[[str, str], Manifest], session: str
) -> Manifest:
    """The snapshot a journal rolls back to, `load`ed (the catalog's) in the journal's session.

    `session`: the one to load it in when the journal names none (an older journal).

    Raises:
        RecoveryError: it cannot be loaded; the message says how to clear the journal.
    """
    try:
        return load(record.pre_restore, record.session or session)
    except (InputError, StoreError) as exc:
        raise RecoveryError(
            f"an interrupted restore left a journal ({files.paths.journal}) that rolls "
            f"back to snapshot {record.pre_restore}, which cannot be loaded ({exc}); the "
            f"workspace may be partly restored: {DISCARD}"
        ) from None


def journal_snapshots(files: StoreDir) -> set[str]:
    """The snapshots a pending journal needs (a recovery rolls back to them): gc keeps them."""
    try:
        record = read_journal(files)
    except RecoveryError:
        return set()  # damaged: only `recover --discard` can act on it, and needs neither
    return set() if record is None else {record.pre_restore, record.target}


def running(files: StoreDir) -> str | None:
    """With a journal there, one line saying its restore is still running, or None.

    A restore in another process holds the store lock while its journal is there; a
    journal no process holds the lock for was left by a restore interrupted (killed).
    """
    if files.lstat(files.paths.journal) is None or (who := writer_inside(files)) is None:
        return None
    return (
        f"a restore is running in another process (store {files.path} {who}): the "
        "workspace is changing until it finishes"
    )


def pending(files: StoreDir) -> str | None:
    """One line saying that a restore was interrupted and what to run, or None.

    (Or, while the journal's restore still runs in another process, that it runs.)
    """
    if files.lstat(files.paths.journal) is None:
        return None
    if (line := running(files)) is not None:
        return line
    return (
        f"a restore was interrupted (journal {files.paths.journal}): the workspace may be "
        "partly restored; run `worksnap recover` (it keeps the tree as it is in a snapshot "
        "first, for `worksnap undo`)"
    )


def remove_journal(files: StoreDir) -> None:
    """Removes the journal durably: once a restore is done, it must not come back."""
    files.unlink(files.paths.journal)
    files.fsync(files.path)


@contextlib.contextmanager
def on_interrupt(files: StoreDir, changes: Callable[[], int]) -> Iterator[None]:
    """Ctrl-C in a command that changes the tree raises Interrupted: how it left the tree.

    (An apply stopped says how its rollback went: `Restorer._run`.) With the journal
    still there, the tree may be half-restored (a recovery stopped, or a restore stopped
    while its journal was in place); else it is as it was, or, when `changes()` (the
    restores and recoveries finished) moved meanwhile, as the one that finished left it.
    """
    before = changes()
    try:
        yield
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        line = pending(files)
        if line is not None:
            raise Interrupted(line) from None
        if changes() != before:
            raise Interrupted("the workspace was changed before the interrupt came") from None
        raise Interrupted.before_any_change() from None


def refuse_preview(files: StoreDir) -> None:
    """A preview never changes the tree: with a restore to recover, it says so instead.

    Raises:
        RecoveryPending: a restore was interrupted: the tree may be half-restored,
            and a preview must neither show that nor change it.
        LockError: a restore runs in another process: the tree is half-restored
            until it finishes.
    """
    if (line := running(files)) is not None:  # as git: another process seems to be running
        raise LockError(f"{line}; a preview would show it half-done: try again once it has")
    if files.lstat(files.paths.journal) is not None:
        raise RecoveryPending(
            f"a restore was interrupted (journal {files.paths.journal}) and the tree may "
            "be half-restored, which a preview must neither show nor change: run "
            "`worksnap recover` first (`worksnap recover --dry-run` shows what it does; "
            "it keeps the tree as it is in a snapshot first, for `worksnap undo`)"
        )


def rolled_back_first(put_back: int, kept: str) -> str:
    """The notice of a command that rolled back an interrupted restore before its own work."""
    return (
        f"an interrupted restore was rolled back first ({put_back} put back); the tree as "
        f"it was is kept as snapshot {kept} (`worksnap restore {kept}` brings it back)"
    )
