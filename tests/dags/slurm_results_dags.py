"""DAGs of the result scenarios (tests/real_slurm/test_scenarios_results.py), run on the emulator and real Slurm.

Each DAG has one task, ``train``, in a synchronous and a deferrable variant (``<dag>_sync``,
``<dag>_deferred``). The cluster's working directory and the time limit come from the run's conf.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

DAGS: dict[str, DAG] = {}
OUT_MARKER = "out-marker-7f3a"
ERR_MARKER = "err-marker-loss-is-NaN"
TERM_MARKER = "term-reached-the-script"
SECRET = "s3cr3t-9d1c"
SCRIPTS = {
    "results_value": (
        "#!/bin/bash\necho training\n"
        'printf \'{"val_acc": 0.93, "checkpoint": "ckpt-%s.pt"}\' "$SLURM_JOB_ID" > "$SLURMAPI_RETURN_FILE"\n'
    ),
    "results_failure": f"#!/bin/sh\necho {OUT_MARKER}\necho {ERR_MARKER} >&2\nexit 3\n",
    # The time limit's TERM reaches the script itself: it says so in its output (after the publication).
    # Only the trap ends it: Slurm signals the sleep too, and a script whose last ``wait`` returned because
    # the sleep died first may exit (143) before bash runs the TERM trap (CI saw it once, under load).
    "results_time_limit": (
        f"#!/bin/bash\ntrap 'echo {TERM_MARKER}; exit 0' TERM\necho {OUT_MARKER}\nwhile :; do sleep 600 & wait; done\n"
    ),
    "results_python": (
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"print({OUT_MARKER!r})\n"
        'json.dump({"argv0": os.path.basename(sys.argv[0]), "job": os.environ["SLURM_JOB_ID"]}, '
        'open(os.environ["SLURMAPI_RETURN_FILE"], "w"))\n'
    ),
    "results_not_json": "#!/bin/sh\necho 'val_acc=0.93' > \"$SLURMAPI_RETURN_FILE\"\n",
    "results_too_large": "#!/bin/sh\nyes 1234567890 | head -n 200 | tr -d '\\n' > \"$SLURMAPI_RETURN_FILE\"\n",
    "results_nothing": "#!/bin/sh\necho no result\n",
    # A value Airflow masks (a secret-looking environment entry) stays masked in the published tail.
    "results_masked": '#!/bin/sh\necho "token is $API_TOKEN"\n',
    # publish_results=False: the script is submitted as it is; it sees no $SLURMAPI_RETURN_FILE.
    "results_off": '#!/bin/sh\necho "return file: [${SLURMAPI_RETURN_FILE:-unset}] $0"\n',
    # Holds 200 MiB for 3 s: its batch step's peak RSS is sampled (every second: MEMORY_JOB's
    # account_gather_frequency; the cluster's own interval, 30 s, is longer than the job).
    "results_memory": (
        "#!/bin/bash\n"
        "python3 -c 'import time; held = bytearray(200 << 20); held[::4096] = b\"\\x01\" * (50 << 10); time.sleep(3)'\n"
    ),
    # One result per array task.
    "results_array": (
        '#!/bin/sh\necho "task $SLURM_ARRAY_TASK_ID"\n'
        'echo "{\\"task\\": $SLURM_ARRAY_TASK_ID}" > "$SLURMAPI_RETURN_FILE"\n'
    ),
}
ARRAY = {"results_array"}
# Separate stdout and stderr files, so that each tail is its own.
SEPARATE = {"results_failure"}
MEMORY_JOB = {"account_gather_frequency": "task=1"}

for name, script in SCRIPTS.items():
    for mode in ("sync", "deferred"):
        dag_id = f"{name}_{mode}"
        with DAG(
            dag_id=dag_id,
            schedule=None,
            start_date=datetime(2026, 1, 1),
            catchup=False,
            params={"cwd": "/home/tester", "time_limit": 5},
            render_template_as_native_obj=True,
        ) as dag:
            SlurmSubmitJobOperator(
                task_id="train",
                script=script,
                current_working_directory="{{ params.cwd }}",
                job={"time_limit": "{{ params.time_limit }}", **(MEMORY_JOB if name == "results_memory" else {})},
                standard_output="out-%j.txt" if name in SEPARATE else None,
                standard_error="err-%j.txt" if name in SEPARATE else None,
                array="0-2" if name in ARRAY else None,
                environment={"API_TOKEN": SECRET} if name == "results_masked" else None,
                publish_results=name != "results_off",
                poll_interval=0.5,
                deferrable=mode == "deferred",
            )
        DAGS[dag_id] = dag
