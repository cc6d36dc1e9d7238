"""The commands that change the tree: plan, restore, rewind, undo, redo, recover.

Each one (but `plan`, which only previews) shows its plan and asks when a person is at
the terminal (stdin a terminal, no `--yes`, no `--json`; the question on stderr, so
`> log` does not swallow it; Ctrl-D is no), applies exactly the plan the
person saw, takes `--dry-run` (the plan, nothing changed) and `--yes`, and says what
it did in one line. Without a terminal (an agent, a script) it runs at once, as before.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from worksnap import views
from worksnap.invocation import GONE_CWD, command_paths, open_workspace, option_prefix
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
)
from worksnap.paths import cwd_below, fs_path, is_under

if TYPE_CHECKING:
    from worksnap.apply import Result
    from worksnap.manifest import Manifest
    from worksnap.plan import Plan, Unprotected
    from worksnap.workspace import Workspace

Preview = Callable[["Workspace"], "Plan | None"]
"""Makes the plan a command would carry out (None: there is nothing to do)."""
Run = Callable[["Workspace", "Plan | None"], "Result | None"]
"""Carries it out: exactly the plan given, or (None) planned afresh under the lock."""

_COLOURS = {"M": "33", "A": "31", "D": "32", "B": "35", "!": "35"}
_WHY = {
    "deleted": "deleted since; the snapshot left it out as large, so it cannot come back",
    "changed": "changed since; the snapshot left it out as large: not restored",
    "too-large": "over the size cap now: left as it is (raise the cap to restore it)",
    "added": "added since, over the size cap: left as it is",
    "ignored": "ignored now, so in no snapshot: left as it is, not as the snapshot has it",
    "excluded": "excluded now, so in no snapshot: left as it is, not as the snapshot has it",
}


def cmd_plan(args: argparse.Namespace) -> int:
    """`plan REF [PATH...]`: the preview, nothing changed."""
    with open_workspace(args) as ws:
        plan = ws.plan_restore(ws.load(args.ref), paths=_paths(args))
    _show_plan(args, plan)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """`restore REF [PATH...] [--to DIR]`."""
    if args.to is not None:
        return _restore_to(args)
    paths = _paths(args)
    return _change(
        args,
        verb="restore",
        preview=lambda ws: ws.plan_restore(ws.load(args.ref), paths=paths),
        run=lambda ws, plan: ws.restore(args.ref, paths=paths) if plan is None else ws.apply(plan),
        then="undo",
    )


def cmd_rewind(args: argparse.Namespace) -> int:
    """`rewind N`: restore the newest snapshot of step N."""
    ref = f"step:{args.step}"
    return _change(
        args,
        verb="rewind",
        preview=lambda ws: ws.plan_restore(ws.load(ref)),
        run=lambda ws, plan: ws.restore(ref) if plan is None else ws.apply(plan),
        then="undo",
    )


def cmd_undo(args: argparse.Namespace) -> int:
    """`undo`: back to the newest snapshot whose state differs from the current one."""
    return _change(
        args,
        verb="undo",
        preview=lambda ws: ws.plan_undo(),
        run=lambda ws, plan: ws.undo(plan),
        then="redo",
    )


def cmd_redo(args: argparse.Namespace) -> int:
    """`redo`: what the last undo undid."""
    return _change(
        args,
        verb="redo",
        preview=lambda ws: ws.plan_redo(),
        run=lambda ws, plan: ws.redo(plan),
        then="undo",
    )


def cmd_recover(args: argparse.Namespace) -> int:
    """`recover`: roll back a restore that was killed part-way (`--discard`: keep the tree)."""
    if args.discard and not args.dry_run:
        with open_workspace(args) as ws:
            result = ws.recover(discard=True)
        if result is None:
            return _no_recovery(args)
        if args.json:
            emit_json(views.recover_view(result))
        else:
            say(
                "dropped the journal of an interrupted restore, the tree left as it is; "
                f"kept as snapshot {result.pre_restore} (worksnap {option_prefix(args)}undo)"
            )
        return 0
    if args.dry_run or not (args.yes or args.json or not sys.stdin.isatty()):
        with open_workspace(args) as ws, _unchanged_if_interrupted(recovering=True):
            plan = ws.plan_recover()
        if plan is None:
            return _no_recovery(args)
        if args.dry_run:
            _show_plan(args, plan, header=_heading("recover", plan))
            return 0
        _show_plan(args, plan, header=_heading("recover", plan), asking=True)
        with _unchanged_if_interrupted(recovering=True):
            if not _confirmed("recover", plan, args):
                return 1
    with open_workspace(args) as ws:
        result = ws.recover()
    if result is None:
        return _no_recovery(args)
    if args.json:
        emit_json(views.recover_view(result))
        return 0
    kept = (
        f"; the tree as it was: snapshot {result.pre_restore} (worksnap {option_prefix(args)}undo)"
    )
    say(
        f"rolled back an interrupted restore: {plural(len(result.restored), 'path')} put back "
        f"in {display(args.root)}" + (kept if result.pre_restore else "")
    )
    _warn_blocked(args, result)
    return 0


def _no_recovery(args: argparse.Namespace) -> int:
    if args.json:
        emit_json(views.recover_view(None))
    else:
        say("no interrupted restore to recover")
    return 0


def _paths(args: argparse.Namespace) -> list[str] | None:
    return command_paths(args, args.paths) or None


def _change(args: argparse.Namespace, *, verb: str, preview: Preview, run: Run, then: str) -> int:
    """Previews, asks (a person at a terminal), applies what was shown, and reports.

    `then`: the command that reverses it (`undo`, `redo`), which the report suggests.
    """
    asking = not (args.yes or args.json or not sys.stdin.isatty())
    with open_workspace(args) as ws:
        with _unchanged_if_interrupted():
            plan = preview(ws) if args.dry_run or asking else None
            if plan is not None and args.dry_run:
                _show_plan(args, plan, header=_heading(verb, plan))
                return 0
            if plan is not None:
                _show_plan(args, plan, header=_heading(verb, plan), asking=bool(plan.changes))
                if not plan.changes:
                    return 0
                if not _confirmed(verb, plan, args):
                    return 1
        result = run(ws, plan)  # Ctrl-C in it: Interrupted says how it left the tree
    if result is None:
        return 1
    return _report(args, result, then=then, previewed=plan is not None)


@contextlib.contextmanager
def _unchanged_if_interrupted(*, recovering: bool = False) -> Iterator[None]:
    """Ctrl-C while planning or at the question: the line says nothing was changed."""
    from worksnap.errors import Interrupted

    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted.before_any_change(recovering=recovering) from None


def _confirmed(verb: str, plan: Plan, args: argparse.Namespace) -> bool:
    """Asks on the terminal: stderr, as `rm -i` asks (stdout may be a file: `> log`)."""
    question = f"{verb}: make {plural(len(plan.changes), 'change')} in {display(args.root)}?"
    sys.stdout.flush()
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = input().strip().lower()
    except EOFError:  # Ctrl-D: no answer is no, as "n" (on a line of its own)
        print(file=sys.stderr)
        answer = ""
    if answer in ("y", "yes"):
        return True
    say("nothing was changed")
    return False


def _heading(verb: str, plan: Plan) -> str | None:
    """For undo, redo and recover: where they go (a person should see which snapshot)."""
    if verb in ("restore", "rewind"):
        return None
    return f"{verb} goes back to {describe(plan.target)}:"


def describe(manifest: Manifest) -> str:
    """`snapshot 3fa9c2d1e0ab (step 3, step, 5m ago: "add parser")`."""
    from worksnap.manifest import parse_time

    parts = [] if manifest.step is None else [f"step {manifest.step}"]
    when = age(parse_time(manifest.time), datetime.now(timezone.utc))
    parts += [printable(manifest.kind), f"{when} ago"]
    label = f': "{printable(manifest.label)}"' if manifest.label else ""
    return f"snapshot {manifest.id} ({', '.join(parts)}{label})"


def _show_plan(
    args: argparse.Namespace, plan: Plan, *, header: str | None = None, asking: bool = False
) -> None:
    """Shows the plan on stdout, and on stderr too when a person is asked about it.

    With stdout going elsewhere (`restore latest > log`), the person at the terminal
    must see what the question is about; the log keeps the plan, as it always did.
    """
    if args.json:
        emit_json(views.plan_view(plan))
        return
    lines = [] if header is None else [header]
    root = display(args.root)
    for change in plan.changes:
        op = change.op.value
        is_dir = (change.entry is None and op != "A") or (op == "A" and change.was_dir)
        lines.append(f"  {styled(op, _COLOURS[op])}  {display(change.path)}{'/' if is_dir else ''}")
    for row in plan.unprotected:
        lines.append(f"  {styled('!', _COLOURS['!'])}  {display(row.path)}  ({_left(row)})")
    counts = plan.counts()
    if not plan.changes:
        lines.append(_nothing(args, plan.target.id, plan.unprotected))
    else:
        blocked = f", {counts['B']} blocked (left as they are)" if counts["B"] else ""
        lines.append(
            f"restore {plan.target.id} into {root}: {counts['M']} modified (restored), "
            f"{counts['A']} added since (removed), {counts['D']} deleted since (recreated)"
            + blocked
        )
    left_out = {"ignored": "the ignore rules", "excluded": "the exclusion rules"}
    if large := sum(row.why not in left_out for row in plan.unprotected):
        lines.append(
            f"{plural(large, 'large file')} not protected (see `!` above): "
            "`worksnap config max-file-bytes SIZE` raises the cap of later snapshots"
        )
    for why, rules in left_out.items():
        if count := sum(row.why == why for row in plan.unprotected):
            left = "it is" if count == 1 else "they are"
            lines.append(
                f"{plural(count, 'file')} {why} now left as {left} (see `!` above): "
                f"no snapshot keeps what {rules} leave out"
            )
    say(*lines)
    if asking and not sys.stdout.isatty():
        print(*lines, sep="\n", file=sys.stderr)


def _left(row: Unprotected) -> str:
    """Why a file in no snapshot is left as it is: its `!` row's, and its warning's."""
    size = f", {human_bytes(row.size)}" if row.size is not None else ""
    return f"not protected{size}: {_WHY[row.why]}"


def _nothing(args: argparse.Namespace, target: str, unprotected: list[Unprotected]) -> str:
    """The line for a plan or restore that changes nothing.

    What it leaves unprotected may differ from the target: then nothing "matches".
    (A review found a file ignored now, v2 where the snapshot has v1, said to match.)
    """
    if not unprotected:
        return f"nothing to restore: {_matching(args)} snapshot {target}"
    left = "it is" if len(unprotected) == 1 else "they are"
    return (
        f"nothing to restore from snapshot {target}: {plural(len(unprotected), 'file')} "
        f"not protected may differ from it, left as {left}"
    )


def _matching(args: argparse.Namespace) -> str:
    """What matches the snapshot: the root, or the PATHs a restore was limited to.

    (A review found `plan REF b.txt` saying the whole root matched, while a.txt differed.)
    """
    paths = [display(p) for p in getattr(args, "paths", None) or ()]
    if not paths:
        return f"{display(args.root)} matches"
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"{shown} {'matches' if len(paths) == 1 else 'match'}"


def _report(args: argparse.Namespace, result: Result, *, then: str, previewed: bool) -> int:
    """Says what a run did; warns of what it left unprotected, unless the preview showed it."""
    if args.json:
        emit_json(views.result_view(result))
    elif result.ok:
        if result.restored or result.pre_restore or result.blocked:
            say(
                f"restored {plural(len(result.restored), 'path')} in {display(args.root)} "
                f"from snapshot {result.target}"
                + (
                    f" ({then} it with: worksnap {option_prefix(args)}{then})"
                    if result.pre_restore
                    else ""
                )
            )
        else:
            say(_nothing(args, result.target, result.unprotected))
    else:
        warn(f"error: {result.failure()}")
    _warn_blocked(args, result)
    if not (args.json or previewed):  # the preview's `!` rows, for a run that showed none
        for row in result.unprotected:
            warn(f"warning: {display(row.path)}: {_left(row)}")
    return 0 if result.ok else 1


def _warn_blocked(args: argparse.Namespace, result: Result) -> None:
    """One line for each path a restore, rollback or recovery left as it is (`Op.BLOCKED`)."""
    if args.json:
        return  # `blocked` in the view
    here = cwd_below(args.root)
    for path in result.blocked:
        try:
            mode: int | None = os.lstat(os.path.join(os.fsencode(args.root), fs_path(path))).st_mode
        except OSError:
            mode = None
        if path in result.edited:
            note = ("it (or the directory holding it) was edited while the rollback ran, "
                    "and keeps that edit")  # fmt: skip
        elif here and is_under(here, path) and mode is not None and stat.S_ISDIR(mode):
            note = ("the directory you are in, or one above it: kept, emptied, as git keeps "
                    "it, so the restore is not finished here: cd out of it and restore again "
                    "(it removes the directory, or writes the snapshot's file in its "
                    "place)")  # fmt: skip
        elif mode is not None and stat.S_ISDIR(mode):
            note = ("a directory holding what no restore touches (ignored or excluded files, "
                    "a FIFO, socket or device; for a checkpoint, files it never named), where "
                    "the snapshot has a file")  # fmt: skip
        elif mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            note = ("a FIFO, socket or device, which no snapshot holds (remove it, then "
                    "restore again)")  # fmt: skip
        else:
            note = ("what is in its way is in no snapshot (a file over the size cap, or one "
                    "the ignore rules leave out)")  # fmt: skip
        warn(f"warning: {display(path)} left as it is: {note}")


def _restore_to(args: argparse.Namespace) -> int:
    """`restore REF --to DIR`: the snapshot written elsewhere; the workspace untouched.

    DIR is said absolute (in `--json` too): as typed, `../out` from a subdirectory was
    neither where it was written from the root nor from anywhere a reader knows (a review).
    """
    try:
        to = os.path.abspath(args.to) if args.to else args.to  # (an empty one: refused as such)
    except FileNotFoundError:  # relative, from a directory a restore removed
        from worksnap.errors import InputError

        raise InputError(GONE_CWD) from None
    if args.dry_run:  # the run's own plan: what it writes, refused where the run refuses
        with open_workspace(args) as ws:
            plan = ws.plan_restore(ws.load(args.ref), paths=_paths(args), to=to)
        if args.json:
            emit_json(views.extract_plan_view(plan, to=to))
            return 0
        rows = [f"  {display(c.path)}{'/' if c.entry is None else ''}" for c in plan.changes]
        say(*rows, f"would write {plural(len(plan.changes), 'path')} of snapshot "
                   f"{plan.target.id} into {display(to)}")  # fmt: skip
        return 0
    with open_workspace(args) as ws:
        result = ws.restore_to(args.ref, to, paths=_paths(args))
    if args.json:
        emit_json(views.extract_view(result, to=to))
    elif result.ok:
        say(f"wrote {plural(len(result.restored), 'path')} of snapshot {result.target} "
            f"into {display(to)}")  # fmt: skip
    else:
        warn(f"error: writing into {display(to)} failed at {result.error}; nothing was left there")
    return 0 if result.ok else 1
