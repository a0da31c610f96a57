"""Chaos through real Airflow: 100 submit-and-wait tasks with retries while a fifth of all calls fail.

The harness is ``tests/harness/chaos.py`` (``python -m benchmarks.chaos`` prints its figures): the DAG ``chaos`` of
``tests/dags/slurm_chaos_dags.py`` runs with ``dag.test()`` (Airflow's task runner, triggers in line,
up_for_retry tasks run again after their ``retry_delay``) against a simulated-run emulator with seeded
faults on every kind of call and seeded node failures, preemptions, early purges and token revocations.
Select it with ``-m chaos``; it runs in the default ``make test``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.harness.chaos import EVENT_KINDS, FAULT_KINDS, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(1800)]
TASKS = 100


def test_every_task_succeeds_with_exactly_one_job_through_a_fifth_of_all_calls_faulted():
    run = run_chaos("chaos", tasks=TASKS, rate=0.2, seed=7)

    assert len(run.ti_states) == TASKS
    assert Counter(run.ti_states.values()) == {"success": TASKS}
    # Exactly one job per task instance tag, every one of them COMPLETED: none duplicated, none lost.
    assert len(run.jobs) == TASKS
    assert run.jobs_per_tag == dict.fromkeys(run.ti_states, 1)
    assert [job["job_id"] for job in run.jobs if job["state"] != ["COMPLETED"]] == []
    # Airflow's retries did part of the work: some tasks needed a second try.
    assert run.tries > TASKS
    # Half the tasks waited in the triggerer (its shared poller reads jobs/state), half in the worker.
    assert Counter(tag.split("/")[1] for tag in run.ti_states) == {"submit_sync": 50, "submit_deferred": 50}
    assert any("/jobs/state/" in call.path for call in run.calls)

    # At least a fifth of every request (Google layer, Slurm layer, token endpoint) met a fault ...
    assert run.fault_rate >= 0.2, run.faults
    # ... of every kind, counted from the emulator's fault log.
    assert {kind: run.faults[kind] > 0 for kind in FAULT_KINDS} == dict.fromkeys(FAULT_KINDS, True)
    # Every cluster event happened, and the emulator's jobs show it.
    assert {kind: run.events[kind] > 0 for kind in EVENT_KINDS} == dict.fromkeys(EVENT_KINDS, True)
    requeued = run.events["node_fail_requeued"] + run.events["preempted_requeued"]
    assert sum(job["restart_cnt"] for job in run.jobs) == requeued
    purged = run.events["purged_running"] + run.events["purged_ended"]
    assert sum(1 for job in run.jobs if not job["in_queue"]) == purged
    assert any(call.status == 401 for call in run.calls), "a revoked token was refused at least once"


def test_the_naive_baseline_is_caught_submitting_twice():
    """The same checks catch a provider that submits again when a submit fails (they can fail)."""
    run = run_chaos("chaos_naive", tasks=10, rate=0.2, seed=7)

    assert run.duplicates > 0
    assert len(run.jobs) > len(run.ti_states)
