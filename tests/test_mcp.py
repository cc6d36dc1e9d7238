"""`worksnap mcp`: the tools in-process with the SDK's client, compared with the CLI's
`--json` for the same store in real processes, and one server over stdio end to end."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import tree_state, write
from worksnap import apply
from worksnap.cli import main
from worksnap.layout import locate
from worksnap.mcpserver import Tools, build_server
from worksnap.workspace import Seams, Workspace

ENV = {**os.environ, "WORKSNAP_NO_DAEMON": "1"}
TOOLS = {"snapshot", "list", "plan", "restore", "rewind", "undo", "redo", "diff", "show",
         "cat", "status"}  # fmt: skip
CHANGING = {"restore", "rewind", "undo", "redo"}


def cli(root: Path, *args: str) -> Any:
    """The CLI's `--json` document for the same store, from a real process."""
    result = subprocess.run(
        [sys.executable, "-m", "worksnap", "--json", *args],
        capture_output=True, cwd=root, env=ENV, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def cli_bytes(root: Path, *args: str) -> bytes:
    return subprocess.run(
        [sys.executable, "-m", "worksnap", *args], capture_output=True, cwd=root, env=ENV,
        check=True,
    ).stdout  # fmt: skip


def in_server(root: Path, body: Callable[[Client], Awaitable[None]]) -> None:
    """Runs `body` with a client connected in-process to a server on `root`."""

    async def main() -> None:
        with Workspace(root) as ws:
            tools = Tools(ws, session="default", found=locate(str(root)).found)
            async with Client(build_server(tools)) as client:
                await body(client)

    asyncio.run(main())


async def call(client: Client, name: str, **arguments: Any) -> Any:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    structured = result.structured_content
    assert structured is not None
    return structured


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(root, "README.md", "hello\n")
    write(root, "src/app.py", "print(1)\n")
    write(root, "data.bin", b"\x00\xff\xfe")
    return root


def test_the_tools_are_listed_with_descriptions_schemas_and_hints(project: Path) -> None:
    async def body(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        for name, tool in listed.items():
            assert tool.description and len(tool.description) > 40, name
            assert tool.annotations is not None
            assert tool.annotations.destructive_hint is (name in CHANGING), name
            assert ("CHANGES FILES" in tool.description) is (name in CHANGING), name
            assert tool.annotations.read_only_hint is (name not in CHANGING | {"snapshot"})
        assert listed["rewind"].input_schema["properties"]["step"]["type"] == "integer"
        assert listed["plan"].input_schema["required"] == ["ref"]

    in_server(project, body)


def test_every_tool_returns_what_the_cli_prints_for_the_same_store(project: Path) -> None:
    cli(project, "snapshot", "--step", "1", "--label", "first")
    write(project, "src/app.py", "print(2)\n")
    write(project, "new.txt", "new\n")

    async def body(client: Client) -> None:
        # recording: the same document, but for its own id, time and count of new objects
        taken = await call(client, "snapshot", step=2, label="second", meta={"k": "v"})
        shown = cli(project, "show", taken["id"])
        assert (shown["step"], shown["label"], shown["meta"]) == (2, "second", {"k": "v"})
        assert taken["tree"] == shown["tree"] and taken["files"] == len(shown["entries"])
        assert set(taken) == set(cli(project, "snapshot", "--step", "3"))
        # looking: equal to the CLI's documents
        assert (await call(client, "list"))["result"] == cli(project, "list")
        assert (await call(client, "list", limit=1))["result"] == cli(
            project, "list", "--limit", "1"
        )
        assert await call(client, "show", ref="step:1") == cli(project, "show", "step:1")
        assert await call(client, "plan", ref="step:1") == cli(project, "plan", "step:1")
        assert await call(client, "plan", ref="step:1", paths=["src"]) == cli(
            project, "plan", "step:1", "src"
        )
        write(project, "src/app.py", "print(3)\n")
        # store_bytes counts the stat cache, which each capture (this status's too) rewrites
        mine, theirs = await call(client, "status"), cli(project, "status")
        assert mine.pop("store_bytes") > 0 and theirs.pop("store_bytes") > 0
        assert mine == theirs and mine["changes"] == [
            {"op": "M", "path": "src/app.py", "from": None}
        ]
        diff = await call(client, "diff", ref="step:1")
        assert diff["result"] == cli(project, "diff", "step:1")
        assert diff["patch"].encode() == cli_bytes(project, "diff", "step:1")
        assert (await call(client, "diff", ref="step:1", ref2="step:2", stat=True)) == {
            "result": cli(project, "diff", "step:1", "step:2")
        }
        text = await call(client, "cat", ref="step:1", path="src/app.py")
        assert (text["encoding"], text["content"]) == ("utf-8", "print(1)\n")
        binary = await call(client, "cat", ref="step:1", path="data.bin")
        assert binary["encoding"] == "base64"
        assert base64.b64decode(binary["content"]) == cli_bytes(
            project, "cat", "step:1", "data.bin"
        )
        # changing: a dry run is the CLI's plan; the real run its result document
        assert await call(client, "restore", ref="step:1", dry_run=True) == cli(
            project, "restore", "step:1", "--dry-run"
        )
        assert await call(client, "rewind", step=1, dry_run=True) == cli(
            project, "rewind", "1", "--dry-run"
        )
        done = await call(client, "rewind", step=1)
        assert set(done) == {"target", "restored", "not_restored", "error", "rolled_back",
                             "pre_restore", "blocked", "unprotected"}  # fmt: skip
        assert done["error"] is None and "new.txt" in done["restored"]
        assert (project / "src/app.py").read_text() == "print(1)\n"
        assert await call(client, "undo", dry_run=True) == cli(project, "undo", "--dry-run")
        undone = await call(client, "undo")
        assert undone["target"] == done["pre_restore"]
        assert (project / "src/app.py").read_text() == "print(3)\n"
        assert await call(client, "redo", dry_run=True) == cli(project, "redo", "--dry-run")
        assert (await call(client, "redo"))["error"] is None
        assert (project / "src/app.py").read_text() == "print(1)\n"
        assert (await call(client, "list"))["result"] == cli(project, "list")

    in_server(project, body)


def test_an_error_is_a_tool_error_with_the_one_line_message_and_the_server_goes_on(
    project: Path,
) -> None:
    cli(project, "snapshot")
    expected = subprocess.run(
        [sys.executable, "-m", "worksnap", "plan", "nope"], capture_output=True, text=True,
        cwd=project, env=ENV, check=False,
    ).stderr.strip().removeprefix("worksnap: error: ")  # fmt: skip

    async def body(client: Client) -> None:
        for name, arguments in (
            ("plan", {"ref": "nope"}),
            ("cat", {"ref": "latest", "path": "../outside"}),
            ("rewind", {"step": 99}),
            ("redo", {}),
            ("snapshot", {"kind": "pre-restore"}),
        ):
            result = await client.call_tool(name, arguments)
            assert result.is_error, name
            [content] = result.content
            message = getattr(content, "text", "")
            assert len(message.splitlines()) == 1, message
            if name == "plan":
                assert message.endswith(expected)
        assert len((await call(client, "list"))["result"]) == 1  # still serving
        # JSON Schema's integer: 1.0 is one (a second review: refused when strict).
        assert len((await call(client, "list", limit=1.0))["result"]) == 1

    in_server(project, body)


def test_a_restore_that_failed_is_a_tool_error_with_the_cli_s_document(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review: a rewind that failed and was rolled back (a file edited while it ran)
    came back as a result, not an error, as the CLI exits 1; its `restored` named 999
    paths, none restored any more. Now an error whose structured result is the document."""
    with Workspace(project) as ws:
        first = ws.snapshot().id
    write(project, "README.md", "changed\n")
    write(project, "src/app.py", "print(2)\n")
    before = tree_state(project)
    failing = [True]

    def apply_plan(root: str, plan: Any, read_object: Any, **kwargs: Any) -> Any:
        if not failing:
            return apply.apply_plan(root, plan, read_object, **kwargs)
        failing.clear()  # the restore's second file is damaged (not its rollback's)
        reads: list[object] = []

        def rotten(digest: Any) -> Any:
            reads.append(digest)
            return [b"rotten", *read_object(digest)] if len(reads) == 2 else read_object(digest)

        return apply.apply_plan(root, plan, rotten, **kwargs)

    seams = Seams(apply_plan=apply_plan)
    code = main(["--root", str(project), "--json", "restore", first, "--yes"], seams=seams)
    printed = json.loads(capsys.readouterr().out)
    assert code == 1 and printed["rolled_back"] and printed["restored"]
    assert tree_state(project) == before

    async def main_() -> None:
        with Workspace(project, seams=seams) as ws:
            tools = Tools(ws, session="default", found=locate(str(project)).found)
            async with Client(build_server(tools)) as client:
                for name, arguments in (("restore", {"ref": first}), ("undo", {})):
                    failing.append(True)
                    now = tree_state(project)
                    result = await client.call_tool(name, arguments)
                    assert result.is_error, name
                    said = getattr(result.content[0], "text", "")
                    assert said.endswith("the workspace was rolled back to how it was before")
                    document = result.structured_content or {}
                    assert document["rolled_back"] and "do not match" in document["error"]
                    assert json.loads(getattr(result.content[1], "text", "")) == document
                    if name == "restore":
                        assert document.keys() == printed.keys()
                        assert {**document, "pre_restore": None} == {**printed, "pre_restore": None}
                    assert tree_state(project) == now
                    await call(client, "restore", ref=first)  # for undo to take back

    asyncio.run(main_())


def test_snapshot_refuses_the_kinds_the_cli_refuses_for_the_same_reasons(project: Path) -> None:
    """`snapshot(kind="run-before")` was accepted (the CLI refused it), so `latest` skipped
    the agent's snapshot; a kind with a newline was refused as "reserved" (revJ's review)."""
    cli(project, "snapshot", "-m", "first")

    async def body(client: Client) -> None:
        for kind, why in (
            ("run-before", "is reserved"), ("run-settled", "is reserved"),
            ("checkpoint", "is reserved"), ("", "is blank"), ("a\nb", "cannot be printed"),
        ):  # fmt: skip
            result = await client.call_tool("snapshot", {"kind": kind, "label": "agent's"})
            assert result.is_error, kind
            [content] = result.content
            assert why in getattr(content, "text", ""), kind
            refused = subprocess.run(
                [sys.executable, "-m", "worksnap", "snapshot", "--kind", kind],
                capture_output=True, text=True, cwd=project, env=ENV, check=False,
            )  # fmt: skip
            assert refused.returncode == 2 and why in refused.stderr, kind
        assert len((await call(client, "list"))["result"]) == 1  # nothing was taken

    in_server(project, body)
    assert cli(project, "show", "latest")["label"] == "first"


def test_an_argument_of_the_wrong_type_or_missing_is_one_line_naming_it(project: Path) -> None:
    """The SDK answered with pydantic's dump: lines, a link to errors.pydantic.dev (a review)."""
    cli(project, "snapshot")

    async def body(client: Client) -> None:
        for name, arguments, said in (
            ("cat", {"ref": "latest"}, "path: missing (required)"),
            ("rewind", {"step": 1.5}, "step: input should be a valid integer, got a number "
             "with a fractional part, not 1.5"),
            # A review's: taken as 1, and "off" as false (a restore made, not previewed).
            ("rewind", {"step": True}, "step: input should be a valid integer, not true"),
            ("rewind", {"step": "1"}, 'step: input should be a valid integer, not "1"'),
            ("rewind", {"step": 1, "dry_run": "off"},
             'dry_run: input should be a valid boolean, not "off"'),
            ("restore", {"ref": "latest", "dry_run": 1},
             "dry_run: input should be a valid boolean, not 1"),
            ("list", {"limit": "2"}, 'limit: input should be a valid integer, not "2"'),
            ("plan", {"ref": "latest", "paths": "a"},
             'paths: input should be a valid list, not "a"'),
            ("snapshot", {"meta": {"k": 1}}, "meta.k: input should be a valid string, not 1"),
            ("plan", {}, "ref: missing (required)"),
        ):  # fmt: skip
            result = await client.call_tool(name, arguments)
            assert result.is_error, name
            [content] = result.content
            assert getattr(content, "text", "") == f"Error executing tool {name}: {said}"
        assert len((await call(client, "list"))["result"]) == 1  # still serving
        # JSON Schema's integer: 1.0 is one (a second review: refused when strict).
        assert len((await call(client, "list", limit=1.0))["result"]) == 1

    in_server(project, body)


def test_a_review_s_small_wrong_results_are_gone(project: Path) -> None:
    """A negative `limit` dropped the oldest snapshot (`rows[:-1]`); an empty `paths`
    meant nothing to `plan` and everything to `diff`; a Latin-1 file's patch came back
    with U+FFFD in it, so `git apply` refused it."""
    cli(project, "snapshot")
    write(project, "latin1.txt", "caf\xe9\n".encode("latin-1"))
    cli(project, "snapshot")
    write(project, "latin1.txt", "na\xefve\n".encode("latin-1"))

    async def body(client: Client) -> None:
        for name, arguments in (
            ("list", {"limit": -1}),
            ("plan", {"ref": "latest", "paths": []}),
            ("restore", {"ref": "latest", "paths": []}),
            ("diff", {"paths": []}),
        ):
            result = await client.call_tool(name, arguments)
            assert result.is_error, name
        found = await call(client, "diff")
        assert found["patch_encoding"] == "base64"
        patch = base64.b64decode(found["patch"])
        reverse = subprocess.run(
            ["git", "apply", "-R", "-"], input=patch, cwd=project, capture_output=True,
            check=False,
        )  # fmt: skip
        assert reverse.returncode == 0, reverse.stderr
        assert (project / "latin1.txt").read_bytes() == "caf\xe9\n".encode("latin-1")
        assert (await call(client, "diff"))["patch"] == ""

    in_server(project, body)


def test_over_stdio_a_real_server_answers_and_writes_only_protocol(project: Path) -> None:
    write(project, "big/" + "x" * 10, "y")
    for i in range(300):
        write(project, f"many/f{i}.txt", str(i))

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "worksnap", "mcp"], cwd=str(project), env=ENV
        )
        async with Client(params) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            taken = await call(client, "snapshot", step=0, label="over stdio")
            rows = (await call(client, "list"))["result"]
            assert [r["id"] for r in rows] == [taken["id"]]
            assert (await client.call_tool("plan", {"ref": "zzzz"})).is_error

    asyncio.run(main())
    assert cli(project, "list")[0]["label"] == "over stdio"


