"""One exception hierarchy for everything that can go wrong between a caller and a Slurm job."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_slurmapi.api.envelope import SlurmReply

# Google statuses a caller may retry after a short wait; the rest are the caller's to fix.
RETRYABLE_GOOGLE_STATUSES = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "INTERNAL", "ABORTED"})
RETRYABLE_HTTP_CODES = frozenset({429, 500, 502, 503, 504})

_GOOGLE_ADVICE = {
    "PERMISSION_DENIED": (
        "The caller lacks access to this cluster: grant its service account roles/aiplatform.user "
        "(permission aiplatform.googleapis.com/modelDevelopmentClusters.run) on the project."
    ),
    "NOT_FOUND": "Check the connection's project_id, region and cluster_id: no such cluster was found.",
    "INVALID_ARGUMENT": (
        "The request was refused as malformed: check the Slurm path and API version, and keep the request under 1 MB."
    ),
    "UNAUTHENTICATED": (
        "The access token was missing, invalid or expired: check the connection's credentials "
        "(key_path, keyfile_dict or Application Default Credentials)."
    ),
    "UNAVAILABLE": "The cluster is temporarily unreachable; the call is retried after a short wait.",
    "RESOURCE_EXHAUSTED": "The API quota is exhausted for now; calls are retried with backoff.",
}


@dataclass(frozen=True)
class SlurmMessage:
    """One entry of a Slurm reply's ``errors`` or ``warnings`` list."""

    description: str = ""
    error: str = ""
    error_number: int | None = None
    source: str = ""

    @classmethod
    def from_dict(cls, entry: Any) -> SlurmMessage:
        if not isinstance(entry, Mapping):
            return cls(description=str(entry))
        number = entry.get("error_number")
        return cls(
            description=str(entry.get("description") or ""),
            error=str(entry.get("error") or ""),
            error_number=number if isinstance(number, int) else None,
            source=str(entry.get("source") or ""),
        )

    def __str__(self) -> str:
        head = self.error or self.description
        parts = [head]
        if self.description and self.description != head:
            parts.append(f"({self.description})")
        if self.error_number is not None:
            parts.append(f"[error {self.error_number}]")
        return " ".join(p for p in parts if p)


def format_messages(messages: Iterable[SlurmMessage]) -> str:
    return "; ".join(f'"{m}"' for m in messages)


class SlurmJobApiError(Exception):
    """Base of every error this provider raises."""

    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        return self.message


class SlurmJobSpecError(SlurmJobApiError, ValueError):
    """A job, connection or argument is invalid; found before anything was sent."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        super().__init__(f"{field}: {problem}. {fix}")
        self.field = field
        self.problem = problem
        self.fix = fix


class SlurmAuthError(SlurmJobApiError):
    """Credentials could not be loaded or an access token could not be obtained."""


class SlurmTransportError(SlurmJobApiError):
    """The request got no usable answer: connection refused or reset, the reply timed out or was cut
    short, too large, a redirect, or the server's TLS certificate failed verification.

    ``ambiguous`` is true when the request may have reached the service (a submit that may have
    created a job). Most are retryable; a redirect, a certificate failure and an oversized reply are not
    (the same request would meet the same answer).
    """

    retryable = True

    def __init__(self, message: str, *, ambiguous: bool = False, retryable: bool | None = None) -> None:
        super().__init__(message, retryable=retryable)
        self.ambiguous = ambiguous


class MalformedReplyError(SlurmTransportError):
    """The reply could not be read (cut short, not JSON): like a lost reply, the call may have happened."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ambiguous=True)


class GoogleApiError(SlurmJobApiError):
    """The callSlurmRestApi request itself was refused by Google (``{"error": {code, message, status}}``)."""

    def __init__(self, code: int, status: str, message: str, *, what: str = "") -> None:
        advice = _GOOGLE_ADVICE.get(status, "")
        text = f"Slurm Job API refused {what or 'the call'}: HTTP {code} {status}: {message!r}."
        super().__init__(
            f"{text} {advice}".strip(),
            retryable=status in RETRYABLE_GOOGLE_STATUSES or code in RETRYABLE_HTTP_CODES,
        )
        self.code = code
        self.status = status
        self.service_message = message


