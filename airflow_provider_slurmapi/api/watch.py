"""Following one job to its end: what changed since the last look, and when to give up on errors.

Shared by the hook's blocking wait and the trigger's async wait, so both tell the same story.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from airflow_provider_slurmapi.api import failures
from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobFailedError, SlurmJobNotFoundError
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.states import DEFAULT_ERROR_BUDGET, JobState

T = TypeVar("T")

# How many failed tasks of an array an error names one by one (the rest are counted).
MAX_TASKS_NAMED = 10
# How long a job id may be in neither the queue nor accounting before a wait says it is unknown: one idea,
# two defaults. A job the task itself submitted exists (slurmdbd may lag minutes behind a lost reply's
# submit); an id a sensor was given may simply be wrong (room for a job submitted elsewhere a moment ago).
UNKNOWN_JOB_GRACE = 600.0
UNKNOWN_JOB_GRACE_SENSOR = 120.0


def format_duration(value: timedelta | float | None, unknown: str = "?") -> str:
    """``42s``, ``3m 05s``, ``2h 07m 00s``, ``3d 4h 10m`` (a timedelta or seconds); ``unknown`` for None."""
    if value is None:
        return unknown
    seconds = max(0, int(value.total_seconds() if isinstance(value, timedelta) else value))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@dataclass
class JobWatch:
    """Remembers the last state seen of a job and counts consecutive transient errors.

    A job Slurm requeues (preempted, its node failed, ``scontrol requeue``) keeps its id and goes back to
    PENDING for its next run: the wait follows that run, and says once per requeue that it does.
    """

    job_id: object
    error_budget: int = DEFAULT_ERROR_BUDGET
    last: str = ""
    consecutive_errors: int = 0
    unknown_job_grace: float = UNKNOWN_JOB_GRACE
    unrecorded_since: float | None = None
    # The requeues already told: the record's restart count, or (from bare states) those seen happen.
    requeues: int = 0
    # A bare state showed the job's current run started (RUNNING, or ended): PENDING after it is a requeue.
    started: bool = False

    def observe(self, job: SlurmJob) -> list[str]:
        """Log lines for what is new in ``job``: a requeue, a state change.

        A job that neither the queue nor accounting knows is taken for "not recorded yet" for
        ``unknown_job_grace`` seconds, then reported as unknown (``SlurmJobNotFoundError``).
        """
        self.consecutive_errors = 0
        self._check_recorded(job.source == "none")
        lines = []
        if job.restart_count > self.requeues:
            self.requeues = job.restart_count
            lines.append(self._requeued(job.label, f" (restart {job.restart_count})", job.state))
        described = job.describe_state()
        if described != self.last:
            self.last = described
            elapsed = job.elapsed.total_seconds() if job.elapsed is not None else None
            # a pending job's start time is when Slurm expects to start it (a requeued job's: its BeginTime)
            suffix = f", elapsed {format_duration(elapsed)}" if job.start_time and not job.state.is_pending else ""
            lines.append(f"{job.label}: {described}{suffix}")
        return lines

    def observe_state(self, job_id: object, state: JobState, *, unrecorded: bool = False) -> list[str]:
        """Log lines for a bare state (from a batched poll, which carries no reason or nodes);
        ``unrecorded``: the state is a placeholder for a job neither the queue nor accounting knows."""
        self.consecutive_errors = 0
        self._check_recorded(unrecorded)
        lines = []
        if not unrecorded:
            if self.started and state.is_pending:
                self.started = False
                self.requeues += 1
                lines.append(self._requeued(f"Slurm job {job_id}", "", state))
            elif state.base not in ("PENDING", "UNKNOWN"):
                self.started = True
        text = str(state)
        if text == self.last.split(" ")[0]:
            return lines
        self.last = text
        return [*lines, f"Slurm job {job_id}: {text}"]

    @staticmethod
    def _requeued(label: str, restart: str, state: JobState) -> str:
        going = "" if state.is_terminal else ": following its next run"
        return f"{label} was requeued{restart}{going}"

    def _check_recorded(self, unrecorded: bool) -> None:
        """Time how long the job has been unknown; past ``unknown_job_grace`` seconds, raise."""
        if not unrecorded:
            self.unrecorded_since = None
            return
        now = time.time()
        if self.unrecorded_since is None:
            self.unrecorded_since = now
        if now - self.unrecorded_since > self.unknown_job_grace:
            raise SlurmJobNotFoundError(
                f"Slurm job {self.job_id} is unknown: it has been in neither the active queue nor accounting "
                f"for {self.unknown_job_grace:.0f}s. Check the job id and the connection's cluster (or whether "
                "the cluster's accounting keeps jobs this old).",
                http_status=404,
            )

    def failed_poll(self, error: SlurmJobApiError) -> str:
        """Count a failed poll: a log line if it may be retried, else re-raise it."""
        if not error.retryable:
            raise error
        self.consecutive_errors += 1
        if self.consecutive_errors > self.error_budget:
            raise SlurmJobApiError(
                f"Gave up waiting for Slurm job {self.job_id} after {self.consecutive_errors} consecutive "
                f"failed polls; the last one: {error}",
                retryable=True,
            ) from error
        return (
            f"Polling Slurm job {self.job_id} failed ({error}); still waiting "
            f"({self.consecutive_errors}/{self.error_budget} consecutive failures allowed)"
        )


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """``awaitable`` bounded by ``seconds`` (``asyncio.TimeoutError`` past them).

    Python 3.11's ``asyncio.wait_for`` can swallow a cancel that comes as the awaited call ends (fixed in
    3.12): a trigger or poller being stopped would run on. ``asyncio.timeout`` (3.11+) does not.
    """
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


class WaitDeadline:
    """A wall-clock deadline (epoch seconds, so it survives a restart), or none."""

    def __init__(self, at: float | None) -> None:
        self.at = at

    @classmethod
    def after(cls, seconds: float | None) -> WaitDeadline:
        return cls(None if seconds is None else time.time() + seconds)

    def remaining(self) -> float | None:
        return None if self.at is None else self.at - time.time()

    def passed(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0


def outcome_text(job: SlurmJob) -> str:
    """One line on how a finished job ended (after how many requeues) and where its output is (for an array:
    which tasks failed)."""
    if isinstance(job, SlurmArrayJob):
        return array_outcome_text(job)
    elapsed = job.elapsed.total_seconds() if job.elapsed is not None else None
    parts = [f"Slurm job {job.display_id} ({job.name or 'unnamed'}) ended {job.describe_state()}"]
    if job.restart_count:
        parts.append(f"requeued {job.restart_count} time{'s' if job.restart_count > 1 else ''}")
    parts.append(f"exit code {job.exit_code}")
    parts.append(f"elapsed {format_duration(elapsed)}")
    if job.nodes:
        parts.append(f"nodes {job.nodes}")
    text = ", ".join(parts)
    if job.standard_output:
        text += f"; stdout: {job.standard_output}"
    if job.standard_error and job.standard_error != job.standard_output:
        text += f"; stderr: {job.standard_error}"
    return text


def _task_outcome(task: SlurmJob) -> str:
    code = task.exit_code
    how = f"signal {code.signal}" if code.signal else "exit code unknown" if code.return_code is None else ""
    return f"{task.display_id} {task.state} ({how or f'exit code {code.return_code}'})"


def array_outcome_text(job: SlurmArrayJob) -> str:
    """``Slurm array job 41 (name) failed: task 41_1 FAILED (exit code 3); 2 of 3 tasks COMPLETED; output: ...``."""
    elapsed = job.elapsed.total_seconds() if job.elapsed is not None else None
    done = f"{job.completed_count} of {job.task_count} tasks COMPLETED"
    head = f"Slurm array job {job.job_id} ({job.name or 'unnamed'})"
    failed = job.failed_tasks
    if not failed:
        return f"{head} ended COMPLETED: {done}, elapsed {format_duration(elapsed)}"
    named = ", ".join(_task_outcome(t) for t in failed[:MAX_TASKS_NAMED])
    more = sum(t.task_count for t in failed[MAX_TASKS_NAMED:])
    if more:
        named += f" and {more} more"
    noun = "task" if len(failed) == 1 and failed[0].task_count == 1 else "tasks"
    text = f"{head} failed: {noun} {named}; {done}; elapsed {format_duration(elapsed)}"
    outputs = list(dict.fromkeys(t.standard_output for t in failed[:MAX_TASKS_NAMED] if t.standard_output))
    errors = [
        t.standard_error for t in failed[:MAX_TASKS_NAMED] if t.standard_error and t.standard_error != t.standard_output
    ]
    if outputs:
        text += f"; output: {', '.join(outputs)}"
    if errors:
        text += f"; stderr: {', '.join(dict.fromkeys(errors))}"
    return text


def failure_error(job: SlurmJob) -> SlurmJobFailedError:
    """The error for a job that ended in a state other than COMPLETED, of its failure's type
    (:mod:`~airflow_provider_slurmapi.api.failures`)."""
    retryable = job.state.is_retryable_failure
    advice = (
        "This is a failure of the cluster rather than of the job, so a retry may succeed."
        if retryable
        else "Read the job's output for the cause."
    )
    return failures.typed_failure(f"{outcome_text(job)}. {advice}", job, retryable=retryable)
