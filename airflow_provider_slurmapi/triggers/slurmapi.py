"""SlurmJobTrigger: waits, asynchronously and cheaply, until a Slurm job ends (or reaches given states)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_slurmapi.api.errors import SlurmJobApiError
from airflow_provider_slurmapi.api.watch import DEFAULT_ERROR_BUDGET, Deadline, JobWatch, outcome_text

# Event statuses a trigger emits, once.
SUCCESS, FAILED, TIMEOUT, ERROR, REACHED = "success", "failed", "timeout", "error", "reached"


class SlurmJobTrigger(BaseTrigger):
    """Polls a Slurm job until it is terminal, then emits one event.

    :param job_id: the Slurm job id.
    :param slurmapi_conn_id: the ``slurmapi`` connection.
    :param poll_interval: seconds between polls (default 30).
    :param deadline: wall-clock time (epoch seconds) at which to give up with a ``timeout`` event; being
        absolute, it survives a triggerer restart. None waits as long as the job runs.
    :param target_states: also stop when the job's base state is one of these (e.g. ``["RUNNING"]``).
    :param error_budget: consecutive failed polls tolerated before an ``error`` event.

    The event's payload: ``status`` (success, failed, reached, timeout, error), ``job_id``, ``message``
    and ``job`` (the job summary, when one was read). ``run()`` only reads: it has no side effects, so a
    trigger that runs twice (triggerer HA) is harmless.
    """

    def __init__(
        self,
        job_id: int | str,
        slurmapi_conn_id: str = "slurmapi_default",
        poll_interval: float = 30.0,
        deadline: float | None = None,
        target_states: Sequence[str] | None = None,
        error_budget: int = DEFAULT_ERROR_BUDGET,
    ) -> None:
        super().__init__()
        self.job_id = job_id
        self.slurmapi_conn_id = slurmapi_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self.target_states = list(target_states) if target_states else None
        self.error_budget = int(error_budget)

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
            },
        )

    def _event(self, status: str, message: str, job: Any = None) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "job_id": self.job_id,
                "message": message,
                "job": job.summary() if job is not None else None,
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

        deadline = Deadline(self.deadline)
        watch = JobWatch(self.job_id, error_budget=self.error_budget)
        targets = set(self.target_states or ())
        last = None
        try:
            client = await SlurmJobApiHook(slurmapi_conn_id=self.slurmapi_conn_id).get_async_conn()
        except SlurmJobApiError as err:
            yield self._event(ERROR, str(err))
            return
        try:
            while True:
                try:
                    last = await client.get_job(self.job_id, recently_submitted=True)
                except SlurmJobApiError as err:
                    try:
                        self.log.warning(watch.failed_poll(err))
                    except SlurmJobApiError as final:
                        yield self._event(ERROR, str(final), last)
                        return
                else:
                    for line in watch.observe(last):
                        self.log.info(line)
                    if last.state.is_terminal:
                        status = SUCCESS if last.state.is_success else FAILED
                        yield self._event(status, outcome_text(last), last)
                        return
                    if last.state.base in targets:
                        yield self._event(REACHED, f"Slurm job {last.display_id} is {last.describe_state()}", last)
                        return
                remaining = deadline.remaining()
                if remaining is not None and remaining <= 0:
                    state = last.describe_state() if last else "unknown"
                    yield self._event(TIMEOUT, f"Slurm job {self.job_id} still {state} at the deadline", last)
                    return
                await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))
        finally:
            await client.aclose()
