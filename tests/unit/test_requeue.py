"""Requeued, preempted and node-failed jobs, read from replies recorded on real slurmrestd 24.11
(``tests/fixtures/slurm-24.11-requeue``; the scenarios of ``tests/real_slurm/test_scenarios_preemption.py``
prove the same live, on the emulator and real Slurm).

Accounting keeps one record per run of a requeued job (the earlier run ``PREEMPTED``, ``NODE_FAIL`` or
``PENDING+REQUEUED``, restart 0, then the latest), and a listing does not give them in run order: every
reader keeps the latest run, or a job that COMPLETED on its second run would read as preempted (a retry
would run it again) or as pending forever.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_slurmapi.api import failures
from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.identity import TaskIdentity
from airflow_provider_slurmapi.api.jobs import SlurmJob, latest_runs
from airflow_provider_slurmapi.api.reattach import find_task_jobs, reusable
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.watch import JobWatch, failure_error, outcome_text
from tests.fixtures import drive_op, recorded, recorded_requeue, recorded_status

V = "v0.0.42"
PREEMPTED_THEN_COMPLETED = 48  # preempted, requeued, COMPLETED on its second run
ADMIN_REQUEUED = 53  # COMPLETED, requeued by scontrol requeue, COMPLETED again


def reply(name: str, edit: Any = None) -> SlurmReply:
    status, body = recorded_requeue(name)
    if edit is not None:
        body = copy.deepcopy(body)
        edit(body)
    return SlurmReply.from_structured(status, body)


def not_in_queue() -> SlurmReply:
    return SlurmReply.from_structured(recorded_status("job_not_found"), recorded("job_not_found"))


def reversed_records(body: dict[str, Any]) -> None:
    body["jobs"].reverse()


def runs(name: str) -> list[tuple[int, list[str], int]]:
    return [(j["job_id"], j["state"]["current"], j["restart_cnt"]) for j in recorded_requeue(name)[1]["jobs"]]


def test_accounting_keeps_a_record_per_run_and_a_listing_mixes_their_order():
    # what real slurmdbd answered: the facts the readers below are written for
    assert runs("slurmdb_job_preempted_requeued_completed") == [(48, ["PREEMPTED"], 0), (48, ["COMPLETED"], 1)]
    assert runs("slurmdb_job_requeued_by_admin") == [(53, ["PENDING", "REQUEUED"], 0), (53, ["COMPLETED"], 1)]
    listed = runs("slurmdb_jobs_requeued")
    assert listed[0] == (53, ["PENDING", "REQUEUED"], 0) and listed[-1] == (53, ["COMPLETED"], 1)
    # with skip_steps, slurmrestd lists the latest run of each job only
    assert [r for r in runs("slurmdb_jobs_requeued_skip_steps") if r[0] in (48, 53)] == [
        (48, ["COMPLETED"], 1),
        (53, ["COMPLETED"], 1),
    ]


@pytest.mark.parametrize("edit", [None, reversed_records])
@pytest.mark.parametrize(
    ("job_id", "name"),
    [
        (PREEMPTED_THEN_COMPLETED, "slurmdb_job_preempted_requeued_completed"),
        (ADMIN_REQUEUED, "slurmdb_job_requeued_by_admin"),
    ],
)
def test_a_requeued_job_that_left_the_queue_reads_as_its_last_run(job_id, name, edit):
    job, calls = drive_op(ops.get_job(V, job_id), [not_in_queue(), reply(name, edit)])
    assert [c.path for c in calls] == [f"/slurm/{V}/job/{job_id}", f"/slurmdb/{V}/job/{job_id}"]
    assert (job.state, job.restart_count, job.source) == (JobState("COMPLETED"), 1, "slurmdb")
    # the wait ends there: COMPLETED, said without accounting's stale pending reason (BeginTime)
    assert job.state_reason == "BeginTime" and job.describe_state() == "COMPLETED"
    assert outcome_text(job).startswith(
        f"Slurm job {job_id} ("
    ) and "ended COMPLETED, requeued 1 time," in outcome_text(job)
    accounted, _ = drive_op(ops.get_accounted_job(V, job_id), [reply(name, edit)])
    assert accounted is not None and accounted.restart_count == 1 and accounted.state.is_success


def test_a_requeued_job_still_pending_reads_as_pending_from_accounting():
    job, _ = drive_op(
        ops.get_job(V, PREEMPTED_THEN_COMPLETED), [not_in_queue(), reply("slurmdb_job_preempted_requeued_pending")]
    )
    assert (job.state.base, job.restart_count) == ("PENDING", 1) and not job.state.is_terminal


@pytest.mark.parametrize("edit", [None, reversed_records])
def test_the_poller_batch_and_listings_keep_the_last_run(edit):
    (jobs, arrays), calls = drive_op(ops.accounted_jobs(V, ["48", "53"]), [reply("slurmdb_jobs_requeued", edit)])
    assert calls[0].path == f"/slurmdb/{V}/jobs/?step=48&step=53" and arrays == set()
    assert {k: (j.state.base, j.restart_count) for k, j in jobs.items() if k in ("48", "53")} == {
        "48": ("COMPLETED", 1),
        "53": ("COMPLETED", 1),
    }
    listed, _ = drive_op(ops.list_accounted_jobs(V, users="ciuser"), [reply("slurmdb_jobs_requeued", edit)])
    assert sorted(j.job_id for j in listed) == [48, 49, 50, 51, 52, 53]  # one record per job, as sacct shows
    assert {j.job_id: j.state.base for j in listed if j.job_id in (48, 53)} == {48: "COMPLETED", 53: "COMPLETED"}


def test_latest_runs_keeps_the_highest_restart_count_then_the_latest_submit():
    def job(restarts: int, submitted: int, state: str) -> SlurmJob:
        from datetime import datetime, timezone

        when = datetime.fromtimestamp(submitted, tz=timezone.utc)
        return SlurmJob(job_id=7, name="j", state=JobState(state), restart_count=restarts, submit_time=when)

    first, second = job(0, 100, "PREEMPTED"), job(1, 160, "COMPLETED")
    assert latest_runs([second, first]) == [second] and latest_runs([first, second]) == [second]
    # before v0.0.42 accounting has no restart_cnt: the requeue's submit time tells the runs apart
    older, newer = job(0, 100, "NODE_FAIL"), job(0, 160, "RUNNING")
    assert latest_runs([newer, older]) == [newer]


@pytest.mark.parametrize("edit", [None, reversed_records])
def test_a_retry_after_a_requeued_job_completed_and_left_the_queue_reattaches_to_it(edit):
    """Read by its first record, the job that COMPLETED on its second run looks PREEMPTED (the retry would
    run it again) or PENDING+REQUEUED (the retry would wait on a run that never comes)."""
    identity = TaskIdentity.of("d", "t", "r")
    name = identity.job_name("d.t")

    def named(body: dict[str, Any]) -> None:
        for record in body["jobs"]:
            if record["job_id"] in (PREEMPTED_THEN_COMPLETED, ADMIN_REQUEUED):
                record["name"] = name
        if edit is not None:
            edit(body)

    empty_queue = copy.deepcopy(recorded("jobs_list"))
    empty_queue["jobs"] = []
    found, _ = drive_op(
        find_task_jobs(V, identity, name=name, require_accounting=True),
        [SlurmReply.from_structured(200, empty_queue), reply("slurmdb_jobs_requeued", named)],
    )
    assert [(j.job_id, j.state.base, j.restart_count) for j in found] == [(53, "COMPLETED", 1), (48, "COMPLETED", 1)]
    assert reusable(found) is found[0]


def test_the_wait_says_when_the_job_it_follows_was_requeued():
    _, body = recorded_requeue("job_preempted_requeued_pending")
    pending = SlurmJob.from_job_info(body["jobs"][0], V)
    watch = JobWatch(48)
    assert watch.observe(pending) == [
        "Slurm job 48 was requeued (restart 1): following its next run",
        "Slurm job 48: PENDING (BeginTime)",
    ]
    assert watch.observe(pending) == []  # said once
    _, body = recorded_requeue("job_preempted_requeued_completed")
    completed = SlurmJob.from_job_info(body["jobs"][0], V)
    assert watch.observe(completed) == ["Slurm job 48: COMPLETED, elapsed 1s"]  # its second run's
    assert "ended COMPLETED, requeued 1 time, exit code 0" in outcome_text(completed)
    assert (
        completed.summary()["restart_count"] == 1
        and "restart_count" not in SlurmJob(1, "", JobState("COMPLETED")).summary()
    )


def test_the_deferred_wait_tells_a_requeue_from_bare_states():
    """The trigger's batched ``jobs/state`` poll has no restart count: a job seen started, then PENDING,
    was requeued (``jobs/state`` said ``PENDING`` for job 48 right after its preemption)."""
    _, body = recorded_requeue("jobs_state_preempted_requeued_pending")
    (entry,) = body["jobs"]
    requeued = JobState.parse(entry["state"])
    watch = JobWatch(48)
    assert watch.observe_state(48, JobState("PENDING")) == ["Slurm job 48: PENDING"]  # not started yet
    assert watch.observe_state(48, JobState("RUNNING")) == ["Slurm job 48: RUNNING"]
    assert watch.observe_state(48, requeued) == [
        "Slurm job 48 was requeued: following its next run",
        "Slurm job 48: PENDING",
    ]
    assert watch.observe_state(48, JobState("PENDING")) == []
    assert watch.observe_state(48, JobState("RUNNING")) == ["Slurm job 48: RUNNING"]
    assert watch.observe_state(48, JobState("COMPLETED")) == ["Slurm job 48: COMPLETED"]
    assert watch.requeues == 1
    # a job neither the queue nor accounting knows yet is not a run that started
    fresh = JobWatch(49)
    assert fresh.observe_state(49, JobState("PENDING"), unrecorded=True) == ["Slurm job 49: PENDING"]
    assert fresh.observe_state(49, JobState("PENDING")) == []


@pytest.mark.parametrize(
    ("name", "kind", "state", "signal"),
    [
        ("job_preempted", failures.SlurmJobPreemptedError, "PREEMPTED", 15),
        ("slurmdb_job_preempted", failures.SlurmJobPreemptedError, "PREEMPTED", 15),  # the batch step's SIGTERM
        ("job_node_fail", failures.SlurmNodeFailureError, "NODE_FAIL", 1),
        ("slurmdb_job_node_fail", failures.SlurmNodeFailureError, "NODE_FAIL", None),  # accounting: ERROR/1
    ],
)
def test_a_preempted_job_not_requeued_and_a_node_failure_fail_with_their_types(name, kind, state, signal):
    _, body = recorded_requeue(name)
    record = body["jobs"][0]
    job = SlurmJob.from_slurmdb(record, V) if name.startswith("slurmdb") else SlurmJob.from_job_info(record, V)
    error = failure_error(job)
    assert type(error) is kind and error.retryable
    assert (error.state, error.exit_signal) == (state, signal)
