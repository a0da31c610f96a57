"""Chaos benchmark: many task tries submitting and waiting through random faults; count lost and duplicated jobs.

Run: ``.venv/bin/python benchmarks/chaos.py [--tasks 40] [--fault-rate 0.15] [--seed 7]``

Against one emulator with seeded random faults on every kind of call (503, 429, 500, resets, cut-short
JSON, slow replies past the client timeout, slurmdbd down, token endpoint errors, and submits whose
reply is lost after Slurm accepted them), each task runs like an Airflow task with retries: build the
job, submit (the provider's ``submit_once``: tagged, reattaching), wait; on a failure the next try starts
over after ``--retry-delay`` seconds (Airflow's ``retry_delay``; it must outlast a slow reply). The baseline does what a naive provider does: submit, and submit again when the submit call fails.
Printed: tasks that ended with their job COMPLETED, tries used, jobs per task (exactly 1 is right),
duplicates, lost tasks, API calls and faults fired.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("unavailable", "resource_exhausted", "internal", "reset", "malformed", "slow", "slurmdbd_down", "token_error")
MAX_TRIES = 6


def run(mode: str, tasks: int, rate: float, seed: int, retry_delay: float) -> dict[str, float]:
    from airflow_provider_slurmapi.api.errors import SlurmJobApiError
    from airflow_provider_slurmapi.api.jobs import JobSpec
    from airflow_provider_slurmapi.api.reattach import tagged_comment, task_instance_tag
    from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

    with SlurmJobApiEmulator(simulate=True, partitions={"debug": 10_000}, min_job_age=3600, seed=seed) as emu:
        os.environ["AIRFLOW_CONN_SLURMAPI_DEFAULT"] = emu.connection_json(retries=3, retry_delay=0.02, timeout=1)
        for kind in KINDS:
            emu.inject_fault(kind, count=None, probability=rate / len(KINDS), delay=1.5)
        emu.inject_fault("lost_reply", count=None, probability=rate, path_contains="job/submit")
        done, tries_used = 0, 0
        for n in range(tasks):
            tag = task_instance_tag("chaos", f"task{n}", "run-1")
            spec = JobSpec.build(
                "#!/bin/bash\n#EMULATOR runtime=0.3 exit=0\n",
                {"current_working_directory": "/chaos", "name": f"chaos.task{n}", "comment": tagged_comment(tag, None)},
            )
            for attempt in range(1, MAX_TRIES + 1):
                tries_used += 1
                hook = SlurmJobApiHook()
                try:
                    if mode == "provider":
                        job_id = hook.submit_once(spec, tag, first_try=attempt == 1).job_id
                    else:
                        job_id = hook.submit(spec).job_id
                    if hook.wait_for_job(job_id, poll_interval=0.1, timeout=60).state.is_success:
                        done += 1
                        break
                except SlurmJobApiError:
                    time.sleep(retry_delay)  # Airflow's retry_delay between tries (default 5 minutes)
                    continue
                finally:
                    hook.get_conn().close()
        emu.clear_faults()
        per_task = Counter(j["comment"].split(" ")[0] for j in emu.jobs())
        return {
            "tasks": tasks,
            "completed": done,
            "tries": tries_used,
            "jobs": sum(per_task.values()),
            "duplicated_tasks": sum(1 for c in per_task.values() if c > 1),
            "lost_tasks": tasks - done,
            "calls": len(emu.calls),
            "faults": len(emu.faults.fired),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--fault-rate", type=float, default=0.15, help="chance that a call meets a fault")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--retry-delay", type=float, default=3.0, help="seconds between a task's tries")
    args = parser.parse_args()
    os.environ.setdefault("AIRFLOW_HOME", str(Path(__file__).resolve().parent.parent / ".airflow-bench"))
    rows = []
    for mode in ("provider", "naive"):
        started = time.time()
        row = run(mode, args.tasks, args.fault_rate, args.seed, args.retry_delay)
        row["seconds"] = time.time() - started
        rows.append((mode, row))
    print(f"\nChaos: {args.tasks} tasks, fault rate {args.fault_rate:.0%} per call, seed {args.seed}\n")
    print(
        f"{'mode':9} {'completed':>9} {'tries':>6} {'jobs':>5} {'dup tasks':>9} {'lost':>5} {'calls':>6} {'faults':>6} {'s':>6}"
    )
    for mode, r in rows:
        print(
            f"{mode:9} {r['completed']:>9} {r['tries']:>6} {r['jobs']:>5} {r['duplicated_tasks']:>9} "
            f"{r['lost_tasks']:>5} {r['calls']:>6} {r['faults']:>6} {r['seconds']:>6.1f}"
        )


if __name__ == "__main__":
    main()
