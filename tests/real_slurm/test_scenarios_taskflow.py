"""``@task.slurm_script`` through real Airflow (``dag.test()``): emulator and real Slurm, same code.

The script the function returns runs on the cluster, as a Slurm job (``$SLURM_JOB_ID`` set there),
sync and deferred; a function that returns no script fails its task before anything is sent, without
using its retries.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import Backend

from tests.fixtures import dag_file

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


DAGS = dag_file("slurm_taskflow_dags").DAGS


def state(ti) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


def test_the_returned_script_runs_on_the_cluster_sync_and_deferred(backend: Backend, monkeypatch):
    hook = backend.connect(monkeypatch)
    dag_run = DAGS["taskflow_script"].test(run_conf={"cwd": backend.cwd, "partition": backend.partition})
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert {task_id: state(ti) for task_id, ti in tis.items()} == dict.fromkeys(tis, "success")
    day = dag_run.logical_date.strftime("%Y-%m-%d") if dag_run.logical_date else None
    for task_id in ("preprocess", "preprocess_deferred"):
        job_id = tis[task_id].xcom_pull(task_ids=task_id)
        assert isinstance(job_id, int)
        job = hook.get_job(job_id)
        assert job.state.base == "COMPLETED" and job.name.startswith(f"taskflow_script.{task_id}~af")
        written = backend.host_path(f"{backend.cwd}/out-{job_id}.txt").read_text().strip()
        if day is None:  # Airflow 3 runs without a logical date: {{ ds }} renders empty
            assert written.startswith(f"job={job_id} shards=3 day=")
        else:
            assert written == f"job={job_id} shards=3 day={day}"


def test_a_function_that_returns_no_script_fails_without_retries_or_a_job(backend: Backend, monkeypatch, capfd):
    hook = backend.connect(monkeypatch)
    dag_run = DAGS["taskflow_script_returns_nothing"].test(
        run_conf={"cwd": backend.cwd, "partition": backend.partition}
    )
    (ti,) = dag_run.get_task_instances()
    assert state(ti) == "failed" and ti.try_number == 1  # retries=2, none used: the same function fails again
    out = capfd.readouterr()
    assert "return value: the function 'forgot_to_return' returned NoneType" in out.out + out.err
    mine = [j for j in hook.list_jobs() if j.name.startswith("taskflow_script_returns_nothing.")]
    assert mine == [], "nothing is submitted"


def test_a_python_function_runs_on_the_cluster_and_its_return_value_comes_back(backend: Backend, monkeypatch):
    hook = backend.connect(monkeypatch)
    dag_run = DAGS["taskflow_python"].test(run_conf={"cwd": backend.cwd, "partition": backend.partition})
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert {task_id: state(ti) for task_id, ti in tis.items()} == dict.fromkeys(tis, "success")
    for task_id, lr in (("train", 0.5), ("train_deferred", 0.25)):
        job_id = tis[task_id].xcom_pull(task_ids=task_id, key="slurm_job_id")
        assert isinstance(job_id, int)
        # the function ran in the job (its $SLURM_JOB_ID), with the upstream task's list and the literal
        assert tis[task_id].xcom_pull(task_ids=task_id) == {"job": str(job_id), "total": 7, "lr": lr}
        job = hook.get_job(job_id)
        assert job.state.base == "COMPLETED" and job.name.startswith(f"taskflow_python.{task_id}~af")
    assert tis["evaluate"].xcom_pull(task_ids="evaluate") == 3.5


def test_a_function_that_raises_or_never_returns_fails_its_task_saying_why(backend: Backend, monkeypatch, capfd):
    hook = backend.connect(monkeypatch)
    dag_run = DAGS["taskflow_python_raises"].test(run_conf={"cwd": backend.cwd, "partition": backend.partition})
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert {task_id: state(ti) for task_id, ti in tis.items()} == dict.fromkeys(tis, "failed")
    out = capfd.readouterr()
    log = out.out + out.err
    for task_id, steps in (("diverges", 7), ("diverges_deferred", 8)):
        job_id = tis[task_id].xcom_pull(task_ids=task_id, key="slurm_job_id")
        assert hook.get_job(job_id).state.base == "FAILED"
        assert f"FloatingPointError: loss is NaN at step {steps}" in log
    assert "Traceback (most recent call last)" in log and "epoch 1 done" in log
    assert "Last lines of its stderr:" in log  # the failure message quotes the traceback
    job_id = tis["exits_early"].xcom_pull(task_ids="exits_early", key="slurm_job_id")
    assert hook.get_job(job_id).state.base == "COMPLETED"
    assert f"Slurm job {job_id} succeeded, but the return value of exits_early() could not be read" in log
    assert "exits_early() did not return" in log
    # A return value too large for the comment is named as the function's, not as $SLURMAPI_RETURN_FILE.
    assert "the return value of returns_too_much() is 5002 bytes, more than its Slurm comment holds" in log
    assert "SLURMAPI_RETURN_FILE" not in log
