"""The `worksnap` command line: each command calls `Workspace` and renders what it returns.

The grammar is in arguments.py; `--json` documents come from views.py, the one place
that shapes them; the commands that change the tree (plan, restore, rewind, undo, redo,
recover) are in restoring.py. Every command first finds its root and store as git finds
its repository (`layout.locate`). Imports of the engine are deferred until a command
runs, so `--help`, `--version` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from worksnap import views
from worksnap.arguments import parse
from worksnap.client import LOCAL_ONLY
from worksnap.invocation import GONE_CWD, command_paths, locate, open_workspace, option_prefix
from worksnap.output import (
    PROGRESS,
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
    from worksnap.daemon import WorkspacePool
    from worksnap.manifest import Summary
    from worksnap.workspace import Seams

__all__ = ["display", "main"]

_LARGE_NAMED = 3  # how many of the files left out as large a snapshot names

# -- snapshots ----------------------------------------------------------------


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from worksnap.history import check_kind

    check_kind(args.kind)  # before the store is opened (and made)
    from worksnap.agentcli import exclusion_arguments

    with open_workspace(args, exclude=exclusion_arguments(args, args.exclude)) as ws:
        before_cap = ws.max_file_bytes
        if args.max_file_bytes is not None:
            from worksnap.config import parse_size

            ws.set_config("max-file-bytes", str(parse_size(args.max_file_bytes)))
        before = ws.objects_added
        manifest = ws.snapshot(
            kind=args.kind, step=args.step, label=args.label, **_meta_and_attachments(args)
        )
        large = ws.large_files(manifest)
        cap = manifest.max_file_bytes
        counts = {"total_bytes": ws.total_bytes(manifest), "new_objects": ws.objects_added - before}
        warnings = list(ws.warnings)
    if args.json:
        emit_json(views.snapshot_view(manifest, large=large, **counts))
    else:
        say(manifest.id)
        if args.location.found != "option" and os.getcwd() != args.root:
            warn(f"note: snapshot of {display(args.root)} (found above this directory)")
    if cap != before_cap:
        warn(f"note: this store's size cap is now {human_bytes(cap)} (for every later snapshot)")
    for line in warnings:
        warn(f"warning: {line}")
    if large:
        _report_large(args, large, cap)
    return 0


def _report_large(
    args: argparse.Namespace,
    large: list[tuple[str, int | None]],
    cap: int,
    *,
    what: str = "left out",
) -> None:
    """Names the files a snapshot left out (the largest first) and how to protect them."""
    from worksnap.config import format_size

    shown = ", ".join(
        f"{display(path)} ({human_bytes(size) if size is not None else 'gone'})"
        for path, size in large[:_LARGE_NAMED]
    )
    more = f" and {len(large) - _LARGE_NAMED} more" if len(large) > _LARGE_NAMED else ""
    warn(
        f"warning: {plural(len(large), 'file')} over the {human_bytes(cap)} size cap {what}, "
        f"not protected: {shown}{more}"
    )
    biggest = max((size or 0 for _, size in large), default=0)
    nice = next(1 << bits for bits in range(10, 50) if 1 << bits >= biggest)
    warn(
        "to protect them, raise this store's cap: "
        f"worksnap {option_prefix(args)}config max-file-bytes {format_size(nice)}"
    )


def _cmd_list(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        summaries = ws.list(all_sessions=args.all)
        problems = list(ws.problems)
        pins = ws.pinned()
        bound = ws.store.bound() if summaries else None
    for problem in problems:
        warn(f"warning: {problem}")
    if args.kind is not None:
        summaries = [s for s in summaries if s.kind == args.kind]
    found = len(summaries)
    if args.limit is not None:
        summaries = summaries[: args.limit]  # 0 shows none, as `git log -n 0`
    if args.json:
        emit_json([views.summary_view(s, pinned=s.id in pins) for s in summaries])
        return 0
    scope = "every session" if args.all else f"session {args.session}"
    kind = f" of kind {printable(args.kind)}" if args.kind is not None else ""
    if not found:
        say(f"no snapshots{kind} yet in {display(args.root)}, {scope} "
            f"(take one with `worksnap {option_prefix(args)}snapshot`)")  # fmt: skip
        return 0
    if not summaries:
        say(f"{plural(found, 'snapshot')}{kind} in {display(args.root)}, {scope}; "
            f"--limit {args.limit} shows none")  # fmt: skip
        return 0
    # (Run outside its root, with the store named: they are that root's, not this one's.)
    elsewhere = f" (not {display(args.root)})" if bound not in (None, args.root) else ""
    say(f"snapshots of {display(bound or args.root)}{elsewhere}, {scope}, newest first:")
    _print_table(summaries, pins, with_session=args.all)
    return 0


def _print_table(summaries: list[Summary], pins: set[str], *, with_session: bool) -> None:
    from worksnap.history import is_automatic
    from worksnap.manifest import parse_time

    now = datetime.now(timezone.utc)
    session = "SESSION     " if with_session else ""
    lines = [f"{'ID':<13}  {session}{'STEP':>4}  {'KIND':<11}  {'AGE':>5}  {'CHANGED':>7}  LABEL"]
    for s in summaries:
        step = "-" if s.step is None else str(s.step)
        changed = "-" if s.changed is None else str(s.changed)
        in_session = f"{printable(s.session):<12}" if with_session else ""
        mark = "*" if s.id in pins else " "
        row = (
            f"{s.id}{mark}  {in_session}{step:>4}  {printable(s.kind):<11}  "
            f"{age(parse_time(s.time), now):>5}  {changed:>7}  {printable(s.label or '')}"
        )
        lines.append(styled(row, "2") if is_automatic(s.kind) else row)
    if pins & {s.id for s in summaries}:
        lines.append("(* pinned: gc keeps it)")
    say(*lines)


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


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.remote is not None:
        from worksnap.remotecli import cmd_verify_remote

        return cmd_verify_remote(args)
    with open_workspace(args) as ws:
        problems = ws.verify(args.ref, repair=args.repair)
    if args.json:
        emit_json(views.verify_view(problems))
    else:
        # Escaped: a damaged file's name must not move the cursor or forge a line.
        say(*map(printable, problems), *([] if problems else ["all objects present and intact"]))
    return 1 if problems else 0


def _cmd_begin(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        checkpoint = ws.begin(step=args.step, label=args.label, **_meta_and_attachments(args))
    if args.json:
        emit_json(views.begin_view(checkpoint))
    else:
        say(checkpoint.id)
    return 0


def _cmd_capture(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        paths = command_paths(args, args.paths)
        checkpoint = ws.capture_before(paths)
        named = set(ws.selection(paths) or ())  # (capture_before refuses the root)
        large = [(p, size) for p, size in ws.large_files(checkpoint) if p in named]
        cap = ws.max_file_bytes
    if args.json:
        emit_json(views.capture_view(checkpoint))
    if ignored := [repr(display(p)) for p in checkpoint.ignored if p in named]:
        one = len(ignored) == 1
        warn(
            f"warning: {', '.join(ignored)} {'is' if one else 'are'} ignored (.gitignore or "
            f"git's excludes): not captured, and a rewind leaves "
            f"{'it as it is' if one else 'them as they are'}"
        )
    if large:
        _report_large(args, large, cap, what="left out of the checkpoint")
    return 0


def _cmd_attachment(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        data = ws.attachment(args.ref, args.name)
    write_bytes(data)  # raw bytes, with --json too (README, JSON contract)
    return 0


# -- the store ----------------------------------------------------------------


def _cmd_gc(args: argparse.Namespace) -> int:
    from worksnap.config import Retention
    from worksnap.errors import InputError

    if args.keep_last == 0 and not args.all:
        raise InputError(
            "gc --keep-last 0 keeps nothing but pinned snapshots; add --all if you mean it"
        )
    policy = Retention(keep_last=args.keep_last, max_age=args.max_age, max_bytes=args.max_bytes)
    policy.check()
    with open_workspace(args) as ws:
        report = ws.gc(
            None if policy.is_empty() and args.drop_session is None and not args.all else policy,
            drop_session=args.drop_session,
            everything=args.all,
            dry_run=args.dry_run,
            drop=args.drop,
        )
        gone = [s for s in ws.list(all_sessions=True) if s.id in set(report.dropped)]
        pins = ws.pinned()
    if report.unswept is not None:
        warn(f"warning: {report.unswept}")
    if args.json:
        emit_json(views.gc_view(report))
    elif report.dry_run:
        about = "about " if report.estimate else ""
        say(f"would drop {plural(report.snapshots, 'snapshot')}, "
            f"{about}{plural(report.objects, 'object')} ({about}{human_bytes(report.bytes)} "
            "freed); nothing was removed" + (":" if gone else ""))  # fmt: skip
        if report.estimate:
            warn("note: about: gc first migrates this store's format 1 snapshots, writing "
                 "their trees, and removes those of dropped snapshots too")  # fmt: skip
        if gone:
            _print_table(gone, pins, with_session=True)
    else:
        say(f"dropped {plural(report.snapshots, 'snapshot')}, {plural(report.objects, 'object')} "
            f"({human_bytes(report.bytes)} freed)")  # fmt: skip
    return 0


def _cmd_pin(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        snapshot_id = ws.pin(args.ref, pinned=args.command == "pin")
    if args.json:
        emit_json(views.pin_view(snapshot_id, pinned=args.command == "pin"))
    else:
        say(f"{args.command}ned {snapshot_id}")
    return 0


def _cmd_du(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        sessions = ws.du()
        total = ws.store_size()
    if args.json:
        emit_json(views.du_view(sessions, store_bytes=total))
        return 0
    lines = [f"{'SESSION':<20}  {'SNAPSHOTS':>9}  REFERENCED"]
    for name, (count, size) in sessions.items():
        lines.append(f"{printable(name):<20}  {count:>9}  {human_bytes(size)}")
    say(*lines, f"store on disk: {human_bytes(total)}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from worksnap.config import SETTINGS, get_setting
    from worksnap.errors import InputError

    if args.key == "exclude":
        from worksnap.agentcli import cmd_config_exclude

        return cmd_config_exclude(args)
    if args.more:
        raise InputError(f"config {args.key}: one value only")
    if args.key is not None and args.key not in SETTINGS:
        raise InputError(f"unknown setting {args.key!r}: use one of {', '.join(SETTINGS)}")
    with open_workspace(args) as ws:
        config = ws.set_config(args.key, args.value) if args.value is not None else ws.config()
        cap = ws.max_file_bytes
    document = views.config_view(config, max_file_bytes=cap, store=args.store)
    if args.json:
        emit_json(document)
        return 0
    keys = SETTINGS if args.key is None else (args.key,)
    lines = []
    for key in keys:
        value = get_setting(config, key)
        if key == "max-file-bytes":
            shown = f"{human_bytes(cap)}" + (" (the default)" if value is None else "")
        elif key == "daemon" and value is None:
            shown = "none (automatic: see `worksnap daemon status`)"
        else:
            shown = "none" if value is None else str(value).lower()
        lines.append(f"{key:<15} {shown}")
    say(*lines)
    return 0


def _cmd_rebind(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        count = ws.rebind()
        root = ws.root
    if args.json:
        emit_json(views.rebind_view(root, snapshots=count))
    else:
        say(f"store bound to {root} ({plural(count, 'snapshot')} rebound)")
    return 0


def _cmd_upgrade(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        report = ws.upgrade(dry_run=args.dry_run)
    if args.json:
        emit_json(views.upgrade_view(report))
    else:
        done = "would migrate" if report.dry_run else "migrated"
        rest = f", finished {len(report.finished)} an interrupted run left" * bool(report.finished)
        say(f"{done} {plural(len(report.migrated), 'snapshot')} to format 2{rest}")
    for line in report.left:
        warn(f"warning: {line}")
    return 1 if report.left else 0


def _cmd_daemon(args: argparse.Namespace) -> int:
    from worksnap import autostart, client, daemon
    from worksnap.errors import InputError

    root = args.root
    if not os.path.isdir(root):
        raise InputError(f"root {root!r} is not a directory")
    store_dir = args.store
    if args.action in ("start", "serve"):
        if not daemon.SUPPORTED:
            raise InputError("worksnap daemon needs Linux (inotify); commands run directly here")
        with open_workspace(args) as ws:
            ws.store.bind(ws.root)  # the same checks as any command; later commands find it
    if args.action == "serve":
        daemon.serve(root, store_dir, idle=args.idle, run=_run_pooled)
        return 0
    if args.action == "start":
        status = daemon.start(root, store_dir, idle=args.idle, force=args.force)
    elif args.action == "stop":
        stopped = daemon.stop(store_dir)
        if args.json:
            emit_json(views.daemon_stop_view(stopped=stopped))
        else:
            say("daemon stopped" if stopped else f"no daemon was running for {store_dir}")
        return 0
    else:
        status = client.request(store_dir, "status") or {}
    decision = autostart.decide(root, store_dir)
    if args.json:
        emit_json(
            {**views.daemon_status_view(status), "mode": decision.mode, "reason": decision.reason}
        )
    elif status:
        # No workspace open: a command's failure dropped them, the next command opens one.
        watching = "watching" if status.get("watching") else (
            "not watching (no inotify)" if status.get("workspaces") else
            "watching nothing yet (the next command opens the workspace)"
        )  # fmt: skip
        say(
            f"daemon {status['pid']} serving {status['store']} for {status['root']}: "
            f"{plural(status['requests'], 'command')}, {watching}, "
            f"stops after {status['idle_seconds']:g} s idle",
            f"audits: {status.get('audits', 0)} run, "
            f"{status.get('audit_differences', 0)} differences found",
            f"automatic start: {decision.mode}, {decision.reason}",
        )
    else:
        say(
            f"no daemon is running for {store_dir}",
            f"automatic start: {decision.mode}, {decision.reason}",
        )
    return 0 if status else 1


def _cmd_completion(args: argparse.Namespace) -> int:
    from worksnap.arguments import build_parser
    from worksnap.completion import script

    sys.stdout.write(script(args.shell, build_parser()))
    return 0


def _commands() -> dict[str, Any]:
    from worksnap import agentcli, inspection, remotecli, restoring

    return {
        "snapshot": _cmd_snapshot,
        "status": inspection.cmd_status,
        "list": _cmd_list,
        "show": inspection.cmd_show,
        "cat": inspection.cmd_cat,
        "plan": restoring.cmd_plan,
        "restore": restoring.cmd_restore,
        "verify": _cmd_verify,
        "recover": restoring.cmd_recover,
        "rewind": restoring.cmd_rewind,
        "undo": restoring.cmd_undo,
        "redo": restoring.cmd_redo,
        "begin": _cmd_begin,
        "capture": _cmd_capture,
        "attachment": _cmd_attachment,
        "gc": _cmd_gc,
        "pin": _cmd_pin,
        "unpin": _cmd_pin,
        "du": _cmd_du,
        "config": _cmd_config,
        "rebind": _cmd_rebind,
        "upgrade": _cmd_upgrade,
        "diff": inspection.cmd_diff,
        "run": agentcli.cmd_run,
        "hook": agentcli.cmd_hook,
        "hooks": agentcli.cmd_hooks,
        "mcp": agentcli.cmd_mcp,
        "daemon": _cmd_daemon,
        "completion": _cmd_completion,
        "remote": remotecli.cmd_remote,
        "push": remotecli.cmd_push,
        "pull": remotecli.cmd_pull,
    }


def main(
    argv: Sequence[str] | None = None,
    *,
    seams: Seams | None = None,
    tried_daemon: bool = False,
) -> int:
    """Runs the command line; returns the exit code.

    Args:
        argv: the arguments (default: the process's).
        seams: parts of the workspace to swap, for tests (see `workspace.Seams`).
        tried_daemon: the client (client.py) already found no daemon to run it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    args.seams = seams
    try:
        return _quietly_on_broken_pipe(lambda: _main(argv, args, tried_daemon=tried_daemon))
    except FileNotFoundError:  # the current directory is gone (a restore may have removed it)
        print(f"worksnap: error: {GONE_CWD}", file=sys.stderr)
        return 2


def _main(argv: list[str], args: argparse.Namespace, *, tried_daemon: bool) -> int:
    args.given_store = args.store is not None
    if args.command == "completion":
        return _run(args)
    if args.command == "hook":
        from worksnap import agentcli
        from worksnap.errors import WorksnapError

        prepared = agentcli.prepare_hook(args, argv)
        if prepared is None:
            return 0
        argv = prepared
        try:
            locate(args)
        except (OSError, ValueError, WorksnapError) as exc:
            return agentcli.hook_failed(exc)
    else:
        locate(args)
    if args.command in LOCAL_ONLY or getattr(args, "remote", None) is not None:
        return _run(args)  # verify --remote: the remote's credentials are this process's
    if not tried_daemon:
        from worksnap import client

        try:
            code = client.forward(argv, args.root, args.store)
        except client.DaemonLost:
            if args.command == "hook":
                from worksnap import agentcli

                return agentcli.hook_lost(args)  # one line, exit as `hooks-block` says
            return client.lost(args.root, args.store)
        except client.Stopped as exc:
            # Before the daemon took the command, or a second time while it was stopping
            # it (a first one it is told of, and it says how it left the tree).
            return client.stopped(exc)
        if code is not None:
            return code
    code = _run(args)
    from worksnap import autostart

    autostart.maybe_start(args.root, args.store, force=args.force)
    return code


_BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, as a shell reports a reader that went away


def _quietly_on_broken_pipe(run: Any) -> int:
    """Runs the command; a reader that went away (`worksnap list | head -1`) ends it quietly."""
    try:
        code: int = run()
        sys.stdout.flush()
    except BrokenPipeError:
        # Anything still buffered cannot be written either: point stdout at nothing, so
        # the interpreter's own flush at exit does not complain.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return _BROKEN_PIPE_EXIT
    return code


def _run_pooled(argv: list[str], pool: WorkspacePool) -> int:
    """Runs one command line inside the daemon, on its long-lived workspaces."""
    args = parse(argv)
    args.pool = pool
    args.given_store = args.store is not None
    locate(args)
    return _quietly_on_broken_pipe(lambda: _run(args))


_STOPPED_BY_SIGNALS = frozenset({"restore", "rewind", "undo", "redo", "recover"})
"""The commands that change the tree: SIGTERM and SIGHUP stop them as Ctrl-C does (a
restore rolls back; `stopsignals`). Others end at them at once, as before."""


def _run(args: argparse.Namespace) -> int:
    from worksnap import stopsignals
    from worksnap.errors import Interrupted, WorksnapError

    try:
        stops = args.command in _STOPPED_BY_SIGNALS
        with stopsignals.on_stop() if stops else contextlib.nullcontext():
            code: int = _commands()[args.command](args)
        return code
    except WorksnapError as exc:
        PROGRESS.clear()
        print(f"worksnap: error: {printable(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        state = printable(exc.state) if isinstance(exc, Interrupted) else ""
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            PROGRESS.clear()  # a command that changes the tree says how it left it
            print(stopsignals.said(state), file=sys.stderr)
        return stopsignals.exit_code()
    except BrokenPipeError:
        raise
    except OSError as exc:
        PROGRESS.clear()
        print(f"worksnap: error: {printable(str(exc))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
