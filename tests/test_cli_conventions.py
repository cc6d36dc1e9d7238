"""The command line's conventions: options anywhere, --version, pipes, run's exit codes,
reserved kinds, help examples, shell completion, progress on a terminal."""

from __future__ import annotations

import argparse
import fcntl
import io
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import threading
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import run_here as run
from tests.conftest import terminal_output, write
from worksnap import InputError, Workspace
from worksnap.arguments import VERSION, build_parser, parse
from worksnap.cli import main

SRC = str(Path(__file__).resolve().parent.parent / "src")


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, by name."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def process(
    *args: str, cwd: Path | None = None, **options: object
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    env.update(PYTHONPATH=SRC, WORKSNAP_NO_DAEMON="1")
    return subprocess.run(
        [sys.executable, "-m", "worksnap", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
        **options,  # type: ignore[call-overload]
    )


def test_global_options_also_come_after_the_command(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    code, out, err = run(capsys, "snapshot", "--root", str(root), "--session", "s1", "--json")
    assert code == 0, err
    snap = json.loads(out)
    code, out, _ = run(capsys, "list", "--json", "--root", str(root), "--session", "s1")
    assert code == 0 and [s["id"] for s in json.loads(out)] == [snap["id"]]
    # Before the command, and overridden by nothing after it.
    code, out, _ = run(capsys, "--root", str(root), "--session", "s1", "list", "--json")
    assert [s["id"] for s in json.loads(out)] == [snap["id"]]
    code, out, _ = run(capsys, "--root", str(root), "list", "--session", "other", "--json")
    assert json.loads(out) == []
    # The daemon's own help example.
    code, out, _ = run(capsys, "--root", str(root), "daemon", "status", "--json")
    assert code == 1 and json.loads(out) == {
        "running": False, "mode": "off", "reason": "WORKSNAP_NO_DAEMON is set"
    }  # fmt: skip


def test_version_answers_without_loading_the_engine(tmp_path: Path) -> None:
    assert version("worksnap") == VERSION
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "worksnap", "--version"],
        env={**env, "PYTHONPATH": SRC},
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (0, f"worksnap {VERSION}\n".encode())
    imported = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "worksnap.cli" in imported
    assert not imported & {"worksnap.workspace", "worksnap.capture", "msgspec", "blake3"}


def small_pipe() -> tuple[int, int]:
    """A pipe that holds 4 KiB, so a reader that goes away is seen after a few writes."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    return read_end, write_end


@pytest.mark.parametrize("command", ["list", "cat", "diff"])
def test_a_reader_that_goes_away_ends_the_command_quietly(root: Path, command: str) -> None:
    """`worksnap list | head -1`: no "Broken pipe" error, no traceback; 141 like git."""
    write(root, "big.txt", "".join(f"line {i}\n" for i in range(20000)))
    ws = Workspace(root)
    for i in range(120):
        ws.snapshot(step=i, label=f"snapshot number {i} with a label long enough")
    ws.close()
    write(root, "big.txt", "".join(f"changed {i}\n" for i in range(20000)))
    args = {"list": ["list"], "cat": ["cat", "latest", "big.txt"], "diff": ["diff"]}[command]
    read_end, write_end = small_pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    child = subprocess.Popen(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env={**env, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1"},
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()  # `head -1`: one line, then it goes away
    _, err = child.communicate(timeout=120)
    assert first
    assert err == b""
    assert child.returncode == 141


def test_run_a_command_that_cannot_start_exits_like_a_shell_and_snapshots_nothing(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    write(root, "not-executable.sh", "#!/bin/sh\n", mode=0o644)
    for program, expected in [
        ("surely-no-such-command-here", 127),
        (str(root / "no-such-file"), 127),
        (str(root / "not-executable.sh"), 126),
        (str(root), 126),
    ]:
        code, _, err = run(capsys, "--root", str(root), "run", "--", program)
        assert code == expected, (program, err)
        assert err.startswith("worksnap: error: ") and err.count("\n") == 1
        assert "nothing was run" in err
    assert Workspace(root).list() == []
    assert not (root / ".worksnap").exists()  # not even a store


def test_run_json_prints_one_document_and_the_commands_output_goes_to_stderr(
    root: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)  # the command writes made.txt where it runs
    script = "print('from the command'); open('made.txt', 'w').write('x'); raise SystemExit(4)"
    capfd.readouterr()
    code = main(["--root", str(root), "--json", "run", "--", sys.executable, "-c", script])
    out, err = capfd.readouterr()
    assert code == 4
    document = json.loads(out)  # exactly one JSON document on stdout
    assert "from the command" in err
    assert document["exit_code"] == 4 and document["error"] is None
    assert [s["kind"] for s in document["snapshots"]] == ["run-before", "run-after"]
    assert document["command"] == [sys.executable, "-c", script]


@pytest.mark.parametrize("kind", ["pre-restore", "undo", "redo", "checkpoint", "run-after"])
def test_reserved_kinds_are_refused(
    root: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    write(root, "a.txt", "a")
    code, out, err = run(capsys, "--root", str(root), "snapshot", "--kind", kind)
    assert (code, out) == (2, "")
    assert "is reserved" in err and err.count("\n") == 1
    assert not (root / ".worksnap").exists()
    with pytest.raises(InputError, match="is reserved"):  # the API refuses the same kinds
        Workspace(root).snapshot(kind=kind)


@pytest.mark.parametrize(
    ("kind", "why"),
    [("", "is blank"), ("  ", "is blank"), ("a\nb", "cannot be printed"),
     ("a\tb", "cannot be printed")],
)  # fmt: skip
def test_a_blank_or_unprintable_kind_is_refused_as_what_it_is(
    root: Path, capsys: pytest.CaptureFixture[str], kind: str, why: str
) -> None:
    """A blank kind, or one with a newline, was refused as "reserved" (revJ's review)."""
    write(root, "a.txt", "a")
    code, out, err = run(capsys, "--root", str(root), "snapshot", "--kind", kind)
    assert (code, out) == (2, "")
    assert why in err and "reserved" not in err and err.count("\n") == 1
    with pytest.raises(InputError, match=why):
        Workspace(root).snapshot(kind=kind)


def test_only_the_run_wrapper_takes_a_run_kind(root: Path) -> None:
    write(root, "a.txt", "a")
    ws = Workspace(root)
    taken = ws.snapshot(kind="run-before", automatic=True)
    assert taken.kind == "run-before"
    with pytest.raises(InputError, match="is reserved"):
        ws.snapshot(kind="undo", automatic=True)  # automatic allows the run kinds only


@pytest.mark.parametrize(
    "command",
    [
        ["config", "max-file-bytes", "abc"],
        ["config", "keep-last", "0"],
        ["config", "nope", "1"],
        ["config", "exclude", "remove", "foo"],
        ["remote", "remove", "typo"],
        ["remote", "add", "bad/name", "file:///nowhere"],
        ["capture", "a.txt"],
    ],
    ids=" ".join,
)
def test_a_refused_command_leaves_no_store_behind(
    root: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Exit 2 is "nothing changed": a review found four of these making the store of a
    project that had none (an empty one that a later command then took as its own)."""
    write(root, "a.txt", "a")
    code, out, err = run(capsys, "--root", str(root), *command)
    assert (code, out) == (2, ""), err
    assert err.startswith("worksnap: error: ") and err.count("\n") == 1
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"]


def test_a_path_in_neither_the_snapshot_nor_the_workspace_is_exit_2(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(root, "a.txt", "a")
    assert run(capsys, "--root", str(root), "snapshot")[0] == 0
    write(root, "a.txt", "edited")
    for args in (["restore", "latest", "no/such/path", "--yes"], ["plan", "latest", "nope"]):
        code, out, err = run(capsys, "--root", str(root), *args)
        assert (code, out) == (2, "")
        assert "is not in snapshot" in err and "nor in the workspace" in err
    assert (root / "a.txt").read_text() == "edited"
    # A path only the workspace has is a path to restore: it goes.
    write(root, "new.txt", "n")
    code, _, err = run(capsys, "--root", str(root), "restore", "latest", "new.txt", "--yes")
    assert code == 0, err
    assert not (root / "new.txt").exists() and (root / "a.txt").read_text() == "edited"


@pytest.mark.parametrize("options", [[], ["--json"], ["--root", "."]])
def test_no_command_shows_the_usage_and_the_commands(tmp_path: Path, options: list[str]) -> None:
    # A bare `worksnap` said only "the following arguments are required: COMMAND".
    done = process(*options, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, b"")
    shown = done.stderr.decode()
    assert shown.startswith("usage: worksnap ")
    assert "  restore " in shown and "  snapshot " in shown and "examples:" in shown
    assert "Traceback" not in shown


@pytest.mark.parametrize("command", ["restore", "plan", "show"])
def test_a_missing_ref_is_all_the_usage_error_names(
    capsys: pytest.CaptureFixture[str], root: Path, command: str
) -> None:
    """PATH is optional: `restore` alone names only the ref as missing (review B 08, 2)."""
    code, out, err = run(capsys, "--root", str(root), command)
    assert (code, out) == (2, "")
    assert err == (
        "worksnap: error: the following arguments are required: ref (see `worksnap --help`)\n"
    )
    optional = [
        (name, action.dest)
        for name, parser in commands().items()
        for action in parser._actions
        if not action.option_strings and action.nargs in ("*", "?") and action.required
    ]
    assert optional == []  # no optional positional is ever called required


def test_every_command_has_an_example_in_its_help() -> None:
    for name, sub in commands().items():
        text = sub.format_help()
        assert re.search(r"\bexamples?: +worksnap ", text) or "example: " in text, name
        assert "worksnap" in text.split("example", 1)[1], name


def test_bash_completion_loads_and_completes_in_a_real_bash(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    script = process("completion", "bash").stdout.decode()
    (tmp_path / "c.bash").write_text(script)
    probe = """
    source "$1" || exit 9
    complete -p worksnap || exit 8
    COMP_WORDS=(worksnap res); COMP_CWORD=1; _worksnap; echo "cmd:${COMPREPLY[*]}"
    COMP_WORDS=(worksnap --root /tmp sta); COMP_CWORD=3; _worksnap; echo "after:${COMPREPLY[*]}"
    COMP_WORDS=(worksnap undo --d); COMP_CWORD=2; _worksnap; echo "opt:${COMPREPLY[*]}"
    COMP_WORDS=(worksnap daemon st); COMP_CWORD=2; _worksnap; echo "choice:${COMPREPLY[*]}"
    COMP_WORDS=(worksnap show lat); COMP_CWORD=2; _worksnap; echo "ref:${COMPREPLY[*]}"
    """
    done = subprocess.run(
        [bash, "--norc", "-c", probe, "probe", str(tmp_path / "c.bash")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    assert lines["cmd"].split() == ["restore"]
    assert lines["after"].split() == ["status"]
    assert lines["opt"].split() == ["--dry-run"]
    assert lines["choice"].split() == ["start", "stop", "status"]
    assert lines["ref"].split() == ["latest", "latest~1"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completions_name_every_command(tmp_path: Path, shell: str) -> None:
    script = process("completion", shell).stdout.decode()
    for name in commands():
        assert re.search(rf"\b{re.escape(name)}\b", script), name
    program = shutil.which(shell)
    if program is None:
        return  # the script's text is checked above; this machine cannot load it
    path = tmp_path / f"worksnap.{shell}"
    path.write_text(script)
    if shell == "fish":
        probe = [program, "--no-config", "-c", f"source {path}; complete -C 'worksnap res'"]
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\t")[0] == "restore"
    else:
        probe = [
            program, "-f", "-c",
            f"autoload -U compinit && compinit -u -d {tmp_path}/dump && source {path} "
            "&& print -r -- $_comps[worksnap]",
        ]  # fmt: skip
        done = subprocess.run(probe, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "_worksnap"


def screen(raw: bytes) -> list[str]:
    """The lines a terminal shows after `raw`: carriage returns and erase-line applied."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for token in re.split(r"(\r\n|\r|\n|\x1b\[K)", raw.decode(errors="replace")):
        if token in ("\n", "\r\n"):
            lines.append("".join(line))
            line, column = [], 0
        elif token == "\r":
            column = 0
        elif token == "\x1b[K":
            del line[column:]
        else:
            for ch in token:
                if column < len(line):
                    line[column] = ch
                else:
                    line.append(ch)
                column += 1
    if line:
        lines.append("".join(line))
    return lines


def in_a_terminal(*args: str) -> tuple[int, bytes]:
    """Runs worksnap with stdout and stderr on a pseudo-terminal; returns what it showed."""
    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKSNAP_")}
    child = subprocess.Popen(
        [sys.executable, "-m", "worksnap", *args],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env={**env, "PYTHONPATH": SRC, "WORKSNAP_NO_DAEMON": "1", "NO_COLOR": "1"},
    )
    os.close(terminal)
    shown, _ = terminal_output(controller, child)
    return child.wait(timeout=60), shown


@pytest.mark.slow
def test_progress_shows_on_a_terminal_and_is_cleared_before_the_result(root: Path) -> None:
    for i in range(9000):
        write(root, f"d{i % 30}/f{i}.txt", f"file {i}\n")
    code, shown = in_a_terminal("--root", str(root), "snapshot")
    assert code == 0
    assert b"hashing " in shown  # progress was drawn
    lines = screen(shown)
    assert re.fullmatch(r"[0-9a-f]{12}", lines[-1]), lines[-3:]
    for i in range(9000):
        (root / f"d{i % 30}" / f"f{i}.txt").write_text("edited\n")
    code, shown = in_a_terminal("--root", str(root), "restore", "latest", "--yes")
    assert code == 0
    assert b"restoring " in shown
    assert screen(shown)[-1].startswith("restored 9000 paths in ")
    code, shown = in_a_terminal("--root", str(root), "verify")
    assert code == 0
    assert b"verifying " in shown
    assert screen(shown)[-1] == "all objects present and intact"
    # Not a terminal: no progress at all.
    done = process("--root", str(root), "verify")
    assert done.returncode == 0 and done.stderr == b""


def test_the_readme_json_contract_names_every_field(
    root: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each `--json` document's fields appear in the README's line for its command."""
    monkeypatch.chdir(root)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    contract = readme.split("## JSON contract", 1)[1].split("\n## ", 1)[0]

    def line_of(name: str) -> str:
        found = [ln for ln in contract.splitlines() if ln.startswith("- ") and f"`{name}" in ln]
        assert found, name
        return " ".join(found)

    def fields(*args: str) -> set[str]:
        code, out, err = run(capsys, "--root", str(root), "--json", *args)
        assert code in (0, 1), (args, err)
        document = json.loads(out)
        rows = document if isinstance(document, list) else [document]
        return {key for row in rows for key in row}

    write(root, "a.txt", "a")
    write(root, "big.bin", b"\0" * (3 << 20))
    cases = {
        "snapshot": ["snapshot", "--step", "1"],
        "status": ["status"],
        "list": ["list"],
        "plan REF": ["plan", "latest"],
        "restore REF`: ": ["restore", "latest", "--yes"],
        "restore REF`: ` --to": ["restore", "latest", "--to", str(tmp_path / "copy")],
        "verify": ["verify"],
        "begin": ["begin", "--step", "2"],
        "capture": ["capture", "a.txt"],
        "diff": ["diff"],
        "gc": ["gc", "--dry-run"],
        "pin": ["pin", "latest"],
        "du": ["du"],
        "config": ["config"],
        "rebind": ["rebind"],
        "run": ["run", "--", sys.executable, "-c", "pass"],
        "recover": ["recover"],
        "daemon status": ["daemon", "status"],
    }
    write(root, "a.txt", "edited")
    for name, args in cases.items():
        line = line_of(name.split("`")[0])
        for key in fields(*args):
            assert f'"{key}"' in line, (name, key)


def test_the_kept_parser_reads_the_session_from_each_commands_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`parse` keeps one parser (a daemon parses every command): the environment of the
    command it parses, not of the first one, gives the session."""
    monkeypatch.setenv("WORKSNAP_SESSION", "first")
    assert parse(["list"]).session == "first"
    monkeypatch.setenv("WORKSNAP_SESSION", "second")
    assert parse(["list"]).session == "second"
    assert parse(["--session", "given", "list"]).session == "given"
    assert parse(["list", "--session", "after"]).session == "after"
    monkeypatch.delenv("WORKSNAP_SESSION")
    assert parse(["list"]).session == "default"


def test_a_command_s_progress_line_is_its_own_in_the_daemon_s_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The daemon runs commands in threads, each writing to its client's terminal. A
    # `list` starting while a snapshot showed progress reset the one shared progress
    # state: the snapshot's result came glued to "hashing 5/10".
    from worksnap.clientctx import Context
    from worksnap.output import PROGRESS, say
    from worksnap.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    context, snapshot_err, list_err = Context(), Terminal(), Terminal()
    for name in ("stdin", "stdout", "stderr"):
        monkeypatch.setattr(sys, name, getattr(sys, name))  # put back afterwards
    monkeypatch.setattr(os, "environ", os.environ)
    context.install()
    drawn, listed = threading.Event(), threading.Event()

    def snapshot() -> None:
        context.streams[1].use(snapshot_err)
        context.streams[2].use(snapshot_err)
        PROGRESS.reporter(True)(Progress("hash", 5, 10))
        drawn.set()
        listed.wait()
        say("snapshot 1234abcd stored")

    def list_command() -> None:
        context.streams[1].use(list_err)
        context.streams[2].use(list_err)
        drawn.wait()
        PROGRESS.reporter(False)  # what opening its workspace does
        PROGRESS.clear()  # and its end
        listed.set()

    threads = [threading.Thread(target=snapshot), threading.Thread(target=list_command)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert snapshot_err.getvalue() == "\r\x1b[Khashing 5/10\r\x1b[Ksnapshot 1234abcd stored\n"
    assert list_err.getvalue() == ""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_a_path_the_user_cannot_read_says_how_to_leave_it_out(tmp_path: Path) -> None:
    """Review I 14: one directory the user may not read (`chmod 000`, a root-owned docker
    volume) stopped every snapshot and `status` with "cannot read: Permission denied",
    and nothing said that excluding it is the way on."""
    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    write(root, "priv/secret.txt", "s")
    os.chmod(root / "priv", 0o000)
    src = str(Path(__file__).resolve().parents[1] / "src")
    # Root without the capabilities that pass over permission bits: a user who may not read.
    user = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--",
            sys.executable, "-m", "worksnap", "--root", str(root)]  # fmt: skip

    def as_user(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": src, "WORKSNAP_NO_DAEMON": "1"}
        return subprocess.run([*user, *args], capture_output=True, text=True, env=env,
                              timeout=120, check=False)  # fmt: skip

    try:
        done = as_user("snapshot")
        assert (done.returncode, done.stdout) == (1, ""), done.stderr
        assert done.stderr == (
            "worksnap: error: priv: cannot read: Permission denied "
            "(to leave it out: worksnap config exclude add priv)\n"
        )
        assert as_user("config", "exclude", "add", "priv").returncode == 0
        done = as_user("snapshot")
        assert done.returncode == 0, done.stderr
    finally:
        os.chmod(root / "priv", 0o700)
