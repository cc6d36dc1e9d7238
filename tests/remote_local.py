"""A local side for push and pull over a real `DiskStore`, with format 2 records in a directory.

Snapshots are captured by a real `Workspace` (format 1 manifests, real packs); their
trees are built with `treebuild.from_flat` into the same store, and their records
(`record.record_of`) kept as files. Also a script for the push killed with kill -9:
`python -m tests.remote_local push|pull URL STORE RECORDS SESSION KILL_AT PACK_BYTES`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from worksnap.diskstore import DiskStore
from worksnap.flatbuild import from_flat
from worksnap.fsio import write_atomic
from worksnap.paths import Digest
from worksnap.record import Record, decode_record, encode_record, loose_of, record_of
from worksnap.remote import open_transport
from worksnap.remote.transport import ListEntry, Ref, Stat, Transport
from worksnap.treewalk import Flat, flatten
from worksnap.workspace import Workspace


class DirLocal:
    """The local side: objects in a `DiskStore` at `store`, records as files in `records`."""

    def __init__(self, store: Path, records: Path, *, kill_at_add: int = 0) -> None:
        self.kill_at_add = kill_at_add
        self.store = DiskStore(str(store))
        self.store.create()
        self.dir = records
        records.mkdir(parents=True, exist_ok=True)
        self.saved: list[str] = []

    def records(self, session: str) -> list[Record]:
        found = [decode_record(p.read_bytes(), p.name) for p in sorted(self.dir.iterdir())]
        return [r for r in found if r.session == session]

    def record_bytes(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.dir.iterdir())}

    def has_record(self, snapshot_id: str) -> bool:
        return (self.dir / snapshot_id).exists()

    def dropped(self) -> set[str]:
        return set()  # (records are removed by the tests alone)

    def record(self, snapshot_id: str) -> Record | None:
        path = self.dir / snapshot_id
        return decode_record(path.read_bytes(), snapshot_id) if path.exists() else None

    def read(self, digest: Digest) -> bytes:
        return self.store.read(digest)

    def has(self, digest: str) -> bool:
        return self.store.has(digest)

    def add(self, digest: Digest, data: bytes) -> None:
        self.kill_at_add -= 1
        if self.kill_at_add == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        self.store.add(digest, data)

    def flush(self) -> None:
        self.store.flush()

    def save_record(self, record: Record) -> None:
        write_atomic(str(self.dir / record.id), encode_record(record))
        self.saved.append(record.id)

    def flat(self, snapshot_id: str) -> Flat:
        record = decode_record((self.dir / snapshot_id).read_bytes(), snapshot_id)
        return flatten(Digest(record.tree), self.store.read, loose=loose_of(record))


def capture(ws: Workspace, local: DirLocal, **options: object) -> Record:
    """Takes a real snapshot and keeps it as a format 2 record with its trees in `local`."""
    manifest = ws.snapshot(**options)  # type: ignore[arg-type]
    tree, loose = from_flat(Flat.of(manifest), local.store.add)
    local.store.flush()
    record = record_of(manifest, tree, loose)
    local.save_record(record)
    return record


class Counting:
    """A transport that counts requests (and can kill its own process at the n-th write)."""

    def __init__(self, inner: Transport, *, kill_at: int = 0) -> None:
        self.inner = inner
        self.requests = 0
        self.writes = 0
        self.kill_at = kill_at

    @property
    def url(self) -> str:
        return self.inner.url

    def _write(self) -> None:
        self.requests += 1
        self.writes += 1
        if self.writes == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._write()
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, *, max_bytes: int) -> bytes:
        self.requests += 1
        return self.inner.get(key, max_bytes=max_bytes)

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.requests += 1
        return self.inner.get_range(key, offset, length)

    def stat(self, key: str) -> Stat | None:
        self.requests += 1
        return self.inner.stat(key)

    def list_keys(self, prefix: str = "") -> Iterator[ListEntry]:
        self.requests += 1
        return self.inner.list_keys(prefix)

    def get_ref(self, key: str, *, max_bytes: int = 1 << 20) -> Ref | None:
        self.requests += 1
        return self.inner.get_ref(key, max_bytes=max_bytes)

    def swap_ref(self, key: str, data: bytes, expected_etag: str | None) -> bool:
        self._write()
        return self.inner.swap_ref(key, data, expected_etag)

    def delete(self, key: str) -> None:
        self._write()
        self.inner.delete(key)

    def sweep_leftovers(
        self, before: float, folders: Iterable[str], *, dry_run: bool = False
    ) -> tuple[int, int]:
        self.requests += 1
        return self.inner.sweep_leftovers(before, folders, dry_run=dry_run)

    def probe(self) -> None:
        self.inner.probe()


def _main(argv: list[str]) -> None:
    from worksnap.remote.repository import Repository
    from worksnap.remote.sync import pull, push

    command, url, store, records, session, kill_at, pack_bytes = argv
    if command == "pull":  # killed at the kill_at-th object added locally
        local = DirLocal(Path(store), Path(records), kill_at_add=int(kill_at))
        pull(local, Repository.open(open_transport(url)), session)
        return
    assert command == "push"
    transport = Counting(open_transport(url), kill_at=int(kill_at))
    local = DirLocal(Path(store), Path(records))
    repo = Repository.open(transport, create=True)
    push(local, repo, session, pack_bytes=int(pack_bytes))
    print(transport.writes)


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    _main(sys.argv[1:])
