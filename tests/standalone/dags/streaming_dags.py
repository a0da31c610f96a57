"""DAG of the streaming test (tests/standalone/test_streaming.py), parsed by the real ``airflow standalone``.

A deferred task whose job stages its output (``staging_uri``) prints a few lines, then runs until the test
lets it go (a file ``release-<job id>`` in ``WORKDIR`` on the emulator's cluster): the test reads the lines in
the task's log, through the real triggerer, while the job still runs, instead of hoping a sleep is long enough.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

WORKDIR = "/home/airflow/streaming"
STAGING_URI = "gs://slurmapi-staging/standalone"  # the bucket the suite's fake-gcs-server holds
MARKER = "streamed-line"
LINES = 3
BULK = 600  # more lines than a page of the job page's whole output holds
SECRET = "s3cr3t-streamed-5e7a"  # an environment entry Airflow masks (API_TOKEN): masked in the log and pages
GIVE_UP_SECONDS = 600
SCRIPT = f"""#!/bin/bash
echo "token is $API_TOKEN"
for i in $(seq {LINES}); do echo "{MARKER} $i"; done
for i in $(seq {BULK}); do echo "bulk $i"; done
for _ in $(seq {GIVE_UP_SECONDS * 2}); do
  [ -e "release-$SLURM_JOB_ID" ] && echo released && exit 0
  sleep 0.5
done
exit 1
"""

with DAG(
    dag_id="streaming_deferred",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md="A deferred job's staged output, followed by the triggerer into the task log while the job runs.",
    tags=["test", "streaming"],
):
    SlurmSubmitJobOperator(
        task_id="train",
        script=SCRIPT,
        current_working_directory=WORKDIR,
        staging_uri=STAGING_URI,
        environment={"API_TOKEN": SECRET},
        output_interval=1,
        poll_interval=1,
        deferrable=True,
    )
