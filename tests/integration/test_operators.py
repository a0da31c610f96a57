"""The operators, trigger and sensor in real Airflow (``dag.test()``) against the emulator."""

from __future__ import annotations

from datetime import datetime

import pytest
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmCancelJobOperator, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

CWD = "/home/tester"
pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture
def emu(slurmapi_emulator):
    return slurmapi_emulator


def run(dag):
    dag_run = dag.test()
    return dag_run, {ti.task_id: ti for ti in dag_run.get_task_instances()}


def make_dag(dag_id, build):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        build()
    return dag


@pytest.mark.parametrize("deferrable", [False, True])
def test_submit_and_wait(emu, deferrable):
    dag = make_dag(
        f"submit_wait_{deferrable}",
        lambda: SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\necho epoch=$EPOCHS > result.txt\ncat result.txt\n",
            environment={"EPOCHS": "{{ 2 + 3 }}"},
            current_working_directory=CWD,
            time_limit=5,
            deferrable=deferrable,
            poll_interval=0.2,
        ),
    )
    _, tis = run(dag)
    assert str(tis["train"].state).endswith("success")
    job_id = tis["train"].xcom_pull(task_ids="train")
    job = emu.job(job_id)
    assert job["state"] == ["COMPLETED"]
    assert job["name"] == f"submit_wait_{deferrable}.train"
    assert emu.read_output(job_id).strip() == "epoch=5"
    summary = tis["train"].xcom_pull(task_ids="train", key="slurm_job")
    assert summary["state"] == "COMPLETED" and summary["exit_code"] == 0
    assert summary["standard_output"] == f"{CWD}/slurm-{job_id}.out"
    link = tis["train"].xcom_pull(task_ids="train", key="slurm_job_link")
    assert link["job_id"] == str(job_id) and str(job_id) in link["url"]


@pytest.mark.parametrize("deferrable", [False, True])
def test_failed_job_fails_the_task_without_retry(emu, deferrable):
    dag = make_dag(
        f"submit_fail_{deferrable}",
        lambda: SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\necho boom >&2\nexit 3\n",
            current_working_directory=CWD,
            deferrable=deferrable,
            poll_interval=0.2,
            retries=2,
        ),
    )
    _, tis = run(dag)
    assert str(tis["train"].state).endswith("failed")
    job_id = tis["train"].xcom_pull(task_ids="train", key="slurm_job_id")
    assert emu.job(job_id)["state"] == ["FAILED"]
    assert tis["train"].try_number == 1
    assert len(emu.jobs()) == 1


def test_rejected_spec_submits_nothing(emu):
    dag = make_dag(
        "submit_rejected",
        lambda: SlurmSubmitJobOperator(
            task_id="train", script="#!/bin/bash\ntrue\n", partition="nope", current_working_directory=CWD, retries=3
        ),
    )
    _, tis = run(dag)
    assert str(tis["train"].state).endswith("failed")
    assert emu.jobs() == []


def test_missing_working_directory_fails_before_sending(emu):
    dag = make_dag("submit_no_cwd", lambda: SlurmSubmitJobOperator(task_id="train", script="#!/bin/bash\ntrue\n"))
    _, tis = run(dag)
    assert str(tis["train"].state).endswith("failed")
    assert not [c for c in emu.calls if "submit" in c[1]]


def test_convenience_arguments_reach_slurm(emu):
    dag = make_dag(
        "submit_fields",
        lambda: SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\ntrue\n",
            name="my-run",
            partition="gpu",
            nodes=2,
            gpus_per_node=4,
            current_working_directory=CWD,
            standard_output="out-%j-%x.log",
            job={"comment": "from the job dict", "name": "explicit-wins"},
            poll_interval=0.2,
        ),
    )
    _, tis = run(dag)
    job_id = tis["train"].xcom_pull(task_ids="train")
    job = emu.job(job_id)
    assert job["name"] == "explicit-wins"
    assert job["partition"] == "gpu"
    assert job["comment"] == "airflow-ti:submit_fields/train/" + tis["train"].run_id + "/-1 from the job dict"
    assert job["standard_output"] == f"{CWD}/out-{job_id}-explicit-wins.log"


def test_sensor_gates_on_a_job_submitted_elsewhere(emu):
    dag = make_dag(
        "sensor_gate",
        lambda: [
            SlurmSubmitJobOperator(
                task_id="submit",
                script="#!/bin/bash\nsleep 1\n",
                current_working_directory=CWD,
                wait_for_completion=False,
            )
            >> SlurmJobSensor(task_id="wait", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poke_interval=0.2),
        ],
    )
    _, tis = run(dag)
    assert str(tis["wait"].state).endswith("success")
    job_id = tis["submit"].xcom_pull(task_ids="submit")
    assert emu.job(job_id)["state"] == ["COMPLETED"]


@pytest.mark.parametrize("deferrable", [False, True])
def test_sensor_fails_on_a_failed_job_or_skips_with_soft_fail(emu, deferrable):
    def build():
        submit = SlurmSubmitJobOperator(
            task_id="submit", script="#!/bin/bash\nexit 1\n", current_working_directory=CWD, wait_for_completion=False
        )
        hard = SlurmJobSensor(
            task_id="hard", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poke_interval=0.2, deferrable=deferrable
        )
        soft = SlurmJobSensor(
            task_id="soft",
            job_id="{{ ti.xcom_pull(task_ids='submit') }}",
            poke_interval=0.2,
            soft_fail=True,
            deferrable=deferrable,
        )
        submit >> [hard, soft]

    _, tis = run(make_dag(f"sensor_fail_{deferrable}", build))
    assert str(tis["hard"].state).endswith("failed")
    assert str(tis["soft"].state).endswith("skipped")


def test_cancel_operator(emu):
    def build():
        submit = SlurmSubmitJobOperator(
            task_id="submit",
            script="#!/bin/bash\nsleep 300\n",
            current_working_directory=CWD,
            wait_for_completion=False,
        )
        submit >> SlurmCancelJobOperator(
            task_id="cancel", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poll_interval=0.1
        )

    _, tis = run(make_dag("cancel_op", build))
    assert str(tis["cancel"].state).endswith("success")
    job_id = tis["submit"].xcom_pull(task_ids="submit")
    assert emu.job(job_id)["state"] == ["CANCELLED"]


def test_example_dag_runs_end_to_end(emu):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "example_dags" / "example_slurm_training.py"
    spec = importlib.util.spec_from_file_location("example_slurm_training", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag_run, tis = run(module.dag)
    assert str(dag_run.state).endswith("success")
    train_id = tis["train"].xcom_pull(task_ids="train")
    assert "checkpoint written" in emu.read_output(train_id)
    assert emu.job(train_id)["partition"] == "gpu"
