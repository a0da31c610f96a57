"""A deferred job's staged output reaches the task's log through the real triggerer while the job runs.

``dag.test()`` runs a trigger in the task's own process, so only a real triggerer shows that what the trigger
logs reaches the log a user reads (the REST API's, which the UI shows) on Airflow 3.3 and 2.11. The job
prints ``LINES`` lines and then waits for the test to release it: the lines must be in the task's log while
the task is deferred and the job still running, and once in the log of the whole try.
"""

from __future__ import annotations

import pytest

from tests.harness.standalone import Standalone, wait_for
from tests.standalone.dags.streaming_dags import LINES, MARKER, WORKDIR

pytestmark = pytest.mark.standalone

DAG_ID = "streaming_deferred"
TASK = "train"


def test_a_deferred_jobs_output_reaches_the_task_log_while_it_runs(standalone: Standalone):
    run_id = standalone.trigger(DAG_ID)
    standalone.wait_for_task(DAG_ID, run_id, TASK, ("deferred",))

    def submitted() -> int:
        jobs = standalone.emulator.jobs_of(DAG_ID, TASK, run_id)
        return jobs[0].job_id if jobs else 0

    job_id = int(wait_for("the task's job", submitted, timeout=60, log=standalone.log))
    lines = [f"[{job_id} stdout] {MARKER} {i}" for i in range(1, LINES + 1)]

    def streamed() -> str | None:
        log = standalone.task_log(DAG_ID, run_id, TASK, 1)
        return log if all(line in log for line in lines) else None

    wait_for("the job's lines in the task's log", streamed, timeout=120, interval=1, log=standalone.log)
    # still running, still deferred: the lines came from the triggerer as the job printed them
    with standalone.emulator.client() as client:
        job = client.get_job(job_id)
    assert job.state.base == "RUNNING", job.describe_state()
    assert standalone.task_instance(DAG_ID, run_id, TASK)["state"] == "deferred"

    release = standalone.emulator.host_path(WORKDIR) / f"release-{job_id}"
    release.touch()
    assert standalone.wait_for_run(DAG_ID, run_id) == "success"
    log = standalone.task_log(DAG_ID, run_id, TASK, 1)
    for line in lines:
        assert log.count(line) == 1, (line, log[-3000:])
    assert f"[{job_id} stdout] released" in log, log[-3000:]
    uri = standalone.xcom(DAG_ID, run_id, TASK, "slurm_output_uri")
    assert uri.startswith("gs://slurmapi-staging/standalone/") and uri.endswith(f"/{job_id}/run-0"), uri
