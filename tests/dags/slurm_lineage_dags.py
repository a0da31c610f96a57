"""A DAG whose tasks' OpenLineage events tests/integration/test_lineage.py reads (the ``openlineage`` extra).

Each script prints what its job was given of its task's OpenLineage run, one ``NAME=value`` line per variable.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

CWD = "/home/tester"
DAGS: dict[str, DAG] = {}
SHOW_PARENT = (
    'echo "OPENLINEAGE_PARENT_ID=${OPENLINEAGE_PARENT_ID-unset}"\n'
    'echo "OPENLINEAGE_ROOT_PARENT_ID=${OPENLINEAGE_ROOT_PARENT_ID-unset}"\n'
    'echo "OPENLINEAGE_CONTEXT=${OPENLINEAGE_CONTEXT-unset}"\n'
)
WHERE: dict[str, Any] = {"current_working_directory": CWD, "time_limit": 5, "poll_interval": 0.2}


with DAG(dag_id="lineage", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    DAGS[dag.dag_id] = dag
    for deferrable in (False, True):
        suffix = "_deferred" if deferrable else ""
        SlurmSubmitJobOperator(
            task_id=f"script{suffix}",
            script=f"#!/bin/bash\n{SHOW_PARENT}",
            environment={"EPOCHS": "5"},
            deferrable=deferrable,
            **WHERE,
        )
        SlurmSubmitJobOperator(
            task_id=f"fails{suffix}",
            script="#!/bin/bash\necho boom >&2\nexit 3\n",
            deferrable=deferrable,
            **WHERE,
        )
    # A task that names its job's parent itself: the job gets that, and nothing added.
    SlurmSubmitJobOperator(
        task_id="own_parent",
        script=f"#!/bin/bash\n{SHOW_PARENT}",
        environment=["OPENLINEAGE_PARENT_ID=elsewhere/a.job/0190a4e5-0000-7000-8000-000000000001"],
        **WHERE,
    )

    @task.slurm(**WHERE)
    def python() -> dict:
        import json
        import os

        context = json.loads(os.environ["OPENLINEAGE_CONTEXT"])
        return {
            "parent": os.environ.get("OPENLINEAGE_PARENT_ID"),
            "root": os.environ.get("OPENLINEAGE_ROOT_PARENT_ID"),
            "context_run": context["parent"]["run"]["runId"],
            "context_root_run": context["parent"]["root"]["run"]["runId"],
        }

    python()
