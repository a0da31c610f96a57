"""Exactly one Slurm job per task try: tag each job with its task instance and find it again.

The tag goes into the job's ``comment``, which Slurm keeps in the active queue and in accounting.
Before a submit, and after a submit whose outcome is unknown, the tag is looked up:

* a job still queued or running, or one that COMPLETED, is reattached instead of submitting again;
* a job that ended in failure is left alone and a new one is submitted (a retry, as users expect);
* a submit that may have reached Slurm but is not found is *not* sent again in the same try: the task
  fails with a retryable error and its next try looks again before submitting.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.envelope import Call
from airflow_provider_slurmapi.api.errors import SlurmApiError, SlurmJobApiError, SlurmMessage, SlurmTransportError
from airflow_provider_slurmapi.api.jobs import JobSpec, SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.operations import Operation, _records, submit_job

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


def tagged_comment(tag: str, comment: str | None) -> str:
    """The job comment carrying ``tag`` first, then the user's own comment."""
    return f"{tag} {comment}" if comment else tag


def has_tag(job: SlurmJob, tag: str) -> bool:
    return job.comment == tag or job.comment.startswith(tag + " ")


@dataclass
class SubmitOutcome:
    """The job a task try runs: newly submitted, or reattached to an earlier one."""

    job_id: int
    reattached: bool = False
    job: SlurmJob | None = None
    warnings: list[SlurmMessage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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
    version: str, spec: JobSpec, tag: str, *, reattach: bool = True, first_try: bool = False
) -> Operation[SubmitOutcome]:
    """Submit ``spec`` (whose comment carries ``tag``) unless a job of this task instance can be reused.

    ``first_try``: no earlier try can have submitted, so accounting being down does not block the submit.
    """
    name = spec.job.get("name")
    if reattach:
        jobs = yield from find_tagged_jobs(version, tag, name=name, require_accounting=not first_try)
        job = reusable(jobs)
        if job is not None:
            return SubmitOutcome(
                job.job_id, reattached=True, job=job, notes=[f"reattached to earlier job {job.job_id} ({job.state})"]
            )
    try:
        submitted = yield from submit_job(version, spec)
    except SlurmTransportError as err:
        if not err.ambiguous:
            raise
        jobs = yield from find_tagged_jobs(version, tag, name=name, require_accounting=False)
        job = reusable(jobs)
        if job is None:
            raise SubmitOutcomeUnknownError(
                f"The submit's reply was lost ({err}) and no job tagged {tag!r} is visible yet. It is not "
                "submitted again in this try, so that it cannot run twice; the task's next try looks for "
                "it again before submitting."
            ) from None
        return SubmitOutcome(
            job.job_id, reattached=True, job=job, notes=[f"the submit's reply was lost; found job {job.job_id}"]
        )
    return SubmitOutcome(submitted.job_id, warnings=submitted.warnings)