def test_stdout_carries_nothing_but_json_rpc(project: Path) -> None:
    """Raw lines on the server's stdout: each one a JSON-RPC message, nothing else."""
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "snapshot", "arguments": {"label": "raw"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "plan", "arguments": {"ref": "nope"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "status", "arguments": {}}},
    ]  # fmt: skip
    # One request at a time, each answer read before the next is sent (as a client does).
    with subprocess.Popen(
        [sys.executable, "-m", "worksnap", "mcp"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=project, env=ENV,
    ) as server:  # fmt: skip
        assert server.stdin is not None and server.stdout is not None
        lines = []
        for request in requests:
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            if "id" in request:
                lines.append(server.stdout.readline())
        server.stdin.close()
        lines += server.stdout.read().splitlines()  # whatever else it wrote before it ended
        assert server.wait(timeout=60) == 0
    messages = [json.loads(line) for line in lines]
    assert all(m.get("jsonrpc") == "2.0" for m in messages), lines
    answers = {m["id"]: m for m in messages if "id" in m}
    assert set(answers) == {1, 2, 3, 4}
    assert answers[2]["result"]["structuredContent"]["label"] == "raw"
    assert answers[3]["result"]["isError"] is True
    assert answers[4]["result"]["structuredContent"]["snapshots"] == 1


def test_a_line_the_sdk_cannot_read_is_answered_with_a_json_rpc_error(project: Path) -> None:
    """A lone surrogate escape (JSON.stringify writes one) left its request unanswered for
    ever; a line that is not JSON got no parse error (a review)."""
    surrogate = (
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "cat",'
        ' "arguments": {"ref": "latest", "path": "\\udcff"}}}'
    )
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        surrogate,
        "not json",
        json.dumps({"id": 3, "hello": "there"}),
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "status", "arguments": {}}}),
    ]  # fmt: skip
    assert "\\udcff" in surrogate
    with subprocess.Popen(
        [sys.executable, "-m", "worksnap", "mcp"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=project, env=ENV,
    ) as server:  # fmt: skip
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(lines[0] + "\n")
        server.stdin.flush()
        answers = [json.loads(server.stdout.readline())]
        server.stdin.write("".join(line + "\n" for line in lines[1:]))
        server.stdin.flush()
        while answers[-1].get("id") != 4:  # answered in order: the last request last
            answers.append(json.loads(server.stdout.readline()))
        server.stdin.close()
        assert server.stdout.read() == ""
        assert server.wait(timeout=60) == 0
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (1, None), (2, -32700), (None, -32700), (3, -32600), (4, None)
    ]  # fmt: skip
    assert "surrogate" in answers[1]["error"]["message"]
    assert answers[4]["result"]["structuredContent"]["snapshots"] == 0


