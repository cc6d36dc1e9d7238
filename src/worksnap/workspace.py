"""Workspace: one root and its store, and the operations the API and the CLI offer on them.

This is the only module that strings the stages together:
scan -> hash -> store -> manifest for a snapshot, and
load -> plan -> (pre-restore snapshot, journal) -> apply for a restore.
"""

from __future__ import annotations

import builtins
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from worksnap.apply import Result, apply_plan, remove_leftovers
from worksnap.errors import (
    ConflictError,
    InputError,
    ManifestError,
    ObjectError,
    RestoreError,
    SnapshotError,
    WorksnapError,
)
from worksnap.fsio import fsync_dir, write_atomic
from worksnap.hash import SMALL, read_file
from worksnap.ignore import Rules, base_rules, ignore_checker
from worksnap.lock import StoreLock
from worksnap.manifest import (
    VERSION,
    Entry,
    Manifest,
    Summary,
    check_manifest,
    check_path,
    fs_path,
    new_id,
    now_rfc3339,
    tree_digest,
    wire_name,
)
from worksnap.plan import Plan, ancestors, plan_restore
from worksnap.scan import scan_tree
from worksnap.store import StatKey, Store

DEFAULT_MAX_FILE_BYTES = 2 << 20
"""Files larger than this (2 MiB) are listed in `large` and not captured."""

STORE_DIR_NAME = ".worksnap"
"""The store's default location, relative to the root."""

# A cached digest is trusted only for a file whose times are older than the scan
# that recorded it by more than a filesystem timestamp tick: a file changed again
# within the same tick would otherwise keep its stat and its stale digest (racy git).
_RACY_MARGIN_NS = 100_000_000


@dataclass(frozen=True, slots=True)
class Progress:
    """A report on long work: `done` of `total` units of `what` ("hash", "apply")."""

    what: str
    done: int
    total: int


class _Journal(msgspec.Struct, frozen=True, kw_only=True):
    target: str
    pre_restore: str
    pid: int
    host: str


