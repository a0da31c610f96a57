"""Proxy mode: the Slurm half of a callSlurmRestApi call answered by a real slurmrestd.

The Google half (token flow, 401/403/404/400 checks, the 1 MB limit, faults) stays the emulator's; the
envelope's ``{method, path, body}`` is sent to slurmrestd with ``X-SLURM-USER-NAME`` /
``X-SLURM-USER-TOKEN`` and its reply becomes ``{status: <HTTP status>, structuredBody: <its JSON>}``.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from typing import Any

from .server import GoogleError
from .slurmrest import InvalidPath, TextFault
from .templates import meta, record

# Only slurmrestd's API trees are reachable through callSlurmRestApi (not /openapi, not /): the same
# paths the simulated cluster routes, any version, so the real daemon decides which versions it serves.
_FORWARDED = re.compile(r"^/(slurm|slurmdb)/")
_UNAVAILABLE = "The service is currently unavailable."


class UpstreamSlurm:
    """Forwards Slurm calls to a real slurmrestd; the simulated ``SlurmRest``'s interface."""

    def __init__(self, url: str, user: str, token: str, *, timeout: float = 60.0, cluster_name: str = "") -> None:
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.timeout = timeout
        self.cluster_name = cluster_name

    def __repr__(self) -> str:  # never the token
        return f"UpstreamSlurm(url={self.url!r}, user={self.user!r})"

    def dbd_down_reply(self) -> dict[str, Any]:
        """The ``slurmdbd_down`` fault's reply, as the simulated cluster gives it (real Slurm's 502 shape)."""
        return {"errors": [record("slurmdbd_down")], "warnings": [], "meta": meta("slurmdbd", self.cluster_name)}

    def call(self, method: str, path: str, body: dict[str, Any] | None, user: str) -> tuple[int, dict[str, Any]]:
        """One slurmrestd call as ``(status, JSON object)``.

        ``user`` (the Google caller) is not used: every call runs as the configured upstream user, whose
        JWT the emulator holds, as the real service maps a caller to one Linux account.

        Raises ``InvalidPath`` for what slurmrestd cannot route or parse, ``GoogleError`` 503 when it is
        unreachable and ``GoogleError`` 500 for any other reply that is not a JSON object.
        """
        if not _FORWARDED.match(path):
            raise InvalidPath(path)
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token, "Accept": "application/json"}
        data = None
        if body is not None and method == "POST":
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, raw, content_type = response.status, response.read(), response.headers.get("Content-Type")
        except urllib.error.HTTPError as error:  # a non-2xx reply is still slurmrestd's answer
            with error:
                status, raw, content_type = error.code, error.read(), error.headers.get("Content-Type")
        except (http.client.InvalidURL, ValueError) as exc:  # e.g. a space in the path: never sent
            raise InvalidPath(path) from exc
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, DNS
            raise GoogleError(503, "UNAVAILABLE", _UNAVAILABLE) from exc
        return status, self._structured(status, raw, content_type or "", path)

    @staticmethod
    def _structured(status: int, raw: bytes, content_type: str, path: str) -> dict[str, Any]:
        """slurmrestd's reply body as the ``structuredBody`` object, or the Google error it becomes.

        ``structuredBody`` is a ``google.protobuf.Struct``: only a JSON object can be carried. slurmrestd
        answers in plain text in two cases, both before any Slurm handler runs:

        - 404 "Unable find requested URL" for a path it does not route, and 400 "Unable to parse query."
          for a query it cannot parse (a raw comma, for one). The simulated cluster answers both as
          Google 400 INVALID_ARGUMENT ("Invalid Slurm REST API path"): ``InvalidPath`` here keeps the
          two modes identical, so a client sees one behaviour whichever mode it talks to.
        - anything else that is not a JSON object (a 401 text when the upstream JWT has expired, a
          crashed daemon's HTML, an empty body) is a fault between the service and its cluster that
          the caller cannot fix by changing the request: Google 500 INTERNAL, which clients retry for
          idempotent calls, with the upstream status in the message and no body text (it could echo
          request data).
        """
        value: Any = None
        try:
            value = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            value = None
        if isinstance(value, dict):
            return value
        if status in (400, 404) and "json" not in content_type.lower():
            raise InvalidPath(path)
        raise GoogleError(500, "INTERNAL", str(TextFault(status)))
