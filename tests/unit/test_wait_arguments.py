"""The arguments of every wait (sensor, operators, trigger, hook, connection) are checked where they are
given: a bad one is refused with an error naming the field and the fix, before anything is sent."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_slurmapi.api.connection import settings_from_extra
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.operators.slurmapi import SlurmCancelJobOperator, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger
from tests.unit.test_bad_inputs import test_bad_input_names_the_field as refused_naming_the_field

NAN, INF = math.nan, math.inf
GOOD_CONN = {"project_id": "p", "region": "us-central1", "cluster_id": "c"}


def sensor(**kwargs: Any) -> Callable[[], object]:
    return lambda: SlurmJobSensor(task_id="wait", job_id=5, **kwargs)


def submit(**kwargs: Any) -> Callable[[], object]:
    return lambda: SlurmSubmitJobOperator(task_id="t", script="#!/bin/bash\ntrue\n", **kwargs)


def cancel(**kwargs: Any) -> Callable[[], object]:
    return lambda: SlurmCancelJobOperator(task_id="c", job_id=5, **kwargs)


def conn(**extra: Any) -> Callable[[], object]:
    return lambda: settings_from_extra({**GOOD_CONN, **extra}, "bad_conn")


def wait(**kwargs: Any) -> Callable[[], object]:
    # A connection that does not exist: any call would fail on it, so the check comes first.
    return lambda: SlurmJobApiHook(slurmapi_conn_id="no_such_connection").wait_for_job(5, **kwargs)


CASES: list[tuple[str, Callable[[], object], str]] = [
    # success and failure states (item 4)
    ("success_states a string", sensor(success_states="COMPLETED"), "success_states"),
    ("success_states a typo", sensor(success_states=["COMPLETE"]), "success_states"),
    ("success_states empty", sensor(success_states=[]), "success_states"),
    ("success_states not names", sensor(success_states=[1]), "success_states"),
    ("failure_states a string", sensor(failure_states="FAILED"), "failure_states"),
    ("failure_states a typo", sensor(failure_states=["FAILD"]), "failure_states"),
    ("states overlap", sensor(success_states=["COMPLETED"], failure_states=["COMPLETED"]), "failure_states"),
    # numbers: finite and above 0 (item 5)
    ("sensor poke_interval NaN", sensor(poke_interval=NAN), "poke_interval"),
    ("sensor poke_interval inf", sensor(poke_interval=INF), "poke_interval"),
    ("sensor poke_interval 0", sensor(poke_interval=0), "poke_interval"),
    ("sensor timeout NaN", sensor(timeout=NAN), "timeout"),
    ("sensor timeout inf", sensor(timeout=INF), "timeout"),
    ("sensor unknown_job_grace NaN", sensor(unknown_job_grace=NAN), "unknown_job_grace"),
    ("sensor unknown_job_grace negative", sensor(unknown_job_grace=-1), "unknown_job_grace"),
    ("operator poll_interval NaN", submit(poll_interval=NAN), "poll_interval"),
    ("operator poll_interval inf", submit(poll_interval=INF), "poll_interval"),
    ("operator poll_interval -inf", submit(poll_interval=-INF), "poll_interval"),
    ("operator poll_interval bool", submit(poll_interval=True), "poll_interval"),
    ("trigger poll_interval NaN", lambda: SlurmJobTrigger(5, poll_interval=NAN), "poll_interval"),
    ("trigger deadline NaN", lambda: SlurmJobTrigger(5, deadline=NAN), "deadline"),
    ("trigger unknown_job_grace inf", lambda: SlurmJobTrigger(5, unknown_job_grace=INF), "unknown_job_grace"),
    ("hook wait poll_interval NaN", wait(poll_interval=NAN), "poll_interval"),
    ("hook wait poll_interval inf", wait(poll_interval=INF), "poll_interval"),
    ("hook wait timeout NaN", wait(timeout=NAN), "timeout"),
    ("connection timeout 'nan'", conn(timeout="nan"), "timeout"),
    ("connection timeout 'inf'", conn(timeout="inf"), "timeout"),
    ("connection timeout NaN", conn(timeout=NAN), "timeout"),
    ("connection retry_delay 'nan'", conn(retry_delay="nan"), "retry_delay"),
    ("connection retry_delay '-inf'", conn(retry_delay="-inf"), "retry_delay"),
    # the cancel operator checks poll_interval before it cancels anything (item 6)
    ("cancel poll_interval 0", cancel(poll_interval=0), "poll_interval"),
    ("cancel poll_interval NaN", cancel(poll_interval=NAN), "poll_interval"),
    ("cancel poll_interval text", cancel(poll_interval="5"), "poll_interval"),
    # switches are bools (item 7)
    ("operator deferrable 'false'", submit(deferrable="false"), "deferrable"),
    ("operator deferrable 1", submit(deferrable=1), "deferrable"),
    ("operator wait_for_completion 'no'", submit(wait_for_completion="no"), "wait_for_completion"),
    ("operator cancel_on_kill 'false'", submit(cancel_on_kill="false"), "cancel_on_kill"),
    ("operator reattach 'false'", submit(reattach="false"), "reattach"),
    ("operator publish_results 'false'", submit(publish_results="false"), "publish_results"),
    ("operator output_tail_lines -1", submit(output_tail_lines=-1), "output_tail_lines"),
    ("operator output_tail_lines '50'", submit(output_tail_lines="50"), "output_tail_lines"),
    ("operator retry_on_job_failure 'yes'", submit(retry_on_job_failure="yes"), "retry_on_job_failure"),
    ("sensor deferrable 'false'", sensor(deferrable="false"), "deferrable"),
    ("sensor start_from_trigger 'no'", sensor(deferrable=True, start_from_trigger="no"), "start_from_trigger"),
    ("cancel wait_for_termination 'false'", cancel(wait_for_termination="false"), "wait_for_termination"),
]


@pytest.mark.parametrize(("what", "make", "field"), CASES, ids=[c[0] for c in CASES])
def test_a_bad_wait_argument_names_the_field_and_the_fix(what, make, field):
    refused_naming_the_field(what, make, field)


def test_good_values_pass_and_are_normalised():
    wait = SlurmJobSensor(task_id="wait", job_id=5, success_states=["completed", "Running"], poke_interval=0.5)
    assert wait.success_states == {"COMPLETED", "RUNNING"}
    assert "COMPLETED" not in wait.failure_states and "FAILED" in wait.failure_states
    assert SlurmJobSensor(task_id="w", job_id=5, failure_states=[]).failure_states == set()
    assert (
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/bash\n", poll_interval=2, deferrable=False).poll_interval
        == 2.0
    )
    assert SlurmCancelJobOperator(task_id="c", job_id=5, poll_interval=1).poll_interval == 1.0
    assert settings_from_extra({**GOOD_CONN, "timeout": "30", "retry_delay": "0"}).timeout == 30.0
    assert SlurmJobTrigger(5, poll_interval=1, deadline=1e9).poll_interval == 1.0


def test_the_sensor_grace_has_a_short_default_that_reaches_its_trigger():
    wait = SlurmJobSensor(task_id="wait", job_id=5)
    assert wait.unknown_job_grace == 120
    assert wait._trigger_kwargs(deadline=None)["unknown_job_grace"] == 120
    assert (
        SlurmJobSensor(task_id="w", job_id=5, unknown_job_grace=30)._trigger_kwargs(deadline=None)["unknown_job_grace"]
        == 30
    )
