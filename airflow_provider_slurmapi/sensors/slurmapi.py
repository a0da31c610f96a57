"""SlurmJobSensor: gate downstream tasks on any Slurm job, submitted by Airflow or not."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    BaseSensorOperator,
)

from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobNotFoundError
from airflow_provider_slurmapi.api.jobs import TERMINAL_STATES, JobState
from airflow_provider_slurmapi.api.watch import outcome_text
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook, default_deferrable
from airflow_provider_slurmapi.links.slurmapi import SlurmJobLink


class SlurmJobSensor(BaseSensorOperator):
    """Wait until a Slurm job reaches a success state; fail on a failure state.

    :param job_id: the Slurm job id (templated, e.g. ``{{ ti.xcom_pull(task_ids='submit') }}``).
    :param success_states: base states that mean success (default ``["COMPLETED"]``).
    :param failure_states: base states that fail the sensor (default every other terminal state).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param slurmapi_conn_id: the ``slurmapi`` connection (default ``slurmapi_default``).

    ``mode`` (poke / reschedule), ``poke_interval``, ``timeout`` and ``soft_fail`` work as on every
    sensor; with ``soft_fail`` a failure state skips the task instead of failing it. A job array's id
    waits for every task: COMPLETED when all tasks completed, else the first failed task's state, and
    the failure names each failed task.
    """

    template_fields: Sequence[str] = ("job_id",)
    operator_extra_links = (SlurmJobLink(),)

    def __init__(
        self,
        *,
        job_id: int | str,
        success_states: Iterable[str] = ("COMPLETED",),
        failure_states: Iterable[str] | None = None,
        deferrable: bool | None = None,
        slurmapi_conn_id: str = SlurmJobApiHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.success_states = {s.upper() for s in success_states}
        if failure_states is None:
            failure_states = TERMINAL_STATES - self.success_states
        self.failure_states = {s.upper() for s in failure_states}
        overlap = self.success_states & self.failure_states
        if overlap:
            raise ValueError(f"success_states and failure_states share {sorted(overlap)}: make them disjoint.")
        # Read when the task is built (not when this module is imported), so the setting can change.
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.slurmapi_conn_id = slurmapi_conn_id
        self._link_done = False

    def _decide(self, state: JobState, message: str) -> bool:
        if state.base in self.success_states and (state.is_terminal or state.base not in TERMINAL_STATES):
            return True
        if state.base in self.failure_states and state.is_terminal:
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowFailException(message)
        return False

    def poke(self, context: Any) -> bool:
        hook = SlurmJobApiHook(slurmapi_conn_id=self.slurmapi_conn_id)
        try:
            if not self._link_done:
                SlurmJobLink.persist_for(context, hook, self.job_id)
                self._link_done = True
            job = hook.get_job(self.job_id)
        except SlurmJobNotFoundError as err:
            raise AirflowFailException(str(err)) from None
        except SlurmJobApiError as err:
            if err.retryable:
                self.log.warning("Could not read Slurm job %s (%s); trying again next poke", self.job_id, err)
                return False
            raise AirflowFailException(str(err)) from None
        self.log.info("%s: %s", job.label, job.describe_state())  # an array's id: every task's state
        message = outcome_text(job) if job.state.is_terminal else f"{job.label} is {job.describe_state()}"
        return self._decide(job.state, message)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger

        if self.poke(context):
            return None
        targets = sorted((self.success_states | self.failure_states) - TERMINAL_STATES)
        self.defer(
            trigger=SlurmJobTrigger(
                job_id=self.job_id,
                slurmapi_conn_id=self.slurmapi_conn_id,
                poll_interval=self.poke_interval,
                deadline=time.time() + self.timeout if self.timeout else None,
                target_states=targets or None,
            ),
            method_name="execute_complete",
        )
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        from airflow_provider_slurmapi.triggers.slurmapi import ERROR, TIMEOUT

        status, message = event.get("status"), str(event.get("message"))
        if status in (TIMEOUT, ERROR):
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowFailException(message)
        summary = event.get("job") or {}
        state = JobState.parse(str(summary.get("state", "")).split("+"))
        if not self._decide(state, message):
            raise AirflowFailException(f"{message}: neither a success nor a failure state of this sensor")
        self.log.info(message)
