"""MCP server: one workspace served to an agent over the Model Context Protocol (stdio).

`worksnap mcp` runs it with the official SDK (`mcp` 2.x, `MCPServer`), an optional
extra (`pip install 'worksnap[mcp]'`). One long-lived `Workspace` per server, found
as the command line finds it, so its caches stay warm between calls. Every tool's
structured result is the document `worksnap --json` prints for the same call, built
by `views.py` (a JSON array, as `list` and `diff` print, comes as `{"result": [...]}`,
the SDK's wrapping of a non-object). An error is a tool error with worksnap's one-line
message (an argument missing or of the wrong type too, said in one line, not in
pydantic's dump); so is a restore, rewind, undo or redo that failed (rolled back or not,
as the command line exits 1), its document still the structured result. The server goes
on, and answers a line it cannot read with JSON-RPC's error rather than drop it as the SDK
does. Nothing but protocol goes to stdout: the SDK points descriptor 1 at stderr while it
serves, and worksnap prints no progress here.

SIGTERM (how a client stops its server) or SIGHUP during a call stops the call as Ctrl-C
stops a command (a restore rolls back: `Tools.stop`); the server says how it left the
tree on stderr and exits 128 + the signal. Between calls it exits at once.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    InputRequiredResult,
    JSONRPCError,
    TextContent,
    ToolAnnotations,
)
from pydantic import BeforeValidator, StrictBool, ValidationError
from pydantic_core import PydanticCustomError

from worksnap import stopsignals, views
from worksnap.arguments import VERSION
from worksnap.errors import InputError, Interrupted, WorksnapError
from worksnap.inspection import status_state
from worksnap.progress import Progress
from worksnap.workspace import Seams, Workspace

if TYPE_CHECKING:
    from worksnap.apply import Result


def _whole(value: object) -> object:
    """An integer as JSON Schema's `integer` has it (`1.0` too), never `true` nor `"1"`.

    pydantic's lax int took `true` and `"1"` for 1 (a review's `rewind` with `dry_run`
    `"off"` made a real restore); its strict one refused `1.0`, which the schema allows.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


Whole = Annotated[int, BeforeValidator(_whole)]
"""A tool's integer argument (`_whole`)."""

INSTRUCTIONS = """\
worksnap keeps snapshots of this whole project directory (every file, including what
shell commands changed) and restores any of them exactly. Take `snapshot` before a risky
change (give it the step number of your turn), `plan` to preview a restore, then
`restore` or `rewind`; `undo` takes a restore back. Refs: a snapshot id (or 4+ of its
first characters), `latest`, `latest~N`, or `step:N`. Tools marked destructive change
files in the project: preview with `dry_run` first."""

_T = TypeVar("_T")

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_RECORD = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
_CHANGE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
_CHANGES_FILES = (
    "CHANGES FILES in the project (deletes, overwrites and recreates them); a pre-restore "
    "snapshot is taken first, so `undo` takes it back. With dry_run=true it only returns "
    "the plan."
)


