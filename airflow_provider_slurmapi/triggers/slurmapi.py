"""SlurmJobTrigger: waits, asynchronously and cheaply, until a Slurm job ends (or reaches given states)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import redact
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_slurmapi.api import checks, storage, versions
from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobSpecError
from airflow_provider_slurmapi.api.fields import DEFAULT_CONN_ID
from airflow_provider_slurmapi.api.job_event import ERROR, REACHED, TIMEOUT, JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.observe import Observation
from airflow_provider_slurmapi.api.staging import StagedReport, StagingLocation
from airflow_provider_slurmapi.api.states import DEFAULT_ERROR_BUDGET
from airflow_provider_slurmapi.api.watch import UNKNOWN_JOB_GRACE, JobWatch, WaitDeadline, within
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.changes import SharedChangeFeed
from airflow_provider_slurmapi.triggers.poller import SharedJobPoller
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_3_PLUS

# Event statuses a trigger emits, once.


class SlurmJobTrigger(BaseTrigger):
    """Polls a Slurm job until it is terminal, then emits one event.

    .. seealso::
        How to use it: :doc:`/triggers/slurmapi`.

    :param job_id: the Slurm job id.
    :param slurmapi_conn_id: the ``slurmapi`` connection.
    :param poll_interval: seconds between polls (default 30).
    :param deadline: wall-clock time (epoch seconds) at which to give up with a ``timeout`` event; being
        absolute, it survives a triggerer restart. None waits as long as the job runs.
    :param target_states: also stop when the job's base state is one of these (e.g. ``["RUNNING"]``).
    :param error_budget: consecutive failed polls tolerated before an ``error`` event.
    :param cancel_on_kill: cancel the job when a user marks the deferred task failed or success, or
        clears it (default False: a sensor only watches). A triggerer restart, shutdown or the trigger
        moving to another triggerer never cancels.
    :param coalesce: share one poller (one batched call per tick) with every other trigger of this
        connection and interval in the triggerer (default True); False: a poller of this trigger's own
        (its own client and calls; the same wait otherwise).
    :param unknown_job_grace: seconds the job may be in neither the active queue nor accounting (a job
        submitted a moment ago that Slurm has not recorded yet) before an ``error`` event saying the id is
        unknown (default 600, for a job the task just submitted; the sensor passes its own, shorter one).
    :param read_results: the job publishes its result in its comment (the operator's ``publish_results``):
        its final record is read from the active queue when accounting lacks the comment (it keeps none by
        default; the shared poller reads all such jobs of a tick with one call) (default False).
    :param staging_uri: the task instance's staging prefix (the operator's, with ``staging_uri`` set):
        while the job runs, each poll logs the lines it staged since the last one (one listing of that
        prefix, then only the new chunks, read in a worker thread; no Slurm call). None: nothing is read.
    :param staging_root: the staging location ``staging_uri`` is below (the operator passes it; its jobs
        announce their chunks there): the triggers of a triggerer that follow jobs staged there share one
        listing of what is new per poll interval, instead of one listing per job (None: each lists its
        own prefix every poll, as a trigger serialized before announcements did).
    :param masked: values the task's log masks that the job may print (the operator passes its job's
        secret-looking environment values): the output lines the trigger logs show them as ``***``, as
        the worker's log does (a triggerer's masker knows only its own secrets). Airflow stores a
        trigger's arguments encrypted, as it stores connections.

    The event's payload: ``status`` (success, failed, reached, timeout, error), ``job_id``, ``message``
    and ``job`` (the job summary, when one was read). An array's id waits for every task: ``job`` is the
    array's summary with its ``tasks``, and a failure's ``message`` names each failed task. ``run()`` only
    reads: it has no side effects, so a trigger that runs twice (triggerer HA) is harmless.
    """

    def __init__(
        self,
        job_id: int | str,
        slurmapi_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        target_states: Sequence[str] | None = None,
        error_budget: int = DEFAULT_ERROR_BUDGET,
        coalesce: bool = True,
        cancel_on_kill: bool = False,
        unknown_job_grace: float = UNKNOWN_JOB_GRACE,
        read_results: bool = False,
        staging_uri: str | None = None,
        masked: Sequence[str] | None = None,
        staging_root: str | None = None,
    ) -> None:
        super().__init__()
        self.job_id = job_id
        self.slurmapi_conn_id = slurmapi_conn_id
        self.poll_interval = checks.seconds(poll_interval, "poll_interval")
        self.deadline = None if deadline is None else checks.seconds(deadline, "deadline")
        self.unknown_job_grace = checks.seconds(unknown_job_grace, "unknown_job_grace", zero=True)
        self.target_states = list(target_states) if target_states else None
        self.error_budget = int(error_budget)
        self.coalesce = bool(coalesce)
        self.cancel_on_kill = bool(cancel_on_kill)
        self.read_results = bool(read_results)
        self.staging_uri = staging_uri or None
        self.staging_root = staging_root or None
        self.masked = sorted({str(v) for v in masked or () if v}, key=len, reverse=True)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "slurmapi_conn_id": self.slurmapi_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "target_states": self.target_states,
                "error_budget": self.error_budget,
                "coalesce": self.coalesce,
                "cancel_on_kill": self.cancel_on_kill,
                "unknown_job_grace": self.unknown_job_grace,
                "read_results": self.read_results,
                "staging_uri": self.staging_uri,
                "masked": self.masked,
                "staging_root": self.staging_root,
            },
        )

    def _event(self, status: str, message: str, job: SlurmJob | None = None) -> TriggerEvent:
        return TriggerEvent(JobEvent(status, self.job_id, message, job.summary() if job else None).payload())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            # Checked here, not in __init__: a templated id is rendered by the triggerer after that.
            job_id = versions.canonical_job_id(self.job_id)
        except SlurmJobSpecError as err:
            yield self._event(ERROR, str(err))
            return
        hook = SlurmJobApiHook(slurmapi_conn_id=self.slurmapi_conn_id)
        try:
            settings = await hook.aget_settings()
        except SlurmJobApiError as err:
            yield self._event(ERROR, str(err))
            return
        except Exception as err:
            # A missing connection (AirflowNotFoundException) and the like: in the event, the task's
            # error states the cause, rather than Airflow's bare "Trigger failure".
            yield self._event(ERROR, f"Could not read connection {self.slurmapi_conn_id!r}: {err}")
            return
        if self.coalesce:
            conn_key = f"{self.slurmapi_conn_id}|{settings.cluster.name}|{settings.auth.cache_key()}"
            poller = SharedJobPoller.get(conn_key, self.poll_interval, hook.async_client)
        else:  # a poller of its own: the same wait, with one subscriber
            poller = SharedJobPoller.alone(self.poll_interval, hook.async_client())
        follow = self._follower(hook, job_id, settings)
        waiting = self._wait(poller, job_id, follow)
        try:
            async for event in waiting:
                yield event
                return
        except asyncio.CancelledError:
            # Before Airflow 3.3 there is no on_kill for triggers: cancel only when the task instance
            # is no longer deferred, i.e. a user acted on it; a triggerer restart leaves it deferred.
            if self.cancel_on_kill and not AIRFLOW_V_3_3_PLUS:
                await _outlasting_cancels(self._cancel_if_stopped_by_user(unknown_cancels=False))
            raise
        finally:
            await waiting.aclose()  # leave the shared poller now, not when garbage collected
            if follow is not None:
                follow.close()

    async def on_kill(self) -> None:
        """Airflow 3.3+: the triggerer dropped this trigger for what it takes as a user's action on the task.

        Airflow 3.3 also drops, the same way, a trigger that moved to another triggerer while this one
        seemed dead (a stalled loop, a lost database connection): the job is cancelled only when the task
        instance has really left the deferred state (marked failed/success, or cleared).
        """
        if self.cancel_on_kill:
            await _outlasting_cancels(self._cancel_if_stopped_by_user(unknown_cancels=True))

    async def _cancel_if_stopped_by_user(self, *, unknown_cancels: bool) -> None:
        """Cancel the job unless the task instance is still deferred (the trigger moved or the triggerer
        stopped). ``unknown_cancels``: what to do when the task's state cannot be read."""
        state = await self._task_state()
        if state == "deferred":
            self.log.info(
                "Slurm job %s is left running: its task is still deferred (this trigger moved to another "
                "triggerer, or this triggerer is stopping)",
                self.job_id,
            )
            return
        if state is None and not unknown_cancels:
            self.log.warning("Slurm job %s is left running: the task's state could not be read", self.job_id)
            return
        await self._cancel_job(f"the deferred task was stopped by a user (task state: {state or 'unknown'})")

    async def _cancel_job(self, why: str) -> None:
        self.log.info("Cancelling Slurm job %s because %s", self.job_id, why)
        try:
            async with await SlurmJobApiHook(slurmapi_conn_id=self.slurmapi_conn_id).get_async_conn() as client:
                await client.cancel_job(self.job_id)
        except Exception as err:
            self.log.error("Could not cancel Slurm job %s: %s", self.job_id, err)

    async def _task_state(self) -> str | None:
        """The task instance's state now (``deferred`` while a triggerer should run this trigger); None
        when it cannot be read."""
        from asgiref.sync import sync_to_async

        ti = getattr(self, "task_instance", None)
        if ti is None:
            return None
        try:
            return await sync_to_async(task_instance_state)(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        except Exception as err:
            self.log.warning("Could not read the state of the task of Slurm job %s: %s", self.job_id, err)
            return None

    def _done(self, job: SlurmJob) -> TriggerEvent | None:
        if job.source == "none":  # a placeholder for a job not recorded (yet): no state reached
            return None
        if job.state.is_terminal:
            return TriggerEvent(JobEvent.ended(self.job_id, job).payload())
        if job.state.base in set(self.target_states or ()):
            return self._event(REACHED, f"{job.label} is {job.describe_state()}", job)
        return None

    def _watch(self) -> JobWatch:
        return JobWatch(self.job_id, error_budget=self.error_budget, unknown_job_grace=self.unknown_job_grace)

    def _follower(self, hook: SlurmJobApiHook, job_id: str, settings: Any) -> _Follow | None:
        """With ``staging_uri``, what logs the job's newly staged output lines (``True``: the job ended).

        Run by a triggerer, it keeps how far it logged in the task instance's XCom
        ``slurm_stream_position`` after each poll that logged lines: the trigger that replaces this one
        after a triggerer restart goes on from there instead of logging the job's output again.
        """
        if self.staging_uri is None or not job_id.isdigit():  # an array's tasks: their output at the end
            return None
        feed = None
        if self.staging_root is not None:
            conn_key = f"{self.slurmapi_conn_id}|{settings.auth.cache_key()}"
            root = StagingLocation.of(self.staging_root)
            feed = SharedChangeFeed.get(conn_key, root, self.poll_interval, hook.storage_client)
        return _Follow(self, hook, job_id, feed, _StreamPositions.of(getattr(self, "task_instance", None)))

    def _mask(self, text: str) -> str:
        """``text`` with each of ``masked`` (longest first) as ``***``."""
        for value in self.masked:
            text = text.replace(value, "***")
        return text

    async def _wait(
        self, poller: SharedJobPoller, job_id: str, follow: _Follow | None = None
    ) -> AsyncGenerator[TriggerEvent, None]:
        """The one wait loop: follow the job on ``poller`` (this event loop's shared poller for the
        cluster, one batched call per tick for all; or a poller of this trigger's own) until it ends.

        ``job_id`` is the canonical spelling, the one the batched replies use."""
        deadline = WaitDeadline(self.deadline)
        watch = self._watch()
        targets = set(self.target_states or ())
        state = "unknown"
        queue = poller.subscribe(job_id, published=self.read_results)
        if follow is not None:  # the feed wakes us when it hands the follower new chunks
            follow.wake = lambda: queue.put_nowait(_NEWS)
        running = False  # the job has started and not ended: its output is followed
        try:
            while True:
                remaining = deadline.remaining()
                wait = remaining
                # The poller wakes us on a change only, the feed on news; a follower may be due to look
                # for itself (a gap, a quiet job; every poll_interval without a feed).
                due = follow.due_in() if follow is not None and running else None
                if due is not None:
                    wait = due if wait is None else min(wait, due)
                try:
                    seen = await within(wait, queue.get()) if wait is not None else await queue.get()
                except asyncio.TimeoutError:
                    if follow is not None and running and not deadline.passed():
                        await follow(False)
                        continue
                    yield self._event(TIMEOUT, f"Slurm job {self.job_id} still {state} at the deadline")
                    return
                if seen is _NEWS:
                    if follow is not None and running:
                        await follow(False)
                    continue
                since = poller.tick_started  # the look that saw ``seen`` began after this
                error = seen.error
                if seen.state is not None:
                    running = not seen.unrecorded and seen.state.base not in _NOT_STARTED
                    running = running and not seen.state.is_terminal
                    state = str(seen.state) if not seen.unrecorded else "unknown"
                    # An array comes whole on every tick: log its tasks' progress, not a bare state.
                    whole = seen.job if isinstance(seen.job, SlurmArrayJob) else None
                    try:
                        lines = (
                            watch.observe(whole)
                            if whole
                            else watch.observe_state(self.job_id, seen.state, unrecorded=seen.unrecorded)
                        )
                    except SlurmJobApiError as gone:
                        yield self._event(ERROR, str(gone))
                        return
                    for line in lines:
                        self.log.info(line)
                    job: SlurmJob | None = None
                    if not seen.unrecorded and (seen.state.is_terminal or seen.state.base in targets):
                        try:
                            job = seen.job if seen.job is not None else await poller.fetch(job_id)
                        except SlurmJobApiError as err:
                            error = err
                    if follow is not None and not seen.unrecorded and seen.state.base not in _NOT_STARTED:
                        await follow(seen.state.is_terminal, job, since)
                    if job is not None:
                        event = self._done(job)
                        if event is not None:
                            yield event
                            return
                if error is not None:
                    try:
                        self.log.warning(watch.failed_poll(error))
                    except SlurmJobApiError as final:
                        yield self._event(ERROR, str(final))
                        return
        finally:
            await poller.unsubscribe(job_id, queue)


class _Follow:
    """Logs one job's newly staged output lines as the trigger waits (``await follow(ended)``)."""

    def __init__(
        self,
        trigger: SlurmJobTrigger,
        hook: SlurmJobApiHook,
        job_id: str,
        feed: SharedChangeFeed | None,
        positions: _StreamPositions | None,
    ) -> None:
        self.trigger = trigger
        self.hook = hook
        self.job_id = job_id
        self.feed = feed
        self.positions = positions
        self.follower: storage.OutputFollower | None = None
        self.wake: Callable[[], None] | None = None  # wakes the trigger's wait (set by it)
        self.failed_at: float | None = None  # when the last poll failed (time.monotonic()), if it did

    def due_in(self) -> float | None:
        """Seconds until the wait should call this though nothing woke it (0: at once), None for never:
        alone, every ``poll_interval``; fed, only when its follower has a gap or a quiet job to list for.
        After a poll that failed, not before ``poll_interval`` has passed."""
        if self.follower is None or self.feed is None:
            return self.trigger.poll_interval
        due = self.follower.due_in()
        if due is not None and self.failed_at is not None:
            due = max(due, self.failed_at + self.trigger.poll_interval - time.monotonic())
        return due

    def _start(self) -> storage.OutputFollower:
        location = StagingLocation.of(self.trigger.staging_uri or "")
        # The feed's client serves its followers too (google-cloud-storage's clients may be shared across
        # threads): one connection pool and one token for the location, not one per task.
        client = self.feed.client() if self.feed is not None else self.hook.storage_client()
        follower = storage.OutputFollower(client, location, self.job_id, announced=self.feed is not None)
        follower.on_news = self.wake
        saved = self.positions.load(self.trigger.log) if self.positions else None
        if saved is not None and follower.resume(saved):
            self.trigger.log.info(
                "Following Slurm job %s's staged output from where the last trigger left it", self.job_id
            )
        return follower

    @staticmethod
    def _lines(follower: storage.OutputFollower, ended: bool, report: StagedReport | None) -> list[tuple[str, str]]:
        return follower.poll(ended, report) + (follower.flush() if ended else [])

    async def __call__(self, ended: bool, job: SlurmJob | None = None, since: float | None = None) -> None:
        """Log what is new; ``ended``: the job has ended (``job`` its final record, ``since`` when the look
        that saw it end began), so the rest of its output is read."""
        log = self.trigger.log
        report = _staged_report(job) if ended else None
        try:
            if self.follower is None:
                self.follower = await asyncio.to_thread(self._start)
                if self.feed is not None:  # before its first listing: no announcement after it is missed
                    self.feed.subscribe(self.follower)
            elif ended:
                if self.feed is not None and report is not None:
                    # A listing of the feed begun after the end was seen holds the last chunks'
                    # announcements: with the job's report of what it staged, nothing more is listed.
                    await self.feed.refresh(since)
            elif self.follower.idle():  # nothing new: no thread, no request
                return
            # Chunks that came with their bytes are read here, on the event loop: no request, no thread.
            offline = None if ended else self.follower.poll_offline()
            found = (
                offline if offline is not None else await asyncio.to_thread(self._lines, self.follower, ended, report)
            )
        except Exception as err:  # the storage's fault: the wait goes on, the task reads again at the end
            self.failed_at = time.monotonic()
            log.warning("Could not read Slurm job %s's staged output: %s", self.job_id, err)
            return
        self.failed_at = None
        for record in storage.logged_records(self.job_id, found):
            log.info("%s", redact(self.trigger._mask(record)))
        if found and self.positions and not ended:
            await asyncio.to_thread(self.positions.save, self.follower.position(), log)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.unsubscribe(self.follower)


def _staged_report(job: SlurmJob | None) -> StagedReport | None:
    """What the ended job's wrapper reported it staged (in the comment it published), if the record has it."""
    published = job.published if job is not None else None
    return StagedReport.parse(published.staged) if published is not None and published.staged else None


# What the change feed puts on a trigger's queue of observations when it handed the trigger's follower new
# chunks (compared by identity: no poller delivers it).
_NEWS = Observation()
# States in which a job has not run yet: nothing to read of its output.
_NOT_STARTED = frozenset({"PENDING", "CONFIGURING"})
# The task instance's XCom that keeps how far a deferred task's trigger logged its job's staged output.
XCOM_STREAM_POSITION = "slurm_stream_position"


class _StreamPositions:
    """How far a trigger logged its job's staged output, kept in its task instance's XCom, so that the
    trigger that replaces it after a triggerer restart does not log the same lines again.

    Blocking (the XCom API): called in a worker thread. A failure to read or write is logged once and
    only costs that guarantee: the output is followed all the same (it is in Cloud Storage whatever the
    log holds, and the task reads its end there).
    """

    def __init__(self, dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int) -> None:
        self.where = {"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": map_index}
        self.try_number = try_number  # a position is this try's log's: a later try logs the output anew
        self.saved: Any = None
        self.failed = False

    @classmethod
    def of(cls, task_instance: Any) -> _StreamPositions | None:
        """For the task instance a triggerer gave the trigger; None without one (``dag.test()`` before
        Airflow 3 runs the trigger in the task's process, where nothing restarts it)."""
        try:
            return cls(
                str(task_instance.dag_id),
                str(task_instance.task_id),
                str(task_instance.run_id),
                int(task_instance.map_index if task_instance.map_index is not None else -1),
                int(task_instance.try_number),
            )
        except (AttributeError, TypeError, ValueError):
            return None

    def load(self, log: Any) -> Any:
        from airflow.providers.common.compat.sdk import XCom

        try:
            saved = XCom.get_one(key=XCOM_STREAM_POSITION, **self.where)
        except Exception as err:
            self._failed(log, "read", err)
            return None
        if not isinstance(saved, dict) or saved.get("task_try") != self.try_number:
            return None
        self.saved = saved
        return {k: v for k, v in saved.items() if k != "task_try"}

    def save(self, position: Any, log: Any) -> None:
        from airflow.providers.common.compat.sdk import XCom

        if position is not None:
            position = {**position, "task_try": self.try_number}
        if self.failed or position is None or position == self.saved:
            return
        try:
            XCom.set(key=XCOM_STREAM_POSITION, value=position, **self.where)
        except Exception as err:
            self._failed(log, "keep", err)
            return
        self.saved = position

    def _failed(self, log: Any, verb: str, err: Exception) -> None:
        if not self.failed:
            log.warning(
                "Could not %s how far the job's output was logged (XCom %r: %s): after a triggerer restart "
                "its lines may be logged again",
                verb,
                XCOM_STREAM_POSITION,
                err,
            )
        self.failed = True


# Cancels (of Slurm jobs) still going on after the trigger that started them was interrupted.
_BACKGROUND: set[asyncio.Task[None]] = set()


async def _outlasting_cancels(work: Coroutine[Any, Any, None], *, limit: float = 25.0) -> None:
    """Run ``work`` to its end even if the awaiting trigger is cancelled again meanwhile.

    A triggerer cancels a trigger it drops again on every loop until the trigger has finished (every
    second or so), so a cancel of the Slurm job that takes longer (reading the task's state can take
    seconds on a busy triggerer) would be cut short, and what it logs lost with the trigger's log.
    Those repeated cancels are absorbed for up to ``limit`` seconds (below Airflow 3.3's 30 s for
    on_kill); past that the trigger gives way and ``work`` still goes on, shielded, in the loop.
    """
    task = asyncio.ensure_future(work)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    loop = asyncio.get_running_loop()
    give_way = loop.time() + limit
    while True:
        try:
            await asyncio.shield(task)
            return
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is None or (not task.done() and loop.time() >= give_way):
                raise
            uncancel = getattr(me, "uncancel", None)  # Python 3.11+: keep the task's cancel count right
            if uncancel is not None:
                uncancel()
            # a repeat of the cancel being handled: keep waiting for the work, or end as it did
            if task.done():
                task.result()
                return


def task_instance_state(dag_id: str, task_id: str, run_id: str, map_index: int) -> str | None:
    """The task instance's current state, asked the way this Airflow version allows from a triggerer."""
    if AIRFLOW_V_3_0_PLUS:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        states = RuntimeTaskInstance.get_task_states(
            dag_id=dag_id, task_ids=[task_id], run_ids=[run_id], map_index=map_index
        )
        # Airflow keys a mapped task instance's state "<task_id>_<map_index>", an unmapped one's "<task_id>".
        key = task_id if map_index is None or map_index < 0 else f"{task_id}_{map_index}"
        state = states.get(run_id, {}).get(key)
        return None if state is None else str(getattr(state, "value", state))
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        state = (
            session.query(TaskInstance.state)
            .filter_by(dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)
            .scalar()
        )
    return None if state is None else str(getattr(state, "value", state))
