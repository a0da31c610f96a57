"""The sans-IO operations, driven with replies recorded from real Slurm (no network)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.envelope import Call, SlurmReply
from airflow_provider_slurmapi.api.errors import MalformedReplyError, SlurmJobNotFoundError, SlurmRequestRejectedError
from airflow_provider_slurmapi.api.spec import JobSpec
from tests.fixtures import drive_op, recorded, recorded_status

V = "v0.0.42"


def drive(op, replies: Iterable[str]) -> tuple[Any, list[Call]]:
    """Run ``op`` answering each call with the next recorded reply; return its result and the calls."""
    return drive_op(op, (SlurmReply.from_structured(recorded_status(name), recorded(name)) for name in replies))


def test_submit_returns_id_and_warnings():
    spec = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/tmp"})
    result, calls = drive(ops.submit_job(V, spec), ["submit_unknown_field"])
    assert result.job_id == 5
    assert "no_such_field" in result.warnings[0].description
    assert calls[0].method == "POST" and calls[0].path == "/slurm/v0.0.42/job/submit"


def test_submit_bad_partition_is_rejected():
    spec = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/tmp", "partition": "nope"})
    with pytest.raises(SlurmRequestRejectedError, match="Invalid partition name"):
        drive(ops.submit_job(V, spec), ["submit_bad_partition"])


def test_get_job_active_queue():
    job, calls = drive(ops.get_job(V, 1), ["job_running"])
    assert job.state.base == "RUNNING" and len(calls) == 1


@pytest.mark.parametrize("source", [["job_running"], ["job_not_found", "slurmdb_job"]], ids=["queue", "accounting"])
def test_a_reply_about_another_job_is_refused_not_read_as_the_one_asked_about(source):
    """``GET job/999`` answered with job 1's record (a proxy's mix-up, a hostile reply) is not job 999."""
    with pytest.raises(MalformedReplyError, match=r"the reply about Slurm job 999 holds no record of it .*job 1"):
        drive(ops.get_job(V, 999), source)
    job, _ = drive(ops.get_job(V, "0001"), source)  # the same job, however its id is spelt
    assert job.job_id == 1


def test_get_job_falls_back_to_slurmdb_on_404():
    job, calls = drive(ops.get_job(V, 1), ["job_not_found", "slurmdb_job"])
    assert [c.path for c in calls] == ["/slurm/v0.0.42/job/1", "/slurmdb/v0.0.42/job/1"]
    assert job.source == "slurmdb" and job.state.is_success


def test_get_job_not_anywhere_is_its_own_error():
    with pytest.raises(SlurmJobNotFoundError, match="neither in the active queue nor in accounting"):
        drive(ops.get_job(V, 999999), ["job_not_found", "slurmdb_job_not_found"])


def test_get_job_right_after_submit_is_not_yet_recorded():
    job, _ = drive(ops.get_job(V, 7, recently_submitted=True), ["job_not_found", "slurmdb_job_not_found"])
    assert job.state.base == "PENDING" and job.state_reason == "NotYetRecorded"


def test_cancel_running_job():
    result, calls = drive(ops.cancel_job(V, 2), ["cancel"])
    assert calls[0].method == "DELETE" and not result.already_finished


def test_cancel_finished_job_is_success():
    result, _ = drive(ops.cancel_job(V, 2), ["cancel_again"])
    assert result.already_finished


def test_cancel_purged_job_checks_accounting():
    result, calls = drive(ops.cancel_job(V, 1), ["cancel_not_found", "slurmdb_job"])
    assert result.already_finished and calls[1].path == "/slurmdb/v0.0.42/job/1"


def test_cancel_unknown_job_raises():
    with pytest.raises(SlurmJobNotFoundError, match="Invalid job id specified"):
        drive(ops.cancel_job(V, 999999), ["cancel_not_found", "slurmdb_job_not_found"])


def test_job_states_batch():
    states, calls = drive(ops.job_states(V, [1, 2, 3]), ["jobs_state"])
    assert calls[0].path == "/slurm/v0.0.42/jobs/state/?job_id=1&job_id=2&job_id=3"
    assert {k: str(v) for k, v in states.items()} == {"1": "COMPLETED", "2": "CANCELLED", "3": "FAILED"}


def test_list_jobs_and_ping():
    jobs, _ = drive(ops.list_jobs(V), ["jobs_list"])
    assert len(jobs) == 2
    pong, _ = drive(ops.ping(V), ["ping"])
    assert pong.release == "24.11.5" and pong.responding and pong.cluster == "ci"


def test_job_states_batch_of_string_ids_and_array_tasks():
    # The shared poller passes its ids as strings; an array task's id keeps its "_".
    _, calls = drive(ops.job_states(V, ["1", "2", "7_3", " 4 "]), ["jobs_state"])
    assert calls[0].path == "/slurm/v0.0.42/jobs/state/?job_id=1&job_id=2&job_id=7_3&job_id=4"


@pytest.mark.parametrize("job_id", ["0", "000", "\uff11\uff12", "1 2", "12&job_id=3", "", "-3"])
def test_bad_string_ids_are_refused_in_a_batch(job_id):
    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

    with pytest.raises(SlurmJobSpecError, match="job_id"):
        next(ops.job_states(V, ["5", job_id]))


@pytest.mark.parametrize("job_id", ["1/../../x", -1, "abc", 0, True, None, 1.5, "12_x"])
def test_bad_job_ids_are_refused_before_sending(job_id):
    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

    with pytest.raises(SlurmJobSpecError, match="job_id"):
        next(ops.get_job(V, job_id))


def test_queued_jobs_reads_several_ended_jobs_with_one_call_and_one_with_a_get():
    jobs, calls = drive(ops.queued_jobs(V, ["1", "2", "99"]), ["jobs_list"])
    assert [c.path for c in calls] == ["/slurm/v0.0.42/jobs/"]
    assert sorted(jobs) == ["1", "2"] and jobs["1"].state.base == "COMPLETED"  # 99 has left the queue
    one, calls = drive(ops.queued_jobs(V, ["1"]), ["job_completed"])
    assert [c.path for c in calls] == ["/slurm/v0.0.42/job/1"] and list(one) == ["1"]