class Workspace:
    """A workspace root and the store that records its snapshots.

    Long-lived: keep one per root in an agent runtime so that the stat cache
    and the store index stay in memory between snapshots.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        store: str | os.PathLike[str] | None = None,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        exclude: tuple[str, ...] = (),
        force: bool = False,
        progress: Callable[[Progress], None] | None = None,
    ) -> None:
        """Opens the workspace at `root` (nothing is written until the first snapshot).

        Args:
            root: the directory to snapshot.
            store: the store directory (default `<root>/.worksnap`).
            max_file_bytes: files larger than this are listed in `large`, not stored.
            exclude: paths (relative to the root, or absolute inside it) never captured
                nor touched; a directory excludes everything below it.
            force: allow `/` or the home directory as a root.
            progress: called now and then during long work.

        Raises:
            InputError: the root is missing, not a directory, `/` or home without
                `force`, or an exclusion lies outside the root.
        """
        if not os.path.isdir(root):
            raise InputError(f"root {os.fspath(root)!r} is not a directory")
        self.root = os.path.realpath(root)
        if not force and self.root in ("/", os.path.realpath(os.path.expanduser("~"))):
            raise InputError(
                f"refusing to snapshot {self.root}: it is / or your home directory "
                "(pass --force if you really mean it)"
            )
        if max_file_bytes < 0:
            raise InputError("max_file_bytes must not be negative")
        env_store = os.environ.get("WORKSNAP_STORE")
        store_path = store if store is not None else env_store
        self.store_dir = (
            os.path.abspath(store_path) if store_path else os.path.join(self.root, STORE_DIR_NAME)
        )
        self.max_file_bytes = max_file_bytes
        self._wire_root = wire_name(self.root)
        real_store = os.path.realpath(self.store_dir)
        if real_store == self.root or self.root.startswith(real_store.rstrip("/") + "/"):
            # A restore would treat the store's own files as workspace files.
            raise InputError(f"store {self.store_dir} must not be the root or contain it")
        store_rel = self._relative(real_store)
        self._store_rel = store_rel
        excluded = {self._exclusion(path) for path in exclude}
        if store_rel is not None:
            excluded.add(store_rel)
        self._exclude = frozenset(excluded)
        self._progress = progress
        self.store = Store(self.store_dir)
        self._rules: Rules | None = None
        self.problems: builtins.list[str] = []
        """One line for each damaged snapshot the last `list` skipped."""
        self._stat_cache: dict[str, tuple[StatKey, str]] | None = None

    # -- helpers -------------------------------------------------------------

    def _relative(self, path: str) -> str | None:
        """Returns `path` (absolute) relative to the root in wire form, or None if outside."""
        rel = os.path.relpath(path, self.root)
        if rel in {".", ".."} or rel.startswith("../"):
            return None
        return wire_name(rel)

    def _exclusion(self, path: str) -> str:
        absolute = os.path.normpath(os.path.join(self.root, path))
        rel = self._relative(absolute)
        if rel is None or check_path(rel, "exclusion") is not None:
            raise InputError(f"exclusion {path!r} is not a path inside {self.root}")
        return rel

    def _report(self, what: str, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress(Progress(what, done, total))

    def close(self) -> None:
        """Releases open files; the workspace may be used again afterwards."""
        self.store.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- snapshot ------------------------------------------------------------

    def _base_rules(self) -> Rules:
        if self._rules is None:
            self._rules = base_rules(Path(self.root))
        return self._rules

    def _ensure_store(self) -> None:
        if not self.store.exists():
            self.store.create()
        binding = os.path.join(self.store_dir, "root")
        try:
            with open(binding, encoding="utf-8", errors="surrogateescape") as f:
                bound = f.read().rstrip("\n")
        except FileNotFoundError:
            write_atomic(binding, os.fsencode(self.root) + b"\n")
            return
        if bound != self.root:
            raise InputError(
                f"store {self.store_dir} belongs to {bound}, not {self.root} "
                "(if the project moved, run `worksnap rebind`)"
            )

    def capture(self, *, store_objects: bool) -> Manifest:
        """Records the workspace's current state as an unsaved manifest (kind "current").

        Args:
            store_objects: also store every file's bytes (what a snapshot does);
                without it only digests are computed, and nothing is written
                except the stat cache.
        """
        scan_start = time.time_ns()
        found = scan_tree(
            self.root,
            self._base_rules(),
            exclude=self._exclude,
            max_file_bytes=self.max_file_bytes,
        )
        if self._stat_cache is None:
            self._stat_cache = self.store.load_stat_cache(self.root) if self.store.exists() else {}
        cache = self._stat_cache
        fresh: dict[str, tuple[StatKey, str]] = {}
        trust_before = scan_start - _RACY_MARGIN_NS
        entries: list[Entry] = []
        total = len(found.files)
        for done, (rel, seen) in enumerate(found.files):
            st = seen
            key: StatKey = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            hit = cache.get(rel)
            digest = hit[1] if hit is not None and hit[0] == key else None
            if digest is None or (store_objects and not self.store.has(digest)):
                digest, st = self._hash_and_store(rel, store_objects=store_objects)
                key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            if st.st_mtime_ns < trust_before and st.st_ctime_ns < trust_before:
                fresh[rel] = (key, digest)
            entries.append(
                Entry(path=rel, type="file", mode=st.st_mode & 0o777, hash=digest, size=st.st_size)
            )
            if done % 4096 == 4095:
                self._report("hash", done + 1, total)
        entries.extend(
            Entry(path=rel, type="symlink", mode=mode, target=target)
            for rel, target, mode in found.symlinks
        )
        entries.sort(key=lambda e: e.path)
        dirs = sorted(found.dirs)
        if fresh != cache and self.store.exists():
            self.store.save_stat_cache(self.root, fresh)
        self._stat_cache = fresh
        return Manifest(
            version=VERSION,
            id=new_id(),
            root=self._wire_root,
            kind="current",
            step=None,
            time=now_rfc3339(),
            max_file_bytes=self.max_file_bytes,
            tree=tree_digest(entries, dirs),
            entries=entries,
            dirs=dirs,
            ignored=sorted(found.ignored),
            large=sorted(found.large),
            excluded=sorted(found.excluded),
        )

    def _hash_and_store(self, rel: str, *, store_objects: bool) -> tuple[str, os.stat_result]:
        path = os.path.join(self.root, os.fsdecode(fs_path(rel)))
        digest, data, st = read_file(path, rel, keep=store_objects)
        if store_objects:
            if data is not None:
                self.store.add(digest, data)
            elif st.st_size >= SMALL:
                self.store.add_file(digest, path, rel)
        return digest, st

    def snapshot(
        self,
        *,
        kind: str = "manual",
        step: int | None = None,
        label: str | None = None,
        session: str = "default",
        meta: dict[str, str] | None = None,
    ) -> Manifest:
        """Captures the whole workspace and stores it as a new snapshot.

        Every call records a new snapshot with its own id, even when nothing
        changed (then no new object is written).

        Raises:
            SnapshotError: a file could not be read or the store not written.
        """
        if step is not None and step < 0:
            raise InputError("step must not be negative")
        self._recover_if_interrupted()
        try:
            self._ensure_store()
            with StoreLock(self.store_dir, exclusive=False):
                current = self.capture(store_objects=True)
                manifest = msgspec.structs.replace(
                    current,
                    kind=kind,
                    step=step,
                    label=_one_line(label),
                    session=session,
                    meta=dict(meta or {}),
                )
                self.store.save_manifest(manifest, _summarize(manifest))
        except OSError as exc:
            raise SnapshotError("", f"cannot write the store {self.store_dir}: {exc}") from None
        return manifest

    # -- reading snapshots ---------------------------------------------------

    def list(self, *, session: str | None = None) -> list[Summary]:
        """Returns the snapshots, newest first (damaged ones are skipped; see `problems`)."""
        summaries, self.problems = self.store.summaries()
        if session is not None:
            summaries = [s for s in summaries if s.session == session]
        summaries.sort(key=lambda s: (s.time, s.id), reverse=True)
        return summaries

    def resolve(self, ref: str, *, session: str | None = None) -> str:
        """Returns the snapshot id a ref names: an id, a unique id prefix, `latest`, `step:N`.

        Raises:
            InputError: the ref names no snapshot, or more than one.
        """
        if ref == "latest" or ref.startswith("step:"):
            summaries = self.list(session=session)
            if ref != "latest":
                try:
                    wanted = int(ref[len("step:") :])
                except ValueError:
                    raise InputError(f"bad ref {ref!r}: step:N needs a number") from None
                summaries = [s for s in summaries if s.step == wanted]
            if not summaries:
                raise InputError(f"no snapshot matches {ref!r}")
            return summaries[0].id
        matches = [i for i in self.store.ids() if i.startswith(ref.lower())] if ref else []
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise InputError(f"no snapshot matches {ref!r}")
        raise InputError(f"ref {ref!r} is ambiguous: it matches {len(matches)} snapshots")

    def load(self, ref: str) -> Manifest:
        """Loads and checks a snapshot: it must be intact, safe, and of this root.

        Raises:
            InputError: unknown ref; ManifestError: unreadable, hostile or for another root.
        """
        snapshot_id = self.resolve(ref)
        manifest = self.store.load_manifest(snapshot_id)
        if manifest.id != snapshot_id:
            raise ManifestError(snapshot_id, f"file holds snapshot {manifest.id!r}")
        check_manifest(
            manifest, root=self._wire_root, store_rel=self._store_rel, source=snapshot_id
        )
        return manifest

    def show_bytes(self, ref: str) -> bytes:
        """Returns a snapshot's manifest exactly as stored (after the checks `load` makes)."""
        self.load(ref)
        return self.store.manifest_bytes(self.resolve(ref))

    def verify(self, ref: str | None = None) -> builtins.list[str]:
        """Checks that every object the snapshot (or every snapshot) needs is present and intact.

        Returns:
            One line for each problem found; empty when all is well.
        """
        problems: builtins.list[str] = []
        ids = [self.resolve(ref)] if ref is not None else self.store.ids()
        checked: dict[str, str | None] = {}
        for snapshot_id in ids:
            try:
                manifest = self.load(snapshot_id)
            except ManifestError as exc:
                problems.append(str(exc))
                continue
            for entry in manifest.entries:
                if entry.hash is None:
                    continue
                if entry.hash not in checked:
                    try:
                        self.store.read(entry.hash)
                        checked[entry.hash] = None
                    except ObjectError as exc:
                        checked[entry.hash] = exc.reason
                reason = checked[entry.hash]
                if reason is not None:
                    problems.append(f"{snapshot_id}: {entry.path}: object {entry.hash} {reason}")
        return problems

    # -- restore -------------------------------------------------------------

    def plan_restore(self, target: Manifest) -> Plan:
        """Previews what restoring `target` would change; writes nothing but the stat cache."""
        return self._plan(self.capture(store_objects=False), target)

    def _plan(self, current: Manifest, target: Manifest) -> Plan:
        gitignores: dict[str, bytes] = {}
        for entry in target.entries:
            directory, _, name = entry.path.rpartition("/")
            if name == ".gitignore" and entry.type == "file" and entry.hash is not None:
                gitignores[directory] = self.store.read(entry.hash)
        ignored = ignore_checker(self._base_rules(), gitignores)
        return plan_restore(current, target, ignored_by_target=ignored)

    def restore(self, ref: str) -> Result:
        """Restores the snapshot `ref` names (plan, then apply with every guarantee)."""
        return self.apply(self.plan_restore(self.load(ref)))

    def apply(self, plan: Plan, *, kind: str = "pre-restore") -> Result:
        """Carries out a plan: all or nothing, and undoable.

        Before the first change: every object the plan writes is verified, the
        current state is stored as a `pre-restore` snapshot (and checked against
        what the plan saw), and a journal is written. If a change fails, the
        workspace is rolled back to the pre-restore snapshot.

        Raises:
            ConflictError: a path the plan touches changed since the plan was made.
            ObjectError: an object the plan needs is missing or damaged.
        """
        if not plan.changes:
            return Result(target=plan.target.id)
        self._recover_if_interrupted()
        self._ensure_store()
        with StoreLock(self.store_dir, exclusive=True):
            for change in plan.changes:
                if change.entry is not None and change.entry.hash is not None:
                    self.store.read(change.entry.hash)
            pre = self.capture(store_objects=True)
            pre = msgspec.structs.replace(pre, kind=kind, session=plan.target.session)
            _check_unchanged(plan, pre)
            self.store.save_manifest(pre, _summarize(pre))
            journal = os.path.join(self.store_dir, "journal.json")
            write_atomic(
                journal,
                msgspec.json.encode(
                    _Journal(
                        target=plan.target.id,
                        pre_restore=pre.id,
                        pid=os.getpid(),
                        host=socket.gethostname(),
                    )
                ),
            )
            try:
                result = apply_plan(
                    self.root,
                    plan,
                    self.store.read,
                    progress=lambda done, total: self._report("apply", done, total),
                )
            except BaseException as exc:
                # Interrupted (Ctrl-C, a bug): undo now rather than at the next command.
                failed = Result(target=plan.target.id, error=f"interrupted: {exc!r}")
                self._roll_back(pre, failed, plan.target)
                _remove_journal(journal)
                raise
            result.pre_restore = pre.id
            if not result.ok:
                self._roll_back(pre, result, plan.target)
            _remove_journal(journal)
            self._stat_cache = None  # files were rewritten: trust only fresh stats
            return result

    def _roll_back(self, pre: Manifest, result: Result, target: Manifest | None) -> Result:
        """Returns the workspace to `pre` after a failed apply (the lock is held).

        Returns:
            What the rollback changed.

        Raises:
            RestoreError: the rollback failed too (the journal stays for `recover`).
        """
        self._stat_cache = None  # the failed apply rewrote files: trust only fresh stats
        dirs = [*pre.dirs, *(target.dirs if target is not None else ())]
        remove_leftovers(self.root, dirs)
        back = apply_plan(
            self.root, self._plan(self.capture(store_objects=False), pre), self.store.read
        )
        if not back.ok:
            raise RestoreError(
                f"restore failed ({result.error}) and so did the rollback ({back.error}); "
                f"the pre-restore snapshot {pre.id} holds the earlier state "
                "(run `worksnap recover` to try again)"
            )
        result.rolled_back = True
        return back

    def _recover_if_interrupted(self) -> Result | None:
        """Finishes the rollback of a restore that was killed part-way, if there was one."""
        journal = os.path.join(self.store_dir, "journal.json")
        if not os.path.exists(journal):
            return None
        return self.recover()

    def recover(self) -> Result | None:
        """Rolls back an interrupted restore to its pre-restore snapshot.

        Returns:
            The rollback's result, or None when no restore was interrupted.
        """
        journal = os.path.join(self.store_dir, "journal.json")
        if not os.path.exists(journal):
            return None  # checked again under the lock: this only spares a missing store
        with StoreLock(self.store_dir, exclusive=True):
            try:
                with open(journal, "rb") as f:
                    record = msgspec.json.decode(f.read(), type=_Journal)
            except FileNotFoundError:
                return None  # another process finished it while we waited for the lock
            except (OSError, msgspec.DecodeError, RecursionError) as exc:
                raise RestoreError(f"journal {journal} is damaged ({exc}); remove it") from None
            pre = self.load(record.pre_restore)
            try:
                target: Manifest | None = self.load(record.target)
            except WorksnapError:
                target = None  # only used to find where temp files may be left
            back = self._roll_back(pre, Result(target=record.target, error="interrupted"), target)
            _remove_journal(journal)
            return back


