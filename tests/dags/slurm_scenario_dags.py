"""DAGs of the retry scenarios (tests/real_slurm/test_scenarios_airflow.py), run on the emulator and real Slurm.

Each retry here starts only once the task's earlier job has left Slurm's active queue (MinJobAge), so the
next try can find it in accounting alone, which keeps the job's name but not its comment. The cluster's
working directory comes from the run's conf (``{"cwd": ...}``).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

DAGS: dict[str, DAG] = {}
QUEUE_TIMEOUT = 240.0
# Fails the first time the task instance's job runs, then succeeds: the marker is named after the job.
FAILS_ONCE = (
    '#!/bin/bash\nm=".failed-once-$SLURM_JOB_NAME"\nif [ -e "$m" ]; then echo second; exit 0; fi\ntouch "$m"\nexit 3\n'
)


class RetriesAfterThePurge(SlurmSubmitJobOperator):
    """Every try after the first waits until the task's earlier jobs have left the active queue.

    With ``lose_worker``, the first try dies once its job has ended, as a worker lost after the job
    finished would (dag.test cannot SIGKILL a worker; the standalone suite does).
    """

    def __init__(self, *, lose_worker: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lose_worker = lose_worker

    def execute(self, context: Any) -> int:
        if context["ti"].try_number > 1:
            self._wait_until_the_queue_forgets(context)
        return super().execute(context)

    def _wait(self, context: Any, hook: SlurmJobApiHook, job_id: int) -> int:
        if self.lose_worker and context["ti"].try_number == 1:
            ended = hook.wait_for_job(job_id, poll_interval=0.5, timeout=QUEUE_TIMEOUT)
            raise RuntimeError(f"worker lost after Slurm job {job_id} ended {ended.state}")
        return super()._wait(context, hook, job_id)

    def _wait_until_the_queue_forgets(self, context: Any) -> None:
        identity = self.identity(context)
        deadline = time.monotonic() + QUEUE_TIMEOUT
        while any(identity.run_of(job) is not None for job in self.hook.list_jobs()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the task's jobs were still in the active queue after {QUEUE_TIMEOUT:.0f} s")
            time.sleep(0.5)
        self.log.info("The task's earlier jobs have left the active queue; only accounting knows them")


def _dag(dag_id: str) -> DAG:
    dag = DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params={"cwd": "/home/tester"},
        default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
    )
    DAGS[dag_id] = dag
    return dag


with _dag("scenario_retry_completed"):
    RetriesAfterThePurge(
        task_id="train",
        script="#!/bin/bash\necho trained\n",
        current_working_directory="{{ params.cwd }}",
        time_limit=5,
        poll_interval=0.5,
        lose_worker=True,
    )

with _dag("scenario_retry_failed"):
    RetriesAfterThePurge(
        task_id="train",
        script=FAILS_ONCE,
        current_working_directory="{{ params.cwd }}",
        time_limit=5,
        poll_interval=0.5,
        retry_on_job_failure=True,
    )
