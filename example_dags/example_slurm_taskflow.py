"""TaskFlow: ``@task.slurm_script`` turns a function's return value into the batch script of a Slurm job."""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.sdk import dag, task


@dag(dag_id="example_slurm_taskflow", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def example_slurm_taskflow():
    @task
    def pick_shards() -> list[str]:
        return ["shard-a", "shard-b"]

    # [START howto_decorator_slurm_script]
    @task.slurm_script(
        current_working_directory="/home/airflow",
        partition="debug",
        cpus_per_task=4,
        time_limit=10,
        deferrable=True,
    )
    def tokenize(shards: list[str]) -> str:
        # Runs in the worker; the script it returns runs on the cluster (templated, like ``script``).
        lines = "\n".join(f'echo "tokenizing {shard} for {{{{ ds }}}} in job $SLURM_JOB_ID"' for shard in shards)
        return f"#!/bin/bash\nset -euo pipefail\n{lines}\n"

    # [END howto_decorator_slurm_script]

    @task
    def report(job_id: int) -> str:
        return f"tokenized in Slurm job {job_id}"

    report(tokenize(pick_shards()))


example_slurm_taskflow_dag = example_slurm_taskflow()
