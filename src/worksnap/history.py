"""Sessions: each session's undo/redo stack and open checkpoint, and checkpoint rewind targets.

A session's state lives in the store (`StorePaths.session`). Snapshots carry
their session in the manifest; that file only holds what cannot be derived from them.
"""

from __future__ import annotations

import contextlib
import re
from bisect import bisect_left
from collections.abc import Callable
from typing import Final, Literal

import msgspec

from worksnap.errors import InputError, StoreError
from worksnap.exclusion import compile_rules
from worksnap.layout import SESSION_NAME, is_snapshot_id
from worksnap.manifest import Entry, Manifest, Summary, entry_at, tree_digest
from worksnap.paths import ancestors, under_any
from worksnap.plan import Change, Op
from worksnap.storedir import MIB, StoreDir

DEFAULT_SESSION = "default"
_SESSION_NAME = re.compile(SESSION_NAME + r"\Z")

_MAX_STATE = 16 * MIB
_MAX_POINTERS = MIB  # 64 sessions' ids are 2 KB
"""The most a session's state file may hold (a redo stack of 100,000 undos)."""

UNDO_KINDS = frozenset({"undo", "redo"})
"""Kinds of the snapshots undo and redo take of the state they leave: redo-stack only."""

CHECKPOINT = "checkpoint"
"""Kind of a light per-turn checkpoint (before-images of named files, no tree scan)."""

RUN_KINDS = frozenset({"run-before", "run-after", "run-settled"})
"""Kinds of the snapshots `worksnap run` takes (`Workspace.snapshot(automatic=True)`)."""

AUTOMATIC_KINDS = frozenset({"pre-restore", "pre-recover", "recover", "undo", "redo"}) | RUN_KINDS
"""Kinds of the snapshots worksnap takes on its own, as part of another command: `latest`
skips them, retention drops them first, `list` dims them. Reachable by id, undo, redo."""

ENGINE_KINDS = frozenset(
    {"pre-restore", "pre-recover", "recover", "undo", "redo", CHECKPOINT, "current"}
)
"""Kinds the engine gives its own records; `Workspace.snapshot` refuses them."""


def check_kind(kind: str, *, automatic: bool = False) -> None:
    """Refuses a kind a caller may not give, saying why: blank, unprintable, or reserved.

    The one check of a snapshot's kind, for the API, the command line and MCP alike:
    one of `ENGINE_KINDS` or `AUTOMATIC_KINDS` is worksnap's own. With `automatic`
    (the run wrapper's snapshots), one of `RUN_KINDS` is allowed.
    """
    if not kind.strip():
        raise InputError(f"kind {kind!r} is blank: give a word such as 'manual' or 'step'")
    if not kind.isprintable():
        raise InputError(
            f"kind {kind!r} has a character that cannot be printed (a newline, a tab or "
            "another control character): give one word on one line"
        )
    if automatic and kind in RUN_KINDS:
        return
    if kind in AUTOMATIC_KINDS:
        raise InputError(
            f"kind {kind!r} is reserved: worksnap gives it to the snapshots it takes "
            "on its own; choose another word"
        )
    if kind in ENGINE_KINDS:
        raise InputError(
            f"kind {kind!r} is reserved: worksnap gives it its own records; choose another word"
        )


def is_automatic(kind: str) -> bool:
    """True for a snapshot worksnap took on its own (see `AUTOMATIC_KINDS`)."""
    return kind in AUTOMATIC_KINDS


class Frame(msgspec.Struct, frozen=True, array_like=True):
    """One undo on the redo stack: the snapshot undo went to, and the state it left."""

    target: str
    left: str


class SessionState(msgspec.Struct, kw_only=True):
    """What a session remembers besides its snapshots."""

    redo: list[Frame] = []
    checkpoint: str | None = None