def test_without_the_sdk_mcp_says_what_to_install_and_exits_2(project: Path) -> None:
    script = (
        "import sys\nsys.modules['mcp'] = None\n"
        "from worksnap.cli import main\nsys.exit(main(['mcp']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=project, env=ENV,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "worksnap: error: worksnap mcp needs the MCP SDK: pip install 'worksnap[mcp]' "
        "(or: pip install 'mcp>=2.3')"
    ]


HOLDER = """
import sys
import threading
from worksnap import Workspace
with Workspace(sys.argv[1]) as ws, ws.locks.exclusive("another agent's restore"):
    print("held", flush=True)
    sys.stdin.readline()
    open(sys.argv[2], "w").write("changed by the other agent's restore\\n")
"""


def waits_for_the_lock(thread: threading.Thread, timeout: float = 60.0) -> bool:
    """True once `thread` is waiting in the store lock (its stack, looked at; no timing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name == "_wait" and frame.f_code.co_filename.endswith("lock.py"):
                return True
            frame = frame.f_back
        time.sleep(0.01)
    return False


def test_restore_plans_under_the_lock_so_another_agents_restore_cannot_overtake_it(
    project: Path,
) -> None:
    """A review ran two agents' servers on one tree: a `restore` planned before it took
    the store lock failed "changed since the plan was made (plan again)" whenever the
    other agent's restore ran in between, a plan this agent never made."""
    app = project / "src" / "app.py"
    with Workspace(project) as ws:
        first = ws.snapshot().id
    write(project, "src/app.py", "print(2)\n")

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(project), str(app)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline() == "held\n"
        with Workspace(project) as ws:
            tools = Tools(ws, session="default", found=locate(str(project)).found)
            done: list[dict[str, Any]] = []
            worker = threading.Thread(target=lambda: done.append(tools.restore(first)))
            worker.start()
            assert waits_for_the_lock(worker)  # blocked on the other agent's lock
            holder.stdin.write("go\n")
            holder.stdin.flush()
            worker.join(timeout=120)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    [result] = done
    assert result.get("error") is None, result
    assert app.read_text() == "print(1)\n"