class Tools:
    """The tools of one server: each one a call on the workspace and a view of its result.

    Calls are serialized (a `Workspace` serves one call at a time).
    """

    def __init__(self, ws: Workspace, *, session: str, found: str = "cwd") -> None:
        self.ws = ws
        self.session = session
        self.found = found
        self._lock = threading.Lock()
        self._guard = threading.Lock()  # `_busy` and `_stopping`, with the signal handler
        self._busy = False
        self._stopping: int | None = None  # the signal that came during a call

    def call(self, work: Callable[[Workspace], _T], session: str | None = None) -> _T:
        """Runs `work` on the workspace in `session`; a worksnap error is a tool error.

        The notices of the call (a killed restore rolled back first, a wait for the store)
        go with its answer: `notices` in its document, or before its error.
        """
        notes: list[str] = []
        with self._lock:
            with self._guard:
                if self._stopping is not None:  # came during the call before this one
                    self._exit(self._stopping, "")
                self._busy = True
            try:
                self.ws.use(session=session or self.session, progress=self._stoppable(notes))
                result = work(self.ws)
            except KeyboardInterrupt as exc:  # `stop`: a restore says how it left the tree
                state = exc.state if isinstance(exc, Interrupted) else ""
                self._exit(self._stopping or stopsignals.SIGINT, state)
            except WorksnapError as exc:
                raise ToolError("; ".join([*notes, str(exc)])) from None
            except OSError as exc:
                raise ToolError(f"{exc.filename or ''}: {exc.strerror or exc}") from None
            finally:
                with self._guard:
                    self._busy = False
                    stopping = self._stopping
            if stopping is not None:  # too late to stop it: it is done
                self._exit(stopping, "the call had finished (its answer is not sent)")
            if notes and isinstance(result, dict):
                result["notices"] = notes
            return result

    def stop(self, signum: int, frame: Any) -> None:
        """SIGTERM or SIGHUP (in the main thread): stops the call running, else the server.

        The call stops at its next progress report, as a command at Ctrl-C (a restore
        rolls back), and `call` exits once it has. A second signal ends the server at
        once, as one did before (a restore's journal stays: the next command recovers).
        """
        with self._guard:  # held by a call only for a moment
            if not self._busy:
                os._exit(128 + signum)  # between calls (none can start now): nothing to stop
            self._stopping = signum
        stopsignals.default(signum)

    def _stoppable(self, notes: list[str]) -> Callable[[Progress], None]:
        """The progress callback of a call: raises `Stopped` once a signal came (only once).

        Each notice goes to `notes`, and to stderr (the server's log).
        """
        raised: list[bool] = []

        def report(progress: Progress) -> None:
            if progress.note:
                notes.append(progress.note)
                print(f"worksnap: {progress.note}", file=sys.stderr, flush=True)
            if self._stopping is not None and not raised:
                raised.append(True)
                raise stopsignals.Stopped(self._stopping)

        return report

    def _exit(self, signum: int, state: str) -> NoReturn:
        """Says how the call left the tree (on stderr: stdout is the protocol's), and exits."""
        with contextlib.suppress(OSError, ValueError):
            print(stopsignals.said(state, signum), file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            self.ws.close()  # stores the caches, as at the end of `serve`
        os._exit(128 + signum)

    # -- recording and looking -------------------------------------------------

    def snapshot(
        self,
        step: Whole | None = None,
        label: str | None = None,
        meta: dict[str, str] | None = None,
        kind: str = "manual",
    ) -> dict[str, Any]:
        """Captures the whole project as a new snapshot; returns its id and counts.

        Records; changes no file of the project. Give `step` (your turn's number) so
        `rewind` can name it, and a short `label` (what you are about to do).
        """

        def run(ws: Workspace) -> dict[str, Any]:
            before = ws.objects_added
            manifest = ws.snapshot(kind=kind, step=step, label=label, meta=meta)
            return views.snapshot_view(
                manifest,
                total_bytes=ws.total_bytes(manifest),
                new_objects=ws.objects_added - before,
                large=ws.large_files(manifest),
            )

        return self.call(run)

    def list_snapshots(
        self, limit: Whole | None = None, session: str | None = None
    ) -> list[dict[str, Any]]:
        """Lists the session's snapshots, newest first: id, step, kind, time, label, counts.

        Changes nothing. `session`: another session's snapshots (default: this server's).
        """

        def run(ws: Workspace) -> list[dict[str, Any]]:
            summaries = ws.list()
            pins = ws.pinned()
            rows = [views.summary_view(s, pinned=s.id in pins) for s in summaries]
            if limit is not None and limit < 0:
                raise InputError(f"limit must be 0 or more, not {limit}")
            return rows if limit is None else rows[:limit]

        return self.call(run, session)

    def plan(self, ref: str, paths: list[str] | None = None) -> dict[str, Any]:
        """Previews what restoring `ref` (only `paths`, if given) would change.

        Changes nothing. `changes`: M modified, A added since (removed), D deleted
        since (recreated); `unprotected`: files a restore leaves as they are although
        they may differ (large ones, ones the rules ignore now: in no snapshot).
        """
        return self.call(
            lambda ws: views.plan_view(ws.plan_restore(ws.load(ref), paths=_named(paths)))
        )

    def show(self, ref: str) -> dict[str, Any]:
        """One snapshot's manifest: kind, step, time, label, meta, attachments, files.

        Changes nothing. Every file with its size and hash, and what it left out.
        """
        return self.call(lambda ws: dict(json.loads(ws.show_bytes(ref))))

    def cat(self, ref: str, path: str) -> dict[str, Any]:
        """A file's content as snapshot `ref` holds it (a symlink: its target).

        Changes nothing. `content` is text when the bytes are UTF-8 (`encoding`
        "utf-8"), else base64 (`encoding` "base64").
        """

        def run(ws: Workspace) -> dict[str, Any]:
            entry, data = ws.file_bytes(ref, path)
            try:
                content, encoding = data.decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                content, encoding = base64.b64encode(data).decode("ascii"), "base64"
            return {"path": entry.path, "type": entry.type, "size": len(data),
                    "encoding": encoding, "content": content}  # fmt: skip

        return self.call(run)

    def diff(
        self,
        ref: str | None = None,
        ref2: str | None = None,
        paths: list[str] | None = None,
        stat: StrictBool = False,
    ) -> dict[str, Any]:
        """What changed from snapshot `ref` (default latest) to `ref2` (default: now).

        Changes nothing. `result`: one row per changed path with line counts; without
        `stat`, `patch` also holds the changes as a git patch (`git apply` takes it):
        text when it is UTF-8 (`patch_encoding` "utf-8"), else base64 ("base64").
        """
        from worksnap.diff import git_patch, select

        def run(ws: Workspace) -> dict[str, Any]:
            changes, read = ws.diff(ref or "latest", ref2)
            if (named := _named(paths)) and (wanted := ws.selection(named)) is not None:
                changes = select(changes, wanted)
            document: dict[str, Any] = {"result": views.diff_view(changes, read)}
            if not stat:
                patch = b"".join(git_patch(c, read, binary=False) for c in changes)
                try:  # bytes that are no UTF-8 (a Latin-1 file) go as they are, in base64
                    document["patch"], document["patch_encoding"] = patch.decode(), "utf-8"
                except UnicodeDecodeError:
                    document["patch"] = base64.b64encode(patch).decode("ascii")
                    document["patch_encoding"] = "base64"
            return document

        return self.call(run)

    def status(self) -> dict[str, Any]:
        """Where worksnap works, how many snapshots, and what changed since `latest`.

        Changes nothing. Root, store, session, daemon; `changes` like `git status --short`.
        """
        from worksnap import client

        def run(ws: Workspace) -> dict[str, Any]:
            state, _ = status_state(
                ws,
                found=self.found,
                session=ws.session,
                daemon=lambda: client.request(ws.store_dir, "status"),
            )
            return state

        return self.call(run)

    # -- changing the tree ---------------------------------------------------

    def restore(
        self, ref: str, paths: list[str] | None = None, dry_run: StrictBool = False
    ) -> dict[str, Any]:
        """Restores the project (or only `paths`) to snapshot `ref`.

        `unprotected` in the result: files it left as they are although they may differ
        from the snapshot (large ones, ones the rules ignore now), as `plan` lists them.
        """

        def run(ws: Workspace) -> dict[str, Any]:
            if dry_run:
                return views.plan_view(ws.plan_restore(ws.load(ref), paths=_named(paths)))
            # Planned under the store lock, with the tree walked once (as `restore --yes`):
            # a plan made first could be overtaken by another agent's restore meanwhile.
            return _done(ws.restore(ref, paths=_named(paths)))

        return self.call(run)

    def rewind(self, step: Whole, dry_run: StrictBool = False) -> dict[str, Any]:
        """Restores the newest snapshot of step `step` of this session."""
        return self.restore(f"step:{step}", dry_run=dry_run)

    def undo(self, dry_run: StrictBool = False) -> dict[str, Any]:
        """Takes back the last restore (or, with none, the edits since the last snapshot)."""

        def run(ws: Workspace) -> dict[str, Any]:
            if dry_run:
                return views.plan_view(ws.plan_undo())
            return _done(ws.undo())  # (planned under the lock, as above)

        return self.call(run)

    def redo(self, dry_run: StrictBool = False) -> dict[str, Any]:
        """Re-applies what the last undo took back."""

        def run(ws: Workspace) -> dict[str, Any]:
            if dry_run:
                return views.plan_view(ws.plan_redo())
            return _done(ws.redo())  # (planned under the lock, as above)

        return self.call(run)


class _Failed(ToolError):
    """A restore that failed: a tool error whose structured result is still its document."""

    def __init__(self, message: str, document: dict[str, Any]) -> None:
        super().__init__(message)
        self.document = document


def _done(result: Result) -> dict[str, Any]:
    """The document of a restore, rewind, undo or redo; raises `_Failed` if it failed.

    A review found a restore rolled back (a file edited while it ran) answered as a
    result, not an error, its `restored` listing paths no longer restored.
    """
    document = views.result_view(result)
    if result.ok:
        return document
    raise _Failed(result.failure(), document)


def _named(paths: list[str] | None) -> list[str] | None:
    """The paths a tool is limited to: None for the whole tree.

    An empty list is refused: a review found it meant nothing to `plan` and `restore`,
    everything to `diff`.
    """
    if paths is not None and not paths:
        raise InputError("paths: name at least one path, or leave paths out for the whole tree")
    return paths


class _Server(MCPServer[Any]):
    """The SDK's server, its argument errors in one line as worksnap's own read."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Calls tool `name`; arguments of the wrong type or missing: one line naming them.

        The SDK says them in pydantic's dump: lines with a link to errors.pydantic.dev. A
        restore that failed (`_Failed`): a tool error that keeps its document as the
        structured result, as the SDK's own tool errors have none.
        """
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, _Failed):  # the message, and the document (JSON, structured)
                said = json.dumps(cause.document, ensure_ascii=False, indent=2)
                return CallToolResult(
                    content=[TextContent(type="text", text=str(exc)),
                             TextContent(type="text", text=said)],
                    structured_content=cause.document,
                    is_error=True,
                )  # fmt: skip
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {_arguments(cause)}") from cause

    async def run_stdio_async(self) -> None:
        r"""Serves on stdin/stdout as the SDK does, and answers a line it cannot read.

        The SDK's reader hands such a line on as an exception, which its loop drops: a
        request with a lone surrogate escape (`\udcff` in a string, as JavaScript's
        JSON.stringify may write) was never answered, its client waiting for ever.
        """
        if not hasattr(self, "_lowlevel_server"):  # (the SDK's own name for it, not public)
            await super().run_stdio_async()  # a newer SDK: serve as it does
            return
        async with stdio_server() as (read_stream, write_stream):
            send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_answer_unreadable, read_stream, send, write_stream.send)
                await self._lowlevel_server.run(
                    receive, write_stream, self._lowlevel_server.create_initialization_options()
                )


