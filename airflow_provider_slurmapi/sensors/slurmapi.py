"""SlurmJobSensor: gate downstream tasks on any Slurm job, submitted by Airflow or not."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    BaseSensorOperator,
)

from airflow_provider_slurmapi.api import checks, failures
from airflow_provider_slurmapi.api.errors import SlurmJobApiError, SlurmJobNotFoundError, SlurmJobSpecError
from airflow_provider_slurmapi.api.job_event import ERROR, TIMEOUT, JobEvent
from airflow_provider_slurmapi.api.states import TERMINAL_STATES, JobState
from airflow_provider_slurmapi.api.watch import UNKNOWN_JOB_GRACE_SENSOR, outcome_text
from airflow_provider_slurmapi.exceptions import task_failure
from airflow_provider_slurmapi.hooks.slurmapi import SlurmApiHookMixin, SlurmJobApiHook, default_deferrable
from airflow_provider_slurmapi.links.slurmapi import SlurmJobLink
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS

TRIGGER_CLASSPATH = "airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger"


def _is_templated(value: str | int) -> bool:
    """True for a Jinja string that Airflow still has to render."""
    return isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#"))


def _triggerer_cannot_render(value: str | int) -> bool:
    """True for a template the 3.3 triggerer would hang on.

    ``ti.xcom_pull(...)`` without ``map_indexes`` asks for every map index (``GetXComSequenceSlice``), a
    request Airflow 3.3's triggerer does not serve: the trigger would wait for an answer forever.
    ``map_indexes=-1`` asks for one value (``GetXCom``), which it serves.
    """
    return _is_templated(value) and "xcom_pull" in str(value) and "map_indexes" not in str(value)


class SlurmJobSensor(SlurmApiHookMixin, BaseSensorOperator):
    """Wait until a Slurm job reaches a success state; fail on a failure state.

    .. seealso::
        How to use it: :doc:`/sensors/slurmapi`.

    :param job_id: the Slurm job id (templated, e.g. ``{{ ti.xcom_pull(task_ids='submit') }}``).
    :param success_states: base states that mean success (default ``["COMPLETED"]``): a list of Slurm
        state names (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ...); a bare string or a name
        Slurm does not have is refused when the DAG is parsed.
    :param failure_states: base states that fail the sensor (default every other terminal state).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``); a bool.
    :param unknown_job_grace: seconds (default 120) the job id may be in neither Slurm's active queue
        nor its accounting while the sensor waits in the triggerer, before the sensor fails saying the
        id is unknown (room for a job submitted elsewhere a moment ago). A check on a worker (``poke``
        and ``reschedule`` modes, and the first check of a deferrable sensor that does not start from
        the triggerer) fails at once on an unknown id.
    :param start_from_trigger: with ``deferrable``, start the wait directly in the triggerer, without
        taking a worker slot first (default: on wherever the Airflow version allows it — Airflow 3.3+,
        which renders ``job_id`` in the triggerer, or any version when ``job_id`` is a plain, untemplated
        id). The worker then runs only the last step, after the job ended: the "Slurm Job" link is stored
        at that point. ``False`` always defers from the worker (first check there, link stored at once).
        Mapped sensors (``.expand()``) always defer from the worker, and so does a ``job_id`` that calls
        ``ti.xcom_pull(...)`` without ``map_indexes``: Airflow's triggerer cannot answer that call (write
        ``ti.xcom_pull(task_ids='submit', map_indexes=-1)`` to start from the triggerer). Measured in a
        Celery deployment (200 sensors of one DAG): starting in the triggerer is 5x faster and takes no
        worker slot, but Airflow 3.3 gives each such trigger its own copy of the DAG, about 2 MB of
        triggerer memory per waiting sensor in a 200-task DAG against 0.6 MB from a worker; set ``False``
        for many hundreds of sensors of large DAGs on a triggerer short of memory.
    :param slurmapi_conn_id: the ``slurmapi`` connection (default ``slurmapi_default``).

    ``mode`` (poke / reschedule), ``poke_interval``, ``timeout`` and ``soft_fail`` work as on every
    sensor; with ``soft_fail`` a failure state skips the task instead of failing it. A job array's id
    waits for every task: COMPLETED when all tasks completed, else the first failed task's state, and
    the failure names each failed task.
    """

    template_fields: Sequence[str] = ("job_id",)
    operator_extra_links = (SlurmJobLink(),)
    # Set per instance by __init__ when the sensor starts from the triggerer.
    start_trigger_args = None
    start_from_trigger = False

    def __init__(
        self,
        *,
        job_id: int | str,
        success_states: Iterable[str] = ("COMPLETED",),
        failure_states: Iterable[str] | None = None,
        deferrable: bool | None = None,
        start_from_trigger: bool | None = None,
        unknown_job_grace: float = UNKNOWN_JOB_GRACE_SENSOR,
        slurmapi_conn_id: str = SlurmJobApiHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        for name in ("poke_interval", "timeout"):  # before Airflow turns a NaN into a raw ValueError
            if kwargs.get(name) is not None:
                value = kwargs[name]
                seconds = value.total_seconds() if isinstance(value, timedelta) else value
                checks.seconds(seconds, name, zero=name == "timeout")
        super().__init__(**kwargs)
        self.job_id = job_id
        self.success_states = set(checks.states(success_states, "success_states"))
        if failure_states is None:
            failure_states = TERMINAL_STATES - self.success_states
        self.failure_states = set(checks.states(failure_states, "failure_states", empty=True))
        overlap = self.success_states & self.failure_states
        if overlap:
            raise SlurmJobSpecError(
                "failure_states",
                f"shares {', '.join(sorted(overlap))} with success_states",
                "Make the two lists disjoint.",
            )
        # Read when the task is built (not when this module is imported), so the setting can change.
        self.deferrable = default_deferrable() if deferrable is None else checks.flag(deferrable, "deferrable")
        if start_from_trigger is not None:
            checks.flag(start_from_trigger, "start_from_trigger")
        self.unknown_job_grace = checks.seconds(unknown_job_grace, "unknown_job_grace", zero=True)
        self.slurmapi_conn_id = slurmapi_conn_id
        self._link_done = False
        if start_from_trigger and not self.deferrable:
            raise ValueError(
                f"{self.task_id}: start_from_trigger=True needs deferrable=True (the wait runs in the triggerer)."
            )
        if start_from_trigger and isinstance(job_id, str) and _triggerer_cannot_render(job_id):
            raise ValueError(
                f"{self.task_id}: job_id {job_id!r} calls xcom_pull without map_indexes, which Airflow's "
                "triggerer cannot answer (the sensor would wait forever): add map_indexes=-1 to the "
                "xcom_pull call, or leave start_from_trigger unset."
            )
        if self.deferrable and start_from_trigger is not False and self._may_start_from_trigger():
            # Imported here, not with the module: DAG files that import the sensor stay cheap.
            from airflow.triggers.base import StartTriggerArgs

            self.start_from_trigger = True
            self.start_trigger_args = StartTriggerArgs(
                trigger_cls=TRIGGER_CLASSPATH,
                trigger_kwargs=self._trigger_kwargs(deadline=None),
                next_method="execute_complete",
                next_kwargs=None,
                # Airflow keeps the deadline (in its database, so it outlasts a triggerer restart) and
                # fails the sensor with AirflowSensorTimeout, or skips it with soft_fail.
                timeout=timedelta(seconds=self.timeout) if self.timeout else None,
            )

    def _may_start_from_trigger(self) -> bool:
        # Only a string or an int can go into the trigger's stored arguments (an XComArg cannot), and
        # before 3.3 the triggerer does not render templates: the id must already be final.
        if not isinstance(self.job_id, (int, str)) or _triggerer_cannot_render(self.job_id):
            return False
        return AIRFLOW_V_3_3_PLUS or not _is_templated(self.job_id)

    def _trigger_kwargs(self, *, deadline: float | None) -> dict[str, Any]:
        """The trigger's arguments; ``job_id`` may still be a template (the 3.3+ triggerer renders it)."""
        targets = sorted((self.success_states | self.failure_states) - TERMINAL_STATES)
        return {
            "job_id": self.job_id,
            "slurmapi_conn_id": self.slurmapi_conn_id,
            "poll_interval": float(self.poke_interval),
            "deadline": deadline,
            "target_states": targets or None,
            "unknown_job_grace": self.unknown_job_grace,
        }

    def _decide(self, state: JobState, message: str, job: Any = None) -> bool:
        """True in a success state; a failure state raises the job's failure type (``job``: its record or
        summary), never retried (as a sensor's failure is), or skips with ``soft_fail``."""
        if state.base in self.success_states and (state.is_terminal or state.base not in TERMINAL_STATES):
            return True
        if state.base in self.failure_states and state.is_terminal:
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise task_failure(failures.typed_failure(message, job, retryable=False), final=True)
        return False

    def _persist_link(self, context: Any) -> None:
        try:
            SlurmJobLink.persist_for(context, self.hook, self.job_id)
        except Exception as err:
            # A missing connection too: the trigger's event, handled next, tells the task's real outcome.
            self.log.warning("Could not store the Slurm job link for job %s: %s", self.job_id, err)
        self._link_done = True

    def poke(self, context: Any) -> bool:
        hook = self.hook
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
        return self._decide(job.state, message, job)

    def execute(self, context: Any) -> Any:
        SlurmJobLink.none_yet(self)
        if not self.deferrable:
            return super().execute(context)

        if self.poke(context):
            return None
        deadline = time.time() + self.timeout if self.timeout else None
        self.defer(trigger=SlurmJobTrigger(**self._trigger_kwargs(deadline=deadline)), method_name="execute_complete")
        return None

    def execute_complete(self, context: Any, event: dict[str, Any]) -> None:
        ended = JobEvent.from_payload(event)
        message = ended.message
        if self.start_from_trigger:
            # Started from the triggerer: this is the sensor's first step on a worker.
            self._persist_link(context)
        if ended.status in (TIMEOUT, ERROR):
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowFailException(message)
        if not self._decide(ended.state, message, ended.job):
            raise AirflowFailException(f"{message}: neither a success nor a failure state of this sensor")
        self.log.info(message)
