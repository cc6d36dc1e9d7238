"""`worksnap hook claude-code` on the documented event shapes, and `hooks install|uninstall`.

The events and the settings file are fixtures in tests/fixtures/claude_code (SOURCES.md
says where their shapes come from); the Claude Code binary is not needed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write
from worksnap import Workspace
from worksnap.history import check_session_name
from worksnap.hooks import install, session_name, uninstall

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
AGENT_SESSION = "9ecf22fa-edf8-4332-ae85-b6d5456eda64"


OUTSIDE_CLAUDE = {k: v for k, v in os.environ.items() if k != "CLAUDE_PROJECT_DIR"}
"""The environment of a hook Claude Code did not start (the suite may run inside one)."""


def event(name: str, root: Path) -> str:
    return (FIXTURES / f"{name}.json").read_text().replace("@ROOT@", str(root))


def hook(root: Path, name: str, *, cwd: Path | None = None, text: str | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Runs the hook as Claude Code does: a process, the event on stdin, in the project."""
    return subprocess.run(
        [sys.executable, "-m", "worksnap", "hook", "claude-code"],
        input=event(name, root) if text is None else text,
        capture_output=True,
        text=True,
        cwd=cwd or root,
        env={**OUTSIDE_CLAUDE, "WORKSNAP_NO_DAEMON": "1", **(env or {})},
        check=False,
    )


WITH_A_DAEMON = {k: v for k, v in OUTSIDE_CLAUDE.items() if k != "WORKSNAP_NO_DAEMON"}
"""The environment of a command a running daemon may serve."""


