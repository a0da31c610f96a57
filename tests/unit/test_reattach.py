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


def accounted(*states: str) -> SlurmReply:
    body = copy.deepcopy(recorded("slurmdb_job"))
    template = body["jobs"][0]
    body["jobs"] = []
    for n, state in enumerate(states, start=1):
        record = copy.deepcopy(template)
        record.update(job_id=n)
        record["state"]["current"] = [state]
        record["comment"]["job"] = TAG
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
    outcome, _ = drive(submit_once(V, SPEC, TAG, first_try=True), [active(), down, named("submit")])
    assert not outcome.reattached
    with pytest.raises(SlurmAccountingUnavailableError):
        drive(submit_once(V, SPEC, TAG, first_try=False), [active(), down])


def test_reattach_off_submits_straight_away():
    outcome, calls = drive(submit_once(V, SPEC, TAG, reattach=False), [named("submit")])
    assert len(calls) == 1 and not outcome.reattached
