"""One poll of many jobs as a sans-IO operation: what each tick of the shared poller reads, and why.

:func:`observe` takes the tick's job ids and the poller's :class:`PollMemory` (what earlier ticks learnt of
the cluster) and yields its ``Call``\\ s like every operation in :mod:`.operations`; the poller
(``triggers/poller.py``) only drives it, fans the :class:`Observation`\\ s out to its subscribers and
supervises itself. The decisions, in order:

1. **Batched states.** One ``GET /slurm/{v}/jobs/state/?job_id=a&job_id=b...`` per 500 ids. An entry
   ``<id>_<task>`` marks an id as a job array (its tasks' entries cannot be told apart from other
   arrays'): from then on that array is read in full each tick (``get_job``).
2. **Accounting fills in.** One ``/slurmdb/{v}/jobs/?step=a&step=b`` call for the ids the queue no longer
   holds and those that just ended there (for their full records): a tick costs ``ceil(N/500) + 1``
   calls, however many jobs end at once. An id neither holds is *unrecorded* (just submitted, or no such
   job): the trigger times how long it may stay so.
3. **Published comments.** A subscriber that reads what its job published (``published``) needs the
   ended job's comment. The job's wrapper copies it to accounting (``sacctmgr``), so the call of step 2
   usually carries it; otherwise the jobs that ended in the queue are read there with one call
   (``queued_jobs``). Once an accounting record lacked a publication its queue record had (and none had
   one before), that read replaces accounting's for such jobs (``comments_accounted`` False).
4. **Fallback to one call per job.** A cluster that does not serve the batched paths (404, 405) is polled
   one job per call from then on (``batched`` False); a 400 refuses only this tick's ids, so this tick
   alone goes one by one. A reply no reader foresaw (a record with a value nobody expected) also makes
   this tick go one by one, so the record at fault fails its own job's wait only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    MalformedReplyError,
    SlurmApiError,
    SlurmJobApiError,
    SlurmJobSpecError,
)
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.operations import Operation, accounted_jobs, get_job, queued_jobs, states_in_queue
from airflow_provider_slurmapi.api.states import JobState

log = logging.getLogger(__name__)


@dataclass
class Observation:
    """What one tick learnt about one job: its state, or the error that kept the poller from knowing."""

    state: JobState | None = None
    error: SlurmJobApiError | None = None
    # True when the job was found only in accounting (it has left the active queue).
    accounted: bool = False
    # The full record of a job that has ended, read in the tick's one batched accounting call; for an
    # array, the whole array (its tasks) on every tick.
    job: SlurmJob | None = None
    # True when neither the queue nor accounting knows the job (yet): ``state`` is then a PENDING
    # placeholder, and the trigger decides how long an unknown id may stay so.
    unrecorded: bool = False


@dataclass
class PollMemory:
    """What a poller's ticks learnt of its cluster and its jobs, carried from one tick to the next.

    :param arrays: subscribed ids known to be job arrays (read in full each tick).
    :param published: subscribed ids whose final record must carry what the job published.
    :param batched: False once the cluster refused the batched paths for good (404/405).
    :param comments_accounted: whether this cluster's accounting records carry what jobs published (the
        wrapper's ``sacctmgr`` copy, or ``AccountingStoreFlags=job_comment``): True once one did (for good: a
        job whose copy failed is still read from the queue), False when one read from both lacked it while
        its queue record had it and none did before (ended jobs are then read from the queue only).
    """

    arrays: set[str] = field(default_factory=set)
    published: set[str] = field(default_factory=set)
    batched: bool = True
    comments_accounted: bool | None = None

    def forget(self, job_id: str) -> None:
        """The last subscriber of ``job_id`` left."""
        self.arrays.discard(job_id)
        self.published.discard(job_id)


def observe(version: str, job_ids: list[str], memory: PollMemory) -> Operation[dict[str, Observation]]:
    """One tick: an observation of every id in ``job_ids``, learning into ``memory`` as it goes.

    An id that is not a job id fails alone, never reaching the calls the others share; an error of a
    shared call is every asking job's observation (it counts against each trigger's error budget).
    """
    seen: dict[str, Observation] = {}
    ids: list[str] = []
    for job_id in job_ids:
        try:
            versions.check_job_id(job_id)
        except SlurmJobSpecError as err:
            seen[job_id] = Observation(error=err)
        else:
            ids.append(job_id)
    if not ids:
        return seen
    try:
        if memory.batched:
            try:
                seen.update((yield from _batched(version, ids, memory)))
                return seen
            except (GoogleApiError, SlurmApiError) as err:
                if not _batch_unsupported(err):
                    raise
                if _batch_path_unknown(err):
                    log.warning("Batched job-state calls refused (%s); polling one job per call from now on", err)
                    memory.batched = False
                else:  # a 400 may be this tick's ids' doing (one bad id): one call per job this tick only
                    log.warning("A batched job-state call was refused (%s); polling one job per call this tick", err)
    except SlurmJobApiError as err:
        seen.update({job_id: Observation(error=err) for job_id in ids})
        return seen
    except Exception:
        log.exception("Reading the batched states of %d jobs failed; reading them one by one", len(ids))
    for job_id in ids:
        seen[job_id] = yield from observe_one(version, job_id)
    return seen


def _batched(version: str, ids: list[str], memory: PollMemory) -> Operation[dict[str, Observation]]:
    states = yield from states_in_queue(version, ids)
    wanted = set(ids)
    memory.arrays.update(key.split("_")[0] for key in states if "_" in key and key.split("_")[0] in wanted)
    seen = {job_id: Observation(state=states[job_id]) for job_id in ids if job_id in states}
    ended_here = [
        job_id
        for job_id in ids
        if job_id in memory.published
        and job_id not in memory.arrays
        and job_id in states
        and states[job_id].is_terminal
    ]
    # Ended jobs whose comment accounting is known not to keep are read from the queue instead.
    queue_only = set(ended_here) if memory.comments_accounted is False else set()
    ask = [
        job_id
        for job_id in ids
        if job_id not in memory.arrays
        and (job_id not in states or states[job_id].is_terminal)
        and job_id not in queue_only
    ]
    if ask:
        try:
            accounted, arrays = yield from accounted_jobs(version, ask)
        except SlurmJobApiError as err:
            for job_id in ask:
                seen.setdefault(job_id, Observation(error=err))
        else:
            memory.arrays.update(arrays)
            for job_id in ask:
                if job_id in memory.arrays:
                    continue
                job = accounted.get(job_id)
                final = job if job is not None and job.state.is_terminal else None
                if job_id in seen:
                    seen[job_id].job = final
                elif job is not None:
                    seen[job_id] = Observation(state=job.state, accounted=True, job=final)
                else:
                    # Neither in the queue nor (yet) in accounting: just submitted, or no such job.
                    seen[job_id] = Observation(state=JobState("PENDING"), unrecorded=True)
    yield from _read_published(version, seen, ended_here, memory)
    for job_id in ids:
        if job_id in memory.arrays:
            seen[job_id] = yield from observe_one(version, job_id)
    return seen


def _read_published(
    version: str, seen: dict[str, Observation], ended_here: list[str], memory: PollMemory
) -> Operation[None]:
    """The queue's records of the jobs that ended there and whose subscribers need what they published,
    when their accounting records lack it (with one call, ``queued_jobs``)."""
    for job_id in ended_here:
        accounted = seen[job_id].job
        if accounted is not None and accounted.published is not None:
            memory.comments_accounted = True
    ask = [job_id for job_id in ended_here if _unpublished(seen[job_id].job)]
    if not ask:
        return
    try:
        queued = yield from queued_jobs(version, ask)
    except SlurmJobApiError as err:
        log.warning("Could not read the published records of %s from the queue: %s", ", ".join(ask), err)
        return  # the accounting records stand (the task log says what could not be read)
    for job_id, job in queued.items():
        if not job.state.is_terminal:
            continue
        if job.published is not None and seen[job_id].job is not None and not memory.comments_accounted:
            memory.comments_accounted = False  # accounting's record of the same ended job lacks it
        seen[job_id].job = job


def observe_one(version: str, job_id: str, *, record: bool = False) -> Operation[Observation]:
    """One job (a whole array) read in full: its state, and its record when it is an array or ended (or
    always, with ``record``: the worker's wait logs a running job's nodes and run time). Its own failure,
    of any kind, is its own observation."""
    try:
        job = yield from get_job(version, job_id, recently_submitted=True)
    except SlurmJobApiError as err:
        return Observation(error=err)
    except Exception as err:
        log.exception("Slurm job %s: its record could not be read", job_id)
        return Observation(error=MalformedReplyError(f"the record of Slurm job {job_id} could not be read: {err!r}"))
    whole = record or isinstance(job, SlurmArrayJob) or job.state.is_terminal
    return Observation(
        state=job.state,
        accounted=job.source == "slurmdb",
        job=job if whole else None,
        unrecorded=job.source == "none",
    )


def _unpublished(job: SlurmJob | None) -> bool:
    return job is None or job.published is None


def _batch_path_unknown(err: Any) -> bool:
    """The cluster does not serve the batched paths at all (not just refused this call's ids)."""
    code = err.code if isinstance(err, GoogleApiError) else getattr(err, "http_status", None)
    return code in (404, 405)


def _batch_unsupported(err: Any) -> bool:
    if isinstance(err, GoogleApiError):
        return err.code in (400, 404) and not err.retryable
    return isinstance(err, SlurmApiError) and err.http_status in (400, 404, 405, 422)