def _remove_journal(journal: str) -> None:
    """Removes the journal durably: once a restore is done, it must not come back."""
    os.unlink(journal)
    fsync_dir(os.path.dirname(journal))


def _one_line(label: str | None) -> str | None:
    """Returns the first line of a label, trimmed, at most 200 bytes (None if empty)."""
    if label is None:
        return None
    first = label.strip().split("\n", 1)[0].strip()
    cut = first.encode("utf-8", "surrogatepass")[:200].decode("utf-8", "ignore")
    return cut or None


def _summarize(manifest: Manifest) -> Summary:
    return Summary(
        id=manifest.id,
        step=manifest.step,
        kind=manifest.kind,
        time=manifest.time,
        label=manifest.label,
        session=manifest.session,
        tree=manifest.tree,
        files=len(manifest.entries),
        bytes=sum(e.size or 0 for e in manifest.entries),
    )


def _check_unchanged(plan: Plan, now: Manifest) -> None:
    """Refuses to apply a plan if anything it touches, or any directory above, changed since.

    A change above a touched path counts: a directory swapped for a symlink
    between plan and apply must stop the restore, not redirect it.
    """
    seen: dict[str, Entry | None] = dict.fromkeys(plan.current.dirs)
    seen.update((e.path, e) for e in plan.current.entries)
    present: dict[str, Entry | None] = dict.fromkeys(now.dirs)
    present.update((e.path, e) for e in now.entries)
    touched = {change.path for change in plan.changes}
    above = {a for path in touched for a in ancestors(path.rpartition("/")[0])}
    for path in sorted(seen.keys() | present.keys()):
        if (path in seen, seen.get(path)) != (path in present, present.get(path)) and (
            path in above or any(a in touched for a in ancestors(path))
        ):
            raise ConflictError(path)
