"""Inspection: the commands that look without changing anything: status, show, cat, diff.

None of them creates a store, or changes the tree.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from worksnap import views
from worksnap.invocation import command_paths, open_workspace, option_prefix
from worksnap.output import (
    age,
    display,
    emit_json,
    human_bytes,
    plural,
    printable,
    say,
    styled,
    warn,
    write_bytes,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from worksnap.diff import FileChange
    from worksnap.manifest import Entry, Manifest
    from worksnap.workspace import Workspace


def cmd_status(args: argparse.Namespace) -> int:
    """`status`: root, store, session, daemon, and what changed since `latest`."""
    with open_workspace(args) as ws:
        state, changes = status_state(
            ws, found=args.location.found, session=args.session, daemon=lambda: _daemon_state(args)
        )
    for problem in state["unreadable"]:  # (as `list` says them; in the JSON too)
        warn(f"warning: {problem}")
    if args.json:
        emit_json(state)
        return 0
    _print_status(args, state, changes)
    return 0


def status_state(
    ws: Workspace, *, found: str, session: str, daemon: Callable[[], dict[str, Any] | None]
) -> tuple[dict[str, Any], list[FileChange]]:
    """The `status` document of a workspace (and its changes since `latest`).

    `found`: how the root was found (`layout.Location.found`); `daemon`: asks the
    store's daemon about itself (None: none runs).
    """
    from worksnap import autostart, journal
    from worksnap.diff import restored, restored_directories
    from worksnap.errors import InputError, ManifestError
    from worksnap.layout import StorePaths, belongs_elsewhere
    from worksnap.storedir import StoreDir

    exists = ws.store.exists()
    if exists and (bound := ws.store.bound()) not in (None, ws.root):
        # (Else "1 snapshot" and "no snapshot yet" at once: its snapshots are another root's.)
        raise InputError(f"store {ws.store_dir} {belongs_elsewhere(bound, ws.root)}")
    everyone = ws.list(all_sessions=True) if exists else []
    unreadable = list(ws.problems) if exists else []
    mine = [s for s in everyone if s.session == session]
    size = ws.store_size()
    current = ws.capture(store_objects=False)
    large = ws.large_files(current)
    try:
        latest: Manifest | None = ws.load("latest") if mine else None
    except ManifestError as exc:  # never "no snapshot yet" when the newest is damaged
        latest = None
        unreadable.append(str(exc))
    except InputError:
        latest = None  # only automatic snapshots so far
    # (A checkpoint: against the tree with its before-images put back, as `diff` compares.)
    plan = ws.plan_restore(latest, now=current) if latest is not None else None
    # (Directories too, as `plan` lists them: an undo that removes an empty one is a change.)
    both = restored(plan) + restored_directories(plan) if plan is not None else []
    changes = sorted(both, key=attrgetter("path"))
    # Held by `latest`, changed since, ignored now: no snapshot keeps what it holds now.
    ignored_now = [(r.path, r.size) for r in plan.unprotected if r.why == "ignored"] if plan else []
    cap = ws.max_file_bytes
    config = ws.config()
    decision = autostart.decide(ws.root, ws.store_dir)
    running = pending = os.path.exists(StorePaths(ws.store_dir).journal)
    if pending:  # its restore may still run in another process: nothing was interrupted
        files = StoreDir(ws.store_dir)
        try:
            running = journal.running(files) is not None
        finally:
            files.close()
        pending = not running
    state = views.status_view(
        root=ws.root, found=found, store=ws.store_dir, store_exists=exists,
        session=session, mine=mine, everyone=everyone, store_bytes=size,
        latest=latest, changes=changes, large=large, ignored_now=ignored_now, max_file_bytes=cap,
        daemon=daemon(), daemon_configured=config.daemon,
        daemon_start=(decision.mode, decision.start, decision.reason), recovery_pending=pending,
        restore_running=running, unreadable=unreadable,
    )  # fmt: skip
    return state, changes


_FOUND = {
    "option": "given with --root",
    "store": "the nearest directory with a store",
    "git": "the top of the git work tree",
    "cwd": "the current directory",
}


def _print_status(args: argparse.Namespace, state: dict[str, Any], changes: list[Any]) -> None:
    snapshot = f"worksnap {option_prefix(args)}snapshot"
    lines = [f"root      {display(state['root'])} ({_FOUND[state['found']]})"]
    if state["store_exists"]:
        lines.append(
            f"store     {display(state['store'])} ({plural(state['snapshots_total'], 'snapshot')}"
            f", {human_bytes(state['store_bytes'])} on disk)"
        )
    else:
        lines.append(f"store     {display(state['store'])} (none yet: `{snapshot}` makes it)")
    latest = state["latest"]
    where = f"; latest {latest}" if latest else ""
    lines.append(f"session   {state['session']} ({plural(state['snapshots'], 'snapshot')}{where})")
    daemon = state["daemon"]
    if daemon["running"]:
        lines.append(f"daemon    running (pid {daemon.get('pid')})")
    else:
        auto = ", starts on the next command" if daemon["starts"] else ""
        lines.append(f"daemon    not running{auto}")
    if state["recovery_pending"]:
        lines.append("recovery  a restore was interrupted: run `worksnap recover`")
    if state["restore_running"]:
        lines.append("recovery  none: a restore is running in another process")
    cap = human_bytes(state["max_file_bytes"])
    for item in state["large"]:
        size = human_bytes(item["size"]) if item["size"] is not None else "?"
        lines.append(f"large     {display(item['path'])} ({size}) is over the {cap} cap: "
                     "not protected")  # fmt: skip
    for item in state["ignored_now"]:
        if item["size"] is None:  # (`latest` keeps it: `worksnap cat latest PATH`)
            what = "deleted since latest, and is ignored now: a restore leaves it deleted"
        else:
            what = f"({human_bytes(item['size'])}) changed since latest, and is ignored now: "
            what += "not protected"
        lines.append(f"ignored   {display(item['path'])} {what}")
    lines.append("")
    if latest is None and state["unreadable"]:
        lines.append("no readable snapshot to compare with (see the warnings: worksnap verify)")
    elif latest is None and (newest := state["newest"]) is not None:  # no `latest` to compare
        lines.append(f"only automatic snapshots in this session, so no `latest` to compare with "
                     f"(newest {newest['id']}, {printable(newest['kind'])}: "
                     f"worksnap {option_prefix(args)}diff {newest['id']})")  # fmt: skip
    elif latest is None:
        lines.append(f"no snapshot yet: nothing here is protected (take one: {snapshot})")
    elif not changes:
        lines.append(f"nothing changed since latest ({latest})")
    else:
        lines.append(f"changes since latest ({latest}):")
        for change in changes:
            name = display(change.path) + ("/" if change.directory else "")
            if change.op == "R":
                name = f"{display(change.old_path)} -> {name}"
            lines.append(f" {styled(change.op, _STATUS_COLOURS[change.op])} {name}")
    say(*lines)


_STATUS_COLOURS = {"M": "33", "A": "32", "D": "31", "R": "36"}


def _daemon_state(args: argparse.Namespace) -> dict[str, Any] | None:
    """What the store's daemon says of itself (None: none runs). The one question asked.

    Run in the daemon, the answer is the serving process's own report, read in place:
    asking its own socket from a command it runs could wait on itself (the daemon
    once served one command at a time, and may still be at its client limit).
    """
    if args.pool is not None:
        report: dict[str, Any] = args.pool.status()
        return report
    from worksnap import client

    return client.request(args.store, "status")


def cmd_show(args: argparse.Namespace) -> int:
    """`show REF [PATH...]`: one snapshot and its files (`--json`: the manifest)."""
    from worksnap.errors import InputError

    with open_workspace(args) as ws:
        wanted = ws.selection(command_paths(args, args.paths)) or []  # the root: all
        if args.json and wanted:
            raise InputError("show --json prints the whole manifest; leave out the PATHs")
        data = ws.show_bytes(args.ref)
        if args.json:
            write_bytes(data)
            return 0
        manifest = ws.load(args.ref)
        pinned = manifest.id in ws.pinned()
    say(*_show_lines(manifest, pinned=pinned, wanted=wanted))
    return 0


def _show_lines(manifest: Manifest, *, pinned: bool, wanted: list[str]) -> list[str]:
    """`show`: what a snapshot is, then its files like `git ls-tree -r -l` (and empty dirs)."""
    from worksnap.errors import InputError
    from worksnap.manifest import parse_time
    from worksnap.paths import is_under

    when = age(parse_time(manifest.time), datetime.now(timezone.utc))
    about = [printable(manifest.kind)] + (
        [] if manifest.step is None else [f"step {manifest.step}"]
    )
    lines = [
        f"snapshot {manifest.id}" + ("  (pinned: gc keeps it)" if pinned else ""),
        f"kind     {', '.join(about)}; session {printable(manifest.session)}",
        f"time     {manifest.time} ({when} ago)",
        *([f"label    {printable(manifest.label)}"] if manifest.label else []),
        f"root     {display(manifest.root)}",
        *(f"meta     {printable(key)}={printable(value)}"
          for key, value in sorted(manifest.meta.items())),
        *(f"attached {display(name)} (worksnap attachment {manifest.id} {display(name)})"
          for name in sorted(manifest.attachments)),
        f"files    {plural(len(manifest.entries), 'file and link', 'files and links')} "
        f"({human_bytes(sum(e.size or 0 for e in manifest.entries))}), "
        f"{plural(len(manifest.dirs), 'directory', 'directories')}; "
        f"size cap {human_bytes(manifest.max_file_bytes)}",
    ]  # fmt: skip
    for name in ("large", "ignored", "excluded", "absent"):
        names: list[str] = getattr(manifest, name)
        if names:
            shown = " ".join(display(p) for p in names[:20])
            more = f" ... ({len(names) - 20} more)" if len(names) > 20 else ""
            lines.append(f"{name:<8} {shown}{more}")
    parents = {p.rpartition("/")[0] for p in [*manifest.dirs, *(e.path for e in manifest.entries)]}
    rows: list[tuple[str, Entry | None]] = [(e.path, e) for e in manifest.entries]
    rows += [(d, None) for d in manifest.dirs if d not in parents]  # empty: restored too
    rows.sort(key=lambda row: row[0])
    if wanted:
        rows = [row for row in rows if any(is_under(row[0], w) for w in wanted)]
        if not rows:
            raise InputError(f"{', '.join(map(repr, wanted))}: not in snapshot {manifest.id}")
    lines.append("")
    for path, entry in rows:
        if entry is None:
            lines.append(f"040000 dir   {'-':>9}  {display(path)}/")
        elif entry.type == "symlink":
            lines.append(f"120000 link  {'-':>9}  {display(path)} -> {display(entry.target or '')}")
        else:
            mode = f"100{entry.mode:03o}"
            lines.append(f"{mode} file  {entry.size or 0:>9}  {display(path)}")
    return lines


def cmd_cat(args: argparse.Namespace) -> int:
    """`cat REF PATH`: a file's bytes as the snapshot holds them."""
    with open_workspace(args) as ws:
        _, data = ws.file_bytes(args.ref, command_paths(args, [args.path])[0])
    write_bytes(data)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """`diff [REF [REF2]] [-- PATH...]`: a git patch (or stats, or JSON rows)."""
    from worksnap.diff import git_patch, select

    with open_workspace(args) as ws:
        refs, paths = _refs_and_paths(ws, args)
        changes, read = ws.diff(*refs)
        if paths:
            wanted = ws.selection(command_paths(args, paths))
            changes = changes if wanted is None else select(changes, wanted)
        if args.json:
            emit_json(views.diff_view(changes, read))
        elif args.numstat or args.stat:
            _print_stats(changes, read, numstat=args.numstat)
        else:
            for change in changes:
                write_bytes(git_patch(change, read, binary=args.binary))
    return 0


