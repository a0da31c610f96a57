"""Builds callSlurmRestApi requests and parses their replies: sans-IO, no sockets here."""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    MalformedReplyError,
    SlurmAccountingUnavailableError,
    SlurmApiError,
    SlurmJobSpecError,
    SlurmMessage,
    SlurmRequestRejectedError,
    SlurmTransportError,
    format_messages,
)

MAX_REQUEST_BYTES = 1_000_000
MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The largest reply either client reads (64 MiB, after decompression); a larger one is refused unread.

Slurm's largest replies are listings, about 5 KB a job: the whole active queue at Slurm's default
``MaxJobCount`` (10,000 jobs) lists in about 50 MB. A larger reply is not worth holding in a worker's
memory (parsed JSON takes several times its size), or is not Slurm's at all.
"""
METHODS = {"GET": "HTTP_METHOD_GET", "POST": "HTTP_METHOD_POST", "DELETE": "HTTP_METHOD_DELETE"}
_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
_PROJECT = re.compile(r"[a-z0-9][a-z0-9.:-]{0,62}")
# A DNS name of two or more labels: nothing that could add a user, port or path to the API's URL.
_DOMAIN = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))+")
_SLURM_PATH = re.compile(r"/(slurm|slurmdb)/v0\.0\.[0-9]+/[A-Za-z0-9_./,=&?%:+~-]*")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(endpoint: str, *, field_name: str = "endpoint") -> str:
    """``endpoint`` without a trailing slash; https is required except on loopback (the emulator)."""
    parsed = urllib.parse.urlsplit(str(endpoint).strip())
    host = parsed.hostname or ""
    if parsed.scheme not in ("https", "http") or not host:
        raise SlurmJobSpecError(
            field_name,
            f"{endpoint!r} is not an http(s) URL",
            "Use https://REGION-aiplatform.googleapis.com, or leave endpoint unset for the default.",
        )
    if parsed.scheme == "http" and not is_loopback(host):
        raise SlurmJobSpecError(
            field_name,
            f"{endpoint!r} uses plain http to a non-loopback host, which would send the access token in clear text",
            "Use an https:// endpoint; plain http is allowed only for 127.0.0.1/localhost (the emulator).",
        )
    if parsed.query or parsed.fragment or parsed.username:
        raise SlurmJobSpecError(
            field_name, f"{endpoint!r} has a query, fragment or user part", "Give only scheme://host[:port]."
        )
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"


@dataclass(frozen=True)
class ClusterRef:
    """Which cluster to call: project, region and cluster id, and optionally an endpoint override."""

    project_id: str
    region: str
    cluster_id: str
    endpoint: str | None = None
    universe_domain: str = "googleapis.com"

    def __post_init__(self) -> None:
        checks = (
            ("project_id", self.project_id, _PROJECT, "the project ID, e.g. my-project"),
            ("region", self.region, _ID, "a region such as us-central1"),
            ("cluster_id", self.cluster_id, _ID, "the model development cluster's ID"),
        )
        for name, value, pattern, what in checks:
            if not isinstance(value, str) or not value:
                raise SlurmJobSpecError(name, "is missing", f"Set it in the connection's extra: {what}.")
            if not pattern.fullmatch(value):
                raise SlurmJobSpecError(name, f"{value!r} is not a valid value", f"It must be {what}.")
        if self.endpoint is not None:
            object.__setattr__(self, "endpoint", check_endpoint(self.endpoint))
        domain = self.universe_domain.lower() if isinstance(self.universe_domain, str) else ""
        if len(domain) > 253 or not _DOMAIN.fullmatch(domain):
            raise SlurmJobSpecError(
                "universe_domain",
                f"{self.universe_domain!r} is not a DNS name",
                "Give the domain alone, e.g. googleapis.com (the default), without scheme, user, port or path.",
            )
        object.__setattr__(self, "universe_domain", domain)

    @property
    def base_url(self) -> str:
        return self.endpoint or f"https://{self.region}-aiplatform.{self.universe_domain}"

    @property
    def resource_name(self) -> str:
        return f"projects/{self.project_id}/locations/{self.region}/modelDevelopmentClusters/{self.cluster_id}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1beta1/{self.resource_name}:callSlurmRestApi"

    @property
    def name(self) -> str:
        return self.resource_name

    def request(self, call: Call, bearer: str | None = None) -> HttpRequest:
        """The callSlurmRestApi POST carrying ``call`` (``bearer``: the Google access token)."""
        headers = {"Content-Type": "application/json"}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        return HttpRequest("POST", self.url, headers, encode_envelope(call))

    def parse(self, status: int, content: bytes, *, what: str, only_jobs: frozenset[str] | None = None) -> SlurmReply:
        return parse_reply(status, content, what=what, only_jobs=only_jobs)


class ReplyBody:
    """A reply as it streams in: a redirect is refused before its body, a body past MAX_REPLY_BYTES as it grows.

    Both clients read through it, so the two rules are written once. Redirects are never followed: one
    would send the request again, job and credentials included, to wherever it points.
    """

    def __init__(self, what: str, url: str, status: int, headers: Mapping[str, str]) -> None:
        self.what = what
        self.status = status
        if 300 <= status < 400:
            target = urllib.parse.urljoin(url, headers.get("location") or "")
            raise SlurmTransportError(
                f"{what}: the server answered HTTP {status}, a redirect to {target[:300]!r}, which is not "
                "followed (it would send the request and its credentials there). Point the connection's "
                "endpoint or slurmrestd_url at the address that answers itself.",
                # Not proof that nothing was done: a 303 (See Other) answers a POST that was acted on.
                ambiguous=True,
                retryable=False,
            )
        declared = headers.get("content-length") or ""
        if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
            raise self._too_large(f"it announced {int(declared):,} bytes")
        self.size = 0
        self._parts: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > MAX_REPLY_BYTES:
            raise self._too_large(f"more than {MAX_REPLY_BYTES:,} bytes arrived")
        self._parts.append(chunk)

    @property
    def content(self) -> bytes:
        return b"".join(self._parts)

    def _too_large(self, seen: str) -> SlurmTransportError:
        return SlurmTransportError(
            f"{self.what}: the reply is larger than the provider's {MAX_REPLY_BYTES // 2**20} MiB cap "
            f"(MAX_REPLY_BYTES; {seen}), so it was not read. Slurm's replies stay far below it even for a "
            "queue at Slurm's default MaxJobCount: check that the endpoint is the Slurm Job API or "
            "slurmrestd, and narrow a listing call.",
            ambiguous=True,
            retryable=False,
        )


@dataclass(frozen=True)
class HttpRequest:
    """What a client puts on the wire for one call."""

    method: str
    url: str
    headers: dict[str, str] = field(repr=False)
    content: bytes = field(repr=False, default=b"")


@dataclass(frozen=True)
class Call:
    """One Slurm REST call to make through the envelope. ``idempotent`` calls may be retried."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None
    # For a job listing: only the ``jobs`` records with these ids are decoded and kept (see ``listing``).
    only_jobs: frozenset[str] | None = None
    # One try only (no retry after a transient failure): for a read the caller can do without.
    best_effort: bool = False

    @property
    def idempotent(self) -> bool:
        return self.method != "POST"

    def describe(self) -> str:
        return f"{self.method} {self.path}"


