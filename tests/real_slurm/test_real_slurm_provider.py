"""The provider itself on real Slurm (24.11 or 26.05): the hook, operators and trigger over the direct transport.

Per-version tests run at every version the release serves and at ``auto`` (24.11: v0.0.40-v0.0.42; 26.05:
v0.0.42-v0.0.45); the rest use the scenarios' version (v0.0.42 on 24.11, ``auto`` -> v0.0.45 on 26.05).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from airflow_provider_slurmapi.api.errors import SlurmRequestRejectedError
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.watch import failure_error
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger
from tests.harness.real_slurm import RELEASE, SCENARIO_API_VERSION, SERVED

pytestmark = pytest.mark.real_slurm
VERSIONS = [*SERVED, "auto"]


@pytest.fixture
def connect(real_slurm, monkeypatch):
    def make(version: str = SCENARIO_API_VERSION, conn_id: str = "slurmapi_default") -> SlurmJobApiHook:
        extra = {"slurmrestd_url": real_slurm.rest_url, "api_version": version}
        conn = {"conn_type": "slurmapi", "login": real_slurm.user, "password": real_slurm.jwt, "extra": extra}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return SlurmJobApiHook(slurmapi_conn_id=conn_id)

    return make


def job(real_slurm, **fields):
    return {"current_working_directory": real_slurm.home, "partition": real_slurm.partition, **fields}


@pytest.mark.parametrize("version", VERSIONS)
def test_submit_complete_and_read_back(real_slurm, connect, version):
    hook = connect(version)
    job_id = hook.submit_job("#!/bin/bash\necho real $SLURM_JOB_ID\n", job(real_slurm, name=f"ok-{version}"))
    done = hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    assert done.state.is_success and done.exit_code.return_code == 0
    assert done.name == f"ok-{version}"
    out = real_slurm.host_path(done.standard_output).read_text()
    assert out.strip() == f"real {job_id}"


@pytest.mark.parametrize("version", VERSIONS)
def test_exit_3_is_failed_with_code(real_slurm, connect, version):
    hook = connect(version)
    job_id = hook.submit_job("#!/bin/bash\nexit 3\n", job(real_slurm))
    done = hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    assert done.state.base == "FAILED" and done.exit_code.return_code == 3


@pytest.mark.parametrize("version", VERSIONS)
def test_cancel_running(real_slurm, connect, version):
    hook = connect(version)
    job_id = hook.submit_job("#!/bin/bash\nsleep 300\n", job(real_slurm))
    real_slurm.poll(
        "GET",
        f"/slurm/v0.0.42/job/{job_id}",
        lambda status, body: status == 200 and "RUNNING" in body["jobs"][0]["job_state"],
        timeout=60,
        what="the job to start",
    )
    hook.cancel_job(job_id)
    done = hook.wait_for_job(job_id, poll_interval=0.2, timeout=120)
    assert done.state.base == "CANCELLED" and done.state.is_terminal
    # v0.0.42+ says "already completing or completed" (status[] 2021); v0.0.40/41 say nothing either way
    assert hook.cancel_job(job_id).already_finished or version in ("v0.0.40", "v0.0.41")


def test_purged_job_comes_from_accounting(real_slurm, connect):
    hook = connect()
    job_id = hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm))
    hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    real_slurm.poll(
        "GET",
        f"/slurm/v0.0.42/job/{job_id}",
        lambda status, body: status == 404,
        timeout=real_slurm.min_job_age * 4 + 30,
        what="the job to leave the active queue",
        interval=1.0,
    )
    found = hook.get_job(job_id)
    assert found.source == "slurmdb" and found.state.is_success


def test_unknown_field_warning_is_surfaced(real_slurm, connect, capfd):
    submitted = connect().submit(JobSpec.build("#!/bin/bash\ntrue\n", job(real_slurm, no_such_field=1)))
    assert "no_such_field" in str(submitted.warnings[0])
    assert "Slurm warning on submit" in capfd.readouterr().out


def test_bad_partition_is_a_clear_error(real_slurm, connect):
    with pytest.raises(SlurmRequestRejectedError, match="Invalid partition name specified"):
        connect().submit_job("#!/bin/bash\ntrue\n", job(real_slurm, partition="nosuch"))


def test_array_and_dependency(real_slurm, connect):
    hook = connect()
    first = hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm))
    second = hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm, dependency=f"afterok:{first}"))
    assert hook.wait_for_job(second, poll_interval=0.5, timeout=120).state.is_success
    array = hook.submit_job('#!/bin/bash\n[ "$SLURM_ARRAY_TASK_ID" != 1 ]\n', job(real_slurm, array="0-2"))
    deadline = time.monotonic() + 120
    tasks = hook.get_jobs(array)
    while not (len(tasks) == 3 and all(t.state.is_terminal for t in tasks)) and time.monotonic() < deadline:
        time.sleep(0.5)
        tasks = hook.get_jobs(array)
    states = {t.array_task_id: t.state.base for t in tasks}
    assert states == {0: "COMPLETED", 1: "FAILED", 2: "COMPLETED"}


@pytest.mark.parametrize("version", [SERVED[-1], "auto"])
def test_shared_poller_batches_on_real_slurm(real_slurm, connect, version):
    hook = connect(version)
    ids = [hook.submit(JobSpec.build("#!/bin/bash\nsleep 1\n", job(real_slurm))).job_id for _ in range(4)]

    async def wait_all():
        async def one(job_id):
            async for event in SlurmJobTrigger(job_id, poll_interval=0.5).run():
                return event.payload

        return await asyncio.gather(*(one(i) for i in ids))

    events = asyncio.run(wait_all())
    assert [e["status"] for e in events] == ["success"] * 4


def test_slurmdbd_down_does_not_break_a_wait(real_slurm, connect):
    hook = connect()
    job_id = hook.submit_job("#!/bin/bash\nsleep 2\n", job(real_slurm))
    real_slurm.stop_slurmdbd()
    try:
        hook.wait_for_job(job_id, poll_interval=0.5, timeout=60)
    finally:
        real_slurm.start_slurmdbd()
    assert hook.get_job(job_id).state.is_success


def _load_real_dags():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "dags" / "slurm_real_dags.py"
    spec = importlib.util.spec_from_file_location("slurm_real_dags", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DAGS


def _run_failing(dag, capfd) -> tuple[int, dict, str]:
    """Run the one-task DAG, which must fail: the job id, the ``slurm_job`` summary and the log."""
    (ti,) = dag.test().get_task_instances()
    assert str(ti.state).rsplit(".", 1)[-1].lower() == "failed"
    task_id = ti.task_id
    out = capfd.readouterr()
    return (
        ti.xcom_pull(task_ids=task_id, key="slurm_job_id"),
        ti.xcom_pull(task_ids=task_id, key="slurm_job"),
        (out.out + out.err),
    )


@pytest.fixture
def real_dags(real_slurm, connect, monkeypatch):
    connect()  # slurmapi_default: this cluster's slurmrestd, directly
    monkeypatch.setenv("SLURMAPI_REAL_CWD", real_slurm.home)
    monkeypatch.setenv("SLURMAPI_REAL_PARTITION", real_slurm.partition)
    return _load_real_dags()


@pytest.mark.usefixtures("airflow_db")
def test_operator_array_one_failing_task_fails_and_names_it(real_slurm, real_dags, capfd):
    """Issue #6: a job array through the operator (deferrable), task 1 exits 3: the Airflow task fails saying so."""
    array_id, summary, log = _run_failing(real_dags["real_array_one_task_fails"], capfd)
    states = {t["display_id"]: (t["state"], t["exit_code"]) for t in summary["tasks"]}
    assert states == {
        f"{array_id}_0": ("COMPLETED", 0),
        f"{array_id}_1": ("FAILED", 3),
        f"{array_id}_2": ("COMPLETED", 0),
    }
    assert f"failed: task {array_id}_1 FAILED (exit code 3); 2 of 3 tasks COMPLETED" in log
    output = f"{real_slurm.home}/real-array-{array_id}_1.out"
    assert f"output: {output}" in log
    assert real_slurm.host_path(output).read_text().strip() == "task 1"
    # every task really ran to its end on the cluster
    tasks = SlurmJobApiHook().get_jobs(array_id)
    assert sorted(t.state.base for t in tasks) == ["COMPLETED", "COMPLETED", "FAILED"]


