"""Chaos on real Slurm: submit-and-wait tasks through real Airflow while the Google layer loses replies.

The chaos harness (``tests/harness/chaos.py``) with ``real=``: the DAG ``chaos_purged_retries`` (half the
tasks deferred, retries 35 s apart, past MinJobAge and the purge sweep, so a retry finds an earlier try's job
in accounting only) runs with ``dag.test()`` against slurmrestd 24.11 behind the emulator's Google layer, which
injects lost submit replies, 503/504 answers after Slurm accepted a submit, and 5xx, resets, cut and
slow replies on every kind of call. Counted from the real cluster's queue and accounting.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.harness.chaos import SUBMIT_FAULTS, run_chaos

pytestmark = [pytest.mark.real_slurm, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(1500)]
TASKS = 20


def test_every_task_succeeds_with_exactly_one_job_on_real_slurm(real_slurm):
    run = run_chaos("chaos_purged_retries", tasks=TASKS, rate=0.2, seed=11, real=real_slurm)

    assert Counter(run.ti_states.values()) == {"success": TASKS}, run.ti_states
    assert run.jobs_per_tag == dict.fromkeys(run.ti_states, 1), "a task ran twice, or not at all"
    assert run.duplicates == 0 and run.lost == 0
    assert [job["job_id"] for job in run.jobs if job["state"] != ["COMPLETED"]] == []
    assert Counter(tag.split("/")[1] for tag in run.ti_states) == {"submit_sync": 10, "submit_deferred": 10}
    # The submit faults this is about all happened, and Airflow's retries did part of the work.
    assert {kind: run.faults[kind] > 0 for kind in SUBMIT_FAULTS} == dict.fromkeys(SUBMIT_FAULTS, True), run.faults
    assert run.tries > TASKS
