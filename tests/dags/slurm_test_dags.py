"""DAGs the integration tests run with dag.test(); they live in a DAG bundle so Airflow 3 can serialize them."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmCancelJobOperator, SlurmSubmitJobOperator
from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

CWD = "/home/tester"
DAGS: dict[str, DAG] = {}


def _dag(dag_id: str) -> DAG:
    dag = DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
    DAGS[dag_id] = dag
    return dag


for deferrable in (False, True):
    with _dag(f"submit_wait_{deferrable}"):
        SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\necho epoch=$EPOCHS > result.txt\ncat result.txt\n",
            environment={"EPOCHS": "{{ 2 + 3 }}"},
            current_working_directory=CWD,
            time_limit=5,
            deferrable=deferrable,
            poll_interval=0.2,
        )
    with _dag(f"submit_fail_{deferrable}"):
        SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\necho boom >&2\nexit 3\n",
            current_working_directory=CWD,
            deferrable=deferrable,
            poll_interval=0.2,
            retries=2,
        )
    with _dag(f"sensor_fail_{deferrable}"):
        submit = SlurmSubmitJobOperator(
            task_id="submit", script="#!/bin/bash\nexit 1\n", current_working_directory=CWD, wait_for_completion=False
        )
        hard = SlurmJobSensor(
            task_id="hard", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poke_interval=0.2, deferrable=deferrable
        )
        soft = SlurmJobSensor(
            task_id="soft",
            job_id="{{ ti.xcom_pull(task_ids='submit') }}",
            poke_interval=0.2,
            soft_fail=True,
            deferrable=deferrable,
        )
        submit >> [hard, soft]
    with _dag(f"timeout_{deferrable}"):
        from datetime import timedelta

        SlurmSubmitJobOperator(
            task_id="train",
            script="#!/bin/bash\nsleep 300\n",
            current_working_directory=CWD,
            deferrable=deferrable,
            poll_interval=0.2,
            execution_timeout=timedelta(seconds=3),
        )

with _dag("submit_rejected"):
    SlurmSubmitJobOperator(
        task_id="train", script="#!/bin/bash\ntrue\n", partition="nope", current_working_directory=CWD, retries=3
    )

with _dag("submit_too_large"):
    SlurmSubmitJobOperator(
        task_id="train", script="#!/bin/bash\n" + "#" * 1_100_000, current_working_directory=CWD, retries=3
    )

with _dag("submit_no_cwd"):
    SlurmSubmitJobOperator(task_id="train", script="#!/bin/bash\ntrue\n")

# A task with retries on a connection that cannot work (set by the test): it fails once, not three times.
with _dag("submit_wrong_connection"):
    SlurmSubmitJobOperator(
        task_id="train",
        script="#!/bin/bash\ntrue\n",
        current_working_directory=CWD,
        slurmapi_conn_id="slurmapi_wrong",
        retries=3,
        retry_delay=timedelta(seconds=0),
    )

# A templated comment that carries the wrapper's publication mark: a result forged in the comment.
with _dag("submit_forged_comment"):
    SlurmSubmitJobOperator(
        task_id="train",
        script="#!/bin/bash\ntrue\n",
        current_working_directory=CWD,
        job={"comment": "{{ '\x1eslurmapi2\x1f1\x1fok\x1f0\x1f{\"val_acc\": 0.99}\x1f\x1f' }}"},
    )

with _dag("submit_fields"):
    SlurmSubmitJobOperator(
        task_id="train",
        script="#!/bin/bash\ntrue\n",
        name="my-run",
        partition="gpu",
        nodes=2,
        gpus_per_node=4,
        current_working_directory=CWD,
        standard_output="out-%j-%x.log",
        job={"comment": "from the job dict", "name": "explicit-wins"},
        poll_interval=0.2,
    )

with _dag("sensor_gate"):
    SlurmSubmitJobOperator(
        task_id="submit", script="#!/bin/bash\nsleep 1\n", current_working_directory=CWD, wait_for_completion=False
    ) >> SlurmJobSensor(task_id="wait", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poke_interval=0.2)

# [START howto_operator_slurm_cancel]
with _dag("cancel_op"):
    SlurmSubmitJobOperator(
        task_id="submit", script="#!/bin/bash\nsleep 300\n", current_working_directory=CWD, wait_for_completion=False
    ) >> SlurmCancelJobOperator(task_id="cancel", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poll_interval=0.1)
# [END howto_operator_slurm_cancel]

with _dag("reattach"):
    SlurmSubmitJobOperator(
        task_id="train", script="#!/bin/bash\nsleep 2\n", current_working_directory=CWD, poll_interval=0.2
    )


class _LosesItsWorkerOnTheFirstTry(SlurmSubmitJobOperator):
    """Its first try dies right after the submit, as a worker lost mid-wait would (dag.test cannot
    SIGKILL a worker; the standalone suite does)."""

    def _wait(self, context, hook, job_id):  # type: ignore[no-untyped-def]
        if context["ti"].try_number == 1:
            raise RuntimeError(f"worker lost while waiting for Slurm job {job_id}")
        return super()._wait(context, hook, job_id)


with _dag("reattach_recorded"):
    from datetime import timedelta as _timedelta

    _LosesItsWorkerOnTheFirstTry(
        task_id="train",
        script="#!/bin/bash\nsleep 2\necho done\n",
        current_working_directory=CWD,
        poll_interval=0.2,
        retries=1,
        retry_delay=_timedelta(seconds=1),
    )

with _dag("secret_env"):
    SlurmSubmitJobOperator(
        task_id="train",
        script='#!/bin/bash\n[ -n "$HUB_TOKEN" ] && [ -n "$HF_KEY" ] && echo has-key\n',
        # A list hides the names from Airflow's own key-based masking; HF_KEY is not on Airflow's list.
        environment=["HUB_TOKEN={{ 'sk-live-' ~ 'abc123xyz' }}", "HF_KEY=hf-secret-987", "EPOCHS=3"],
        current_working_directory=CWD,
        poll_interval=0.2,
    )

# Job arrays: task 1 of array_fail exits 3; each task writes its index to its own output file.
ARRAY_OK = '#!/bin/bash\necho "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"\n'
ARRAY_FAIL = '#!/bin/bash\necho "task $SLURM_ARRAY_TASK_ID"\nsleep 0.5\n[ "$SLURM_ARRAY_TASK_ID" != 1 ] || exit 3\n'
for deferrable in (False, True):
    with _dag(f"array_ok_{deferrable}"):
        SlurmSubmitJobOperator(
            task_id="sweep",
            script=ARRAY_OK,
            array="{{ 0 }}-{{ 1 + 1 }}",
            current_working_directory=CWD,
            deferrable=deferrable,
            poll_interval=0.2,
        )
    with _dag(f"array_fail_{deferrable}"):
        SlurmSubmitJobOperator(
            task_id="sweep",
            script=ARRAY_FAIL,
            job={"array": "0-2%2"},
            current_working_directory=CWD,
            deferrable=deferrable,
            poll_interval=0.2,
        )
    with _dag(f"array_sensor_{deferrable}"):
        SlurmSubmitJobOperator(
            task_id="submit", script=ARRAY_FAIL, array="0-2", current_working_directory=CWD, wait_for_completion=False
        ) >> SlurmJobSensor(
            task_id="wait", job_id="{{ ti.xcom_pull(task_ids='submit') }}", poke_interval=0.2, deferrable=deferrable
        )

with _dag("array_bad_spec"):
    SlurmSubmitJobOperator(task_id="sweep", script=ARRAY_OK, array="0-2;rm", current_working_directory=CWD)

# Airflow 3.3's retry_policy with the provider's SlurmRetryPolicy: the test ends the first try's job
# PREEMPTED (retried at once), OUT_OF_MEMORY (not retried, though retries=1), or TIMEOUT (not retried by
# default, retried by the "time_limit" DAG's policy); a second try exits 0. The task's own retry_delay is an
# hour: a retry that comes at once took the policy's delay.
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS  # noqa: E402

if AIRFLOW_V_3_3_PLUS:
    from airflow.sdk.definitions.retry_policy import RetryAction, RetryRule

    from airflow_provider_slurmapi.api.failures import SlurmJobTimeLimitError
    from airflow_provider_slurmapi.retry import SlurmRetryPolicy

    for deferrable in (False, True):
        for name, policy in (
            ("default", SlurmRetryPolicy(cluster_fault_delay=timedelta(0))),
            (
                "time_limit",  # a rule of the user's, before the policy's own
                SlurmRetryPolicy(
                    [RetryRule(exception=SlurmJobTimeLimitError, action=RetryAction.RETRY, retry_delay=timedelta(0))],
                    cluster_fault_delay=timedelta(0),
                ),
            ),
        ):
            with _dag(f"retry_policy_{name}_{deferrable}"):
                SlurmSubmitJobOperator(
                    task_id="train",
                    script="#!/bin/bash\n[ {{ ti.try_number }} -gt 1 ] && { echo second try; exit 0; }\nsleep 120\n",
                    current_working_directory=CWD,
                    deferrable=deferrable,
                    poll_interval=0.2,
                    retries=1,
                    retry_delay=timedelta(hours=1),
                    retry_policy=policy,
                )