def in_the_daemon(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs a command line on `root` as a process, which a running daemon may serve."""
    return subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        capture_output=True, text=True, env=WITH_A_DAEMON, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(root, "README.md", "hello\n")
    write(root, "src/app.py", "print(1)\n")
    return root


def snapshots(root: Path) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), "--session", AGENT_SESSION,
         "--json", "list"],
        capture_output=True, text=True, check=True, env={**os.environ, "WORKSNAP_NO_DAEMON": "1"},
    ).stdout  # fmt: skip
    rows: list[dict[str, object]] = json.loads(out)
    return rows


def test_a_prompt_is_a_step_and_a_file_tool_a_snapshot_in_the_same_step(project: Path) -> None:
    first = hook(project, "user_prompt_submit", cwd=project / "src")
    assert (first.returncode, first.stdout, first.stderr) == (0, "", "")
    write(project, "src/flags.py", "VERBOSE = False\n")
    tool = hook(project, "post_tool_use_write")
    assert (tool.returncode, tool.stdout) == (0, "")
    second = hook(project, "user_prompt_submit")
    assert (second.returncode, second.stdout) == (0, "")
    rows = snapshots(project)
    assert [(r["step"], r["kind"]) for r in rows] == [(1, "step"), (0, "tool"), (0, "step")]
    assert rows[2]["label"] == "Add a --verbose flag to the CLI"
    assert rows[1]["label"] == f"Write {project}/src/flags.py"
    with Workspace(project, session=AGENT_SESSION) as ws:
        step0 = ws.load("step:0")
        assert step0.kind == "tool"  # the newest snapshot of step 0
        prompt = ws.load(str(rows[2]["id"]))
    assert prompt.meta == {
        "agent": "claude-code",
        "session_id": AGENT_SESSION,
        "hook_event": "UserPromptSubmit",
        "transcript_path": json.loads(event("user_prompt_submit", project))["transcript_path"],
        "prompt_id": "p-0001",
    }
    assert {e.path for e in step0.entries} == {"README.md", "src/app.py", "src/flags.py"}


def test_prompts_that_arrive_together_get_distinct_consecutive_steps(project: Path) -> None:
    """Ten UserPromptSubmit events of one session at once, each its own process: the
    next step was read before the store lock, so several took one number and `rewind N`
    picked one of them silently (review A, 11). Numbering is now one at a time."""
    assert hook(project, "user_prompt_submit").returncode == 0  # step 0
    template = json.loads(event("user_prompt_submit", project))
    env = {**os.environ, "WORKSNAP_NO_DAEMON": "1"}
    command = [sys.executable, "-m", "worksnap", "hook", "claude-code"]
    pipe = subprocess.PIPE
    hooks = [
        subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, cwd=project, env=env)
        for _ in range(10)
    ]
    for i, process in enumerate(hooks):  # all started first: the events go in together
        assert process.stdin is not None
        process.stdin.write(json.dumps({**template, "prompt": f"prompt {i}"}).encode())
        process.stdin.close()
    for process in hooks:
        assert process.stdout is not None and process.stderr is not None
        assert process.wait(timeout=120) == 0
        assert (process.stdout.read(), process.stderr.read()) == (b"", b"")
        process.stdout.close()
        process.stderr.close()
    rows = snapshots(project)  # newest first
    assert [r["step"] for r in rows] == list(range(10, -1, -1))
    assert {r["label"] for r in rows[:10]} == {f"prompt {i}" for i in range(10)}
    with Workspace(project, session=AGENT_SESSION) as ws:
        assert ws.load("step:10").id == rows[0]["id"]


def test_a_rewind_to_a_prompt_s_step_takes_the_tree_back(project: Path) -> None:
    assert hook(project, "user_prompt_submit").returncode == 0
    write(project, "src/app.py", "print(2)\n")
    write(project, "junk.txt", "made by the agent")
    with Workspace(project, session=AGENT_SESSION) as ws:
        prompt = next(s for s in ws.list() if s.kind == "step")
        assert ws.restore(prompt.id).ok
    assert (project / "src/app.py").read_text() == "print(1)\n"
    assert not (project / "junk.txt").exists()


def test_a_tool_that_changes_nothing_and_an_unknown_event_record_nothing(project: Path) -> None:
    assert hook(project, "user_prompt_submit").returncode == 0
    read = hook(project, "post_tool_use_read")
    other = hook(project, "", text=json.dumps(
        {"session_id": AGENT_SESSION, "hook_event_name": "Stop", "cwd": str(project)}
    ))  # fmt: skip
    assert (read.returncode, read.stdout, read.stderr) == (0, "", "")
    assert (other.returncode, other.stdout, other.stderr) == (0, "", "")
    assert len(snapshots(project)) == 1


def test_bash_is_a_file_tool(project: Path) -> None:
    assert hook(project, "post_tool_use_bash").returncode == 0
    [row] = snapshots(project)
    assert (row["kind"], row["step"], row["label"]) == ("tool", 0, "Bash rm -rf build && make")


def test_session_start_makes_the_store_and_records_nothing(project: Path) -> None:
    result = hook(project, "session_start")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert (project / ".worksnap").is_dir()
    assert snapshots(project) == []


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"hook_event_name": "Stop"}', ""])
def test_an_unreadable_event_is_one_line_and_exit_0(project: Path, text: str) -> None:
    result = hook(project, "", text=text)
    assert (result.returncode, result.stdout) == (0, "")
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("worksnap: hook: ")


def test_a_failure_is_one_line_and_exit_0_unless_configured_to_block(project: Path) -> None:
    write(project, ".worksnap/config.json", "{}")
    os.mkfifo(project / ".worksnap" / "snapshots")  # the store cannot be written
    result = hook(project, "user_prompt_submit")
    assert (result.returncode, result.stdout) == (0, "")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("worksnap: hook: error: ")
    write(project, ".worksnap/config.json", '{"hooks_block": true}')
    blocked = hook(project, "user_prompt_submit")
    assert (blocked.returncode, blocked.stdout) == (2, "")
    assert len(blocked.stderr.splitlines()) == 1


def test_the_store_s_exclusions_apply_to_the_hooks(project: Path) -> None:
    write(project, ".agent-state.json", "{}")
    write(project, "trajectory.db", "db")
    write(project, "trajectory.db-wal", "wal")
    with Workspace(project) as ws:
        ws.set_config("max-file-bytes", "1M")
    subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(project), "config", "exclude", "add",
         ".agent-*.json", "trajectory.db"], check=True, capture_output=True,
    )  # fmt: skip
    assert hook(project, "user_prompt_submit").returncode == 0
    with Workspace(project, session=AGENT_SESSION) as ws:
        paths = {e.path for e in ws.load("step:0").entries}
    assert paths == {"README.md", "src/app.py"}


@pytest.mark.parametrize(
    ("agent_id", "expected"),
    [
        (AGENT_SESSION, AGENT_SESSION),
        ("abc/def ghi", "abc-def-ghi-"),
        ("x" * 80, "x" * 55 + "-"),
        ("///", "claude-"),
        ("-abc", "abc-"),  # a valid name starts with a letter or digit: these were refused,
        ("..", "claude-"),  # and every hook of the session failed
        ("_x.", "x-"),
    ],
)
def test_an_agent_session_becomes_a_valid_session_name(agent_id: str, expected: str) -> None:
    name = session_name(agent_id)
    assert name.startswith(expected)
    assert check_session_name(name) == name
    assert name == session_name(agent_id)
    assert len(name) <= 64
    if agent_id != AGENT_SESSION:
        assert name != session_name(agent_id + "!")  # a digest of the whole id


# -- hooks install / uninstall ---------------------------------------------------


def worksnap(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worksnap", *args],
        capture_output=True, text=True, cwd=cwd, check=False,
        env={**os.environ, "HOME": str(home), "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip


def test_installed_by_python_m_with_no_worksnap_on_the_path_the_hook_runs(
    project: Path, tmp_path: Path
) -> None:
    """A review installed the hooks with `python -m worksnap` where no `worksnap` was on
    the PATH: the settings named the bare command, and every hook exited 127."""
    bare_path = "/usr/bin:/bin"
    assert shutil.which("worksnap", path=bare_path) is None
    installed = subprocess.run(
        [sys.executable, "-m", "worksnap", "hooks", "install", "claude-code"],
        capture_output=True, text=True, cwd=project, check=False,
        env={**OUTSIDE_CLAUDE, "PATH": bare_path, "HOME": str(tmp_path),
             "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    [group] = settings["hooks"]["UserPromptSubmit"]
    [entry] = group["hooks"]
    assert shlex.split(entry["command"])[:3] == [sys.executable, "-m", "worksnap"]
    ran = subprocess.run(  # as Claude Code runs it: by a shell, in the project
        ["/bin/sh", "-c", entry["command"]], input=event("user_prompt_submit", project),
        capture_output=True, text=True, cwd=project, check=False,
        env={**OUTSIDE_CLAUDE, "PATH": bare_path, "WORKSNAP_NO_DAEMON": "1"},
    )  # fmt: skip
    assert (ran.returncode, ran.stderr) == (0, "")
    [row] = snapshots(project)
    assert (row["kind"], row["step"]) == ("step", 0)
    gone = worksnap("hooks", "uninstall", "claude-code", cwd=project, home=tmp_path)
    assert gone.returncode == 0 and "removed from" in gone.stdout
    assert "hooks" not in json.loads((project / ".claude" / "settings.json").read_text())


def test_install_keeps_other_settings_is_idempotent_and_uninstall_restores(
    project: Path, tmp_path: Path
) -> None:
    settings_file = project / ".claude" / "settings.json"
    original = (FIXTURES / "settings.json").read_text()
    write(project, ".claude/settings.json", original)
    first = worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path)
    assert first.returncode == 0, first.stderr
    installed = settings_file.read_text()
    settings = json.loads(installed)
    assert list(settings) == ["permissions", "env", "hooks", "model"]  # key order kept
    assert settings["permissions"] == json.loads(original)["permissions"]
    post = settings["hooks"]["PostToolUse"]
    assert post[0] == json.loads(original)["hooks"]["PostToolUse"][0]  # theirs, first
    assert post[1]["matcher"] == "Write|Edit|MultiEdit|NotebookEdit|Bash"
    for name in ("SessionStart", "UserPromptSubmit", "PostToolUse"):
        [ours] = [
            h for g in settings["hooks"][name] for h in g["hooks"] if "worksnap" in h["command"]
        ]
        assert ours["command"].endswith("hook claude-code")
    again = worksnap("hooks", "install", "claude-code", "--json", cwd=project, home=tmp_path)
    assert json.loads(again.stdout)["changed"] is False
    assert settings_file.read_text() == installed
    gone = worksnap("hooks", "uninstall", "claude-code", cwd=project, home=tmp_path)
    assert gone.returncode == 0
    assert json.loads(settings_file.read_text()) == json.loads(original)
    assert list(json.loads(settings_file.read_text())) == list(json.loads(original))


def test_user_settings_go_to_the_home_directory(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = worksnap("hooks", "install", "claude-code", "--user", cwd=project, home=home)
    assert result.returncode == 0, result.stderr
    assert "UserPromptSubmit" in json.loads((home / ".claude/settings.json").read_text())["hooks"]
    assert not (project / ".claude").exists()
    worksnap("hooks", "uninstall", "claude-code", "--user", cwd=project, home=home)
    assert json.loads((home / ".claude/settings.json").read_text()) == {}


def test_uninstall_leaves_the_event_lists_it_never_wrote_to(project: Path, tmp_path: Path) -> None:
    """Only a list that held a worksnap entry goes when it is left empty (review A, 12)."""
    settings_file = project / ".claude" / "settings.json"
    original = '{"hooks": {"Stop": [], "PostToolUse": [{"matcher": "Write", "hooks": []}]}}\n'
    write(project, ".claude/settings.json", original)
    assert worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path).returncode == 0
    gone = worksnap("hooks", "uninstall", "claude-code", cwd=project, home=tmp_path)
    assert gone.returncode == 0, gone.stderr
    assert json.loads(settings_file.read_text()) == json.loads(original)


def test_an_unparseable_settings_file_is_refused_and_left_alone(
    project: Path, tmp_path: Path
) -> None:
    text = '{\n  // a comment Claude Code would not take either\n  "model": "x"\n}\n'
    write(project, ".claude/settings.json", text)
    result = worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert "not valid JSON" in result.stderr
    assert (project / ".claude/settings.json").read_text() == text


@pytest.mark.parametrize(
    ("hooks", "where"),
    [
        ({"SessionStart": [{"hooks": 5}]}, "hooks.SessionStart[0].hooks is not a list"),
        ({"Stop": ["echo"]}, "hooks.Stop[0] is not an object"),
        ({"Stop": [{"hooks": [7]}]}, "hooks.Stop[0].hooks[0] is not an object"),
        ({"Stop": [{"hooks": [{"type": "command", "command": ["worksnap"]}]}]},
         "hooks.Stop[0].hooks[0].command is not a string"),
        ({"Stop": {"hooks": []}}, "hooks.Stop is not a list"),
        (["SessionStart"], "hooks is not an object"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("action", ["install", "uninstall"])
def test_a_settings_file_of_another_shape_is_refused_in_one_line_and_left_alone(
    project: Path, tmp_path: Path, hooks: object, where: str, action: str
) -> None:
    """A group's `"hooks": 5` ended `hooks install` in a traceback (a review)."""
    text = json.dumps({"model": "x", "hooks": hooks}, indent=4)
    write(project, ".claude/settings.json", text)
    result = worksnap("hooks", action, "claude-code", cwd=project, home=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    settings_file = project / ".claude" / "settings.json"
    assert result.stderr.splitlines() == [
        f"worksnap: error: {settings_file}: {where}; fix it by hand, worksnap leaves it as it is"
    ]
    assert settings_file.read_text() == text


def test_uninstall_removes_only_our_hook_from_a_group_someone_edited() -> None:
    settings = {"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": "/opt/bin/worksnap hook claude-code"},
        {"type": "command", "command": "echo mine"},
    ]}]}}  # fmt: skip
    assert uninstall(settings)
    assert settings == {
        "hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}
    }
    assert not uninstall(settings)
    assert install(settings, "worksnap hook claude-code")
    assert not install(settings, "worksnap hook claude-code")


