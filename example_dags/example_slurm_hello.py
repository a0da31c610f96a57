"""The smallest DAG: one Slurm job, submitted and waited for in the triggerer (the README's example)."""

from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

with DAG(dag_id="example_slurm_hello", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
    hello = SlurmSubmitJobOperator(
        task_id="hello",
        script='#!/bin/bash\necho "hello from $(hostname)"\n',
        current_working_directory="/home/airflow",
        partition="debug",
        time_limit=5,
        deferrable=True,
    )
