"""Client: hands a command to the store's daemon, importing next to nothing.

`python -m worksnap` and the `worksnap` script start here (`__main__.main`). When a daemon serves
the store, the command line, working directory, environment, umask and the three
standard descriptors go to it over `<store>/daemon.sock` (as Mercurial's chg does)
and this process only waits for the exit code: it imports no argparse, no msgspec
and none of the engine (under 30 ms of client time; docs/performance.md). When
none serves it (none running, another user's, one running other code or seeing another
file system, Windows or macOS, `WORKSNAP_NO_DAEMON=1`), the full command line runs here
as usual.

Only the options that decide which store is meant are read here (`--root`,
`--store`, before or after the command), and the root and store are found from them
as the full command line finds them (`layout.locate`: up to the nearest store, the
git work tree's top, or the current directory; `<git-dir>/worksnap`), so a command
run in a subdirectory reaches the daemon of the store it works on. Anything this
reader cannot be sure of (an abbreviated option, a local-only command) goes to the
full command line, which parses it properly and forwards it itself when it can.
"""

from __future__ import annotations

import _socket  # the C module: `socket` itself imports enum and selectors (3 ms)
import marshal  # built in: json would import re (10 ms)
import os
import struct
import sys

from worksnap.layout import StorePaths, locate, store_location
from worksnap.stopsignals import NAMES

TYPE_CHECKING = False  # typing costs 9 ms to import; mypy treats this name as True
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal  # the C module: `signal` itself imports enum and functools (12 ms)

PROTOCOL = 3
"""3: a `run` request says what file system its client sees (`file_system_view`)."""
SUPPORTED = sys.platform.startswith("linux")
"""The daemon needs inotify (for the watch) and SO_PEERCRED: Linux."""

LOCAL_ONLY = frozenset(
    {"run", "rebind", "daemon", "completion", "hooks", "mcp", "remote", "push", "pull"}
)
"""Never run in the daemon: `run` and `mcp` would hold it for the whole command, `rebind`
changes what the store is bound to, `daemon` manages it, `completion` needs no store,
`hooks` edits the agent's settings, not the store; `remote`, `push` and `pull` reach a
remote with this process's credentials (the AWS environment), not the daemon's."""

FULL_LINE_FIRST = frozenset({"hook"})
"""Forwarded by the full command line, not from here: `hook` reads its event (stdin)
and enters the event's `cwd` before the store is found, then hands the event on with
`--event` (a daemon given a bare `hook` would find no event)."""

MAX_MESSAGE = 1 << 20
HEADER = struct.Struct("!I")
_FD = struct.Struct("i")
VALUED_GLOBALS = frozenset({"--root", "--store", "--session"})
"""The global options whose value is the next word (also `cmdpaths`'s: one list)."""


class DaemonLost(Exception):
    """The daemon accepted a command and stopped before it said how it ended."""


class Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP ended the wait for the daemon.

    Attributes:
        signum: the (first) signal's number: the client exits 128 + it.
        running: the daemon has the command and goes on stopping it (this was a second
            signal); else it never started it.
    """

    def __init__(self, signum: int, *, running: bool) -> None:
        super().__init__(signum)
        self.signum = signum
        self.running = running

    def said(self) -> str:
        """The one line the client prints, on a line of its own (a progress line erased)."""
        by = "" if self.signum == _signal.SIGINT else f" by {NAMES[self.signum]}"
        if not self.running:
            return f"worksnap: interrupted{by}"
        erase = "\r\x1b[K" if _isatty(2) else ""  # the daemon's progress line, if one is shown
        return (
            f"{erase}worksnap: interrupted{by}; the daemon goes on stopping the command in the "
            "background (a restore it had begun rolls back before another can start)"
        )


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def stopped(exc: Stopped) -> int:
    """Prints what `exc` says on stderr; returns the exit code, 128 + the signal's number."""
    try:
        print(exc.said(), file=sys.stderr)
    except OSError:
        pass  # SIGHUP: the terminal may be gone
    return 128 + exc.signum