@pytest.mark.timeout(400)
@pytest.mark.usefixtures("airflow_db")
def test_operator_time_limit_ends_in_timeout(real_slurm, real_dags, capfd):
    """Issue #6: time_limit=1 on a 150 s script, through the operator (not deferrable): Slurm's TIMEOUT fails it."""
    job_id, summary, log = _run_failing(real_dags["real_time_limit"], capfd)
    assert summary["state"] == "TIMEOUT"
    assert 60 <= summary["elapsed_seconds"] < 150  # killed at the limit (checked on a 30 s sweep), not at its end
    # The job's name carries the task instance's identity after the name the DAG gave it.
    assert summary["name"].startswith("real_time_limit.train~af")
    assert f"Slurm job {job_id} ({summary['name']}) ended TIMEOUT" in log


def test_cancel_of_an_array_id_cancels_every_task(real_slurm, connect):
    """What the operator's on_kill relies on: one DELETE of the array's id stops running and pending tasks."""
    hook = connect()
    array = hook.submit_job("#!/bin/bash\nsleep 300\n", job(real_slurm, array="0-3%1"))
    real_slurm.poll(
        "GET",
        f"/slurm/v0.0.42/job/{array}",
        lambda status, body: status == 200 and any("RUNNING" in j["job_state"] for j in body["jobs"]),
        timeout=60,
        what="the array's first task to start",
    )
    assert not hook.cancel_job(array).already_finished
    done = hook.wait_for_job(array, poll_interval=0.5, timeout=120)
    assert done.state.base == "CANCELLED" and done.task_count == 4
    assert {t.state.base for t in done.tasks} == {"CANCELLED"}
    assert "0 of 4 tasks COMPLETED" in str(failure_error(done))


