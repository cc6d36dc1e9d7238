"""The commands that plug worksnap into agents: hook, hooks, mcp, run's steps, exclusions.

`hook claude-code` reads its event before the root is found (the event names the
directory to start from) and hands it on with `--event`, so a daemon serving the store
runs it as fast as any command. It never prints on stdout, and a failure is one line
on stderr and exit 0 (2 with `worksnap config hooks-block true`): a worksnap problem
never breaks the agent's turn.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from worksnap import views
from worksnap.invocation import command_paths, open_workspace
from worksnap.output import display, emit_json, say, warn

if TYPE_CHECKING:
    from worksnap.progress import Progress

BLOCK_EXIT = 2
"""What a hook exits with to block the agent's turn (Claude Code: stderr goes to it)."""


# -- hook ---------------------------------------------------------------------


def prepare_hook(args: argparse.Namespace, argv: list[str]) -> list[str] | None:
    """Reads the hook's event (stdin, once) and starts from the project; the argv to run.

    The project is `$CLAUDE_PROJECT_DIR`, which Claude Code gives every hook: the
    event's `cwd` is wherever the agent last `cd`-ed (another repository, a nested one,
    `/tmp`), and a review found the turn snapshotted there, in a store of its own, its
    step missing from the project's session. Without it, the event's `cwd`.

    None: the event is unreadable (said on stderr); the hook then exits 0.
    """
    if args.event is None:
        if sys.stdin.isatty():
            warn("hook: reads one hook event as JSON on stdin (the agent runs it so)")
            return None
        args.event = sys.stdin.read()
        argv = [*argv, "--event", args.event]
    from worksnap.errors import InputError
    from worksnap.hooks import parse_event

    try:
        event = parse_event(args.event)
    except InputError as exc:
        warn(f"hook: {exc}")
        return None
    project = os.environ.get("CLAUDE_PROJECT_DIR", "")
    start = project if project and os.path.isdir(project) else event.cwd
    if args.root is None and start and not os.path.isabs(start):
        # Read against the hook's own directory, `..` snapshotted the folder above the
        # project into a store of its own (a review); Claude Code gives absolute paths.
        what = "CLAUDE_PROJECT_DIR" if start == project else "the event's cwd"
        warn(f"hook: {what} is not an absolute path ({start}): no snapshot")
        return None
    if args.root is None and start and os.path.isdir(start):
        try:
            os.chdir(start)
        except OSError as exc:
            warn(f"hook: cannot enter {start}: {exc.strerror}")
            return None
    return argv


def cmd_hook(args: argparse.Namespace) -> int:
    """`hook claude-code`: one event, the snapshot it asks for, nothing on stdout."""
    from worksnap.errors import LockError, WorksnapError
    from worksnap.hooks import LOCK_WAIT_SECONDS, handle, parse_event

    block, started = False, time.monotonic()  # all its waits together, the daemon's too
    try:
        event = parse_event(args.event or "")
        with open_workspace(args) as ws:
            block = ws.config().hooks_block
            progress = ws.progress
            # One line, said before the agent kills it: a wait notice would be a second.
            ws.progress = None if progress is None else _no_notices(progress)
            try:
                with ws.locks.within(LOCK_WAIT_SECONDS - (time.monotonic() - started)):
                    handle(event, ws)
            finally:
                ws.progress = progress
            for line in ws.warnings:
                warn(f"hook: warning: {line}")
    except LockError as exc:
        waited = f"gave up after {LOCK_WAIT_SECONDS:g} s"
        warn(f"hook: error: no snapshot for {event.name}, {waited}: {exc}")
        return BLOCK_EXIT if block else 0
    except (WorksnapError, OSError) as exc:
        warn(f"hook: error: {exc}")
        return BLOCK_EXIT if block else 0
    return 0


def _no_notices(progress: Callable[[Progress], None]) -> Callable[[Progress], None]:
    """`progress` without its wait notices (who holds the store: the hook's error says it).

    A recovery's is said: the hook's snapshot rolled back a killed restore first.
    """

    def report(done: Progress) -> None:
        if not done.note or done.what == "recover":
            progress(done)

    return report


def hook_lost(args: argparse.Namespace) -> int:
    """The daemon stopped while it ran the hook: one line, and the exit `hooks-block` asks.

    (It said "worksnap: error: ..." and exited 1, which Claude Code shows as an error of
    its own: a review.)
    """
    from worksnap.errors import WorksnapError

    warn("hook: error: the daemon stopped while running the hook (`worksnap list` shows "
         "what it did; the next command rolls back a restore it left unfinished)")  # fmt: skip
    try:
        with open_workspace(args) as ws:
            return BLOCK_EXIT if ws.config().hooks_block else 0
    except (WorksnapError, OSError):
        return 0


def hook_failed(exc: Exception) -> int:
    """A hook that failed before it ran: one line, exit 0 (the config cannot be read)."""
    warn(f"hook: error: {exc}")
    return 0


# -- hooks install / uninstall -----------------------------------------------


