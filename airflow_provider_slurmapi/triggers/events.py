"""``SlurmJobEventTrigger``: DAGs start when Slurm jobs end (Airflow 3 event-driven scheduling).

Use it in an ``AssetWatcher``: each Slurm job matching the filter that ends fires one event, whose payload
(the job's summary) becomes the asset event's ``extra``::

    from airflow.sdk import DAG, Asset, AssetWatcher

    ended = SlurmJobEventTrigger(name_prefix="train-", states=["COMPLETED"])
    checkpoints = Asset("trained-checkpoints", watchers=[AssetWatcher(name="slurm_training", trigger=ended)])

    with DAG("evaluate", schedule=[checkpoints]):
        ...

Cost: one accounting call per cluster per ``poll_interval`` however many watchers share it
(``GET /slurmdb/{v}/jobs/?start_time=...&skip_steps``); it only reads. On Airflow 3.3+ the triggerer's
shared streams run that one poll for every watcher of the same connection and interval; before 3.3 the
provider coalesces them itself, per triggerer process.

Never twice for one job: each watcher remembers where it stopped (:class:`~.api.ended.Watermark`) in its
asset's state store (Airflow 3.3+), so a triggerer restart resumes there. Without a state store (Airflow
3.0-3.2) a restarted watcher starts from the moment it starts again: a job that ended while no triggerer
ran is not fired (never twice, but possibly never).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Hashable, Sequence
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_slurmapi.api import checks
from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.api.ended import DEFAULT_SETTLE, EndedJobFilter, Watermark, ahead_of, job_key
from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobSpecError
from airflow_provider_slurmapi.api.fields import DEFAULT_CONN_ID
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

try:
    from airflow.triggers.base import BaseEventTrigger  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # Airflow 2.x: no event-driven scheduling
    from airflow.triggers.base import BaseTrigger as BaseEventTrigger  # type: ignore[assignment]

log = logging.getLogger(__name__)

STREAM = "slurmapi-ended-jobs"
STATE_KEY = "slurmapi.ended_jobs"
# The longest poll_interval or settle a watcher takes (a week): each poll reads settle + 2 x interval back.
MAX_WINDOW = 7 * 86400
# Failed reads of the gap a restarted watcher missed before it gives that gap up (and says which it was).
GAP_TRIES = 5
# How far in the future a job's end may lie (Slurm's whole seconds, a poll's own time) before the watcher
# says the cluster's clock runs ahead of its own.
SKEW_TOLERANCE = 5.0


class SlurmJobEventTrigger(BaseEventTrigger):
    """Fires one event each time a Slurm job matching the filter ends (for an ``AssetWatcher``).

    .. seealso::
        How to use it: :doc:`/triggers/slurmapi`.

    Every filter field is optional; given fields must all match.

    :param slurmapi_conn_id: the ``slurmapi`` connection (the cluster).
    :param users: Slurm user name(s) whose jobs count.
    :param names: exact job name(s).
    :param name_prefix: a prefix of the job name (e.g. ``"train-"``).
    :param partitions: partition name(s).
    :param states: end state(s) that count (``COMPLETED``, ``FAILED``, ``TIMEOUT``, ``CANCELLED``,
        ``NODE_FAIL``, ``OUT_OF_MEMORY``...); default any end.
    :param poll_interval: seconds between accounting polls (default 60), shared by every watcher of the
        connection with the same interval.
    :param settle: seconds a job stays in view after its end, for slurmdbd's lag in recording it
        (default 300). Each poll reads the jobs of the last ``settle + 2 * poll_interval`` seconds.

    The event's payload is the job's summary (as the operator's XCom has it: ``job_id``, ``name``,
    ``state``, ``exit_code``, ``end_time``...) plus ``user`` and ``account``.
    """

    def __init__(
        self,
        *,
        slurmapi_conn_id: str = DEFAULT_CONN_ID,
        users: str | Sequence[str] | None = None,
        names: str | Sequence[str] | None = None,
        name_prefix: str | None = None,
        partitions: str | Sequence[str] | None = None,
        states: str | Sequence[str] | None = None,
        poll_interval: float = 60.0,
        settle: float = DEFAULT_SETTLE,
    ) -> None:
        super().__init__()
        self.slurmapi_conn_id = slurmapi_conn_id
        self.wanted = EndedJobFilter.of(
            users=users, names=names, name_prefix=name_prefix, partitions=partitions, states=states
        )
        self.poll_interval = checks.seconds(poll_interval, "poll_interval")
        self.settle = checks.seconds(settle, "settle", zero=True)
        for field_name, value in (("poll_interval", self.poll_interval), ("settle", self.settle)):
            if value > MAX_WINDOW:
                raise SlurmJobSpecError(
                    field_name,
                    f"{value:g} s is more than a week",
                    "Each poll reads the jobs that ended in the last settle + 2 x poll_interval seconds: keep "
                    "both under a week (settle covers slurmdbd's lag, minutes at most).",
                )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        wanted = self.wanted
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "slurmapi_conn_id": self.slurmapi_conn_id,
                "users": list(wanted.users) or None,
                "names": list(wanted.names) or None,
                "name_prefix": wanted.name_prefix or None,
                "partitions": list(wanted.partitions) or None,
                "states": list(wanted.states) or None,
                "poll_interval": self.poll_interval,
                "settle": self.settle,
            },
        )

    # -- one poll per cluster ------------------------------------------------------------------------

    def shared_stream_key(self) -> Hashable | None:
        """Airflow 3.3+: every watcher of this connection, interval and settle shares one poll."""
        return (STREAM, self.slurmapi_conn_id, self.poll_interval, self.settle)

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        """One accounting poll per interval for the whole group; yields ``EndedJobs`` snapshots."""
        interval = float(kwargs["poll_interval"])
        window = float(kwargs["settle"]) + 2 * interval
        async with await _client(kwargs["slurmapi_conn_id"]) as client:
            while True:
                polled_at = time.time()
                try:
                    jobs = await ended_since(client, polled_at - window)
                except SlurmJobApiError as err:
                    log.warning("Slurm job watcher: could not read accounting (%s); next try in %ss", err, interval)
                except Exception:  # a reply nobody foresaw: said, and the next poll comes (never a silent end)
                    log.exception("Slurm job watcher: reading accounting failed; next try in %ss", interval)
                else:
                    yield EndedJobs(polled_at, polled_at - window, jobs)
                await asyncio.sleep(interval)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """This watcher's jobs out of the group's snapshots: each matching job that ended, once."""
        mark = await self._load_mark()
        self.log.info(
            "Slurm job watcher %s (%s): fires for each matching job that ends after %s",
            self._state_key,
            self.slurmapi_conn_id,
            _utc(mark.after),
        )
        caught_up = False
        gap_failures = 0
        seen: set[str] | None = None  # the previous snapshot's jobs: a job first listed after its window is late
        skew_said = False
        async for snapshot in shared_stream:
            if not isinstance(snapshot, EndedJobs):
                continue
            jobs = snapshot.jobs
            if not caught_up and mark.after < snapshot.since:
                # Restarted after a longer pause than the group's window: read the gap once, on our own
                # (until that read succeeds, the watermark stays where it was; after GAP_TRIES failed
                # reads the gap is given up, with a warning naming it, so new jobs fire again).
                try:
                    async with await _client(self.slurmapi_conn_id) as client:
                        jobs = await ended_since(client, mark.after)
                except Exception as err:
                    gap_failures += 1
                    if gap_failures < GAP_TRIES:
                        self.log.warning(
                            "Slurm job watcher: could not read the jobs since it stopped (%s); try %d of %d",
                            err,
                            gap_failures,
                            GAP_TRIES,
                        )
                        continue
                    self.log.warning(
                        "Slurm job watcher: could not read the jobs that ended from %s to %s (%d tries, the last: "
                        "%s): those jobs fire no event; watching on from there",
                        _utc(mark.after),
                        _utc(snapshot.since),
                        gap_failures,
                        err,
                    )
            caught_up = True
            if seen is not None:
                for job in mark.arrived_late(jobs, self.wanted, seen):
                    self.log.warning(
                        "Slurm job watcher: job %s (%s) ended %s at %s, but accounting listed it only now, after "
                        "this watcher had moved past %s: it fires no event. It reached accounting more than "
                        "settle=%gs after its end (slurmdbd's lag, or this triggerer's clock ahead of the "
                        "cluster's): raise settle, or set both clocks right (NTP).",
                        job.display_id,
                        job.name,
                        job.state,
                        _utc(job.end_time.timestamp()) if job.end_time else "?",
                        _utc(mark.after),
                        self.settle,
                    )
            seen = {job_key(job) for job in jobs}
            ahead = ahead_of(jobs, snapshot.polled_at)
            if ahead > SKEW_TOLERANCE and not skew_said:
                skew_said = True
                self.log.warning(
                    "Slurm job watcher: a job's end lies %.0fs after this triggerer's time: the cluster's clock "
                    "runs ahead of the triggerer's, and every time this watcher compares (its watermark, "
                    "settle=%gs) is off by as much: set both clocks right (NTP).",
                    ahead,
                    self.settle,
                )
            fresh = mark.new_jobs(jobs, self.wanted)
            mark.advance(snapshot.polled_at, self.settle)
            await self._save_mark(mark)  # before the events: a crash in between loses, never repeats
            for job in fresh:
                self.log.info("Slurm job %s (%s) ended %s", job.display_id, job.name, job.state)
                yield TriggerEvent(job_event(job))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Without the triggerer's shared streams (before Airflow 3.3): the provider's own coalescing."""
        stream = _Coalesced.subscribe(self.shared_stream_key(), self.serialize()[1])
        try:
            async for event in self.filter_shared_stream(stream):
                yield event
        finally:
            await stream.aclose()

    # -- where it stopped ----------------------------------------------------------------------------

    @property
    def _state_key(self) -> str:
        return f"{STATE_KEY}.{self.wanted.digest()}"

    async def _load_mark(self) -> Watermark:
        store = getattr(self, "asset_state_store", None)
        if store is not None:
            try:
                mark = Watermark.from_dict(await store.aget(self._state_key))
            except ValueError as err:  # one trigger on several assets: no single state to keep
                self.log.warning("Slurm job watcher keeps no state across restarts: %s", err)
                self.asset_state_store = None
            else:
                if mark is not None:
                    return mark
        return Watermark.starting(time.time())

    async def _save_mark(self, mark: Watermark) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is not None:
            await store.aset(self._state_key, mark.as_dict())