_SIGTERM_MID_RESTORE = r"""
import os, signal, sys, time
from worksnap import apply, cli
from worksnap.workspace import Seams
calls = []

def apply_plan(root, plan, read, **kwargs):
    calls.append(plan)
    progress = kwargs.get("progress")

    def report(done, total):
        if done == 3 and len(calls) == 1:  # the restore's third step (not its rollback's)
            os.kill(os.getpid(), signal.SIGTERM)
            while signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
                time.sleep(0.001)  # until the server's handler ran (it puts back the default)
        if progress is not None:  # (a rollback reports none)
            progress(done, total)

    return apply.apply_plan(root, plan, read, **{**kwargs, "progress": report})

sys.exit(cli.main(["mcp"], seams=Seams(apply_plan=apply_plan)))
"""


def test_sigterm_mid_restore_rolls_back_says_so_on_stderr_and_exits_143(project: Path) -> None:
    # A review: a client stopping its server with SIGTERM (as the MCP spec's stdio
    # shutdown does) during a `rewind` left the tree half-restored, with a journal, and
    # nothing said. Now the call stops as at Ctrl-C: rolled back, one line, exit 143.
    for i in range(10):
        write(project, f"f{i}.txt", f"v1 {i}\n")
    first = cli(project, "snapshot")["id"]
    for i in range(10):
        write(project, f"f{i}.txt", f"v2 {i}\n")
    cli(project, "snapshot")
    before = tree_state(project)
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "restore", "arguments": {"ref": first}}},
    ]  # fmt: skip
    server = subprocess.run(
        [sys.executable, "-c", _SIGTERM_MID_RESTORE], cwd=project, env=ENV, text=True,
        input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert server.returncode == 143, server.stderr
    assert server.stderr.splitlines() == [
        "worksnap: interrupted by SIGTERM; the workspace was rolled back to how it was before"
    ]
    answered = [json.loads(line)["id"] for line in server.stdout.splitlines()]
    assert answered == [1]  # the call stopped is never answered
    assert tree_state(project) == before
    assert not (project / ".worksnap" / "journal.json").exists()
