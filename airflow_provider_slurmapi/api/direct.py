"""The direct transport: the same calls sent straight to an on-premises slurmrestd (JWT auth), no Google.

Useful to every Slurm site, and a second, independent path to a real cluster in the tests. The
envelope's method, path and body become the HTTP request itself; slurmrestd's answer becomes the
:class:`SlurmReply` the Google API would have wrapped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from airflow_provider_slurmapi.api.envelope import Call, HttpRequest, SlurmReply, build_envelope, check_endpoint
from airflow_provider_slurmapi.api.errors import SlurmAuthError, SlurmJobSpecError

MAX_DIRECT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SlurmrestdRef:
    """A slurmrestd to call directly: its base URL and the JWT user/token for ``X-SLURM-USER-*``."""

    url: str
    user: str
    token: str = field(repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", check_endpoint(self.url, field_name="slurmrestd_url"))
        if not self.user:
            raise SlurmJobSpecError(
                "slurm_user", "is missing", "Set the Linux user the JWT was issued for (the connection's login)."
            )
        if not self.token:
            raise SlurmJobSpecError(
                "slurm_jwt", "is missing", "Set a token from `scontrol token` (the connection's password)."
            )

    @property
    def name(self) -> str:
        return self.url

    def request(self, call: Call, bearer: str | None = None) -> HttpRequest:
        envelope = build_envelope(call)
        content = json.dumps(envelope["body"]).encode() if "body" in envelope else b""
        if len(content) > MAX_DIRECT_BYTES:
            raise SlurmJobSpecError("script", "the request is too large", "Put it on shared storage.")
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token}
        if content:
            headers["Content-Type"] = "application/json"
        return HttpRequest(call.method, self.url + call.path, headers, content)

    def parse(self, status: int, content: bytes, *, what: str, only_jobs: frozenset[str] | None = None) -> SlurmReply:
        if only_jobs is not None and 200 <= status < 300:
            from airflow_provider_slurmapi.api.listing import slurm_listing

            body = slurm_listing(content, only_jobs)
            if body is not None:
                return SlurmReply.from_structured(status, body)
        try:
            body = json.loads(content) if content else {}
        except (ValueError, RecursionError):
            body = None
        if status in (401, 511) or (status == 403 and body is None):
            text = content[:200].decode(errors="replace").strip() if body is None else _first_error(body)
            raise SlurmAuthError(
                f"slurmrestd refused {what}: HTTP {status} {text!r}. Check the connection's JWT (slurm_jwt, "
                "from `scontrol token`) and that it belongs to slurm_user."
            )
        if body is None:
            return SlurmReply.from_structured(status, content[:2000].decode(errors="replace").strip())
        return SlurmReply.from_structured(status, body)


def _first_error(body: object) -> str:
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        entry = body["errors"][0]
        if isinstance(entry, dict):
            return str(entry.get("error") or entry.get("description") or "")
    return ""
