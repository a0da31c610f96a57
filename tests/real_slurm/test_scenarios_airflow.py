"""Retries through real Airflow (``dag.test()``) after the job left the queue: emulator and real Slurm.

The same test code on both backends (``backends.py``) and on every Airflow version the CI runs: on 3.3
the retry reads the job id its first try recorded in ``task_state_store``; before 3.3 it searches the
queue and accounting. Either way accounting alone knows the earlier job, by its name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import Backend

from airflow_provider_slurmapi.api.identity import TaskIdentity
from tests.fixtures import dag_file

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


DAGS = dag_file("slurm_scenario_dags").DAGS


def run(backend: Backend, monkeypatch: pytest.MonkeyPatch, dag_id: str):
    hook = backend.connect(monkeypatch)
    dag_run = DAGS[dag_id].test(run_conf={"cwd": backend.cwd})
    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "train"]
    identity = TaskIdentity.of(ti.dag_id, ti.task_id, ti.run_id, -1)
    jobs = sorted((j for j in hook.list_accounted_jobs() if identity.run_of(j) is not None), key=lambda j: j.job_id)
    return ti, jobs


def state(ti) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


def test_a_retry_after_the_completed_job_left_the_queue_reattaches(backend, monkeypatch):
    ti, jobs = run(backend, monkeypatch, "scenario_retry_completed")
    assert state(ti) == "success" and ti.try_number == 2
    assert [(j.job_id, j.state.base) for j in jobs] == [(jobs[0].job_id, "COMPLETED")], "one job, run once"
    assert ti.xcom_pull(task_ids="train") == jobs[0].job_id


def test_a_retry_after_the_failed_job_left_the_queue_runs_exactly_one_new_job(backend, monkeypatch):
    ti, jobs = run(backend, monkeypatch, "scenario_retry_failed")
    assert state(ti) == "success" and ti.try_number == 2
    assert [j.state.base for j in jobs] == ["FAILED", "COMPLETED"]
    assert ti.xcom_pull(task_ids="train") == jobs[1].job_id
