"""REST v0.0.45: the sans-IO operations driven with replies recorded from real slurmrestd 26.05.5.

tests/fixtures/slurm-26.05 (tests/real_slurm/record_fixtures.py): job 1 ``sleep 4`` completed, 2 exited 3,
3 cancelled while running, 4 the unknown-field submit, array 5 ``0-2`` whose task 1 failed (tasks 5, 6, 7).
What changed from v0.0.44 for what the provider reads: nothing it depends on. ``/slurmdb`` records add
``sluid``/``original_sluid``/``exclusive``/``oversubscribe``, job_info drops ``power`` and adds
``step_id`` (with the job's ``sluid``), ``stdout_expanded`` and friends (as from v0.0.43).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.envelope import Call, SlurmReply
from airflow_provider_slurmapi.api.errors import SlurmJobNotFoundError, SlurmRequestRejectedError
from airflow_provider_slurmapi.api.jobs import SlurmJob, array_tasks
from airflow_provider_slurmapi.api.spec import JobSpec
from tests.fixtures import drive_op, recorded, recorded_status

V = "v0.0.45"
RELEASE = "26.05"


def reply(name: str) -> SlurmReply:
    return SlurmReply.from_structured(recorded_status(name, RELEASE), recorded(name, RELEASE))


def drive(op: Any, replies: Iterable[str]) -> tuple[Any, list[Call]]:
    return drive_op(op, (reply(name) for name in replies))


def test_submit_reads_the_job_id_and_the_warnings():
    spec = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/tmp"})
    result, calls = drive(ops.submit_job(V, spec), ["submit_unknown_field"])
    assert result.job_id == 4 and "no_such_field" in result.warnings[0].description
    assert calls[0].path == "/slurm/v0.0.45/job/submit"


def test_submit_to_a_bad_partition_is_rejected():
    spec = JobSpec.build("#!/bin/bash\ntrue", {"current_working_directory": "/tmp", "partition": "nope"})
    with pytest.raises(SlurmRequestRejectedError, match="Invalid partition name"):
        drive(ops.submit_job(V, spec), ["submit_bad_partition"])


@pytest.mark.parametrize(
    ("name", "job_id", "state"),
    [
        ("job_pending", 1, "PENDING"),
        ("job_running", 1, "RUNNING"),
        ("job_completed", 1, "COMPLETED"),
        ("job_failed", 2, "FAILED"),
    ],
)
def test_job_info_states(name, job_id, state):
    job, calls = drive(ops.get_job(V, job_id), [name])
    assert str(job.state) == state and job.source == "slurm" and calls[0].path == f"/slurm/v0.0.45/job/{job_id}"


def test_job_info_reads_exit_code_and_the_expanded_output_path():
    failed, _ = drive(ops.get_job(V, 2), ["job_failed"])
    assert failed.exit_code.return_code == 3 and failed.state_reason == "NonZeroExitCode"
    done, _ = drive(ops.get_job(V, 1), ["job_completed"])
    # v0.0.43+: standard_output is the pattern (slurm-%j.out), stdout_expanded the path
    assert done.standard_output == "/home/ciuser/slurm-1.out"
    assert done.elapsed is not None and done.partition == "debug" and done.user == "ciuser"


def test_a_purged_job_is_read_from_accounting_with_its_sluid_kept():
    job, calls = drive(ops.get_job(V, 1), ["job_not_found", "slurmdb_job_completed"])
    assert [c.path for c in calls] == ["/slurm/v0.0.45/job/1", "/slurmdb/v0.0.45/job/1"]
    assert job.source == "slurmdb" and job.state.is_success
    assert job.standard_output == "/home/ciuser/slurm-1.out"
    assert job.raw["sluid"] == recorded("job_completed", RELEASE)["jobs"][0]["step_id"]["sluid"]


def test_accounting_reads_failed_and_cancelled_jobs():
    failed, _ = drive(ops.get_job(V, 2), ["job_not_found", "slurmdb_job_failed_failed"])
    assert str(failed.state) == "FAILED" and failed.exit_code.return_code == 3
    cancelled, _ = drive(ops.get_job(V, 3), ["job_not_found", "slurmdb_job_cancelled_cancelled"])
    assert cancelled.state.base == "CANCELLED"


def test_not_anywhere_is_its_own_error():
    with pytest.raises(SlurmJobNotFoundError, match="neither in the active queue nor in accounting"):
        drive(ops.get_job(V, 999999), ["job_not_found", "slurmdb_job_not_found"])


def test_cancel_running_finished_and_unknown():
    result, calls = drive(ops.cancel_job(V, 3), ["cancel"])
    assert calls[0].method == "DELETE" and not result.already_finished
    result, _ = drive(ops.cancel_job(V, 3), ["cancel_again"])
    assert result.already_finished
    with pytest.raises(SlurmJobNotFoundError, match="Invalid job id specified"):
        drive(ops.cancel_job(V, 999999), ["cancel_not_found", "slurmdb_job_not_found"])


def test_jobs_state_batch():
    states, calls = drive(ops.job_states(V, [1, 3, 2]), ["jobs_state"])
    assert calls[0].path == "/slurm/v0.0.45/jobs/state/?job_id=1&job_id=3&job_id=2"
    assert {k: str(v) for k, v in states.items()} == {"1": "COMPLETED", "3": "RUNNING", "2": "FAILED"}


def test_an_array_reads_one_record_per_task_on_both_paths():
    active, _ = drive(ops.get_jobs(V, 5), ["array_completed"])
    accounted = [SlurmJob.from_slurmdb(r, V) for r in recorded("slurmdb_array_completed", RELEASE)["jobs"]]
    for jobs in (active, accounted):
        tasks = array_tasks(5, jobs)
        assert tasks is not None
        assert {t.array_task_id: str(t.state) for t in tasks} == {0: "COMPLETED", 1: "FAILED", 2: "COMPLETED"}
        assert {t.array_job_id for t in tasks} == {5}
    states, _ = drive(ops.job_states(V, [5]), ["array_jobs_state"])
    assert {k: str(v) for k, v in states.items()} == {"5_2": "COMPLETED", "7_1": "FAILED", "6_0": "COMPLETED"}


def test_ping_names_the_release():
    pong, _ = drive(ops.ping(V), ["ping"])
    assert pong.release == "26.05.5" and pong.responding and pong.cluster == "ci"
