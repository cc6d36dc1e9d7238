"""Hooks: worksnap driven by an agent's hook events, and installed into its settings.

Claude Code runs a hook command with one JSON event on stdin (its hooks reference,
https://code.claude.com/docs/en/hooks: `session_id`, `transcript_path`, `cwd`,
`hook_event_name`, and per event `prompt`, `tool_name`/`tool_input`/`tool_response`,
`source`). `worksnap hook claude-code` answers three of them:

- `UserPromptSubmit`: a step snapshot (kind `step`), the next step of the session named
  after the agent's session, labelled with the prompt's first line;
- `PostToolUse` of a tool that changes files (`FILE_TOOLS`): a `tool` snapshot in the
  same step;
- `SessionStart`: makes sure the store exists; records nothing.

It prints nothing on stdout: Claude Code adds a UserPromptSubmit hook's stdout to the
prompt. `install`/`uninstall` edit `.claude/settings.json` (or `~/.claude/settings.json`),
touching nothing but the hook entries they own.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from worksnap.errors import InputError

if TYPE_CHECKING:
    from worksnap.manifest import Manifest
    from worksnap.workspace import Workspace

AGENTS = ("claude-code",)
"""The agents whose hook events `worksnap hook` reads."""

FILE_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit", "Bash")
"""Claude Code's tools that change files (Bash: whatever the command does)."""

EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse")
"""The events `hooks install` registers, in that order."""

TIMEOUT_SECONDS = 30
"""The time budget written into the settings (Claude Code's default is 60 s)."""

LOCK_WAIT_SECONDS = TIMEOUT_SECONDS / 2
"""How long a hook waits for a busy store (a gc, pull or restore), all waits together.

Half its budget: the rest is for starting and snapshotting. A review found a hook
waiting the lock's 60 s, killed by the agent at 30 s with nothing said and no snapshot.
"""

