"""A stand-in for a GCE/GKE node's metadata server, for the emulator's jobs.

On a real node, Google's libraries and tools (google-auth, google-cloud-storage, gcloud, a script's
``curl``) get the node's service-account token, its email and the project from
``http://metadata.google.internal/computeMetadata/v1/``, each request carrying ``Metadata-Flavor: Google``.
The emulator serves the same paths on its own port, beside the Google API (nothing else is served on
``/`` or under ``/computeMetadata/``), and gives its jobs ``GCE_METADATA_HOST`` (where google-auth and
Google's Go client look for the server instead of metadata.google.internal) and ``GCE_METADATA_IP`` (what
google-auth's detection, ``google.auth.default()``, pings) naming that port: google-auth in a job, and a
script that builds its URLs from ``$GCE_METADATA_HOST``, find it as on a node.

The token is one of the emulator's own access tokens, issued to the node's service account: opaque, checked
like any other by the emulator's Google API (where that account has no permission unless a test grants it),
invalidated by ``expire_tokens()``. Each token request gets a fresh one (the real server hands out a cached
token until shortly before it expires; nothing here depends on that). The call log shows a token only as a
fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from urllib.parse import parse_qs, urlsplit

from .auth import TokenAuthority

logger = logging.getLogger("airflow_provider_slurmapi.emulator")

FLAVOR_HEADER = "Metadata-Flavor"
FLAVOR = "Google"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_ROOT = "/computeMetadata/v1/"
_ACCOUNTS = "instance/service-accounts/"


def is_metadata_path(path: str) -> bool:
    """Whether the metadata stand-in answers ``path`` (without its query): ``/`` or ``/computeMetadata/...``."""
    return path == "/" or path.startswith("/computeMetadata/")


def fingerprint(token: str) -> str:
    """How the call log names a token: enough to tell two apart, useless to anyone who reads the log."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12]


class MetadataServer:
    """Answers the metadata paths a node's tools use; thread-safe, shared by the emulator's handler threads."""

    def __init__(
        self, project: str, service_account: str, authority: TokenAuthority, token_lifetime: int, log_calls: bool
    ) -> None:
        self.project = project
        self.service_account = service_account
        self._authority = authority
        self._token_lifetime = token_lifetime
        self._log_calls = log_calls
        self._lock = threading.Lock()
        self.requests = 0

    def answer(self, target: str, flavor: str | None) -> tuple[int, bytes, str]:
        """``(status, body, content type)`` for ``GET target`` (path and query) with that ``Metadata-Flavor``.

        Every reply carries ``Metadata-Flavor: Google`` (the handler adds it): google-auth's ping checks it.
        """
        with self._lock:
            self.requests += 1
        url = urlsplit(target)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        issued = ""
        if flavor != FLAVOR:
            # As the real server: the header is what a request forged through a proxy or a web page cannot carry.
            status, body, content_type = 403, f"Missing {FLAVOR_HEADER}:{FLAVOR} header.\n", "text/plain"
        elif url.path == "/":
            status, body, content_type = 200, "computeMetadata/\n", "application/text"
        elif url.path == _ROOT:
            status, body, content_type = 200, "instance/\nproject/\n", "application/text"
        elif url.path == _ROOT + "project/project-id":
            status, body, content_type = 200, self.project, "application/text"
        elif url.path.startswith(_ROOT + _ACCOUNTS):
            status, body, content_type, issued = self._account(url.path[len(_ROOT + _ACCOUNTS) :], query)
        else:
            status, body, content_type = 404, "Not Found\n", "text/plain"
        if self._log_calls:
            suffix = f" (token {fingerprint(issued)})" if issued else ""
            logger.info("metadata GET %s -> %s%s", url.path, status, suffix)
        return status, body.encode(), content_type

    def _account(self, rest: str, query: dict[str, str]) -> tuple[int, str, str, str]:
        """``instance/service-accounts/{default|EMAIL}/...``: the node's one service account."""
        alias, _, item = rest.partition("/")
        if alias not in ("default", self.service_account):
            return 404, "Not Found\n", "text/plain", ""
        if item == "token":
            scopes = tuple(s for s in query.get("scopes", "").split(",") if s) or DEFAULT_SCOPES
            token = self._authority.issue(self.service_account, scopes, self._token_lifetime)
            # Google answers the seconds left, rounded down: a token just issued has one second less.
            reply = {"access_token": token, "expires_in": self._token_lifetime - 1, "token_type": "Bearer"}
            return 200, json.dumps(reply), "application/json", token
        if item == "email":
            return 200, self.service_account, "application/text", ""
        if item == "" and query.get("recursive") == "true":
            # google-auth's compute-engine credentials read the account's email and scopes this way first.
            info = {"aliases": ["default"], "email": self.service_account, "scopes": list(DEFAULT_SCOPES)}
            return 200, json.dumps(info), "application/json", ""
        return 404, "Not Found\n", "text/plain", ""
