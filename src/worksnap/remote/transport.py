"""What a remote store must do for worksnap, and the URL that names one.

The remote holds two kinds of things (the layout is learned from restic and kopia):
immutable objects (packs, their indexes, snapshot records) that are written once
under a name nobody else writes different bytes to, and a few small refs that
change. So a store needs exactly: create-if-absent for the objects, and
compare-and-swap for the refs. With both enforced by the store itself, any number
of machines can push at once with no lock server and nothing lost. `probe`
refuses a store that does not enforce them.

Keys are `/`-separated segments of ASCII letters, digits, `.`, `_`, `-` and `=`;
no segment is empty or starts with `.` (backends keep their own files under
dot-names, and `.`/`..` can never be a segment).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import NamedTuple, Protocol

from worksnap.errors import InputError, RemoteError

MAX_KEY = 512
"""The longest key, in bytes (S3 allows 1,024 with its prefix)."""

MAX_REF_BYTES = 1 << 20
"""The largest ref `get_ref` accepts unless told otherwise: refs are small records."""

PROBE = "probe"
"""The folder of `probe_transport`'s keys."""

_KEY = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9._=-]*(/[A-Za-z0-9_=-][A-Za-z0-9._=-]*)*\Z")

# An ETag no store ever hands out: S3 ETags are quoted hex, the others quoted hex or digits.
_WRONG_ETAG = '"worksnap-probe-wrong-etag"'


class Stat(NamedTuple):
    """What `stat` tells of one object."""

    size: int
    etag: str


class Ref(NamedTuple):
    """A ref's bytes and the ETag to pass to `swap_ref` to replace exactly those bytes."""

    data: bytes
    etag: str


class ListEntry(NamedTuple):
    """One object found by `list_keys`."""

    key: str
    size: int
    modified: datetime
    """When the object was written, timezone-aware (UTC)."""


