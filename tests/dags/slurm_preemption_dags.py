"""DAGs of the preemption and requeue scenarios (tests/real_slurm/test_scenarios_preemption.py), run on the
emulator and on real Slurm.

Each DAG has the same job twice: waited on in the worker (``worker``) and deferred to the triggerer
(``deferred``), no retries. The test disrupts each task's job while it runs (a preemption, a node failure,
an administrator's requeue): a job's first run (``$SLURM_RESTART_COUNT`` unset or 0) waits to be
disrupted, a requeued run ends at once. Where the jobs run comes from the run's conf
(``{"cwd": ..., "partition": ...}``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

DAGS: dict[str, DAG] = {}
# The exception each failed task raised, by "<dag_id>.<task_id>" (its on_failure_callback keeps it).
FAILURES: dict[str, BaseException | None] = {}
WAITS = {"worker": False, "deferred": True}
# The first run lasts until the test disrupts it (however slow the machine); a requeued run says which it is.
FIRST_RUN_WAITS = (
    '#!/bin/bash\necho "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"\n'
    '[ "${SLURM_RESTART_COUNT:-0}" != 0 ] || sleep 300\n'
)
# The first run waits for the file release-<job id> in its working directory, then completes.
FIRST_RUN_WAITS_FOR_RELEASE = (
    '#!/bin/bash\necho "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"\n'
    'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then\n'
    '  for _ in $(seq 1 1500); do [ -e "release-$SLURM_JOB_ID" ] && exit 0; sleep 0.2; done\n'
    "  exit 3\n"
    "fi\n"
)


def _keep_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[f"{ti.dag_id}.{ti.task_id}"] = context.get("exception")


def _dag(dag_id: str, script: str, *, job: dict[str, Any] | None = None, poll_interval: float = 0.5) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        for task_id, deferrable in WAITS.items():
            SlurmSubmitJobOperator(
                task_id=task_id,
                script=script,
                job=job,
                current_working_directory="{{ dag_run.conf['cwd'] }}",
                partition="{{ dag_run.conf['partition'] }}",
                time_limit=5,
                deferrable=deferrable,
                poll_interval=poll_interval,
                retries=0,
                on_failure_callback=_keep_failure,
            )
    DAGS[dag_id] = dag
    return dag


# Preempted, then requeued (the default, JobRequeue=1): followed through the requeue to its end.
_dag("preempted_requeued", FIRST_RUN_WAITS)
# Preempted, and not requeued (submitted with requeue: false): it ends PREEMPTED.
_dag("preempted_not_requeued", FIRST_RUN_WAITS, job={"requeue": False})
# Its node goes DOWN: requeued by default, NODE_FAIL when it may not be.
_dag("node_failure_requeued", FIRST_RUN_WAITS)
_dag("node_failure_not_requeued", FIRST_RUN_WAITS, job={"requeue": False})
# Ends COMPLETED, and an administrator requeues it before the task has seen that end (``poll_interval`` 1 s:
# the polls the test blinds while it does so stay well within the error budget).
_dag("requeued_after_it_completed", FIRST_RUN_WAITS_FOR_RELEASE, poll_interval=1.0)