def run(argv: list[str]) -> tuple[int | None, bool]:
    """Runs a command line in the store's daemon if one serves it.

    Returns the exit code (None: run it here) and whether a daemon was asked.
    """
    target = forwardable(argv)
    if target is None:
        return None, False
    try:
        return forward(argv, *target), True
    except DaemonLost:
        return lost(*target), True
    except Stopped as exc:
        # Before the daemon took the command, or a second time while it was stopping it
        # (a first one it is told of, and it says how it left the tree).
        return stopped(exc), True
    except KeyboardInterrupt:  # outside the relay's window (connecting): claims nothing
        print("worksnap: interrupted", file=sys.stderr)
        return 130, True


def lost(root: str, store: str | None) -> int:
    """Says that the daemon stopped while it ran the command, and what to do; returns 1.

    A restore it ran is left unfinished (its journal is there): the next command rolls
    it back first, `recover` at once (a review was sent to `list`).
    """
    journal = StorePaths(store_location(os.path.realpath(root), store)).journal
    advice = (
        "it left a restore unfinished: the next command rolls it back first, or run "
        "`worksnap recover` now"
        if os.path.lexists(journal)
        else "run `worksnap list` to see what was done"
    )
    print(f"worksnap: error: the daemon stopped while running the command ({advice})",
          file=sys.stderr)  # fmt: skip
    return 1


def forwardable(argv: list[str]) -> tuple[str, str] | None:
    """(root, store) of a command line the daemon may run; None when it must run here.

    Found as the full command line finds them (`layout.locate`), from the current
    directory, `--root`, `--store` and `$WORKSNAP_STORE`.
    """
    if not SUPPORTED or os.environ.get("WORKSNAP_NO_DAEMON"):
        return None
    parsed = parse(argv)
    if parsed is None or parsed[0] in LOCAL_ONLY or parsed[0] in FULL_LINE_FIRST:
        return None
    _, root, store = parsed
    try:
        found = locate(os.getcwd(), root=root, store=store)
    except OSError:
        return None  # the current directory is gone: the full command line says so
    return found.root, found.store


def parse(argv: list[str]) -> tuple[str, str | None, str | None] | None:
    """(command, root, store) of a command line; None when only argparse can tell.

    `root` and `store` are None when not given.
    """
    root: str | None = None
    store: str | None = None
    command: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in VALUED_GLOBALS:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            if name == "--root":
                root = value
            elif name == "--store":
                store = value
        elif name in ("-h", "--help", "--version"):
            return None
        elif arg.startswith(("--r", "--st", "--se")):
            return None  # an abbreviation argparse would accept: let it decide
        elif command is None and not arg.startswith("-"):
            command = arg
        i += 1
    return None if command is None else (command, root, store)