def _refs_and_paths(ws: Workspace, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """`diff`'s REFs and PATHs, read as git reads `git diff A B x`.

    Before `--` every word is a REF. Without `--`, the first words that name a snapshot
    are the REFs (at most two) and the rest PATHs, each of which must be there now; a
    word that is both is refused, so that a file named like a ref is never read wrong.
    """
    from worksnap.errors import InputError

    words = [w for w in (args.ref, args.ref2) if w is not None] + list(args.paths)
    if args.paths_after is not None:
        if args.paths:
            raise InputError(f"diff: {args.paths[0]!r} before `--` is a third REF (at most two)")
        return words or ["latest"], args.paths_after

    def there(word: str) -> bool:
        path = command_paths(args, [word])[0]
        return bool(word) and os.path.lexists(os.path.join(args.root, path))

    refs: list[str] = []
    for word in words[:2]:
        if (no_ref := _no_ref(ws, word)) is not None:
            if not refs and not there(word):
                raise InputError(f"{no_ref} (and no path is there: paths go after `--`)")
            break
        if there(word):
            raise InputError(
                f"diff: {word!r} is both a ref and a path: put the paths after `--` "
                f"(`worksnap diff -- {word}`, or `worksnap diff {word} --`)"
            )
        refs.append(word)
    paths = words[len(refs) :]
    for word in paths:
        if not there(word):
            what = "no ref and no path" if _no_ref(ws, word) else "a third REF (at most two)"
            raise InputError(f"diff: {word!r} is {what}; paths go after `--`")
    return refs or ["latest"], paths


def _no_ref(ws: Workspace, word: str) -> str | None:
    """Why `word` names no snapshot (None: it names one)."""
    from worksnap.errors import InputError

    try:
        ws.resolve(word)
    except InputError as exc:
        if type(exc) is not InputError:  # a damaged store, not a word that is no ref
            raise
        return str(exc)
    return None


def _print_stats(changes: list[Any], read: Any, *, numstat: bool) -> None:
    r"""`--stat` and `--numstat` as git prints them: nothing at all for no change.

    Names are quoted as the patch's headers quote them, git's way (`"bad\377name"`).
    """
    from worksnap.diff import git_name, line_counts

    if not changes:
        return
    added_total = deleted_total = 0
    rows = []
    for change in changes:
        name = git_name(change.path)
        if change.op == "R":
            name = f"{git_name(change.old_path)} => {name}"
        counts = line_counts(change, read)
        rows.append((name, counts))
        if counts:
            added_total += counts[0]
            deleted_total += counts[1]
    width = max((len(name) for name, _ in rows), default=0)
    lines = []
    for name, counts in rows:
        if numstat:
            lines.append(f"{counts[0]}\t{counts[1]}\t{name}" if counts else f"-\t-\t{name}")
        elif counts is None:
            lines.append(f" {name:<{width}} | Bin")
        else:
            bar = "+" * min(counts[0], 40) + "-" * min(counts[1], 40)
            lines.append(f" {name:<{width}} | {counts[0] + counts[1]:>4} {bar}")
    if not numstat:
        lines.append(
            f" {plural(len(rows), 'file')} changed, {plural(added_total, 'insertion')}(+), "
            f"{plural(deleted_total, 'deletion')}(-)"
        )
    say(*lines)
