"""Airflow 3.3's ``retry_policy`` with :class:`~airflow_provider_slurmapi.retry.SlurmRetryPolicy`, through
``dag.test()``: a preempted job's task is retried (and its second try's job completes), an out-of-memory
job's task is not, though both tasks have ``retries=1``; a policy that retries time limits retries one
that Airflow alone would not. Each retry comes at once (the policy's delay), not after the task's hour."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS
from tests.fixtures import dag_file, task_jobs

pytestmark = [
    pytest.mark.usefixtures("airflow_db"),
    pytest.mark.skipif(not AIRFLOW_V_3_3_PLUS, reason="retry_policy arrived in Airflow 3.3"),
]


def end_the_first_job(emu, state: str, done: threading.Event) -> None:
    """Once the first try's job runs, end it in ``state`` (not requeued), as the cluster would."""
    while not done.is_set():
        running = [j for j in task_jobs(emu) if j["state"] == ["RUNNING"]]
        if running:
            emu.fail_job(running[0]["job_id"], state, requeue=False)
            return
        time.sleep(0.1)


@pytest.mark.parametrize("deferrable", [False, True])
@pytest.mark.parametrize(
    ("policy", "state", "tries", "outcome"),
    [
        ("default", "PREEMPTED", 2, "success"),
        ("default", "OUT_OF_MEMORY", 1, "failed"),
        ("default", "TIMEOUT", 1, "failed"),
        ("time_limit", "TIMEOUT", 2, "success"),  # what Airflow would not retry without the policy
    ],
)
def test_the_policy_retries_a_preempted_job_and_not_one_out_of_memory(
    slurmapi_emulator, deferrable, policy, state, tries, outcome
):
    done = threading.Event()
    ender = threading.Thread(target=end_the_first_job, args=(slurmapi_emulator, state, done), daemon=True)
    ender.start()
    try:
        dag_run = dag_file("slurm_test_dags").DAGS[f"retry_policy_{policy}_{deferrable}"].test()
    finally:
        done.set()
        ender.join()
    (ti,) = dag_run.get_task_instances()
    assert str(ti.state).rsplit(".", 1)[-1].lower() == outcome
    assert ti.try_number == tries
    jobs = sorted(task_jobs(slurmapi_emulator), key=lambda j: j["job_id"])
    assert [j["state"] for j in jobs] == ([[state], ["COMPLETED"]] if tries == 2 else [[state]])
