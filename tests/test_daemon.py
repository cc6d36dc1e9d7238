"""The daemon: forwarded commands behave exactly as when run directly; it gets out of the way.

Every test runs real processes: a daemon started with `worksnap daemon start`, and
clients that are ordinary `python -m worksnap` runs. Whether a command really ran in
the daemon is read from its request count (`daemon status --json`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.gitrun import GIT, init_repo
from tests.conftest import terminal_output, tree_state, write
from worksnap import autostart, client, daemon
from worksnap.layout import StorePaths

SRC = str(Path(__file__).resolve().parent.parent / "src")

pytestmark = pytest.mark.slow  # real daemons and client processes


@pytest.fixture(autouse=True)
def daemons_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the daemon: commands may use one (conftest turns it off)."""
    monkeypatch.delenv("WORKSNAP_NO_DAEMON", raising=False)


def cli(
    root: Path, *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> tuple[int, str, str]:
    """Runs `worksnap --root ROOT ARGS` in a fresh process; returns (exit code, stdout, stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    full_env.update(PYTHONPATH=SRC, **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=full_env,
        input=stdin,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def direct(root: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    return cli(root, *args, env={**(env or {}), "WORKSNAP_NO_DAEMON": "1"})


def status(root: Path) -> dict[str, object]:
    code, out, _ = cli(root, "--json", "daemon", "status")
    result = json.loads(out)
    assert isinstance(result, dict)
    assert code == (0 if result["running"] else 1)
    return result


def requests(root: Path) -> int:
    count = status(root)["requests"]
    assert isinstance(count, int)
    return count


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """A workspace with a few files and a running daemon (stopped afterwards)."""
    root = tmp_path / "ws"
    write(root, "src/app.py", "print('v1')\n")
    write(root, "README", "hello\n")
    write(root, ".gitignore", "*.log\n")
    write(root, "build.log", "noise\n")
    code, out, err = cli(root, "daemon", "start")
    assert code == 0, err
    assert "serving" in out
    yield root
    cli(root, "daemon", "stop")
    pid = _pid_or_none(root)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def _pid_or_none(root: Path) -> int | None:
    answer = client.request(str(root / ".worksnap"), "status")
    return None if answer is None else int(answer["pid"])


def test_commands_run_in_the_daemon_with_the_same_results(served: Path) -> None:
    root = served
    code, out, err = cli(root, "--json", "snapshot", "--label", "one")
    assert code == 0, err
    first = json.loads(out)
    assert requests(root) == 1

    write(root, "src/app.py", "print('v2')\n")
    write(root, "new.txt", "new\n")
    (root / "README").unlink()
    # The daemon's watched view and a direct full scan see the same changes.
    via_daemon = cli(root, "--json", "plan", first["id"])
    assert via_daemon == direct(root, "--json", "plan", first["id"])
    assert json.loads(via_daemon[1])["changes"] == [
        {"op": "D", "path": "README"},
        {"op": "A", "path": "new.txt"},
        {"op": "M", "path": "src/app.py"},
    ]
    code, out, _ = cli(root, "--json", "snapshot")
    second = json.loads(out)
    code, out, _ = direct(root, "--json", "snapshot")
    assert json.loads(out)["tree"] == second["tree"]
    assert second["tree"] != first["tree"]
    assert requests(root) == 3


def test_restore_through_the_daemon_is_byte_exact(served: Path) -> None:
    root = served
    code, out, _ = cli(root, "snapshot")
    target = out.strip()
    before = tree_state(root)
    write(root, "src/app.py", "broken\n")
    write(root, "junk/a.txt", "junk\n")
    (root / "README").unlink()
    code, out, err = cli(root, "restore", target, "--yes")
    assert code == 0, err
    assert "restored 4 paths" in out  # junk/ and junk/a.txt
    assert tree_state(root) == before
    assert (root / "build.log").read_text() == "noise\n"  # ignored: never touched
    code, _, err = cli(root, "undo")
    assert code == 0, err
    assert (root / "src/app.py").read_text() == "broken\n"
    assert requests(root) == 3


def test_a_restore_in_the_daemon_keeps_the_clients_directory_and_the_root_works_once_gone(
    served: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore run through the daemon from a directory added since keeps it, emptied (the
    daemon runs in the client's directory); once that directory is removed, `--root ROOT
    undo` from there works: the client, which has no directory to send, runs it itself (it
    failed: "No such file or directory: the current directory"; stop 43's review)."""
    root = served
    assert cli(root, "snapshot")[0] == 0
    write(root, "new/sub/x.txt", "x\n")
    before = requests(root)
    monkeypatch.chdir(root / "new" / "sub")
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "restore", "latest", "--yes"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**env, "PYTHONPATH": SRC},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p.name for p in (root / "new").rglob("*")] == ["sub"]
    assert "new/sub left as it is: the directory you are in" in done.stderr
    assert requests(root) == before + 1  # the daemon ran it
    assert done.stdout.endswith("(undo it with: worksnap undo)\n")
    shutil.rmtree(root / "new")
    code, _, err = cli(root, "undo", "--yes")  # from the removed directory
    assert code == 0, err
    assert (root / "new" / "sub" / "x.txt").read_text() == "x\n"
    assert requests(root) == before + 1  # run by the client itself