def forward(
    argv: list[str],
    root: str,
    store: str | None,
    *,
    owner: int | None = None,
    fds: tuple[int, int, int] = (0, 1, 2),
) -> int | None:
    """Runs a command in the store's daemon, if one serves it; returns its exit code.

    None: no daemon (or it declined, e.g. it runs older code); run the command here.
    `owner` is the uid the daemon must run as (default: ours; tests name another),
    `fds` the standard descriptors it gets (tests hand it pipes).

    Ctrl-C (or SIGTERM, SIGHUP) while the daemon has the command is relayed
    (`_relay_stops`): the daemon stops it as Ctrl-C would here and prints the one line
    saying how, and its exit code is returned (130; 128 + the signal for another). A
    second one stops the wait.

    Raises:
        DaemonLost: the daemon started the command and stopped before it ended.
        Stopped: a signal before the daemon started the command (nothing ran), or a
            second one.
    """
    if not SUPPORTED or os.environ.get("WORKSNAP_NO_DAEMON") or not os.path.isdir(root):
        return None
    try:
        for fd in fds:
            os.fstat(fd)  # a closed standard descriptor cannot be handed over
        cwd = os.getcwd()  # gone (a restore removed it): run here, where `--root` still works
    except OSError:
        return None
    sock = connect(store_location(os.path.realpath(root), store), owner)
    if sock is None:
        return None
    previous, seen = _relay_stops(sock)
    try:
        request = {
            "op": "run",
            "protocol": PROTOCOL,
            "code": code_stamp(),
            "argv": argv,
            "cwd": cwd,
            "env": dict(os.environ),
            "umask": _umask(),
            "view": file_system_view(),
            "streams": [
                [stream.encoding, stream.errors] for stream in (sys.stdin, sys.stdout, sys.stderr)
            ],
        }
        try:
            send(sock, request, list(fds))
            answer, _ = receive(sock)
        except OSError:
            answer = None
        if answer is None or not answer.get("started"):
            if seen:
                raise Stopped(seen[0], running=False)  # never run it here after a Ctrl-C
            return None
        try:
            result, _ = receive(sock)
        except OSError:
            result = None
    finally:
        for signum, handler in previous:
            _signal.signal(signum, handler)
        sock.close()
    if result is None or not isinstance(result.get("exit"), int):
        raise DaemonLost
    code: int = result["exit"]
    if seen and seen[0] != _signal.SIGINT and code == 130:
        return 128 + seen[0]  # the daemon stopped it as at Ctrl-C: exit as the signal says
    return code


def _relay_stops(sock: _socket.socket) -> tuple[list[tuple[int, Any]], list[int]]:
    """Makes Ctrl-C, SIGTERM and SIGHUP close our end of `sock` for writing: the daemon's Ctrl-C.

    The daemon then stops the command at its next progress report or read of the
    terminal (a restore rolls back), prints the one line saying so on our stderr, and
    sends the exit code, which we go on waiting for: this process printing a line of
    its own too was a second "interrupted" (a review). A second signal raises `Stopped`.
    (SIGTERM and SIGHUP ended the client at once: the daemon rolled back anyway, and
    wrote its line after the shell's prompt.) Returns the handlers to put back and the
    signals that came (a list the handler appends to). A signal not at its default
    here (ignored in a background job or under `nohup`; not the main thread) is left
    alone.
    """
    previous: list[tuple[int, Any]] = []
    seen: list[int] = []

    def relay(signum: int, frame: Any) -> None:
        if seen:
            raise Stopped(seen[0], running=True)
        seen.append(signum)
        try:
            sock.send(bytes([signum]))  # which one (the daemon says it: `clientctx.stopped_by`)
            sock.shutdown(_socket.SHUT_WR)
        except OSError:
            pass  # the daemon is gone: the wait ends (DaemonLost)

    try:
        for signum, default in (
            (_signal.SIGINT, _signal.default_int_handler),
            (_signal.SIGTERM, _signal.SIG_DFL),
            (_signal.SIGHUP, _signal.SIG_DFL),
        ):
            handler = _signal.getsignal(signum)
            if handler == default:
                _signal.signal(signum, relay)
                previous.append((signum, handler))
    except ValueError:  # not the main thread
        pass
    return previous, seen


def request(store_dir: str, op: str, *, owner: int | None = None) -> dict[str, Any] | None:
    """Sends `status`, `stop` or `audit` to the store's daemon; None when none is running.

    `owner` is the uid the daemon must run as (default: ours; tests name another).
    """
    if not SUPPORTED:
        return None
    sock = connect(store_dir, owner)
    if sock is None:
        return None
    try:
        send(sock, {"op": op, "protocol": PROTOCOL})
        answer, _ = receive(sock)
    except OSError:
        return None
    finally:
        sock.close()
    return answer


