"""Job arrays in the protocol core: one outcome for all tasks, on replies recorded from real Slurm 24.11."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.identity import TaskIdentity
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob, array_task_count
from airflow_provider_slurmapi.api.operations import accounted_jobs
from airflow_provider_slurmapi.api.reattach import find_task_jobs, reusable
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.watch import JobWatch, failure_error, outcome_text
from tests.fixtures import drive_op, recorded_array

V = "v0.0.42"


def reply(name: str, edit: Any = None) -> SlurmReply:
    status, body = recorded_array(name)
    if edit is not None:
        body = copy.deepcopy(body)
        edit(body)
    return SlurmReply.from_structured(status, body)


def test_pending_array_is_one_record_standing_for_every_task():
    array, calls = drive_op(ops.get_job(V, 11), [reply("job_pending")])
    assert isinstance(array, SlurmArrayJob) and len(calls) == 1
    assert array.state == JobState("PENDING") and not array.state.is_terminal
    assert array.task_count == 3 and array.describe_state() == "3 PENDING"
    (pending,) = array.tasks
    assert pending.display_id == "11_[0-2%1]" and pending.standard_output == ""


def test_running_array_counts_tasks_per_state():
    array, calls = drive_op(ops.get_job(V, 11), [reply("job_running_partial")])
    assert len(calls) == 1  # nothing has ended: accounting is not asked
    assert array.state.base == "RUNNING" and array.describe_state() == "1 RUNNING, 2 PENDING"
    assert JobWatch(11).observe(array) == ["Slurm array job 11: 1 RUNNING, 2 PENDING, elapsed " + _elapsed(array)]


def _elapsed(job: SlurmJob) -> str:
    from airflow_provider_slurmapi.api.watch import format_duration

    return format_duration(job.elapsed.total_seconds() if job.elapsed else None)


def test_finished_array_with_a_failed_task_names_it():
    array, calls = drive_op(ops.get_job(V, 11), [reply("job_done"), reply("slurmdb_job_done")])
    assert [c.path for c in calls] == ["/slurm/v0.0.42/job/11", "/slurmdb/v0.0.42/job/11"]
    assert array.state.is_terminal and not array.state.is_success and not array.state.is_retryable_failure
    assert array.state.base == "FAILED" and array.exit_code.return_code == 3
    text = outcome_text(array)
    assert text.startswith("Slurm array job 11 (arr) failed: task 11_1 FAILED (exit code 3); 2 of 3 tasks COMPLETED")
    assert text.endswith("output: /home/ciuser/arr-11_1.out")
    error = failure_error(array)
    assert not error.retryable and "task 11_1 FAILED (exit code 3)" in str(error)
    summary = array.summary()
    assert summary["state"] == "FAILED" and summary["array_task_count"] == 3
    assert summary["array_tasks_completed"] == 2
    tasks = {t["display_id"]: t for t in summary["tasks"]}
    assert list(tasks) == ["11_0", "11_1", "11_2"]
    assert tasks["11_1"]["state"] == "FAILED" and tasks["11_1"]["exit_code"] == 3
    assert tasks["11_0"]["standard_output"] == "/home/ciuser/arr-11_0.out"


def test_tasks_that_left_the_queue_are_read_from_accounting():
    def only_task_2(body):  # task 0 and task 1 (the failed one) were purged already
        body["jobs"] = [j for j in body["jobs"] if j["job_id"] == 11]

    array, _ = drive_op(ops.get_job(V, 11), [reply("job_done", only_task_2), reply("slurmdb_job_done")])
    assert array.task_count == 3 and [t.source for t in array.tasks] == ["slurmdb", "slurmdb", "slurm"]
    assert array.state.base == "FAILED" and "task 11_1 FAILED" in outcome_text(array)


def test_purged_array_comes_from_accounting_alone():
    array, calls = drive_op(ops.get_job(V, 11), [reply("job_purged"), reply("slurmdb_job_done")])
    assert len(calls) == 2 and array.source == "slurmdb"
    assert array.state.base == "FAILED" and array.completed_count == 2


def test_all_tasks_completed_is_success():
    def all_ok(body):
        for job in body["jobs"]:
            job["state"]["current"] = ["COMPLETED"]
            job["exit_code"]["return_code"]["number"] = 0

    array, _ = drive_op(ops.get_job(V, 11), [reply("job_purged"), reply("slurmdb_job_done", all_ok)])
    assert array.state.is_success and array.exit_code.return_code == 0
    assert outcome_text(array).startswith("Slurm array job 11 (arr) ended COMPLETED: 3 of 3 tasks COMPLETED")


def test_accounting_pending_bitmap_and_cancelled_pending_record():
    pending, _ = drive_op(ops.get_job(V, 11), [reply("job_purged"), reply("slurmdb_job_pending")])
    assert pending.tasks[0].array_task_string == "0-2" and pending.task_count == 3
    cancelled, _ = drive_op(ops.get_job(V, 15), [reply("job_cancelled"), reply("slurmdb_job_cancelled")])
    assert cancelled.state.base == "CANCELLED" and cancelled.task_count == 3
    text = outcome_text(cancelled)
    assert "tasks 15_0 CANCELLED" in text and "15_[1-2%1] CANCELLED" in text and "0 of 3 tasks COMPLETED" in text


def test_one_task_by_its_id_is_a_plain_job():
    task, _ = drive_op(ops.get_job(V, "11_1"), [reply("job_done")])
    assert not isinstance(task, SlurmArrayJob) and task.display_id == "11_1" and task.state.base == "FAILED"


def _task(task_id: int, state: str) -> SlurmJob:
    return SlurmJob(job_id=100 + task_id, name="a", state=JobState(state), array_job_id=7, array_task_id=task_id)


@pytest.mark.parametrize(
    ("states", "base", "retryable"),
    [
        (["COMPLETED", "NODE_FAIL", "PREEMPTED"], "NODE_FAIL", True),  # every failure the cluster's
        (["NODE_FAIL", "FAILED", "COMPLETED"], "FAILED", False),  # one of the job's own: no retry
        (["TIMEOUT", "COMPLETED"], "TIMEOUT", False),
        (["COMPLETED", "RUNNING"], "RUNNING", False),
        (["PENDING", "COMPLETED"], "PENDING", False),
        (["COMPLETED", "COMPLETED"], "COMPLETED", False),
    ],
)
def test_array_state_and_retryable_rule(states, base, retryable):
    array = SlurmArrayJob.of(7, [_task(i, s) for i, s in enumerate(states)])
    assert array.state.base == base
    assert array.state.is_retryable_failure is retryable
    if array.state.is_terminal and not array.state.is_success:
        assert failure_error(array).retryable is retryable


def test_many_failed_tasks_are_counted_after_the_first_ten():
    array = SlurmArrayJob.of(7, [_task(i, "FAILED") for i in range(25)])
    text = outcome_text(array)
    assert "7_9 FAILED" in text and "7_10" not in text and "and 15 more; 0 of 25 tasks COMPLETED" in text


@pytest.mark.parametrize(
    ("text", "count"), [("0-2", 3), ("[2-5%2]", 4), ("1-9:2", 5), ("1,4", 2), ("0x7", 3), ("nope", None)]
)
def test_array_task_count(text, count):
    assert array_task_count(text) == count


def test_poller_accounting_batch_tells_arrays_apart():
    (jobs, arrays), calls = drive_op(accounted_jobs(V, ["11", "12"]), [reply("slurmdb_jobs_step")])
    assert calls[0].path == "/slurmdb/v0.0.42/jobs/?step=11&step=12"
    assert set(jobs) == {"12"} and arrays == {"11"}


def test_reattach_sees_an_array_as_one_job():
    identity = TaskIdentity.of("d", "t", "r")
    name = identity.job_name("d.t")

    def named(body):
        for job in body["jobs"]:
            job["name"] = name

    found, _ = drive_op(
        find_task_jobs(V, identity, name=name, require_accounting=True),
        [reply("job_done", named), reply("slurmdb_job_done", named)],
    )
    (array,) = found
    assert isinstance(array, SlurmArrayJob) and array.job_id == 11 and array.task_count == 3
    assert reusable(found) is None  # a failed task: the retry submits a new array
    running, _ = drive_op(
        find_task_jobs(V, identity, name=name, require_accounting=True),
        [reply("job_running_partial", named), reply("slurmdb_job_running_partial", named)],
    )
    (first,) = running
    assert first.job_id == 11 and first.describe_state() == "1 RUNNING, 2 PENDING"
    assert reusable(running) is first
