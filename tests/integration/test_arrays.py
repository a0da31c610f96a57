"""Job arrays through the operator and the sensor in real Airflow (``dag.test()``) against the emulator."""

from __future__ import annotations

import itertools
import re

import pytest

from tests.integration.test_operators import CWD, run, state

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture
def emu(slurmapi_emulator):
    return slurmapi_emulator


@pytest.mark.parametrize("deferrable", [False, True])
def test_array_waits_for_every_task(emu, deferrable, capfd):
    _, tis = run(f"array_ok_{deferrable}")
    assert state(tis["sweep"]) == "success"
    array_id = tis["sweep"].xcom_pull(task_ids="sweep")
    tasks = emu.jobs()
    assert len(tasks) == 3 and {t["state"][0] for t in tasks} == {"COMPLETED"}
    summary = tis["sweep"].xcom_pull(task_ids="sweep", key="slurm_job")
    assert summary["state"] == "COMPLETED" and summary["array_task_count"] == 3
    assert summary["array_tasks_completed"] == 3
    entries = {t["display_id"]: t for t in summary["tasks"]}
    assert list(entries) == [f"{array_id}_{i}" for i in range(3)]
    for index, entry in enumerate(summary["tasks"]):
        assert entry["state"] == "COMPLETED" and entry["exit_code"] == 0
        assert entry["standard_output"] == f"{CWD}/slurm-{array_id}_{index}.out"
    out = capfd.readouterr()
    log = out.out + out.err
    name = tasks[0]["name"]  # array_ok_<deferrable>.sweep, then the task instance's identity
    assert name.startswith(f"array_ok_{deferrable}.sweep~af")
    assert f"Submitted Slurm array job {array_id} ({name}, tasks 0-2)" in log
    assert f"Slurm array job {array_id} ({name}) ended COMPLETED: 3 of 3 tasks COMPLETED" in log


@pytest.mark.parametrize("deferrable", [False, True])
def test_one_failed_task_fails_the_task_and_is_named(emu, deferrable, capfd):
    _, tis = run(f"array_fail_{deferrable}")
    assert state(tis["sweep"]) == "failed"
    array_id = tis["sweep"].xcom_pull(task_ids="sweep", key="slurm_job_id")
    assert len(emu.jobs()) == 3  # no retry submitted another array
    summary = tis["sweep"].xcom_pull(task_ids="sweep", key="slurm_job")
    assert summary["state"] == "FAILED" and summary["array_tasks_completed"] == 2
    failed = [t for t in summary["tasks"] if t["state"] != "COMPLETED"]
    assert [(t["display_id"], t["state"], t["exit_code"]) for t in failed] == [(f"{array_id}_1", "FAILED", 3)]
    out = capfd.readouterr()
    log = out.out + out.err
    name = emu.jobs()[0]["name"]
    assert (
        f"Slurm array job {array_id} ({name}) failed: task {array_id}_1 FAILED (exit code 3); 2 of 3 tasks COMPLETED"
        in log
    )
    assert f"output: {CWD}/slurm-{array_id}_1.out" in log
    # progress is logged as it changes, not on every poll: each line differs from the one before it
    progress = re.findall(rf"Slurm array job {array_id}: ([^,\n]*(?:, \d+ [A-Z_+]+)*)", log)
    assert progress and all(a != b for a, b in itertools.pairwise(progress)), progress


@pytest.mark.parametrize("deferrable", [False, True])
def test_sensor_waits_for_every_task_of_an_array(emu, deferrable, capfd):
    _, tis = run(f"array_sensor_{deferrable}")
    assert state(tis["wait"]) == "failed"
    array_id = tis["submit"].xcom_pull(task_ids="submit")
    assert {t["state"][0] for t in emu.jobs()} == {"COMPLETED", "FAILED"}  # it waited for every task
    out = capfd.readouterr()
    assert f"task {array_id}_1 FAILED (exit code 3)" in out.out + out.err


def test_bad_array_spec_fails_before_sending(emu):
    _, tis = run("array_bad_spec")
    assert state(tis["sweep"]) == "failed"
    assert emu.jobs() == []


@pytest.mark.parametrize("coalesce", [True, False])
def test_trigger_waits_for_whole_arrays_beside_a_plain_job(emu, coalesce):
    import asyncio

    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
    from airflow_provider_slurmapi.triggers.poller import SharedJobPoller
    from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger
    from tests.dags.slurm_test_dags import ARRAY_FAIL, ARRAY_OK

    hook = SlurmJobApiHook()

    def submit(script: str, **job) -> int:
        return hook.submit(JobSpec.build(script, {"current_working_directory": CWD, **job})).job_id

    ok, bad, plain = submit(ARRAY_OK, array="0-2"), submit(ARRAY_FAIL, array="0-3%2"), submit("#!/bin/bash\ntrue\n")
    start = len(emu.calls)

    async def first_event(job_id: int) -> dict:
        async for event in SlurmJobTrigger(job_id, poll_interval=0.2, coalesce=coalesce).run():
            return event.payload
        raise AssertionError("no event")

    async def all_three():
        return await asyncio.gather(first_event(ok), first_event(bad), first_event(plain))

    good, failed, single = asyncio.run(all_three())
    assert good["status"] == "success" and good["job"]["array_tasks_completed"] == 3
    assert [t["display_id"] for t in good["job"]["tasks"]] == [f"{ok}_{i}" for i in range(3)]
    assert failed["status"] == "failed" and failed["job"]["array_task_count"] == 4
    assert f"task {bad}_1 FAILED (exit code 3); 3 of 4 tasks COMPLETED" in failed["message"]
    assert single["status"] == "success" and "tasks" not in single["job"]
    if coalesce:  # the plain job still rides the batched call
        assert any("/jobs/state/" in call[1] for call in emu.calls[start:])
    assert SharedJobPoller.active() == []
