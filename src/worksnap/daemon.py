"""Daemon: one resident process per store, so every CLI command is as fast as a watched API call.

`worksnap daemon start` runs `serve` in the background. It keeps a long-lived
`Workspace(watch=True)`: its inotify watches, stat cache and store index stay in
memory. A later `worksnap` command for the same store connects to
`<store>/daemon.sock` and hands over its argument list, working directory,
environment and its stdin/stdout/stderr descriptors; the daemon runs the very same
command code on its workspace, writing straight to the caller's terminal, and sends
back the exit code (as Mercurial's chg does). Nothing else changes: every command
takes the store lock as usual, so direct processes and the daemon mix freely.

With no daemon, one that stopped, or one running other code (an upgrade), the
command runs in the calling process, as it always does. `WORKSNAP_NO_DAEMON=1`
forces that. Only the same user may connect (checked with SO_PEERCRED).

Imported by every CLI run: at load time it imports only the standard library and
`layout`; the engine (and the config reader) are imported where they are needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from worksnap.layout import StorePaths, store_location

if TYPE_CHECKING:
    from worksnap.workspace import Workspace

PROTOCOL = 1
DEFAULT_IDLE_SECONDS = 1800.0
_TICK_SECONDS = 5.0  # how often an idle daemon checks its socket and idle time
_MAX_REQUEST = 1 << 20
_MAX_WORKSPACES = 4
_HEADER = struct.Struct("!I")
SUPPORTED = sys.platform.startswith("linux")
"""The daemon needs inotify (for the watch) and SO_PEERCRED: Linux."""


class DaemonLost(Exception):
    """The daemon accepted a command and stopped before it said how it ended."""


def _code_stamp() -> list[list[str | int]]:
    """Names, sizes and mtimes of this package's modules: a daemon serves only its own code."""
    here = os.path.dirname(os.path.abspath(__file__))
    stamp: list[list[str | int]] = []
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            st = os.stat(os.path.join(here, name))
            stamp.append([name, st.st_size, st.st_mtime_ns])
    return stamp


