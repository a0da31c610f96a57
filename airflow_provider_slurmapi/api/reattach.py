"""Exactly one Slurm job per task try: name each job after its task instance and find it again.

A job's *name* ends with the task instance's identity, ``~af<digest>r<run>``: ``digest`` is 12 hex
digits of the SHA-256 of ``dag_id/task_id/run_id/map_index`` and ``run`` the first try since the task
instance was last cleared. Slurm keeps the name in the active queue and in accounting whatever the
cluster's ``AccountingStoreFlags`` (it keeps the ``comment`` only with ``job_comment``, which is not the
default), so the identity survives the job leaving the queue after ``MinJobAge``.

Before a submit, and after a submit whose fate is unknown, the task's jobs are looked up:

* only the caller's own jobs count (their ``user_name`` is the connection's Slurm user, given as
  ``slurm_user`` or learnt from a held job it submits: :func:`caller_user`);
* a job of this run still queued or running, or one that COMPLETED, is reattached instead of submitting;
* a job of this run that ended in failure is left alone and a new one is submitted (a retry);
* a job of an earlier run (the task was cleared since) that is still active is cancelled first;
* a submit whose fate is unknown (:func:`~.errors.fate_unknown`) and whose job is not found is *not*
  sent again in the same try: the task fails with a retryable error and its next try looks again.

The ``comment`` still carries the readable tag ``airflow-ti:<dag>/<task>/<run>/<map> try:<n>`` for people
(``squeue -o %k``) and the job page; no decision here reads it.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

from airflow_provider_slurmapi.api.errors import (
    SlurmApiError,
    SlurmJobApiError,
    SlurmJobNotFoundError,
    SlurmMessage,
    fate_unknown,
)
from airflow_provider_slurmapi.api.identity import TaskIdentity
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.operations import (
    Operation,
    cancel_job,
    get_job,
    list_accounted_jobs,
    list_jobs,
    submit_job,
)
from airflow_provider_slurmapi.api.spec import JobSpec

log = logging.getLogger(__name__)


@dataclass
class SubmitOutcome:
    """The job a task try runs: newly submitted, or reattached to an earlier one."""

    job_id: int
    reattached: bool = False
    job: SlurmJob | None = None
    warnings: list[SlurmMessage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    # The caller's Slurm user, when it is known (given, or learnt: :func:`caller_user`).
    user: str | None = None


class SubmitOutcomeUnknownError(SlurmJobApiError):
    """A submit may have created a job, but no job of the task can be found yet."""

    retryable = True


def find_task_jobs(
    version: str, identity: TaskIdentity, *, name: str, require_accounting: bool
) -> Operation[list[SlurmJob]]:
    """Jobs of ``identity``'s task instance, newest first (an array as one job).

    The active queue gives every run's jobs; accounting, searched by this run's exact ``name``, gives
    this run's jobs that have left the queue.
    """
    found = {j.job_id: j for j in (yield from list_jobs(version)) if identity.run_of(j) is not None}
    try:
        for job in (yield from list_accounted_jobs(version, job_name=name)):
            if identity.this_run(job):
                found.setdefault(job.job_id, job)
    except SlurmApiError as err:
        if require_accounting:
            raise
        log.warning("Accounting could not be searched for earlier jobs of this task (%s); using the queue only", err)
    # An array's tasks each carry the name: they make one job, the array, followed by its id.
    arrays: dict[int, list[SlurmJob]] = {}
    for job in [j for j in found.values() if j.array_job_id]:
        arrays.setdefault(job.array_job_id or 0, []).append(found.pop(job.job_id))
    jobs = [*found.values(), *(SlurmArrayJob.of(array_id, tasks) for array_id, tasks in arrays.items())]
    return sorted(jobs, key=lambda j: j.job_id, reverse=True)


def mine(jobs: list[SlurmJob], user: str) -> list[SlurmJob]:
    """The jobs the caller submitted: those of its Slurm ``user`` (see :func:`caller_user`)."""
    return [j for j in jobs if j.user == user]


# The name of the held job that tells the caller its own Slurm user (:func:`caller_user`).
PROBE_NAME = "slurmapi-whoami"
# The fields of the task's job the probe keeps, so that Slurm accepts it where it accepts the task's job.
_PROBE_FIELDS = ("current_working_directory", "partition", "account", "qos", "reservation", "clusters")


def caller_user(version: str, spec: JobSpec) -> Operation[str]:
    """The caller's Slurm user, learnt from a job it certainly submitted.

    Slurm names the job's user in every record, but not the caller (a reply's ``meta.client`` is
    slurmrestd's own peer, not the user a token belongs to), and through Google's service the Linux
    account a service account maps to is the cluster's business. So, when the connection does not say
    (``slurm_user``) and a look-up found jobs under the task's name, the caller submits a *held* job named
    ``slurmapi-whoami-<random>`` (it never runs), reads its user, and cancels it. The name is never reused,
    so even a submit whose reply was lost is resolved by that name, and the oldest job carrying it is
    the caller's (a copy comes after it). Another user's job submitted under the task's predictable name
    before the task's first try is thus never taken for the task's.
    """
    name = f"{PROBE_NAME}-{secrets.token_hex(8)}"
    fields = {key: spec.job[key] for key in _PROBE_FIELDS if key in spec.job}
    probe = JobSpec.build("#!/bin/sh\ntrue\n", {**fields, "name": name, "hold": True, "time_limit": 1})
    try:
        job_id = (yield from submit_job(version, probe)).job_id
    except SlurmJobApiError as err:
        if not fate_unknown(err):
            raise
        named = [j for j in (yield from list_jobs(version)) if j.name == name]
        if not named:
            raise SubmitOutcomeUnknownError(
                f"Finding which Slurm user this connection runs jobs as failed ({err}); set the connection's "
                "slurm_user to the Linux account its jobs run as to skip this step."
            ) from None
        job_id = min(named, key=lambda j: j.job_id).job_id
    try:
        job = yield from get_job(version, job_id, recently_submitted=True)
    except SlurmJobApiError:
        yield from cancel_job(version, job_id)
        raise
    yield from cancel_job(version, job_id)
    if not job.user:
        raise SlurmJobApiError(
            f"Slurm's record of job {job_id} names no user, so this connection's Slurm user is unknown: set "
            "the connection's slurm_user to the Linux account its jobs run as."
        )
    log.info("This connection's jobs run as Slurm user %s (read from held job %s, cancelled)", job.user, job_id)
    return job.user


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
    identity: TaskIdentity,
    *,
    reattach: bool = True,
    known_job_id: int | None = None,
    user: str | None = None,
) -> Operation[SubmitOutcome]:
    """Submit ``spec`` (named by ``identity.job_name``) unless a job of this run of tries can be reused.

    ``reattach=False`` skips the look-up before the submit; a submit whose fate is unknown is still
    resolved by looking, never by sending it again. When this try starts its run, no earlier try can
    have submitted, so accounting being down does not block the submit.

    ``known_job_id``: the job an earlier try recorded (Airflow 3.3's ``task_state_store``). It is read
    first, with one call; if it is this run's job and can be reused, nothing is searched. The store is
    the caller's own, so that job also names the caller's Slurm user when ``user`` is not given.

    ``user``: the caller's Slurm user; when None and jobs carry the task's name, it is learnt first
    (:func:`caller_user`), and only that user's jobs count.
    """
    name = str(spec.job.get("name") or "")
    if not name.endswith(identity.suffix):
        raise ValueError(f"the job name {name!r} does not end with the task's identity {identity.suffix!r}")
    if known_job_id is not None:
        try:
            known: SlurmJob | None = yield from get_job(version, known_job_id)
        except SlurmJobNotFoundError:
            known = None
        if known is not None and identity.run_of(known) is not None and (user is None or known.user == user):
            user = known.user
            job = reusable([known]) if reattach and identity.this_run(known) else None
            if job is not None:
                note = f"reattached to job {job.job_id} ({job.state}), recorded by an earlier try"
                return SubmitOutcome(job.job_id, reattached=True, job=job, notes=[note], user=user)
    cancelled: list[int] = []
    if reattach:
        found = yield from find_task_jobs(
            version, identity, name=name, require_accounting=not identity.task_try.starts_a_run
        )
        if found and user is None:
            user = yield from caller_user(version, spec)
        jobs = mine(found, user or "")
        cancelled = yield from _cancel_earlier_runs(version, jobs, identity)
        job = reusable([j for j in jobs if identity.this_run(j)])
        if job is not None:
            note = f"reattached to earlier job {job.job_id} ({job.state})"
            return SubmitOutcome(job.job_id, reattached=True, job=job, notes=[note], user=user)
    notes = [f"cancelled job {j} of an earlier run of this task (cleared since)" for j in cancelled]
    try:
        submitted = yield from submit_job(version, spec)
    except SlurmJobApiError as err:
        if not fate_unknown(err):
            raise
        found = yield from find_task_jobs(version, identity, name=name, require_accounting=False)
        if found and user is None:
            user = yield from caller_user(version, spec)
        job = reusable([j for j in mine(found, user or "") if identity.this_run(j)])
        if job is None:
            raise SubmitOutcomeUnknownError(
                f"The submit's outcome is unknown ({err}) and no job named {name!r} is visible yet. It is not "
                "submitted again in this try, so that it cannot run twice; the task's next try looks for it "
                "again before submitting."
            ) from None
        note = f"the submit's outcome was unknown ({err}); found its job {job.job_id} ({job.state})"
        return SubmitOutcome(job.job_id, reattached=True, job=job, notes=[*notes, note], cancelled=cancelled, user=user)
    return SubmitOutcome(submitted.job_id, warnings=submitted.warnings, notes=notes, cancelled=cancelled, user=user)


def _cancel_earlier_runs(version: str, jobs: list[SlurmJob], identity: TaskIdentity) -> Operation[list[int]]:
    """Cancel the still-active jobs of runs before this one: the task was cleared to run again."""
    cancelled = []
    for job in jobs:
        if not identity.this_run(job) and not job.state.is_terminal:
            yield from cancel_job(version, job.job_id)
            cancelled.append(job.job_id)
    return cancelled
