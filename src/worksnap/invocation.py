"""Invocation: what one command line works on.

Its root and store (found as git finds its repository: `layout.locate`), the workspace
opened on them (in the daemon: its long-lived one), and the paths the command line
names. Shared by cli.py and restoring.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from worksnap.output import PROGRESS, warn

if TYPE_CHECKING:
    from worksnap.workspace import Workspace


GONE_CWD = (
    "the current directory no longer exists: cd to the project, or name it with an absolute "
    "--root DIR (and --store, --to, paths too)"
)
"""What a command says when it needs the current directory and a restore removed it."""


def locate(args: argparse.Namespace) -> None:
    """Finds the root and store the command works on (`layout.locate`), once."""
    from worksnap.layout import locate as find

    if args.location is None:
        # An absolute `--root` needs no current directory (a restore may have removed it).
        given = args.root is not None and os.path.isabs(args.root)
        cwd = args.root if given and not _cwd_exists() else os.getcwd()
        args.location = find(cwd, root=args.root, store=args.store)
        args.root = args.location.root
        args.store = args.location.store


@contextlib.contextmanager
def open_workspace(args: argparse.Namespace, **options: Any) -> Iterator[Workspace]:
    """The workspace a command works on (in the daemon: its long-lived one)."""
    progress = PROGRESS.reporter(sys.stderr.isatty() and not args.json)
    try:
        if args.pool is not None:
            options.update(force=args.force, session=args.session, progress=progress)
            yield _noting_recovery(args, args.pool.open(args.root, args.store, options))
        else:
            from worksnap.workspace import Workspace

            with Workspace(
                args.root,
                store=args.store,
                force=args.force,
                session=args.session,
                progress=progress,
                seams=args.seams,
                **options,
            ) as ws:
                yield _noting_recovery(args, ws)
    finally:
        PROGRESS.clear()


def _noting_recovery(args: argparse.Namespace, ws: Workspace) -> Workspace:
    """Says a restore was interrupted, for the commands that neither recover nor refuse."""
    if args.command not in _RECOVERING and (pending := ws.recovery_pending()) is not None:
        warn(f"warning: {pending}")
    return ws


_RECOVERING = {"snapshot", "restore", "rewind", "undo", "redo", "recover", "plan", "run", "hook"}
"""Commands that recover first, or refuse to preview a half-restored tree."""


def command_paths(args: argparse.Namespace, paths: Sequence[str]) -> list[str]:
    """Paths from the command line, absolute or as the workspace reads them.

    With a root found from the current directory, relative to that directory (as git
    reads them); with `--root`, relative to the root (as always).
    """
    found = args.location is not None and args.location.found != "option"
    cwd = os.getcwd() if found else ""
    inside = found and (cwd == args.root or cwd.startswith(args.root.rstrip("/") + "/"))
    # An empty one stays empty, for the workspace to refuse: it is no path (an unset variable).
    return [os.path.join(cwd, p) if inside and p and not os.path.isabs(p) else p for p in paths]


def option_prefix(args: argparse.Namespace) -> str:
    """`--root R --store S --session N `: what a command we suggest needs to reach the same.

    `--root` when the command line named it, or the current directory is gone (a restore
    removed it: nothing is found from there); `--store` when named; `--session` unless
    the default one, which the environment names too. (A review followed "undo it
    with: worksnap undo" after `--session agent rewind`, and undid the default session.)
    """
    words = []
    if args.location is not None and (args.location.found == "option" or not _cwd_exists()):
        words += ["--root", args.root]
    if args.given_store:
        words += ["--store", args.store]
    if args.session != "default" or os.environ.get("WORKSNAP_SESSION") not in (None, "", "default"):
        words += ["--session", args.session]
    return "".join(f"{shlex.quote(w)} " for w in words)


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True
