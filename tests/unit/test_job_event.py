"""The event contract between trigger and task (api.job_event), on jobs recorded from real Slurm 24.11."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_slurmapi.api.job_event import ERROR, FAILED, SUCCESS, JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmJob
from tests.fixtures import recorded


def job(name: str, state: str | None = None) -> SlurmJob:
    record = copy.deepcopy(recorded(name)["jobs"][0])
    if state is not None:
        record["job_state"] = [state]
    return SlurmJob.from_job_info(record)


def test_a_completed_job_is_a_success_with_its_summary():
    event = JobEvent.ended(7, job("job_completed"))
    assert event.status == SUCCESS and not event.retryable
    assert event.job is not None and event.job["state"] == "COMPLETED"
    assert "ended COMPLETED" in event.message


@pytest.mark.parametrize(("state", "retryable"), [("FAILED", False), ("NODE_FAIL", True), ("PREEMPTED", True)])
def test_a_failure_carries_whether_a_retry_may_cure_it(state, retryable):
    event = JobEvent.ended(7, job("job_failed", state))
    assert event.status == FAILED and event.retryable is retryable
    assert ("a retry may succeed" in event.message) is retryable


def test_the_payload_round_trips_and_names_the_state():
    event = JobEvent.ended(7, job("job_failed", "NODE_FAIL"))
    again = JobEvent.from_payload(event.payload())
    assert again == event and again.state.base == "NODE_FAIL"
    assert JobEvent.from_payload({"status": ERROR, "job_id": 7, "message": "gone"}).state.base == "UNKNOWN"


def test_an_event_from_a_trigger_before_the_contract_is_read_the_old_way():
    old = {"status": FAILED, "job_id": 7, "message": "x", "job": {"state": "PREEMPTED"}}
    assert JobEvent.from_payload(old).retryable
    assert not JobEvent.from_payload({**old, "job": {"state": "FAILED"}}).retryable
