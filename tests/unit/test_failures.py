"""Typed failures (api/failures.py, exceptions.py) and the ready retry policy (retry.py).

The events are built by the trigger's own contract from a job recorded on real Slurm 24.11 with its state
changed, as ``test_task_resume.py`` does; the task's exception is what ``execute_complete`` raises.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_slurmapi.api import failures
from airflow_provider_slurmapi.api.job_event import JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.exceptions import SlurmJobError, SlurmJobFailedNoRetry
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS
from tests.fixtures import recorded
from tests.unit.test_task_resume import Ti


def ended(state: str, **fields: Any) -> dict[str, Any]:
    record = copy.deepcopy(recorded("job_failed")["jobs"][0])
    record["job_state"] = [state]
    record.update(fields)
    return JobEvent.ended(record["job_id"], SlurmJob.from_job_info(record)).payload()


TYPES = {
    "PREEMPTED": (failures.SlurmJobPreemptedError, True),
    "NODE_FAIL": (failures.SlurmNodeFailureError, True),
    "BOOT_FAIL": (failures.SlurmNodeFailureError, True),
    "OUT_OF_MEMORY": (failures.SlurmJobOutOfMemoryError, False),
    "TIMEOUT": (failures.SlurmJobTimeLimitError, False),
    "CANCELLED": (failures.SlurmJobCancelledError, False),
    "DEADLINE": (failures.SlurmJobDeadlineError, False),
    "FAILED": (failures.SlurmJobExitCodeError, False),
    "SPECIAL_EXIT": (failures.SlurmJobFailedError, False),
}


@pytest.mark.parametrize("state", TYPES)
def test_each_end_state_fails_the_task_with_its_own_type_and_the_jobs_details(state):
    kind, retried = TYPES[state]
    event = ended(state)
    with pytest.raises(kind) as raised:
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n").execute_complete({"ti": Ti()}, event)
    error = raised.value
    assert type(error).__mro__[1] is kind  # exactly this type, not a subclass of another failure type
    assert error.job_id == str(event["job_id"]) and error.state == state
    assert error.exit_code == event["job"]["exit_code"] and error.reason == event["job"]["state_reason"]
    # whether Airflow's retries apply is as before: the cluster's faults are retried, the job's own are not
    assert isinstance(error, SlurmJobError if retried else SlurmJobFailedNoRetry)
    assert isinstance(error, AirflowFailException) is not retried


def test_a_non_zero_exit_carries_its_code_and_a_time_limit_its_limit():
    with pytest.raises(failures.SlurmJobExitCodeError) as raised:
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n").execute_complete(
            {"ti": Ti()}, ended("FAILED", exit_code={"return_code": {"set": True, "number": 3}, "status": ["ERROR"]})
        )
    assert raised.value.exit_code == 3 and "FAILED" in str(raised.value)
    with pytest.raises(failures.SlurmJobTimeLimitError) as limited:
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n").execute_complete(
            {"ti": Ti()}, ended("TIMEOUT", time_limit={"set": True, "infinite": False, "number": 7})
        )
    assert limited.value.time_limit_minutes == 7


@pytest.mark.parametrize(
    ("release", "name"), [("24.11", "slurmdb_job_cancelled"), ("26.05", "slurmdb_job_cancelled_cancelled")]
)
def test_who_cancelled_a_job_is_read_from_its_real_accounting_record(release, name):
    record = recorded(name, release)["jobs"][0]
    job = SlurmJob.from_slurmdb(record)
    assert job.summary()["cancelled_by"] == record["kill_request_user"] == "ciuser"  # the test cluster's user
    error = failures.typed_failure("cancelled", job, retryable=False)
    assert isinstance(error, failures.SlurmJobCancelledError) and error.cancelled_by == "ciuser"
    assert error.job_id == str(record["job_id"]) and error.state == "CANCELLED"


def test_an_arrays_failure_takes_the_type_its_failed_tasks_share():
    def array(*states: str) -> dict[str, Any]:
        return {"state": "FAILED", "tasks": [{"state": s} for s in states]}

    assert (
        failures.failure_type(array("COMPLETED", "OUT_OF_MEMORY", "OUT_OF_MEMORY")) is failures.SlurmJobOutOfMemoryError
    )
    assert failures.failure_type(array("PREEMPTED", "OUT_OF_MEMORY")) is failures.SlurmJobFailedError
    assert failures.failure_type({"state": "CANCELLED+REQUEUED"}) is failures.SlurmJobCancelledError
    assert failures.failure_type({"state": "\x1b[31mnonsense"}) is failures.SlurmJobFailedError


def test_a_user_who_asks_for_retries_gets_them_with_the_type_kept():
    with pytest.raises(failures.SlurmJobOutOfMemoryError) as raised:
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n", retry_on_job_failure=True).execute_complete(
            {"ti": Ti()}, ended("OUT_OF_MEMORY")
        )
    assert not isinstance(raised.value, AirflowFailException)


def test_the_sensor_fails_with_the_jobs_failure_type_never_retried():
    sensor = SlurmJobSensor(task_id="s", job_id=1)
    with pytest.raises(failures.SlurmJobOutOfMemoryError) as raised:
        sensor.execute_complete({"ti": Ti()}, ended("OUT_OF_MEMORY"))
    assert isinstance(raised.value, AirflowFailException)


@pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="retry_policy arrived in Airflow 3.3")
def test_the_ready_policy_retries_the_clusters_faults_soon_and_fails_the_jobs_own():
    from datetime import timedelta

    from airflow.sdk.definitions.retry_policy import RetryAction, RetryRule

    from airflow_provider_slurmapi.retry import CLUSTER_FAULT_DELAY, SlurmRetryPolicy

    policy = SlurmRetryPolicy()
    operator = SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n", retry_policy=policy)

    def decision(state: str, on: SlurmRetryPolicy = policy) -> Any:
        with pytest.raises(failures.SlurmJobFailedError) as raised:
            operator.execute_complete({"ti": Ti()}, ended(state))
        assert not isinstance(raised.value, AirflowFailException)  # with a policy, the policy decides
        return on.evaluate(raised.value, 1, 3)

    for state in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL"):
        made = decision(state)
        assert made.action is RetryAction.RETRY and made.retry_delay == CLUSTER_FAULT_DELAY, state
    for state in ("OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "DEADLINE", "FAILED"):
        assert decision(state).action is RetryAction.FAIL, state
    assert decision("SPECIAL_EXIT").action is RetryAction.DEFAULT
    assert "out of memory" in (decision("OUT_OF_MEMORY").reason or "")
    # each overridable; a rule of the user's comes first
    mine = SlurmRetryPolicy(
        [RetryRule(exception=failures.SlurmJobExitCodeError, action=RetryAction.RETRY)],
        time_limit=RetryAction.RETRY,
        cluster_fault_delay=timedelta(seconds=5),
    )
    assert decision("TIMEOUT", mine).action is RetryAction.RETRY
    assert decision("FAILED", mine).action is RetryAction.RETRY
    assert decision("PREEMPTED", mine).retry_delay == timedelta(seconds=5)
    with pytest.raises(TypeError, match="out_of_memory='retry' is not a RetryAction"):
        SlurmRetryPolicy(out_of_memory="retry")  # type: ignore[arg-type]
