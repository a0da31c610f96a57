"""A DAG scheduled on an asset that ``SlurmJobEventTrigger`` watches (tests/standalone/test_job_events.py).

Airflow 3 only (event-driven scheduling); on Airflow 2 this file defines nothing.
"""

from __future__ import annotations

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

DAG_ID = "slurm_job_events"
NAME_PREFIX = "evt-standalone-"

if AIRFLOW_V_3_0_PLUS:
    from datetime import datetime

    from airflow.sdk import DAG, Asset, AssetWatcher, task

    from airflow_provider_slurmapi.triggers.events import SlurmJobEventTrigger

    trained = Asset(
        "slurm-job-events-test",
        watchers=[
            AssetWatcher(
                name="slurm_jobs_ended",
                trigger=SlurmJobEventTrigger(name_prefix=NAME_PREFIX, states=["COMPLETED"], poll_interval=1.0),
            )
        ],
    )

    with DAG(DAG_ID, schedule=[trained], start_date=datetime(2026, 1, 1), catchup=False, tags=["test"]):

        @task
        def evaluate(*, triggering_asset_events=None) -> list[int]:
            """The job ids of the events that started this run (each event's extra holds the trigger's payload)."""
            return [e.extra["payload"]["job_id"] for events in triggering_asset_events.values() for e in events]

        evaluate()
