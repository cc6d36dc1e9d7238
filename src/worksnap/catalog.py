"""Catalog: the snapshots of one store, listed, named by refs, loaded safely, saved, verified.

A ref is a full id, a unique id prefix (4 characters or more), `latest`, `latest~N`
or `step:N` (those within a session; `latest` skips snapshots taken automatically).
`load` is the only way a stored snapshot reaches the rest of worksnap: it refuses one
that is damaged, hostile, misfiled or of another root. A snapshot is a record naming
its root tree (format 2; `load` flattens the trees into the format 1 `Manifest`, which
stays the API), or, in a store not migrated yet, a format 1 manifest read as it is.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Hashable

import msgspec

from worksnap.differences import differing
from worksnap.errors import ChangedError, InputError, ManifestError, ObjectError
from worksnap.flatbuild import from_flat
from worksnap.hash import hash_bytes
from worksnap.history import CHECKPOINT, UNDO_KINDS, Sessions, is_automatic
from worksnap.layout import is_snapshot_id
from worksnap.lock import Locks
from worksnap.manifest import (
    Entry,
    Manifest,
    Summary,
    check_manifest,
    encode_manifest,
    tree_digest,
)
from worksnap.migration import UpgradeReport, migrate
from worksnap.paths import Digest, Root, ancestors, is_under
from worksnap.progress import Reporter
from worksnap.record import Record, check_record, loose_of, manifest_of, record_of
from worksnap.store import Store
from worksnap.treewalk import Flat, Loose, Nodes, Subtrees, flatten
from worksnap.treewalk import count_changes as count_tree_changes
from worksnap.verifying import verify

MIN_PREFIX = 4
"""The fewest characters of an id a ref may give: `show 1` must not pick some snapshot."""

ID_LENGTH = 12

CHECKED_KEPT = 4
"""How many checked manifests are remembered (checking a big one costs more than reading it).

