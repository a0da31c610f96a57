"""Reattach decisions on recorded real replies whose comment carries a task-instance tag."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.errors import SlurmAccountingUnavailableError, SlurmTransportError
from airflow_provider_slurmapi.api.jobs import JobSpec
from airflow_provider_slurmapi.api.reattach import (
    SubmitOutcomeUnknownError,
    TaskTry,
    job_try,
    split_comment,
    submit_once,
    tagged_comment,
    task_instance_tag,
)
from tests.fixtures import recorded, recorded_status

V = "v0.0.42"
TAG = task_instance_tag("dag", "train", "manual__2026-01-01T00:00:00+00:00", -1)
SPEC = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/h", "name": "dag.train", "comment": TAG})


def active(*states: str, comment: str = TAG) -> SlurmReply:
    body = copy.deepcopy(recorded("job_running"))
    template = body["jobs"][0]
    body["jobs"] = []
    for n, state in enumerate(states, start=10):
        record = copy.deepcopy(template)
        record.update(job_id=n, job_state=[state], comment=comment)
        body["jobs"].append(record)
    return SlurmReply.from_structured(200, body)


def accounted(*states: str, comment: str = TAG) -> SlurmReply:
    body = copy.deepcopy(recorded("slurmdb_job"))
    template = body["jobs"][0]
    body["jobs"] = []
    for n, state in enumerate(states, start=1):
        record = copy.deepcopy(template)
        record.update(job_id=n)
        record["state"]["current"] = [state]
        record["comment"]["job"] = comment
        body["jobs"].append(record)
    return SlurmReply.from_structured(200, body)


def named(name: str) -> SlurmReply:
    return SlurmReply.from_structured(recorded_status(name), recorded(name))


def drive(op, answers: list[Any]):
    calls = []
    try:
        call = next(op)
        for answer in answers:
            calls.append(call)
            call = op.throw(answer) if isinstance(answer, Exception) else op.send(answer)
        raise AssertionError(f"operation wanted more calls; last {call}")
    except StopIteration as done:
        return done.value, calls


def test_tag_is_deterministic_and_bounded():
    assert TAG == "airflow-ti:dag/train/manual__2026-01-01T00:00:00+00:00/-1"
    assert len(task_instance_tag("d" * 300, "t", "r")) <= 240
    assert tagged_comment(TAG, "mine") == TAG + " mine"


def test_running_job_is_reattached_without_a_submit():
    outcome, calls = drive(submit_once(V, SPEC, TAG), [active("RUNNING"), accounted()])
    assert outcome.reattached and outcome.job_id == 10
    assert all(c.method == "GET" for c in calls)


def test_completed_job_in_accounting_is_reattached():
    outcome, _ = drive(submit_once(V, SPEC, TAG), [active(), accounted("COMPLETED")])
    assert outcome.reattached and outcome.job.state.is_success


def test_failed_earlier_job_is_resubmitted():
    outcome, calls = drive(submit_once(V, SPEC, TAG), [active(), accounted("FAILED"), named("submit")])
    assert not outcome.reattached and outcome.job_id == 1
    assert calls[-1].method == "POST"


def test_other_tasks_jobs_are_ignored():
    outcome, _ = drive(submit_once(V, SPEC, TAG), [active("RUNNING", comment=TAG + "0"), accounted(), named("submit")])
    assert not outcome.reattached


def test_lost_submit_reply_finds_the_job():
    lost = SlurmTransportError("reset", ambiguous=True)
    outcome, calls = drive(submit_once(V, SPEC, TAG), [active(), accounted(), lost, active("PENDING"), accounted()])
    assert outcome.reattached and outcome.job_id == 10
    assert [c.method for c in calls].count("POST") == 1


def test_lost_submit_reply_never_submits_twice():
    lost = SlurmTransportError("reset", ambiguous=True)
    with pytest.raises(SubmitOutcomeUnknownError, match="not submitted again"):
        drive(submit_once(V, SPEC, TAG), [active(), accounted(), lost, active(), accounted()])


def test_accounting_down_blocks_only_later_tries():
    down = named("slurmdb_job_slurmdbd_down")
    outcome, _ = drive(submit_once(V, SPEC, TAG, task_try=TaskTry(1)), [active(), down, named("submit")])
    assert not outcome.reattached
    with pytest.raises(SlurmAccountingUnavailableError):
        drive(submit_once(V, SPEC, TAG, task_try=TaskTry(2)), [active(), down])
    # The first try after a clear: no earlier try of its run can have submitted.
    outcome, _ = drive(submit_once(V, SPEC, TAG, task_try=TaskTry(4, run_start=4)), [active(), down, named("submit")])
    assert not outcome.reattached


def try_tag(n: int) -> str:
    return tagged_comment(TAG, "nightly", n)


def test_the_comment_records_the_try_and_keeps_the_users_comment():
    assert try_tag(3) == TAG + " try:3 nightly"
    assert split_comment(try_tag(3)) == (TAG, 3, "nightly")
    assert split_comment(tagged_comment(TAG, None, 12)) == (TAG, 12, "")
    assert split_comment(TAG + " trying hard") == (TAG, None, "trying hard")  # tagged before tries were recorded
    assert split_comment("a comment") == (None, None, "a comment")


@pytest.mark.parametrize(
    ("try_number", "max_tries", "retries", "run_start"),
    [
        (1, 2, 2, 1),  # first try
        (3, 2, 2, 1),  # the last retry of the first run
        (4, 5, 2, 4),  # cleared after try 3: Airflow set max_tries to 3 + retries
        (2, 1, 0, 2),  # no retries: try 2 can only come from a clear
        (2, None, 2, 1),  # max_tries unknown: every tagged job counts
        (2, 9, 0, 2),  # retries lowered since: never past this try
        ("x", "y", None, 1),
    ],
)
def test_the_run_of_tries_starts_after_the_last_clear(try_number, max_tries, retries, run_start):
    assert TaskTry.of(try_number, max_tries, retries).run_start == run_start


def test_an_earlier_runs_active_job_is_cancelled_and_the_cleared_task_submits_anew():
    outcome, calls = drive(
        submit_once(V, SPEC, TAG, task_try=TaskTry(4, run_start=4)),
        [active("RUNNING", comment=try_tag(3)), accounted(), named("cancel"), named("submit")],
    )
    assert [c.method for c in calls] == ["GET", "GET", "DELETE", "POST"]
    assert calls[2].path.endswith("/job/10")
    assert not outcome.reattached and outcome.cancelled == [10]
    assert any("earlier run" in note for note in outcome.notes)


def test_an_earlier_runs_completed_job_is_not_taken_for_this_run():
    outcome, calls = drive(
        submit_once(V, SPEC, TAG, task_try=TaskTry(3, run_start=3)),
        [active(), accounted("COMPLETED", comment=try_tag(2)), named("submit")],
    )
    assert not outcome.reattached and outcome.cancelled == []
    assert [c.method for c in calls] == ["GET", "GET", "POST"]


def test_a_job_of_this_run_is_reattached_on_a_retry():
    outcome, calls = drive(
        submit_once(V, SPEC, TAG, task_try=TaskTry(5, run_start=4)),
        [active("RUNNING", comment=try_tag(4)), accounted("COMPLETED", comment=try_tag(2))],
    )
    assert outcome.reattached and outcome.job_id == 10 and job_try(outcome.job) == 4
    assert all(c.method == "GET" for c in calls)


def test_a_job_tagged_without_a_try_is_still_reattached():
    outcome, _ = drive(submit_once(V, SPEC, TAG, task_try=TaskTry(4, run_start=4)), [active("RUNNING"), accounted()])
    assert outcome.reattached and outcome.job_id == 10


def test_reattach_off_submits_straight_away():
    outcome, calls = drive(submit_once(V, SPEC, TAG, reattach=False), [named("submit")])
    assert len(calls) == 1 and not outcome.reattached


def one_job(name: str, *, job_id: int, comment: str) -> SlurmReply:
    body = copy.deepcopy(recorded(name))
    body["jobs"][0].update(job_id=job_id, comment=comment)
    return SlurmReply.from_structured(recorded_status(name), body)


def test_a_job_recorded_by_an_earlier_try_is_reattached_with_one_call():
    outcome, calls = drive(
        submit_once(V, SPEC, TAG, task_try=TaskTry(2), known_job_id=42),
        [one_job("job_running", job_id=42, comment=try_tag(1))],
    )
    assert outcome.reattached and outcome.job_id == 42
    assert [(c.method, c.path) for c in calls] == [("GET", "/slurm/v0.0.42/job/42")]


@pytest.mark.parametrize(
    "why",
    ["another task's job (a reused id)", "failed", "of an earlier run (cleared since)", "unknown to Slurm"],
)
def test_a_recorded_job_that_cannot_be_reused_leaves_the_decision_to_the_search(why):
    known = {
        "another task's job (a reused id)": [one_job("job_running", job_id=42, comment="someone else's")],
        "failed": [one_job("job_failed", job_id=42, comment=try_tag(1))],
        "of an earlier run (cleared since)": [one_job("job_running", job_id=42, comment=try_tag(1))],
        "unknown to Slurm": [named("job_not_found"), named("slurmdb_job_not_found")],
    }[why]
    earlier = "earlier run" in why
    task_try = TaskTry(2, run_start=2) if earlier else TaskTry(2)
    search = [active("RUNNING", comment=try_tag(1)) if earlier else active(), accounted()]
    cancel = [named("cancel")] if earlier else []
    outcome, calls = drive(
        submit_once(V, SPEC, TAG, task_try=task_try, known_job_id=42), [*known, *search, *cancel, named("submit")]
    )
    assert not outcome.reattached and outcome.cancelled == ([10] if earlier else [])
    assert calls[-1].method == "POST"
