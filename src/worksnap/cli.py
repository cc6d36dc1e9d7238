"""The `worksnap` command line: thin wiring from arguments to `Workspace` and back to text or JSON.

Imports of the engine are deferred until a command runs, so `--help` and
argument errors answer at once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worksnap.apply import Result
    from worksnap.plan import Plan
    from worksnap.workspace import Progress, Workspace

EXAMPLES = """\
examples:
  worksnap snapshot --step 3 --label "before refactor"
  worksnap list
  worksnap plan latest            # what a restore of the newest snapshot would change
  worksnap restore step:3 --yes   # rewind to the snapshot of step 3
  worksnap --json plan 3fa9c2     # machine-readable preview (a unique id prefix works)
  worksnap verify

refs: a full id, a unique id prefix, `latest`, or `step:N` (newest snapshot of step N).
exit codes: 0 success, 1 the operation ran and failed, 2 bad usage or bad input.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line and exit 2, like every other error
        self.exit(2, f"worksnap: error: {message} (see `worksnap --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser (also used to render `--help`)."""
    parser = _Parser(
        prog="worksnap",
        description="Snapshot the whole working directory at every step, "
        "preview what a rewind changes, and rewind to any step.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", default=".", help="workspace directory (default: .)")
    parser.add_argument(
        "--store", help="store directory (default: ROOT/.worksnap, or $WORKSNAP_STORE)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    parser.add_argument(
        "--force", action="store_true", help="allow / or the home directory as the root"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    snap = commands.add_parser(
        "snapshot",
        help="capture the whole workspace",
        description="Capture the whole workspace as a new snapshot and print its id.",
        epilog="example: worksnap snapshot --step 4 --kind step --label 'add parser'",
    )
    snap.add_argument("--step", type=_natural, help="agent step number")
    snap.add_argument("--kind", default="manual", help="kind of snapshot (default: manual)")
    snap.add_argument("--label", help="a short label (first line kept, at most 200 bytes)")
    snap.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATH",
        help="never capture nor touch PATH (repeatable)",
    )
    snap.add_argument(
        "--max-file-bytes",
        type=_natural,
        metavar="N",
        help="files larger than N bytes are listed as large, not stored (default: 2 MiB)",
    )

    commands.add_parser(
        "list", help="list snapshots, newest first", description="List snapshots, newest first."
    )

    show = commands.add_parser(
        "show", help="show one snapshot", description="Show one snapshot (--json: the manifest)."
    )
    show.add_argument("ref")

    plan = commands.add_parser(
        "plan",
        help="preview what restoring a snapshot would change",
        description="Preview what restoring REF would change: M modified (restored), "
        "A added since (removed), D deleted since (recreated). Changes nothing.",
        epilog="example: worksnap plan step:3",
    )
    plan.add_argument("ref")

    restore = commands.add_parser(
        "restore",
        help="rewind the workspace to a snapshot",
        description="Rewind the workspace to REF. A pre-restore snapshot is taken first, "
        "and a failed restore is rolled back.",
        epilog="example: worksnap restore latest --yes",
    )
    restore.add_argument("ref")
    restore.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    restore.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    verify = commands.add_parser(
        "verify",
        help="check that stored objects are present and intact",
        description="Check that every object REF (default: every snapshot) needs is present "
        "and matches its hash. Exit 1 when something is damaged.",
    )
    verify.add_argument("ref", nargs="?")

    commands.add_parser(
        "recover",
        help="roll back a restore that was interrupted",
        description="Roll back a restore that was killed part-way (any command does this "
        "on its own when it finds one).",
    )
    return parser


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


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


_COLOURS = {"M": "33", "A": "31", "D": "32"}


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
    print(
        f"restore {plan.target.id}: {counts['M']} modified (restored), "
        f"{counts['A']} added since (removed), {counts['D']} deleted since (recreated)"
    )


def _progress_printer(enabled: bool) -> Any:
    def report(progress: Progress) -> None:
        what = {"hash": "hashing", "apply": "restoring"}.get(progress.what, progress.what)
        sys.stderr.write(f"\r{what} {progress.done}/{progress.total}")
        if progress.done == progress.total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return report if enabled else None


# -- commands ----------------------------------------------------------------


def _open(args: argparse.Namespace, **options: Any) -> Workspace:
    from worksnap.workspace import Workspace

    return Workspace(
        args.root,
        store=args.store,
        force=args.force,
        progress=_progress_printer(sys.stderr.isatty() and not args.json),
        **options,
    )


def _cmd_snapshot(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"exclude": tuple(args.exclude)}
    if args.max_file_bytes is not None:
        options["max_file_bytes"] = args.max_file_bytes
    with _open(args, **options) as ws:
        before = ws.store.added
        manifest = ws.snapshot(kind=args.kind, step=args.step, label=args.label)
        if args.json:
            _emit_json(
                {
                    "id": manifest.id,
                    "step": manifest.step,
                    "kind": manifest.kind,
                    "time": manifest.time,
                    "label": manifest.label,
                    "tree": manifest.tree,
                    "files": len(manifest.entries),
                    "bytes": sum(e.size or 0 for e in manifest.entries),
                    "new_objects": ws.store.added - before,
                    "dirs": len(manifest.dirs),
                    "ignored": len(manifest.ignored),
                    "large": len(manifest.large),
                    "excluded": len(manifest.excluded),
                }
            )
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
        summaries = ws.list()
        for problem in ws.problems:
            print(f"worksnap: warning: {problem}", file=sys.stderr)
    if args.json:
        _emit_json(
            [
                {
                    "id": s.id,
                    "step": s.step,
                    "kind": s.kind,
                    "time": s.time,
                    "label": s.label,
                    "files": s.files,
                    "bytes": s.bytes,
                    "tree": s.tree,
                }
                for s in summaries
            ]
        )
        return 0
    if not summaries:
        print("no snapshots yet (take one with `worksnap snapshot`)")
        return 0
    print(f"{'ID':<12}  {'STEP':>4}  {'KIND':<11}  {'TIME (UTC)':<19}  {'FILES':>6}  LABEL")
    for s in summaries:
        step = "-" if s.step is None else str(s.step)
        when = s.time[:19].replace("T", " ")
        print(f"{s.id:<12}  {step:>4}  {s.kind:<11}  {when:<19}  {s.files:>6}  {s.label or ''}")
    return 0


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


def _plan_json(plan: Plan) -> dict[str, object]:
    return {
        "target": plan.target.id,
        "changes": [{"op": c.op.value, "path": c.path} for c in plan.changes],
    }


def _result_json(result: Result) -> dict[str, object]:
    return {
        "target": result.target,
        "restored": result.restored,
        "not_restored": result.not_restored,
        "error": result.error,
        "rolled_back": result.rolled_back,
        "pre_restore": result.pre_restore,
    }


def _cmd_plan(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        plan = ws.plan_restore(ws.load(args.ref))
    if args.json:
        _emit_json(_plan_json(plan))
    else:
        _print_plan(plan)
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        plan = ws.plan_restore(ws.load(args.ref))
        if args.dry_run:
            if args.json:
                _emit_json(_plan_json(plan))
            else:
                _print_plan(plan)
            return 0
        if plan.changes and not args.yes and not args.json and sys.stdin.isatty():
            _print_plan(plan)
            answer = input(f"restore {len(plan.changes)} changes? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("nothing was changed")
                return 1
        result = ws.apply(plan)
    return _report_result(args, result)


def _report_result(args: argparse.Namespace, result: Result) -> int:
    if args.json:
        _emit_json(_result_json(result))
    elif result.ok:
        print(
            f"restored {len(result.restored)} paths from snapshot {result.target}"
            + (f" (undo with: worksnap restore {result.pre_restore})" if result.pre_restore else "")
        )
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
        _emit_json({"ok": not problems, "problems": problems})
    else:
        for problem in problems:
            print(problem)
        if not problems:
            print("all objects present and intact")
    return 1 if problems else 0


def _cmd_recover(args: argparse.Namespace) -> int:
    with _open(args) as ws:
        result = ws.recover()
    if result is None:
        if args.json:
            _emit_json({"recovered": False})
        else:
            print("no interrupted restore to recover")
        return 0
    if args.json:
        _emit_json({"recovered": True, **_result_json(result)})
    else:
        print(f"rolled back an interrupted restore ({len(result.restored)} paths)")
    return 0


_COMMANDS = {
    "snapshot": _cmd_snapshot,
    "list": _cmd_list,
    "show": _cmd_show,
    "plan": _cmd_plan,
    "restore": _cmd_restore,
    "verify": _cmd_verify,
    "recover": _cmd_recover,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
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