def test_a_version_the_cluster_does_not_serve_names_those_it_does(real_slurm, connect):
    from airflow_provider_slurmapi.api.errors import SlurmApiVersionError
    from airflow_provider_slurmapi.api.versions import SUPPORTED_VERSIONS

    unserved = next(v for v in reversed(SUPPORTED_VERSIONS) if v not in SERVED)  # 24.11: v0.0.45; 26.05: v0.0.41
    hook = connect(unserved, conn_id="slurmapi_unserved")
    with pytest.raises(SlurmApiVersionError, match=f"it serves {', '.join(SERVED)}. Set the connection"):
        hook.get_job(1)


def test_v0042_logs_once_where_slurm_deprecates_it(real_slurm, connect, caplog, monkeypatch):
    import logging

    from airflow_provider_slurmapi.api import client

    monkeypatch.setattr(client, "_NOTICED", set())  # once per connection and process: earlier tests used it

    caplog.set_level(logging.WARNING, logger="airflow_provider_slurmapi.api.client")
    hook = connect("v0.0.42", conn_id="slurmapi_v0042_notice")
    job_id = hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm))
    hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    notices = [r.getMessage() for r in caplog.records if "goes away in Slurm 26.11" in r.getMessage()]
    # Slurm 26.05 deprecates v0.0.42 (removed in 26.11); 24.11 does not
    assert len(notices) == (1 if RELEASE == "26.05" else 0), notices


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize("version", [SERVED[-1], "auto"])
def test_operator_and_sensor_in_the_worker_and_deferred(real_slurm, connect, monkeypatch, version):
    """The operator (sync and deferred) and the sensor (poke and deferred) at the newest version and auto."""
    connect(version)  # slurmapi_default
    monkeypatch.setenv("SLURMAPI_REAL_CWD", real_slurm.home)
    monkeypatch.setenv("SLURMAPI_REAL_PARTITION", real_slurm.partition)
    run = _load_real_dags()["real_wait_every_way"].test()
    states = {ti.task_id: str(ti.state).rsplit(".", 1)[-1].lower() for ti in run.get_task_instances()}
    assert states == dict.fromkeys(("sync", "deferred", "submit", "poke", "sense_deferred"), "success"), states