def check_session_name(name: str) -> str:
    """Returns `name` if it is a valid session name (letters, digits, `.`, `_`, `-`)."""
    if not _SESSION_NAME.match(name):
        raise InputError(
            f"bad session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class Sessions:
    """The state of every session of one store (one small JSON file each)."""

    def __init__(self, store: StoreDir) -> None:
        self._store = store
        self._paths = store.paths

    def load(self, session: str) -> SessionState:
        """Returns a session's state (empty when it has none yet).

        Raises:
            InputError: the session's file is damaged.
        """
        try:
            data = self._store.read_optional(self._paths.session(session), limit=_MAX_STATE)
            return SessionState() if data is None else msgspec.json.decode(data, type=SessionState)
        except (OSError, msgspec.DecodeError) as exc:
            raise InputError(f"session {session!r} state is damaged ({exc})") from None

    def save(self, session: str, state: SessionState) -> None:
        """Stores a session's state atomically (removes the file when there is nothing to keep)."""
        path = self._paths.session(session)
        if not state.redo and state.checkpoint is None:
            self._store.unlink(path)
            return
        self._store.write(path, msgspec.json.encode(state))

    def push_redo(self, session: str, frame: Frame) -> None:
        """Puts an undo on the session's redo stack."""
        state = self.load(session)
        state.redo.append(frame)
        self.save(session, state)

    def note_newest(self, session: str, snapshot_id: str | None, listing: str) -> None:
        """Notes a session's newest full snapshot and a digest of the ids stored then.

        None forgets it. A cache (`newest`): if it cannot be written, the next process
        lists the records.
        """
        pointers = self._pointers()
        if snapshot_id is None:
            if pointers.pop(session, None) is None:
                return
        else:
            pointers[session] = [snapshot_id, listing]
        with contextlib.suppress(OSError):
            self._store.makedirs(self._paths.cache)
            self._store.write(self._paths.last_full, msgspec.json.encode(pointers), durable=False)

    def newest(self, session: str, listing: str) -> str | None:
        """The id `note_newest` noted for a session, if the ids stored are still those.

        Any snapshot stored or dropped since (by any process, in any session) changes
        the digest of the ids: the note is then not taken, nor one that is damaged,
        stale after a crash, or deleted. The caller checks the record it names.
        """
        found = self._pointers().get(session)
        if found is None or len(found) != 2 or found[1] != listing:
            return None
        return found[0] if is_snapshot_id(found[0]) else None

    def _pointers(self) -> dict[str, list[str]]:
        try:
            data = self._store.read_optional(self._paths.last_full, limit=_MAX_POINTERS)
            return msgspec.json.decode(data, type=dict[str, list[str]]) if data else {}
        except (OSError, StoreError, msgspec.DecodeError):
            return {}  # damaged or unreadable: as if there were none

    def clear_redo(self, session: str) -> None:
        """Empties a session's redo stack (a new snapshot was taken)."""
        state = self.load(session)
        if state.redo:
            state.redo.clear()
            self.save(session, state)

    def referenced(self, *, without: str | None = None) -> set[str]:
        """Returns the ids that a session's redo stack or open checkpoint still needs.

        `without`: a session whose state does not count (it is about to be dropped).
        """
        needed: set[str] = set()
        for name in self._store.listdir(self._paths.sessions):
            session = self._paths.session_name(name)
            if session is not None and session != without:
                state = self.load(session)
                needed.update(f.target for f in state.redo)
                needed.update(f.left for f in state.redo)
                if state.checkpoint is not None:
                    needed.add(state.checkpoint)
        return needed


def undo_stops(history: list[Summary]) -> list[Summary]:
    """The snapshots undo may go to, in the order successive undos reach them.

    `history` is a session's snapshots, newest first; each undo goes back to the next
    of these that changes something (`undo_target`), never to one undo or redo took
    (redo reaches those, from its stack). Retention keeps what the first undos reach.
    """
    return [s for s in history if s.kind not in UNDO_KINDS]


def first_undo_stops(history: list[Summary], count: int) -> list[Summary]:
    """The newest snapshot and those the next `count` - 1 undos go to, newest first.

    Undo passes over a snapshot whose tree is the tree it would leave (`undo_target`):
    of a run of `undo_stops` with one tree, only the newest can be reached. A checkpoint
    counts only when its rewind changes something, which a summary cannot tell: none
    takes a place here (retention keeps them as deliberate ones). A review saw two
    snapshots of an unchanged tree take the places of the pre-restore snapshot undo
    went to next.
    """
    stops: list[Summary] = []
    for summary in undo_stops(history):
        if len(stops) == count:
            break
        if summary.kind != CHECKPOINT and (not stops or summary.tree != stops[-1].tree):
            stops.append(summary)
    return stops


def undo_target(
    history: list[Summary],
    current: Manifest,
    state: SessionState,
    *,
    load: Callable[[str], Manifest],
    flat_tree: str | None = None,
    checkpoints: bool = False,
    capture: Callable[[int], Manifest] | None = None,
    restores: Callable[[Manifest, Manifest], bool] | None = None,
) -> str | None:
    """Picks what `undo` restores.

    That is the newest snapshot older than the last undo's target whose restore
    changes something (`restores`; without it, whose entries or dirs differ from the
    current ones), undo/redo snapshots never counting. A checkpoint
    counts when a rewind to it changes something (`checkpoints`; else they never
    count): an undo after a turn a checkpoint recorded sets back that turn's files,
    as `status` shows them, not every edit since the last full snapshot (a review
    found it reverting files no turn had touched and removing new ones).
    Not its `tree` alone: a format 2 root tree also names the ignored, large and
    excluded paths, which no restore changes (a new `__pycache__/` must not make the
    current state a target that restores nothing). Equal trees need no `load`.

    Args:
        history: the session's snapshots, newest first.
        current: the workspace now.
        state: the session's redo stack (its top frame is where the last undo went).
        load: returns a snapshot's checked flat view by id (read only for a snapshot
            whose root tree differs from the current one).
        flat_tree: the format 1 digest of the workspace now, for the summaries of a
            store not migrated yet (they hold format 1 digests).
        checkpoints: count the session's checkpoints (see `checkpoint_changes`).
        capture: captures the workspace under a size cap (see `states_at_cap`; None:
            every snapshot is compared with `current`).
        restores: whether the plan from a state (`at_cap`'s) to a snapshot makes a
            change (`Plan.applies`): asked of each snapshot whose tree differs, in place
            of comparing entries and dirs (a directory holding only ignored or large
            files, a file the snapshot has where a directory holding some is now, a
            file over today's cap that the snapshot holds as it is: no restore changes
            them, and an undo there would restore nothing, every time).
    """
    at_cap = states_at_cap(current, capture)
    rewind = checkpoint_changes(current, history, load, at_cap) if checkpoints else None
    before = None
    if state.redo:
        last = next((s for s in history if s.id == state.redo[-1].target), None)
        before = (last.time, last.id) if last is not None else None
    for summary in undo_stops(history):
        if summary.kind == CHECKPOINT and rewind is None:
            continue
        if before is not None and (summary.time, summary.id) >= before:
            continue
        if summary.kind == CHECKPOINT:
            assert rewind is not None
            if rewind(summary.id):
                return summary.id
            continue
        if summary.tree in (current.tree, flat_tree):
            continue  # equal trees (or format 1 digests): equal entries and dirs
        target = load(summary.id)
        if restores is not None:
            if restores(at_cap(target.max_file_bytes), target):
                return summary.id
        elif (target.entries, target.dirs) != (current.entries, current.dirs):
            return summary.id
    return None


def states_at_cap(
    current: Manifest, capture: Callable[[int], Manifest] | None
) -> Callable[[int], Manifest]:
    """`at_cap(cap)`: the workspace now as a restore of a snapshot taken under `cap` sees it.

    A restore captures under at least its target's size cap (`Restorer._cap`), so a
    file over the cap of `current` and under the target's is compared, and restored
    or removed. Each state is captured once (`capture(cap)`; None: `current` for all).
    """
    states = {current.max_file_bytes: current}

    def at_cap(cap: int) -> Manifest:
        cap = max(cap, current.max_file_bytes)
        if cap not in states:
            states[cap] = current if capture is None else capture(cap)
        return states[cap]

    return at_cap


def checkpoint_changes(
    current: Manifest,
    history: list[Summary],
    load: Callable[[str], Manifest],
    at_cap: Callable[[int], Manifest] | None = None,
) -> Callable[[str], bool]:
    """For `undo_target`: whether a rewind to a checkpoint (by id) changes something now.

    Only a path no rule leaves out now counts (a review found undo stuck on a
    checkpoint whose one file had become ignored: "restored 0 paths", every time;
    the differential walk, on one whose file it deleted had become excluded).
    Each checkpoint of `history` (the session's) is loaded once, and one that
    captured nothing answers as the next later one: a review found undo walking past
    600 such checkpoints taking 38 s, each reloading every later one.

    Large is as the rewind sees it: a restore captures under at least its target's
    size cap, so a file over today's cap is compared, and set back, by the rewind of
    a checkpoint begun under a higher one (`at_cap`: see `states_at_cap`; None:
    `current`, whatever the cap).
    """
    turns = sorted((s for s in history if s.kind == CHECKPOINT), key=lambda s: (s.time, s.id))
    at = {s.id: i for i, s in enumerate(turns)}
    loaded: dict[str, Manifest] = {}
    answers: dict[tuple[int, tuple[str, ...]], bool] = {}

    def changes(checkpoint_id: str) -> bool:
        later = [loaded.get(s.id) or loaded.setdefault(s.id, load(s.id))
                 for s in turns[at[checkpoint_id]:]]  # fmt: skip
        now = current if at_cap is None else at_cap(later[0].max_file_bytes)
        named = tuple(m.id for m in later if m.entries or m.absent or m.dirs or m.large)
        if (now.max_file_bytes, named) not in answers:
            target, _, known = checkpoint_rewind(now, later)
            # What `plan_restore` never touches, nor below: the target's `large` also holds
            # what the checkpoints knew as large (a file in no snapshot, never replaced).
            left_out = {*now.ignored, *now.large, *now.excluded, *target.large}
            rules = compile_rules(frozenset(now.exclude))

            def counts(path: str) -> bool:
                was, will = _state(now, path), _state(target, path)
                if was == will or under_any(path, left_out):
                    return False
                if was == DIRECTORY and isinstance(will, Entry):
                    # A file where a directory holds what is left out: a `B` change.
                    return not any(p.startswith(f"{path}/") for p in left_out)
                # A path gone since is never made again where today's rules exclude it
                # (`Restorer._plan`), and it is in no capture's `excluded`.
                return was is not None or not rules.covers(path, is_dir=will == DIRECTORY)

            answers[now.max_file_bytes, named] = any(counts(path) for path in known)
        return answers[now.max_file_bytes, named]

    return changes


def _state(manifest: Manifest, path: str) -> Entry | str | None:
    """What a manifest holds at `path`: its entry, DIRECTORY, or None (by search: sorted)."""
    entry = entry_at(manifest.entries, path)
    if entry is not None:
        return entry
    at = bisect_left(manifest.dirs, path)
    return DIRECTORY if at < len(manifest.dirs) and manifest.dirs[at] == path else None


DIRECTORY: Final = "dir"
"""What a checkpoint knows of a directory above a before-image: it was one then."""
LARGE: Final = "large"
"""What a checkpoint knows of a file over the size cap: it was there, and is in no snapshot."""

Known = Entry | Literal["dir", "large"] | None
"""A path's state a checkpoint knows: a before-image, a directory, a large file, or
absent (None)."""


def earliest_states(checkpoints: list[Manifest]) -> dict[str, Known]:
    """Each path `checkpoints` (oldest first) know, at its earliest known state.

    A path is at the state the first checkpoint that knows it recorded: its
    before-image, absent, a large file, or a directory (one above a before-image),
    unless a directory above it was then a file or absent: nothing was below it.
    """
    wanted: dict[str, Known] = {}
    for checkpoint in checkpoints:
        known: list[tuple[str, Known]] = [(e.path, e) for e in checkpoint.entries]
        known += [(p, None) for p in checkpoint.absent]
        known += [(p, LARGE) for p in checkpoint.large]
        known += [(d, DIRECTORY) for d in checkpoint.dirs]
        for path, state in known:
            if path in wanted:
                continue
            above = ancestors(path.rpartition("/")[0])
            below_a_file = any(wanted.get(d, DIRECTORY) != DIRECTORY for d in above)
            wanted[path] = None if below_a_file else state
    return wanted


def _all_made_since(current: Manifest, directory: str, wanted: dict[str, Known]) -> bool:
    """True when every file below `directory` now is one the checkpoints had as absent."""
    prefix = directory + "/"
    left_out = (*current.ignored, *current.large, *current.excluded)
    return not any(p.startswith(prefix) for p in left_out) and all(
        wanted.get(e.path, e) is None for e in current.entries if e.path.startswith(prefix)
    )


def checkpoint_target(current: Manifest, checkpoints: list[Manifest]) -> Manifest:
    """Returns the full target a checkpoint rewind restores (see `checkpoint_rewind`)."""
    return checkpoint_rewind(current, checkpoints)[0]


def checkpoint_rewind(
    current: Manifest, checkpoints: list[Manifest]
) -> tuple[Manifest, list[Change], frozenset[str]]:
    """Returns what a checkpoint rewind restores, the images it leaves, the paths known.

    The paths the checkpoints know are the only ones a preview's `!` rows may be
    about (`plan.unprotected`). The target is the current state with every path
    captured in `checkpoints` (the checkpoint rewound to and every later one of the
    session, oldest first) set back to its earliest known state (`earliest_states`);
    everything else stays as it is. A file or symlink in the way of a directory a
    checkpoint knew, or of a before-image's, goes (the pre-restore snapshot keeps
    it). A directory where a before-image's file was, or where nothing was, goes only
    when all it holds was made since (each file in it was absent then); else it
    stays, and so does what is in it: that image is left, an `Op.BLOCKED` change for
    a preview and the result; so is one below what is left out now (a large file).
    """
    wanted = earliest_states(checkpoints)
    entries = {e.path: e for e in current.entries}
    dirs = set(current.dirs)
    left: list[Change] = []
    left_out = {*current.large, *current.ignored, *current.excluded}  # never touched
    for path, image in wanted.items():
        if image == LARGE:
            continue  # in no snapshot: left as it is (`plan.unprotected` says so)
        if image == DIRECTORY:
            for directory in ancestors(path):  # what is in the way of a directory goes
                entries.pop(directory, None)
                dirs.add(directory)
            continue
        if path in dirs:
            if not _all_made_since(current, path, wanted):
                if image is not None:
                    left.append(Change(Op.BLOCKED, path, image, was_dir=True))
                continue  # it holds what no checkpoint named: never removed
            prefix = path + "/"
            dirs = {d for d in dirs if d != path and not d.startswith(prefix)}
            entries = {p: e for p, e in entries.items() if not p.startswith(prefix)}
        if image is None:
            entries.pop(path, None)
        elif under_any(path.rpartition("/")[0], left_out):
            left.append(Change(Op.BLOCKED, path, image, was_dir=False))  # in no snapshot
        else:
            entries[path] = image
            for directory in ancestors(path.rpartition("/")[0]):
                entries.pop(directory, None)
                dirs.add(directory)
    first = checkpoints[0]
    ordered = sorted(entries.values(), key=lambda e: e.path)
    target = msgspec.structs.replace(
        current,
        tree=tree_digest(ordered, sorted(dirs)),
        id=first.id,
        kind=first.kind,
        step=first.step,
        label=first.label,
        session=first.session,
        entries=ordered,
        dirs=sorted(dirs),
        # As of the checkpoint, for `plan.unprotected`: what it knew over the cap then,
        # and what is over the cap now where it knew something else.
        time=first.time,
        absent=sorted(p for p, state in wanted.items() if state is None),
        large=sorted({p for p, s in wanted.items() if s == LARGE}.union(
            p for p in current.large if p not in wanted
        )),
    )  # fmt: skip
    return target, left, frozenset(wanted)