def test_errors_exit_codes_and_session_come_from_the_client(served: Path) -> None:
    root = served
    code, out, err = cli(root, "show", "nope")
    assert (code, out) == (2, "")
    assert err == "worksnap: error: no snapshot matches 'nope'\n"
    cli(root, "snapshot", "--label", "in s2", env={"WORKSNAP_SESSION": "s2"})
    code, out, _ = cli(root, "--json", "list", env={"WORKSNAP_SESSION": "s2"})
    assert [s["label"] for s in json.loads(out)] == ["in s2"]
    code, out, _ = cli(root, "--json", "list")
    assert json.loads(out) == []  # the default session has none
    assert requests(root) == 4


def test_a_path_named_dashdash_through_the_daemon_keeps_it_watching(served: Path) -> None:
    # `cat REF -- --` crashed with a TypeError (argparse dropped the second `--`), and a
    # crash in the daemon drops its workspaces: `daemon status` then said "not watching".
    root = served
    write(root, "--", "dashes\n")
    assert cli(root, "snapshot")[0] == 0
    before = requests(root)
    assert cli(root, "cat", "latest", "--", "--") == (0, "dashes\n", "")
    assert requests(root) == before + 1  # it ran in the daemon
    code, out, err = cli(root, "daemon", "status")
    assert code == 0, err
    assert ", watching, " in out.splitlines()[0]


def test_relative_paths_are_the_clients(served: Path) -> None:
    root = served
    target = cli(root, "snapshot")[1].strip()
    write(root, "src/app.py", "changed\n")
    write(root, "README", "changed\n")
    full_env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", "--root", "..", "restore", target, "src/app.py", "-y"],
        cwd=root / "src",
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (root / "src/app.py").read_text() == "print('v1')\n"
    assert (root / "README").read_text() == "changed\n"  # not selected
    assert requests(root) == 2


def test_a_killed_daemon_leaves_commands_working(served: Path) -> None:
    root = served
    pid = _pid_or_none(root)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    assert (Path(StorePaths(str(root / ".worksnap")).socket)).exists()  # left behind
    code, out, err = cli(root, "--json", "snapshot")
    assert code == 0, err
    assert json.loads(out)["files"] == 3
    assert status(root)["running"] is False
    code, out, err = cli(root, "daemon", "start")  # replaces the dead socket
    assert code == 0, err
    assert requests(root) == 0


