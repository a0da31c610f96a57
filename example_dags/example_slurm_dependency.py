"""Let Slurm order the work: the training job waits in Slurm's queue on ``afterok:<preprocess job>``."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

WORKDIR = os.environ.get("SLURMAPI_EXAMPLE_WORKDIR", "/home/airflow/slurm-demo")

with DAG(
    dag_id="example_slurm_dependency",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "slurm"],
) as dag:
    # [START howto_operator_slurm_submit_dependency]
    preprocess = SlurmSubmitJobOperator(
        task_id="preprocess",
        script="#!/bin/bash\nsleep 2\necho preprocessed > preprocessed.txt\n",
        current_working_directory=WORKDIR,
        time_limit=10,
        wait_for_completion=False,
    )
    train = SlurmSubmitJobOperator(
        task_id="train",
        script="#!/bin/bash\nset -e\ncat preprocessed.txt\necho trained\n",
        current_working_directory=WORKDIR,
        time_limit=10,
        job={"dependency": "afterok:{{ ti.xcom_pull(task_ids='preprocess') }}"},
        poll_interval=1,
    )
    preprocess >> train
    # [END howto_operator_slurm_submit_dependency]
