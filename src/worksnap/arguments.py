"""Arguments: the command line's grammar, from `worksnap --help` down to each option's type.

Parsing only: what each command does is in cli.py. Imports nothing of the engine,
so `--help`, `--version` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
from collections.abc import Sequence
from typing import Any

from worksnap import cmdpaths, remotecli

VERSION = "0.1.0"
"""What `worksnap --version` prints (the package's version, kept equal by a test)."""

EXAMPLES = """\
examples:
  worksnap snapshot --step 3 --label "before refactor"
  worksnap status                 # root, store, and what changed since the latest snapshot
  worksnap list
  worksnap plan latest            # what a restore of the newest snapshot would change
  worksnap restore step:3 --yes   # rewind to the snapshot of step 3
  worksnap plan 3fa9c2 --json     # machine-readable preview (an id prefix of 4+ characters)
  worksnap verify

Run it anywhere in a project: like git, it finds the project's root and store by walking
up from the current directory (`worksnap status` shows what it found).
refs: a full id, a unique id prefix (4+ characters), `latest` (the newest snapshot not
taken automatically), `latest~N` (N before it), or `step:N` (newest snapshot of step N).
exit codes: 0 success, 1 the operation ran and failed, 2 bad usage or bad input.
"""

REFS = "a ref: an id or a unique prefix of 4+ characters, latest, latest~N, or step:N"

SHELLS = ("bash", "zsh", "fish")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line and exit 2, like every other error
        self.exit(2, f"worksnap: error: {message} (see `worksnap --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser (also used to render `--help` and shell completions)."""
    parser = _Parser(
        prog="worksnap",
        description="Snapshot the whole working directory at every step, "
        "preview what a rewind changes, and rewind to any step.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"worksnap {VERSION}")
    _add_global_options(parser, here=True)
    parser.set_defaults(pool=None, seams=None, paths_after=None, location=None)
    common = _Parser(add_help=False)
    _add_global_options(common, here=False)
    commands = parser.add_subparsers(  # (none: `parse` shows the usage and the commands)
        dest="command", metavar="COMMAND", parser_class=_Parser
    )

    def command(name: str, summary: str, description: str, example: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog=example,
            parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    snap = command(
        "snapshot",
        "capture the whole workspace",
        "Capture the whole workspace as a new snapshot and print its id. Files over the "
        "store's size cap (2 MiB unless set with `worksnap config max-file-bytes`) are "
        "left out and named on stderr.",
        "example: worksnap snapshot --step 4 --kind step --label 'add parser'",
    )
    snap.add_argument("--step", type=_natural, help="agent step number")
    snap.add_argument(
        "--kind",
        default="manual",
        help="kind of snapshot, a word (default: manual; worksnap's own kinds are refused)",
    )
    snap.add_argument(
        "-m", "--label", help="a short label, as git's -m (first line kept, at most 200 bytes)"
    )
    snap.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="PATH",
        help="never capture nor touch PATH, or what a .gitignore-style pattern with * ? [ "
        "matches, or NAME/ (every directory so named) (repeatable; SQLite's -wal, -shm, "
        "-journal files go with it)",
    )
    _add_meta_options(snap)
    snap.add_argument(
        "--max-file-bytes",
        metavar="SIZE",
        help="set this store's size cap (e.g. 64M; remembered for later snapshots): "
        "larger files are listed as large, not stored",
    )

    command(
        "status",
        "root, store, session, daemon, and what changed since the latest snapshot",
        "Show where worksnap works from here (root, store, session), how many snapshots "
        "the store holds and their size, whether a daemon serves it, large files left "
        "unprotected, and what changed since `latest`, like `git status --short` (its paths "
        "relative to the root, from any directory of the project). Changes nothing, and "
        "creates no store.",
        "example: worksnap status --json",
    )

    listing = command(
        "list",
        "list snapshots, newest first",
        "List this session's snapshots, newest first: id, step, kind, age, paths changed "
        "since the previous snapshot of the session that was not taken automatically, and "
        "label. Snapshots worksnap took on its own (pre-restore, undo, redo, run-*) are "
        "shown dimmed on a terminal; pinned ones are marked `*`.",
        "examples: worksnap list --limit 5\n          worksnap list --kind step --json",
    )
    listing.add_argument("--all", action="store_true", help="every session, not just this one")
    listing.add_argument("--limit", type=_natural, metavar="N", help="at most N snapshots")
    listing.add_argument("--kind", metavar="K", help="only snapshots of kind K")

    show = command(
        "show",
        "show one snapshot and its files",
        "Show one snapshot: kind, step, time, label, session, pin state, meta, attachments, "
        "what it left out, and its files (mode, type, size, path; only below PATHs if "
        "given). --json prints the manifest as stored.",
        "examples: worksnap show latest\n          worksnap show step:3 src/",
    )
    show.add_argument("ref", help=REFS)
    show.add_argument(
        "paths", nargs="*", default=(), metavar="PATH", help="only these paths and below"
    )

    cat = command(
        "cat",
        "print a file as a snapshot holds it",
        "Write the bytes of PATH as snapshot REF captured it to stdout (a symlink: its "
        "target). Exit 2 if the snapshot does not hold that file.",
        "example: worksnap cat step:3 src/app.py > /tmp/app.py",
    )
    cat.add_argument("ref", help=REFS)
    cat.add_argument("path", metavar="PATH")

    plan = command(
        "plan",
        "preview what restoring a snapshot would change",
        "Preview what restoring REF would change: M modified (restored), A added since "
        "(removed), D deleted since (recreated); and large files a restore cannot bring "
        "back (not protected). Changes nothing.",
        "example: worksnap plan step:3 src/",
    )
    plan.add_argument("ref", help=REFS)
    plan.add_argument("paths", nargs="*", default=(), metavar="PATH", help="only these paths")

    restore = command(
        "restore",
        "rewind the workspace to a snapshot",
        "Rewind the workspace to REF: shows the plan and asks on a terminal. A pre-restore "
        "snapshot is taken first (`worksnap undo` reverses the restore), and a failed "
        "restore is rolled back. With --to DIR, writes the snapshot into DIR instead (a "
        "new or empty directory outside the root) and touches nothing in the workspace.",
        "examples: worksnap restore latest --yes\n"
        "          worksnap restore step:3 src/app.py docs/ --yes   (only those paths)\n"
        "          worksnap restore step:3 --to /tmp/step3          (a copy elsewhere)",
    )
    restore.add_argument("ref", help=REFS)
    restore.add_argument(
        "paths", nargs="*", default=(), metavar="PATH", help="restore only these paths"
    )
    restore.add_argument("--to", metavar="DIR", help="write into DIR, not over the workspace")
    _add_confirm_options(restore)

    verify = command(
        "verify",
        "check that stored objects are present and intact",
        "Check that every object REF (default: every snapshot) needs is present and "
        "matches its hash. Exit 1 when something is damaged. --repair: take the damaged "
        "objects found as not stored, so that the next snapshot stores again what is "
        "still on disk (snapshots taken before still lack them).",
        "example: worksnap verify step:3",
    )
    verify.add_argument("ref", nargs="?", help=REFS)
    verify.add_argument(
        "--remote", metavar="NAME", help="check the remote NAME instead (pull-able)"
    )
    verify.add_argument(
        "--repair", action="store_true", help="heal: the next snapshot stores damaged objects again"
    )

    recover = command(
        "recover",
        "roll back a restore that was interrupted",
        "Roll back the paths a restore that was killed part-way had touched. The tree as "
        "it is (with any edits made since) is kept first as a snapshot that `worksnap undo` "
        "brings back. snapshot, restore, rewind, undo and redo do this on their own when "
        "they find one; previews (plan, --dry-run) refuse to show a half-restored tree.",
        "example: worksnap recover --dry-run",
    )
    recover.add_argument(
        "--discard",
        action="store_true",
        help="roll nothing back: keep the tree as it is (stored as a snapshot first) and "
        "drop the journal (for a journal that names a snapshot that is gone)",
    )
    _add_confirm_options(recover)

    rewind = command(
        "rewind",
        "restore the newest snapshot of step N",
        "Restore the newest snapshot (or checkpoint) of this session taken at step N, "
        "with every guarantee of restore.",
        "example: worksnap rewind 3 --yes",
    )
    rewind.add_argument("step", type=_natural)
    _add_confirm_options(rewind)
    undo = command(
        "undo",
        "undo the last restore, or discard edits since the last snapshot",
        "Restore the newest snapshot of this session whose state differs from the current "
        "one: right after a restore, this reverses it. Repeated, it walks further back "
        "(the plan names the snapshot it goes to).",
        "example: worksnap undo --dry-run",
    )
    _add_confirm_options(undo)
    redo = command(
        "redo",
        "re-apply what the last undo undid",
        "Re-apply what the last undo undid. A new snapshot clears redo.",
        "example: worksnap redo --yes",
    )
    _add_confirm_options(redo)

    begin = command(
        "begin",
        "open a light checkpoint for a turn (no tree scan)",
        "Open a checkpoint for a turn; `worksnap capture PATH...` then records "
        "before-images of the files the turn is about to change.",
        'example: worksnap begin --step 5 --label "$(head -1 prompt.txt)"',
    )
    begin.add_argument("--step", type=_natural, help="agent step number")
    begin.add_argument(
        "-m", "--label", help="a short label, as git's -m (first line kept, at most 200 bytes)"
    )
    _add_meta_options(begin)
    capture = command(
        "capture",
        "record files' before-images in the open checkpoint",
        "Record each PATH's current state in the open checkpoint; the first capture of a "
        "path in a checkpoint wins; a missing file is recorded as absent. Name the path a "
        "tool writes: a symlink is followed to where the write goes (refused outside the "
        "root); an ignored path is listed as ignored, as no rewind touches it.",
        "example: worksnap capture src/app.py README.md",
    )
    capture.add_argument("paths", nargs="+", metavar="PATH")

    attachment = command(
        "attachment",
        "print a snapshot's attachment",
        "Write the bytes of attachment NAME of snapshot REF to stdout, raw (also with "
        "--json: the one command whose output is not a JSON document).",
        "example: worksnap attachment step:7 messages.json > messages.json",
    )
    attachment.add_argument("ref", help=REFS)
    attachment.add_argument("name")

    gc = command(
        "gc",
        "drop old snapshots and sweep unused objects",
        "Drop snapshots by retention and delete objects no snapshot needs. Retention "
        "counts, per session, the snapshots people and runtimes took; the ones worksnap "
        "took on its own (pre-restore, undo, redo, run-*) go first, except the N newest "
        "undo can go to (--keep-last N) and what redo needs. Pinned snapshots and the "
        "newest of each session are kept. "
        "Without options, uses the retention in the store's config.json.",
        "examples: worksnap gc --keep-last 50 --max-age 30d --max-bytes 2G --dry-run\n"
        "          worksnap gc --keep-last 0 --all      (everything but pinned snapshots)",
    )
    gc.add_argument("--keep-last", type=_natural, metavar="N", help="keep N newest per session")
    gc.add_argument("--max-age", metavar="DURATION", help="drop older than e.g. 90m, 12h, 30d")
    gc.add_argument("--max-bytes", metavar="SIZE", help="keep the newest that fit, e.g. 5G")
    gc.add_argument(
        "--drop-session", metavar="NAME", help="drop a whole session (pinned snapshots stay)"
    )
    gc.add_argument(
        "--all", action="store_true", help="with --keep-last 0: also each session's newest"
    )
    gc.add_argument("--dry-run", action="store_true", help="show what would go, remove nothing")
    gc.add_argument("--drop", action="append", default=[], metavar="REF",
                    help="drop this snapshot too, pinned or damaged; never one an interrupted "
                    "restore needs (repeatable)")  # fmt: skip
    pin = command(
        "pin", "keep a snapshot through gc", "Keep snapshot REF through every gc.",
        "example: worksnap pin step:3",
    )  # fmt: skip
    pin.add_argument("ref", help=REFS)
    unpin = command(
        "unpin", "let gc drop a pinned snapshot again", "Let gc drop snapshot REF again.",
        "example: worksnap unpin step:3",
    )  # fmt: skip
    unpin.add_argument("ref", help=REFS)
    command(
        "du", "store size per session",
        "Snapshots and the bytes of the objects they reference, per session, and the "
        "store's size on disk.",
        "example: worksnap du --json",
    )  # fmt: skip
    config = command(
        "config",
        "show or change this store's settings",
        "Without KEY, show every setting; with KEY, show one; with KEY VALUE, set it in "
        "the store's config.json. Keys: max-file-bytes (the size cap of new snapshots, "
        "e.g. 64M), daemon (true: every command that finds no daemon starts one; false: "
        "never; none: by itself where it pays, see `worksnap daemon --help`), keep-last, "
        "max-age, max-bytes (the retention applied after each snapshot and by gc; `none` "
        "clears one), hooks-block (true: a failing `worksnap hook` blocks the agent's "
        "turn). `config exclude [add|remove RULE...]`: paths and .gitignore-style patterns "
        "no snapshot captures and no restore touches.",
        "examples: worksnap config max-file-bytes 64M\n          worksnap config --json\n"
        "          worksnap config exclude add 'agent-trajectory.db' '.agent-*.json'",
    )
    config.add_argument("key", nargs="?", metavar="KEY")
    config.add_argument("value", nargs="?", metavar="VALUE")
    config.add_argument("more", nargs="*", default=(), metavar="RULE", help=argparse.SUPPRESS)
    command(
        "rebind",
        "bind the store to the root after the project moved",
        "Rebind the store found at the root (or --store) to the root, after the project "
        "directory was moved or copied.",
        "example: worksnap --root ~/src/newplace rebind",
    )
    upgrade = command(
        "upgrade",
        "migrate a store written by an older worksnap to the current format",
        "Turn each snapshot of a format 1 store (one manifest file per snapshot) into "
        "per-directory trees and a small record (format 2), in place. Safe to interrupt: "
        "the next command finishes it. Every command that writes does this first on its "
        "own; a damaged snapshot is left as it is and reported.",
        "example: worksnap upgrade --dry-run",
    )
    upgrade.add_argument("--dry-run", action="store_true", help="show what would be migrated")

    diff = command(
        "diff",
        "show what changed since a snapshot, as a git patch",
        "A patch from REF (default: latest) to REF2 (default: the workspace now), in git's "
        "format (`git apply` takes it): mode changes, renames, added and deleted files; "
        "binary files are only named unless --binary. Only below PATHs if given: after --, "
        "or, as git reads them, after the words that name snapshots (a word that is both a "
        "ref and a path is refused: put the paths after --).",
        "examples: worksnap diff step:2 --stat\n"
        "          worksnap diff src/main.py               (since latest, in one file)\n"
        "          worksnap diff latest~1 latest -- src/   (between two snapshots, in src/)\n"
        "          worksnap diff step:2 | git apply -R      (take back the changes)",
    )
    diff.add_argument("ref", nargs="?", help=REFS + " (default: latest)")
    diff.add_argument("ref2", nargs="?", help="a second ref (default: the workspace now)")
    diff.add_argument("paths", nargs="*", default=(), metavar="PATH", help="only below these paths")
    style = diff.add_mutually_exclusive_group()
    style.add_argument("--stat", action="store_true", help="a histogram per file")
    style.add_argument("--numstat", action="store_true", help="added, deleted, path per line")
    diff.add_argument("--binary", action="store_true", help="binary changes as GIT binary patch")

    run = command(
        "run",
        "snapshot before and after a command",
        "Snapshot, run CMD, snapshot again; with --every, also snapshot while it runs "
        "whenever the tree has changed and settled. Exits with CMD's status (127: not "
        "found, 126: not executable, with no snapshot taken). With --json, CMD's own "
        "stdout goes to stderr and one JSON document is printed when it ends.",
        "example: worksnap run --every 30 -- make test",
    )
    run.add_argument("--every", type=_seconds, metavar="SECONDS", help="check every SECONDS")
    run.add_argument("--step", type=_natural, help="agent step number for the snapshots")
    run.add_argument(
        "--snapshots", action="store_true",
        help="take them as numbered steps of the session (0 before, 1, 2, ... as the tree "
        "settles, and after), which `rewind N` and `run --rewind N` name",
    )  # fmt: skip
    run.add_argument(
        "--rewind", type=_natural, metavar="N",
        help="first rewind the session to step N (preview and question on a terminal)",
    )  # fmt: skip
    run.add_argument("--yes", "-y", action="store_true", help="do not ask before --rewind")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...")

    _add_agent_commands(command)
    remotecli.add_commands(command)

    daemon = command(
        "daemon",
        "keep the workspace watched in the background, for fast commands",
        "start: run a background process that keeps this store's workspace watched "
        "(inotify) and in memory; every later worksnap command for the store runs in it, "
        "so a snapshot reads only what changed. stop: stop it. status: is one running "
        "(exit 1 if not), its audits, and whether commands start one by themselves and "
        "why. serve: the same in the foreground. It stops by itself after --idle seconds "
        "without a command. Commands start one by themselves on Linux for trees of about "
        "2,000 files or more on ext2/3/4, xfs, btrfs, tmpfs, overlay, f2fs or zfs "
        "(`worksnap config daemon false` turns that off, true forces it). A watcher cannot "
        "see writes through a shared mmap, writes through a hard link from outside the "
        "tree (or from an ignored directory) made after it last looked at the file, nor "
        "changes by other hosts on NFS, SMB, FUSE or 9p; its idle audit finds such misses "
        "and rebuilds (docs/performance.md).",
        "examples: worksnap daemon start\n"
        "          worksnap daemon status --json\n"
        "          WORKSNAP_NO_DAEMON=1 worksnap snapshot   (bypass it once)",
    )
    daemon.add_argument("action", choices=("start", "stop", "status", "serve"))
    daemon.add_argument(
        "--idle",
        type=_seconds,
        default=1800.0,
        metavar="SECONDS",
        help="stop after SECONDS without a command (default: 1800)",
    )

    completion = command(
        "completion",
        "print a shell completion script",
        "Print the completion script for SHELL; load it from your shell's startup file.",
        "examples: worksnap completion bash > ~/.worksnap-completion.bash\n"
        "          source <(worksnap completion bash)            (in ~/.bashrc)\n"
        "          worksnap completion zsh > ~/.zfunc/_worksnap   (a dir in $fpath)\n"
        "          worksnap completion fish > ~/.config/fish/completions/worksnap.fish",
    )
    completion.add_argument("shell", choices=SHELLS)
    return parser


def _add_agent_commands(command: Any) -> None:
    """`hook`, `hooks` and `mcp`: worksnap driven by an agent."""
    hook = command(
        "hook",
        "take the snapshot an agent's hook event asks for (reads the event on stdin)",
        "Read one hook event as JSON on stdin and act on it: Claude Code's "
        "UserPromptSubmit takes a step snapshot (the session is the agent's session), "
        "PostToolUse of Write, Edit, MultiEdit, NotebookEdit or Bash a tool snapshot in "
        "the same step, SessionStart makes the store. Prints nothing on stdout; a failure "
        "is one line on stderr and exit 0 (exit 2 with `config hooks-block true`).",
        "example: worksnap hooks install claude-code   (writes this into the settings)",
    )
    hook.add_argument("agent", choices=("claude-code",))
    hook.add_argument("--event", help=argparse.SUPPRESS)
    hooks = command(
        "hooks",
        "add worksnap's hooks to an agent's settings, or remove them",
        "install: add `worksnap hook claude-code` for SessionStart, UserPromptSubmit and "
        "PostToolUse to .claude/settings.json of the project (--project, the default) or "
        "to ~/.claude/settings.json (--user), keeping every other setting; again, it "
        "changes nothing. uninstall: remove exactly those entries.",
        "examples: worksnap hooks install claude-code\n"
        "          worksnap hooks uninstall claude-code --user",
    )
    hooks.add_argument("action", choices=("install", "uninstall"))
    hooks.add_argument("agent", choices=("claude-code",))
    where = hooks.add_mutually_exclusive_group()
    where.add_argument("--project", action="store_true", help="<root>/.claude (the default)")
    where.add_argument("--user", action="store_true", help="~/.claude/settings.json")
    mcp = command(
        "mcp",
        "serve this workspace to an agent over the Model Context Protocol (stdio)",
        "Run an MCP server on stdin/stdout with tools snapshot, list, plan, restore, "
        "rewind, undo, redo, diff, show, cat and status; their results are the documents "
        "`--json` prints. Needs the SDK: pip install 'worksnap[mcp]'.",
        "example: claude mcp add worksnap -- worksnap mcp",
    )
    mcp.add_argument(
        "--watch", action="store_true",
        help="keep the tree watched (inotify, Linux): snapshots read only what changed",
    )  # fmt: skip


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parses a command line; the paths after `--` of `diff` go to `paths_after`.

    PATHs are read as git reads them (`cmdpaths`): everything after `--` is one.

    Raises:
        SystemExit: bad usage (exit 2, one line), `--help` or `--version` (exit 0).
    """
    words, paths_after, dashdash = cmdpaths.split(list(argv))
    parser = _parser()
    args, extra = parser.parse_known_args(words)
    if args.command is None:  # `worksnap` alone: what it can do (git shows its usage too)
        parser.exit(2, parser.format_help())
    cmdpaths.take_paths(parser, args, extra, dashdash=dashdash)
    args.paths_after = paths_after
    if args.session is None:  # the environment of this command (a daemon serves many)
        args.session = os.environ.get("WORKSNAP_SESSION") or "default"
    return args


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The parser `parse` uses, built once.

    A daemon parses every command it runs, and a build costs 4 ms. Parsing changes
    nothing in it, so threads may share it.
    """
    return build_parser()


def _add_global_options(parser: argparse.ArgumentParser, *, here: bool) -> None:
    """The options every command takes, before or after its name.

    After the name (`here` False) they default to nothing, so that one given before the
    name is not overwritten.
    """

    def default(value: object) -> object:
        return value if here else argparse.SUPPRESS

    parser.add_argument(
        "--root",
        default=default(None),
        metavar="DIR",
        help="workspace root (default: found from the current directory, as git does)",
    )
    parser.add_argument(
        "--store",
        default=default(None),
        metavar="DIR",
        help="store directory (default: the root's store; in a git work tree "
        "<git-dir>/worksnap, else ROOT/.worksnap; or $WORKSNAP_STORE)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="machine-readable output on stdout",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        default=default(False),
        help="allow / or the home directory as the root",
    )
    parser.add_argument(
        "--session",
        default=default(None),  # $WORKSNAP_SESSION, read by `parse` (the parser is kept)
        help="session to work in (default: $WORKSNAP_SESSION or 'default')",
    )


def _add_confirm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


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


def _seconds(text: str) -> float:
    """A time above 0 seconds.

    `run --every 0` (or below) polled without a pause, a core for hours; `daemon --idle
    0` started a daemon that stopped at its first look, `nan` one that never stopped.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a time above 0 seconds")
    return value
