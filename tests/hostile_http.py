"""Misbehaving HTTP servers on loopback for the clients' transport tests: slow, trickling, cut short,
redirecting, oversized, or behind a bad TLS certificate.

Each :class:`LoopbackServer` is a raw socket server in a thread that reads one request per connection,
records it, answers it with one behaviour and closes the connection. Every behaviour stops by itself
within a bound (``MAX_SECONDS``), so a client that fails to give up cannot hang a test run.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_SECONDS = 15.0
OK_BODY = json.dumps({"jobs": [], "errors": [], "warnings": []}).encode()


@dataclass
class Seen:
    """One request as the server read it."""

    method: str
    path: str
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)


Behaviour = Callable[["LoopbackServer", socket.socket, Seen], None]


class LoopbackServer:
    """An HTTP/1.1 server on 127.0.0.1 answering every request with ``behaviour``; ``tls`` serves https."""

    def __init__(self, behaviour: Behaviour, *, tls: ssl.SSLContext | None = None) -> None:
        self.behaviour = behaviour
        self.tls = tls
        self.seen: list[Seen] = []
        self.connections = 0
        self.sent = 0
        self.stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self._threads[:1]:
            thread.join(timeout=MAX_SECONDS)
        self._listener.close()
        for conn in list(self._open):
            with contextlib.suppress(OSError):
                conn.close()
        for thread in self._threads[1:]:
            thread.join(timeout=MAX_SECONDS)

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self._open.append(conn)
            seen = _read_request(conn)
            self.seen.append(seen)
            self.behaviour(self, conn, seen)
        except OSError:  # the client gave up (or refused the certificate): what these tests provoke
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()


def _read_request(conn: socket.socket) -> Seen:
    conn.settimeout(MAX_SECONDS)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionResetError("client closed before a whole request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers.get("content-length") or 0):
        body += conn.recv(65536)
    method, path, _ = first.split(" ", 2)
    return Seen(method, path, headers, body)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items()), "Connection: close", "", ""]
    return "\r\n".join(lines).encode()


# -- behaviours ------------------------------------------------------------------------------------


def reply(status: int = 200, body: bytes = OK_BODY) -> Behaviour:
    """A well-formed answer."""

    def behave(server: LoopbackServer, conn: socket.socket, seen: Seen) -> None:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        server.send(conn, _head(status, headers) + body)

    return behave


def trickle(*, head_too: bool, interval: float = 0.05, body: bytes = OK_BODY * 20) -> Behaviour:
    """A well-formed answer sent one byte per ``interval`` (from the status line on with ``head_too``),
    so no single read waits long; gives up after ``MAX_SECONDS``."""

    def behave(server: LoopbackServer, conn: socket.socket, seen: Seen) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = _head(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        slow = head + body if head_too else body
        if not head_too:
            server.send(conn, head)
        until = time.monotonic() + MAX_SECONDS
        for i in range(len(slow)):
            if server.stopping.wait(interval) or time.monotonic() > until:
                return
            server.send(conn, slow[i : i + 1])

    return behave


def cut(*, missing: int = 60, body: bytes = OK_BODY) -> Behaviour:
    """An answer that announces ``missing`` more bytes than it sends, then closes."""

    def behave(server: LoopbackServer, conn: socket.socket, seen: Seen) -> None:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body) + missing)}
        server.send(conn, _head(200, headers) + body)

    return behave


def redirect(location: str, status: int = 307) -> Behaviour:
    """A redirect to ``location``."""

    def behave(server: LoopbackServer, conn: socket.socket, seen: Seen) -> None:
        server.send(conn, _head(status, {"Location": location, "Content-Length": "0"}))

    return behave


def flood(size: int, *, declare: bool) -> Behaviour:
    """A body of ``size`` bytes, announced in Content-Length with ``declare``, else ended by the close."""

    def behave(server: LoopbackServer, conn: socket.socket, seen: Seen) -> None:
        headers = {"Content-Type": "application/json"}
        if declare:
            headers["Content-Length"] = str(size)
        server.send(conn, _head(200, headers))
        piece = b" " * 65536
        while server.sent < size and not server.stopping.is_set():
            server.send(conn, piece)

    return behave


# -- TLS ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """A private CA (``ca_file``, to trust through the environment) and a server context it signed."""

    ca_file: Path
    server: ssl.SSLContext


def make_certificates(directory: Path, *, names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Certificates:
    """A fresh CA and a server certificate for ``names`` (IP addresses or DNS names), written to ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey):
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slurmapi test CA")])
    ca = (
        build("slurmapi test CA", ca_key, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    leaf = (
        build(names[0], key, ca_name, ca_key)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return Certificates(ca_file, context)