def refusal(message: dict[str, Any], fds: int) -> str | None:
    """Why the daemon must not run a `run` request (`fds`: how many descriptors came); None: it may.

    A client in another mount namespace or under another root (`unshare -m`, bwrap, a
    container or chroot sharing the store's path) sees other files than the daemon:
    served, its snapshot held the daemon's tree and its restore wrote where the client
    could not (a review). It runs the command itself instead, on its own view.
    """
    if message.get("op") != "run" or message.get("protocol") != PROTOCOL or fds != 3:
        return "not a request this daemon's protocol runs"
    view = file_system_view()
    if view is None or message.get("view") != view:
        return "the client sees another file system (a mount namespace or root of its own)"
    return None


def file_system_view() -> list[int] | None:
    """What names this process's view of the file system (None: unknown); two `stat`s.

    The (st_dev, st_ino) of its mount namespace (`/proc/self/ns/mnt`) and of its `/`.
    """
    try:
        namespace, top = os.stat("/proc/self/ns/mnt"), os.stat("/")
    except OSError:
        return None
    return [namespace.st_dev, namespace.st_ino, top.st_dev, top.st_ino]


def _umask() -> int:
    """This process's umask, read without changing it (a thread could create a file meanwhile)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def code_stamp() -> list[list[str | int]]:
    """Names, sizes and mtimes of this package's modules: a daemon serves only its own code."""
    here = os.path.dirname(os.path.abspath(__file__))
    stamp: list[list[str | int]] = []
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            st = os.stat(os.path.join(here, name))
            stamp.append([name, st.st_size, st.st_mtime_ns])
    return stamp


def address(store_dir: str) -> tuple[str, int | None]:
    """A socket address for the store's socket that fits AF_UNIX's ~107-byte limit.

    Returns the address and a descriptor to close once it was used (or None).
    """
    path = StorePaths(store_dir).socket
    if len(os.fsencode(path)) < 100:
        return path, None
    fd = os.open(store_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


def connect(store_dir: str, owner: int | None) -> _socket.socket | None:
    """Connects to the store's daemon; None when no daemon of `owner` (default: us) listens."""
    if not os.path.exists(StorePaths(store_dir).socket):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    where, fd = address(store_dir)
    try:
        sock.connect(where)
    except OSError:
        sock.close()
        return None  # a socket left by a daemon that was killed
    finally:
        if fd is not None:
            os.close(fd)
    if peer_uid(sock) != (os.getuid() if owner is None else owner):
        sock.close()  # not ours: never hand our terminal to another user's process
        return None
    return sock


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid


def send(sock: _socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """Sends one message (a length, then the message in `marshal` form), and `fds` with it."""
    body = marshal.dumps(message)
    head = HEADER.pack(len(body))
    if fds:
        rights = b"".join(_FD.pack(fd) for fd in fds)
        sent = sock.sendmsg([head], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        head = head[sent:]
    sock.sendall(head + body)


def receive(sock: _socket.socket, *, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """Reads one message (and up to `max_fds` descriptors); None at end of stream or if broken."""
    fds: list[int] = []
    if max_fds:
        head, ancillary, _, _ = sock.recvmsg(HEADER.size, _socket.CMSG_SPACE(max_fds * _FD.size))
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(data) - len(data) % _FD.size
                fds += [_FD.unpack_from(data, i)[0] for i in range(0, usable, _FD.size)]
    else:
        head = sock.recv(HEADER.size)
    head += _read_exactly(sock, HEADER.size - len(head)) if head else b""
    message = None
    if len(head) == HEADER.size:
        (length,) = HEADER.unpack(head)
        body = _read_exactly(sock, length) if length <= MAX_MESSAGE else b""
        if len(body) == length:
            try:
                message = marshal.loads(body)
            except (ValueError, EOFError, TypeError):
                message = None
    if not isinstance(message, dict):
        for fd in fds:
            os.close(fd)  # a broken message: nothing it handed over is kept
        return None, []
    return message, fds


def _read_exactly(sock: _socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data
