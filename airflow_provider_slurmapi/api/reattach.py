"""Exactly one Slurm job per task try: tag each job with its task instance and find it again.

The tag goes into the job's ``comment``, which Slurm keeps in the active queue and in accounting.
Before a submit, and after a submit whose outcome is unknown, the tag is looked up:

* a job still queued or running, or one that COMPLETED, is reattached instead of submitting again;
* a job that ended in failure is left alone and a new one is submitted (a retry, as users expect);
* a submit that may have reached Slurm but is not found is *not* sent again in the same try: the task
  fails with a retryable error and its next try looks again before submitting.

The comment also records the try that submitted the job (``try:3``). Clearing a task instance starts a
new *run* of it: only jobs submitted since the last clear can be reattached. A job of an earlier run that
is still active is cancelled before the cleared task submits its own (the earlier try's trigger may not
have cancelled it yet), and an earlier run's COMPLETED job is not taken for this run's result.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field

from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.envelope import Call
from airflow_provider_slurmapi.api.errors import (
    SlurmApiError,
    SlurmJobApiError,
    SlurmJobNotFoundError,
    SlurmMessage,
    SlurmTransportError,
)
from airflow_provider_slurmapi.api.jobs import JobSpec, SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.operations import Operation, _records, cancel_job, get_job, submit_job

log = logging.getLogger(__name__)
TAG_PREFIX = "airflow-ti:"
_MAX_TAG = 240


def task_instance_tag(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """A deterministic tag of one task instance (all its tries share it)."""
    tag = f"{TAG_PREFIX}{dag_id}/{task_id}/{run_id}/{map_index}"
    if len(tag) > _MAX_TAG:
        digest = hashlib.sha256(tag.encode()).hexdigest()[:32]
        tag = f"{TAG_PREFIX}{dag_id[:80]}/{task_id[:80]}/sha256:{digest}"
    return tag


_TRY = re.compile(r"try:([1-9][0-9]{0,8})")


def tagged_comment(tag: str, comment: str | None, try_number: int | None = None) -> str:
    """The job comment: ``tag`` first, then ``try:<n>`` (when known), then the user's own comment."""
    head = f"{tag} try:{try_number}" if try_number is not None else tag
    return f"{head} {comment}" if comment else head


def has_tag(job: SlurmJob, tag: str) -> bool:
    return job.comment == tag or job.comment.startswith(tag + " ")


def split_comment(comment: str) -> tuple[str | None, int | None, str]:
    """A comment's task-instance tag, the try that submitted the job, and the user's own comment."""
    if not comment.startswith(TAG_PREFIX):
        return None, None, comment
    tag, _, rest = comment.partition(" ")
    first, _, after = rest.partition(" ")
    match = _TRY.fullmatch(first)
    if match is None:
        return tag, None, rest
    return tag, int(match.group(1)), after


def job_try(job: SlurmJob) -> int | None:
    """The try number recorded in the job's comment; None for a job tagged without one."""
    return split_comment(job.comment)[1]


@dataclass(frozen=True)
class TaskTry:
    """Which try of a task instance is submitting, and where its current run of tries began.

    :param number: this try's number (Airflow's ``ti.try_number``, from 1).
    :param run_start: the first try since the task instance was last cleared (1 if never cleared).
        Airflow raises ``max_tries`` to ``try_number + retries`` when it clears a task instance, so
        this is ``max_tries - retries + 1``, the same figure Airflow's sensors use for their first
        reschedule. Jobs of tries before it belong to an earlier run and are never reattached.
    """

    number: int
    run_start: int = 1

    @classmethod
    def of(cls, try_number: object, max_tries: object, retries: object) -> TaskTry:
        """From a task instance's ``try_number``/``max_tries`` and the task's ``retries``, as Airflow keeps them."""
        number = _positive(try_number, 1)
        start = _positive(max_tries, 0) - _positive(retries, 0) + 1 if max_tries is not None else 1
        return cls(number, min(max(start, 1), number))

    @property
    def starts_a_run(self) -> bool:
        """No earlier try of this run can have submitted a job."""
        return self.number <= self.run_start

    def owns(self, job: SlurmJob) -> bool:
        """The job was submitted by this run of tries (or carries no try, as before tries were recorded)."""
        submitted_by = job_try(job)
        return submitted_by is None or submitted_by >= self.run_start


def _positive(value: object, default: int) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
    return number if number >= 0 else default


@dataclass
class SubmitOutcome:
    """The job a task try runs: newly submitted, or reattached to an earlier one."""

    job_id: int
    reattached: bool = False
    job: SlurmJob | None = None
    warnings: list[SlurmMessage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)


class SubmitOutcomeUnknownError(SlurmJobApiError):
    """A submit may have created a job, but no job with the task's tag can be found yet."""

    retryable = True


