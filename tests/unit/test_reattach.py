"""Reattach decisions on recorded real replies whose job name carries the task instance's identity."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    SlurmAccountingUnavailableError,
    SlurmApiError,
    SlurmTransportError,
)
from airflow_provider_slurmapi.api.identity import (
    MAX_JOB_NAME,
    TaskIdentity,
    TaskTry,
    split_comment,
    tagged_comment,
    task_instance_tag,
)
from airflow_provider_slurmapi.api.reattach import SubmitOutcomeUnknownError, submit_once
from airflow_provider_slurmapi.api.spec import JobSpec
from tests.fixtures import recorded, recorded_status

V = "v0.0.42"
TAG = task_instance_tag("dag", "train", "manual__2026-01-01T00:00:00+00:00", -1)
RUN_ID = "manual__2026-01-01T00:00:00+00:00"
ME = "ciuser"  # the user of every recorded real job


def ident(number: int = 1, run_start: int = 1) -> TaskIdentity:
    return TaskIdentity.of("dag", "train", RUN_ID, -1, TaskTry(number, run_start))


def spec(identity: TaskIdentity | None = None) -> JobSpec:
    name = (identity or ident()).job_name("dag.train")
    return JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/h", "name": name, "comment": TAG})


SPEC = spec()
NAME = SPEC.job["name"]


def active(*states: str, name: str = NAME, user: str = ME) -> SlurmReply:
    body = copy.deepcopy(recorded("job_running"))
    template = body["jobs"][0]
    body["jobs"] = []
    for n, state in enumerate(states, start=10):
        record = copy.deepcopy(template)
        record.update(job_id=n, job_state=[state], name=name, user_name=user, comment="")
        body["jobs"].append(record)
    return SlurmReply.from_structured(200, body)


def accounted(*states: str, name: str = NAME, user: str = ME) -> SlurmReply:
    """Accounting as real Slurm keeps it by default: the name and user, no comment."""
    body = copy.deepcopy(recorded("slurmdb_job"))
    template = body["jobs"][0]
    body["jobs"] = []
    for n, state in enumerate(states, start=1):
        record = copy.deepcopy(template)
        record.update(job_id=n, name=name, user=user)
        record["state"]["current"] = [state]
        record["comment"]["job"] = ""
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


def test_the_identity_ends_the_job_name_readably_and_bounded():
    identity = ident()
    assert NAME.startswith("dag.train~af") and NAME.endswith("r1") and identity.job_name("dag.train") == NAME
    assert identity.suffix == "~af" + identity.digest + "r1" and len(identity.digest) == 12
    assert ident(5, 4).job_name("x").endswith("r4")  # the run, not the try: a retry finds its run's jobs
    assert ident(1).digest == ident(3, 2).digest  # one task instance, whatever the try
    assert TaskIdentity.of("dag", "train", RUN_ID, 0).digest != ident().digest  # a mapped task is another
    long = identity.job_name("n" * 500)
    assert len(long) == MAX_JOB_NAME and long.endswith(identity.suffix)
    assert identity.job_name("my job,v2 'x'").startswith("my_job_v2__x_~af")  # safe for accounting's filter


def test_the_search_asks_accounting_for_this_runs_exact_name():
    _, calls = drive(submit_once(V, SPEC, ident(), user=ME), [active(), accounted(), named("submit")])
    assert calls[1].path == f"/slurmdb/{V}/jobs/?job_name={NAME}"


def test_running_job_is_reattached_without_a_submit():
    outcome, calls = drive(submit_once(V, SPEC, ident(), user=ME), [active("RUNNING"), accounted()])
    assert outcome.reattached and outcome.job_id == 10
    assert all(c.method == "GET" for c in calls)


def test_completed_job_in_accounting_without_its_comment_is_reattached():
    outcome, _ = drive(submit_once(V, SPEC, ident(2), user=ME), [active(), accounted("COMPLETED")])
    assert outcome.reattached and outcome.job.state.is_success and outcome.job.comment == ""


def test_failed_earlier_job_is_resubmitted():
    outcome, calls = drive(submit_once(V, SPEC, ident(2), user=ME), [active(), accounted("FAILED"), named("submit")])
    assert not outcome.reattached and outcome.job_id == 1
    assert calls[-1].method == "POST"


def test_other_tasks_jobs_are_ignored():
    other = TaskIdentity.of("dag", "train", "another-run").job_name("dag.train")
    outcome, _ = drive(
        submit_once(V, SPEC, ident(), user=ME), [active("RUNNING", name=other), accounted(), named("submit")]
    )
    assert not outcome.reattached


def test_a_name_that_only_contains_the_identity_is_another_job():
    outcome, _ = drive(
        submit_once(V, SPEC, ident(), user=ME), [active("RUNNING", name=NAME + "-copy"), accounted(), named("submit")]
    )
    assert not outcome.reattached


@pytest.mark.parametrize("where", ["queue", "accounting"])
def test_another_users_job_with_the_tasks_name_is_never_reattached(where):
    queue = active("RUNNING", user="mallory") if where == "queue" else active()
    db = accounted("COMPLETED", user="mallory") if where == "accounting" else accounted()
    op = submit_once(V, SPEC, ident(2), user=ME)
    outcome, _ = drive(op, [queue, db, named("submit")])
    assert not outcome.reattached


def probe(user: str = ME) -> list[SlurmReply]:
    """What Slurm answers the held job that tells the caller its user: submitted, read, cancelled."""
    job = copy.deepcopy(recorded("job_pending"))
    job["jobs"][0].update(job_id=1, user_name=user)
    return [named("submit"), SlurmReply.from_structured(200, job), named("cancel")]


@pytest.mark.parametrize("older", ["mine", "theirs"])
def test_with_the_user_unknown_it_is_learnt_from_a_held_job_before_any_job_is_taken(older):
    """Without slurm_user, whose job is whose is learnt from a job the caller certainly submitted: a held
    one, named at random, cancelled at once. Another user's job under the task's name is never taken,
    even when it is the older one (submitted under the predicted name before the task's first try)."""
    theirs = "RUNNING" if older == "theirs" else None
    queue = active("RUNNING", user="mallory")  # job 10
    db = accounted("COMPLETED") if older == "mine" else accounted()  # job 1 (older), ours
    answers = [queue, db, *probe()] + ([named("submit")] if theirs else [])
    outcome, calls = drive(submit_once(V, SPEC, ident(2)), answers)
    assert outcome.user == ME
    probe_submit = calls[2]
    assert probe_submit.method == "POST" and probe_submit.body["job"]["hold"] is True
    assert (
        probe_submit.body["job"]["name"].startswith("slurmapi-whoami-") and len(probe_submit.body["job"]["name"]) == 32
    )
    assert (calls[3].method, calls[4].method) == ("GET", "DELETE")
    if older == "mine":
        assert outcome.reattached and outcome.job_id == 1 and outcome.job.user == ME
    else:
        assert not outcome.reattached and calls[-1].method == "POST"  # its own job, not mallory's 10


def test_no_job_under_the_tasks_name_needs_no_held_job():
    outcome, calls = drive(submit_once(V, SPEC, ident()), [active(), accounted(), named("submit")])
    assert not outcome.reattached and [c.method for c in calls] == ["GET", "GET", "POST"] and outcome.user is None


def test_an_earlier_runs_active_job_of_another_user_is_not_cancelled():
    earlier = ident(3, 3).job_name("dag.train")
    outcome, calls = drive(
        submit_once(V, spec(ident(4, 4)), ident(4, 4), user=ME),
        [active("RUNNING", name=earlier, user="mallory"), accounted(), named("submit")],
    )
    assert [c.method for c in calls] == ["GET", "GET", "POST"] and outcome.cancelled == []


@pytest.mark.parametrize(
    "error",
    [
        SlurmTransportError("reset", ambiguous=True),
        GoogleApiError(503, "UNAVAILABLE", "after the submit"),
        GoogleApiError(504, "DEADLINE_EXCEEDED", "slow"),
        GoogleApiError(500, "INTERNAL", "oops"),
        GoogleApiError(500, "UNKNOWN", "?"),
        GoogleApiError(502, "", "bad gateway"),
    ],
    ids=["reset", "unavailable", "deadline", "internal", "unknown", "502"],
)
def test_a_submit_of_unknown_fate_is_looked_for_not_resent(error):
    outcome, calls = drive(
        submit_once(V, SPEC, ident(), user=ME), [active(), accounted(), error, active("PENDING"), accounted()]
    )
    assert outcome.reattached and outcome.job_id == 10
    assert [c.method for c in calls].count("POST") == 1
    with pytest.raises(SubmitOutcomeUnknownError, match="not submitted again"):
        drive(submit_once(V, SPEC, ident(), user=ME), [active(), accounted(), error, active(), accounted()])


def test_reattach_off_still_looks_after_a_submit_of_unknown_fate():
    lost = GoogleApiError(503, "UNAVAILABLE", "after the submit")
    outcome, calls = drive(
        submit_once(V, SPEC, ident(), reattach=False, user=ME), [lost, active("RUNNING"), accounted()]
    )
    assert outcome.reattached and [c.method for c in calls] == ["POST", "GET", "GET"]


@pytest.mark.parametrize(
    "error",
    [
        GoogleApiError(400, "INVALID_ARGUMENT", "bad path"),
        GoogleApiError(403, "PERMISSION_DENIED", "no"),
        GoogleApiError(404, "NOT_FOUND", "no cluster"),
        SlurmTransportError("refused"),
        SlurmApiError("Slurm refused it", http_status=500),
    ],
    ids=["400", "403", "404", "refused", "slurm-error"],
)
def test_a_submit_that_certainly_did_nothing_is_not_looked_for(error):
    with pytest.raises(type(error)):
        drive(submit_once(V, SPEC, ident(), user=ME), [active(), accounted(), error])


def test_accounting_down_blocks_only_later_tries():
    down = named("slurmdb_job_slurmdbd_down")
    outcome, _ = drive(submit_once(V, SPEC, ident(1), user=ME), [active(), down, named("submit")])
    assert not outcome.reattached
    with pytest.raises(SlurmAccountingUnavailableError):
        drive(submit_once(V, SPEC, ident(2), user=ME), [active(), down])
    # The first try after a clear: no earlier try of its run can have submitted.
    cleared = ident(4, 4)
    outcome, _ = drive(submit_once(V, spec(cleared), cleared, user=ME), [active(), down, named("submit")])
    assert not outcome.reattached


def try_tag(n: int) -> str:
    return tagged_comment(TAG, "nightly", n)


def test_the_comment_records_the_try_and_keeps_the_users_comment():
    assert try_tag(3) == TAG + " try:3 nightly"
    assert split_comment(try_tag(3)) == (TAG, 3, "nightly")
    assert split_comment(tagged_comment(TAG, None, 12)) == (TAG, 12, "")
    assert split_comment(TAG + " trying hard") == (TAG, None, "trying hard")  # tagged before tries were recorded
    assert split_comment("a comment") == (None, None, "a comment")
    assert len(task_instance_tag("d" * 300, "t", "r")) <= 240


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
    cleared = ident(4, 4)
    outcome, calls = drive(
        submit_once(V, spec(cleared), cleared, user=ME),
        [active("RUNNING", name=ident(3, 1).job_name("dag.train")), accounted(), named("cancel"), named("submit")],
    )
    assert [c.method for c in calls] == ["GET", "GET", "DELETE", "POST"]
    assert calls[2].path.endswith("/job/10")
    assert not outcome.reattached and outcome.cancelled == [10]
    assert any("earlier run" in note for note in outcome.notes)


def test_an_earlier_runs_completed_job_is_not_taken_for_this_run():
    # Accounting is searched by this run's exact name: an earlier run's job is not in its answer.
    cleared = ident(3, 3)
    outcome, calls = drive(submit_once(V, spec(cleared), cleared, user=ME), [active(), accounted(), named("submit")])
    assert not outcome.reattached and outcome.cancelled == []
    assert [c.method for c in calls] == ["GET", "GET", "POST"]


def test_a_job_of_this_run_is_reattached_on_a_retry():
    retry = ident(5, 4)
    outcome, calls = drive(
        submit_once(V, spec(retry), retry, user=ME),
        [active("RUNNING", name=ident(4, 4).job_name("dag.train")), accounted()],
    )
    assert outcome.reattached and outcome.job_id == 10
    assert all(c.method == "GET" for c in calls)


def test_reattach_off_submits_straight_away():
    outcome, calls = drive(submit_once(V, SPEC, ident(), reattach=False, user=ME), [named("submit")])
    assert len(calls) == 1 and not outcome.reattached


def test_a_spec_without_the_identity_is_refused():
    plain = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/h", "name": "dag.train"})
    with pytest.raises(ValueError, match="identity"):
        next(submit_once(V, plain, ident()))


def one_job(name: str, *, job_id: int, job_name: str = NAME, user: str = ME) -> SlurmReply:
    body = copy.deepcopy(recorded(name))
    body["jobs"][0].update(job_id=job_id, name=job_name, user_name=user)
    return SlurmReply.from_structured(recorded_status(name), body)


def test_a_job_recorded_by_an_earlier_try_is_reattached_with_one_call():
    outcome, calls = drive(
        submit_once(V, SPEC, ident(2), known_job_id=42, user=ME), [one_job("job_running", job_id=42)]
    )
    assert outcome.reattached and outcome.job_id == 42
    assert [(c.method, c.path) for c in calls] == [("GET", "/slurm/v0.0.42/job/42")]


def test_the_recorded_job_names_the_callers_user_for_the_search():
    # The recorded job failed; the search then refuses a newer copy of its name by another user.
    outcome, calls = drive(
        submit_once(V, SPEC, ident(2), known_job_id=42, user=ME),
        [one_job("job_failed", job_id=42), active("RUNNING", user="mallory"), accounted(), named("submit")],
    )
    assert not outcome.reattached and calls[-1].method == "POST"


@pytest.mark.parametrize(
    "why",
    ["another task's job (a reused id)", "failed", "of an earlier run (cleared since)", "unknown to Slurm"],
)
def test_a_recorded_job_that_cannot_be_reused_leaves_the_decision_to_the_search(why):
    earlier_name = ident(1, 1).job_name("dag.train")
    known = {
        "another task's job (a reused id)": [one_job("job_running", job_id=42, job_name="someone-else")],
        "failed": [one_job("job_failed", job_id=42)],
        "of an earlier run (cleared since)": [one_job("job_running", job_id=42, job_name=earlier_name)],
        "unknown to Slurm": [named("job_not_found"), named("slurmdb_job_not_found")],
    }[why]
    earlier = "earlier run" in why
    identity = ident(2, 2) if earlier else ident(2)
    search = [active("RUNNING", name=earlier_name) if earlier else active(), accounted()]
    cancel = [named("cancel")] if earlier else []
    outcome, calls = drive(
        submit_once(V, spec(identity), identity, known_job_id=42, user=ME), [*known, *search, *cancel, named("submit")]
    )
    assert not outcome.reattached and outcome.cancelled == ([10] if earlier else [])
    assert calls[-1].method == "POST"


def test_a_held_job_whose_submit_reply_was_lost_is_found_by_its_random_name_and_cancelled():
    from airflow_provider_slurmapi.api.reattach import caller_user

    op = caller_user(V, SPEC)
    submit = next(op)
    assert submit.body is not None
    name = submit.body["job"]["name"]
    listing = active("PENDING", name=name, user=ME)  # job 10, ours
    copy_of_it = active("PENDING", name=name, user="mallory")  # a later copy of the name: job 10 too, replaced
    copy_of_it.body["jobs"][0]["job_id"] = 11
    listing.body["jobs"].append(copy_of_it.body["jobs"][0])
    read = op.throw(GoogleApiError(503, "UNAVAILABLE", "after the submit"))
    assert read.method == "GET" and read.path == f"/slurm/{V}/jobs/"
    get = op.send(listing)
    assert get.path == f"/slurm/{V}/job/10"
    one = copy.deepcopy(recorded("job_pending"))
    one["jobs"][0].update(job_id=10, user_name=ME, name=name)
    cancel = op.send(SlurmReply.from_structured(200, one))
    assert (cancel.method, cancel.path) == ("DELETE", f"/slurm/{V}/job/10")
    with pytest.raises(StopIteration) as done:
        op.send(named("cancel"))
    assert done.value.value == ME