async def _answer_unreadable(
    lines: AsyncIterable[SessionMessage | Exception],
    messages: MemoryObjectSendStream[SessionMessage | Exception],
    answer: Callable[[SessionMessage], Awaitable[None]],
) -> None:
    """Passes `lines`' messages on to `messages`; `answer`s a line that is none.

    Not JSON: a parse error (-32700) with id null. JSON that pydantic's parser refuses (a
    lone surrogate): a parse error with the request's id, so its client stops waiting.
    JSON but no JSON-RPC message: an invalid request (-32600), with its id if it has one.
    """
    async with messages:
        async for item in lines:
            if not isinstance(item, ValidationError) or not item.errors():
                await messages.send(item)
                continue
            problem = item.errors(include_url=False)[0]
            document = problem.get("input")  # what the line parsed into, or the line
            if problem["type"] == "json_invalid":
                try:  # (Python reads a lone surrogate: the id it answers)
                    document = json.loads(document) if isinstance(document, str) else None
                except ValueError:
                    document = None
                why = problem.get("ctx", {}).get("error", problem["msg"])
                code, said = PARSE_ERROR, f"Parse error: {' '.join(str(why).split())}"
            else:
                code, said = INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message"
            known = document.get("id") if isinstance(document, dict) else None
            ask = known if isinstance(known, int | str) and not isinstance(known, bool) else None
            if isinstance(ask, str) and not _utf8(ask):
                ask = None  # (an id that is a lone surrogate: the answer could not be written)
            error = JSONRPCError(jsonrpc="2.0", id=ask, error=ErrorData(code=code, message=said))
            await answer(SessionMessage(error))


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _arguments(error: ValidationError) -> str:
    """`step: expected an integer (input should be a valid integer...), not 1.5`: one line."""
    said = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        if problem["type"] == "missing":
            said.append(f"{where}: missing (required)")
            continue
        given = json.dumps(problem.get("input"), default=repr)
        given = given if len(given) <= 60 else given[:57] + "..."
        said.append(f"{where}: {' '.join(problem['msg'].split()).lower()}, not {given}")
    return "; ".join(said) or " ".join(str(error).split())