def test_a_symlinked_settings_file_is_edited_where_it_points(project: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    write(dotfiles, "claude-settings.json", (FIXTURES / "settings.json").read_text())
    (project / ".claude").mkdir()
    (project / ".claude/settings.json").symlink_to(dotfiles / "claude-settings.json")
    assert worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path).returncode == 0
    assert (project / ".claude/settings.json").is_symlink()
    assert (
        "UserPromptSubmit" in json.loads((dotfiles / "claude-settings.json").read_text())["hooks"]
    )


def test_a_fifo_for_a_settings_file_is_refused_without_blocking(
    project: Path, tmp_path: Path
) -> None:
    (project / ".claude").mkdir()
    os.mkfifo(project / ".claude/settings.json")
    result = worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path)
    assert result.returncode == 2
    assert "not a regular file" in result.stderr


@pytest.mark.slow
def test_the_hook_snapshots_the_project_wherever_the_agent_cd_ed(
    project: Path, tmp_path: Path
) -> None:
    """The event's `cwd` is where the agent's shell last went (here another repository);
    Claude Code names the project in `$CLAUDE_PROJECT_DIR`, and the step is taken there."""
    elsewhere = tmp_path / "other-repo"
    write(elsewhere, "notes.txt", "not this project\n")
    subprocess.run(["git", "init", "-q", str(elsewhere)], check=True)
    moved = event("user_prompt_submit", project).replace(str(project), str(elsewhere))
    result = hook(project, "user_prompt_submit", cwd=elsewhere, text=moved,
                  env={"CLAUDE_PROJECT_DIR": str(project)})  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    [row] = snapshots(project)
    assert (row["kind"], row["step"]) == ("step", 0)
    assert not (elsewhere / ".git" / "worksnap").exists()
    assert not (elsewhere / ".worksnap").exists()


