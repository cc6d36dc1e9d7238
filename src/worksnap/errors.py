"""The one error hierarchy of worksnap; each class maps to one exit code of the CLI.

Every path an error names goes through `shown`, so a path deeper than anyone can
read (a tree nested past PATH_MAX) still makes a one-line message.
"""

from __future__ import annotations

import errno
import functools
import shlex
from collections.abc import Callable
from typing import Any, TypeVar, cast

SHOWN_PATH_CHARS = 160
"""The longest path an error message spells out; the middle of a longer one is elided."""


def shown(path: str) -> str:
    """Returns `path` as an error message may print it: at most `SHOWN_PATH_CHARS` long.

    A longer path keeps its start and its end (where the name is) around a note of how
    much was left out, so the message stays one readable line.
    """
    if len(path) <= SHOWN_PATH_CHARS:
        return path
    keep = (SHOWN_PATH_CHARS - 30) // 2
    return f"{path[:keep]}...[{len(path) - 2 * keep} characters]...{path[-keep:]}"


class WorksnapError(Exception):
    """Base of every error worksnap raises on purpose.

    `exit_code` is what the command line exits with: 2 means bad usage or bad
    input (nothing was changed), 1 means the operation ran and failed.
    """

    exit_code = 2


class InputError(WorksnapError):
    """Bad usage or bad input: unknown ref, unsafe root, wrong store, bad option."""


