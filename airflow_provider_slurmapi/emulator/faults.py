"""Injected faults: what can go wrong between a client and the Slurm Job API, on demand and seedable."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

# Google-level errors a fault answers with: (HTTP status, Google status, message).
GOOGLE_ERRORS: dict[str, tuple[int, str, str]] = {
    "unavailable": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "resource_exhausted": (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Requests'."),
    "internal": (500, "INTERNAL", "Internal error encountered."),
    "deadline_exceeded": (504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
    "invalid_argument": (400, "INVALID_ARGUMENT", "Request contains an invalid argument."),
    "not_found": (404, "NOT_FOUND", "Requested entity was not found."),
}
# The same answers *after* the call took effect (AIP-194: an UNAVAILABLE does not say nothing was done):
# ``unavailable_after`` runs the Slurm call, then answers 503 UNAVAILABLE.
AFTER_SUFFIX = "_after"
AFTER_KINDS = frozenset(kind + AFTER_SUFFIX for kind in GOOGLE_ERRORS)
# Faults of the OAuth token endpoint; every other kind hits callSlurmRestApi calls.
TOKEN_KINDS = frozenset({"token_error", "token_slow"})
KINDS = frozenset(
    {*GOOGLE_ERRORS, *AFTER_KINDS, "slurmdbd_down", "reset", "slow", "malformed", "lost_reply", *TOKEN_KINDS}
)
_METHODS = {"GET": "HTTP_METHOD_GET", "POST": "HTTP_METHOD_POST", "DELETE": "HTTP_METHOD_DELETE"}


@dataclass
class Fault:
    """One armed fault; ``count`` None means it never runs out."""

    kind: str
    count: int | None
    path_contains: str | None
    method: str | None
    delay: float
    probability: float

    def matches(self, kind_group: str, path: str, method: str) -> bool:
        if (kind_group == "token") != (self.kind in TOKEN_KINDS):
            return False
        if self.kind == "slurmdbd_down" and not path.startswith("/slurmdb/"):
            return False
        if self.path_contains is not None and self.path_contains not in path:
            return False
        return self.method is None or self.method == method


class FaultInjector:
    """Armed faults, consumed first-armed first; thread-safe."""

    def __init__(self, seed: int | None = None) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self.fired: list[str] = []

    def inject(
        self,
        kind: str,
        count: int | None = 1,
        path_contains: str | None = None,
        method: str | None = None,
        delay: float = 1.0,
        probability: float = 1.0,
    ) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {sorted(KINDS)}")
        if method is not None:
            method = _METHODS.get(method.upper(), method.upper())
        fault = Fault(kind, count, path_contains, method, delay, probability)
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, kind_group: str, path: str = "", method: str = "") -> Fault | None:
        """The fault that hits this call, if any (``kind_group`` is ``"call"`` or ``"token"``)."""
        with self._lock:
            for fault in self._faults:
                if not fault.matches(kind_group, path, method):
                    continue
                if fault.probability < 1.0 and self._random.random() >= fault.probability:
                    continue
                if fault.count is not None:
                    fault.count -= 1
                    if fault.count <= 0:
                        self._faults.remove(fault)
                self.fired.append(fault.kind)
                return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
