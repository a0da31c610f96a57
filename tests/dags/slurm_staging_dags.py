"""DAGs of the staging scenarios (tests/real_slurm/test_scenarios_staging.py), on the emulator and real Slurm.

Each DAG has one task, ``train``, waiting in the worker (``<dag>_sync``) or deferred (``<dag>_deferred``). The
run's conf gives the cluster's working directory, the staging location (``staging``) and where the job finds
the metadata server and Cloud Storage (``metadata``, ``storage``: on a real node, its own metadata server and
storage.googleapis.com; in the tests, the emulator's stand-in and fake-gcs-server).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

DAGS: dict[str, DAG] = {}
LINES = 3000  # each ~60 bytes: ~180 KB of output, far past what a Slurm comment holds
RESULT_ITEMS = 5000  # a result of ~200 KB
TAIL = 200
ARRAY_PAD = 3000  # each array task's result: past what a Slurm comment holds, so it can only come staged
LIVE_MARKER = "live-line-3b9e"
STREAM_LINES = 10_000
SCRIPTS = {
    # Much output on both streams, then a large result.
    "staging_large": (
        "#!/bin/bash\n"
        f'for i in $(seq 1 {LINES}); do printf "line %06d of the training log, loss=0.%06d\\n" "$i" "$i"; done\n'
        'echo "warning: stderr line" >&2\n'
        'python3 -c \'import json, os; json.dump({"metrics": [{"step": i, "loss": 1 / (i + 1)} '
        f'for i in range({RESULT_ITEMS})]}}, open(os.environ["SLURMAPI_RETURN_FILE"], "w"))\'\n'
    ),
    # A failed job: its error quotes the last lines of its stderr, read from the staged output.
    "staging_failure": (
        "#!/bin/sh\n"
        f'i=0; while [ $i -lt {LINES} ]; do echo "stderr line $i" >&2; i=$((i + 1)); done\n'
        "echo last-words-of-the-job >&2\nexit 3\n"
    ),
    # 10,000 lines of ~510 bytes over about 60 s: 5 MB of output that the task log follows as it comes.
    "staging_stream": (
        "#!/bin/bash\n"
        "pad=$(printf '%0500d' 0)\n"
        f"for i in $(seq 0 {STREAM_LINES // 100 - 1}); do\n"
        "    for j in $(seq 1 100); do printf 'line %05d %s\\n' $((i * 100 + j)) \"$pad\"; done\n"
        "    sleep 0.6\n"
        "done\n"
    ),
    # A line, then a while before the job ends: the line is in the task log before the end.
    "staging_live": f"#!/bin/sh\necho {LIVE_MARKER}\nsleep 8\necho done\n",
    # A small result, with the storage refusing every request while the job runs (the test arms it).
    "staging_small": '#!/bin/sh\necho hello\necho \'{"ok": 1}\' > "$SLURMAPI_RETURN_FILE"\n',
    # An array of three tasks, each with its own output and a result too large for its comment.
    "staging_array": (
        "#!/bin/bash\n"
        'for i in 1 2 3; do echo "array task $SLURM_ARRAY_TASK_ID line $i"; done\n'
        f'printf \'{{"task": %d, "pad": "%s"}}\' "$SLURM_ARRAY_TASK_ID" "$(printf \'%0{ARRAY_PAD}d\' 0)" '
        '> "$SLURMAPI_RETURN_FILE"\n'
    ),
    # The first try is lost while the job runs; the second reattaches and reads what the job staged under
    # the first try's prefix (the test's operator, ``LosesTheFirstTry``).
    "staging_reattach": (
        "#!/bin/bash\necho before-the-loss\nsleep 6\necho after-the-loss\n"
        f'printf \'{{"pad": "%s"}}\' "$(printf \'%0{ARRAY_PAD}d\' 0)" > "$SLURMAPI_RETURN_FILE"\n'
    ),
}
SEPARATE = {"staging_large", "staging_failure"}
ARRAY = {"staging_array"}


class LosesTheFirstTry(SlurmSubmitJobOperator):
    """The first try dies as soon as its job is submitted, as a lost worker would (dag.test cannot SIGKILL
    one; the standalone suite does): the second try must reattach to that job, not submit another."""

    def _lost(self, context: Any, job_id: int) -> None:
        if context["ti"].try_number == 1:
            raise RuntimeError(f"worker lost while Slurm job {job_id} runs")

    def _defer(self, context: Any, job_id: int) -> None:
        self._lost(context, job_id)
        super()._defer(context, job_id)

    def _wait(self, context: Any, hook: SlurmJobApiHook, job_id: int) -> int:
        self._lost(context, job_id)
        return super()._wait(context, hook, job_id)


for name, script in SCRIPTS.items():
    for mode in ("sync", "deferred"):
        dag_id = f"{name}_{mode}"
        with DAG(
            dag_id=dag_id,
            schedule=None,
            start_date=datetime(2026, 1, 1),
            catchup=False,
            params={"cwd": "/home/tester", "staging": "", "metadata": "", "storage": ""},
            render_template_as_native_obj=True,
            default_args={"retries": 1, "retry_delay": timedelta(seconds=0)} if name == "staging_reattach" else {},
        ) as dag:
            operator = LosesTheFirstTry if name == "staging_reattach" else SlurmSubmitJobOperator
            operator(
                task_id="train",
                script=script,
                current_working_directory="{{ params.cwd }}",
                standard_output="out-%j.txt" if name in SEPARATE else None,
                standard_error="err-%j.txt" if name in SEPARATE else None,
                array="0-2" if name in ARRAY else None,
                environment={
                    "GCE_METADATA_HOST": "{{ params.metadata }}",
                    "STORAGE_EMULATOR_HOST": "{{ params.storage }}",
                },
                staging_uri="{{ params.staging }}",
                output_interval=1,
                output_tail_lines=TAIL,
                poll_interval=0.5,
                deferrable=mode == "deferred",
            )
        DAGS[dag_id] = dag


# @task.slurm with staging: a 2 MB argument goes to the job as a staged object (the API's requests are
# limited to 1 MB), and a 1 MB return value comes back through staging.
ARGUMENT_BYTES = 2 * 2**20
RETURN_BYTES = 2**20

with DAG(
    dag_id="staging_taskflow",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    params={"cwd": "/home/tester", "staging": "", "metadata": "", "storage": ""},
) as dag:

    @task
    def corpus() -> str:
        return "x" * ARGUMENT_BYTES

    @task.slurm(
        current_working_directory="{{ params.cwd }}",
        environment={"GCE_METADATA_HOST": "{{ params.metadata }}", "STORAGE_EMULATOR_HOST": "{{ params.storage }}"},
        staging_uri="{{ params.staging }}",
        poll_interval=0.5,
    )
    def embed(text: str, size: int) -> dict:
        import hashlib

        return {"read": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest(), "blob": "y" * size}

    embed(corpus(), RETURN_BYTES)
DAGS["staging_taskflow"] = dag