class SlurmApiError(SlurmJobApiError):
    """Slurm answered with errors (``structuredBody.errors`` or ``status[].error``)."""

    def __init__(
        self,
        message: str,
        *,
        http_status: int,
        errors: Iterable[SlurmMessage] = (),
        warnings: Iterable[SlurmMessage] = (),
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.http_status = http_status
        self.errors = list(errors)
        self.warnings = list(warnings)


class SlurmBusyError(SlurmJobApiError):
    """slurmrestd answered a read with 502/503/504: slurmdbd or slurmctld was out of reach for a moment."""

    retryable = True

    def __init__(self, reply: SlurmReply) -> None:
        super().__init__(f"Slurm answered HTTP {reply.status} {format_messages(reply.errors)}".strip())
        self.reply = reply


class SlurmRequestRejectedError(SlurmApiError):
    """Slurm rejected the request (bad job spec, bad partition): retrying the same request cannot help."""


class SlurmAccountingUnavailableError(SlurmApiError):
    """Slurm's accounting database (slurmdbd) did not answer; it usually comes back by itself."""

    retryable = True


class SlurmJobNotFoundError(SlurmApiError):
    """Neither the active queue nor accounting knows the job."""


class SlurmApiVersionError(SlurmJobApiError):
    """The cluster does not serve the connection's Slurm REST API version (``served``: the ones it does)."""

    def __init__(self, version: str, served: list[str]) -> None:
        super().__init__(
            f"api_version: the cluster does not serve Slurm REST API {version}; it serves {', '.join(served)}. "
            "Set the connection's api_version to one of them, or to auto (the newest it serves that this "
            "provider knows)."
        )
        self.version = version
        self.served = served


class SlurmJobFailedError(SlurmJobApiError):
    """A job reached a terminal state other than COMPLETED; its subclasses in
    :mod:`airflow_provider_slurmapi.api.failures` say which (preempted, node failure, out of memory, ...).

    ``job``: the job (its record, or its summary); ``job_id`` (an array task's ``123_4``), ``state``,
    ``reason`` (Slurm's state reason), ``exit_code`` and ``exit_signal``: read from it."""

    def __init__(self, message: str, *, job: Any, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)
        self.job = job
        record = job.summary() if callable(getattr(job, "summary", None)) else job
        record = record if isinstance(record, Mapping) else {}
        self.job_id: str = str(record.get("display_id") or record.get("job_id") or "")
        self.state: str = str(record.get("state") or "")
        self.reason: str = str(record.get("state_reason") or "")
        self.exit_code: int | None = record.get("exit_code")
        self.exit_signal: int | None = record.get("exit_signal")


class SlurmJobWaitTimeoutError(SlurmJobApiError):
    """A wait for a job gave up at its deadline while the job was still running."""

    def __init__(self, message: str, *, job: Any = None) -> None:
        super().__init__(message)
        self.job = job


# Google answers that prove the request was refused before anything was done (AIP-194): it may be sent
# again as it is. Every other answer of Google's (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, any
# 5xx, ...) says nothing about whether Slurm acted on it.
_NOTHING_DONE_HTTP_CODES = frozenset({400, 401, 403, 404, 429})


def fate_unknown(error: SlurmJobApiError) -> bool:
    """True when the failed request may still have taken effect, so a submit must be looked for, not resent.

    That is: a transport failure after the request may have been written (reset, timeout, a reply cut
    short), and every Google error except 400, 401, 403, 404 and 429 (``RESOURCE_EXHAUSTED``). Slurm's own
    errors are answers from slurmctld: the request was refused, its fate is known.
    """
    if isinstance(error, SlurmTransportError):
        return error.ambiguous
    if isinstance(error, GoogleApiError):
        return error.code not in _NOTHING_DONE_HTTP_CODES
    return False
