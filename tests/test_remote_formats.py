"""The remote's small objects: each hostile or damaged one is refused in one line naming its key."""

from __future__ import annotations

import msgspec
import pytest

from worksnap.errors import RemoteError
from worksnap.remote import formats
from worksnap.remote.formats import (
    Condemned,
    Config,
    GcState,
    IndexEntry,
    Listed,
    PackIndex,
    SessionRef,
)

D = "ab" * 32
N = "0123456789abcdef"
E = "cd" * 32


def index(**changes: object) -> PackIndex:
    entries = [IndexEntry(bytes.fromhex(D), 16, 10, 20), IndexEntry(bytes.fromhex(E), 26, 5, 5)]
    fields: dict[str, object] = {"version": 1, "pack": D, "size": 31, "trees": False}
    fields["entries"] = entries
    fields.update(changes)
    return PackIndex(**fields)  # type: ignore[arg-type]


def ref(**changes: object) -> SessionRef:
    fields: dict[str, object] = {"version": 1, "session": "default", "nonce": "n"}
    fields["snapshots"] = [Listed("000000000001", D, N), Listed("00000000000a", E, N)]
    fields.update(changes)
    return SessionRef(**fields)  # type: ignore[arg-type]


def test_the_canonical_forms_decode() -> None:
    assert formats.decode_index(formats.encode_index(index()), "r", "k") == index()
    assert formats.decode_ref(formats.encode_ref(ref()), "r", "k") == ref()
    config = Config(format=formats.FORMAT, version=1, id="0" * 32)
    assert formats.decode_config(formats.encode_config(config), "r", "k") == config
    state = GcState(version=1, condemned=[Condemned(D, 1.5), Condemned(E, 2.0)], nonce="x")
    assert formats.decode_state(formats.encode_state(state), "r", "k") == state


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (formats.encode_index(index(pack="xyz")), "bad pack digest"),
        (formats.encode_index(index(size=32)), "add up to"),
        (formats.encode_index(index(entries=[])), "add up to"),
        (
            formats.encode_index(index(entries=[IndexEntry(bytes.fromhex(D), 0, 15, 1)], size=15)),
            "end to end",
        ),
        (
            formats.encode_index(
                index(
                    entries=[
                        IndexEntry(bytes.fromhex(D), 16, 10, 1),
                        IndexEntry(bytes.fromhex(D), 26, 5, 1),
                    ]
                )
            ),
            "listed twice",
        ),
        (formats.encode_index(index(entries=[IndexEntry(b"short", 16, 15, 1)])), "32 bytes"),
        (
            formats.encode_index(index(entries=[IndexEntry(bytes.fromhex(D), 16, 15, 1 << 40)])),
            "more than",
        ),
        (formats.encode_index(index(version=2)), "upgrade worksnap"),
        (formats.encode_index(index(version=0)), "version 0"),
        (
            msgspec.msgpack.encode(
                {"version": 1, "pack": D, "size": 31, "trees": False, "entries": [], "extra": 1}
            ),
            "not a valid",
        ),
        (b"\xc1", "not a valid"),
    ],
)
def test_a_bad_index_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(RemoteError, match=reason) as caught:
        formats.decode_index(data, "s3://b/p", "index/x")
    assert "index/x" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (formats.encode_ref(ref(session="../x")), "bad session"),
        (
            formats.encode_ref(
                ref(snapshots=[Listed("00000000000a", D, N), Listed("000000000001", D, N)])
            ),
            "unsorted",
        ),
        (formats.encode_ref(ref(snapshots=[Listed("000000000001", D, N)] * 2)), "repeated"),
        (formats.encode_ref(ref(snapshots=[Listed("ZZ", D, N)])), "bad"),
        (formats.encode_ref(ref(snapshots=[Listed("000000000001", "x", N)])), "bad"),
        (formats.encode_ref(ref(snapshots=[Listed("000000000001", D, "../x")])), "bad"),
        (formats.encode_ref(ref()).replace(b"\n", b" \n"), "canonical"),
        (formats.encode_ref(ref(version=9)), "upgrade worksnap"),
        (b'{"version":1}', "not a valid"),
        (b"[1]" * 400_000, "not a valid"),
    ],
)
def test_a_bad_ref_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(RemoteError, match=reason) as caught:
        formats.decode_ref(data, "s3://b/p", "refs/default")
    assert "refs/default" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"format":"restic","version":1,"id":"x"}\n', "not a worksnap repository"),
        (b"not json", "not a worksnap repository"),
        (b'{"format":"worksnap-remote","version":2,"id":"x"}\n', "upgrade worksnap"),
        (b'{"format":"worksnap-remote","version":1,"id":"x"}\n', "bad repository id"),
        (
            b'{"format":"worksnap-remote","version":1,"id":"' + b"0" * 32 + b'","x":1}\n',
            "not a valid",
        ),
    ],
)
def test_a_bad_config_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(RemoteError, match=reason):
        formats.decode_config(data, "s3://b/p", "config")


def test_a_bad_gc_state_is_refused() -> None:
    unsorted = GcState(version=1, condemned=[Condemned(E, 1.0), Condemned(D, 1.0)], nonce="x")
    with pytest.raises(RemoteError, match="unsorted"):
        formats.decode_state(formats.encode_state(unsorted), "r", "gc/state")