def build_envelope(call: Call) -> dict[str, Any]:
    """The callSlurmRestApi JSON body for ``call``: body only for POST, ``HTTP_METHOD_*`` names."""
    method = call.method.upper().removeprefix("HTTP_METHOD_")
    if method not in METHODS:
        raise SlurmJobSpecError(
            "method",
            f"{call.method!r} is not supported",
            "Use GET, POST or DELETE (the API's three methods).",
        )
    if not isinstance(call.path, str) or not _SLURM_PATH.fullmatch(call.path) or ".." in call.path:
        raise SlurmJobSpecError(
            "path",
            f"{call.path!r} is not a Slurm REST path",
            "Use a path such as /slurm/v0.0.42/job/submit or /slurmdb/v0.0.42/job/123.",
        )
    envelope: dict[str, Any] = {"method": METHODS[method], "path": call.path}
    if method == "POST":
        if not isinstance(call.body, Mapping):
            raise SlurmJobSpecError("body", "is required for POST", "Pass the Slurm payload as a dict.")
        envelope["body"] = dict(call.body)
    elif call.body is not None:
        raise SlurmJobSpecError("body", f"must be omitted for {method}", "Pass body only with POST.")
    return envelope


def encode_envelope(call: Call) -> bytes:
    """The request body bytes, refused when the whole request would reach the API's 1 MB limit."""
    data = json.dumps(build_envelope(call), separators=(",", ":")).encode()
    if len(data) >= MAX_REQUEST_BYTES:
        raise SlurmJobSpecError(
            "script",
            f"the request is {len(data):,} bytes; the Slurm Job API accepts requests under 1 MB",
            "Put the large script (or data) on the cluster's shared storage and submit a short wrapper "
            "script that calls it.",
        )
    return data


@dataclass
class SlurmReply:
    """What Slurm answered: its HTTP status and JSON body, with errors and warnings pulled out."""

    status: int
    body: dict[str, Any]
    errors: list[SlurmMessage] = field(default_factory=list)
    warnings: list[SlurmMessage] = field(default_factory=list)

    @classmethod
    def from_structured(cls, status: int, body: Any) -> SlurmReply:
        if not isinstance(body, dict):
            body = {} if body is None else {"_text": body}
        return cls(
            status=status,
            body=body,
            errors=_messages(body.get("errors")),
            warnings=_messages(body.get("warnings")),
        )

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.errors

    def raise_for_errors(self, what: str) -> None:
        """Raise the fitting :class:`SlurmApiError` when Slurm reported any error, whatever its status."""
        if self.ok:
            return
        raise slurm_error(self, what)