@pytest.mark.parametrize("from_project", [False, True], ids=["elsewhere", "in-the-project"])
def test_with_a_daemon_the_hook_runs_in_it(
    project: Path, tmp_path: Path, *, from_project: bool
) -> None:
    """Run from the project, the fast client must not hand the daemon a bare `hook`:
    the event is read (and its cwd entered) first, then forwarded with `--event`."""
    assert in_the_daemon(project, "daemon", "start").returncode == 0
    try:
        before = json.loads(in_the_daemon(project, "--json", "daemon", "status").stdout)["requests"]
        result = subprocess.run(
            [sys.executable, "-m", "worksnap", "hook", "claude-code"],
            input=event("user_prompt_submit", project), capture_output=True, text=True,
            cwd=project if from_project else tmp_path,  # the event's cwd names the project
            env=WITH_A_DAEMON, timeout=60, check=False,
        )  # fmt: skip
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        after = json.loads(in_the_daemon(project, "--json", "daemon", "status").stdout)["requests"]
        assert after == before + 1
    finally:
        in_the_daemon(project, "daemon", "stop")
    [row] = snapshots(project)
    assert (row["kind"], row["step"]) == ("step", 0)


def test_install_keeps_the_settings_file_private_and_refuses_what_json_cannot_write(
    project: Path, tmp_path: Path
) -> None:
    """A review found a 0600 settings file (it may hold `env` secrets) written back 0644,
    `1e999` written back as `Infinity` (not JSON), and a lone surrogate escape or a
    100,000-deep document ending in a traceback."""
    settings_file = project / ".claude" / "settings.json"
    write(project, ".claude/settings.json", '{"env": {"TOKEN": "secret"}}\n', mode=0o600)
    done = worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
    for text in ('{"n": 1e999}\n', '{"n": NaN}\n', '{"s": "\\ud800"}\n', "[" * 100_000):
        settings_file.write_text(text)
        done = worksnap("hooks", "install", "claude-code", cwd=project, home=tmp_path)
        assert done.returncode == 2, (text[:20], done.stderr)
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert settings_file.read_text() == text  # left as it is