def find_tagged_jobs(
    version: str, tag: str, *, name: str | None, require_accounting: bool
) -> Operation[list[SlurmJob]]:
    """Jobs carrying ``tag``, newest first: from the active queue and from accounting (an array as one job)."""
    reply = yield Call("GET", versions.jobs_path(version))
    reply.raise_for_errors("list jobs to look for an earlier submit of this task")
    found = {j.job_id: j for j in (SlurmJob.from_job_info(r, version) for r in _records(reply)) if has_tag(j, tag)}
    filters = {"job_name": name} if name else {}
    try:
        reply = yield Call("GET", versions.slurmdb_jobs_path(version, **filters))
        reply.raise_for_errors("list accounted jobs to look for an earlier submit of this task")
        for record in _records(reply):
            job = SlurmJob.from_slurmdb(record, version)
            if has_tag(job, tag):
                found.setdefault(job.job_id, job)
    except SlurmApiError as err:
        if require_accounting:
            raise
        log.warning("Accounting could not be searched for earlier jobs of this task (%s); using the queue only", err)
    # An array's tasks each carry the tag: they make one job, the array, followed by its id.
    arrays: dict[int, list[SlurmJob]] = {}
    for job in [j for j in found.values() if j.array_job_id]:
        arrays.setdefault(job.array_job_id or 0, []).append(found.pop(job.job_id))
    jobs = [*found.values(), *(SlurmArrayJob.of(array_id, tasks) for array_id, tasks in arrays.items())]
    return sorted(jobs, key=lambda j: j.job_id, reverse=True)


def reusable(jobs: list[SlurmJob]) -> SlurmJob | None:
    """The job to reattach to: the newest one still active, else the newest COMPLETED one."""
    active = [j for j in jobs if not j.state.is_terminal]
    if active:
        return active[0]
    completed = [j for j in jobs if j.state.is_success]
    return completed[0] if completed else None


def submit_once(
    version: str,
    spec: JobSpec,
    tag: str,
    *,
    reattach: bool = True,
    task_try: TaskTry | None = None,
    known_job_id: int | None = None,
) -> Operation[SubmitOutcome]:
    """Submit ``spec`` (whose comment carries ``tag``) unless a job of this task instance can be reused.

    ``task_try``: the submitting try. Jobs of tries before its run (the task was cleared since) are not
    reused, and any of them still active is cancelled first; when the try starts its run, no earlier
    try can have submitted, so accounting being down does not block the submit. None: every tagged job
    counts, and accounting must answer.

    ``known_job_id``: the job an earlier try recorded (Airflow 3.3's ``task_state_store``). It is read
    first, with one call; if it carries the tag and can be reused, the queue and accounting are not
    searched. Otherwise the search decides, as without it.
    """
    name = spec.job.get("name")
    cancelled: list[int] = []
    if reattach and known_job_id is not None:
        try:
            known: SlurmJob | None = yield from get_job(version, known_job_id)
        except SlurmJobNotFoundError:
            known = None
        if known is not None and has_tag(known, tag) and (task_try is None or task_try.owns(known)):
            job = reusable([known])
            if job is not None:
                note = f"reattached to job {job.job_id} ({job.state}), recorded by an earlier try"
                return SubmitOutcome(job.job_id, reattached=True, job=job, notes=[note])
    if reattach:
        jobs = yield from find_tagged_jobs(
            version, tag, name=name, require_accounting=task_try is None or not task_try.starts_a_run
        )
        if task_try is not None:
            cancelled = yield from _cancel_earlier_runs(version, jobs, task_try)
            jobs = [j for j in jobs if task_try.owns(j)]
        job = reusable(jobs)
        if job is not None:
            return SubmitOutcome(
                job.job_id, reattached=True, job=job, notes=[f"reattached to earlier job {job.job_id} ({job.state})"]
            )
    notes = [f"cancelled job {j} of an earlier run of this task (cleared since)" for j in cancelled]
    try:
        submitted = yield from submit_job(version, spec)
    except SlurmTransportError as err:
        if not err.ambiguous:
            raise
        jobs = yield from find_tagged_jobs(version, tag, name=name, require_accounting=False)
        job = reusable([j for j in jobs if task_try is None or task_try.owns(j)])
        if job is None:
            raise SubmitOutcomeUnknownError(
                f"The submit's reply was lost ({err}) and no job tagged {tag!r} is visible yet. It is not "
                "submitted again in this try, so that it cannot run twice; the task's next try looks for "
                "it again before submitting."
            ) from None
        return SubmitOutcome(
            job.job_id,
            reattached=True,
            job=job,
            notes=[*notes, f"the submit's reply was lost; found job {job.job_id}"],
            cancelled=cancelled,
        )
    return SubmitOutcome(submitted.job_id, warnings=submitted.warnings, notes=notes, cancelled=cancelled)


def _cancel_earlier_runs(version: str, jobs: list[SlurmJob], task_try: TaskTry) -> Operation[list[int]]:
    """Cancel the still-active jobs of tries before ``task_try``'s run: the task was cleared to run again."""
    cancelled = []
    for job in jobs:
        if not task_try.owns(job) and not job.state.is_terminal:
            yield from cancel_job(version, job.job_id)
            cancelled.append(job.job_id)
    return cancelled
