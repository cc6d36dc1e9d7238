"""The commands that reach a remote store: `remote add|list|remove|gc`, `push`, `pull`.

Also `verify --remote` (its grammar is verify's, in arguments.py).

Grammar and rendering both live here (arguments.py calls `add_commands`). A remote is
a name in the store's config.json bound to a URL (`config.with_remote`); credentials
come from the AWS environment and files, never from the command line or the config.

Locks: `pull` writes objects and records into the store under the exclusive store
lock, as any writer, and never touches the tree; `push` reads the store under the
shared lock (a local gc waits for it). `remote gc` and `verify --remote` read nothing
local. A pulled snapshot is restored with `restore` or `rewind` after the pull:
`restore` takes no `NAME:REF` (docs/remote.md).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from worksnap.invocation import open_workspace
from worksnap.output import PROGRESS, emit_json, human_bytes, plural, printable, say, warn

if TYPE_CHECKING:
    from worksnap.config import Config
    from worksnap.remote.gc import GcResult, VerifyReport
    from worksnap.remote.repository import Repository
    from worksnap.remote.sync import Result
    from worksnap.remote.transport import Transport
    from worksnap.workspace import Workspace

View = dict[str, Any]

REMOTE_ACTIONS = ("add", "list", "remove", "gc")


# -- grammar ---------------------------------------------------------------------


def add_commands(command: Callable[[str, str, str, str], argparse.ArgumentParser]) -> None:
    """`remote`, `push` and `pull` (`command` makes one with the global options)."""
    remote = command(
        "remote",
        "name remote stores (S3, a shared disk) to push to and pull from; their gc",
        "add NAME URL: remember a remote in this store's config.json (no credential is "
        "ever written: s3:// takes endpoint, region and keys from AWS_ENDPOINT_URL, "
        "AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the AWS "
        "files). It first checks that the store enforces conditional writes, and "
        "refuses one that does not. list: the remotes (-v: with URLs). remove NAME: "
        "forget one (nothing on it is touched). gc NAME: drop snapshots by retention "
        "from the remote and delete what no snapshot needs, nothing younger than "
        "--grace (pushes may run meanwhile; docs/remote.md).",
        "examples: worksnap remote add origin s3://my-bucket/agents/project\n"
        "          worksnap remote add shared file:///mnt/team/worksnap\n"
        "          worksnap remote list -v\n"
        "          worksnap remote gc origin --keep-last 100 --dry-run",
    )
    remote.add_argument("action", choices=REMOTE_ACTIONS)
    remote.add_argument("name", nargs="?", metavar="NAME")
    remote.add_argument("url", nargs="?", metavar="URL", help="s3://bucket/prefix or file:///path")
    remote.add_argument("-v", "--verbose", action="store_true", help="list: show the URLs")
    remote.add_argument(
        "--keep-last", type=_count, metavar="N", help="gc: keep N newest per session"
    )
    remote.add_argument("--max-age", metavar="DURATION", help="gc: drop older than e.g. 30d")
    remote.add_argument("--max-bytes", metavar="SIZE", help="gc: keep the newest that fit, e.g. 5G")
    remote.add_argument(
        "--grace", metavar="DURATION", default="1h",
        help="gc: delete nothing younger (default and least: 1h, what pushes count on)",
    )  # fmt: skip
    remote.add_argument("--dry-run", action="store_true", help="gc: count, delete nothing")

    push = command(
        "push",
        "send snapshots and the objects they need to a remote",
        "Upload REFs of this session (default: every snapshot of the session the remote "
        "lacks, but those its `remote gc` retention dropped) with every object they need "
        "that the remote lacks, then list them in the "
        "session's ref on the remote. NAME may be left out when one remote is set, or "
        "one is called origin. Any number of machines may push to one remote at once.",
        "examples: worksnap push\n"
        "          worksnap push origin --session agent-7\n"
        "          worksnap push origin latest step:3",
    )
    push.add_argument(
        "words", nargs="*", default=(), metavar="[NAME] REF",
        help="the remote, then refs (an id, a prefix, latest, latest~N, step:N)",
    )  # fmt: skip
    pull = command(
        "pull",
        "bring a remote's snapshots and their objects into this store",
        "Download this session's snapshots the store lacks (or the ids given) with the "
        "objects they need, checking everything. The tree is not touched: then `list`, "
        "`plan`, `restore` and `rewind` work on them as on local ones, restoring into "
        "this store's root (the pushing machine's root is not kept as a binding). "
        "Snapshots a local `gc` dropped (its retention, --keep-last, --drop) are left "
        "out, and said so: name their ids, or give --with-dropped, to bring them back.",
        "examples: worksnap pull\n"
        "          worksnap pull origin --session agent-7 && worksnap rewind --session agent-7 3\n"
        "          worksnap pull origin 3f2a9c",
    )
    pull.add_argument(
        "words", nargs="*", default=(), metavar="[NAME] ID",
        help="the remote, then snapshot ids on it (or unique prefixes of 4+ characters)",
    )  # fmt: skip
    pull.add_argument(
        "--with-dropped", action="store_true",
        help="also the snapshots a local gc dropped (left out without ids)",
    )  # fmt: skip


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


# -- remotes by name ----------------------------------------------------------------


def _pick(config: Config, words: list[str], command: str) -> tuple[str, list[str]]:
    """The remote a command names (its first word, if a remote has that name) and the rest."""
    from worksnap.errors import InputError

    names = sorted(config.remotes)
    if words and words[0] in config.remotes:
        return words[0], words[1:]
    if len(names) == 1:
        return names[0], words
    if "origin" in config.remotes:
        return "origin", words
    if not names:
        raise InputError(f"no remote is set: first worksnap remote add NAME URL, then {command}")
    raise InputError(
        f"{plural(len(names), 'remote')} are set ({', '.join(names)}): "
        f"name one, e.g. worksnap {command} {names[0]}"
    )


def _named(config: Config, name: str) -> str:
    """The URL of the remote `name`."""
    from worksnap.errors import InputError

    if name not in config.remotes:
        shown = ", ".join(sorted(config.remotes)) or "none; add one: worksnap remote add NAME URL"
        raise InputError(f"no remote {name!r} (remotes: {shown})")
    return config.remotes[name].url


def _open(ws: Workspace, url: str, *, create: bool) -> Repository:
    from worksnap.remote import open_transport
    from worksnap.remote.repository import Repository

    paths = ws.store.paths
    transport = open_transport(url)
    check_place(ws, transport)
    return Repository.open(transport, cache=paths.remote_cache, trusted=paths.dir, create=create)


def check_empty(transport: Transport) -> None:
    """Refuses to make a repository where something else is (a repository there is used).

    A review added a folder of another tool's as a remote: a repository was made in it,
    and `remote gc` later deleted that tool's old `.tmp-*` files below it. The folder (or
    bucket prefix) must hold nothing, but what a probe left (`probe/`, `.locks/`).

    Raises:
        InputError: it holds something, and no repository.
    """
    from worksnap.errors import InputError, RemoteError
    from worksnap.remote.directory import DirectoryTransport
    from worksnap.remote.repository import CONFIG_KEY
    from worksnap.remote.transport import PROBE

    try:
        transport.get(CONFIG_KEY, max_bytes=1 << 20)
        return  # a repository: `Repository.open` checks it
    except RemoteError as exc:
        if exc.reason != "missing":
            raise
    if isinstance(transport, DirectoryTransport):
        try:  # (`lost+found`: a freshly made file system's root)
            names = sorted(set(os.listdir(transport.directory)) - {PROBE, ".locks", "lost+found"})
        except OSError:
            return  # none there: the transport says so in its own words
    else:
        others = (e.key for e in transport.list_keys() if not e.key.startswith(PROBE + "/"))
        names = list(itertools.islice(others, 1))
    if names:
        raise InputError(
            f"remote {transport.url} holds {names[0]}, and no worksnap repository: name an "
            "empty folder (or bucket prefix) for a new one"
        )


def check_place(ws: Workspace, transport: Transport) -> None:
    """Refuses a `file://` remote inside the root or the store, or holding either.

    Inside the root, every snapshot captured the remote and a restore of an older one
    deleted it (other machines' pushes with it); inside the store, the two gcs take each
    other's files for their own; holding either, the remote gc's sweep of temp files
    walks the workspace and the store. Checked at `remote add` and on every use (a link
    on the remote's path may have been turned since).

    Raises:
        InputError: it is one of those places.
    """
    from worksnap.errors import InputError
    from worksnap.paths import relative_to
    from worksnap.remote.directory import DirectoryTransport

    if not isinstance(transport, DirectoryTransport):
        return
    real = os.path.realpath(transport.directory)
    for what, place in (("root", ws.root), ("store", ws.store.paths.dir)):
        if relative_to(place, real) is not None or real == place:
            raise InputError(
                f"remote {transport.url} is inside the {what} {place}: keep a remote outside "
                "the workspace and its store (a snapshot would capture it, a restore remove it)"
            )
        if relative_to(real, place) is not None:
            raise InputError(
                f"remote {transport.url} holds the {what} {place}: keep a remote outside the "
                "workspace and its store (its gc would sweep through them)"
            )


@contextmanager
def _progress(args: argparse.Namespace, verb: str) -> Iterator[Callable[[int, int], None]]:
    """Progress of a transfer, bytes and objects, on a terminal."""
    shown = sys.stderr.isatty() and not args.json

    def report(sent: int, objects: int) -> None:
        if shown:
            PROGRESS.show(f"{verb} {human_bytes(sent)}, {plural(objects, 'object')}")

    try:
        yield report
    finally:
        PROGRESS.clear()


# -- remote add | list | remove | gc -------------------------------------------------------


def cmd_remote(args: argparse.Namespace) -> int:
    """`remote add|list|remove|gc`."""
    from worksnap.errors import InputError

    action = args.action
    if action == "list":
        if args.name is not None:
            raise InputError("remote list takes no name")
        return _list(args)
    if args.name is None:
        raise InputError(f"remote {action} needs a NAME")
    if action == "add":
        if args.url is None:
            raise InputError(
                "remote add needs a NAME and a URL (s3://bucket/prefix or file:///path)"
            )
        return _add(args)
    if args.url is not None:
        raise InputError(f"remote {action} takes a NAME only")
    return _remove(args) if action == "remove" else _gc(args)


def _list(args: argparse.Namespace) -> int:
    with open_workspace(args) as ws:
        remotes = ws.config().remotes
    if args.json:
        emit_json({"remotes": [{"name": n, "url": remotes[n].url} for n in sorted(remotes)]})
    elif args.verbose:
        say(*(f"{n}\t{remotes[n].url}" for n in sorted(remotes)))
    else:
        say(*sorted(remotes))
    return 0


def _add(args: argparse.Namespace) -> int:
    from worksnap.config import check_remote_name, with_remote
    from worksnap.errors import InputError
    from worksnap.remote import open_transport
    from worksnap.remote.repository import Repository

    name, url = args.name, args.url
    check_remote_name(name)
    with open_workspace(args) as ws:
        if name in ws.config().remotes:
            raise InputError(f"remote {name} exists already ({ws.config().remotes[name].url})")
        transport = open_transport(url)  # refuses a URL with a credential in it
        check_place(ws, transport)
        check_empty(transport)
        paths = ws.store.paths
        repo = Repository.add(transport, cache=paths.remote_cache, trusted=paths.dir)
        ws.change_config(lambda config: with_remote(config, name, transport.url))
    if args.json:
        emit_json({"name": name, "url": transport.url, "repository": repo.config.id})
    else:
        say(f"remote {name}: {transport.url} (conditional writes checked)")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from worksnap.config import without_remote

    with open_workspace(args) as ws:
        ws.change_config(lambda config: without_remote(config, args.name))
    if args.json:
        emit_json({"name": args.name, "removed": True})
    else:
        say(f"remote {args.name} removed (nothing on it was touched)")
    return 0


def _gc(args: argparse.Namespace) -> int:
    from worksnap.config import Retention, parse_duration
    from worksnap.remote.gc import collect

    policy = Retention(keep_last=args.keep_last, max_age=args.max_age, max_bytes=args.max_bytes)
    policy.check()
    from worksnap.errors import InputError
    from worksnap.remote.repository import GRACE

    grace = parse_duration(args.grace)
    if grace < GRACE:
        # A push looks again at what it relies on once it has run half of GRACE: a gc
        # deleting sooner could take a running push's packs (docs/remote.md).
        raise InputError(
            f"--grace {args.grace} is shorter than the {GRACE / 3600:g}h every push counts on: "
            "a push running meanwhile could lose what it sent"
        )
    with open_workspace(args) as ws:
        name = args.name
        url = _named(ws.config(), name)
        repo = _open(ws, url, create=False)
        pins = set(ws.pinned())
    result = collect(repo, retention=policy, keep=pins, grace=grace, dry_run=args.dry_run)
    if args.json:
        emit_json(gc_view(name, url, result, dry_run=args.dry_run))
    else:
        would = "would drop" if args.dry_run else "dropped"
        parts = [
            plural(result.deleted_packs, "pack"),
            plural(result.deleted_records, "unlisted record"),
        ]
        if result.deleted_leftovers:  # a file:// push killed part-way
            parts.append(plural(result.deleted_leftovers, "leftover temp file"))
        say(
            f"{name}: {would} {plural(len(result.forgotten), 'snapshot')}, "
            f"{'would delete' if args.dry_run else 'deleted'} "
            f"{', '.join(parts[:-1])} and {parts[-1]} ({human_bytes(result.deleted_bytes)}); "
            f"{plural(result.condemned, 'pack')} condemned, {result.kept_packs} kept"
            + (
                f"; {plural(len(result.damaged_indexes), 'damaged index', 'damaged indexes')} "
                "left alone, with every pack no index lists (verify --remote names them)"
                if result.damaged_indexes
                else ""
            )
            + (
                f"; {'would delete' if args.dry_run else 'deleted'} "
                f"{plural(len(result.lost_indexes), 'index', 'indexes')} whose pack was lost"
                if result.lost_indexes
                else ""
            )
        )
    return 0


def gc_view(name: str, url: str, result: GcResult, *, dry_run: bool) -> View:
    """`remote gc --json`."""
    return {
        "remote": name,
        "url": url,
        "dry_run": dry_run,
        "forgotten": result.forgotten,
        "kept_packs": result.kept_packs,
        "condemned": result.condemned,
        "deleted_packs": result.deleted_packs,
        "deleted_bytes": result.deleted_bytes,
        "deleted_records": result.deleted_records,
        "deleted_leftovers": result.deleted_leftovers,
        "damaged_indexes": result.damaged_indexes,
        "lost_indexes": result.lost_indexes,
    }


# -- push | pull ---------------------------------------------------------------------


def cmd_push(args: argparse.Namespace) -> int:
    """`push [NAME] [REF...]`."""
    from worksnap.lock import Locks
    from worksnap.remote.local import StoreSide
    from worksnap.remote.sync import push

    with open_workspace(args) as ws:
        name, refs = _pick(ws.config(), list(args.words), "push")
        url = ws.config().remotes[name].url
        if ws.store.exists() and ws.store.legacy_ids():
            ws.upgrade()  # a format 1 store's snapshots have no records to push yet
        ids = [ws.resolve(r) for r in refs] if refs else None
        _refuse_open_checkpoint(ws, ids)
        held: list[str] = []
        repo = _open(ws, url, create=True)
        with _progress(args, "pushed") as progress:
            if not ws.store.exists():
                from worksnap.remote.sync import Result

                result = Result()
            else:
                with Locks(ws.store.files).shared("push"):
                    side = StoreSide(ws.store, ws.root, hold_open=ids is None)
                    result = push(side, repo, ws.session, ids=ids, progress=progress)
                    held = side.held
    _render(args, "push", name, url, result, held=held)
    return 0


def _refuse_open_checkpoint(ws: Workspace, ids: list[str] | None) -> None:
    """Refuses a push that names the session's open checkpoint (its turn may still capture).

    Raises:
        InputError: it is named: it is pushed after the turn (the next `begin`).
    """
    from worksnap.errors import InputError
    from worksnap.history import Sessions

    if ids is None or not ws.store.exists():
        return
    open_id = Sessions(ws.store.files).load(ws.session).checkpoint
    if open_id is not None and open_id in ids:
        raise InputError(
            f"snapshot {open_id} is the open checkpoint of session {ws.session}: its turn "
            "may still capture files, and a remote record never changes; it is pushed "
            "once the next `worksnap begin` closes it"
        )


def cmd_pull(args: argparse.Namespace) -> int:
    """`pull [NAME] [ID...]`."""
    from worksnap.lock import Locks
    from worksnap.remote.local import StoreSide
    from worksnap.remote.sync import pull

    with open_workspace(args) as ws:
        name, words = _pick(ws.config(), list(args.words), "pull")
        url = ws.config().remotes[name].url
        repo = _open(ws, url, create=False)
        ids = _remote_ids(repo, ws.session, words) if words else None
        if ws.store.exists() and ws.store.legacy_ids():
            ws.upgrade()  # records are saved beside records only
        ws.store.bind(ws.root)
        with _progress(args, "pulled") as progress, Locks(ws.store.files).exclusive("pull"):
            local = StoreSide(ws.store, ws.root)
            result = pull(
                local, repo, ws.session, ids=ids, progress=progress, with_dropped=args.with_dropped
            )
    _render(args, "pull", name, url, result)
    return 0


def _remote_ids(repo: Repository, session: str, words: list[str]) -> list[str]:
    """The ids on the remote's session that `words` name (full ids or unique prefixes)."""
    from worksnap.errors import InputError

    ref, _ = repo.get_ref(session)
    listed = sorted(s.id for s in ref.snapshots) if ref is not None else []
    found = []
    for word in words:
        matches = [i for i in listed if i.startswith(word)] if len(word) >= 4 else []
        if len(matches) != 1:
            what = "more than one snapshot" if matches else "no snapshot"
            raise InputError(
                f"{word!r} names {what} of session {session!r} on {repo.url} "
                "(pull takes snapshot ids or unique prefixes of 4+ characters)"
            )
        found.append(matches[0])
    return found


def transfer_view(
    command: str,
    name: str,
    url: str,
    session: str,
    result: Result,
    *,
    held: list[str] | None = None,
) -> View:
    """`push --json` and `pull --json`: what moved (`held_back`, `left_out`: added later)."""
    view: View = {
        "command": command,
        "remote": name,
        "url": url,
        "session": session,
        "snapshots": result.snapshots,
        "objects": result.objects,
        "bytes": result.bytes,
        "new_packs": result.packs,
    }
    if command == "push":
        view["held_back"] = held or []
        view["lost_packs"] = result.lost_packs
    else:
        view["left_out"] = result.left_out
    return view


def _render(
    args: argparse.Namespace, command: str, name: str, url: str, result: Result,
    *, held: list[str] | None = None,
) -> None:  # fmt: skip
    session = args.session
    if result.lost_packs:  # (also with --json: a warning is stderr's)
        warn(
            f"{name}: {plural(len(result.lost_packs), 'pack')} an index names "
            f"{'is' if len(result.lost_packs) == 1 else 'are'} missing, cut short or damaged on "
            "the remote: what this push needed of them was sent again; `worksnap verify --remote "
            f"{name}` names the snapshots that lost data (push them again by id)"
        )
    if args.json:
        emit_json(transfer_view(command, name, url, session, result, held=held))
        return
    if result.left_out:
        say(
            f"{name}: left out {plural(len(result.left_out), 'snapshot')} a local gc dropped "
            "(name their ids, or give --with-dropped, to bring them back)"
        )
    for open_id in held or []:
        say(f"{name}: held back the open checkpoint {open_id} (its turn may still capture "
            "files); it is pushed once the next `worksnap begin` closes it")  # fmt: skip
    if not result.snapshots and result.objects:
        # A named push of snapshots listed already: what the remote had lost of them.
        say(
            f"{name}: sent again {plural(result.objects, 'object')} "
            f"({human_bytes(result.bytes)}) the remote lacked for snapshots of session "
            f"{session} it lists already"
        )
        return
    if not result.snapshots:
        say(f"{name}: nothing to {command} in session {session} (up to date)")
        return
    verb = "pushed" if command == "push" else "pulled"
    say(
        f"{name}: {verb} {plural(len(result.snapshots), 'snapshot')} of session {session} "
        f"({plural(result.objects, 'object')}, {human_bytes(result.bytes)})"
    )


# -- verify --remote -----------------------------------------------------------------


def cmd_verify_remote(args: argparse.Namespace) -> int:
    """`verify --remote NAME`: every snapshot listed on the remote can be pulled whole."""
    from worksnap.errors import InputError
    from worksnap.remote.gc import verify

    if args.ref is not None:
        raise InputError("verify --remote checks every snapshot on the remote; it takes no ref")
    with open_workspace(args) as ws:
        name = args.remote
        url = _named(ws.config(), name)
        repo = _open(ws, url, create=False)
    report = verify(repo)
    if args.json:
        emit_json(verify_view(name, url, report))
    else:
        say(*map(printable, report.problems))  # names and messages from the remote
        if not report.problems:
            say(
                f"{name}: {plural(report.snapshots, 'snapshot')}, "
                f"{plural(report.objects, 'object')} in {plural(report.packs, 'pack')}: "
                "all present and intact"
            )
    return 1 if report.problems else 0


def verify_view(name: str, url: str, report: VerifyReport) -> View:
    """`verify --remote --json`."""
    return {
        "remote": name,
        "url": url,
        "ok": not report.problems,
        "problems": report.problems,
        "snapshots": report.snapshots,
        "objects": report.objects,
        "checked_packs": report.packs,
    }
