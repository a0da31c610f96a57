"""TaskFlow: ``@task.slurm_script`` turns a function's return value into the batch script of a Slurm job;
``@task.slurm`` runs a Python function on the cluster and returns its value."""

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
        lines = "\n".join(f'echo "tokenizing {shard} for {{{{ run_id }}}} in job $SLURM_JOB_ID"' for shard in shards)
        return f"#!/bin/bash\nset -euo pipefail\n{lines}\n"

    # [END howto_decorator_slurm_script]

    # [START howto_decorator_slurm]
    @task.slurm(current_working_directory="/home/airflow", partition="debug", time_limit=10, poll_interval=1)
    def count_shards(shards: list[str]) -> dict:
        # Runs on the cluster with its python3: self-contained (imports inside), JSON in and out.
        import os

        return {"shards": len(shards), "job": int(os.environ["SLURM_JOB_ID"])}

    # [END howto_decorator_slurm]

    @task
    def report(job_id: int, counted: dict) -> str:
        return f"tokenized in Slurm job {job_id}; {counted['shards']} shards counted in job {counted['job']}"

    shards = pick_shards()
    report(tokenize(shards), count_shards(shards))


example_slurm_taskflow_dag = example_slurm_taskflow()
