"""DAGs the real-Slurm suite runs with dag.test() (tests/real_slurm): where and how is read when loaded.

``SLURMAPI_REAL_CWD`` and ``SLURMAPI_REAL_PARTITION`` come from the running cluster (the test sets them
before loading this file); without them the DAGs still parse, so the DAG bundle stays importable.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

CWD = os.environ.get("SLURMAPI_REAL_CWD", "/home/ciuser")
PARTITION = os.environ.get("SLURMAPI_REAL_PARTITION") or None
DAGS: dict[str, DAG] = {}


def _dag(dag_id: str) -> DAG:
    dag = DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
    DAGS[dag_id] = dag
    return dag


with _dag("real_array_one_task_fails"):
    # deferrable: the trigger's shared poller follows the array
    SlurmSubmitJobOperator(
        task_id="sweep",
        script='#!/bin/bash\necho "task $SLURM_ARRAY_TASK_ID"\n[ "$SLURM_ARRAY_TASK_ID" != 1 ] || exit 3\n',
        array="0-2",
        partition=PARTITION,
        current_working_directory=CWD,
        standard_output="real-array-%A_%a.out",
        deferrable=True,
        poll_interval=1,
    )

with _dag("real_time_limit"):
    # in the worker (not deferrable): the hook's blocking wait sees Slurm end the job at its limit
    SlurmSubmitJobOperator(
        task_id="train",
        script="#!/bin/bash\nsleep 150\n",
        time_limit=1,
        partition=PARTITION,
        current_working_directory=CWD,
        deferrable=False,
        poll_interval=2,
    )

with _dag("real_wait_every_way"):
    # the operator in the worker and deferred, and the sensor poking and deferred, on one cluster
    where: dict[str, Any] = {"partition": PARTITION, "current_working_directory": CWD}
    SlurmSubmitJobOperator(task_id="sync", script="#!/bin/bash\nsleep 2\n", deferrable=False, poll_interval=1, **where)
    SlurmSubmitJobOperator(
        task_id="deferred", script="#!/bin/bash\nsleep 2\n", deferrable=True, poll_interval=1, **where
    )
    submitted = SlurmSubmitJobOperator(
        task_id="submit", script="#!/bin/bash\nsleep 3\n", wait_for_completion=False, **where
    )
    job_id = "{{ ti.xcom_pull(task_ids='submit') }}"
    submitted >> [
        SlurmJobSensor(task_id="poke", job_id=job_id, poke_interval=1),
        SlurmJobSensor(task_id="sense_deferred", job_id=job_id, deferrable=True, poke_interval=1),
    ]
