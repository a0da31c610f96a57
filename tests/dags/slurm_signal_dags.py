"""The DAG of the warning-signal scenario (tests/real_slurm/test_scenarios_signals.py), run on the emulator and
real Slurm.

One DAG, ``warning``, run once with ``dag.test()``: ``whole_job`` and ``may_not_requeue`` submit their jobs and
return at once (``wait_for_completion=False``), so that those run while ``train`` waits for its own; the
scenario waits for a time limit once for all three. The cluster's working directory, the time limit (minutes)
and the warning's delay (seconds) come from the run's conf.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

DAGS: dict[str, DAG] = {}

# A training script that checkpoints when warned: it says when (its clock, and the end Slurm gave it), then
# runs on until the time limit's TERM. ``wait`` returns for each trapped signal: the loop waits again.
TRAIN = """#!/bin/bash
trap 'echo "warned at $(date +%s.%N) end $SLURM_JOB_END_TIME"' USR1
trap 'echo "term at $(date +%s.%N)"; exit 0' TERM
echo "started at $(date +%s.%N)"
sleep 600 &
while kill -0 $! 2>/dev/null; do wait $!; done
"""

# FULL_JOB: Slurm signals every process of the script's process group; the script and a child it started each
# say so once, and the script ends (COMPLETED) once both have.
WHOLE_JOB = """#!/bin/bash
warned=
trap 'warned=1; echo "script warned"' USR1
bash -c 'trap "echo child warned; exit 0" USR1; while :; do sleep 1; done' &
child=$!
while [ -z "$warned" ]; do sleep 1; done
wait $child
echo "both warned"
"""

# Submitted with requeue=False: runs until the scenario has tried to requeue it and cancels it.
MAY_NOT_REQUEUE = "#!/bin/sh\necho running\nsleep 600\n"

with DAG(
    dag_id="warning",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"cwd": "/home/tester", "time_limit": 2, "delay": 50},
    render_template_as_native_obj=True,
) as dag:
    limits = {"time_limit": "{{ params.time_limit }}", "kill_warning_delay": "{{ params.delay }}"}
    whole_job = SlurmSubmitJobOperator(
        task_id="whole_job",
        script=WHOLE_JOB,
        current_working_directory="{{ params.cwd }}",
        kill_warning_signal="USR1",
        job={**limits, "kill_warning_flags": ["FULL_JOB"]},
        wait_for_completion=False,
    )
    may_not_requeue = SlurmSubmitJobOperator(
        task_id="may_not_requeue",
        script=MAY_NOT_REQUEUE,
        current_working_directory="{{ params.cwd }}",
        job={"time_limit": 15},
        requeue=False,
        wait_for_completion=False,
    )
    train = SlurmSubmitJobOperator(
        task_id="train",
        script=TRAIN,
        current_working_directory="{{ params.cwd }}",
        kill_warning_signal="USR1",
        job=limits,
        poll_interval=0.5,
    )
    whole_job >> may_not_requeue >> train
DAGS[dag.dag_id] = dag