def cmd_hooks(args: argparse.Namespace) -> int:
    """`hooks install|uninstall claude-code [--project|--user]`."""
    from worksnap import hooks

    path = hooks.settings_path(user=args.user, root=args.root)
    settings = hooks.read_settings(path)
    if args.action == "install":
        changed = hooks.install(settings, hooks.hook_command())
    else:
        changed = hooks.uninstall(settings)
    if changed:
        hooks.write_settings(path, settings)
    if args.json:
        emit_json({"settings": path, "action": args.action, "changed": changed})
    elif args.action == "install":
        say(
            f"worksnap hooks {'added to' if changed else 'already in'} {display(path)}: "
            f"a step snapshot at every prompt, a tool snapshot after {', '.join(hooks.FILE_TOOLS)}"
        )
        say("for hooks in ~0.1 s on big trees: worksnap config daemon true")
    else:
        say(f"worksnap hooks {'removed from' if changed else 'were not in'} {display(path)}")
    return 0


# -- mcp ----------------------------------------------------------------------


def cmd_mcp(args: argparse.Namespace) -> int:
    """`mcp`: a Model Context Protocol server on stdio for this workspace."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        warn(
            "error: worksnap mcp needs the MCP SDK: pip install 'worksnap[mcp]' "
            "(or: pip install 'mcp>=2.3')"
        )
        return 2
    from worksnap.mcpserver import serve

    serve(
        args.root,
        store=args.store,
        session=args.session,
        watch=args.watch,
        force=args.force,
        found=args.location.found,
        seams=args.seams,
    )
    return 0


# -- run --snapshots / --rewind -----------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """`run [--snapshots] [--rewind N] -- CMD`: numbered steps, or resume from one."""
    from worksnap.errors import InputError
    from worksnap.runwrap import Outcome, run_wrapped
    from worksnap.session import Session

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise InputError("run needs a command after --, e.g. worksnap run -- make test")
    rewind: views.View | None = None
    if args.rewind is not None:
        done, rewind = _rewound(args)
        if not done:
            if rewind is not None:  # --json: the one document says why nothing was run
                failed = f"the rewind to step {args.rewind} failed, so the command was not run"
                warn(f"error: {failed}")
                emit_json(views.run_view(Outcome(command, 1, error=failed), rewind=rewind))
            return 1
    with open_workspace(args) as ws:
        numbered = Session(workspace=ws, name=args.session) if args.snapshots else None
        outcome = run_wrapped(
            ws,
            command,
            every=args.every,
            step=args.step,
            stdout=2 if args.json else None,
            numbered=numbered,
        )
    if outcome.error is not None:
        warn(f"error: {outcome.error}")
    if args.json:
        emit_json(views.run_view(outcome, rewind=rewind))
    return outcome.exit_code


def _rewound(args: argparse.Namespace) -> tuple[bool, views.View | None]:
    """Rewinds to step `--rewind` as `rewind N` does; whether it was done, and its document.

    With `--json`, at once, and what `rewind --json` prints goes into run's document,
    the one on stdout (a review found rewind's line printed before it). Else as `rewind N`
    (preview, ask, its line) and no document.
    """
    if not args.json:
        from worksnap.restoring import cmd_rewind

        rewind = argparse.Namespace(**{**vars(args), "step": args.rewind, "dry_run": False})
        return cmd_rewind(rewind) == 0, None
    with open_workspace(args) as ws:
        result = ws.restore(f"step:{args.rewind}")
    if not result.ok:  # what `rewind` says of it: where it stopped, how it left the tree
        warn(f"error: {result.failure()}")
    return result.ok, views.result_view(result)


# -- config exclude -------------------------------------------------------------


def cmd_config_exclude(args: argparse.Namespace) -> int:
    """`config exclude [add|remove RULE...]`: the store's exclusion rules."""
    from worksnap.config import with_exclusions
    from worksnap.errors import InputError

    action, rules = args.value, list(args.more)
    if action is None:
        if rules:
            raise InputError("config exclude: say add or remove before the rules")
        with open_workspace(args) as ws:
            config = ws.config()
    elif action in ("add", "remove"):
        if not rules:
            raise InputError(f"config exclude {action}: name at least one path or pattern")
        with open_workspace(args) as ws:
            # remove reads a rule as add does: `add x` then `remove x` in sub/ is sub/x both times
            rules = [_rule_from_root(args, ws.root, r) for r in rules]
            add, remove = (rules, []) if action == "add" else ([], rules)
            config = ws.change_config(lambda c: with_exclusions(c, add=add, remove=remove))
    else:
        raise InputError(f"config exclude {action!r}: use add or remove")
    if args.json:
        emit_json({"store": args.store, "exclude": list(config.exclude)})
    else:
        say(*(config.exclude or ["no exclusions (add one: worksnap config exclude add PATTERN)"]))
    return 0


def _rule_from_root(args: argparse.Namespace, root: str, rule: str) -> str:
    """A path the command line names, made relative to the root; a pattern as it is."""
    from worksnap.exclusion import is_pattern

    if is_pattern(rule):
        return rule
    full = command_paths(args, [rule])[0]
    if not os.path.isabs(full):
        return rule
    rel = os.path.relpath(os.path.normpath(full), root)
    from worksnap.errors import InputError

    if rel == ".":
        raise InputError(f"exclude {rule!r} is the root ({root}) itself, not a path inside it")
    if rel.startswith("../") or rel == "..":
        raise InputError(f"exclude {rule!r} is not a path inside {root}")
    return rel


def exclusion_arguments(args: argparse.Namespace, given: list[str]) -> tuple[str, ...]:
    """`--exclude` rules: a path as the command line reads it, a pattern as it is."""
    from worksnap.exclusion import is_pattern

    return tuple(r if is_pattern(r) else command_paths(args, [r])[0] for r in given)
