"""A deferrable SlurmJobSensor that starts straight in the triggerer (``start_from_trigger``).

Where Airflow starts it (the scheduler defers it from ``start_trigger_args`` and the triggerer renders the
templated ``job_id`` in place) is proven under a real ``airflow standalone`` in ``tests/standalone``; here:
when the sensor asks for it on each Airflow version, and that the trigger built from those arguments, put
through the same rendering step the triggerer uses (``BaseTrigger.task_instance`` + ``render_template_fields``),
waits on the right job against the emulator.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from importlib import import_module
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS

TEMPLATED = "{{ params.job_id }}"


def sensor(**kwargs) -> SlurmJobSensor:
    kwargs.setdefault("task_id", "wait")
    kwargs.setdefault("deferrable", True)
    return SlurmJobSensor(**kwargs)


def start_args(wait: SlurmJobSensor) -> Any:
    """The sensor's StartTriggerArgs, which must be there."""
    args = wait.start_trigger_args
    assert args is not None and args.trigger_kwargs is not None
    return args


def test_a_plain_job_id_starts_from_the_trigger_on_every_version():
    wait = sensor(job_id=1234, poke_interval=7, timeout=90)
    assert wait.start_from_trigger is True
    args = start_args(wait)
    assert args.trigger_cls == "airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger"
    assert args.next_method == "execute_complete"
    assert args.trigger_kwargs["job_id"] == 1234 and args.trigger_kwargs["poll_interval"] == 7.0
    # Airflow owns the deadline (kept in its database): AirflowSensorTimeout, soft_fail honoured.
    assert args.timeout == timedelta(seconds=90) and args.trigger_kwargs["deadline"] is None


def test_a_templated_job_id_starts_from_the_trigger_only_where_the_triggerer_renders_it():
    wait = sensor(job_id=TEMPLATED)
    assert wait.start_from_trigger is AIRFLOW_V_3_3_PLUS
    if AIRFLOW_V_3_3_PLUS:
        assert start_args(wait).trigger_kwargs["job_id"] == TEMPLATED
    else:
        assert wait.start_trigger_args is None


def test_an_xcom_pull_the_triggerer_cannot_answer_keeps_the_sensor_on_the_worker():
    # Airflow 3.3's triggerer serves GetXCom (one map index) but not GetXComSequenceSlice (all of them).
    assert sensor(job_id="{{ ti.xcom_pull(task_ids='submit') }}").start_from_trigger is False
    one_value = sensor(job_id="{{ ti.xcom_pull(task_ids='submit', map_indexes=-1) }}")
    assert one_value.start_from_trigger is AIRFLOW_V_3_3_PLUS


def test_forcing_start_from_trigger_with_that_xcom_pull_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="add map_indexes=-1"):
        sensor(job_id="{{ ti.xcom_pull(task_ids='submit') }}", start_from_trigger=True)


def test_non_terminal_success_states_reach_the_trigger():
    wait = sensor(job_id=5, success_states=["RUNNING"])
    assert start_args(wait).trigger_kwargs["target_states"] == ["RUNNING"]


@pytest.mark.parametrize(
    ("kwargs", "starts"),
    [
        ({"deferrable": False}, False),  # poke / reschedule: nothing to start in the triggerer
        ({"deferrable": True, "start_from_trigger": False}, False),  # the user's opt-out
    ],
)
def test_when_the_sensor_does_not_start_from_the_trigger(kwargs, starts):
    wait = SlurmJobSensor(task_id="wait", job_id=5, **kwargs)
    assert wait.start_from_trigger is starts
    assert wait.start_trigger_args is None


def test_start_from_trigger_without_deferrable_is_refused():
    with pytest.raises(ValueError, match="start_from_trigger=True needs deferrable=True"):
        SlurmJobSensor(task_id="wait", job_id=5, deferrable=False, start_from_trigger=True)


@pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="the triggerer renders trigger templates from Airflow 3.3 on")
def test_the_trigger_built_from_the_start_args_renders_and_waits_on_the_job(slurmapi_emulator):
    hook = SlurmJobApiHook()
    job_id = hook.submit(JobSpec.build("#!/bin/bash\necho done\n", {"current_working_directory": "/tmp"})).job_id
    wait = sensor(job_id=TEMPLATED, poke_interval=0.2)
    args = start_args(wait)
    module, _, name = args.trigger_cls.rpartition(".")
    trigger = getattr(import_module(module), name)(**args.trigger_kwargs)
    # What the triggerer does before run(): attach the task instance, render the templated kwargs.
    trigger.task_instance = SimpleNamespace(task_id="wait", task=wait)
    assert trigger.template_fields == ("job_id",)
    trigger.render_template_fields(context={"params": {"job_id": job_id}})

    async def first_event():
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    payload = asyncio.run(first_event())
    assert payload["status"] == "success"
    assert int(payload["job_id"]) == job_id and payload["job"]["state"].startswith("COMPLETED")


def run_from_start_args(wait: SlurmJobSensor) -> dict[str, Any]:
    """The event of the trigger the triggerer would build from the sensor's start arguments."""
    args = start_args(wait)
    module, _, name = args.trigger_cls.rpartition(".")
    trigger = getattr(import_module(module), name)(**args.trigger_kwargs)

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first_event(), 30))


def test_a_job_id_that_never_existed_fails_the_sensor_after_its_grace(slurmapi_emulator):
    wait = sensor(job_id=987654, poke_interval=0.2, unknown_job_grace=1)
    event = run_from_start_args(wait)
    assert event["status"] == "error"
    with pytest.raises(AirflowFailException, match="Slurm job 987654 is unknown"):
        wait.execute_complete({}, event)


def test_a_missing_connection_is_the_sensors_error(slurmapi_emulator):
    """Not Airflow's bare ``TaskDeferralError: Trigger failure`` with the cause in the triggerer's log."""
    wait = sensor(job_id=1, poke_interval=0.2, slurmapi_conn_id="no_such_connection")
    event = run_from_start_args(wait)
    with pytest.raises(AirflowFailException, match="no_such_connection"):
        wait.execute_complete({}, event)