class ManifestError(InputError):
    """A manifest is unreadable, corrupt, hostile, too new, or for another root.

    Attributes:
        source: where the manifest came from (a file path or a ref).
        reason: one line that says what is wrong with it.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"manifest {shown(source)}: {reason}")
        self.source = source
        self.reason = reason

    @classmethod
    def too_new(cls, source: str, what: str, found: int, newest: int) -> ManifestError:
        """A manifest, record or tree object of a newer format: the one wording of it.

        It asks for a newer worksnap, never an "upgrade": `worksnap upgrade` migrates a
        store the other way (an older format to this worksnap's).
        """
        return cls(
            source,
            f"{what} {found} is newer than this worksnap reads ({newest}); "
            "install a newer worksnap",
        )


class ObjectError(WorksnapError):
    """A stored object is missing or its bytes do not match its digest.

    Attributes:
        digest: the digest that was asked for.
        reason: "missing" or a description of the damage.
    """

    exit_code = 1

    def __init__(self, digest: str, reason: str) -> None:
        super().__init__(f"object {digest}: {reason}")
        self.digest = digest
        self.reason = reason


class SnapshotError(WorksnapError):
    """A snapshot could not be taken (a file could not be read, the store is not writable).

    Attributes:
        path: the workspace path that failed, or "" when the failure is the store's.
        changing: the path went, or changed kind, between the listing and the read
            (an editor's atomic save): a capture looks again (`Capture.capture`).
    """

    exit_code = 1

    @classmethod
    def unwritable(cls, store: str, exc: OSError) -> SnapshotError:
        """The store could not be written: a full disk says what to do, as elsewhere."""
        where = f"{shown(exc.filename)}: " if isinstance(exc.filename, str) else ""
        return cls("", f"cannot write the store {store}: {where}{_reason(exc)}")

    def __init__(self, path: str, reason: str, *, changing: bool = False) -> None:
        super().__init__(f"{shown(path)}: {reason}" if path else reason)
        self.path = path
        self.reason = reason
        self.changing = changing


class Vanished(SnapshotError):
    """A file the scan listed was gone by its read: the capture looks again (`changing`).

    An editor's atomic save, a test run's temp file. Gone under the last look too, it is
    left out (`Capture._look`), as a listing leaves out what is deleted while it walks.
    (A review: while a tool renamed temp files without a pause, half the snapshots failed
    after three looks, and the pre-restore snapshots of unrelated restores with them.)
    """

    def __init__(self, path: str) -> None:
        super().__init__(path, "cannot read: No such file or directory", changing=True)


def unreadable(path: str, exc: OSError, what: str = "cannot read") -> SnapshotError:
    """A path a capture could not read; one the user may not read says how to leave it out.

    (A review: one `chmod 000` directory, a root-owned docker volume, stopped every
    snapshot and `status`, and nothing said that excluding it is the way on.)
    """
    reason = f"{what}: {exc.strerror}"
    if exc.errno in (errno.EACCES, errno.EPERM) and path not in ("", "."):
        reason += f" (to leave it out: worksnap config exclude add {shlex.quote(path)})"
    return SnapshotError(path, reason, changing=gone(exc))


def gone(exc: OSError) -> bool:
    """Whether a path went (or a directory above it, or became a link) since it was listed."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


class ConflictError(InputError):
    """The workspace changed between plan and apply; nothing was changed.

    Attributes:
        path: the first path that no longer matches what the plan saw.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{shown(path)} changed since the plan was made; nothing was restored (plan again)"
        )
        self.path = path


class StoreError(InputError):
    """A file or folder of the store is not what the store's layout says it is.

    A symlink, FIFO, socket or device where a file or folder is expected, a file too
    large for its kind, or damage that no command can work around. The store may have
    arrived with a cloned tree, so it is input like any other: it is refused, never
    followed.

    Attributes:
        path: the store file or folder (absolute).
        reason: one line that says what is wrong, and what to do.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"store file {shown(path)} {reason}")
        self.path = path
        self.reason = reason


class ForeignStoreError(InputError):
    """The store's folder is not one worksnap made for this user (`storeplace.check_own`).

    Another user's (not a setgid one of the user's groups), or one that others may enter
    and that holds what no store does: refused before anything is read or written there.
    """


class RecoveryError(WorksnapError):
    """An interrupted restore is pending and this command cannot go on until it is settled.

    Raised by commands that must not change the tree themselves (`plan`), and when the
    journal cannot be acted on (it names a snapshot that is gone, or is damaged). The
    message says what to run.
    """

    exit_code = 1


class RecoveryPending(RecoveryError):
    """A preview refused: an interrupted restore must be recovered first.

    The tree may be half-restored, and a preview must neither show that nor change it.
    Nothing was changed (exit 2, as any refusal that changes nothing).
    """

    exit_code = 2


class ChangedError(InputError):
    """The store changed underneath a command (a gc ran while it waited); nothing was changed.

    Running the command again is the remedy: the message says so.
    """


class LockError(WorksnapError):
    """Another process holds the store lock for too long."""

    exit_code = 1


class RestoreError(WorksnapError):
    """A restore stopped part-way; the message says what failed and what was rolled back."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a command that changes the tree; `state` says how it left the tree.

    Still a KeyboardInterrupt (whatever stops at Ctrl-C stops at it), so the CLI exits
    130 as for any Ctrl-C: the line it prints says more (a review found a restore
    rolled back, the user told only "interrupted", so left to assume it half done).

    Attributes:
        state: rolled back, nothing changed, or, when the tree may be half-restored,
            what the failure path says to run.
    """

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state

    @classmethod
    def before_any_change(cls, *, recovering: bool = False) -> Interrupted:
        """At the question or while planning: the tree is as it was.

        `recovering`: as an interrupted restore left it, which is still to be recovered
        (a review: "nothing was changed" alone read as if there were nothing to do).
        """
        if recovering:
            return cls(
                "nothing was changed: the workspace is still as the interrupted restore left "
                "it (run `worksnap recover` again)"
            )
        return cls("nothing was changed")

    @classmethod
    def rolled_back(cls, kept: str | None, blocked: list[str]) -> Interrupted:
        """Stopped mid-apply and rolled back (the words of a failed restore's rollback).

        `kept`: the snapshot of the tree the rollback found, when it had to store it
        first; `blocked`: the paths it left as they are (something in no snapshot in
        the way), so the tree is not all as before.
        """
        state = rolled_back_words(blocked)
        if kept is not None:
            state += f"; the tree as it was when interrupted is kept in snapshot {kept}"
        return cls(state)


def rolled_back_words(left: list[str]) -> str:
    """How a rollback left the workspace: as before, but for the paths it `left` as they are.

    (Something in no snapshot was in their way, or they were edited while it ran.)
    """
    state = "the workspace was rolled back to how it was before"
    if left:
        shown_paths = ", ".join(shown(p) for p in left[:3])
        more = f" and {len(left) - 3} more" if len(left) > 3 else ""
        state += f", but for {shown_paths}{more} (left as they are: in no snapshot)"
    return state


class RemoteError(WorksnapError):
    """A remote store failed an operation: unreachable, refused, throttled, missing or damaged.

    Attributes:
        remote: the remote's URL (never carries a credential).
        key: the object the operation was about, or "" when the failure is the store's.
        reason: one line that says what went wrong.
    """

    exit_code = 1

    def __init__(self, remote: str, reason: str, *, key: str = "") -> None:
        super().__init__(
            f"remote {remote}: {key}: {reason}" if key else f"remote {remote}: {reason}"
        )
        self.remote = remote
        self.key = key
        self.reason = reason


class FileSystemError(WorksnapError):
    """The file system refused what worksnap needed: permission denied, disk full, I/O error.

    What the API raises in place of a bare `OSError`.

    Attributes:
        path: the file or folder involved ("" when the system did not say).
        reason: the system's words for it (`strerror`).
    """

    exit_code = 1

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class SweepStopped(FileSystemError):
    """A gc sweep ran out of room part-way; what it removed before that stays removed.

    The packs no kept object is read from go first, so a full disk stops a sweep only
    where writing the others anew needs more room than that freed.

    Attributes:
        removed: the objects removed before it stopped.
        freed: the bytes that freed.
        left: the packs still to be written anew (dead objects beside kept ones).
        left_bytes: the bytes of dead objects those packs hold (what finishing frees).
        needed: about how many bytes writing them anew takes (the kept objects in them).
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        removed: int,
        freed: int,
        left: int,
        left_bytes: int,
        needed: int,
    ) -> None:
        super().__init__(path, reason)
        self.removed = removed
        self.freed = freed
        self.left = left
        self.left_bytes = left_bytes
        self.needed = needed


_Method = TypeVar("_Method", bound=Callable[..., Any])
_Class = TypeVar("_Class", bound=type)


def _api(method: _Method) -> _Method:
    """Every error the API raises is a `WorksnapError`: an `OSError` becomes a FileSystemError."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except OSError as exc:
            where = exc.filename if isinstance(exc.filename, str) else ""
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # (the system may name no file for a full disk: a review saw the bare
                # words; one that names a record said nothing of what to do either)
                where = where or (str(getattr(args[0], "store_dir", "")) if args else "")
            raise FileSystemError(where, _reason(exc)) from exc

    return cast(_Method, call)


def _reason(exc: OSError) -> str:
    """Why a system call failed, in words; for a full disk, also what to do."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{reason}: free some space, then run the command again"
    return reason


def api_errors(cls: _Class) -> _Class:
    """Wraps every public method of `cls` (and its constructor) with `_api`."""
    for name, member in list(vars(cls).items()):
        if callable(member) and (not name.startswith("_") or name == "__init__"):
            setattr(cls, name, _api(member))
    return cls
