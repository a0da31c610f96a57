"""The operator's and the sensor's resume step on trigger events, without a trigger or a cluster.

Airflow's own provider tests check ``execute_complete`` on event dicts; these do the same with events
built by the trigger's own contract (:class:`~airflow_provider_slurmapi.api.job_event.JobEvent`) from jobs
recorded on real Slurm 24.11, and with the raw payloads an older trigger may have left in the database.
Whether a failure lets Airflow's ``retries`` run is told by the exception's class: ``AirflowFailException``
(and its subclasses) skips the retries.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_provider_slurmapi.api.job_event import ERROR, FAILED, TIMEOUT, JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.operators.slurmapi import SlurmJobError, SlurmJobFailedNoRetry, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor
from tests.fixtures import recorded


class Ti:
    """What ``execute_complete`` uses of the task instance in its context: XCom pushes, recorded."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def ended(state: str, fixture: str = "job_failed") -> dict[str, Any]:
    record = copy.deepcopy(recorded(fixture)["jobs"][0])
    record["job_state"] = [state]
    return JobEvent.ended(record["job_id"], SlurmJob.from_job_info(record)).payload()


def operator(**kwargs: Any) -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", job={"name": "t"}, **kwargs)


def test_a_completed_job_returns_its_id_and_pushes_its_summary():
    ti, event = Ti(), ended("COMPLETED", "job_completed")
    job_id = operator().execute_complete({"ti": ti}, event)
    assert job_id == event["job_id"]
    assert ti.pushed["slurm_job"]["state"] == "COMPLETED"


def test_a_failed_job_fails_the_task_without_retries_and_says_why():
    ti = Ti()
    with pytest.raises(SlurmJobFailedNoRetry, match=r"ended FAILED") as raised:
        operator().execute_complete({"ti": ti}, ended("FAILED"))
    assert isinstance(raised.value, AirflowFailException)
    assert ti.pushed["slurm_job"]["state"] == "FAILED"  # the summary is kept for downstream tasks


def test_a_failed_job_may_be_retried_when_the_user_asks():
    with pytest.raises(SlurmJobError) as raised:
        operator(retry_on_job_failure=True).execute_complete({"ti": Ti()}, ended("FAILED"))
    assert not isinstance(raised.value, AirflowFailException)


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED"])
def test_a_job_the_cluster_lost_lets_airflow_retry(state):
    with pytest.raises(SlurmJobError, match="a retry may succeed") as raised:
        operator().execute_complete({"ti": Ti()}, ended(state))
    assert not isinstance(raised.value, AirflowFailException)


def test_a_waiting_error_is_retryable_and_names_the_job():
    event = {"status": ERROR, "job_id": 41, "message": "Slurm job 41 is not known to Slurm"}
    with pytest.raises(SlurmJobError, match="Waiting for Slurm job 41 failed: Slurm job 41 is not known"):
        operator().execute_complete({"ti": Ti()}, event)


def test_an_old_triggers_payload_is_still_understood():
    """A trigger serialized before the event contract sent a dict with the summary only."""
    old = {"status": FAILED, "job_id": 7, "message": "Slurm job 7 ended PREEMPTED", "job": {"state": "PREEMPTED"}}
    with pytest.raises(SlurmJobError):
        operator().execute_complete({"ti": Ti()}, old)
    with pytest.raises(SlurmJobFailedNoRetry):
        operator().execute_complete({"ti": Ti()}, {**old, "job": {"state": "FAILED"}})


def sensor(**kwargs: Any) -> SlurmJobSensor:
    return SlurmJobSensor(task_id="gate", job_id=7, deferrable=True, start_from_trigger=False, **kwargs)


def test_the_sensor_passes_on_a_success_state():
    sensor().execute_complete({"ti": Ti()}, ended("COMPLETED", "job_completed"))  # returns: the gate opens


def test_the_sensor_fails_on_a_failure_state_and_skips_when_soft_fail():
    with pytest.raises(AirflowFailException, match="ended FAILED"):
        sensor().execute_complete({"ti": Ti()}, ended("FAILED"))
    with pytest.raises(AirflowSkipException, match="ended FAILED"):
        sensor(soft_fail=True).execute_complete({"ti": Ti()}, ended("FAILED"))


def test_the_sensor_accepts_what_the_user_calls_success():
    sensor(success_states=["COMPLETED", "FAILED"]).execute_complete({"ti": Ti()}, ended("FAILED"))  # no raise


def test_the_sensors_timeout_and_errors_fail_or_skip():
    for status in (TIMEOUT, ERROR):
        event = {"status": status, "job_id": 7, "message": f"gave up: {status}"}
        with pytest.raises(AirflowFailException, match=f"gave up: {status}"):
            sensor().execute_complete({"ti": Ti()}, event)
        with pytest.raises(AirflowSkipException):
            sensor(soft_fail=True).execute_complete({"ti": Ti()}, event)


def test_a_state_outside_both_lists_fails_the_sensor():
    failing = sensor(success_states=["COMPLETED"], failure_states=["FAILED"])
    with pytest.raises(AirflowFailException, match="neither a success nor a failure state"):
        failing.execute_complete({"ti": Ti()}, ended("CANCELLED"))


def test_every_failure_is_an_airflow_exception():
    """Nothing else escapes the resume step (a bare error would show as a crash, not a task failure)."""
    for state in ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED"):
        with pytest.raises(AirflowException):
            operator().execute_complete({"ti": Ti()}, ended(state))