@contextlib.contextmanager
def _address(store_dir: str) -> Iterator[str]:
    """A socket address for the store's socket that fits AF_UNIX's ~107-byte limit."""
    path = StorePaths(store_dir).socket
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(store_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def _connect(store_dir: str, owner: int | None) -> socket.socket | None:
    """Connects to the store's daemon; None when no daemon of `owner` (default: us) listens."""
    if not os.path.exists(StorePaths(store_dir).socket):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _address(store_dir) as address:
            sock.connect(address)
    except OSError:
        sock.close()
        return None  # a socket left by a daemon that was killed
    if _peer_uid(sock) != (os.getuid() if owner is None else owner):
        sock.close()  # not ours: never hand our terminal to another user's process
        return None
    return sock


def _hung_up(sock: socket.socket) -> bool:
    """True when the client closed its end (it sends nothing while its command runs)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [_HEADER.pack(len(body))], fds)
    else:
        sock.sendall(_HEADER.pack(len(body)))
    sock.sendall(body)


def _receive(sock: socket.socket, *, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """Reads one message (and up to `max_fds` descriptors); None at end of stream."""
    fds: list[int] = []
    if max_fds:
        head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, max_fds)
    else:
        head = sock.recv(_HEADER.size)
    head += _read_exactly(sock, _HEADER.size - len(head)) if head else b""
    message = None
    if len(head) == _HEADER.size:
        (length,) = _HEADER.unpack(head)
        body = _read_exactly(sock, length) if length <= _MAX_REQUEST else b""
        if len(body) == length:
            with contextlib.suppress(ValueError):
                message = json.loads(body)
    if not isinstance(message, dict):
        _close_all(fds)  # a broken message: nothing it handed over is kept
        return None, []
    return message, fds


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


# -- the client side ---------------------------------------------------------


def forward(
    argv: list[str], root: str, store: str | None, *, owner: int | None = None
) -> int | None:
    """Runs a command in the store's daemon, if one serves it; returns its exit code.

    None: no daemon (or it declined, e.g. it runs older code); run the command here.
    `owner` is the uid the daemon must run as (default: ours; tests name another).

    Raises:
        DaemonLost: the daemon started the command and stopped before it ended.
    """
    if not SUPPORTED or os.environ.get("WORKSNAP_NO_DAEMON") or not os.path.isdir(root):
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)  # a closed standard descriptor cannot be handed over
    except OSError:
        return None
    sock = _connect(store_location(os.path.realpath(root), store), owner)
    if sock is None:
        return None
    with sock:
        request = {
            "op": "run",
            "protocol": PROTOCOL,
            "code": _code_stamp(),
            "argv": argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "streams": [
                [stream.encoding, stream.errors] for stream in (sys.stdin, sys.stdout, sys.stderr)
            ],
        }
        try:
            _send(sock, request, [0, 1, 2])
            answer, _ = _receive(sock)
        except OSError:
            return None
        if answer is None or not answer.get("started"):
            return None
        try:
            result, _ = _receive(sock)
        except OSError:
            result = None
    if result is None or not isinstance(result.get("exit"), int):
        raise DaemonLost
    code: int = result["exit"]
    return code


def request(store_dir: str, op: str, *, owner: int | None = None) -> dict[str, Any] | None:
    """Sends `status` or `stop` to the store's daemon; None when none is running.

    `owner` is the uid the daemon must run as (default: ours; tests name another).
    """
    if not SUPPORTED:
        return None
    sock = _connect(store_dir, owner)
    if sock is None:
        return None
    with sock:
        try:
            _send(sock, {"op": op, "protocol": PROTOCOL})
            answer, _ = _receive(sock)
        except OSError:
            return None
    return answer


def start(root: str, store_dir: str, *, idle: float, force: bool) -> dict[str, Any]:
    """Starts a daemon for the store in the background; returns its status once it serves.

    Raises:
        OSError: the daemon could not be started (the message holds its log's last line).
    """
    running = request(store_dir, "status")
    if running is not None:
        return running
    pid = _spawn(root, store_dir, idle=idle, force=force)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = request(store_dir, "status")
        if status is not None:
            return status
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            break  # it exited
        time.sleep(0.02)
    from worksnap.storedir import MIB, StoreDir

    log_path = StorePaths(store_dir).daemon_log
    log = StoreDir(store_dir).read(log_path, limit=MIB)  # never through a link, never a FIFO
    lines = log.decode(errors="replace").strip().splitlines()
    reason = lines[-1] if lines else "no output"
    raise OSError(f"the daemon did not start: {reason} (see {log_path})")


def auto_start(root: str, store: str | None, *, force: bool) -> None:
    """Starts a daemon in the background, without waiting, if the store's config asks for one.

    That is `"daemon": true` in the store's config, read by the one strict reader
    (imported only when the store has a config, so the common case stays light).
    """
    if not SUPPORTED or os.environ.get("WORKSNAP_NO_DAEMON") or not os.path.isdir(root):
        return
    real = os.path.realpath(root)
    store_dir = store_location(real, store)
    paths = StorePaths(store_dir)
    if not os.path.exists(paths.config):
        return
    from worksnap.config import load_config
    from worksnap.errors import InputError
    from worksnap.storedir import StoreDir

    try:
        config = load_config(StoreDir(store_dir))
    except InputError:
        return  # a broken config: the command itself reports it
    if config.daemon:
        _spawn(real, store_dir, idle=DEFAULT_IDLE_SECONDS, force=force)


def _spawn(root: str, store_dir: str, *, idle: float, force: bool) -> int:
    """Starts `worksnap daemon serve` in a session of its own; returns its pid."""
    os.makedirs(store_dir, exist_ok=True)
    argv = [sys.executable, "-m", "worksnap", "--root", root, "--store", store_dir]
    argv += ["--force"] if force else []
    argv += ["daemon", "serve", "--idle", str(idle)]
    from worksnap.storedir import StoreDir

    # Opened here, through the store's descriptor: a `daemon.log` that is a link or a
    # FIFO is refused, never followed (a link would truncate what it points to).
    log = StoreDir(store_dir).open_shared(StorePaths(store_dir).daemon_log)
    try:
        os.ftruncate(log, 0)
        return os.posix_spawn(
            sys.executable,
            argv,
            dict(os.environ, WORKSNAP_NO_DAEMON="1"),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
            setsid=True,  # not killed with the shell (or agent) that started it
        )
    finally:
        os.close(log)


def stop(store_dir: str) -> bool:
    """Stops the store's daemon; False when none was running."""
    if request(store_dir, "stop") is None:
        return False
    deadline = time.monotonic() + 30
    socket_path = StorePaths(store_dir).socket
    while os.path.exists(socket_path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


# -- the daemon side ---------------------------------------------------------


class WorkspacePool:
    """Long-lived watched workspaces, by everything a command opens them with but the session."""

    def __init__(self) -> None:
        self.workspaces: dict[tuple[Any, ...], Workspace] = {}
        self.client: socket.socket | None = None
        """The connection of the command being run: its end interrupts the command."""

    def open(self, root: str, store: str | None, options: dict[str, Any]) -> Workspace:
        """The workspace for these options (opened, watched, on first use), set to the session."""
        from worksnap.workspace import DEFAULT_MAX_FILE_BYTES, Workspace

        session = options.pop("session")
        progress = options.pop("progress")
        options.setdefault("exclude", ())
        options.setdefault("max_file_bytes", DEFAULT_MAX_FILE_BYTES)
        options.setdefault("force", False)
        key = (
            os.path.realpath(root),
            store_location(os.path.realpath(root), store),
            *sorted(options.items()),
        )
        ws = self.workspaces.pop(key, None)
        if ws is None:
            ws = Workspace(root, store=store, watch=True, session=session, **options)
            if len(self.workspaces) >= _MAX_WORKSPACES:
                oldest = next(iter(self.workspaces))
                self.workspaces.pop(oldest).close()
        self.workspaces[key] = ws  # most recently used last
        ws.use(session=session, progress=self._interruptible(progress))
        return ws

    def _interruptible(self, progress: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """Wraps a progress callback so that a client gone (Ctrl-C) interrupts the command.

        The command then stops as it would on Ctrl-C in the client's own process (a
        restore rolls back).
        """
        client = self.client

        def report(done: Any) -> None:
            if client is not None and _hung_up(client):
                raise KeyboardInterrupt
            if progress is not None:
                progress(done)

        return report

    def drop_all(self) -> None:
        """Closes every workspace (storing their caches)."""
        for ws in self.workspaces.values():
            ws.close()
        self.workspaces.clear()


Runner = Callable[[list[str], "WorkspacePool"], int]
"""Runs one command line with workspaces from the pool (the CLI's own entry point)."""


def serve(root: str, store_dir: str, *, idle: float, run: Runner) -> None:
    """Serves commands for the store until `idle` seconds pass without one, or `stop`.

    `run` runs one command line (the CLI's own entry point) with workspaces from the pool.
    Also stops when its socket is removed or replaced, or on SIGTERM.
    """
    os.makedirs(store_dir, exist_ok=True)
    path = StorePaths(store_dir).socket
    if request(store_dir, "status") is not None:
        raise OSError(f"a daemon is already running for {store_dir}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # left by a daemon that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o077)  # the socket is the owner's alone
    try:
        with _address(store_dir) as address:
            listener.bind(address)
    finally:
        os.umask(old_umask)
    listener.listen(16)
    listener.settimeout(min(_TICK_SECONDS, idle))
    inode = os.stat(path).st_ino
    signal.signal(signal.SIGTERM, lambda *_: _on_term(state))
    code = _code_stamp()
    pool = WorkspacePool()
    state = {
        "pid": os.getpid(),
        "root": root,
        "store": store_dir,
        "started": time.time(),
        "requests": 0,
        "idle_seconds": idle,
        "busy": False,
        "stopping": False,
    }
    print(f"worksnap daemon {os.getpid()} serving {store_dir}", flush=True)
    try:
        with contextlib.suppress(Exception):
            # Warm up: the first scan sets the watches, so the first command is fast too.
            pool.open(root, store_dir, {"session": "default", "progress": None}).capture(
                store_objects=False
            )
        last = time.monotonic()
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if time.monotonic() - last > idle or not _still_ours(path, inode):
                    return
                continue
            with conn:
                conn.settimeout(None)
                state["busy"] = True
                keep_going = _handle(conn, pool, state, code, run)
                state["busy"] = False
            last = time.monotonic()
            if not keep_going or state["stopping"]:
                return
    except _Stop:
        pass
    finally:
        pool.drop_all()
        if _still_ours(path, inode):
            os.unlink(path)
        listener.close()


class _Stop(BaseException):
    """SIGTERM while no command runs."""


def _on_term(state: dict[str, Any]) -> None:
    """SIGTERM: stop now when idle, else right after the running command."""
    if not state["busy"]:
        raise _Stop
    state["stopping"] = True


def _still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _handle(
    conn: socket.socket,
    pool: WorkspacePool,
    state: dict[str, Any],
    code: list[list[str | int]],
    run: Runner,
    *,
    owner: int | None = None,
) -> bool:
    """Serves one connection; returns False when the daemon should stop.

    Only a client running as `owner` (default: the daemon's own uid) is served.
    """
    uid = _peer_uid(conn)
    try:
        message, fds = _receive(conn, max_fds=3)
    except OSError:
        return True
    try:
        if message is None or uid != (os.getuid() if owner is None else owner):
            return True
        op = message.get("op")
        if op == "status":
            public = {k: v for k, v in state.items() if k not in ("busy", "stopping")}
            _send(conn, {**public, "workspaces": len(pool.workspaces), "watching": _watching(pool)})
            return True
        if op == "stop":
            _send(conn, {"stopped": True})
            return False
        if op != "run" or message.get("protocol") != PROTOCOL or len(fds) != 3:
            _send(conn, {"started": False})
            return True
        fresh_code = _code_stamp()
        if message.get("code") != code or fresh_code != code:
            _send(conn, {"started": False, "reason": "the daemon runs other code"})
            return fresh_code == code  # its own code changed (an upgrade): make way
        _send(conn, {"started": True})
        state["requests"] += 1
        pool.client = conn
        try:
            exit_code = _run_for_client(message, fds, pool, run)
        finally:
            pool.client = None
        fds = []  # closed with the client's streams
        with contextlib.suppress(OSError):
            _send(conn, {"exit": exit_code})
        return True
    except OSError:
        return True
    finally:
        _close_all(fds)


def _watching(pool: WorkspacePool) -> bool:
    return any(ws.watching for ws in pool.workspaces.values())


def _run_for_client(
    message: dict[str, Any], fds: list[int], pool: WorkspacePool, run: Runner
) -> int:
    """Runs the command as if in the client: its cwd, environment and standard streams."""
    saved_env = dict(os.environ)
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    (in_enc, in_err), (out_enc, out_err), (err_enc, err_err) = message["streams"]
    stdin = open(fds[0], encoding=in_enc, errors=in_err)  # noqa: SIM115 - closed below
    stdout = open(fds[1], "w", encoding=out_enc, errors=out_err)  # noqa: SIM115
    stderr = open(fds[2], "w", encoding=err_enc, errors=err_err)  # noqa: SIM115
    try:
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["env"])
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        try:
            return run(list(message["argv"]), pool)
        except SystemExit as exc:  # argparse, --help
            return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
        except Exception:  # a bug: report it, and start the workspaces afresh
            import traceback

            traceback.print_exc()
            pool.drop_all()
            return 1
    except OSError as exc:  # the client's directory is gone
        print(f"worksnap: error: {exc}", file=stderr)
        return 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir("/")
        for stream in (stdout, stderr, stdin):
            with contextlib.suppress(OSError):
                stream.close()