def test_stop_and_idle_timeout_remove_the_socket(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a", "a")
    sock = Path(StorePaths(str(root / ".worksnap")).socket)
    code, _, err = cli(root, "daemon", "start", "--idle", "0.5")
    assert code == 0, err
    pid = _pid_or_none(root)
    assert pid is not None
    _wait_gone(pid)  # checks every few seconds; gone once idle
    assert not sock.exists()
    log = root / ".worksnap" / "daemon.log"  # each daemon's last line says why it left
    assert log.read_text().endswith(f"daemon {pid} stopped: idle for 0.5 s\n")
    code, _, _ = cli(root, "daemon", "start")
    assert code == 0
    second = _pid_or_none(root)
    code, out, _ = cli(root, "daemon", "stop")
    assert (code, out) == (0, "daemon stopped\n")
    assert not sock.exists()
    assert second is not None
    _wait_gone(second)
    assert log.read_text().endswith(f"daemon {second} stopped: asked to (daemon stop)\n")
    assert cli(root, "daemon", "stop")[1] == f"no daemon was running for {root}/.worksnap\n"
    assert cli(root, "daemon", "status")[0] == 1


def test_a_daemon_started_meanwhile_leaves_the_serving_ones_log_whole(
    served: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two starts racing (`config daemon true`, then `daemon start`): the one that lost
    # emptied the log the one serving goes on writing to (a review).
    monkeypatch.setenv("PYTHONPATH", SRC)
    log = Path(StorePaths(str(served / ".worksnap")).daemon_log)
    before = log.read_text()
    assert " serving " in before
    pid = daemon.spawn(str(served), str(served / ".worksnap"), idle=60, force=False)
    assert os.waitpid(pid, 0)[1] != 0  # it found one serving, and gave up
    after = log.read_text()
    assert after.startswith(before)
    assert "a daemon is already running" in after[len(before) :]
    assert status(served)["running"] is True


def test_the_log_is_kept_to_its_newest_lines_when_a_daemon_starts(
    served: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appended to by every daemon and never truncated, the log grew for ever, and past
    1 MiB a failed start could no longer read its last line to say why. A start keeps
    its newest 64 KiB (whole lines) once it has grown past 256 KiB."""
    monkeypatch.setenv("PYTHONPATH", SRC)
    log = Path(StorePaths(str(served / ".worksnap")).daemon_log)
    log.write_bytes(b"".join(b"old line %07d\n" % i for i in range(100_000)))  # 1.6 MB
    pid = daemon.spawn(str(served), str(served / ".worksnap"), idle=60, force=False)
    assert os.waitpid(pid, 0)[1] != 0  # it found one serving, and gave up
    lines = log.read_text().splitlines()
    assert lines[0].startswith("old line ") and lines[0] != "old line 0000000"
    assert "old line 0099999" in lines and "a daemon is already running" in lines[-1]
    assert 60 * 1024 < log.stat().st_size < 70 * 1024
    assert log.stat().st_mode & 0o777 == 0o600


def test_sigterm_stops_it_cleanly(served: Path) -> None:
    pid = _pid_or_none(served)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    _wait_gone(pid)
    assert not (Path(StorePaths(str(served / ".worksnap")).socket)).exists()
    assert f"daemon {pid} stopped: SIGTERM\n" in (served / ".worksnap" / "daemon.log").read_text()


def test_a_daemon_running_other_code_is_bypassed(served: Path) -> None:
    root = served
    store = str(root / ".worksnap")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(StorePaths(store).socket)
    with sock:
        message = {"op": "run", "protocol": client.PROTOCOL, "code": [], "argv": ["list"],
                   "view": client.file_system_view()}  # fmt: skip
        client.send(sock, message, [0, 1, 2])
        answer, _ = client.receive(sock)
    assert answer == {"started": False, "reason": "the daemon runs other code"}
    assert requests(root) == 0
    assert cli(root, "snapshot")[0] == 0
    assert requests(root) == 1  # still serving: only its own code changing makes it leave


def test_no_daemon_env_and_local_commands_run_here(served: Path) -> None:
    root = served
    assert direct(root, "snapshot")[0] == 0
    assert requests(root) == 0
    # `run` would hold the daemon for the whole command: it never goes there.
    code, _, err = cli(root, "run", "--", sys.executable, "-c", "pass")
    assert code == 0, err
    assert requests(root) == 0


def test_store_location_is_shared_with_workspace(tmp_path: Path) -> None:
    from worksnap.layout import store_location
    from worksnap.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    real = os.path.realpath(root)
    assert Workspace(root).store_dir == store_location(real, None)
    assert Workspace(root, store="s").store_dir == store_location(real, "s")
    assert store_location(real, None) == os.path.join(real, ".worksnap")


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # Reap it if it is our child's child that became a zombie under init: nothing to do.
        if _is_zombie(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"daemon {pid} still running")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_config_starts_a_daemon_on_the_first_command(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    code, _, err = cli(root, "snapshot")  # creates the store
    assert code == 0, err
    (root / ".worksnap" / "config.json").write_text('{"daemon": true}')
    try:
        code, _, err = cli(root, "snapshot")  # runs here, and starts a daemon for the next
        assert code == 0, err
        deadline = time.monotonic() + 60
        while not status(root)["running"]:
            assert time.monotonic() < deadline, "no daemon started"
            time.sleep(0.05)
        code, out, err = cli(root, "--json", "list")
        assert code == 0, err
        assert len(json.loads(out)) == 2
        assert requests(root) == 1
        # Bypassed, it is neither used nor started.
        assert direct(root, "list")[0] == 0
        assert requests(root) == 1
    finally:
        cli(root, "daemon", "stop")


def test_config_without_daemon_starts_none(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    assert cli(root, "snapshot")[0] == 0
    (root / ".worksnap" / "config.json").write_text('{"daemon": false}')
    assert cli(root, "snapshot")[0] == 0
    time.sleep(0.5)
    assert status(root)["running"] is False
    (root / ".worksnap" / "config.json").write_text('{"daemon": "yes"}')
    code, _, err = cli(root, "snapshot")
    assert code == 2
    assert "is not valid" in err
    assert status(root)["running"] is False


def test_a_client_that_went_away_interrupts_its_command() -> None:
    pool = daemon.WorkspacePool()
    ours, theirs = socket.socketpair()
    seen: list[object] = []
    with ours:
        pool.start_command("snapshot", ours)
        report = pool._interruptible(seen.append)
        report("still there")  # the client waits: nothing happens
        assert seen == ["still there"]
        theirs.close()  # Ctrl-C killed the client
        with pytest.raises(KeyboardInterrupt):
            report("gone")
    assert seen == ["still there"]
    pool.start_command("snapshot", None)
    pool._interruptible(None)("no client: nothing to check")


def test_a_reading_command_has_its_own_progress_and_stops_when_its_client_goes(
    tmp_path: Path,
) -> None:
    # Reading commands share one workspace; each had no progress at all (a forwarded
    # verify of a big store showed none) and ran on to its end after Ctrl-C.
    root = tmp_path / "ws"
    write(root, "a", "a")
    assert direct(root, "snapshot")[0] == 0
    pool = daemon.WorkspacePool()
    ours, theirs = socket.socketpair()
    first: list[object] = []
    second: list[object] = []
    with ours:
        pool.start_command("verify", ours)
        view = pool.open(str(root), None, {"session": "default", "progress": first.append})
        pool.start_command("verify", None)
        other = pool.open(str(root), None, {"session": "other", "progress": second.append})
        assert (view.verify(), other.verify()) == ([], [])
        assert len(first) == len(second) == 1  # each told of its own verify only
        theirs.close()  # Ctrl-C killed the first one's client
        with pytest.raises(KeyboardInterrupt):
            view.verify()
        assert other.verify() == []
    pool.drop_all()


def test_a_daemon_of_another_user_is_never_used(served: Path) -> None:
    store = str(served / ".worksnap")
    assert client.request(store, "status") is not None
    # As seen by a client of another user: the daemon is not its own.
    other = os.getuid() + 1
    assert client.request(store, "status", owner=other) is None
    assert client.forward(["list"], str(served), None, owner=other) is None  # runs here instead


NOT_LINUX = """
import os, sys
os.environ.pop("WORKSNAP_NO_DAEMON", None)
sys.platform = "darwin"  # what the process sees on macOS, before worksnap is imported
from worksnap import client, daemon
from worksnap.cli import main
root = sys.argv[1]
print(client.SUPPORTED, client.forward(["list"], root, None))
codes = [main(["--root", root, *args.split()]) for args in ("daemon start", "snapshot")]
print(*codes, main(["--root", root, "daemon", "status"]))
"""


def test_without_linux_there_is_no_daemon_and_commands_run_here(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a", "a")
    done = subprocess.run(
        [sys.executable, "-c", NOT_LINUX, str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "False None"  # no daemon: forward() says run it here
    assert lines[-1] == "2 0 1"  # daemon start refused, snapshot ran here, status: none
    assert done.stderr == (
        "worksnap: error: worksnap daemon needs Linux (inotify); commands run directly here\n"
    )


def test_a_broken_message_keeps_none_of_the_descriptors_it_carried(served: Path) -> None:
    store = str(served / ".worksnap")
    pid = _pid_or_none(served)
    assert pid is not None
    open_before = _settled_fd_count(pid)
    for _ in range(5):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(StorePaths(store).socket)
            body = b"\xffnot marshal"
            socket.send_fds(sock, [client.HEADER.pack(len(body))], [0, 1, 2])
            sock.sendall(body)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(1) == b""  # answered by closing
    assert client.request(store, "status") is not None  # still serving
    assert _settled_fd_count(pid) == open_before


def _settled_fd_count(pid: int) -> int:
    """The daemon's open descriptors once it has closed the connection it just answered.

    It answers before it closes the connection, so a count taken at once may still
    hold it; a leak never goes away, so waiting for the count to stop falling is safe.
    """
    count = len(os.listdir(f"/proc/{pid}/fd"))
    for _ in range(100):
        time.sleep(0.02)
        now = len(os.listdir(f"/proc/{pid}/fd"))
        if now == count:
            return count
        count = now
    return count


def test_the_daemon_serves_no_other_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    served = daemon._Daemon(
        str(tmp_path), str(tmp_path / ".worksnap"), 60.0, lambda argv, pool: ran.append(argv) or 0
    )
    daemon_end, client_end = socket.socketpair()
    with daemon_end, client_end:
        message = {"op": "run", "protocol": client.PROTOCOL, "code": served.code, "argv": ["list"],
                   "view": client.file_system_view()}  # fmt: skip
        client.send(client_end, message, [0, 1, 2])
        uid = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # a daemon of another user
        served._serve_client(daemon_end)
        monkeypatch.undo()
        daemon_end.shutdown(socket.SHUT_WR)
        assert client_end.recv(1) == b""  # not a word back
    assert (ran, served.state["requests"]) == ([], 0)


def test_status_through_the_daemon_reports_it_without_asking_itself(served: Path) -> None:
    """Run in the daemon, `status` reads the daemon's report in place, not from its socket."""
    root = served
    before = requests(root)
    code, out, err = cli(root, "--json", "status")
    assert code == 0, err
    state = json.loads(out)
    assert state["daemon"]["running"] is True and state["daemon"]["pid"] == _pid_or_none(root)
    assert state["daemon"]["requests"] == before + 1  # the daemon's own report, this command in it
    assert requests(root) == before + 1  # it ran in the daemon
    code, out, err = cli(root, "status")
    assert code == 0 and "daemon    running (pid " in out


# -- issue 12, 4: concurrent clients, stalled clients, Ctrl-C at the prompt -------


def test_a_stalled_client_blocks_no_other(served: Path) -> None:
    root = served
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.connect(StorePaths(str(root / ".worksnap")).socket)  # and says nothing
    with stalled:
        done = subprocess.run(
            [sys.executable, "-m", "worksnap", "--root", str(root), "--json", "snapshot"],
            capture_output=True, text=True, timeout=30, check=False,
            env={**os.environ, "PYTHONPATH": SRC},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert requests(root) == 1  # served by the daemon, beside the stalled client
        # The stalled client is dropped after the handshake timeout.
        stalled.settimeout(daemon.HANDSHAKE_SECONDS + 10)
        assert stalled.recv(1) == b""


class Terminal:
    """A pseudo-terminal a client runs on, as a person's shell would run it."""

    def __init__(self) -> None:
        import pty

        self.master, self.slave = pty.openpty()

    def run(self, root: Path, *args: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
        # As a person's shell starts a foreground job: with Ctrl-C not ignored, even when
        # the tests themselves run in the background, which inherits SIGINT as ignored
        # (a handled signal is reset to its default in the child; an ignored one is not),
        # and SIGHUP not ignored, even under `nohup` (CI's client hung at a SIGHUP).
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "worksnap", "--root", str(root), *args],
                stdin=self.slave, stdout=self.slave, stderr=self.slave,
                env={**env, "PYTHONPATH": SRC},
            )  # fmt: skip
        finally:
            signal.signal(signal.SIGHUP, hup)
            signal.signal(signal.SIGINT, previous)

    def read_until(self, text: bytes, timeout: float = 30) -> bytes:
        import select

        seen = b""
        deadline = time.monotonic() + timeout
        while text not in seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} on the terminal; saw {seen!r}"
            if select.select([self.master], [], [], left)[0]:
                seen += os.read(self.master, 4096)
        return seen

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


def test_ctrl_c_at_the_prompt_leaves_the_next_line_to_the_shell(served: Path) -> None:
    root = served
    target = cli(root, "snapshot")[1].strip()
    write(root, "src/app.py", "edited\n")
    term = Terminal()
    try:
        client_proc = term.run(root, "restore", target)
        term.read_until(b"[y/N]")
        # Meanwhile, other clients are served: the prompt holds nobody up.
        assert cli(root, "list")[0] == 0
        client_proc.send_signal(signal.SIGINT)  # Ctrl-C: the client goes
        client_proc.wait(timeout=30)
        time.sleep(0.5)  # the daemon has noticed by now, if it ever will
        os.write(term.master, b"y\n")  # the user's next line, meant for the shell
        import select

        ready = select.select([term.slave], [], [], 5)[0]
        assert ready, "the line never reached the terminal's reader"
        assert os.read(term.slave, 100) == b"y\n"  # still there: the daemon did not take it
    finally:
        term.close()
    assert (root / "src/app.py").read_text() == "edited\n"  # nothing was restored


@pytest.mark.parametrize(
    ("sent", "code", "by"),
    [
        (signal.SIGINT, 130, ""),
        (signal.SIGTERM, 143, " by SIGTERM"),
        (signal.SIGHUP, 129, " by SIGHUP"),
    ],
    ids=["ctrl-c", "sigterm", "sighup"],
)
def test_a_stop_at_the_prompt_is_said_once_as_without_a_daemon(
    served: Path, sent: signal.Signals, code: int, by: str
) -> None:
    # A review: "worksnap: interrupted" twice, the client's line and then the daemon's
    # (README: every error is one line on stderr). The client now tells the daemon and
    # waits for it: the daemon's line, as a command run here prints it, is the only one.
    # SIGTERM (an MCP client, `timeout`, systemd) or SIGHUP ended the client at once, and
    # the daemon wrote its line after the shell's prompt: it is relayed as Ctrl-C is, with
    # its name, and the daemon's line names it as a command run here does.
    root = served
    target = cli(root, "snapshot")[1].strip()
    write(root, "src/app.py", "edited\n")
    term = Terminal()
    client_proc = term.run(root, "restore", target)
    shown = term.read_until(b"[y/N] ")
    client_proc.send_signal(sent)  # at the question
    assert client_proc.wait(timeout=60) == code
    # The daemon's copies of the terminal are the last open once ours is closed: read
    # until it has closed them, so whatever it was to print is there.
    os.close(term.slave)
    rest, _ = terminal_output(term.master, client_proc)  # closes the master
    after = (shown + rest).split(b"[y/N] ", 1)[1].decode().replace("\r\n", "\n")
    assert after == f"worksnap: interrupted{by}; nothing was changed\n"  # the signal it was
    assert (root / "src/app.py").read_text() == "edited\n"
    assert requests(root) == 2  # the daemon ran it


def _restore_asking(root: Path, term: Terminal) -> socket.socket:
    """A client's connection to the daemon, of a restore at its question on `term`.

    `src/app.py` is edited since the snapshot the restore goes back to.
    """
    target = cli(root, "snapshot")[1].strip()
    write(root, "src/app.py", "edited\n")
    sock = client.connect(str(root / ".worksnap"), None)
    assert sock is not None
    request = {
        "op": "run", "protocol": client.PROTOCOL, "code": client.code_stamp(),
        "view": client.file_system_view(),
        "argv": ["--root", str(root), "restore", target], "cwd": str(root),
        "env": {**os.environ, "PYTHONPATH": SRC}, "umask": 0o022,
        "streams": [["utf-8", "strict"]] * 3,
    }  # fmt: skip
    client.send(sock, request, [term.slave] * 3)
    assert client.receive(sock)[0] == {"started": True}
    term.read_until(b"[y/N] ")
    return sock


def test_a_client_gone_altogether_gets_nothing_more_on_its_terminal(served: Path) -> None:
    # A review: after a second Ctrl-C the client had gone, and the daemon, rolling back,
    # later wrote its own "interrupted" line on the terminal, under the shell's prompt.
    # A client that closed its connection (not only its end for writing: a first Ctrl-C)
    # gets nothing more from the command.
    root = served
    term = Terminal()
    sock = _restore_asking(root, term)
    sock.close()  # the client is gone, as after a second Ctrl-C
    os.close(term.slave)
    rest = b""
    while True:  # until the daemon has closed its copies of the terminal
        try:
            chunk = os.read(term.master, 4096)
        except OSError:
            break
        if not chunk:
            break
        rest += chunk
    os.close(term.master)
    assert rest == b""
    assert (root / "src/app.py").read_text() == "edited\n"


@pytest.mark.parametrize(("sent", "code"), [(b"", 130), (b"\x0f", 143), (b"\xc8", 130)])
def test_the_daemon_takes_only_a_stop_signal_from_its_client(
    served: Path, sent: bytes, code: int
) -> None:
    # A client says which signal stopped it in one byte, then closes its end: nothing (an
    # older client) or a byte that is no stop signal is Ctrl-C's, never an exit code of
    # 128 + 200.
    root = served
    term = Terminal()
    sock = _restore_asking(root, term)
    try:
        sock.sendall(sent)
        sock.shutdown(socket.SHUT_WR)
        assert client.receive(sock)[0] == {"exit": code}
    finally:
        sock.close()
        term.close()
    assert (root / "src/app.py").read_text() == "edited\n"


def test_a_second_ctrl_c_says_the_daemon_goes_on_on_a_line_of_its_own(tmp_path: Path) -> None:
    # A review: "restoring 7317/10000worksnap: interrupted": the client's line glued to the
    # daemon's progress line, and not saying how the tree was left. Now the progress line
    # is erased and the line says what is known: the daemon goes on stopping the command.
    import threading

    root = tmp_path / "ws"
    write(root, "a", "a")
    store = root / ".worksnap"
    store.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(StorePaths(str(store)).socket)
    listener.listen(1)
    told, done = threading.Event(), threading.Event()

    def fake_daemon() -> None:  # starts the command, draws progress, is told of Ctrl-C
        conn, _ = listener.accept()
        with conn:
            _, fds = client.receive(conn, max_fds=3)
            client.send(conn, {"started": True})
            os.write(fds[2], b"restoring 3/10")
            assert conn.recv(2) == bytes([signal.SIGINT])  # the client's first Ctrl-C, said
            assert conn.recv(1) == b""  # and its end closed for writing
            told.set()
            done.wait(60)
            for fd in fds:
                os.close(fd)

    thread = threading.Thread(target=fake_daemon)
    thread.start()
    term = Terminal()
    try:
        client_proc = term.run(root, "restore", "latest", "--yes")
        shown = term.read_until(b"3/10")
        client_proc.send_signal(signal.SIGINT)
        assert told.wait(60)
        client_proc.send_signal(signal.SIGINT)  # the second, during the "rollback"
        assert client_proc.wait(timeout=60) == 130
        shown += term.read_until(b"\n")
    finally:
        done.set()
        thread.join()
        listener.close()
        term.close()
    assert shown.decode().replace("\r\n", "\n") == (
        "restoring 3/10\r\x1b[Kworksnap: interrupted; the daemon goes on stopping the command "
        "in the background (a restore it had begun rolls back before another can start)\n"
    )


# -- issue 12, 5: the client's umask ----------------------------------------------


def test_a_restore_through_the_daemon_applies_the_clients_umask(served: Path) -> None:
    root = served
    write(root, "new/deeper/file.txt", "x\n")
    target = cli(root, "snapshot")[1].strip()
    import shutil

    shutil.rmtree(root / "new")
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    done = subprocess.run(
        ["sh", "-c", f"umask 077 && exec {sys.executable} -m worksnap --root {root} "
         f"restore {target} --yes"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**env, "PYTHONPATH": SRC},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert requests(root) == 2
    assert (root / "new").stat().st_mode & 0o777 == 0o700
    assert (root / "new" / "deeper").stat().st_mode & 0o777 == 0o700


# -- the audit ----------------------------------------------------------------------


def test_the_daemon_audit_finds_what_no_event_announced(served: Path, tmp_path: Path) -> None:
    root = served
    store = str(root / ".worksnap")
    assert cli(root, "snapshot")[0] == 0
    answer = client.request(store, "audit")
    assert answer is not None
    assert (answer["audits"], answer["audit_differences"]) == (1, 0)
    outside = tmp_path / "outside-link"
    os.link(root / "README", outside)  # a name outside the tree, made after the watch began
    with open(outside, "r+b") as f:
        f.write(b"HELLO\n")  # same size; no event in the tree
    answer = client.request(store, "audit")
    assert answer is not None
    assert (answer["audits"], answer["audit_differences"]) == (2, 1)
    log = Path(StorePaths(store).daemon_log).read_text()
    assert "audit: the watcher missed README: file state" in log
    # Rebuilt: the next snapshot through the daemon sees the write.
    _, out, _ = cli(root, "--json", "snapshot")
    assert json.loads(out)["tree"] == json.loads(direct(root, "--json", "snapshot")[1])["tree"]
    _, out, _ = cli(root, "daemon", "status")
    assert "audits: 2 run, 1 differences found" in out


# -- fast by default ----------------------------------------------------------------


def test_a_big_tree_on_a_local_file_system_starts_the_daemon_by_itself(tmp_path: Path) -> None:
    from worksnap import autostart

    root = tmp_path / "ws"
    for i in range(autostart.BREAK_EVEN_FILES * 3 // 2):
        write(root, f"d{i % 40}/f{i}.txt", f"{i}\n")
    try:
        assert cli(root, "snapshot")[0] == 0  # the store and its caches
        assert cli(root, "snapshot")[0] == 0  # runs here, then starts the daemon
        deadline = time.monotonic() + 60
        while not status(root)["running"]:
            assert time.monotonic() < deadline, "no daemon started"
            time.sleep(0.05)
        answer = status(root)
        assert answer["mode"] == "auto"
        assert str(answer["reason"]).startswith("on: about")
        before = requests(root)  # the second snapshot may have gone to it already
        assert cli(root, "list")[0] == 0
        assert requests(root) == before + 1
    finally:
        cli(root, "daemon", "stop")


def test_the_size_a_daemon_starts_at_follows_a_tree_that_grew(tmp_path: Path) -> None:
    """Review I 03: the estimate was the stat cache's size alone; a tree that grew after
    its first snapshot (its growth in `stat.log`) stayed "about 733 files" at 6,000."""
    from worksnap import autostart

    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    assert direct(root, "snapshot")[0] == 0
    small = autostart.decide(str(root), str(root / ".worksnap"))
    assert not small.start and small.reason.startswith("off: about 1 files, fewer than")
    for i in range(autostart.BREAK_EVEN_FILES + 500):
        write(root, f"d{i % 40}/f{i}.txt", f"{i}\n")
    assert direct(root, "snapshot")[0] == 0
    grown = autostart.decide(str(root), str(root / ".worksnap"))
    assert grown.reason.startswith(f"on: about {autostart.BREAK_EVEN_FILES + 501} files on ")


def test_the_size_estimate_never_waits_on_a_fifo_nor_follows_a_link_in_the_store(
    tmp_path: Path,
) -> None:
    """The store is input (a cloned tree): a FIFO at `cache/last.json` or a record must not
    hang every command's end, nor a link there be read."""
    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    assert direct(root, "snapshot")[0] == 0
    store = root / ".worksnap"
    (store / "cache" / "last.json").unlink()
    os.mkfifo(store / "cache" / "last.json")
    record = next((store / "snapshots").iterdir())
    script = (
        "import sys; from worksnap import autostart; "
        "print(autostart.estimated_files(autostart.StorePaths(sys.argv[1])))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    for plant in ("fifo", "link"):
        if plant == "link":
            (store / "cache" / "last.json").unlink()
            (store / "cache" / "last.json").symlink_to(record)
        done = subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True,
                              text=True, env=env, timeout=60, check=False)  # fmt: skip
        assert (done.returncode, done.stderr) == (0, ""), plant
        assert int(done.stdout) < 100, plant  # the stat cache's size: the record unread


def test_a_small_tree_starts_none_and_status_says_why(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, "a.txt", "a")
    assert cli(root, "snapshot")[0] == 0
    assert cli(root, "snapshot")[0] == 0
    time.sleep(0.5)
    answer = status(root)
    assert answer["running"] is False
    assert answer["mode"] == "auto"
    assert "break-even" in str(answer["reason"])
    _, out, _ = cli(root, "daemon", "status")
    assert "automatic start: auto, off: about" in out


def test_network_and_fuse_file_systems_are_never_auto(tmp_path: Path) -> None:
    from worksnap import autostart

    assert autostart.unsound_file_system(str(tmp_path)) is None  # the test's own is local
    assert autostart.unsound_file_system("/proc") is not None  # proc: not one inotify sees
    for kind in (0x6969, 0xFF534D42, 0x65735546, 0x01021997):  # nfs, cifs, fuse, 9p
        assert kind not in autostart.LOCAL_FILE_SYSTEMS


# -- the daemon of the store a command finds (issue 14's discovery) -----------------


def here(cwd: Path, *args: str, no_daemon: bool = False) -> tuple[int, str, str]:
    """Runs `worksnap ARGS` in `cwd` without --root: the root and store are found from there."""
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    env.update(PYTHONPATH=SRC, **({"WORKSNAP_NO_DAEMON": "1"} if no_daemon else {}))
    done = subprocess.run(
        [sys.executable, "-m", "worksnap", *args],
        cwd=cwd, capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


@pytest.mark.skipif(GIT is None, reason="needs git")
def test_a_command_in_a_subdirectory_of_a_git_work_tree_runs_in_its_stores_daemon(
    tmp_path: Path,
) -> None:
    top = tmp_path / "proj"
    top.mkdir()
    init_repo(top)
    write(top, "src/pkg/app.py", "print('v1')\n")
    write(top, "README", "hello\n")
    write(top, ".gitignore", "*.log\n")
    write(top, "build.log", "noise\n")
    sub = top / "src" / "pkg"
    store = top / ".git" / "worksnap"
    code, out, err = here(sub, "daemon", "start")
    assert code == 0, err
    assert f"serving {store} for {top}" in out
    try:

        def served() -> int:
            answer = client.request(str(store), "status")
            assert answer is not None
            return int(answer["requests"])

        code, out, err = here(sub, "--json", "snapshot", "--label", "one")
        assert code == 0, err
        assert served() == 1  # the client found <git-dir>/worksnap from the subdirectory
        write(top, "src/pkg/app.py", "print('v2')\n")
        (top / "README").unlink()
        write(top, "src/pkg/new.py", "x\n")
        commands = [
            ("status",), ("--json", "list"), ("plan", "latest"), ("plan", "latest", "app.py"),
            ("restore", "latest", "--dry-run"), ("list", "--json", "--store", str(store)),
            ("diff", "--stat"), ("--json", "status"),
        ]  # fmt: skip
        for cwd in (sub, top):
            for args in commands:
                before = served()
                forwarded = here(cwd, *args)
                assert served() == before + 1, (cwd, args)  # it ran in the daemon
                plain = here(cwd, *args, no_daemon=True)
                assert served() == before + 1  # and this one did not
                if args == ("--json", "status"):  # the same, but for WORKSNAP_NO_DAEMON
                    shown, alone = json.loads(forwarded[1]), json.loads(plain[1])
                    assert shown["daemon"].pop("mode") == "auto"
                    assert alone["daemon"].pop("mode") == "off"
                    assert alone["daemon"].pop("reason") == "WORKSNAP_NO_DAEMON is set"
                    assert "break-even" in shown["daemon"].pop("reason")
                    forwarded, plain = (
                        (forwarded[0], shown, forwarded[2]),
                        (plain[0], alone, plain[2]),
                    )
                assert forwarded == plain, (cwd, args)
        code, out, _ = here(sub, "status")
        assert f"store     {store} (1 snapshot" in out
        assert "daemon    running (pid " in out
    finally:
        here(sub, "daemon", "stop")
    assert not os.path.exists(StorePaths(str(store)).socket)


def test_the_daemon_runs_no_module_of_the_project(tmp_path: Path) -> None:
    """The daemon started from the project's directory imports nothing from it (a module
    named as one of Python's there, `types.py`, ran inside the daemon: a review found it)."""
    root = tmp_path / "ws"
    marker = tmp_path / "ran"
    write(root, "app.py", "print('app')\n")
    write(root, "types.py", f"open({str(marker)!r}, 'w').close()\nraise ImportError('mine')\n")
    env = {k: v for k, v in os.environ.items() if k != "WORKSNAP_NO_DAEMON"}
    # As the `worksnap` script runs (its own directory first on sys.path, not the project).
    script = "import sys; del sys.path[0]; from worksnap.__main__ import main; sys.exit(main())"
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, "daemon", "start"],
            cwd=root, env={**env, "PYTHONPATH": SRC}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert status(root)["running"] is True
        assert not marker.exists()
    finally:
        cli(root, "daemon", "stop")


def test_a_client_gone_mid_restore_rolls_back_all_the_way(tmp_path: Path) -> None:
    """The daemon's restore interrupted by its client going away (Ctrl-C) rolls back as it
    would in the client's own process. A review found the rollback interrupted as well, at
    its first progress report (hashing the tree again), leaving the tree half-restored."""
    root = tmp_path / "ws"
    for i in range(6000):
        write(root, f"d{i % 60:02d}/f{i}.txt", f"{i}\n")
    pool = daemon.WorkspacePool()
    mine, theirs = socket.socketpair()
    try:
        pool.start_command("snapshot", None)
        base = pool.open(str(root), None, {"session": "default", "progress": None}).snapshot()
        pool.end_command()
        for i in range(10):
            for f in (root / f"d{i:02d}").iterdir():
                f.unlink()
        before = tree_state(root)
        theirs.close()  # the client is gone (Ctrl-C) before the restore reports progress
        pool.start_command("restore", mine)
        ws = pool.open(str(root), None, {"session": "default", "progress": None})
        with pytest.raises(KeyboardInterrupt):
            ws.restore(base.id)
        pool.end_command()
        assert tree_state(root) == before
        assert not (root / ".worksnap" / "journal.json").exists()
    finally:
        mine.close()
        pool.drop_all()


def test_a_store_not_made_yet_is_not_called_unwritable(tmp_path: Path) -> None:
    """The check for a store this process cannot write (a read-only file system) took a
    store not made yet for one: `status` in a new project said no daemon could serve it."""
    (tmp_path / "p").mkdir()
    decision = autostart.decide(str(tmp_path / "p"), str(tmp_path / "p" / ".worksnap"))
    assert "not writable" not in decision.reason, decision


class _DyingDaemon:
    """A daemon that takes one command and dies before it answers (as at kill -9)."""

    def __init__(self, store: Path) -> None:
        import threading

        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(StorePaths(str(store)).socket)
        self._listener.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        _, fds = client.receive(conn, max_fds=3)
        for fd in fds:
            os.close(fd)
        client.send(conn, {"started": True})
        conn.close()

    def close(self) -> None:
        self._thread.join(timeout=60)
        self._listener.close()


@pytest.mark.parametrize("block", [False, True])
def test_a_hook_the_daemon_died_running_says_one_hook_line_and_exits_as_configured(
    tmp_path: Path, block: bool
) -> None:
    """A review killed the daemon while it ran a Claude Code hook: the hook said
    "worksnap: error: the daemon stopped ..." and exited 1, which Claude Code shows as an
    error, against the promise (one `hook:` line, exit 0, or 2 with `hooks-block`)."""
    root = tmp_path / "ws"
    write(root, "a.txt", "a\n")
    assert direct(root, "snapshot")[0] == 0
    if block:
        assert direct(root, "config", "hooks-block", "true")[0] == 0
    dying = _DyingDaemon(root / ".worksnap")
    event = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "x"})
    code, out, err = cli(root, "hook", "claude-code", stdin=event,
                         env={"CLAUDE_PROJECT_DIR": str(root)})  # fmt: skip
    dying.close()
    assert (code, out) == (2 if block else 0, ""), err
    assert err.count("\n") == 1 and "hook: error: the daemon stopped" in err, err


def test_a_command_the_daemon_died_running_a_restore_of_says_to_recover(tmp_path: Path) -> None:
    """The same review: the daemon killed during a restore left it half done, and the line
    said to run `worksnap list`. With a restore's journal left, it says how it is rolled back."""
    root = tmp_path / "ws"
    write(root, "a.txt", "a\n")
    assert direct(root, "snapshot")[0] == 0
    store = root / ".worksnap"
    dying = _DyingDaemon(store)
    code, _, err = cli(root, "snapshot")
    dying.close()
    assert code == 1 and "run `worksnap list` to see what was done" in err, err
    Path(StorePaths(str(store)).socket).unlink()
    (Path(StorePaths(str(store)).journal)).write_text("{}")  # as a restore under way left it
    dying = _DyingDaemon(store)
    code, _, err = cli(root, "list")
    dying.close()
    assert code == 1 and err.count("\n") == 1, err
    assert "left a restore unfinished" in err and "worksnap recover" in err, err
