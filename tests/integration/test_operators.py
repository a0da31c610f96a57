"""The operators, trigger and sensor in real Airflow (``dag.test()``) against the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_slurmapi.api import results
from tests.fixtures import dag_file, load_module, task_jobs

CWD = "/home/tester"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("airflow_db")


TEST_DAGS = dag_file("slurm_test_dags").DAGS


@pytest.fixture
def emu(slurmapi_emulator):
    return slurmapi_emulator


def run(dag_id: str):
    dag_run = TEST_DAGS[dag_id].test()
    return dag_run, {ti.task_id: ti for ti in dag_run.get_task_instances()}


def state(ti) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


@pytest.mark.parametrize("deferrable", [False, True])
def test_submit_and_wait(emu, deferrable):
    _, tis = run(f"submit_wait_{deferrable}")
    assert state(tis["train"]) == "success"
    job_id = tis["train"].xcom_pull(task_ids="train")
    job = emu.job(job_id)
    assert job["state"] == ["COMPLETED"]
    assert job["name"].startswith(f"submit_wait_{deferrable}.train~af")  # then the task instance's identity
    assert emu.read_output(job_id).strip() == "epoch=5"
    summary = tis["train"].xcom_pull(task_ids="train", key="slurm_job")
    assert summary["state"] == "COMPLETED" and summary["exit_code"] == 0
    assert summary["standard_output"] == f"{CWD}/slurm-{job_id}.out"
    link = tis["train"].xcom_pull(task_ids="train", key="slurm_job_link")
    assert link["job_id"] == str(job_id)


@pytest.mark.parametrize("deferrable", [False, True])
def test_failed_job_fails_the_task_without_retry(emu, deferrable):
    _, tis = run(f"submit_fail_{deferrable}")
    assert state(tis["train"]) == "failed"
    job_id = tis["train"].xcom_pull(task_ids="train", key="slurm_job_id")
    assert emu.job(job_id)["state"] == ["FAILED"]
    assert len(emu.jobs()) == 1


def test_rejected_spec_submits_nothing(emu):
    _, tis = run("submit_rejected")
    assert state(tis["train"]) == "failed"
    assert emu.jobs() == []


def test_missing_working_directory_fails_before_sending(emu):
    _, tis = run("submit_no_cwd")
    assert state(tis["train"]) == "failed"
    assert not [c for c in emu.calls if "submit" in c[1]]


def test_a_script_too_large_to_send_fails_before_any_call(emu, capfd):
    calls = len(emu.calls)
    _, tis = run("submit_too_large")
    assert state(tis["train"]) == "failed"
    assert tis["train"].try_number == 1  # refused for good: no retry would make it smaller
    assert emu.calls[calls:] == []  # not even the look-ups for an earlier try's job
    printed = "".join(capfd.readouterr())
    assert "the Slurm Job API accepts requests under 1 MB" in printed and "shared storage" in printed


def test_convenience_arguments_reach_slurm(emu):
    _, tis = run("submit_fields")
    job_id = tis["train"].xcom_pull(task_ids="train")
    job = emu.job(job_id)
    assert job["name"].startswith("explicit-wins~af")
    assert job["partition"] == "gpu"
    # the job's own comment, before what its wrapper published at its end (api/results.py)
    comment = results.split(job["comment"])[0]
    assert comment == f"airflow-ti:submit_fields/train/{tis['train'].run_id}/-1 try:1 from the job dict"
    assert job["standard_output"] == f"{CWD}/out-{job_id}-{job['name']}.log"  # %x: the whole name


def test_sensor_gates_on_a_job_submitted_elsewhere(emu):
    _, tis = run("sensor_gate")
    assert state(tis["wait"]) == "success"
    assert emu.job(tis["submit"].xcom_pull(task_ids="submit"))["state"] == ["COMPLETED"]


@pytest.mark.parametrize("deferrable", [False, True])
def test_sensor_fails_on_a_failed_job_or_skips_with_soft_fail(emu, deferrable):
    _, tis = run(f"sensor_fail_{deferrable}")
    assert state(tis["hard"]) == "failed"
    assert state(tis["soft"]) == "skipped"


def test_cancel_operator(emu):
    _, tis = run("cancel_op")
    assert state(tis["cancel"]) == "success"
    assert emu.job(tis["submit"].xcom_pull(task_ids="submit"))["state"] == ["CANCELLED"]


@pytest.mark.parametrize("deferrable", [False, True])
def test_execution_timeout_cancels_the_job(emu, deferrable):
    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

    try:
        _, tis = run(f"timeout_{deferrable}")
    except BaseException as err:  # Airflow 2.11's dag.test() lets AirflowTaskTimeout (a BaseException) out
        assert not AIRFLOW_V_3_0_PLUS and type(err).__name__ == "AirflowTaskTimeout", err
    else:
        assert state(tis["train"]) == "failed"
    (job,) = emu.jobs()
    emu.wait_for_state(job["job_id"], ["CANCELLED"], timeout=30)


def test_a_retry_reattaches_to_the_completed_job_and_a_clear_runs_it_again(emu):
    _, first = run("reattach")
    job_id = first["train"].xcom_pull(task_ids="train")
    from airflow_provider_slurmapi.api.identity import TaskIdentity, TaskTry
    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

    # The job is named after its task instance; its comment says so to people reading squeue.
    ti = first["train"]
    record = emu.job(job_id)
    identity = TaskIdentity.of(ti.dag_id, ti.task_id, ti.run_id, -1, TaskTry(2))
    assert record["name"] == identity.job_name(f"{ti.dag_id}.train")
    assert results.split(record["comment"])[0] == f"airflow-ti:{ti.dag_id}/train/{ti.run_id}/-1 try:1"
    # The same task instance's next try (same run of tries): the COMPLETED job is reused, nothing submitted.
    spec = JobSpec.build("#!/bin/bash\nsleep 2\n", {"current_working_directory": CWD, "name": record["name"]})
    outcome = SlurmJobApiHook().submit_once(spec, identity)
    assert outcome.reattached and outcome.job_id == job_id
    assert len(task_jobs(emu)) == 1
    # Cleared after try 1 (its next try starts a new run of tries): the job is run again.
    cleared = TaskIdentity.of(ti.dag_id, ti.task_id, ti.run_id, -1, TaskTry(2, run_start=2))
    spec = JobSpec.build("#!/bin/bash\nsleep 2\n", {"current_working_directory": CWD, "name": cleared.job_name("x")})
    again = SlurmJobApiHook().submit_once(spec, cleared)
    assert not again.reattached and again.job_id != job_id
    assert len(task_jobs(emu)) == 2


def test_example_dag_runs_end_to_end(emu):
    module = load_module(ROOT / "example_dags" / "example_slurm_training.py")
    dag_run = module.dag.test()
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert {k: state(v) for k, v in tis.items()} == dict.fromkeys(tis, "success")
    train_id = tis["train"].xcom_pull(task_ids="train")
    assert "checkpoint written" in emu.read_output(train_id)
    assert emu.job(train_id)["partition"] == "gpu"


def test_a_retry_reattaches_to_the_job_its_first_try_left_running(emu):
    """The first try dies after its submit; the second follows that job, found (on Airflow 3.3+) through
    ``task_state_store`` with one call, without listing the queue and accounting."""
    from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS

    _, tis = run("reattach_recorded")
    ti = tis["train"]
    assert state(ti) == "success" and ti.try_number == 2
    (job,) = task_jobs(emu)  # (on 2.11, the held job that told the retry its Slurm user is cancelled beside it)
    assert ti.xcom_pull(task_ids="train") == job["job_id"] and job["state"] == ["COMPLETED"]
    listings = [
        c
        for c in emu.calls
        if c.method == "GET" and c.path.split("?")[0].endswith(("/slurm/v0.0.42/jobs/", "/slurmdb/v0.0.42/jobs/"))
    ]
    if AIRFLOW_V_3_3_PLUS:
        from airflow.models.task_state_store import TaskStateStoreModel
        from airflow.utils.session import create_session

        with create_session() as session:
            stored = {
                row.key: row.value
                for row in session.query(TaskStateStoreModel).filter_by(
                    dag_id=ti.dag_id, run_id=ti.run_id, task_id="train"
                )
            }
        assert stored.get("slurm_job_id") is not None and str(job["job_id"]) in stored["slurm_job_id"], stored
        assert len(listings) == 2  # only the first try searched (it had nothing recorded)
    else:
        assert len(listings) == 4  # each try searched the queue and accounting


def test_secret_looking_environment_values_are_masked(emu, capfd):
    from airflow_provider_slurmapi.operators.slurmapi import secret_values

    assert secret_values({"API_TOKEN": "t", "EPOCHS": "3", "MONKEY": "m"}) == ["t"]
    assert secret_values(["DB_PASSWORD=p", "PATH=/bin"]) == ["p"]
    _, tis = run("secret_env")
    assert state(tis["train"]) == "success"
    assert emu.read_output(tis["train"].xcom_pull(task_ids="train")).strip() == "has-key"  # the job got it
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    rendered = RenderedTaskInstanceFields.get_templated_fields(tis["train"])
    assert rendered is not None and "EPOCHS" in str(rendered)
    out = capfd.readouterr()
    for secret in ("sk-live-abc123xyz", "hf-secret-987"):
        assert secret not in str(rendered)
        assert secret not in out.out + out.err
