"""DAGs of the kill-path tests (tests/standalone/test_kill_paths.py), parsed by the real ``airflow standalone``.

Each job runs until the test lets it go: it waits for a file ``release-<job id>`` in its working
directory (``WORKDIR`` on the emulator's cluster), so a test decides when a job ends instead of hoping
that a sleep is long enough. A job nobody releases gives up after ``GIVE_UP_SECONDS`` and fails.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

WORKDIR = "/home/airflow/kill-paths"
GIVE_UP_SECONDS = 600
SCRIPT = f"""#!/bin/bash
echo "waiting for release-$SLURM_JOB_ID"
for _ in $(seq {GIVE_UP_SECONDS * 2}); do
  [ -e "release-$SLURM_JOB_ID" ] && echo released && exit 0
  sleep 0.5
done
exit 1
"""
TIMEOUT_SECONDS = 20


def _dag(dag_id: str, doc: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        doc_md=doc,
        tags=["test", "kill-paths"],
    )


# What every task of these DAGs shares.
COMMON: dict = {"script": SCRIPT, "current_working_directory": WORKDIR, "time_limit": 15, "poll_interval": 1}


def _submit(deferrable: bool, **kwargs: object) -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(task_id="train", deferrable=deferrable, **COMMON, **kwargs)  # type: ignore[arg-type]


with _dag("kill_worker_sync", "The worker is killed (SIGKILL) mid-wait; the retry reattaches to the job."):
    _submit(False, retries=1, retry_delay=timedelta(seconds=2))

with _dag("kill_mark_failed_sync", "A user marks the task failed while it waits in the worker: its job is cancelled."):
    _submit(False)

with _dag("kill_mark_failed", "A user marks the deferred task failed: its job is cancelled."):
    _submit(True)

with _dag("kill_clear", "A user clears the deferred task: its job is cancelled and the new try submits anew."):
    _submit(True)

with _dag(
    "kill_clear_stalled_triggerer",
    "A user clears the deferred task while the triggerer is stalled: the new try cancels the job itself.",
):
    _submit(True)

with _dag("kill_clear_after_success", "A user clears a task that succeeded: it runs its job again."):
    _submit(True)

with _dag("kill_mark_success", "A user marks the deferred task success: its job is cancelled."):
    _submit(True)

with _dag("kill_triggerer_restart", "The triggerer stops and starts again mid-wait: the job is left running."):
    _submit(True)

with _dag("kill_execution_timeout", "A deferred task's execution_timeout passes: its job is cancelled."):
    _submit(True, execution_timeout=timedelta(seconds=TIMEOUT_SECONDS))

with _dag(
    "kill_execution_timeout_late",
    "The deferred task's execution_timeout passes and the task resumes late (its DAG was paused meanwhile).",
):
    _submit(True, execution_timeout=timedelta(seconds=TIMEOUT_SECONDS))

with _dag(
    "kill_execution_timeout_stalled",
    "The deferred task's execution_timeout passes while the triggerer is stalled (no timeout event).",
):
    _submit(True, execution_timeout=timedelta(seconds=TIMEOUT_SECONDS))

with _dag("kill_trigger_moves", "The triggers move to a second triggerer while the first is stalled."):
    _submit(True)
    # A mapped task's state is asked for by its map index (Airflow keys it "<task_id>_<map_index>").
    SlurmSubmitJobOperator.partial(task_id="train_mapped", deferrable=True, **COMMON).expand(name=["mapped"])