class EndedJobs:
    """One poll's answer: the jobs that ran or ended since ``since`` (epoch), read at ``polled_at``."""

    def __init__(self, polled_at: float, since: float, jobs: list[SlurmJob]) -> None:
        self.polled_at = polled_at
        self.since = since
        self.jobs = jobs


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


async def ended_since(client: AsyncSlurmJobApiClient, since: float) -> list[SlurmJob]:
    """Accounting's jobs that ended at or after ``since`` (and those still running), without steps."""
    return await client.list_accounted_jobs(start_time=str(int(since)), skip_steps="true")


def job_event(job: SlurmJob) -> dict[str, Any]:
    """The event's payload (the asset event's ``extra``)."""
    return {**job.summary(), "user": job.user, "account": job.account}


async def _client(conn_id: str) -> AsyncSlurmJobApiClient:
    try:
        return await SlurmJobApiHook(slurmapi_conn_id=conn_id).get_async_conn()
    except SlurmJobSpecError:
        raise
    except SlurmJobApiError:
        raise
    except Exception as err:  # AirflowNotFoundException and the like: say which connection
        raise SlurmJobSpecError("slurmapi_conn_id", f"{conn_id!r} cannot be read ({err})", "Create it.") from err


class _Coalesced:
    """Before Airflow 3.3: one poll per stream key in this event loop, fanned out to every watcher."""

    _groups: dict[tuple[int, Hashable], _Coalesced] = {}

    def __init__(self, key: tuple[int, Hashable], kwargs: dict[str, Any]) -> None:
        self.key = key
        self.kwargs = kwargs
        self.queues: set[asyncio.Queue[Any]] = set()
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def subscribe(cls, key: Hashable, kwargs: dict[str, Any]) -> AsyncGenerator[Any, None]:
        loop_key = (id(asyncio.get_running_loop()), key)
        group = cls._groups.get(loop_key)
        if group is None:
            group = cls._groups[loop_key] = cls(loop_key, kwargs)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        group.queues.add(queue)
        if group.task is None:
            group.task = asyncio.get_running_loop().create_task(group._poll(), name=f"{STREAM}-{key}")
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            group.queues.discard(queue)
            if not group.queues:
                cls._groups.pop(loop_key, None)
                if group.task is not None and group.task is not asyncio.current_task():
                    group.task.cancel()
                    await asyncio.gather(group.task, return_exceptions=True)

    async def _poll(self) -> None:
        try:
            async for snapshot in SlurmJobEventTrigger.open_shared_stream(self.kwargs):
                for queue in list(self.queues):
                    queue.put_nowait(snapshot)
        except Exception as err:  # every watcher of the group learns why the poll stopped
            self._groups.pop(self.key, None)
            for queue in list(self.queues):
                queue.put_nowait(err)
