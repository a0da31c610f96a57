"""One poller per cluster per triggerer: thousands of waiting triggers, one batched call per tick.

Every :class:`~airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger` on the same connection and
poll interval in one event loop subscribes here. Each tick asks the active queue for all their jobs at
once (``GET /slurm/{v}/jobs/state/?job_id=a&job_id=b...``, chunked to keep URLs short), and only the jobs
missing from it are asked of accounting, also batched (``/slurmdb/{v}/jobs/?step=a&step=b``). Each trigger is
woken with its own job's state.

What each tick reads (batched states, accounting filling in, arrays, published comments, the fallback to
one call per job) is decided by the sans-IO operation :func:`~airflow_provider_slurmapi.api.observe.observe`
and what it remembers between ticks (:class:`~airflow_provider_slurmapi.api.observe.PollMemory`); the poller
subscribes triggers, drives that operation once per interval, wakes each subscriber whose job's observation
changed, and supervises itself. It lives only in memory: it starts with its first subscriber and stops with
the last, so nothing needs sharing between triggerer processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.observe import Observation, PollMemory, observe

__all__ = ["Observation", "SharedJobPoller"]

log = logging.getLogger(__name__)


class SharedJobPoller:
    """Polls every subscribed job of one cluster with batched calls, once per ``interval`` seconds."""

    _registry: dict[tuple[int, str, float], SharedJobPoller] = {}

    def __init__(self, key: tuple[int, str, float], client: AsyncSlurmJobApiClient, interval: float) -> None:
        self.key = key
        self.client = client
        self.interval = interval
        self.subscribers: dict[str, set[asyncio.Queue[Observation]]] = {}
        # What the ticks learnt of the cluster and the subscribed jobs (arrays, published, batching).
        self.memory = PollMemory()
        # What each subscriber was last woken with: an unchanged observation does not wake it again.
        self._delivered: dict[asyncio.Queue[Observation], Observation] = {}
        self._task: asyncio.Task[None] | None = None
        # When the latest tick began (``time.monotonic()``): what it saw was true at some time after this.
        self.tick_started = 0.0

    @property
    def batched(self) -> bool:
        """False once the cluster refused the batched paths for good (see ``PollMemory``)."""
        return self.memory.batched

    @property
    def comments_accounted(self) -> bool | None:
        """Whether the cluster's accounting records carry what jobs published (see ``PollMemory``)."""
        return self.memory.comments_accounted

    @classmethod
    def get(cls, conn_key: str, interval: float, make_client: Callable[[], AsyncSlurmJobApiClient]) -> SharedJobPoller:
        """The poller of this event loop for ``conn_key`` and ``interval``, created on first use."""
        key = (id(asyncio.get_running_loop()), conn_key, float(interval))
        poller = cls._registry.get(key)
        if poller is None:
            poller = cls._registry[key] = cls(key, make_client(), float(interval))
        return poller

    @classmethod
    def alone(cls, interval: float, client: AsyncSlurmJobApiClient) -> SharedJobPoller:
        """A poller of one trigger's own (``coalesce=False``): never shared, its client closed when its one
        subscriber leaves."""
        key = (id(asyncio.get_running_loop()), f"alone-{id(client)}", float(interval))
        return cls(key, client, float(interval))

    @classmethod
    def active(cls) -> list[SharedJobPoller]:
        return list(cls._registry.values())

    def subscribe(self, job_id: object, *, published: bool = False) -> asyncio.Queue[Observation]:
        """Follow ``job_id``: its observations arrive on the returned queue, one per change. ``published``:
        the final record carries the job's comment (read from the active queue when accounting lacks it)."""
        queue: asyncio.Queue[Observation] = asyncio.Queue()
        self.subscribers.setdefault(_key(job_id), set()).add(queue)
        if published:
            self.memory.published.add(_key(job_id))
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
                self.memory.forget(key)
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
        """One poll of every subscribed job (:func:`~airflow_provider_slurmapi.api.observe.observe`); a
        subscriber is woken when its job's observation changed.

        An error always wakes (it counts against the trigger's error budget), and so does the first
        observation after one (it resets the count), and a job unknown to the queue and accounting (the
        trigger times how long it stays unknown); a job still in the same state does not, so a tick
        costs thousands of waiting triggers nothing.
        """
        ids = list(self.subscribers)
        self.tick_started = time.monotonic()
        try:
            seen = await self.client.run(observe(await self.client.api_version(), ids, self.memory))
        except SlurmJobApiError as err:  # no version, or the cluster serves none this connection asks for
            seen = {job_id: Observation(error=err) for job_id in ids}
        for job_id, observation in seen.items():
            for queue in self.subscribers.get(job_id, ()):
                wake = observation.error is not None or observation.unrecorded
                if not wake and self._delivered.get(queue) == observation:
                    continue
                self._delivered[queue] = observation
                queue.put_nowait(observation)
        return seen


def _key(job_id: object) -> str:
    """The id a subscriber is filed under: as replies spell it (``"01"`` is ``"1"``), or as given when it
    is not a job id (the next tick fails that subscriber alone)."""
    try:
        return versions.canonical_job_id(job_id)
    except SlurmJobSpecError:
        return str(job_id)
