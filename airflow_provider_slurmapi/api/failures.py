"""Why a job failed, as a type: each way a Slurm job can end other than COMPLETED has its own subclass of
:class:`~airflow_provider_slurmapi.api.errors.SlurmJobFailedError`, so a task (or an Airflow 3.3 retry
policy, see :mod:`airflow_provider_slurmapi.retry`) can act on the cause, not on a message.

=============================== ==================================== ================= ====================
type                            Slurm end state                      ``retryable``     attributes it adds
=============================== ==================================== ================= ====================
``SlurmJobPreemptedError``      PREEMPTED                            yes
``SlurmNodeFailureError``       NODE_FAIL, BOOT_FAIL                 yes
``SlurmJobOutOfMemoryError``    OUT_OF_MEMORY                        no
``SlurmJobTimeLimitError``      TIMEOUT (its time limit)             no                ``time_limit_minutes``
``SlurmJobCancelledError``      CANCELLED                            no                ``cancelled_by``
``SlurmJobDeadlineError``       DEADLINE (``--deadline``)            no
``SlurmJobExitCodeError``       FAILED (non-zero exit, or a signal)  no
``SlurmJobFailedError``         any other (SPECIAL_EXIT, ...) or an
                                array whose tasks failed differently
=============================== ==================================== ================= ====================

Every one carries ``job_id``, ``state``, ``reason`` (Slurm's state reason), ``exit_code`` and
``exit_signal``, and ``job`` (the job's summary). An array's failure takes the type its failed tasks share.
No Airflow imports; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_slurmapi.api.errors import SlurmJobFailedError

__all__ = [
    "FAILURE_TYPES",
    "SlurmJobCancelledError",
    "SlurmJobDeadlineError",
    "SlurmJobExitCodeError",
    "SlurmJobFailedError",
    "SlurmJobOutOfMemoryError",
    "SlurmJobPreemptedError",
    "SlurmJobTimeLimitError",
    "SlurmNodeFailureError",
    "failure_type",
    "typed_failure",
]


class SlurmJobPreemptedError(SlurmJobFailedError):
    """Slurm preempted the job (PREEMPTED) for a job of higher priority and did not requeue it."""


class SlurmNodeFailureError(SlurmJobFailedError):
    """A node of the job failed (NODE_FAIL), or could not boot (BOOT_FAIL)."""


class SlurmJobOutOfMemoryError(SlurmJobFailedError):
    """The job used more memory than it asked for (OUT_OF_MEMORY): another try as it is fails the same."""


class SlurmJobTimeLimitError(SlurmJobFailedError):
    """The job ran past its time limit (TIMEOUT). ``time_limit_minutes``: the limit, when known."""

    time_limit_minutes: int | None = None


class SlurmJobCancelledError(SlurmJobFailedError):
    """The job was cancelled (CANCELLED). ``cancelled_by``: the user (or uid) Slurm recorded, "" if none."""

    cancelled_by: str = ""


class SlurmJobDeadlineError(SlurmJobFailedError):
    """The job did not end before its ``deadline`` (DEADLINE)."""


class SlurmJobExitCodeError(SlurmJobFailedError):
    """The job's script failed (FAILED): ``exit_code`` is its return code, ``exit_signal`` the signal that
    killed it (None when it exited)."""


# Every type a failed job's error may have (the most general last).
FAILURE_TYPES: tuple[type[SlurmJobFailedError], ...] = (
    SlurmJobPreemptedError,
    SlurmNodeFailureError,
    SlurmJobOutOfMemoryError,
    SlurmJobTimeLimitError,
    SlurmJobCancelledError,
    SlurmJobDeadlineError,
    SlurmJobExitCodeError,
    SlurmJobFailedError,
)

_BY_STATE: dict[str, type[SlurmJobFailedError]] = {
    "PREEMPTED": SlurmJobPreemptedError,
    "NODE_FAIL": SlurmNodeFailureError,
    "BOOT_FAIL": SlurmNodeFailureError,
    "OUT_OF_MEMORY": SlurmJobOutOfMemoryError,
    "TIMEOUT": SlurmJobTimeLimitError,
    "CANCELLED": SlurmJobCancelledError,
    "DEADLINE": SlurmJobDeadlineError,
    "FAILED": SlurmJobExitCodeError,
}


def _base_state(state: Any) -> str:
    """``OUT_OF_MEMORY`` of ``OUT_OF_MEMORY``, ``CANCELLED+REQUEUED`` or ``CANCELLED by 1000``."""
    return str(state or "").replace(" ", "+").split("+", 1)[0].upper()


def failure_type(summary: Mapping[str, Any]) -> type[SlurmJobFailedError]:
    """The type of a failed job's (or array's) failure, from its summary (:meth:`SlurmJob.summary`)."""
    tasks = summary.get("tasks")
    if isinstance(tasks, list) and tasks:
        failed = {
            _BY_STATE.get(_base_state(t.get("state")), SlurmJobFailedError)
            for t in tasks
            if isinstance(t, Mapping) and _base_state(t.get("state")) not in ("COMPLETED", "")
        }
        return failed.pop() if len(failed) == 1 else SlurmJobFailedError
    return _BY_STATE.get(_base_state(summary.get("state")), SlurmJobFailedError)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def typed_failure(message: str, job: Any, *, retryable: bool) -> SlurmJobFailedError:
    """The error of the type :func:`failure_type` gives, with the job's details as attributes (``job``: its
    summary, or its record)."""
    summary = job.summary() if callable(getattr(job, "summary", None)) else job
    summary = summary if isinstance(summary, Mapping) else {}
    kind = failure_type(summary) if summary else SlurmJobFailedError
    error = kind(message, job=dict(summary), retryable=retryable)
    if isinstance(error, SlurmJobTimeLimitError):
        error.time_limit_minutes = _int(summary.get("time_limit_minutes"))
    if isinstance(error, SlurmJobCancelledError):
        error.cancelled_by = str(summary.get("cancelled_by") or "")
    return error
