"""Catalog: the snapshots of one store, listed, named by refs, loaded safely, saved, verified.

A ref is a full id, a unique id prefix (4 characters or more), `latest`, `latest~N`
or `step:N` (those within a session; `latest` skips snapshots taken automatically).
`load` is the only way a stored manifest reaches the rest of worksnap: it refuses one
that is damaged, hostile, misfiled or of another root.
"""

from __future__ import annotations

import builtins
from collections.abc import Hashable

from worksnap.errors import InputError, ManifestError, ObjectError
from worksnap.hash import hash_bytes
from worksnap.history import CHECKPOINT, UNDO_KINDS, Sessions, is_automatic
from worksnap.manifest import Entry, Manifest, Summary, check_manifest, summarize
from worksnap.paths import Root, is_under
from worksnap.plan import differing
from worksnap.progress import Reporter
from worksnap.store import Store

MIN_PREFIX = 4
"""The fewest characters of an id a ref may give: `show 1` must not pick some snapshot."""

ID_LENGTH = 12

_VERIFY_REPORT_EVERY = 64
"""Objects read between two progress reports of `verify`."""

_CHECKED_KEPT = 4
"""How many checked manifests are remembered (checking a big one costs more than reading it)."""


class Catalog:
    """The snapshots in `store` of the workspace at `root`.

    Args:
        store: where manifests, summaries and objects are.
        root: the root every loaded manifest must belong to.
        sessions: session state (a new snapshot clears its session's redo stack).
    """

    def __init__(self, store: Store, root: Root, sessions: Sessions) -> None:
        self._store = store
        self._root = root
        self._sessions = sessions
        self.problems: builtins.list[str] = []
        """One line for each damaged snapshot the last `list` skipped."""
        self._last_full: Manifest | None = None
        self._checked: dict[tuple[str, Hashable], Manifest] = {}

    # -- finding --------------------------------------------------------------

    def list(self, session: str | None) -> builtins.list[Summary]:
        """Returns a session's snapshots (None: every session's), newest first.

        Damaged snapshots are skipped; `problems` then holds one line for each.
        """
        summaries, self.problems = self._store.summaries()
        if session is not None:
            summaries = [s for s in summaries if s.session == session]
        summaries.sort(key=lambda s: (s.time, s.id), reverse=True)
        return summaries

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
        snapshot_id = self.resolve(ref, session)
        # Remember the last few checked ones, keyed by what the store says changes with
        # the stored manifest, so an edited file is checked again.
        stamp = self._store.manifest_stamp(snapshot_id)
        identity = None if stamp is None else (snapshot_id, stamp)
        checked = self._checked.get(identity) if identity is not None else None
        if checked is not None:
            return checked
        manifest = self._store.load_manifest(snapshot_id)
        if manifest.id != snapshot_id:
            raise ManifestError(snapshot_id, f"file holds snapshot {manifest.id!r}")
        check_manifest(
            manifest, root=self._root.wire, store_rel=self._root.store_rel, source=snapshot_id
        )
        if identity is not None:
            self._checked[identity] = manifest
            while len(self._checked) > _CHECKED_KEPT:
                del self._checked[next(iter(self._checked))]
        return manifest

    def show_bytes(self, ref: str, session: str) -> bytes:
        """Returns a snapshot's manifest exactly as stored (after the checks `load` makes)."""
        self.load(ref, session)
        return self._store.manifest_bytes(self.resolve(ref, session))

    def entry(self, ref: str, path: str, session: str) -> Entry:
        """Returns the file or symlink a snapshot holds at `path` (a relative wire path).

        Raises:
            InputError: it holds none there (the message says if it left it out).
        """
        manifest = self.load(ref, session)
        found = next((e for e in manifest.entries if e.path == path), None)
        if found is not None:
            return found
        why = "it holds no such file"
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
        self, ref: str | None, session: str, *, report: Reporter | None = None
    ) -> builtins.list[str]:
        """Checks that every object the snapshot (or every snapshot) needs is present and intact.

        Args:
            ref: the snapshot (None: every snapshot of the store).
            session: where `latest` and `step:N` look.
            report: told how many of the objects have been read ("verify").

        Returns:
            One line for each problem found; empty when all is well.
        """
        problems = self._store.problems()  # damage that commands work around (pack indexes)
        ids = [self.resolve(ref, session)] if ref is not None else self._store.ids()
        loaded: builtins.list[Manifest] = []
        for snapshot_id in ids:
            try:
                loaded.append(self.load(snapshot_id, session))
            except ManifestError as exc:
                problems.append(str(exc))
        needed = list(dict.fromkeys(e.hash for m in loaded for e in m.entries if e.hash))
        checked: dict[str, str | None] = {}
        for done, digest in enumerate(needed, 1):
            try:
                self._store.check(digest)  # a piece at a time: any size
                checked[digest] = None
            except ObjectError as exc:
                checked[digest] = exc.reason
            if report is not None and (done % _VERIFY_REPORT_EVERY == 0 or done == len(needed)):
                report("verify", done, len(needed))
        for manifest in loaded:
            for entry in manifest.entries:
                reason = checked.get(entry.hash) if entry.hash else None
                if reason is not None:
                    problems.append(f"{manifest.id}: {entry.path}: object {entry.hash} {reason}")
        return problems

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

    def save(self, manifest: Manifest, session: str) -> None:
        """Stores a new snapshot of `session`, with the count of paths changed since the last.

        A new snapshot clears the session's redo stack, unless undo or redo took it.
        """
        changed = self._changed(manifest, session)
        self._store.save_manifest(manifest, summarize(manifest, changed=changed))
        if _counts_as_previous(manifest.kind):
            self._last_full = manifest
        if manifest.kind not in UNDO_KINDS:
            self._sessions.clear_redo(session)

    def forget_last(self) -> None:
        """Forgets the last full snapshot saved (a gc may have dropped it)."""
        self._last_full = None

    def _changed(self, manifest: Manifest, session: str) -> int | None:
        """Counts the paths changed since the session's previous snapshot (None: no such).

        That is its previous full snapshot that was not taken automatically.
        """
        if manifest.kind == CHECKPOINT:
            return None
        previous = self._last_full
        if previous is None or previous.session != session:
            summary = next((s for s in self.list(session) if _counts_as_previous(s.kind)), None)
            if summary is None:
                return None
            if summary.tree == manifest.tree:
                return 0  # the summary says enough: no manifest to read
            try:
                previous = self._store.load_manifest(summary.id)
            except ManifestError:
                return None
        if previous.tree == manifest.tree:
            return 0
        return count_changes(previous, manifest)


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
