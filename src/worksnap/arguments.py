"""Arguments: the command line's grammar, from `worksnap --help` down to each option's type.

Parsing only: what each command does is in cli.py. Imports nothing of the engine,
so `--help` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

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
    parser.add_argument(
        "--session",
        default=os.environ.get("WORKSNAP_SESSION") or "default",
        help="session to work in (default: $WORKSNAP_SESSION or 'default')",
    )
    parser.set_defaults(pool=None, seams=None)
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
    _add_meta_options(snap)
    snap.add_argument(
        "--max-file-bytes",
        type=_natural,
        metavar="N",
        help="files larger than N bytes are listed as large, not stored (default: 2 MiB)",
    )

    listing = commands.add_parser(
        "list",
        help="list snapshots, newest first",
        description="List this session's snapshots, newest first: step, kind, age, "
        "paths changed since the previous snapshot, label.",
    )
    listing.add_argument("--all", action="store_true", help="every session, not just this one")

    show = commands.add_parser(
        "show", help="show one snapshot", description="Show one snapshot (--json: the manifest)."
    )
    show.add_argument("ref")

    plan = commands.add_parser(
        "plan",
        help="preview what restoring a snapshot would change",
        description="Preview what restoring REF would change: M modified (restored), "
        "A added since (removed), D deleted since (recreated). Changes nothing.",
        epilog="example: worksnap plan step:3 src/",
    )
    plan.add_argument("ref")
    plan.add_argument("paths", nargs="*", metavar="PATH", help="only these paths")

    restore = commands.add_parser(
        "restore",
        help="rewind the workspace to a snapshot",
        description="Rewind the workspace to REF. A pre-restore snapshot is taken first, "
        "and a failed restore is rolled back.",
        epilog="examples: worksnap restore latest --yes\n"
        "          worksnap restore step:3 src/app.py docs/ --yes   (only those paths)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    restore.add_argument("ref")
    restore.add_argument("paths", nargs="*", metavar="PATH", help="restore only these paths")
    restore.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    restore.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    verify = commands.add_parser(
        "verify",
        help="check that stored objects are present and intact",
        description="Check that every object REF (default: every snapshot) needs is present "
        "and matches its hash. Exit 1 when something is damaged.",
    )
    verify.add_argument("ref", nargs="?")

    recover = commands.add_parser(
        "recover",
        help="roll back a restore that was interrupted",
        description="Roll back the paths a restore that was killed part-way had touched. "
        "The tree as it is (with any edits made since) is kept first as a snapshot that "
        "`worksnap undo` brings back. snapshot, restore, rewind, undo and redo do this on "
        "their own when they find one; plan refuses to preview a half-restored tree.",
    )
    recover.add_argument(
        "--discard",
        action="store_true",
        help="roll nothing back: keep the tree as it is (stored as a snapshot first) and "
        "drop the journal (for a journal that names a snapshot that is gone)",
    )

    rewind = commands.add_parser(
        "rewind",
        help="restore the newest snapshot of step N",
        description="Restore the newest snapshot (or checkpoint) of this session taken at "
        "step N, with every guarantee of restore.",
        epilog="example: worksnap rewind 3 --yes",
    )
    rewind.add_argument("step", type=_natural)
    rewind.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    commands.add_parser(
        "undo",
        help="undo the last restore, or discard edits since the last snapshot",
        description="Restore the newest snapshot of this session whose state differs from "
        "the current one. Right after a restore this reverses it. Repeat to walk back.",
    )
    commands.add_parser(
        "redo",
        help="re-apply what the last undo undid",
        description="Re-apply what the last undo undid. A new snapshot clears redo.",
    )

    begin = commands.add_parser(
        "begin",
        help="open a light checkpoint for a turn (no tree scan)",
        description="Open a checkpoint for a turn; `worksnap capture PATH...` then records "
        "before-images of the files the turn is about to change.",
        epilog='example: worksnap begin --step 5 --label "$(head -1 prompt.txt)"',
    )
    begin.add_argument("--step", type=_natural, help="agent step number")
    begin.add_argument("--label", help="a short label (first line kept, at most 200 bytes)")
    _add_meta_options(begin)
    capture = commands.add_parser(
        "capture",
        help="record files' before-images in the open checkpoint",
        description="Record each PATH's current state in the open checkpoint; the first "
        "capture of a path in a checkpoint wins; a missing file is recorded as absent.",
        epilog="example: worksnap capture src/app.py README.md",
    )
    capture.add_argument("paths", nargs="+", metavar="PATH")

    attachment = commands.add_parser(
        "attachment",
        help="print a snapshot's attachment",
        description="Write the bytes of attachment NAME of snapshot REF to stdout.",
    )
    attachment.add_argument("ref")
    attachment.add_argument("name")

    gc = commands.add_parser(
        "gc",
        help="drop old snapshots and sweep unused objects",
        description="Drop snapshots by retention (per session; pinned snapshots and the "
        "newest of each session are kept) and delete objects no snapshot needs. Without "
        "options, uses the retention in STORE/config.json.",
        epilog="example: worksnap gc --keep-last 50 --max-age 30d --max-bytes 2G",
    )
    gc.add_argument("--keep-last", type=_natural, metavar="N", help="keep N newest per session")
    gc.add_argument("--max-age", metavar="DURATION", help="drop older than e.g. 90m, 12h, 30d")
    gc.add_argument("--max-bytes", metavar="SIZE", help="keep the newest that fit, e.g. 5G")
    gc.add_argument(
        "--drop-session", metavar="NAME", help="drop a whole session (pinned snapshots stay)"
    )
    pin = commands.add_parser("pin", help="keep a snapshot through gc")
    pin.add_argument("ref")
    unpin = commands.add_parser("unpin", help="let gc drop a pinned snapshot again")
    unpin.add_argument("ref")
    commands.add_parser("du", help="store size per session")
    commands.add_parser(
        "rebind",
        help="bind the store to --root after the project moved",
        description="Rebind the store found at ROOT (or --store) to ROOT, after the "
        "project directory was moved or copied.",
        epilog="example: worksnap --root ~/src/newplace rebind",
    )

    diff = commands.add_parser(
        "diff",
        help="show what changed since a snapshot",
        description="Unified diff from REF to REF2 (default: the workspace now). Binary "
        "files are noted, renames detected.",
        epilog="example: worksnap diff step:2 --stat",
    )
    diff.add_argument("ref")
    diff.add_argument("ref2", nargs="?")
    style = diff.add_mutually_exclusive_group()
    style.add_argument("--stat", action="store_true", help="a histogram per file")
    style.add_argument("--numstat", action="store_true", help="added, deleted, path per line")

    run = commands.add_parser(
        "run",
        help="snapshot before and after a command",
        description="Snapshot, run CMD, snapshot again; with --every, also snapshot while "
        "it runs whenever the tree has changed and settled. Exits with CMD's status.",
        epilog="example: worksnap run --every 30 -- make test",
    )
    run.add_argument("--every", type=float, metavar="SECONDS", help="check every SECONDS")
    run.add_argument("--step", type=_natural, help="agent step number for the snapshots")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")

    daemon = commands.add_parser(
        "daemon",
        help="keep the workspace watched in the background, for fast commands",
        description="start: run a background process that keeps this store's workspace "
        "watched (inotify) and in memory; every later worksnap command for the store runs "
        "in it, so a snapshot reads only what changed. stop: stop it. status: is one "
        "running (exit 1 if not). serve: the same in the foreground. It stops by itself "
        "after --idle seconds without a command. Leave it off for trees changed through "
        "shared mmap writes or on network and FUSE file systems, which raise no events "
        "(docs/performance.md).",
        epilog="examples: worksnap daemon start\n"
        "          worksnap daemon status --json\n"
        "          WORKSNAP_NO_DAEMON=1 worksnap snapshot   (bypass it once)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    daemon.add_argument("action", choices=("start", "stop", "status", "serve"))
    daemon.add_argument(
        "--idle",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="stop after SECONDS without a command (default: 1800)",
    )
    return parser


def _add_meta_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--meta", action="append", default=[], metavar="KEY=VALUE",
        help="small metadata to keep with it (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--attach", action="append", default=[], metavar="NAME=FILE",
        help="store FILE as attachment NAME (repeatable)",
    )  # fmt: skip


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value