def build_server(tools: Tools) -> MCPServer:
    """The MCP server with every tool of `tools`, described for an agent to act on."""
    server = _Server(name="worksnap", instructions=INSTRUCTIONS, version=VERSION)
    for name, hints in (
        ("snapshot", _RECORD), ("list", _READ), ("plan", _READ), ("show", _READ),
        ("cat", _READ), ("diff", _READ), ("status", _READ),
        ("restore", _CHANGE), ("rewind", _CHANGE), ("undo", _CHANGE), ("redo", _CHANGE),
    ):  # fmt: skip
        method = getattr(tools, "list_snapshots" if name == "list" else name)
        description = " ".join((method.__doc__ or "").split())
        if hints is _CHANGE:
            description = f"{description} {_CHANGES_FILES}"
        server.add_tool(
            method,
            name=name,
            description=description,
            annotations=hints,
            structured_output=True,
        )
    return server


def serve(
    root: str,
    *,
    store: str | None,
    session: str,
    watch: bool,
    force: bool,
    found: str = "cwd",
    seams: Seams | None = None,
) -> None:
    """Serves the workspace at `root` on stdin/stdout until the client goes away.

    `seams`: parts of the workspace to swap, for tests (see `workspace.Seams`).
    """
    try:
        ws = Workspace(root, store=store, session=session, watch=watch, force=force, seams=seams)
    except WorksnapError:
        raise
    except OSError as exc:
        raise InputError(f"cannot open the workspace {root}: {exc}") from None
    tools = Tools(ws, session=session, found=found)
    with ws, stopsignals.on_stop(tools.stop):
        build_server(tools).run("stdio")