class Transport(Protocol):
    """The operations the push, pull and gc code needs from a remote store.

    Every method raises `RemoteError` (exit code 1, one line) when the store cannot
    be reached, refuses the request, or keeps throttling after a few retries.

    ETags are opaque strings. On S3 (and in the `file://` backend) an ETag names
    the *content*, not the write: a ref whose bytes go back to earlier bytes has
    its earlier ETag again. So the bytes given to `swap_ref` must be unique to
    that write (carry a counter or a nonce), and then an ETag that still matches
    proves nothing happened in between.
    """

    @property
    def url(self) -> str:
        """The remote's URL, for messages (never carries a credential)."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Creates `key` with `data` unless something is already there (`If-None-Match: *`).

        Readers never see part of `data`: the object appears whole or not at all.

        Returns:
            True if this call created it; False if an object was already there,
            which is success too: objects are named by what they hold.
        """
        ...

    def get(self, key: str, *, max_bytes: int) -> bytes:
        """Returns the bytes of `key`.

        Raises:
            RemoteError: it is missing (reason "missing"), or larger than
                `max_bytes`, which is found out before its bytes are read.
        """
        ...

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Returns `length` bytes of `key` from `offset`.

        Raises:
            RemoteError: it is missing, or ends before `offset + length`.
        """
        ...

    def stat(self, key: str) -> Stat | None:
        """Returns the size and ETag of `key`, or None if there is no such object."""
        ...

    def list_keys(self, prefix: str = "") -> Iterator[ListEntry]:
        """Yields every object under the directory `prefix` ("" for all), in no set order.

        `prefix` is whole segments: "packs" lists "packs/x", not "packsx". Pages
        (1,000 keys on S3) are fetched as the iterator is consumed. Names that are
        not valid keys (a stray file in a `file://` directory) are skipped.
        """
        ...

    def get_ref(self, key: str, *, max_bytes: int = MAX_REF_BYTES) -> Ref | None:
        """Returns the ref's bytes with their ETag, read together, or None if it does not exist.

        Raises:
            RemoteError: the ref is larger than `max_bytes`.
        """
        ...

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        """Replaces the ref with `data` if it still has `expected_etag` (None: if it is absent).

        Compare-and-swap: `If-Match: <etag>`, or `If-None-Match: *` to create.

        Returns:
            True if this call wrote `data`; False if the ref had changed (another
            writer won: read it again and retry), in which case nothing was written.

        Raises:
            RemoteError: the store failed; whether `data` was written is then
                unknown (read the ref again and look for the nonce in `data`).
        """
        ...

    def delete(self, key: str) -> None:
        """Removes `key`; removing a missing object is no error."""
        ...

    def sweep_leftovers(
        self, before: float, folders: Iterable[str], *, dry_run: bool = False
    ) -> tuple[int, int]:
        """Removes what writers killed part-way left under no key, older than `before`.

        `before`: seconds since the epoch; `folders`: the top-level folders of keys (the
        top's own keys are swept too, nothing else). A `file://` remote's temp files; an
        S3 PUT is whole or absent: nothing. Returns how many, and their bytes (`dry_run`:
        counted, not removed).
        """
        ...

    def probe(self) -> None:
        """Checks that the store enforces conditional writes, using `probe/<random>` keys.

        Raises:
            RefusedStoreError: it does not (says which check failed).
            RemoteError: the store could not be reached or refused the writes.
        """
        ...


class RefusedStoreError(InputError):
    """A store that does not enforce conditional writes, refused as a remote.

    Attributes:
        remote: the remote's URL.
        reason: which check failed.
    """

    def __init__(self, remote: str, reason: str) -> None:
        super().__init__(
            f"remote {remote} refused: it does not enforce conditional writes ({reason}); "
            "without them two machines pushing at once could overwrite each other"
        )
        self.remote = remote
        self.reason = reason


def check_key(key: str) -> str:
    """Returns `key` if it is a valid key; raises `ValueError` otherwise (a bug of the caller)."""
    if not is_key(key):
        raise ValueError(f"not a valid remote key: {key!r}")
    return key


def is_key(key: str) -> bool:
    """Whether `key` is a valid key (see the module's docstring)."""
    return len(key) <= MAX_KEY and _KEY.match(key) is not None


def probe_transport(transport: Transport, *, prefix: str = PROBE) -> None:
    """Checks that `transport`'s store enforces create-if-absent and compare-and-swap.

    Each check writes and reads back, so a store that accepts the conditional
    headers but ignores them is caught. It cannot catch a store that enforces them
    one request at a time but not atomically (two racing writes both passing the
    check); no single client can.

    Raises:
        RefusedStoreError: a check failed; the reason says which.
    """
    token = secrets.token_hex(8)
    obj, ref = f"{prefix}/{token}.object", f"{prefix}/{token}.ref"
    try:
        _check_conditional_writes(transport, obj, ref, token.encode())
    except BaseException:
        # The failed check is what to report; a failed clean-up would only hide it.
        with contextlib.suppress(RemoteError):
            transport.delete(obj)
            transport.delete(ref)
        raise
    transport.delete(obj)
    transport.delete(ref)


def _check_conditional_writes(transport: Transport, obj: str, ref: str, token: bytes) -> None:
    def refuse(reason: str) -> RefusedStoreError:
        return RefusedStoreError(transport.url, reason)

    if not transport.put_if_absent(obj, b"first"):
        raise refuse("a new object was reported as already there")
    if transport.put_if_absent(obj, b"second"):
        raise refuse("a second create of the same object succeeded: If-None-Match is ignored")
    if transport.get(obj, max_bytes=64) != b"first":
        raise refuse("a create that was refused still overwrote the object")
    if not transport.swap_ref(ref, b"1 " + token, None):
        raise refuse("creating a new ref failed")
    if transport.swap_ref(ref, b"x " + token, None):
        raise refuse("creating a ref that exists succeeded: If-None-Match is ignored")
    current = transport.get_ref(ref)
    if current is None or current.data != b"1 " + token:
        raise refuse("a ref did not read back as written")
    if transport.swap_ref(ref, b"2 " + token, _WRONG_ETAG):
        raise refuse("a compare-and-swap with a wrong ETag succeeded: If-Match is ignored")
    if not transport.swap_ref(ref, b"3 " + token, current.etag):
        raise refuse("a compare-and-swap with the current ETag failed")
    after = transport.get_ref(ref)
    if after is None or after.data != b"3 " + token:
        raise refuse("a compare-and-swap did not read back as written")
