"""The `worksnap` command line: each command calls `Workspace` and renders what it returns.

The grammar is in arguments.py; `--json` documents come from views.py, the one place
that shapes them. Imports of the engine are deferred until a command runs, so `--help`
and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from worksnap import views
from worksnap.arguments import build_parser

if TYPE_CHECKING:
    from worksnap.apply import Result
    from worksnap.daemon import WorkspacePool
    from worksnap.plan import Plan
    from worksnap.progress import Progress
    from worksnap.workspace import Seams, Workspace

# -- output ------------------------------------------------------------------


def display(path: str) -> str:
    """Returns a path as one printable line: quoted with escapes when it needs them."""
    if path.isprintable() and path.strip() == path and '"' not in path:
        return path
    out = []
    for ch in path:
        if ch == "\x00":
            out.append("\\x")  # a wire-form escape: NUL then two hex digits
        elif ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"' + "".join(out) + '"'


def _emit_json(value: object) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False) + "\n")


_COLOURS = {"M": "33", "A": "31", "D": "32", "B": "35"}


def _colour(text: str, op: str) -> str:
    if not sys.stdout.isatty() or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{_COLOURS[op]}m{text}\x1b[0m"


def _print_plan(plan: Plan) -> None:
    counts = plan.counts()
    if not plan.changes:
        print(f"nothing to restore: the workspace matches snapshot {plan.target.id}")
        return
    for change in plan.changes:
        op = change.op.value
        kind = "dir" if change.entry is None and change.op.value != "A" else ""
        if change.op.value == "A" and change.was_dir:
            kind = "dir"
        print(f"  {_colour(op, op)}  {display(change.path)}{'/' if kind == 'dir' else ''}")
    blocked = f", {counts['B']} blocked (left as they are)" if counts["B"] else ""
    print(
        f"restore {plan.target.id}: {counts['M']} modified (restored), "
        f"{counts['A']} added since (removed), {counts['D']} deleted since (recreated){blocked}"
    )


def _progress_printer(enabled: bool) -> Any:
    def report(progress: Progress) -> None:
        if progress.note:  # a notice (who holds the store) is always shown
            print(f"worksnap: {progress.note}", file=sys.stderr)
        elif enabled:
            what = {"hash": "hashing", "apply": "restoring"}.get(progress.what, progress.what)
            end = "\n" if progress.done == progress.total else ""
            print(f"\r{what} {progress.done}/{progress.total}", end=end, file=sys.stderr)
            sys.stderr.flush()

    return report


# -- commands ----------------------------------------------------------------


def _open(args: argparse.Namespace, **options: Any) -> AbstractContextManager[Workspace]:
    progress = _progress_printer(sys.stderr.isatty() and not args.json)
    if args.pool is not None:  # in the daemon: its long-lived workspaces
        options.update(force=args.force, session=args.session, progress=progress)
        return nullcontext(_noting_recovery(args, args.pool.open(args.root, args.store, options)))
    from worksnap.workspace import Workspace

    ws = Workspace(args.root, store=args.store, force=args.force, session=args.session,
                   progress=progress, seams=args.seams, **options)  # fmt: skip
    return _noting_recovery(args, ws)


def _noting_recovery(args: argparse.Namespace, ws: Workspace) -> Workspace:
    """Says a restore was interrupted, for the commands that neither recover nor refuse."""
    if args.command not in _RECOVERING and (pending := ws.recovery_pending()) is not None:
        print(f"worksnap: warning: {pending}", file=sys.stderr)
    return ws


_RECOVERING = {"snapshot", "restore", "rewind", "undo", "redo", "recover", "plan", "run"}


def _cmd_snapshot(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"exclude": tuple(args.exclude)}
    if args.max_file_bytes is not None:
        options["max_file_bytes"] = args.max_file_bytes
    with _open(args, **options) as ws:
        before = ws.objects_added
        manifest = ws.snapshot(
            kind=args.kind, step=args.step, label=args.label, **_meta_and_attachments(args)
        )
        if args.json:
            _emit_json(views.snapshot_view(manifest, new_objects=ws.objects_added - before))
        else:
            print(manifest.id)
            for path in manifest.large:
                print(
                    f"worksnap: note: {display(path)} is over the size cap; not captured",
                    file=sys.stderr,
                )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        summaries = ws.list(all_sessions=args.all)
        for problem in ws.problems:
            print(f"worksnap: warning: {problem}", file=sys.stderr)
    if args.json:
        _emit_json([views.summary_view(s) for s in summaries])
        return 0
    if not summaries:
        print("no snapshots yet (take one with `worksnap snapshot`)")
        return 0
    now = datetime.now(timezone.utc)
    session = "SESSION     " if args.all else ""
    print(f"{'ID':<12}  {session}{'STEP':>4}  {'KIND':<11}  {'AGE':>5}  {'CHANGED':>7}  LABEL")
    for s in summaries:
        step = "-" if s.step is None else str(s.step)
        changed = "-" if s.changed is None else str(s.changed)
        in_session = f"{s.session:<12}" if args.all else ""
        print(
            f"{s.id:<12}  {in_session}{step:>4}  {s.kind:<11}  {_age(s.time, now):>5}  "
            f"{changed:>7}  {s.label or ''}"
        )
    return 0


def _age(time: str, now: datetime) -> str:
    """Returns how long ago an RFC 3339 UTC time was, in one short unit (`42s`, `3h`, `5d`)."""
    from worksnap.manifest import parse_time

    then = parse_time(time)
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _meta_and_attachments(args: argparse.Namespace) -> dict[str, Any]:
    from worksnap.errors import InputError

    meta: dict[str, str] = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--meta {item!r}: expected KEY=VALUE")
        meta[key] = value
    attach: dict[str, bytes] = {}
    for item in args.attach:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--attach {item!r}: expected NAME=FILE")
        try:
            with open(path, "rb") as f:
                attach[name] = f.read()
        except OSError as exc:
            raise InputError(f"--attach {item!r}: cannot read {path}: {exc.strerror}") from None
    return {"meta": meta, "attach": attach}


def _cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        data = ws.show_bytes(args.ref)
        if args.json:
            sys.stdout.buffer.write(data)
            return 0
        manifest = ws.load(args.ref)
    print(f"snapshot {manifest.id}  kind {manifest.kind}  step {manifest.step}  {manifest.time}")
    if manifest.label:
        print(f"label    {manifest.label}")
    print(f"root     {display(manifest.root)}")
    print(
        f"captured {len(manifest.entries)} files and links, {len(manifest.dirs)} directories; "
        f"left out {len(manifest.ignored)} ignored, {len(manifest.large)} large, "
        f"{len(manifest.excluded)} excluded"
    )
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        plan = ws.plan_restore(ws.load(args.ref), paths=args.paths or None)
    if args.json:
        _emit_json(views.plan_view(plan))
    else:
        _print_plan(plan)
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        if args.dry_run:
            plan = ws.plan_restore(ws.load(args.ref), paths=args.paths or None)
            if args.json:
                _emit_json(views.plan_view(plan))
            else:
                _print_plan(plan)
            return 0
        result = _restore_confirmed(args, ws, args.ref)
    return 1 if result is None else _report_result(args, result)


def _restore_confirmed(args: argparse.Namespace, ws: Workspace, ref: str) -> Result | None:
    """Restores `ref`, first showing the plan and asking when a person is at the terminal.

    Returns None when the person said no (nothing was changed).
    """
    paths = getattr(args, "paths", None) or None
    if args.yes or args.json or not sys.stdin.isatty():
        return ws.restore(ref, paths=paths)  # one walk serves plan and pre-restore snapshot
    plan = ws.plan_restore(ws.load(ref), paths=paths)
    if not plan.changes:
        return ws.apply(plan)
    _print_plan(plan)
    answer = input(f"restore {len(plan.changes)} changes? [y/N] ").strip().lower()
    if answer in ("y", "yes"):
        return ws.apply(plan)
    print("nothing was changed")
    return None


def _report_result(
    args: argparse.Namespace, result: Result, *, then: str = "undo it with: worksnap undo"
) -> int:
    if args.json:
        _emit_json(views.result_view(result))
    elif result.ok:
        print(
            f"restored {len(result.restored)} paths from snapshot {result.target}"
            + (f" ({then})" if result.pre_restore else "")
        )
        for path in result.blocked:
            note = "left as it is: a directory of ignored files where the snapshot has a file"
            print(f"worksnap: warning: {display(path)} {note}", file=sys.stderr)
    else:
        state = (
            "the workspace was rolled back to how it was before"
            if result.rolled_back
            else "the workspace may be partly restored"
        )
        print(f"worksnap: error: restore failed at {result.error}; {state}", file=sys.stderr)
    return 0 if result.ok else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        problems = ws.verify(args.ref)
    if args.json:
        _emit_json(views.verify_view(problems))
    else:
        for problem in problems:
            print(problem)
        if not problems:
            print("all objects present and intact")
    return 1 if problems else 0


def _cmd_recover(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        result = ws.recover(discard=args.discard)
    if args.json:
        _emit_json(views.recover_view(result))
    elif result is None:
        print("no interrupted restore to recover")
    else:
        done = "dropped the journal of" if args.discard else "rolled back"
        kept = f"; the tree as it was: snapshot {result.pre_restore} (worksnap undo)"
        print(f"{done} an interrupted restore ({len(result.restored)} paths)"
              + (kept if result.pre_restore else ""))  # fmt: skip
    return 0


def _cmd_rewind(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        result = _restore_confirmed(args, ws, f"step:{args.step}")
    return 1 if result is None else _report_result(args, result)


def _cmd_undo(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        result = ws.undo()
    return _report_result(args, result, then="redo it with: worksnap redo")


def _cmd_redo(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        result = ws.redo()
    return _report_result(args, result)


def _cmd_begin(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        checkpoint = ws.begin(step=args.step, label=args.label, **_meta_and_attachments(args))
    if args.json:
        _emit_json(views.begin_view(checkpoint))
    else:
        print(checkpoint.id)
    return 0


def _cmd_capture(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        checkpoint = ws.capture_before(args.paths)
    if args.json:
        _emit_json(views.capture_view(checkpoint))
    return 0


def _cmd_attachment(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        data = ws.attachment(args.ref, args.name)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def _cmd_gc(args: argparse.Namespace) -> int:
    from worksnap.config import Retention

    policy = Retention(keep_last=args.keep_last, max_age=args.max_age, max_bytes=args.max_bytes)
    with _open(args) as ws:
        report = ws.gc(
            None if policy.is_empty() and args.drop_session is None else policy,
            drop_session=args.drop_session,
        )
    if args.json:
        _emit_json(views.gc_view(report))
    else:
        print(f"dropped {report.snapshots} snapshots, {report.objects} objects "
              f"({_human_bytes(report.bytes)} freed)")  # fmt: skip
    return 0


def _cmd_pin(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        snapshot_id = ws.pin(args.ref, pinned=args.command == "pin")
    if args.json:
        _emit_json(views.pin_view(snapshot_id, pinned=args.command == "pin"))
    else:
        print(f"{args.command}ned {snapshot_id}")
    return 0


def _cmd_du(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        sessions = ws.du()
        total = ws.store_size()
    if args.json:
        _emit_json(views.du_view(sessions, store_bytes=total))
        return 0
    print(f"{'SESSION':<20}  {'SNAPSHOTS':>9}  REFERENCED")
    for name, (count, size) in sessions.items():
        print(f"{name:<20}  {count:>9}  {_human_bytes(size)}")
    print(f"store on disk: {_human_bytes(total)}")
    return 0


def _human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _cmd_rebind(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        count = ws.rebind()
        root = ws.root
    if args.json:
        _emit_json(views.rebind_view(root, snapshots=count))
    else:
        print(f"store bound to {root} ({count} snapshots rebound)")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from worksnap.diff import unified

    with _open(args) as ws:
        changes, read = ws.diff(args.ref, args.ref2)
        if args.json:
            _emit_json(views.diff_view(changes, read))
        elif args.numstat or args.stat:
            _print_stats(changes, read, numstat=args.numstat)
        else:
            for change in changes:
                sys.stdout.write(unified(change, read))
    return 0


def _print_stats(changes: list[Any], read: Any, *, numstat: bool) -> None:
    from worksnap.diff import line_counts

    added_total = deleted_total = 0
    rows = []
    for change in changes:
        name = display(change.path)
        if change.op == "R":
            name = f"{display(change.old_path)} => {display(change.path)}"
        counts = line_counts(change, read)
        rows.append((name, counts))
        if counts:
            added_total += counts[0]
            deleted_total += counts[1]
    width = max((len(name) for name, _ in rows), default=0)
    for name, counts in rows:
        if numstat:
            print(f"{counts[0]}\t{counts[1]}\t{name}" if counts else f"-\t-\t{name}")
        elif counts is None:
            print(f" {name:<{width}} | Bin")
        else:
            bar = "+" * min(counts[0], 40) + "-" * min(counts[1], 40)
            print(f" {name:<{width}} | {counts[0] + counts[1]:>4} {bar}")
    if not numstat:
        print(f" {len(rows)} files changed, {added_total} insertions(+), "
              f"{deleted_total} deletions(-)")  # fmt: skip


def _cmd_run(args: argparse.Namespace) -> int:
    from worksnap.errors import InputError
    from worksnap.runwrap import run_wrapped

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise InputError("run needs a command after --, e.g. worksnap run -- make test")
    with _open(args) as ws:
        return run_wrapped(ws, command, every=args.every, step=args.step)


def _cmd_daemon(args: argparse.Namespace) -> int:
    from worksnap import daemon
    from worksnap.errors import InputError
    from worksnap.layout import store_location

    root = os.path.realpath(args.root)
    if not os.path.isdir(root):
        raise InputError(f"root {args.root!r} is not a directory")
    store_dir = store_location(root, args.store)
    if args.action in ("start", "serve"):
        if not daemon.SUPPORTED:
            raise InputError("worksnap daemon needs Linux (inotify); commands run directly here")
        with _open(args):
            pass  # the same checks as any command: root guards, store binding
    if args.action == "serve":
        daemon.serve(root, store_dir, idle=args.idle, run=_run_pooled)
        return 0
    if args.action == "start":
        status = daemon.start(root, store_dir, idle=args.idle, force=args.force)
    elif args.action == "stop":
        stopped = daemon.stop(store_dir)
        if args.json:
            _emit_json(views.daemon_stop_view(stopped=stopped))
        else:
            print("daemon stopped" if stopped else f"no daemon was running for {store_dir}")
        return 0
    else:
        status = daemon.request(store_dir, "status") or {}
    if args.json:
        _emit_json(views.daemon_status_view(status))
    elif status:
        print(
            f"daemon {status['pid']} serving {status['store']} for {status['root']}: "
            f"{status['requests']} commands, "
            f"{'watching' if status.get('watching') else 'not watching (no inotify)'}, "
            f"stops after {status['idle_seconds']:g} s idle"
        )
    else:
        print(f"no daemon is running for {store_dir}")
    return 0 if status else 1


_COMMANDS = {
    "snapshot": _cmd_snapshot,
    "list": _cmd_list,
    "show": _cmd_show,
    "plan": _cmd_plan,
    "restore": _cmd_restore,
    "verify": _cmd_verify,
    "recover": _cmd_recover,
    "rewind": _cmd_rewind,
    "undo": _cmd_undo,
    "redo": _cmd_redo,
    "begin": _cmd_begin,
    "capture": _cmd_capture,
    "attachment": _cmd_attachment,
    "gc": _cmd_gc,
    "pin": _cmd_pin,
    "unpin": _cmd_pin,
    "du": _cmd_du,
    "rebind": _cmd_rebind,
    "diff": _cmd_diff,
    "run": _cmd_run,
    "daemon": _cmd_daemon,
}

# Not run in the daemon: `run` would hold it for the whole command, `rebind` changes
# what the store is bound to, and `daemon` manages it.
_LOCAL_ONLY = {"run", "rebind", "daemon"}


def main(argv: Sequence[str] | None = None, *, seams: Seams | None = None) -> int:
    """Runs the command line; returns the exit code.

    Args:
        argv: the arguments (default: the process's).
        seams: parts of the workspace to swap, for tests (see `workspace.Seams`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.seams = seams
    if args.command not in _LOCAL_ONLY:
        from worksnap import daemon

        try:
            code = daemon.forward(argv, args.root, args.store)
        except daemon.DaemonLost:
            print(
                "worksnap: error: the daemon stopped while running the command "
                "(run `worksnap list` to see what was done)",
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt:
            # Closing the connection tells the daemon: it stops the command at its next
            # progress report, as Ctrl-C would here (a restore rolls back).
            print("worksnap: interrupted", file=sys.stderr)
            return 130
        if code is not None:
            return code
        daemon.auto_start(args.root, args.store, force=args.force)
    return _run(args)


def _run_pooled(argv: list[str], pool: WorkspacePool) -> int:
    """Runs one command line inside the daemon, on its long-lived workspaces."""
    args = build_parser().parse_args(argv)
    args.pool = pool
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from worksnap.errors import WorksnapError

    try:
        return _COMMANDS[args.command](args)
    except WorksnapError as exc:
        print(f"worksnap: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("worksnap: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"worksnap: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