TOOL = "tool"
"""The kind of a tool call's snapshot."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Event(msgspec.Struct, frozen=True):
    """One hook event, as the agent sent it (missing fields are empty)."""

    name: str
    session_id: str
    cwd: str
    transcript_path: str
    prompt: str
    tool_name: str
    tool_input: dict[str, Any]
    source: str
    raw: dict[str, Any]


def parse_event(text: str) -> Event:
    """Reads one hook event (JSON text).

    Raises:
        InputError: not a JSON object, or without `hook_event_name` or `session_id`.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # (nested 100,000 deep: a RecursionError)
        raise InputError(f"the hook event on stdin is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError("the hook event on stdin is not a JSON object")

    def text_of(key: str) -> str:
        value = data.get(key)
        return value if isinstance(value, str) else ""

    name, session_id = text_of("hook_event_name"), text_of("session_id")
    if not name or not session_id:
        raise InputError("the hook event has no hook_event_name or session_id")
    tool_input = data.get("tool_input")
    return Event(
        name=name,
        session_id=session_id,
        cwd=text_of("cwd"),
        transcript_path=text_of("transcript_path"),
        prompt=text_of("prompt"),
        tool_name=text_of("tool_name"),
        tool_input=tool_input if isinstance(tool_input, dict) else {},
        source=text_of("source"),
        raw=data,
    )


def session_name(agent_session: str) -> str:
    """The worksnap session of an agent's session id: itself when it is a valid name.

    Otherwise its safe characters and a digest of the whole id, so two ids never share
    a session (`claude-` and 8 hex digits of BLAKE3 when nothing safe is left).
    """
    from worksnap.history import check_session_name

    try:
        return check_session_name(agent_session)
    except InputError:  # (one starting with '.', '-' or '_' too: a review found it refused)
        pass
    from blake3 import blake3

    digest = blake3(agent_session.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    safe = _UNSAFE.sub("-", agent_session).strip("-._")[:55] or "claude"
    return f"{safe}-{digest}"


def handle(event: Event, ws: Workspace) -> Manifest | None:
    """Does what `event` asks of the workspace; returns the snapshot taken (None: none).

    Raises:
        WorksnapError: the snapshot failed.
    """
    from worksnap.session import STEP, Session

    if event.name == "SessionStart":
        ws.store.bind(ws.root)  # the store exists from now on: the first prompt is fast
        return None
    meta = {
        "agent": "claude-code",
        "session_id": event.session_id,
        "hook_event": event.name,
        "transcript_path": event.transcript_path,
    }
    for key in ("prompt_id", "tool_use_id"):
        if isinstance(event.raw.get(key), str):
            meta[key] = event.raw[key]
    session = Session(workspace=ws, name=session_name(event.session_id))
    if event.name == "UserPromptSubmit":
        return session.step(kind=STEP, label=event.prompt or "(empty prompt)", meta=meta)
    if event.name == "PostToolUse" and event.tool_name in FILE_TOOLS:
        meta["tool_name"] = event.tool_name
        last = session.last_step()
        return session.step(
            kind=TOOL, number=0 if last is None else last, label=_tool_label(event), meta=meta
        )
    return None


def _tool_label(event: Event) -> str:
    """`Edit src/app.py`, `Bash pytest -x`: what the tool call did, in one line."""
    for key in ("file_path", "notebook_path", "command"):
        value = event.tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return f"{event.tool_name} {value.strip().splitlines()[0]}"
    return event.tool_name


# -- settings.json ------------------------------------------------------------


def hook_command() -> str:
    """The command the settings run: `worksnap hook claude-code`.

    By its full path when `worksnap` on the PATH is not this installation; as
    `PYTHON -m worksnap` when run so and no `worksnap` is on the PATH (a review found
    every hook failing with 127 then, and nothing said at install).
    """
    here = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    found = shutil.which("worksnap")
    if found is None and os.path.basename(here) != "worksnap" and sys.executable:
        return f"{shlex.quote(sys.executable)} -m worksnap hook claude-code"
    if (
        not here
        or os.path.basename(here) != "worksnap"
        or (found is not None and os.path.realpath(found) == here)
    ):
        return "worksnap hook claude-code"
    return f"{shlex.quote(here)} hook claude-code"  # (run by a shell: a space in it)


def _is_ours(hook: object) -> bool:
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    try:
        words = shlex.split(str(hook.get("command", "")))
    except ValueError:  # unbalanced quotes: someone else's
        return False
    if words[1:3] == ["-m", "worksnap"]:  # PYTHON -m worksnap hook claude-code
        words = words[2:]
    return (
        len(words) == 3
        and os.path.basename(words[0]) == "worksnap"
        and words[1:] == ["hook", "claude-code"]
    )


def settings_path(*, user: bool, root: str) -> str:
    """`~/.claude/settings.json` (user) or `<root>/.claude/settings.json` (project)."""
    base = os.path.expanduser("~") if user else root
    return os.path.join(base, ".claude", "settings.json")


def read_settings(path: str) -> dict[str, Any]:
    """The settings file as a dict in its own key order ({} when it does not exist).

    A symlink (a dotfile manager's) is read, and later written, where it points.

    Raises:
        InputError: it is not a regular file holding a JSON object (it is left as it is).
    """
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return {}
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path} is not a regular file; worksnap leaves it as it is")
    with open(real, "rb") as f:
        data = f.read()
    try:
        settings = json.loads(data, parse_constant=_not_json) if data.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise InputError(
            f"{path} is not valid JSON ({exc}); fix it by hand, worksnap leaves it as it is"
        ) from None
    if not isinstance(settings, dict):
        raise InputError(f"{path} is not a settings object; worksnap leaves it as it is")
    if (where := _misshapen(settings)) is not None:
        raise InputError(f"{path}: {where}; fix it by hand, worksnap leaves it as it is")
    return settings


def _misshapen(settings: dict[str, Any]) -> str | None:
    """Where `hooks` is not as Claude Code's reference shapes it (None: it is).

    `hooks`: an object of event lists; an event: a list of groups (objects); a group's
    `hooks`: a list of objects whose `type` and `command` are strings. A review found a
    group's `"hooks": 5` ending `hooks install` in a traceback.
    """
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        return "hooks is not an object"
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            return f"hooks.{event} is not a list"
        for i, group in enumerate(groups):
            where = f"hooks.{event}[{i}]"
            if not isinstance(group, dict):
                return f"{where} is not an object"
            inner = group.get("hooks", [])
            if not isinstance(inner, list):
                return f"{where}.hooks is not a list"
            for j, hook in enumerate(inner):
                if not isinstance(hook, dict):
                    return f"{where}.hooks[{j}] is not an object"
                for key in ("type", "command"):
                    if not isinstance(hook.get(key, ""), str):
                        return f"{where}.hooks[{j}].{key} is not a string"
    return None


def install(settings: dict[str, Any], command: str) -> bool:
    """Adds worksnap's hook to each of `EVENTS` (unless there already); True if it changed."""
    hooks = settings.setdefault("hooks", {})
    changed = False
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise InputError(f"settings hooks.{event} is not a list; fix it by hand")
        if any(_is_ours(h) for g in groups if isinstance(g, dict) for h in g.get("hooks", [])):
            continue
        group: dict[str, Any] = {}
        if event == "PostToolUse":
            group["matcher"] = "|".join(FILE_TOOLS)
        group["hooks"] = [{"type": "command", "command": command, "timeout": TIMEOUT_SECONDS}]
        groups.append(group)
        changed = True
    return changed


def uninstall(settings: dict[str, Any]) -> bool:
    """Removes worksnap's hooks (and the groups, events and `hooks` they leave empty).

    Only what held a worksnap entry goes when left empty: an event list or a group
    that was empty already is someone else's, and stays.
    """
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return False
    changed = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept, ours = [], False
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(_is_ours(h) for h in inner):
                ours = True
                inner = [h for h in inner if not _is_ours(h)]
                if inner:
                    kept.append({**group, "hooks": inner})
                continue
            kept.append(group)
        if not ours:
            continue  # none of ours in it: left exactly as it was
        changed = True
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if changed and not hooks:
        del settings["hooks"]
    return changed


def write_settings(path: str, settings: dict[str, Any]) -> None:
    """Writes the settings atomically, two-space indented, keys in their order."""
    from worksnap.fsio import write_atomic

    real = os.path.realpath(path)  # through a symlink: the file it points to stays a file
    os.makedirs(os.path.dirname(real), exist_ok=True)
    try:  # (`1e999` reads as infinity, which JSON cannot write; a lone surrogate escape)
        text = json.dumps(settings, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        data = text.encode()
    except (ValueError, UnicodeEncodeError) as exc:
        raise InputError(f"{path}: worksnap cannot write its values back ({exc})") from None
    write_atomic(real, data)


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
