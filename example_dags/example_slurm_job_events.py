"""Event-driven: evaluate each checkpoint as soon as a training job submitted outside Airflow completes.

Researchers submit ``pretrain-*`` jobs by hand (``sbatch --job-name pretrain-7b ...``); this DAG runs once
for each that ends COMPLETED, with no sensor occupying a worker or a trigger slot per job. Airflow 3+
(asset watchers); on Airflow 2 this file defines no DAG.
"""

from __future__ import annotations

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

if AIRFLOW_V_3_0_PLUS:
    from datetime import datetime

    from airflow.sdk import DAG, Asset, AssetWatcher, task

    from airflow_provider_slurmapi.triggers.events import SlurmJobEventTrigger

    # [START howto_trigger_slurm_job_events]
    pretrained = Asset(
        "slurm://demo-cluster/pretrain-checkpoints",
        watchers=[
            AssetWatcher(
                name="pretrain_jobs_completed",
                trigger=SlurmJobEventTrigger(
                    slurmapi_conn_id="slurmapi_default",
                    name_prefix="pretrain-",
                    states=["COMPLETED"],
                    poll_interval=60,
                ),
            )
        ],
    )

    with DAG(
        dag_id="example_slurm_job_events",
        schedule=[pretrained],
        start_date=datetime(2026, 1, 1),
        catchup=False,
    ):

        @task
        def evaluate(*, triggering_asset_events=None) -> list[str]:
            # Each event's extra holds the trigger's payload: the job's summary.
            jobs = [event.extra["payload"] for events in triggering_asset_events.values() for event in events]
            for job in jobs:
                print(f"evaluating the checkpoint of Slurm job {job['job_id']} ({job['name']}, {job['user']})")
            return [job["name"] for job in jobs]

        evaluate()
    # [END howto_trigger_slurm_job_events]
