"""The one contract between a waiting trigger and its task: the event a wait ends with.

A :class:`SlurmJobTrigger <airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger>` ends with one
:class:`JobEvent`; the operator and the sensor read it back with :meth:`JobEvent.from_payload` and never
re-derive what the trigger decided (whether a failure was the cluster's, the job's state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.watch import failure_error, outcome_text

SUCCESS, FAILED, TIMEOUT, ERROR, REACHED = "success", "failed", "timeout", "error", "reached"


@dataclass(frozen=True)
class JobEvent:
    """How a wait for a Slurm job ended.

    :param status: ``success`` (the job COMPLETED), ``failed`` (it ended otherwise), ``reached`` (it is in
        one of the wait's target states), ``timeout`` (the deadline passed) or ``error`` (the wait itself
        failed: an unknown id, a connection that cannot be read, too many failed polls).
    :param job_id: the job waited for, as the task gave it.
    :param message: what a person reads: the job's outcome, or what went wrong.
    :param job: the job's summary (``SlurmJob.summary()``) when one was read.
    :param retryable: for ``failed``, the cluster's fault (NODE_FAIL, BOOT_FAIL, PREEMPTED): a retry may
        succeed.
    """

    status: str
    job_id: Any
    message: str
    job: dict[str, Any] | None = None
    retryable: bool = False

    @classmethod
    def ended(cls, job_id: Any, job: SlurmJob) -> JobEvent:
        """The event of a job that has ended: its outcome, and for a failure the one rule of retrying."""
        if job.state.is_success:
            return cls(SUCCESS, job_id, outcome_text(job), job.summary())
        error = failure_error(job)
        return cls(FAILED, job_id, str(error), job.summary(), retryable=error.retryable)

    @property
    def state(self) -> JobState:
        """The job's state as last read (``UNKNOWN`` when none was)."""
        return JobState.parse(str((self.job or {}).get("state", "")).split("+"))

    def payload(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "job_id": self.job_id,
            "message": self.message,
            "job": self.job,
            "retryable": self.retryable,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> JobEvent:
        event = cls(
            status=str(payload.get("status")),
            job_id=payload.get("job_id"),
            message=str(payload.get("message")),
            job=payload.get("job"),
            retryable=bool(payload.get("retryable", False)),
        )
        if "retryable" not in payload and event.status == FAILED:
            # an event of a trigger from before this contract (a deferred task across an upgrade)
            return cls(event.status, event.job_id, event.message, event.job, event.state.is_retryable_failure)
        return event
