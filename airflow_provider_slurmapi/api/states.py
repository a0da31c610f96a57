"""Slurm's job states (:class:`JobState`, the state names) and the wait's defaults: cheap to import.

A DAG file builds sensors and operators whose constructors check states and take these defaults, so
they live here, away from the job records (``api.jobs``) and the clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
TERMINAL_STATES = frozenset(BASE_STATES - {"PENDING", "RUNNING", "SUSPENDED"})
# While any of these flags is set the job is still moving, whatever its base state says.
UNSETTLED_FLAGS = frozenset({"COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "STAGE_OUT"})
# Failures of the machine rather than of the job: another try may well succeed.
RETRYABLE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})

# Consecutive failed polls (each already retried by the client) a wait tolerates.
DEFAULT_ERROR_BUDGET = 10


@dataclass(frozen=True)
class JobState:
    """A Slurm job state: one base state plus flags, e.g. ``["CANCELLED", "COMPLETING"]``."""

    base: str
    flags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: Any) -> JobState:
        """From a v0.0.40+ list, or an older/slurmdb string such as ``"CANCELLED by 1000"``."""
        if isinstance(value, str):
            items = [value.split()[0]] if value.strip() else []
        elif isinstance(value, (list, tuple)):
            items = [str(v).strip().upper() for v in value if str(v).strip()]
        else:
            items = []
        items = [i.rstrip("+") for i in items]
        base = next((i for i in items if i in BASE_STATES), items[0] if items else "UNKNOWN")
        return cls(base=base, flags=frozenset(i for i in items if i != base))

    @property
    def is_terminal(self) -> bool:
        """Slurm's own rule: a terminal base state with none of COMPLETING/REQUEUED/STAGE_OUT set."""
        return self.base in TERMINAL_STATES and not (self.flags & UNSETTLED_FLAGS)

    @property
    def is_success(self) -> bool:
        return self.is_terminal and self.base == "COMPLETED"

    @property
    def is_retryable_failure(self) -> bool:
        return self.is_terminal and self.base in RETRYABLE_STATES

    @property
    def is_pending(self) -> bool:
        return self.base == "PENDING" or bool(self.flags & {"REQUEUED", "REQUEUE_HOLD"})

    def as_list(self) -> list[str]:
        return [self.base, *sorted(self.flags)]

    def __str__(self) -> str:
        return "+".join(self.as_list())
