"""One poller per cluster per triggerer: thousands of waiting triggers, one batched call per tick.

Every :class:`~airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger` on the same connection and
poll interval in one event loop subscribes here. Each tick asks the active queue for all their jobs at
once (``GET /slurm/{v}/jobs/state/?job_id=a&job_id=b...``, chunked to keep URLs short), and only the jobs
missing from it are asked of accounting, also batched (``/slurmdb/{v}/jobs/?step=a&step=b``). Each trigger is
woken with its own job's state.

Job arrays: for an array's id the batched call answers one entry per task, named ``<record id>_<task>``,
and a task that has started carries its own record id (``?job_id=5`` gives ``8_0``, ``9_1``, ``5_2``), so
the entries of several arrays cannot be told apart. An id is known to be an array once an entry
``<id>_<task>`` or an accounting record of one of its tasks shows up; from then on each tick reads that
array's task records (one call, two at its end: ``get_job``), and the trigger gets the whole array. If the cluster refuses the batched paths, the poller falls back to one
call per job. The poller lives only in memory: it starts with its first subscriber and stops with the
last, so nothing needs sharing between triggerer processes.

A subscriber that reads what its job published at its end (``subscribe(..., published=True)``, the
operator's ``publish_results``; :mod:`~airflow_provider_slurmapi.api.results`) needs the job's comment.
The job's wrapper writes it to accounting too (``sacctmgr``), so the tick's one accounting call usually
carries it. When an ended job's accounting record lacks it (no ``sacctmgr`` on the node, or slurmdbd had not
recorded the job yet), the tick reads the records of such jobs that ended in the active queue from there,
with one call (``queued_jobs``: the job, or the whole queue when several ended). Until an accounting
record has carried a publication, an ended job read from both showing that accounting lacks it
(``comments_accounted`` False) makes that read replace the accounting read for such jobs, so a tick costs
as many calls as without it, however many jobs end at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    MalformedReplyError,
    SlurmApiError,
    SlurmJobApiError,
    SlurmJobSpecError,
)
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.operations import accounted_jobs, queued_jobs, states_in_queue
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


class SharedJobPoller:
    """Polls every subscribed job of one cluster with batched calls, once per ``interval`` seconds."""

    _registry: dict[tuple[int, str, float], SharedJobPoller] = {}

    def __init__(self, key: tuple[int, str, float], client: AsyncSlurmJobApiClient, interval: float) -> None:
        self.key = key
        self.client = client
        self.interval = interval
        self.subscribers: dict[str, set[asyncio.Queue[Observation]]] = {}
        # Subscribed ids known to be job arrays: read in full each tick.
        self.arrays: set[str] = set()
        # What each subscriber was last woken with: an unchanged observation does not wake it again.
        self._delivered: dict[asyncio.Queue[Observation], Observation] = {}
        self.batched = True
        self._task: asyncio.Task[None] | None = None
        # Subscribed ids whose final record must carry what the job published (its comment).
        self.published: set[str] = set()
        # Whether this cluster's accounting records carry what jobs published (their wrapper's sacctmgr copy,
        # or AccountingStoreFlags=job_comment), learnt from ended jobs: True once one did (for good: a job
        # whose copy failed is still read from the queue), False when one read from both lacked it while
        # its queue record had it and none did before: ended jobs are then read from the queue only.
        self.comments_accounted: bool | None = None

    @classmethod
    def get(cls, conn_key: str, interval: float, make_client: Callable[[], AsyncSlurmJobApiClient]) -> SharedJobPoller:
        """The poller of this event loop for ``conn_key`` and ``interval``, created on first use."""
        key = (id(asyncio.get_running_loop()), conn_key, float(interval))
        poller = cls._registry.get(key)
        if poller is None:
            poller = cls._registry[key] = cls(key, make_client(), float(interval))
        return poller

    @classmethod
    def active(cls) -> list[SharedJobPoller]:
        return list(cls._registry.values())

    def subscribe(self, job_id: object, *, published: bool = False) -> asyncio.Queue[Observation]:
        """Follow ``job_id``: its observations arrive on the returned queue, one per change. ``published``:
        the final record carries the job's comment (read from the active queue when accounting lacks it)."""
        queue: asyncio.Queue[Observation] = asyncio.Queue()
        self.subscribers.setdefault(_key(job_id), set()).add(queue)
        if published:
            self.published.add(_key(job_id))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"slurm-poller-{self.key[1]}")
        return queue

    async def unsubscribe(self, job_id: object, queue: asyncio.Queue[Observation]) -> None:
        """Leave; the last subscriber to leave stops the poller and closes its client."""
        key = _key(job_id)
        queues = self.subscribers.get(key)
        self._delivered.pop(queue, None)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self.subscribers[key]
                self.arrays.discard(key)
                self.published.discard(key)
        if not self.subscribers:
            self._registry.pop(self.key, None)
            task, self._task = self._task, None
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            await self.client.aclose()

    async def fetch(self, job_id: object) -> SlurmJob:
        """The full record of one job (for the final event), through the shared client."""
        return await self.client.get_job(job_id, recently_submitted=True)

    async def _run(self) -> None:
        # The last unsubscribe cancels this task; checking again after each tick also ends it when a
        # cancel came as a call ended and was lost (Python 3.11's wait_for, in code the tick calls).
        # It never ends otherwise: a tick that fails in a way nobody foresaw is logged, every subscriber
        # hears of it (an error counts against its trigger's error budget), and the next tick comes.
        while self.subscribers and self._task is asyncio.current_task():
            try:
                await self.tick()
            except Exception as err:
                conn_id = self.key[1].split("|", 1)[0]
                log.exception("The Slurm job poller of connection %s failed a tick; it goes on polling", conn_id)
                self._wake_all(SlurmJobApiError(f"polling the jobs failed ({err!r})", retryable=True))
            if not self.subscribers or self._task is not asyncio.current_task():
                return
            await asyncio.sleep(self.interval)

    def _wake_all(self, error: SlurmJobApiError) -> None:
        for queues in list(self.subscribers.values()):
            for queue in queues:
                self._delivered[queue] = observation = Observation(error=error)
                queue.put_nowait(observation)

    async def tick(self) -> dict[str, Observation]:
        """One poll of every subscribed job; a subscriber is woken when its job's observation changed.

        An error always wakes (it counts against the trigger's error budget), and so does the first
        observation after one (it resets the count), and a job unknown to the queue and accounting (the
        trigger times how long it stays unknown); a job still in the same state does not, so a tick
        costs thousands of waiting triggers nothing. An id that is not a job id fails its own
        subscribers only: it never reaches the batched call the others share.
        """
        ids: list[str] = []
        seen: dict[str, Observation] = {}
        for job_id in self.subscribers:
            try:
                versions.check_job_id(job_id)
            except SlurmJobSpecError as err:
                seen[job_id] = Observation(error=err)
            else:
                ids.append(job_id)
        if ids:
            try:
                seen.update(await self._observe(ids))
            except SlurmJobApiError as err:
                seen.update({job_id: Observation(error=err) for job_id in ids})
            except Exception:
                # A reply no reader foresaw (a record with a value nobody expected): read each job on its
                # own this tick, so the record at fault fails its own job's wait only.
                log.exception("Reading the batched states of %d jobs failed; reading them one by one", len(ids))
                seen.update(await self._observe_each(ids))
        for job_id, observation in seen.items():
            for queue in self.subscribers.get(job_id, ()):
                wake = observation.error is not None or observation.unrecorded
                if not wake and self._delivered.get(queue) == observation:
                    continue
                self._delivered[queue] = observation
                queue.put_nowait(observation)
        return seen

    async def _observe(self, ids: list[str]) -> dict[str, Observation]:
        version = await self.client.api_version()
        if self.batched:
            try:
                return await self._observe_batched(version, ids)
            except (GoogleApiError, SlurmApiError) as err:
                if not _batch_unsupported(err):
                    raise
                if _batch_path_unknown(err):
                    log.warning("Batched job-state calls refused (%s); polling one job per call from now on", err)
                    self.batched = False
                else:  # a 400 may be this tick's ids' doing (one bad id): one call per job this tick only
                    log.warning("A batched job-state call was refused (%s); polling one job per call this tick", err)
        return await self._observe_each(ids)

    async def _observe_batched(self, version: str, ids: list[str]) -> dict[str, Observation]:
        states = await self.client.run(states_in_queue(version, ids))
        wanted = set(ids)
        self.arrays.update(key.split("_")[0] for key in states if "_" in key and key.split("_")[0] in wanted)
        seen = {job_id: Observation(state=states[job_id]) for job_id in ids if job_id in states}
        ended_here = [
            job_id
            for job_id in ids
            if job_id in self.published
            and job_id not in self.arrays
            and job_id in states
            and states[job_id].is_terminal
        ]
        queue_only = set(ended_here) if self.comments_accounted is False else set()
        # One accounting call for the jobs that left the queue and those that just ended in it (for
        # their full records): a tick costs ceil(N/500) + 1 calls, however many jobs end at once.
        # Ended jobs whose comment accounting is known not to keep are read from the queue instead.
        ask = [
            job_id
            for job_id in ids
            if job_id not in self.arrays
            and (job_id not in states or states[job_id].is_terminal)
            and job_id not in queue_only
        ]
        if ask:
            try:
                accounted, arrays = await self.client.run(accounted_jobs(version, ask))
            except SlurmJobApiError as err:
                for job_id in ask:
                    if job_id not in seen:
                        seen[job_id] = Observation(error=err)
            else:
                self.arrays.update(arrays)
                for job_id in ask:
                    job = accounted.get(job_id)
                    final = job if job is not None and job.state.is_terminal else None
                    if job_id in self.arrays:
                        continue
                    if job_id in seen:
                        seen[job_id].job = final
                    elif job is not None:
                        seen[job_id] = Observation(state=job.state, accounted=True, job=final)
                    else:
                        # Neither in the queue nor (yet) in accounting: just submitted, or no such job.
                        seen[job_id] = Observation(state=JobState("PENDING"), unrecorded=True)
        await self._read_published(version, seen, ended_here)
        for job_id in ids:
            if job_id in self.arrays:
                seen[job_id] = await self._observe_one(job_id)
        return seen

    async def _read_published(self, version: str, seen: dict[str, Observation], ended_here: list[str]) -> None:
        """The queue's records of the jobs that ended there and whose subscribers need what they published,
        when their accounting records lack it (with one call, ``queued_jobs``)."""
        for job_id in ended_here:
            accounted = seen[job_id].job
            if accounted is not None and accounted.published is not None:
                self.comments_accounted = True
        ask = [job_id for job_id in ended_here if _unpublished(seen[job_id].job)]
        if not ask:
            return
        try:
            queued = await self.client.run(queued_jobs(version, ask))
        except SlurmJobApiError as err:
            log.warning("Could not read the published records of %s from the queue: %s", ", ".join(ask), err)
            return  # the accounting records stand (the task log says what could not be read)
        for job_id, job in queued.items():
            if not job.state.is_terminal:
                continue
            if job.published is not None and seen[job_id].job is not None and not self.comments_accounted:
                self.comments_accounted = False  # accounting's record of the same ended job lacks it
            seen[job_id].job = job

    async def _observe_one(self, job_id: str) -> Observation:
        """One job (a whole array) read in full: its state, and its record when it is an array or ended."""
        try:
            job = await self.client.get_job(job_id, recently_submitted=True)
        except SlurmJobApiError as err:
            return Observation(error=err)
        except Exception as err:
            log.exception("Slurm job %s: its record could not be read", job_id)
            return Observation(
                error=MalformedReplyError(f"the record of Slurm job {job_id} could not be read: {err!r}")
            )
        whole = isinstance(job, SlurmArrayJob) or job.state.is_terminal
        return Observation(
            state=job.state,
            accounted=job.source == "slurmdb",
            job=job if whole else None,
            unrecorded=job.source == "none",
        )

    async def _observe_each(self, ids: list[str]) -> dict[str, Observation]:
        return {job_id: await self._observe_one(job_id) for job_id in ids}


def _unpublished(job: SlurmJob | None) -> bool:
    return job is None or job.published is None


def _key(job_id: object) -> str:
    """The id a subscriber is filed under: as replies spell it (``"01"`` is ``"1"``), or as given when it
    is not a job id (the next tick fails that subscriber alone)."""
    try:
        return versions.canonical_job_id(job_id)
    except SlurmJobSpecError:
        return str(job_id)


def _batch_path_unknown(err: Any) -> bool:
    """The cluster does not serve the batched paths at all (not just refused this call's ids)."""
    code = err.code if isinstance(err, GoogleApiError) else getattr(err, "http_status", None)
    return code in (404, 405)


def _batch_unsupported(err: Any) -> bool:
    if isinstance(err, GoogleApiError):
        return err.code in (400, 404) and not err.retryable
    return isinstance(err, SlurmApiError) and err.http_status in (400, 404, 405, 422)
