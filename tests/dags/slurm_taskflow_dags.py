"""TaskFlow DAGs run on the emulator and on real Slurm (tests/real_slurm/test_scenarios_taskflow.py).

Where the jobs run comes from the run's conf (``{"cwd": ..., "partition": ...}``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

DAGS: dict[str, DAG] = {}
WHERE: dict[str, Any] = {
    "current_working_directory": "{{ dag_run.conf['cwd'] }}",
    "partition": "{{ dag_run.conf['partition'] }}",
    "time_limit": 5,
    "poll_interval": 0.5,
}


def _dag(dag_id: str, **kwargs: Any) -> DAG:
    dag = DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, **kwargs)
    DAGS[dag_id] = dag
    return dag


with _dag("taskflow_script"):

    @task
    def shards() -> int:
        return 3

    @task.slurm_script(**WHERE)
    def preprocess(count: int) -> str:
        # The job writes where it ran and what it was given; {{ ds }} is rendered like any template.
        return f'#!/bin/bash\necho "job=$SLURM_JOB_ID shards={count} day={{{{ ds }}}}" > "out-$SLURM_JOB_ID.txt"\n'

    @task.slurm_script(task_id="preprocess_deferred", deferrable=True, **WHERE)
    def preprocess_deferred(count: int) -> str:
        return f'#!/bin/bash\necho "job=$SLURM_JOB_ID shards={count} day={{{{ ds }}}}" > "out-$SLURM_JOB_ID.txt"\n'

    count = shards()
    preprocess(count)
    preprocess_deferred(count)


with _dag("taskflow_script_returns_nothing", default_args={"retries": 2}):

    @task.slurm_script(**WHERE)
    def forgot_to_return() -> str:
        print("#!/bin/bash\ntrue\n")  # the mistake under test: the script is printed, not returned
        return None  # type: ignore[return-value]

    forgot_to_return()


with _dag("taskflow_python"):

    @task
    def sizes() -> list[int]:
        return [3, 4]

    @task.slurm(**WHERE)
    def train(sizes: list[int], lr: float) -> dict:
        import os

        # Runs on the cluster: $SLURM_JOB_ID is the job's, the arguments came as JSON.
        return {"job": os.environ["SLURM_JOB_ID"], "total": sum(sizes), "lr": lr}

    @task.slurm(task_id="train_deferred", deferrable=True, **WHERE)
    def train_deferred(sizes: list[int], lr: float) -> dict:
        import os

        return {"job": os.environ["SLURM_JOB_ID"], "total": sum(sizes), "lr": lr}

    @task
    def evaluate(metrics: dict) -> float:
        return metrics["total"] * metrics["lr"]

    counts = sizes()
    evaluate(train(counts, lr=0.5))
    train_deferred(counts, lr=0.25)


with _dag("taskflow_python_raises"):

    @task.slurm(**WHERE)
    def diverges(steps: int) -> float:
        print("epoch 1 done")
        raise FloatingPointError(f"loss is NaN at step {steps}")

    @task.slurm(task_id="diverges_deferred", deferrable=True, **WHERE)
    def diverges_deferred(steps: int) -> float:
        raise FloatingPointError(f"loss is NaN at step {steps}")

    @task.slurm(**WHERE)
    def exits_early() -> int:
        import sys

        sys.exit(0)  # the job succeeds, but the function never returned

    @task.slurm(**WHERE)
    def returns_too_much() -> str:
        return "x" * 5000  # more than a Slurm comment holds

    diverges(7)
    diverges_deferred(8)
    exits_early()
    returns_too_much()
