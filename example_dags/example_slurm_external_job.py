"""Wait for a Slurm job submitted outside Airflow (by a person, a CI system, another scheduler), then go on.

Trigger it with the job id: ``airflow dags trigger example_slurm_external_job --conf '{"job_id": 1234}'``.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

WORKDIR = os.environ.get("SLURMAPI_EXAMPLE_WORKDIR", "/home/airflow/slurm-demo")

with DAG(
    dag_id="example_slurm_external_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"job_id": 1},
    tags=["example", "slurm"],
) as dag:
    # [START howto_sensor_slurm_external_job]
    external_job_done = SlurmJobSensor(
        task_id="external_job_done",
        job_id="{{ params.job_id }}",
        poke_interval=1,
        timeout=3600,
        mode="reschedule",
    )
    # [END howto_sensor_slurm_external_job]
    summarize = SlurmSubmitJobOperator(
        task_id="summarize",
        script="#!/bin/bash\necho 'job {{ params.job_id }} finished; summarizing its results'\n",
        current_working_directory=WORKDIR,
        time_limit=5,
        poll_interval=1,
    )
    external_job_done >> summarize
