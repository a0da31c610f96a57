"""The emulator's requeues, preemptions and node failures answer as real slurmrestd 24.11 did
(``tests/fixtures/slurm-24.11-requeue``, recorded on the test cluster of ``tests/real_slurm``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.fixtures import recorded_requeue
from tests.harness.emulator import Api

FIRST_RUN_WAITS = (
    '#!/bin/bash\necho "run ${SLURM_RESTART_COUNT:-0}"\n[ "${SLURM_RESTART_COUNT:-0}" != 0 ] || sleep 60\n'
)
DELAY = 1.0


def shape(record: dict[str, Any]) -> tuple[Any, ...]:
    """What the provider reads of an accounting record of a run: its state, restart count, exit codes."""
    (batch,) = [s for s in record["steps"] if s["step"]["name"] == "batch"]
    return (
        record["state"]["current"],
        record["state"]["reason"],
        record["restart_cnt"],
        record["exit_code"]["status"],
        record["exit_code"]["return_code"]["number"],
        batch["state"],
        batch["exit_code"]["status"],
        batch["exit_code"]["signal"]["id"]["number"],
    )


def recorded_shapes(name: str) -> list[tuple[Any, ...]]:
    return [shape(r) for r in recorded_requeue(name)[1]["jobs"]]


def queued(api: Api, job_id: int) -> dict[str, Any]:
    status, body = api.job(job_id)
    assert status == 200
    return body["jobs"][0]


@pytest.mark.slurmapi_emulator(requeue_delay=DELAY)
def test_a_preempted_job_is_requeued_and_waits_its_begin_time(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(FIRST_RUN_WAITS)
    emu.wait_for_state(job_id, "RUNNING", 10)
    emu.fail_job(job_id, "PREEMPTED", requeue=None)  # as Slurm: the job may be requeued
    pending = queued(api, job_id)
    real = recorded_requeue("job_preempted_requeued_pending")[1]["jobs"][0]
    assert (pending["job_state"], pending["state_reason"], pending["restart_cnt"]) == (
        real["job_state"],
        real["state_reason"],
        real["restart_cnt"],
    )
    assert api.call("GET", f"/slurm/v0.0.42/jobs/state/?job_id={job_id}")[1]["jobs"] == [
        {"job_id": str(job_id), "state": ["PENDING"]}
    ]
    emu.wait_for_state(job_id, "COMPLETED", 10 + DELAY)
    assert emu.read_output(job_id) == "run 1\n"  # the requeued run writes its output afresh
    status, body = api.db_job(job_id)
    assert status == 200
    assert [shape(r) for r in body["jobs"]] == recorded_shapes("slurmdb_job_preempted_requeued_completed")


def test_a_job_that_may_not_be_requeued_ends_preempted_or_node_fail(api: Api, emu: SlurmJobApiEmulator) -> None:
    for state, name in (("PREEMPTED", "preempted"), ("NODE_FAIL", "node_fail")):
        job_id = api.submit(FIRST_RUN_WAITS, requeue=False)
        emu.wait_for_state(job_id, "RUNNING", 10)
        emu.fail_job(job_id, state, requeue=True)  # requeue: false wins, as in Slurm
        ended = queued(api, job_id)
        real = recorded_requeue(f"job_{name}")[1]["jobs"][0]
        assert (ended["job_state"], ended["restart_cnt"], ended["exit_code"]) == (
            real["job_state"],
            real["restart_cnt"],
            real["exit_code"],
        )
        assert [shape(r) for r in api.db_job(job_id)[1]["jobs"]] == recorded_shapes(f"slurmdb_job_{name}")


@pytest.mark.slurmapi_emulator(requeue_delay=DELAY)
def test_an_admins_requeue_of_a_job_that_completed(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit('#!/bin/bash\necho "run ${SLURM_RESTART_COUNT:-0}"\n')
    emu.wait_for_state(job_id, "COMPLETED", 10)
    emu.requeue(job_id)
    pending = queued(api, job_id)
    assert (pending["job_state"], pending["restart_cnt"]) == (["PENDING"], 1)
    emu.wait_for_state(job_id, "COMPLETED", 10 + DELAY)
    assert [shape(r) for r in api.db_job(job_id)[1]["jobs"]] == recorded_shapes("slurmdb_job_requeued_by_admin")
    with pytest.raises(ValueError, match="pending"):
        refused = api.submit(FIRST_RUN_WAITS, hold=True)
        emu.requeue(refused)


def test_accounting_lists_every_run_but_with_skip_steps_only_the_last(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(FIRST_RUN_WAITS)
    emu.wait_for_state(job_id, "RUNNING", 10)
    emu.fail_job(job_id, "NODE_FAIL", requeue=None)
    emu.wait_for_state(job_id, "COMPLETED", 10)
    listed = api.call("GET", "/slurmdb/v0.0.42/jobs/")[1]["jobs"]
    assert [(r["job_id"], r["state"]["current"], r["restart_cnt"]) for r in listed] == [
        (job_id, ["NODE_FAIL"], 0),
        (job_id, ["COMPLETED"], 1),
    ]
    skipped = api.call("GET", "/slurmdb/v0.0.42/jobs/?skip_steps=true")[1]["jobs"]
    assert [(r["job_id"], r["state"]["current"], r["restart_cnt"]) for r in skipped] == [(job_id, ["COMPLETED"], 1)]


def test_a_negative_requeue_delay_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="requeue_delay must be 0 or more seconds, got -1"):
        SlurmJobApiEmulator(requeue_delay=-1)