A long-lived watched workspace (the daemon's) keeps one: each is about 17 MB at 47k files."""


_PARTIAL = (
    "a checkpoint holds only the files captured in it: compare it with the tree now "
    "(`worksnap diff REF`, one ref)"
)


class Catalog:
    """The snapshots in `store` of the workspace at `root`.

    Args:
        store: where records, format 1 manifests and objects are.
        locks: the store's locks (a migration takes the exclusive one).
        root: the root every loaded manifest must belong to.
        sessions: session state (a new snapshot clears its session's redo stack).
        lean: a long-lived process (the daemon's watched workspace): remember one
            checked manifest, not `CHECKED_KEPT`.
    """

    def __init__(
        self, store: Store, root: Root, sessions: Sessions, *, locks: Locks, lean: bool = False
    ) -> None:
        self._store = store
        self._kept = 1 if lean else CHECKED_KEPT
        self._locks = locks
        self._root = root
        self._sessions = sessions
        self._last_full: tuple[str, str, str] | None = None
        """(session, id, root tree) of the last full snapshot saved."""
        self._basis: tuple[builtins.list[str], tuple[str, str] | None] | None = None
        """What `_changed` found from the store: the sorted ids stored then, and the
        session's newest full snapshot among them as (time, id); for `_note_newest`."""
        self._total: tuple[str, int] | None = None
        """(root tree, bytes of its files) of the last snapshot saved."""
        self._checked: dict[tuple[str, Hashable], Manifest] = {}
        self._checked_lock = threading.Lock()
        self.nodes = Nodes(store.read)
        """The tree nodes compared last (the changed count, plans): read and checked once."""
        self.known: Subtrees | None = None
        """What a loaded snapshot shares with the last capture (`Capture.subtree`): its
        entries are taken from there, not read (a watched workspace's)."""

    # -- finding --------------------------------------------------------------

    def list(self, session: str | None) -> builtins.list[Summary]:
        """Returns a session's snapshots (None: every session's), newest first; damaged skipped."""
        return self.listing(session)[0]

    def listing(self, session: str | None) -> tuple[builtins.list[Summary], builtins.list[str]]:
        """`list`, and one line for each damaged snapshot it skipped.

        Nothing is kept here: the daemon's reading threads share a catalog.
        """
        summaries, problems = self._store.summaries()
        if session is not None:
            summaries = [s for s in summaries if s.session == session]
        summaries.sort(key=lambda s: (s.time, s.id), reverse=True)
        return summaries, problems

    def resolve(self, ref: str, session: str) -> str:
        """Returns the snapshot id a ref names.

        A ref is a full id; a unique prefix of at least `MIN_PREFIX` characters; `latest`,
        the session's newest snapshot not taken automatically (`history.AUTOMATIC_KINDS`);
        `latest~N`, the Nth such snapshot before it; or `step:N`, the session's newest
        snapshot of step N. A bare number is refused (it reads as a step).

        Raises:
            InputError: the ref names no snapshot, or more than one, or is malformed.
        """
        if ref == "latest" or ref.startswith("latest~"):
            return self._latest(ref, session)
        if ref.startswith("step:"):
            try:
                wanted = int(ref[len("step:") :])
            except ValueError:
                raise InputError(f"bad ref {ref!r}: step:N needs a number") from None
            found = next((s for s in self.list(session) if s.step == wanted), None)
            if found is None:
                raise InputError(f"no snapshot matches {ref!r} in session {session!r}")
            return found.id
        wanted_id = ref.lower()
        if is_snapshot_id(wanted_id) and self._store.manifest_stamp(wanted_id) is not None:
            return wanted_id  # a full id, stored: no need to list every snapshot
        matches = [i for i in self._store.ids() if i.startswith(wanted_id)] if ref else []
        if ref.isdigit() and len(ref) < ID_LENGTH:
            also = (
                f", or snapshot {matches[0]}"
                if len(matches) == 1 and len(ref) >= MIN_PREFIX
                else ""
            )
            raise InputError(f"ref {ref!r} is a bare number: did you mean step:{ref}{also}?")
        if len(ref) < MIN_PREFIX and len(matches) != 0:
            raise InputError(
                f"ref {ref!r} is too short: give at least {MIN_PREFIX} characters of an id"
            )
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise InputError(f"no snapshot matches {ref!r}")
        raise InputError(f"ref {ref!r} is ambiguous: it matches {len(matches)} snapshots")

    def _latest(self, ref: str, session: str) -> str:
        back = 0
        if ref != "latest":
            count = ref[len("latest~") :]
            if not count.isdigit():
                raise InputError(f"bad ref {ref!r}: latest~N needs a whole number")
            back = int(count)
        everything = self.list(session)
        chosen = [s for s in everything if not is_automatic(s.kind)]
        if back < len(chosen):
            return chosen[back].id
        if not everything:
            raise InputError(f"no snapshot matches {ref!r}: session {session!r} has none yet")
        raise InputError(
            f"no snapshot matches {ref!r}: session {session!r} has "
            f"{len(chosen) or 'no'} snapshot{'' if len(chosen) == 1 else 's'} taken on purpose "
            "(`latest` skips those worksnap took on its own: name them by id)"
        )

    def load(self, ref: str, session: str) -> Manifest:
        """Loads and checks a snapshot: it must be intact, safe, and of this root.

        Raises:
            InputError: unknown ref; ManifestError: unreadable, hostile or for another root.
        """
        return self.load_id(self.resolve(ref, session))

    def load_id(self, snapshot_id: str, *, from_store: bool = False) -> Manifest:
        """Loads and checks the snapshot of a full id (see `load`).

        `from_store`: every tree read from the store, none taken from memory (the last
        capture's, the last loads'): what `verify` checks (a review: the daemon's verify
        read no tree its watched capture shared, and passed a damaged one).
        """
        # Remember the last few checked ones, keyed by what the store says changes with
        # the stored snapshot, so an edited file is checked again.
        stamp = None if from_store else self._store.manifest_stamp(snapshot_id)
        identity = None if stamp is None else (snapshot_id, stamp)
        checked = self._checked.get(identity) if identity is not None else None
        if checked is not None:
            return checked
        record = self._store.load_record(snapshot_id)
        if record is not None:
            manifest = self._flatten(record, snapshot_id, known=None if from_store else self.known)
        else:
            manifest = self._store.load_manifest(snapshot_id)
        if manifest.id != snapshot_id:
            raise ManifestError(snapshot_id, f"file holds snapshot {manifest.id!r}")
        check_manifest(
            manifest,
            root=self._root.wire,
            store_rel=self._root.store_rel,
            source=snapshot_id,
            from_trees=record is not None,
        )
        if identity is not None:
            with self._checked_lock:  # the daemon's reading commands share it
                self._checked[identity] = manifest
                while len(self._checked) > self._kept:
                    del self._checked[next(iter(self._checked))]
        return manifest

    def root_trees(self, ref: str, ref2: str | None, session: str) -> tuple[Digest, Digest] | None:
        """The root trees of two snapshots' checked records (None: no `ref2`, or format 1).

        The trees are read and compared, nothing written: `Store.reading_few`.
        """
        if ref2 is None:
            return None
        self._store.reading_few()
        first, second = (self.record(self.resolve(r, session)) for r in (ref, ref2))
        if first is None or second is None:
            return None
        if CHECKPOINT in (first.kind, second.kind):
            raise InputError(_PARTIAL)
        return Digest(first.tree), Digest(second.tree)

    def whole(self, old: Manifest, new: Manifest) -> tuple[Manifest, Manifest]:
        """Two snapshots to compare, both whole: a checkpoint holds only what it captured.

        (Against the tree now, one stands for what rewinding it restores: `Restorer.plan`.)

        Raises:
            InputError: a checkpoint compared with a snapshot.
        """
        if CHECKPOINT in (old.kind, new.kind):
            raise InputError(_PARTIAL)
        return old, new

    def still_stored(self, target: Manifest) -> Manifest:
        """Returns `target` if it is still in the store (a restore, under the lock).

        It was loaded before the lock was taken: a gc may have dropped it, and its
        objects, while the restore waited.

        Raises:
            ChangedError: it is gone; nothing was changed.
        """
        if self._store.manifest_stamp(target.id) is None:
            raise ChangedError(
                f"snapshot {target.id} was removed from the store (by a gc) while this "
                "command waited for it; nothing was changed underneath: retry"
            )
        return target

    def record(self, snapshot_id: str) -> Record | None:
        """Returns a snapshot's checked record (None: a format 1 snapshot).

        Raises:
            ManifestError: the record is unreadable, hostile or for another root.
        """
        record = self._store.load_record(snapshot_id)
        if record is not None:
            if record.id != snapshot_id:
                raise ManifestError(snapshot_id, f"file holds snapshot {record.id!r}")
            check_record(record, root=self._root.wire, source=snapshot_id)
        return record

    def _flatten(self, record: Record, snapshot_id: str, *, known: Subtrees | None) -> Manifest:
        """The flat view of a format 2 snapshot, every tree object checked as it is read."""
        if record.id != snapshot_id:
            raise ManifestError(snapshot_id, f"file holds snapshot {record.id!r}")
        check_record(record, root=self._root.wire, source=snapshot_id)
        try:
            flat = flatten(
                Digest(record.tree), self._store.read, loose=loose_of(record), known=known
            )
        except ObjectError as exc:
            # (the cause kept: `verify --repair` takes a damaged copy as not stored)
            raise ManifestError(snapshot_id, f"tree object {exc.digest} {exc.reason}") from exc
        except ManifestError as exc:  # named after the snapshot, as every refusal of one is
            raise ManifestError(snapshot_id, f"{exc.source}: {exc.reason}") from None
        return manifest_of(record, flat)

    def show_bytes(self, ref: str, session: str) -> bytes:
        """Returns a snapshot's format 1 manifest JSON (after the checks `load` makes)."""
        self._store.reading_few()  # its trees are read, nothing written
        snapshot_id = self.resolve(ref, session)
        manifest = self.load_id(snapshot_id)
        if self._store.load_record(snapshot_id) is not None:
            return encode_manifest(manifest)
        return self._store.manifest_bytes(snapshot_id)

    def has_legacy(self) -> bool:
        """True while the store holds a format 1 manifest (it is not fully migrated)."""
        return bool(self._store.legacy_ids())

    def legacy_digest(self, manifest: Manifest) -> str | None:
        """The format 1 digest of a manifest while the store holds format 1 snapshots.

        Their summaries hold that form of `tree`, so an undo compares in both.
        """
        return tree_digest(manifest.entries, manifest.dirs) if self.has_legacy() else None

    def upgrade(self, *, dry_run: bool, report: Reporter | None = None) -> UpgradeReport:
        """Migrates a format 1 store to format 2 in place (migration.py), under the lock."""
        if not self._store.exists():
            return UpgradeReport(dry_run=dry_run)
        locks = self._locks
        with locks.shared("upgrade --dry-run") if dry_run else locks.exclusive("upgrade"):
            upgraded = migrate(
                self._store, store_rel=self._root.store_rel, report=report, dry_run=dry_run
            )
        self._last_full = None
        return upgraded

    def upgrade_if_needed(self, report: Reporter | None = None) -> None:
        """Before a command writes: a format 1 store is migrated first.

        One `listdir` when there is nothing to do. A damaged format 1 manifest is left
        as it is (and tried again next time); the command goes on.
        """
        if self._store.exists() and self._store.legacy_ids():
            self.upgrade(dry_run=False, report=report)

    def entry(self, ref: str, path: str, session: str) -> Entry:
        """Returns the file or symlink a snapshot holds at `path` (a relative wire path).

        Raises:
            InputError: it holds none there (the message says if it left it out).
        """
        self._store.reading_few()  # its trees and the file are read, nothing written
        manifest = self.load(ref, session)
        found = next((e for e in manifest.entries if e.path == path), None)
        if found is not None:
            return found
        why = "it holds no such file"
        links = {e.path for e in manifest.entries if e.type == "symlink"}
        if (link := next((p for p in ancestors(path) if p in links), None)) is not None:
            why = f"it is reached through the symbolic link {link!r} (never followed)"
        if path in manifest.dirs:
            why = "it is a directory there"
        for name in ("large", "ignored", "excluded"):
            if any(is_under(path, p) for p in getattr(manifest, name)):
                why = f"it left that out ({name})"
        raise InputError(f"{path!r} is not in snapshot {manifest.id}: {why}")

    def attachment(self, ref: str, name: str, session: str) -> bytes:
        """Returns the bytes of a snapshot's named attachment."""
        manifest = self.load(ref, session)
        digest = manifest.attachments.get(name)
        if digest is None:
            names = ", ".join(sorted(manifest.attachments)) or "none"
            raise InputError(f"snapshot {manifest.id} has no attachment {name!r} (has: {names})")
        return self._store.read(digest)

    def later_checkpoints(self, first: Manifest, session: str) -> builtins.list[Manifest]:
        """Returns `first` and every later checkpoint of the session, oldest first."""
        later = [
            s for s in self.list(session)
            if s.kind == CHECKPOINT and (s.time, s.id) > (first.time, first.id)
        ]  # fmt: skip
        later.sort(key=lambda s: (s.time, s.id))
        return [first, *(self.load(s.id, session) for s in later)]

    def verify(
        self,
        ref: str | None,
        session: str,
        *,
        report: Reporter | None = None,
        repair: bool = False,
        where: Callable[[str], str] | None = None,
    ) -> builtins.list[str]:
        """Checks that every object the snapshot (or every snapshot) needs is present and intact.

        One line for each problem found; empty when all is well (`verifying.verify`).
        """
        return verify(
            self, self._store, self._locks, ref, session, report=report, repair=repair, where=where
        )

    # -- saving ---------------------------------------------------------------

    def store_attachments(self, attach: dict[str, bytes] | None) -> dict[str, str]:
        """Stores named attachments as objects; returns name -> digest.

        Raises:
            InputError: a name is empty or holds a slash or NUL.
        """
        stored: dict[str, str] = {}
        for name, data in (attach or {}).items():
            if not name or "/" in name or "\x00" in name:
                raise InputError(f"bad attachment name {name!r}")
            digest = hash_bytes(data)
            self._store.add(digest, data)
            stored[name] = digest
        return stored

    def save(
        self, manifest: Manifest, session: str, *, built: tuple[Loose, int] | None = None
    ) -> Manifest:
        """Stores a new snapshot of `session`: its trees, then its record.

        The record holds the count of paths changed since the session's previous full
        snapshot (its `parent`). A new snapshot clears the session's redo stack, unless
        undo or redo took it.

        Args:
            manifest: the snapshot.
            session: the session it belongs to.
            built: its left-out paths no tree holds, and its files' bytes, when the capture
                stored its trees (`manifest.tree` is then the root tree's digest); None:
                build them here.

        Returns:
            The snapshot as stored: `manifest` with `tree` its root tree's digest.
        """
        if built is not None:
            tree, (loose, total) = Digest(manifest.tree), built
            self._total = (tree, total)
        else:
            tree, loose = from_flat(Flat.of(manifest), self._store.add_tree)
        stored = manifest if manifest.tree == tree else msgspec.structs.replace(manifest, tree=tree)
        parent, changed = self._changed(stored, session)
        total = self.total_bytes(stored)
        self._store.save_record(
            record_of(stored, tree, loose, parent=parent, changed=changed, total=total)
        )
        if _counts_as_previous(stored.kind):
            self._last_full = (stored.session, stored.id, stored.tree)
        self._note_newest(stored)
        if stored.kind not in UNDO_KINDS:
            self._sessions.clear_redo(session)
        return stored

    def replace(self, manifest: Manifest) -> Manifest:
        """Stores a snapshot over the one with its id (a checkpoint's new before-images).

        Its trees are written and then its record, without a parent or a changed count.

        Returns:
            The snapshot as stored (`tree` its root tree's digest).
        """
        tree, loose = from_flat(Flat.of(manifest), self._store.add_tree)
        stored = manifest if manifest.tree == tree else msgspec.structs.replace(manifest, tree=tree)
        self._store.save_record(record_of(stored, tree, loose))
        return stored

    def forget_last(self) -> None:
        """Forgets the last full snapshot saved (a gc may have dropped it)."""
        self._last_full = None

    def total_bytes(self, manifest: Manifest) -> int:
        """The bytes of a snapshot's files, summed once for each root tree.

        A tree's digest names its files and their sizes: a snapshot of an unchanged
        tree does not add up every entry again.
        """
        if self._total is None or self._total[0] != manifest.tree:
            self._total = (manifest.tree, sum(e.size or 0 for e in manifest.entries))
        return self._total[1]

    def _note_newest(self, stored: Manifest) -> None:
        """Notes the session's newest full snapshot for the next process (`_pointed_last`).

        Newest as `list` orders them, by (time, id): this one or the one `_changed`
        found. Only when the ids stored now are those it found and this one: a snapshot
        another process stored or dropped meanwhile is of a time not known here (two at
        once in one session, a clock set back), and the note is then dropped instead.
        """
        basis, self._basis = self._basis, None
        if basis is None:
            return  # found in memory (or a checkpoint): the next process lists the records
        ids, newest = basis
        now = sorted(self._store.ids())
        if now != sorted([*ids, stored.id]):
            self._sessions.note_newest(stored.session, None, "")
            return
        if _counts_as_previous(stored.kind) and (
            newest is None or newest < (stored.time, stored.id)
        ):
            newest = (stored.time, stored.id)
        if newest is not None:
            self._sessions.note_newest(stored.session, newest[1], _digest_of(now))

    def _pointed_last(self, session: str, ids: builtins.list[str]) -> tuple[str, str, str] | None:
        """(id, root tree, time) of the session's newest full snapshot, or None.

        None: then every record is read (2,000 of them took 0.13 s). The cache names it
        (`Sessions.newest`), only while the ids stored are those it was noted with (the
        sorted `ids`); the record must be of that session and count as a previous
        snapshot; its tree and time are the record's own.
        """
        snapshot_id = self._sessions.newest(session, _digest_of(ids))
        if snapshot_id is None:
            return None
        try:
            record = self._store.load_record(snapshot_id)
        except ManifestError:
            return None
        if record is None or record.session != session or not _counts_as_previous(record.kind):
            return None
        return snapshot_id, record.tree, record.time

    def _changed(self, manifest: Manifest, session: str) -> tuple[str | None, int | None]:
        """The session's previous full snapshot, and the paths changed since (None: no such).

        That is its previous full snapshot that was not taken automatically. Its trees
        are compared with the new ones, skipping every subtree they share.
        """
        if manifest.kind == CHECKPOINT:
            return None, None
        previous = self._last_full
        if previous is None or previous[0] != session:
            ids = sorted(self._store.ids())
            found = self._pointed_last(session, ids)
            if found is None:
                listed = (s for s in self.list(session) if _counts_as_previous(s.kind))
                summary = next(listed, None)
                found = None if summary is None else (summary.id, summary.tree, summary.time)
            self._basis = (ids, None if found is None else (found[2], found[0]))
            if found is None:
                return None, None
            previous = (session, found[0], found[1])
        _, parent, tree = previous
        if tree == manifest.tree:
            return parent, 0  # equal root trees: nothing to read
        try:
            if self._store.load_record(parent) is not None:
                return parent, count_tree_changes(Digest(tree), Digest(manifest.tree), self.nodes)
            return parent, count_changes(self._store.load_manifest(parent), manifest)
        except (ManifestError, ObjectError):
            return parent, None


def _counts_as_previous(kind: str) -> bool:
    """True for a snapshot CHANGED is counted against: full, and not taken automatically."""
    return kind != CHECKPOINT and not is_automatic(kind)


def count_changes(old: Manifest, new: Manifest) -> int:
    """Counts the paths (files, links, dirs) that differ between two full snapshots."""
    only_old, only_new = differing(old.entries, new.entries)
    paths = {e.path for e in only_old}
    paths.update(e.path for e in only_new)
    paths.update(set(old.dirs).symmetric_difference(new.dirs))
    return len(paths)


def _digest_of(ids: list[str]) -> str:
    """A digest of the sorted ids of every stored snapshot (what a listing gives)."""
    return hash_bytes("\n".join(ids).encode())