def test_a_worksnap_whose_path_has_a_space_is_installed_quoted(
    project: Path, tmp_path: Path
) -> None:
    """A review found the full path written unquoted: the shell ran `/my` (127), a second
    install added the hooks again and uninstall left them all."""
    script = tmp_path / "my tools" / "worksnap"
    src = Path(__file__).resolve().parent.parent / "src"
    write(tmp_path, "my tools/worksnap", f"#!{sys.executable}\nimport sys\n"
          f"sys.path.insert(0, {str(src)!r})\nfrom worksnap.__main__ import main\n"
          "sys.exit(main())\n", mode=0o755)  # fmt: skip
    env = {**os.environ, "HOME": str(tmp_path), "WORKSNAP_NO_DAEMON": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], capture_output=True, text=True,
                              cwd=project, env=env, check=False)  # fmt: skip

    assert run("hooks", "install", "claude-code").returncode == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    [command] = {h["command"] for g in settings["hooks"]["UserPromptSubmit"] for h in g["hooks"]}
    assert command == f"'{script}' hook claude-code"
    event = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": AGENT_SESSION,
                        "cwd": str(project), "prompt": "go"})  # fmt: skip
    ran = subprocess.run(command, shell=True, input=event, text=True, capture_output=True,
                         env=env, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == ""  # the snapshot taken (a hook that fails says so, and exits 0)
    assert json.loads(run("--json", "list", "--all").stdout) != []
    assert json.loads(run("--json", "hooks", "install", "claude-code").stdout)["changed"] is False
    assert run("hooks", "uninstall", "claude-code").returncode == 0
    assert "worksnap" not in (project / ".claude" / "settings.json").read_text()


HOLDER = r"""
import sys
from worksnap import Workspace
with Workspace(sys.argv[1]) as ws, ws.locks.exclusive("gc"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.mark.slow
def test_a_hook_gives_up_on_a_busy_store_in_time_and_says_so(project: Path) -> None:
    """A store held by another process's gc: the hook says so before the agent kills it.

    It waited the lock's 60 s, killed by Claude Code at 30 s with nothing said (a review).
    The holder lets go only after the hook has returned: the hook gave up by itself, at
    the wait it announces, which leaves half the installed timeout.
    """
    from worksnap import hooks

    assert hooks.LOCK_WAIT_SECONDS <= hooks.TIMEOUT_SECONDS / 2  # the rest: start, snapshot
    Workspace(project).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(project)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = hook(project, "user_prompt_submit", env={"CLAUDE_PROJECT_DIR": str(project)})
        assert holder.poll() is None  # still holding
    finally:
        holder.communicate("go\n", timeout=60)
    assert (result.returncode, result.stdout) == (0, "")
    assert len(result.stderr.splitlines()) == 1, result.stderr  # (no wait notice before it)
    assert result.stderr.startswith(
        "worksnap: hook: error: no snapshot for UserPromptSubmit, "
        f"gave up after {hooks.LOCK_WAIT_SECONDS:g} s: store "
    )
    assert f"busy (held by pid {holder.pid} on " in result.stderr and ": gc)" in result.stderr
    assert snapshots(project) == []


@pytest.mark.slow
def test_a_hook_the_daemon_serves_gives_up_in_time_on_a_workspace_it_has_lent(
    project: Path,
) -> None:
    """A restore run through the daemon, sitting at its question, holds the daemon's
    workspace: a hook the daemon served waited for it without a limit, and the agent
    killed it at its timeout, with nothing said and no snapshot (stop 39's review noted
    it). It gives up within the hook's wait, all its waits together, and says so."""
    import pty
    import select

    from worksnap import hooks

    target = in_the_daemon(project, "snapshot").stdout.strip()
    write(project, "edited.txt", "the user's\n")
    assert in_the_daemon(project, "daemon", "start").returncode == 0
    controller, terminal = pty.openpty()
    try:
        restore = subprocess.Popen(
            [sys.executable, "-m", "worksnap", "--root", str(project), "restore", target],
            stdin=terminal, stdout=terminal, stderr=terminal, env=WITH_A_DAEMON,
        )  # fmt: skip
        shown = b""
        while b"[y/N] " not in shown:
            assert select.select([controller], [], [], 60)[0], shown
            shown += os.read(controller, 65536)
        served = json.loads(in_the_daemon(project, "--json", "daemon", "status").stdout)["requests"]
        result = subprocess.run(
            [sys.executable, "-m", "worksnap", "hook", "claude-code"],
            input=event("user_prompt_submit", project), capture_output=True, text=True,
            cwd=project, env={**WITH_A_DAEMON, "CLAUDE_PROJECT_DIR": str(project)}, timeout=60,
            check=False,
        )  # fmt: skip
        assert restore.poll() is None  # still at its question: the hook gave up by itself
        after = json.loads(in_the_daemon(project, "--json", "daemon", "status").stdout)["requests"]
        os.write(controller, b"n\n")
        assert restore.wait(timeout=60) == 1
    finally:
        in_the_daemon(project, "daemon", "stop")
        os.close(terminal)
        os.close(controller)
    assert after == served + 1  # the hook was the daemon's
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == (
        "worksnap: hook: error: no snapshot for UserPromptSubmit, gave up after "
        f"{hooks.LOCK_WAIT_SECONDS:g} s: the daemon is running another command on this "
        "workspace (a restore may be waiting at its question)\n"
    )
    assert snapshots(project) == []
    assert (project / "edited.txt").read_text() == "the user's\n"


@pytest.mark.parametrize("given", ["env", "cwd"])
def test_a_relative_project_dir_takes_no_snapshot_elsewhere(project: Path, given: str) -> None:
    """A review gave the hook `CLAUDE_PROJECT_DIR=..` (or an event `cwd` of `..`) from a
    folder of the project: read against the hook's own directory, it snapshotted the
    folder above the project (82 MiB) into a store of its own and started a daemon
    there. Claude Code gives absolute paths: a relative one is said, nothing is taken."""
    below = project / "src"
    text = event("user_prompt_submit", project).replace(str(project), "..")
    env = {"CLAUDE_PROJECT_DIR": ".."} if given == "env" else {}
    result = hook(project, "user_prompt_submit", cwd=below,
                  text=text if given == "cwd" else None, env=env)  # fmt: skip
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert result.stderr.count("\n") == 1 and "is not an absolute path (..)" in result.stderr
    assert not (project.parent / ".worksnap").exists()
    assert not (project / ".worksnap").exists()
