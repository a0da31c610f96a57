"""The Google front end: callSlurmRestApi, the OAuth token endpoint and IAM impersonation over HTTP, and the
jobs' metadata server (``metadata.py``) on the same port."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple, Protocol
from urllib.parse import parse_qs

from .auth import AccessToken, GrantError, TokenAuthority
from .faults import AFTER_KINDS, AFTER_SUFFIX, GOOGLE_ERRORS, Fault, FaultInjector
from .metadata import FLAVOR, FLAVOR_HEADER, MetadataServer, is_metadata_path
from .slurmrest import InvalidPath, TextFault

logger = logging.getLogger("airflow_provider_slurmapi.emulator")

MAX_REQUEST_BYTES = 1_000_000
_DRAIN_LIMIT = 64 * 1024 * 1024
_CALL_PATH = re.compile(
    r"^/v1beta1/projects/([^/]+)/locations/([^/]+)/modelDevelopmentClusters/([^/:]+):callSlurmRestApi$"
)
_IAM_PATH = re.compile(r"^/v1/projects/-/serviceAccounts/([^/:]+):generateAccessToken$")
_METHODS = {"HTTP_METHOD_GET": "GET", "HTTP_METHOD_POST": "POST", "HTTP_METHOD_DELETE": "DELETE"}
_ENVELOPE_FIELDS = ("method", "path", "body")
_RUN_PERMISSION = "aiplatform.googleapis.com/modelDevelopmentClusters.run"
_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other "
    "valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."
)


_JOB_PAGE = re.compile(r"^/jobs/([0-9]{1,12})/?$")


class SlurmBackend(Protocol):
    """The Slurm half of a call: the simulated cluster (``SlurmRest``) or a real slurmrestd (proxy mode)."""

    def call(self, method: str, path: str, body: dict[str, Any] | None, user: str) -> tuple[int, dict[str, Any]]: ...

    def dbd_down_reply(self) -> dict[str, Any]: ...


class Call(NamedTuple):
    """One callSlurmRestApi request as the emulator saw it: Slurm method and path, HTTP status returned."""

    method: str
    path: str
    status: int


class GoogleError(Exception):
    """A Google-level error reply: ``{"error": {code, message, status}}``."""

    def __init__(self, code: int, status: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "status": self.status}}


@dataclass
class Frontend:
    """Everything the request handler needs, shared by all handler threads."""

    project: str
    region: str
    cluster: str
    authority: TokenAuthority
    slurm: SlurmBackend
    faults: FaultInjector
    allowed_principals: set[str]
    service_accounts: set[str]
    log_calls: bool = False
    # How replies carry Slurm's answer: "structuredBody" (an object) or "body" (a JSON string).
    reply_shape: str = "structuredBody"
    # Renders ``GET /jobs/{id}`` (the human-readable job page), or None where there is none (proxy mode).
    job_page: Callable[[int], str | None] | None = None
    # The jobs' metadata server (``GET /`` and ``/computeMetadata/...``), or None where there is none.
    metadata: MetadataServer | None = None
    calls: list[Call] = field(default_factory=list)
    calls_lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, call: Call, slurm_status: int | None = None) -> None:
        with self.calls_lock:
            self.calls.append(call)
        if self.log_calls:
            suffix = f" (slurm {slurm_status})" if slurm_status is not None else ""
            logger.info("%s %s -> %s%s", call.method or "-", call.path or "-", call.status, suffix)


class _TooLarge(Exception):
    """A request body over the limit, refused from its declared length before it is read."""

    def __init__(self, size: int, chunked: bool) -> None:
        super().__init__(size)
        self.size = size
        self.chunked = chunked


class Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection to the emulated Google endpoints."""

    protocol_version = "HTTP/1.1"
    # Buffered, so headers and body leave in one write: two small writes meet Nagle and delayed ACKs.
    wbufsize = -1
    server: EmulatorHTTPServer
    server_version = "ESF"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    @property
    def frontend(self) -> Frontend:
        return self.server.frontend

    # ---- plumbing ----------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode("utf-8"), "application/json; charset=UTF-8", headers)

    def _send_error(self, error: GoogleError) -> None:
        headers = {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'} if error.code == 401 else {}
        self._send_json(error.code, error.body(), headers)

    def _reset(self) -> None:
        """Abort the connection: a TCP RST, no reply."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _drain(self, length: int) -> None:
        """Read and drop a body we refuse, so the client gets to read our reply."""
        self.close_connection = True
        remaining = min(length, _DRAIN_LIMIT)
        self.connection.settimeout(5)
        try:
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass

    def _read_body(self) -> bytes:
        """The request body; a ``GoogleError`` if it is over the limit (decided before reading it)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise _TooLarge(length, chunked=False)
        return self.rfile.read(length) if length else b""

    def _refuse(self, exc: _TooLarge) -> None:
        self.close_connection = True
        self._send_error(_too_large(exc.size))
        if not exc.chunked:
            self._drain(exc.size)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(chunks)
            total += size
            if total > MAX_REQUEST_BYTES:
                raise _TooLarge(total, chunked=True)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

    # ---- routing -----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        """``/jobs/{id}``: a page for people (the demo's job link); ``/`` and ``/computeMetadata/...``: the
        jobs' metadata server; every other GET is Google's 404."""
        path = self.path.split("?")[0]
        metadata = self.frontend.metadata
        if metadata is not None and is_metadata_path(path):
            status, body, content_type = metadata.answer(self.path, self.headers.get(FLAVOR_HEADER))
            self._send(status, body, content_type, {FLAVOR_HEADER: FLAVOR})
            return
        match = _JOB_PAGE.match(path)
        page = self.frontend.job_page(int(match.group(1))) if match and self.frontend.job_page else None
        if page is None:
            self._not_found()
            return
        self._send(200, page.encode(), "text/html; charset=utf-8")

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        try:
            if path == "/token":
                self._token()
            elif _IAM_PATH.match(path):
                self._impersonate(_IAM_PATH.match(path).group(1))  # type: ignore[union-attr]
            elif _CALL_PATH.match(path):
                self._call(_CALL_PATH.match(path).groups())  # type: ignore[union-attr]
            else:
                self._not_found()
        except _TooLarge as exc:
            self._refuse(exc)

    def _not_found(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self._drain(length)
        elif length:
            self.rfile.read(length)
        self._send_error(GoogleError(404, "NOT_FOUND", f"The requested URL {self.path} was not found."))

    do_PUT = do_PATCH = do_DELETE = _not_found

    # ---- /token ------------------------------------------------------------------------------------

    def _token(self) -> None:
        body = self._read_body()
        fault = self.frontend.faults.take("token")
        if fault is not None and fault.kind == "token_slow":
            time.sleep(fault.delay)  # then answers as usual
        elif fault is not None:
            self._send_json(500, {"error": "internal_failure", "error_description": "Backend error"})
            return
        form = {key: values[0] for key, values in parse_qs(body.decode("utf-8", "replace")).items()}
        try:
            token, expires_in = self.frontend.authority.grant(form.get("grant_type", ""), form.get("assertion", ""))
        except GrantError as exc:
            self._send_json(400, {"error": exc.error, "error_description": exc.description})
            return
        self._send_json(200, {"access_token": token, "expires_in": expires_in, "token_type": "Bearer"})

    # ---- IAM generateAccessToken -------------------------------------------------------------------

    def _impersonate(self, email: str) -> None:
        body = self._read_body()
        try:
            caller = self._authenticate()
            if caller.principal not in self.frontend.service_accounts:
                raise GoogleError(
                    403,
                    "PERMISSION_DENIED",
                    "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
                )
            request = _json_object(body)
            targets = [email, *[_delegate_email(d) for d in request.get("delegates") or []]]
            unknown = [target for target in targets if target not in self.frontend.service_accounts]
            if unknown:
                raise GoogleError(404, "NOT_FOUND", f"Not found; Gaia id not found for email {unknown[0]}")
            scopes = request.get("scope") or []
            if not isinstance(scopes, list) or not scopes:
                raise GoogleError(400, "INVALID_ARGUMENT", "Scope required.")
            lifetime = _lifetime(request.get("lifetime", "3600s"))
        except GoogleError as error:
            self._send_error(error)
            return
        lifetime = min(lifetime, self.frontend.authority.token_lifetime)
        token = self.frontend.authority.issue(email, tuple(scopes), lifetime)
        expire = datetime.fromtimestamp(time.time() + lifetime, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._send_json(200, {"accessToken": token, "expireTime": expire})

    def _authenticate(self) -> AccessToken:
        token = self.frontend.authority.check(self.headers.get("Authorization"))
        if token is None:
            raise GoogleError(401, "UNAUTHENTICATED", _UNAUTHENTICATED)
        return token

    # ---- callSlurmRestApi --------------------------------------------------------------------------

    def _call(self, resource: tuple[str, ...]) -> None:
        frontend = self.frontend
        method = path = ""
        try:
            raw = self._read_body()
        except _TooLarge:
            frontend.record(Call("", "", 400))
            raise
        try:
            envelope = _json_object(raw)
            method = _METHODS.get(str(envelope.get("method")), "")
            raw_path = envelope.get("path")
            path = raw_path if isinstance(raw_path, str) else ""
        except GoogleError:
            envelope = None
        fault = frontend.faults.take("call", path, f"HTTP_METHOD_{method}" if method else "")
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay)
        if fault is not None and fault.kind == "reset":
            frontend.record(Call(method, path, 0))
            self._reset()
            return
        # Each call is recorded before its reply leaves, so a client that has the reply sees the record.
        if fault is not None and fault.kind in GOOGLE_ERRORS:
            code, status, message = GOOGLE_ERRORS[fault.kind]
            frontend.record(Call(method, path, code))
            self._send_error(GoogleError(code, status, message))
            return
        try:
            reply, slurm_status = self._execute(resource, raw, envelope, fault)
        except GoogleError as error:
            frontend.record(Call(method, path, error.code))
            self._send_error(error)
            return
        if fault is not None and fault.kind in AFTER_KINDS:
            code, status, message = GOOGLE_ERRORS[fault.kind.removesuffix(AFTER_SUFFIX)]
            frontend.record(Call(method, path, code), slurm_status)
            self._send_error(GoogleError(code, status, message))
            return
        if fault is not None and fault.kind == "lost_reply":
            frontend.record(Call(method, path, 0), slurm_status)
            self._reset()
            return
        data = json.dumps(reply).encode("utf-8")
        if fault is not None and fault.kind == "malformed":
            data = data[: max(1, len(data) // 2)]
        frontend.record(Call(method, path, 200), slurm_status)
        self._send(200, data, "application/json; charset=UTF-8")

    def _execute(
        self, resource: tuple[str, ...], raw: bytes, envelope: dict[str, Any] | None, fault: Fault | None
    ) -> tuple[dict[str, Any], int]:
        frontend = self.frontend
        token = self._authenticate()
        project, region, cluster = resource
        if token.principal not in frontend.allowed_principals:
            raise GoogleError(
                403,
                "PERMISSION_DENIED",
                f"Permission '{_RUN_PERMISSION}' denied on resource '//aiplatform.googleapis.com/projects/"
                f"{project}/locations/{region}/modelDevelopmentClusters/{cluster}' (or it may not exist).",
            )
        if (project, region) != (frontend.project, frontend.region) or cluster != frontend.cluster:
            raise GoogleError(
                404,
                "NOT_FOUND",
                f"ModelDevelopmentCluster projects/{project}/locations/{region}/modelDevelopmentClusters/"
                f"{cluster} not found.",
            )
        if envelope is None:
            envelope = _json_object(raw)
        method, path, body = _validate_envelope(envelope)
        user = token.principal.split("@")[0]
        if fault is not None and fault.kind == "slurmdbd_down":
            status, reply = 502, frontend.slurm.dbd_down_reply()
        else:
            try:
                status, reply = frontend.slurm.call(method, path, body, user)
            except InvalidPath as exc:
                raise GoogleError(400, "INVALID_ARGUMENT", f"Invalid Slurm REST API path: {exc}") from exc
            except TextFault as exc:
                raise GoogleError(500, "INTERNAL", str(exc)) from exc
        if frontend.reply_shape == "body":
            return {"status": status, "body": json.dumps(reply)}, status
        return {"status": status, "structuredBody": reply}, status


def _too_large(size: int) -> GoogleError:
    return GoogleError(
        400, "INVALID_ARGUMENT", f"Request payload size exceeds the limit: {MAX_REQUEST_BYTES} bytes ({size})."
    )


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise GoogleError(400, "INVALID_ARGUMENT", f"Invalid JSON payload received. {exc}") from exc
    if not isinstance(value, dict):
        raise GoogleError(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Expected an object.")
    return value


def _validate_envelope(envelope: dict[str, Any]) -> tuple[str, str, dict[str, Any] | None]:
    for name in envelope:
        if name not in _ENVELOPE_FIELDS:
            raise GoogleError(
                400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
            )
    method_value = envelope.get("method")
    method = _METHODS.get(str(method_value))
    if method is None:
        raise GoogleError(
            400, "INVALID_ARGUMENT", f"Invalid value at 'method' (type.googleapis.com/HttpMethod), {method_value!r}"
        )
    path = envelope.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise GoogleError(400, "INVALID_ARGUMENT", f"Invalid Slurm REST API path: {path!r}")
    body = envelope.get("body")
    if method == "POST" and not isinstance(body, dict):
        raise GoogleError(400, "INVALID_ARGUMENT", "body is required for HTTP_METHOD_POST")
    if method != "POST" and body is not None:
        raise GoogleError(400, "INVALID_ARGUMENT", f"body must be omitted for HTTP_METHOD_{method}")
    return method, path, body


def _delegate_email(delegate: Any) -> str:
    return str(delegate).rsplit("/", 1)[-1]


def _lifetime(value: Any) -> float:
    text = str(value)
    try:
        seconds = float(text.removesuffix("s"))
    except ValueError as exc:
        raise GoogleError(400, "INVALID_ARGUMENT", f"Invalid value at 'lifetime' ({text!r})") from exc
    if not text.endswith("s") or seconds <= 0 or seconds > 43200:
        raise GoogleError(400, "INVALID_ARGUMENT", f"Invalid value at 'lifetime' ({text!r})")
    return seconds


class EmulatorHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the ``Frontend``."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], frontend: Frontend) -> None:
        super().__init__(address, Handler)
        self.frontend = frontend
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End idle keep-alive connections so their handler threads finish and can be joined."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("connection from %s ended with an error", client_address, exc_info=True)
