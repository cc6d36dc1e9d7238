"""Daemon: one resident process per store, so every CLI command is as fast as a watched API call.

`worksnap daemon start` (or the first command on a big enough tree, see
`autostart.py`) runs `serve` in the background. It keeps long-lived
`Workspace(watch=True)` objects: their inotify watches, stat cache and store index
stay in memory. A command's client (client.py) hands over its argument list,
working directory, environment, umask and standard descriptors; the daemon runs
the very same command code, writing straight to the caller's terminal, and sends
back the exit code (as Mercurial's chg does). Every command still takes the store
lock, so direct processes and the daemon mix freely.

Clients are served concurrently, each in a thread of its own with its own working
directory and umask (`unshare(CLONE_FS)`), environment and standard streams:
commands that only read the store (`list`, `show`, ...) run in parallel; those
that capture or write run one at a time per workspace (and the store lock orders
them with other processes). A client that connects and says nothing is dropped
after `HANDSHAKE_SECONDS`; one that goes away (Ctrl-C) stops its command at the
next progress report and never leaves the daemon reading its terminal.

While idle the daemon audits what the watcher vouches for: a plain scan, in a
thread at the lowest priority, at most every `AUDIT_EVERY_SECONDS`, given up as
soon as a command arrives. A difference is logged with the path and the events
seen there, the watched state is rebuilt, and `daemon status` counts both.

Imported only where the daemon is started or served; clients import client.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worksnap.client import (
    SUPPORTED,
    address,
    code_stamp,
    parse,
    peer_uid,
    receive,
    refusal,
    request,
    send,
)
from worksnap.clientctx import ClientInput, Context, RWLock, client_output, private_fs, stopped_by
from worksnap.layout import StorePaths, store_location
from worksnap.stopsignals import came
from worksnap.storeplace import make_store_dir

if TYPE_CHECKING:
    from worksnap.workspace import Workspace

__all__ = ["SUPPORTED", "WorkspacePool", "serve", "spawn", "start", "stop"]

DEFAULT_IDLE_SECONDS = 1800.0
HANDSHAKE_SECONDS = 5.0
"""A client must have sent its request within this long (else it is dropped)."""
AUDIT_EVERY_SECONDS = 600.0
"""At most one audit this often (`WORKSNAP_AUDIT_EVERY` overrides it, for tests)."""
AUDIT_AFTER_IDLE_SECONDS = 5.0
"""An audit starts only after this long without a command."""
MAX_CLIENTS = 32
_TICK_SECONDS = 1.0  # how often an idle daemon checks its socket, idle time and audit
_MAX_WORKSPACES = 4
_SERVE = "import sys; del sys.path[0]; from worksnap.__main__ import main; sys.exit(main())"
"""`python -m worksnap` less the caller's directory on `sys.path`, where a module of the
project (`types.py`) would run in the daemon (`-P`, from Python 3.11, does the same)."""

READERS = frozenset({"list", "show", "du", "attachment", "verify", "cat"})
"""Commands that neither capture nor write: they run side by side."""


# -- starting and stopping ---------------------------------------------------


def start(root: str, store_dir: str, *, idle: float, force: bool) -> dict[str, Any]:
    """Starts a daemon for the store in the background; returns its status once it serves.

    Raises:
        OSError: the daemon could not be started (the message holds its log's last line).
    """
    running = request(store_dir, "status")
    if running is not None:
        return running
    pid = spawn(root, store_dir, idle=idle, force=force)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = request(store_dir, "status")
        if status is not None:
            return status
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            break  # it exited
        time.sleep(0.02)
    from worksnap.storedir import MIB, StoreDir

    files = StoreDir(store_dir)
    log_path = files.paths.daemon_log
    try:
        log = files.read(log_path, limit=MIB)  # never through a link, never a FIFO
    finally:
        files.close()
    lines = log.decode(errors="replace").strip().splitlines()
    reason = lines[-1] if lines else "no output"
    raise OSError(f"the daemon did not start: {reason} (see {log_path})")


def spawn(root: str, store_dir: str, *, idle: float, force: bool, why: str = "") -> int:
    """Starts `worksnap daemon serve` in a session of its own; returns its pid.

    `why` goes to the daemon's status (how it came to be started).
    """
    make_store_dir(store_dir)
    argv = [sys.executable, "-c", _SERVE, "--root", root, "--store", store_dir]
    argv += ["--force"] if force else []
    argv += ["daemon", "serve", "--idle", str(idle)]
    from worksnap.storedir import StoreDir

    # Opened through the store's descriptor: a `daemon.log` that is a link or a FIFO is
    # refused. Appended to: a daemon started at once (the socket's winner) may write it.
    files = StoreDir(store_dir)
    try:
        files.trim(files.paths.daemon_log, keep=64 * 1024)  # (else it grows for ever)
        log = files.open_shared(files.paths.daemon_log, append=True)
    finally:
        files.close()
    env = dict(os.environ, WORKSNAP_NO_DAEMON="1", WORKSNAP_DAEMON_WHY=why or "started")
    try:
        os.fchmod(log, 0o600)  # the commands it logs are the owner's business
        return os.posix_spawn(
            sys.executable,
            argv,
            env,
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


# -- the workspaces ----------------------------------------------------------


class WorkspacePool:
    """Long-lived watched workspaces, by everything a command opens them with but the session."""

    def __init__(self) -> None:
        self.workspaces: dict[tuple[Any, ...], Workspace] = {}
        self.readers: dict[tuple[Any, ...], Workspace] = {}
        self._locks: dict[int, RWLock] = {}
        self._guard = threading.Lock()
        self._local = threading.local()
        self.report: Callable[[], dict[str, Any]] = lambda: {"pid": os.getpid()}
        """What the serving daemon says of itself (set by it; its `status` answer)."""

    def status(self) -> dict[str, Any]:
        """The serving daemon's `status` answer, for a command it runs (`worksnap status`)."""
        return self.report()

    def start_command(self, command: str, conn: socket.socket | None) -> None:
        """Notes what this thread runs (a reader or not) and for which client."""
        self._local.reader, self._local.hook = command in READERS, command == "hook"
        self._local.conn = conn
        self._local.held = []

    def end_command(self) -> None:
        """Releases every workspace this thread's command opened."""
        for lock, write in getattr(self._local, "held", []):
            lock.release(write=write)
        self._local.held = []

    def open(self, root: str, store: str | None, options: dict[str, Any]) -> Workspace:
        """The workspace for these options (opened and watched on first use), for this command.

        A command that only reads gets a view (its own session, progress and problems) of
        an unwatched workspace shared by all such commands; any other gets the watched
        workspace to itself until it ends.
        """
        from worksnap.workspace import Workspace

        session = options.pop("session")
        progress = options.pop("progress")
        options.setdefault("exclude", ())
        options.setdefault("max_file_bytes", None)  # the store's setting, read per command
        options.setdefault("force", False)
        key = (
            os.path.realpath(root),
            store_location(os.path.realpath(root), store),
            *sorted(options.items()),
        )
        reader = getattr(self._local, "reader", False)
        with self._guard:
            if reader:
                # Commands that only read share an unwatched workspace of their own: they
                # never wait for a snapshot or restore (one may sit at its prompt).
                shared = self.readers.get(key)
                if shared is None:
                    shared = Workspace(root, store=store, session=session, **options)
                    self.readers[key] = shared
                return shared.view(session=session, progress=self._interruptible(progress))
            ws = self.workspaces.pop(key, None)
            if ws is None:
                ws = Workspace(root, store=store, watch=True, session=session, **options)
                self._locks[id(ws)] = RWLock()
                if len(self.workspaces) >= _MAX_WORKSPACES:
                    self._retire(next(iter(self.workspaces)))
            self.workspaces[key] = ws  # most recently used last
            lock = self._locks[id(ws)]
        lock.take_to_write(hook=getattr(self._local, "hook", False))
        self._local.held = [*getattr(self._local, "held", []), (lock, True)]
        ws.use(session=session, progress=self._interruptible(progress))
        return ws

    def _retire(self, key: tuple[Any, ...]) -> None:
        ws = self.workspaces.pop(key)
        lock = self._locks.pop(id(ws))
        lock.acquire(write=True)  # let the commands using it finish
        try:
            ws.close()
        finally:
            lock.release(write=True)

    def _interruptible(self, progress: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """Wraps `progress`: a client gone (Ctrl-C) interrupts the command once (rollbacks end)."""
        client = getattr(self._local, "conn", None)
        interrupted = False

        def report(done: Any) -> None:
            nonlocal interrupted
            signum = stopped_by(client) if client is not None and not interrupted else None
            if signum is not None:
                interrupted = True
                raise came(signum)
            if progress is not None and not interrupted:
                progress(done)

        return report

    def audit(self, check: Callable[[], None], log: Callable[[str], None]) -> tuple[int, int]:
        """Audits every idle workspace; returns (workspaces audited, differences found)."""
        audited = found = 0
        with self._guard:
            workspaces = [(ws, self._locks[id(ws)]) for ws in self.workspaces.values()]
        for ws, lock in workspaces:
            if not ws.watching or not lock.acquire(write=True, blocking=False):
                continue
            try:
                missed = ws.audit(check=check)
            finally:
                lock.release(write=True)
            audited += 1
            found += len(missed)
            for line in missed:
                log(f"audit: the watcher missed {line}; the watched state was rebuilt")
        return audited, found

    def drop_all(self) -> None:
        """Closes every workspace (storing their caches)."""
        with self._guard:
            for key in list(self.workspaces):
                self._retire(key)
            for ws in self.readers.values():
                ws.close()
            self.readers.clear()


Runner = Callable[[list[str], "WorkspacePool"], int]
"""Runs one command line with workspaces from the pool (the CLI's own entry point)."""


class _AuditAbandoned(Exception):
    """A command arrived: the audit gives way."""


# -- serving -----------------------------------------------------------------


class _Daemon:
    """The state of one serving daemon."""

    def __init__(self, root: str, store_dir: str, idle: float, run: Runner) -> None:
        self.root = root
        self.store_dir = store_dir
        self.idle = idle
        self.run = run
        self.pool = WorkspacePool()
        self.context = Context()
        self.code = code_stamp()
        self.lock = threading.Lock()
        self.active = 0
        self.last_command = time.monotonic()
        self.stopping = threading.Event()
        self.why_stopping = ""  # for the log's last line
        self.private_fs = True
        self.audit_every = float(os.environ.get("WORKSNAP_AUDIT_EVERY", AUDIT_EVERY_SECONDS))
        self.state: dict[str, Any] = {
            "pid": os.getpid(),
            "root": root,
            "store": store_dir,
            "started": time.time(),
            "started_by": os.environ.get("WORKSNAP_DAEMON_WHY", "started"),
            "requests": 0,
            "idle_seconds": idle,
            "audits": 0,
            "audit_differences": 0,
            "last_audit": None,
        }
        self.audit_wanted = threading.Event()
        self.audit_done = threading.Condition()
        self.pool.report = self.status

    def stop(self, why: str) -> None:
        """Serves no new client; the commands running finish (safe in a signal handler)."""
        self.why_stopping = self.why_stopping or why
        self.stopping.set()

    def status(self) -> dict[str, Any]:
        """What a `status` request is answered with."""
        with self.lock:
            state = dict(self.state)
        watching = any(ws.watching for ws in list(self.pool.workspaces.values()))
        return {**state, "workspaces": len(self.pool.workspaces), "watching": watching}

    def log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        print(f"{stamp} {line}", file=self.context.streams[1]._default, flush=True)

    # -- one client ---------------------------------------------------------

    def serve_client(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._serve_client(conn)
        finally:
            with self.lock:
                self.active -= 1
                self.last_command = time.monotonic()

    def _serve_client(self, conn: socket.socket) -> None:
        if peer_uid(conn) != os.getuid():
            return  # never serve another user (the socket's mode should keep them out)
        conn.settimeout(HANDSHAKE_SECONDS)  # a client that says nothing is dropped
        try:
            message, fds = receive(conn, max_fds=3)
        except OSError:
            return
        try:
            conn.settimeout(None)
            if self._answer(conn, message, fds):
                fds = []  # handed to the command's streams, closed with them
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)

    def _answer(self, conn: socket.socket, message: dict[str, Any] | None, fds: list[int]) -> bool:
        """Answers one request; True when `fds` went to a command (else the caller closes them)."""
        if message is None:
            return False
        op = message.get("op")
        if op == "status":
            send(conn, self.status())
            return False
        if op == "stop":
            self.stop("asked to (daemon stop)")
            send(conn, {"stopped": True})
            return False
        if op == "audit":
            send(conn, self.audit_now())
            return False
        fresh_code = code_stamp()
        refused = refusal(message, len(fds)) or (
            None if message.get("code") == self.code == fresh_code else "the daemon runs other code"
        )
        if refused is not None:
            send(conn, {"started": False, "reason": refused})
            if fresh_code != self.code:
                self.stop("its code changed (an upgrade): the next command starts anew")
            return False
        send(conn, {"started": True})
        with self.lock:
            self.state["requests"] += 1
        exit_code = self._run_for_client(message, fds, conn)
        with contextlib.suppress(OSError):
            send(conn, {"exit": exit_code})
        return True

    def _run_for_client(self, message: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
        """Runs the command as if in the client: its cwd, umask, environment and streams."""
        argv = [str(a) for a in message.get("argv", [])]
        parsed = parse(argv)
        command = parsed[0] if parsed is not None else ""
        (in_enc, in_err), (out_enc, out_err), (err_enc, err_err) = message["streams"]
        stdin = io.TextIOWrapper(
            io.BufferedReader(ClientInput(fds[0], conn)), encoding=in_enc, errors=in_err
        )
        stdout = client_output(fds[1], conn, out_enc, out_err)
        stderr = client_output(fds[2], conn, err_enc, err_err)
        streams = (stdin, stdout, stderr)
        context = self.context
        serial = context.serial if not self.private_fs else contextlib.nullcontext()
        try:
            with serial:
                os.chdir(message["cwd"])
                os.umask(int(message.get("umask", 0o022)) & 0o777)
                context.environ.use(dict(message["env"]))
                for proxy, stream in zip(context.streams, streams, strict=True):
                    proxy.use(stream)
                self.pool.start_command(command, conn)
                try:
                    return self.run(argv, self.pool)
                except SystemExit as exc:  # argparse, --help
                    code = exc.code
                    return 0 if code is None else code if isinstance(code, int) else 2
                except Exception:  # a bug: report it, and start the workspaces afresh
                    import traceback

                    traceback.print_exc(file=stderr)
                    self.pool.end_command()
                    self.pool.drop_all()
                    return 1
                finally:
                    self.pool.end_command()
        except OSError as exc:  # the client's directory is gone
            print(f"worksnap: error: {exc}", file=stderr)
            return 1
        finally:
            for proxy in context.streams:
                proxy.use(None)
            context.environ.use(None)
            for stream in (stdout, stderr, stdin):
                with contextlib.suppress(OSError, ValueError):
                    stream.close()

    # -- auditing -------------------------------------------------------------

    def audit_now(self) -> dict[str, Any]:
        """Asks the audit thread for an audit now and waits for it; returns its counts."""
        with self.audit_done:
            before = self.state["audits"]
            self.audit_wanted.set()
            self.audit_done.wait_for(lambda: self.state["audits"] != before, timeout=120)
        return {k: self.state[k] for k in ("audits", "audit_differences", "last_audit")}

    def audit_loop(self) -> None:
        """The audit thread: the lowest priority; runs when idle, gives way to any command."""
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread only
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        last = time.monotonic()
        while not self.stopping.is_set():
            asked = self.audit_wanted.wait(_TICK_SECONDS)
            now = time.monotonic()
            due = (
                now - last >= self.audit_every
                and now - self.last_command >= AUDIT_AFTER_IDLE_SECONDS
                and self.active == 0
            )
            if not asked and not due:
                continue
            self.audit_wanted.clear()
            last = now

            def check(asked: bool = asked) -> None:
                if self.active and not asked:
                    raise _AuditAbandoned

            try:
                audited, found = self.pool.audit(check, self.log)
            except _AuditAbandoned:
                continue
            except Exception as exc:  # an audit must never take the daemon down
                self.log(f"audit failed: {exc!r}")
                audited, found = 0, 0
            with self.audit_done:
                self.state["audits"] += 1
                self.state["audit_differences"] += found
                self.state["last_audit"] = time.time()
                self.audit_done.notify_all()
            if audited:
                self.log(f"audit: {audited} workspace(s), {found} difference(s)")


def serve(root: str, store_dir: str, *, idle: float, run: Runner) -> None:
    """Serves commands for the store until `idle` seconds pass without one, or `stop`.

    `run` runs one command line (the CLI's own entry point) with workspaces from the pool.
    Also stops when its socket is removed or replaced, or on SIGTERM.
    """
    make_store_dir(store_dir)
    path = StorePaths(store_dir).socket
    if request(store_dir, "status") is not None:
        raise OSError(f"a daemon is already running for {store_dir}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # left by a daemon that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o077)  # the socket is the owner's alone
    where, fd = address(store_dir)
    try:
        listener.bind(where)
    finally:
        os.umask(old_umask)
        if fd is not None:
            os.close(fd)
    listener.listen(64)
    listener.settimeout(min(_TICK_SECONDS, idle))
    inode = os.stat(path).st_ino
    daemon = _Daemon(root, store_dir, idle, run)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop("SIGTERM"))
    daemon.context.install()
    daemon.log(f"worksnap daemon {os.getpid()} serving {store_dir} ({daemon.state['started_by']})")
    threads: list[threading.Thread] = []
    try:
        with contextlib.suppress(Exception):
            # Warm up: the first scan sets the watches, so the first command is fast too.
            daemon.pool.start_command("warm-up", None)
            try:
                daemon.pool.open(root, store_dir, {"session": "default", "progress": None}).capture(
                    store_objects=False
                )
            finally:
                daemon.pool.end_command()
        _trim_memory()
        auditor = threading.Thread(target=daemon.audit_loop, name="audit", daemon=True)
        auditor.start()
        while not daemon.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                quiet = time.monotonic() - daemon.last_command
                if daemon.active == 0 and quiet > idle:
                    return daemon.stop(f"idle for {idle:g} s")
                if not _still_ours(path, inode):
                    return daemon.stop("its socket was removed or replaced")
                continue
            with daemon.lock:
                if daemon.active >= MAX_CLIENTS:
                    conn.close()  # its client runs the command itself
                    continue
                daemon.active += 1
            thread = threading.Thread(
                target=_client_thread, args=(daemon, conn), name="client", daemon=True
            )
            thread.start()
            threads = [t for t in threads if t.is_alive()] + [thread]
    finally:
        daemon.stopping.set()
        if _still_ours(path, inode):
            os.unlink(path)  # no new client from here on
        listener.close()
        for thread in threads:
            thread.join(timeout=60)  # the commands running finish
        daemon.pool.drop_all()
        daemon.log(f"worksnap daemon {os.getpid()} stopped: {daemon.why_stopping or 'an error'}")


def _client_thread(daemon: _Daemon, conn: socket.socket) -> None:
    if daemon.private_fs and not private_fs():
        daemon.private_fs = False  # commands take turns in the shared directory and umask
    daemon.serve_client(conn)
    if daemon.active == 0:
        _trim_memory()


def _trim_memory() -> None:
    """Gives freed memory back (glibc keeps it): 141 to 118 MB after a 47k-file snapshot."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _still_ours(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False
