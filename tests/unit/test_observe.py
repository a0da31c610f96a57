"""The shared poller's tick as a sans-IO operation (api/observe.py): which calls each tick makes, and what
it learns between ticks, driven with replies recorded from real Slurm 24.11 (no network)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.errors import GoogleApiError, SlurmJobSpecError
from airflow_provider_slurmapi.api.observe import Observation, PollMemory, observe
from tests.fixtures import drive_op, recorded

V = "v0.0.42"
STATES = f"/slurm/{V}/jobs/state/"
ACCOUNTING = f"/slurmdb/{V}/jobs/"


def drive(op: Any, answers: Iterable[SlurmReply | Exception]) -> tuple[dict[str, Observation], list[str]]:
    """Run ``op`` as a client does: each call gets the next reply, or has the next error thrown in."""
    seen, calls = drive_op(op, answers)
    return seen, [c.path for c in calls]


def states(**by_id: str) -> SlurmReply:
    jobs = [{"job_id": job_id.removeprefix("j"), "state": [state]} for job_id, state in by_id.items()]
    return SlurmReply.from_structured(200, {"jobs": jobs, "errors": [], "warnings": []})


def accounting(records: list[dict[str, Any]]) -> SlurmReply:
    return SlurmReply.from_structured(200, {**recorded("slurmdb_jobs"), "jobs": records})


def accounted(job_id: int, **changes: Any) -> dict[str, Any]:
    """Real accounting's record of job 1 (COMPLETED), as job ``job_id``."""
    record = copy.deepcopy(recorded("slurmdb_jobs")["jobs"][0])
    record.update({"job_id": job_id, **changes})
    return record


def queue_record(job_id: int, comment: str) -> SlurmReply:
    body = copy.deepcopy(recorded("job_completed"))
    body["jobs"][0].update({"job_id": job_id, "comment": comment})
    return SlurmReply.from_structured(200, body)


def publication(job_id: str) -> str:
    return f"airflow-ti:d/t/r/-1 try:1 {results.MARK}{results.SEP}" + results.SEP.join(
        [job_id, "ok", "1", '{"n": 1}', "line", ""]
    )


def test_running_jobs_cost_one_call_and_carry_no_record():
    seen, calls = drive(observe(V, ["7", "8"], PollMemory()), [states(j7="RUNNING", j8="PENDING")])
    assert calls == [f"{STATES}?job_id=7&job_id=8"]
    assert {k: str(o.state) for k, o in seen.items()} == {"7": "RUNNING", "8": "PENDING"}
    assert all(o.job is None and o.error is None for o in seen.values())


def test_ended_and_departed_jobs_are_filled_in_from_accounting_with_one_call():
    """1 ended in the queue, 3 left it, 9 is in neither (just submitted, or no such job)."""
    seen, calls = drive(
        observe(V, ["1", "3", "9"], PollMemory()),
        [states(j1="COMPLETED"), accounting([accounted(1), accounted(3, state={"current": ["FAILED"]})])],
    )
    assert calls == [f"{STATES}?job_id=1&job_id=3&job_id=9", f"{ACCOUNTING}?step=1&step=3&step=9"]
    assert seen["1"].job is not None and seen["1"].job.source == "slurmdb" and not seen["1"].accounted
    assert seen["3"].accounted and str(seen["3"].state) == "FAILED" and seen["3"].job is not None
    assert seen["9"].unrecorded and str(seen["9"].state) == "PENDING" and seen["9"].job is None


def test_an_id_that_is_not_a_job_id_fails_alone_before_any_call():
    seen, calls = drive(observe(V, ["1/../x", "7"], PollMemory()), [states(j7="RUNNING")])
    assert calls == [f"{STATES}?job_id=7"]
    assert isinstance(seen["1/../x"].error, SlurmJobSpecError) and str(seen["7"].state) == "RUNNING"


def test_a_published_job_whose_accounting_lacks_its_comment_is_read_from_the_queue_then_only_there():
    memory = PollMemory(published={"1"})
    seen, calls = drive(
        observe(V, ["1"], memory),
        [states(j1="COMPLETED"), accounting([accounted(1)]), queue_record(1, publication("1"))],
    )
    assert calls == [f"{STATES}?job_id=1", f"{ACCOUNTING}?step=1", f"/slurm/{V}/job/1"]
    published = seen["1"].job.published if seen["1"].job else None
    assert published is not None and published.result() == {"n": 1}
    assert memory.comments_accounted is False  # learnt: accounting here does not carry publications
    # The next job that ends is read from the queue alone: the tick costs as many calls as before.
    memory.published.add("2")
    seen, calls = drive(observe(V, ["2"], memory), [states(j2="COMPLETED"), queue_record(2, publication("2"))])
    assert calls == [f"{STATES}?job_id=2", f"/slurm/{V}/job/2"] and seen["2"].job is not None


def test_accounting_that_carries_the_publication_needs_no_queue_read():
    memory = PollMemory(published={"1"})
    record = accounted(1, comment={"job": publication("1"), "administrator": "", "system": ""})
    seen, calls = drive(observe(V, ["1"], memory), [states(j1="COMPLETED"), accounting([record])])
    assert calls == [f"{STATES}?job_id=1", f"{ACCOUNTING}?step=1"]
    assert memory.comments_accounted is True and seen["1"].job is not None and seen["1"].job.published is not None


def test_a_400_reads_one_job_per_call_this_tick_and_a_404_for_good():
    refused = GoogleApiError(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")
    memory = PollMemory()
    one = copy.deepcopy(recorded("job_running"))
    running = SlurmReply.from_structured(200, one)
    seen, calls = drive(observe(V, ["1"], memory), [refused, running])
    assert calls == [f"{STATES}?job_id=1", f"/slurm/{V}/job/1"] and str(seen["1"].state) == "RUNNING"
    assert memory.batched  # the next tick batches again
    unknown = GoogleApiError(404, "NOT_FOUND", "Requested entity was not found.")
    _, calls = drive(observe(V, ["1"], memory), [unknown, running])
    assert calls == [f"{STATES}?job_id=1", f"/slurm/{V}/job/1"] and not memory.batched
    _, calls = drive(observe(V, ["1"], memory), [running])
    assert calls == [f"/slurm/{V}/job/1"]  # one call per job from then on


def test_a_failed_shared_call_is_every_asking_jobs_observation_and_counts_as_retryable():
    down = GoogleApiError(503, "UNAVAILABLE", "The service is unavailable.")
    seen, _ = drive(observe(V, ["1", "2"], PollMemory()), [down])
    assert all(o.error is down and o.error.retryable for o in seen.values())
    # accounting down: the jobs the queue answered for keep their state, the others get the error
    seen, _ = drive(observe(V, ["1", "2"], PollMemory()), [states(j1="RUNNING"), down])
    assert str(seen["1"].state) == "RUNNING" and seen["1"].error is None and seen["2"].error is down


def test_an_entry_per_task_marks_an_id_as_an_array_read_in_full():
    memory = PollMemory()
    status, body = 200, copy.deepcopy(recorded("job_running"))
    body["jobs"][0].update({"job_id": 5})
    seen, calls = drive(
        observe(V, ["5"], memory),
        [states(j5_0="RUNNING", j6_1="PENDING"), SlurmReply.from_structured(status, body)],
    )
    assert memory.arrays == {"5"}
    assert calls == [f"{STATES}?job_id=5", f"/slurm/{V}/job/5"]  # no accounting read for an array's id
    assert seen["5"].state is not None and seen["5"].error is None
    memory.forget("5")
    assert memory.arrays == set()
