"""DAGs of the deployment scenarios (tests/deployment/): ``n`` submit tasks each, mapped, against the
emulator in simulated-run mode (each job "runs" ``runtime`` seconds; nothing executes on this machine).

The run's ``conf`` sets ``n``, ``runtime`` and ``hold``; the job names end with the task instance's identity, so the
emulator's job list says which task submitted what.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

# hold=1: the job stays RUNNING until the test sends the emulator SIGUSR1, then ends ``runtime`` later.
SCRIPT = "#!/bin/bash\n#EMULATOR runtime={{ params.runtime }} hold={{ params.hold }}\ntrue\n"


@task
def names(n: str) -> list[str]:
    return [f"job-{i}" for i in range(int(n))]


def _dag(dag_id: str, doc: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        params={"n": 10, "runtime": 5, "hold": 1},
        max_active_tasks=2000,
        doc_md=doc,
        tags=["deployment"],
    )


def _train(deferrable: bool, poll_interval: int, **kwargs: object) -> None:
    SlurmSubmitJobOperator.partial(
        task_id="train",
        deferrable=deferrable,
        poll_interval=poll_interval,
        script=SCRIPT,
        current_working_directory="/deploy",
        partition="debug",
        publish_results=False,
        **kwargs,
    ).expand(name=names("{{ params.n }}"))


with _dag("deployment_deferred", "n deferrable submit tasks: each waits in a triggerer."):
    _train(True, 5)

with _dag("deployment_sync", "n submit tasks that wait in their worker; one retry."):
    _train(False, 2, retries=1, retry_delay=timedelta(seconds=2))
