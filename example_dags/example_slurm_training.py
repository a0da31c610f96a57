"""An example training pipeline on a Slurm cluster: prepare data, train (deferrable), evaluate, gate, publish.

The training job writes its result, ``{"val_acc": ..., "checkpoint": ...}``, to ``$SLURMAPI_RETURN_FILE``;
the ``train`` task pushes it as XCom ``slurm_result`` (see the docs' "Results and output" page).
``evaluate`` submits the evaluation job on that checkpoint and returns at once; the ``evaluation_done``
sensor gates the pipeline on it (deferrable: on Airflow 3.3+ it starts straight in the triggerer, without a
worker slot); ``check_accuracy`` branches on the result: ``publish`` copies the checkpoint to the cluster's
``published/`` directory only when ``val_acc`` reaches the ``min_val_acc`` param.

Runs as-is against the built-in emulator (``make demo``); on a real cluster, point the
``slurmapi_default`` connection at it and set, when the DAG file is parsed:

- ``SLURMAPI_EXAMPLE_WORKDIR``: the jobs' working directory, on the cluster (``/home/airflow/slurm-demo``)
- ``SLURMAPI_EXAMPLE_PARTITION``: the training job's partition (``gpu``)
- ``SLURMAPI_EXAMPLE_GPUS``: GPUs per node for training, ``0`` for none (``1``)
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

WORKDIR = os.environ.get("SLURMAPI_EXAMPLE_WORKDIR", "/home/airflow/slurm-demo")
TRAIN_PARTITION = os.environ.get("SLURMAPI_EXAMPLE_PARTITION", "gpu")
TRAIN_GPUS = int(os.environ.get("SLURMAPI_EXAMPLE_GPUS", "1"))

with DAG(
    dag_id="example_slurm_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    template_searchpath=[str(Path(__file__).parent / "scripts")],
    params={"epochs": 3, "epoch_seconds": 1, "min_val_acc": 0.9},
    # A retry never submits a second job: it finds this task's job by its tag and reattaches (or, once
    # the job has COMPLETED, just reads it). It also cures Airflow 3.3's race that can fail a deferred task
    # whose trigger fires before the scheduler saw the worker exit (apache/airflow#72716).
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    tags=["example", "slurm"],
) as dag:
    prepare = SlurmSubmitJobOperator(
        task_id="prepare_data",
        script=(
            "#!/bin/bash\nset -e\nmkdir -p data\nseq 1 1000 > data/train.csv\n"
            "echo prepared $(wc -l < data/train.csv) rows\n"
        ),
        current_working_directory=WORKDIR,
        time_limit=10,
        poll_interval=1,
    )
    # [START howto_operator_slurm_submit_deferrable]
    train = SlurmSubmitJobOperator(
        task_id="train",
        script="train.sh",
        partition=TRAIN_PARTITION,
        nodes=1,
        gpus_per_node=TRAIN_GPUS or None,
        time_limit=timedelta(minutes=30),
        environment={"EPOCHS": "{{ params.epochs }}"},
        current_working_directory=WORKDIR,
        standard_output="train-%j.out",
        deferrable=True,
        poll_interval=1,
    )
    # [END howto_operator_slurm_submit_deferrable]
    # [START howto_sensor_slurm_job_deferrable]
    evaluate = SlurmSubmitJobOperator(
        task_id="evaluate",
        script=(
            "#!/bin/bash\nset -e\n"
            "ls {{ ti.xcom_pull(task_ids='train', key='slurm_result')['checkpoint'] }}\n"
            "echo val_acc={{ ti.xcom_pull(task_ids='train', key='slurm_result')['val_acc'] }}\n"
        ),
        current_working_directory=WORKDIR,
        time_limit=5,
        wait_for_completion=False,
    )
    evaluation_done = SlurmJobSensor(
        task_id="evaluation_done",
        # map_indexes=-1 (one value) lets the 3.3+ triggerer render this and start the sensor itself.
        job_id="{{ ti.xcom_pull(task_ids='evaluate', map_indexes=-1) }}",
        poke_interval=1,
        timeout=600,
        deferrable=True,
    )
    # [END howto_sensor_slurm_job_deferrable]

    # [START howto_operator_slurm_result]
    @task.branch
    def check_accuracy(**context) -> list[str]:
        """Publish only a model good enough: the training job's own result decides."""
        result = context["ti"].xcom_pull(task_ids="train", key="slurm_result")
        threshold = float(context["params"]["min_val_acc"])
        print(f"training result: {result}; publishing needs val_acc >= {threshold}")
        return ["publish"] if result and result["val_acc"] >= threshold else []

    # [END howto_operator_slurm_result]
    publish = SlurmSubmitJobOperator(
        task_id="publish",
        script=(
            "#!/bin/bash\nset -e\nmkdir -p published\n"
            "cp {{ ti.xcom_pull(task_ids='train', key='slurm_result')['checkpoint'] }} published/model-latest.ckpt\n"
            "echo published {{ ti.xcom_pull(task_ids='train', key='slurm_result')['checkpoint'] }}"
            " as published/model-latest.ckpt\n"
        ),
        current_working_directory=WORKDIR,
        time_limit=5,
        poll_interval=1,
    )
    prepare >> train >> evaluate >> evaluation_done >> check_accuracy() >> publish

if __name__ == "__main__":
    dag.test()