def _messages(value: Any) -> list[SlurmMessage]:
    if not isinstance(value, list):
        return []
    return [SlurmMessage.from_dict(v) for v in value]


def slurm_error(reply: SlurmReply, what: str) -> SlurmApiError:
    said = format_messages(reply.errors) or repr(reply.body.get("_text", "no error details"))
    base = f"Slurm failed to {what}: HTTP {reply.status}, Slurm said {said}."
    numbers = {e.error_number for e in reply.errors}
    kwargs: dict[str, Any] = {"http_status": reply.status, "errors": reply.errors, "warnings": reply.warnings}
    if 7000 in numbers or reply.status in (502, 503, 504):
        return SlurmAccountingUnavailableError(
            f"{base} Slurm's accounting database or controller is unreachable; it usually comes back by "
            "itself, so the call is retried.",
            **kwargs,
        )
    return SlurmRequestRejectedError(
        f"{base} Fix the request (job fields, partition, script) and submit again; retrying the same "
        "request cannot help.",
        **kwargs,
    )


def parse_reply(http_status: int, content: bytes, *, what: str, only_jobs: frozenset[str] | None = None) -> SlurmReply:
    """Turn the HTTP answer of callSlurmRestApi into a :class:`SlurmReply`, or raise a Google error.

    ``only_jobs``: the reply is a job listing of which only these job ids are wanted; the other records
    are not decoded (:mod:`~airflow_provider_slurmapi.api.listing`), and not in the reply.
    """
    if only_jobs is not None and 200 <= http_status < 300:
        from airflow_provider_slurmapi.api.listing import envelope_listing

        found = envelope_listing(content, only_jobs)
        if found is not None:
            return SlurmReply.from_structured(_status(found[0], what), found[1])
    try:
        payload = json.loads(content) if content else None
    except (ValueError, RecursionError):  # not JSON, or nested deeper than any reply of Slurm's
        payload = None
        if 200 <= http_status < 300:
            raise MalformedReplyError(
                f"{what}: the reply was not JSON ({len(content)} bytes: {content[:80]!r}); a proxy may have cut it"
            ) from None
    if http_status >= 300 or (isinstance(payload, dict) and "error" in payload and "status" not in payload):
        return _raise_google(http_status, payload, content, what)
    if not isinstance(payload, dict) or "status" not in payload:
        raise MalformedReplyError(f"{what}: the reply has no status with a structuredBody or body ({content[:80]!r})")
    return SlurmReply.from_structured(_status(payload.get("status"), what), slurm_body(payload, what=what))


def _status(status: Any, what: str) -> int:
    """The envelope's ``status`` (Slurm's HTTP status, a number or its digits)."""
    if isinstance(status, str) and status.isdigit():
        status = int(status)
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise MalformedReplyError(f"{what}: the reply's status is {status!r}, not an HTTP status (a malformed reply)")
    return status


def slurm_body(payload: Mapping[str, Any], *, what: str) -> Any:
    """Slurm's reply out of a callSlurmRestApi answer, in either of its documented shapes.

    ``{status, structuredBody}`` carries it as a JSON object (the translated pages); ``{status, body}``
    carries it as a JSON-encoded string (the English page), or, should a proxy have decoded it, as the
    object itself. A ``body`` string that is not JSON stays text (Slurm's own plain-text answers), unless
    it starts as JSON does: then it was cut short, like a reply that is not JSON at all.
    """
    if "structuredBody" in payload:
        return payload["structuredBody"]
    body = payload.get("body")
    if not isinstance(body, (str, bytes)):
        return body
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        if text.lstrip().startswith(("{", "[")):
            raise MalformedReplyError(
                f"{what}: the reply's body is cut-off JSON ({len(text)} characters: {text[:80]!r})"
            ) from None
        return text


def _raise_google(http_status: int, payload: Any, content: bytes, what: str) -> NoReturn:
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        code = error["code"] if isinstance(error.get("code"), int) else http_status
        raise GoogleApiError(code, str(error.get("status") or ""), str(error.get("message") or ""), what=what)
    text = content[:200].decode(errors="replace").strip()
    status = {503: "UNAVAILABLE", 429: "RESOURCE_EXHAUSTED", 504: "DEADLINE_EXCEEDED"}.get(http_status, "")
    raise GoogleApiError(http_status, status or f"HTTP_{http_status}", text, what=what)
