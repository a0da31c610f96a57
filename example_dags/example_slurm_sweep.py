"""A hyper-parameter sweep: one Slurm job per parameter set, fanned out with dynamic task mapping."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

WORKDIR = os.environ.get("SLURMAPI_EXAMPLE_WORKDIR", "/home/airflow/slurm-demo")
SWEEP = [
    {"LEARNING_RATE": "0.1", "BATCH": "32"},
    {"LEARNING_RATE": "0.01", "BATCH": "64"},
    {"LEARNING_RATE": "0.001", "BATCH": "128"},
]

with DAG(
    dag_id="example_slurm_sweep",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "slurm"],
) as dag:
    # [START howto_operator_slurm_submit_mapped]
    train = SlurmSubmitJobOperator.partial(
        task_id="train",
        script=(
            "#!/bin/bash\nset -e\n"
            'echo "training with lr=$LEARNING_RATE batch=$BATCH"\n'
            'echo "lr=$LEARNING_RATE batch=$BATCH score=$(awk -v l="$LEARNING_RATE" \'BEGIN{print 1-l}\')"\n'
        ),
        current_working_directory=WORKDIR,
        time_limit=10,
        poll_interval=1,
    ).expand(environment=SWEEP)
    # [END howto_operator_slurm_submit_mapped]
