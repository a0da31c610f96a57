"""JobState, SlurmJob and JobSpec against replies recorded from real Slurm."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.watch import outcome_text
from tests.fixtures import WEB_VERSIONS, recorded, web


@pytest.mark.parametrize(
    ("value", "terminal", "base"),
    [
        (["RUNNING"], False, "RUNNING"),
        (["PENDING"], False, "PENDING"),
        (["COMPLETED"], True, "COMPLETED"),
        (["CANCELLED", "COMPLETING"], False, "CANCELLED"),
        (["CANCELLED"], True, "CANCELLED"),
        (["FAILED"], True, "FAILED"),
        (["TIMEOUT"], True, "TIMEOUT"),
        (["NODE_FAIL", "REQUEUED"], False, "NODE_FAIL"),
        (["PREEMPTED", "STAGE_OUT"], False, "PREEMPTED"),
        (["OUT_OF_MEMORY"], True, "OUT_OF_MEMORY"),
        (["DEADLINE"], True, "DEADLINE"),
        (["BOOT_FAIL"], True, "BOOT_FAIL"),
        ("CANCELLED by 1000", True, "CANCELLED"),
        (["COMPLETING", "RUNNING"], False, "RUNNING"),
    ],
)
def test_terminal_rule(value, terminal, base):
    state = JobState.parse(value)
    assert state.base == base
    assert state.is_terminal is terminal


def test_retryable_failures_are_machine_failures():
    assert JobState.parse(["NODE_FAIL"]).is_retryable_failure
    assert JobState.parse(["PREEMPTED"]).is_retryable_failure
    assert not JobState.parse(["FAILED"]).is_retryable_failure
    assert str(JobState.parse(["CANCELLED", "COMPLETING"])) == "CANCELLED+COMPLETING"


def test_parsed_states_are_equal_whatever_the_form():
    assert JobState.parse(["CANCELLED", "COMPLETING"]) == JobState.parse(("CANCELLED", "COMPLETING"))
    assert JobState.parse("CANCELLED by 1000") == JobState.parse(["CANCELLED"])
    # Malformed values (unhashable items, none at all) are parsed, not refused.
    assert JobState.parse([{"odd": 1}, "FAILED"]).base == "FAILED"
    assert JobState.parse(None).base == "UNKNOWN"
    assert JobState.parse({"current": ["RUNNING"]}).base == "UNKNOWN"


@pytest.mark.parametrize(
    ("name", "state", "code"),
    [
        ("job_pending", "PENDING", 0),
        ("job_running", "RUNNING", 0),
        ("job_completed", "COMPLETED", 0),
        ("job_failed", "FAILED", 3),
        ("job_after_cancel", "CANCELLED", None),
    ],
)
def test_job_info_from_real_slurm(name, state, code):
    job = SlurmJob.from_job_info(recorded(name)["jobs"][0])
    assert job.state.base == state
    assert job.exit_code.return_code == code
    assert job.source == "slurm"
    assert job.partition == "debug"
    assert job.standard_output.endswith(f"slurm-{job.job_id}.out")


def test_cancel_in_progress_is_not_terminal_and_names_the_signal():
    job = SlurmJob.from_job_info(recorded("job_after_cancel_immediate")["jobs"][0])
    assert job.state.as_list() == ["CANCELLED", "COMPLETING"]
    assert not job.state.is_terminal
    assert job.exit_code.signal == 15
    assert str(job.exit_code) == "signal 15 (TERM)"


def test_failed_job_reason_and_description():
    job = SlurmJob.from_job_info(recorded("job_failed")["jobs"][0])
    assert job.state_reason == "NonZeroExitCode"
    assert job.describe_state() == "FAILED (NonZeroExitCode)"


def test_running_job_describes_its_nodes():
    job = SlurmJob.from_job_info(recorded("job_running")["jobs"][0])
    assert job.describe_state() == "RUNNING on localhost"
    assert job.elapsed is not None and job.elapsed > timedelta(0)


@pytest.mark.parametrize("name", ["slurmdb_job", "slurmdb_job_cancelled", "slurmdb_job_failed"])
def test_slurmdb_records_from_real_slurm(name):
    record = recorded(name)["jobs"][0]
    job = SlurmJob.from_slurmdb(record)
    assert job.source == "slurmdb"
    assert job.state.base == record["state"]["current"][0]
    assert job.state.is_terminal
    assert job.submit_time is not None and job.end_time is not None
    assert job.elapsed == timedelta(seconds=record["time"]["elapsed"])
    if job.state.base == "CANCELLED":  # the job level says SUCCESS/0; the batch step holds the signal
        assert (job.exit_code.return_code, str(job.exit_code)) == (None, "signal 15 (TERM)")
    else:
        assert job.exit_code.return_code == record["exit_code"]["return_code"]["number"]


def test_slurmdb_output_is_the_expanded_path():
    job = SlurmJob.from_slurmdb(recorded("slurmdb_job")["jobs"][0])
    assert job.standard_output == "/tmp/slurm-1.out"
    assert job.summary()["state"] == "COMPLETED"


@pytest.mark.parametrize("version", sorted(WEB_VERSIONS))
@pytest.mark.parametrize("kind", ["completed", "failed", "pending", "running", "timeout"])
def test_other_clusters_every_version(version, kind):
    active = SlurmJob.from_job_info(web(version, f"slurm-job-{kind}")["jobs"][0], version)
    accounted = SlurmJob.from_slurmdb(web(version, f"slurmdb-job-{kind}")["jobs"][0], version)
    assert active.state.base == accounted.state.base == kind.upper()
    assert active.job_id == accounted.job_id
    assert active.state.is_terminal is (kind not in ("pending", "running"))
    if kind == "failed":
        assert accounted.exit_code.return_code not in (None, 0)
    if kind in ("completed", "failed", "timeout"):
        assert "%" not in accounted.standard_output and accounted.standard_output.startswith("/")


def test_v0_0_43_output_pattern_is_expanded():
    record = dict(web("v0.0.43", "slurm-job-completed")["jobs"][0])
    record["standard_output"] = "/home/u/out-%j-%x.log"
    record["stdout_expanded"] = ""
    job = SlurmJob.from_job_info(record, "v0.0.43")
    assert job.standard_output == f"/home/u/out-{job.job_id}-{job.name}.log"


# -- JobSpec ------------------------------------------------------------------------------------

SCRIPT = "#!/bin/bash\necho hi\n"


def test_spec_defaults_environment_and_converts_time_limit():
    spec = JobSpec.build(SCRIPT, {"current_working_directory": "/home/u", "time_limit": timedelta(hours=2)})
    body = spec.body()
    assert body["job"]["environment"] == ["PATH=/bin:/usr/bin"]
    assert body["job"]["time_limit"] == {"set": True, "infinite": False, "number": 120}
    assert body["script"] == SCRIPT


def test_spec_merges_environment_dict_over_defaults():
    spec = JobSpec.build(SCRIPT, {"current_working_directory": "/h", "environment": {"PATH": "/opt/bin", "SEED": 3}})
    assert spec.job["environment"] == ["PATH=/opt/bin", "SEED=3"]


def test_spec_converts_memory_strings():
    spec = JobSpec.build(SCRIPT, {"current_working_directory": "/h", "memory_per_node": "16G"})
    assert spec.job["memory_per_node"]["number"] == 16384


@pytest.mark.parametrize(
    ("script", "job", "field"),
    [
        ("", {"current_working_directory": "/h"}, "script"),
        ("echo hi", {"current_working_directory": "/h"}, "script"),
        (SCRIPT, {}, "current_working_directory"),
        (SCRIPT, {"current_working_directory": "relative/dir"}, "current_working_directory"),
        (SCRIPT, {"current_working_directory": "/h", "time_limit": "2h"}, "time_limit"),
        (SCRIPT, {"current_working_directory": "/h", "time_limit": 0}, "time_limit"),
        (SCRIPT, {"current_working_directory": "/h", "time_limit": True}, "time_limit"),
        (SCRIPT, {"current_working_directory": "/h", "environment": ["NOEQUALS"]}, "environment"),
        (SCRIPT, {"current_working_directory": "/h", "environment": "PATH=/bin"}, "environment"),
        (SCRIPT, {"current_working_directory": "/h", "environment": {"1BAD": "x"}}, "environment"),
        (SCRIPT, {"current_working_directory": "/h", "partition": 5}, "partition"),
        (SCRIPT, {"current_working_directory": "/h", "minimum_nodes": "2"}, "minimum_nodes"),
        (SCRIPT, {"current_working_directory": "/h", "minimum_nodes": 0}, "minimum_nodes"),
        (SCRIPT, {"current_working_directory": "/h", "hold": "yes"}, "hold"),
        (SCRIPT, {"current_working_directory": "/h", "memory_per_node": "lots"}, "memory_per_node"),
        (SCRIPT, {"current_working_directory": "/h", "array": "0-3;rm"}, "array"),
    ],
)
def test_spec_rejects_bad_input_naming_the_field(script, job, field):
    with pytest.raises(SlurmJobSpecError) as info:
        JobSpec.build(script, job)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_spec_takes_slurms_whole_ranges():
    job = {
        "current_working_directory": "/h",
        "time_limit": 4294967293,
        "cpus_per_task": 65533,
        "tasks_per_node": 1,
        "minimum_nodes": 4294967293,
        "priority": 0,
        "memory_per_node": 0,
        "nodes": 2,
        "array": "0-15:2,20,30-31%4",
        "environment": {"SEED": 3, "RATE": 0.5, "NAME": "x"},
    }
    spec = JobSpec.build(SCRIPT, job).job
    assert spec["time_limit"]["number"] == 4294967293 and spec["priority"] == {
        "set": True,
        "infinite": False,
        "number": 0,
    }
    assert spec["nodes"] == "2" and spec["array"] == "0-15:2,20,30-31%4"
    assert spec["environment"] == ["PATH=/bin:/usr/bin", "SEED=3", "RATE=0.5", "NAME=x"]


def test_spec_names_the_field_and_the_fix_for_out_of_range_values():
    with pytest.raises(SlurmJobSpecError) as info:
        JobSpec.build(SCRIPT, {"current_working_directory": "/h", "cpus_per_task": 2**64})
    assert (
        str(info.value)
        == "cpus_per_task: 18446744073709551616 is not a count Slurm takes. Give an int from 1 to 65533."
    )
    with pytest.raises(SlurmJobSpecError) as info:
        JobSpec.build(SCRIPT, {"current_working_directory": "/h", "environment": {"TOKEN": b"x"}})
    assert info.value.field == "environment" and "decode" in info.value.fix and "b'x'" in info.value.problem


def test_spec_rejects_a_non_mapping_job():
    with pytest.raises(SlurmJobSpecError, match="job"):
        JobSpec.build(SCRIPT, ["not", "a", "dict"])  # type: ignore[arg-type]


def test_relative_output_in_accounting_is_joined_properly():
    record = dict(recorded("slurmdb_job")["jobs"][0])
    record.update(stdout="train-%j.out", stdout_expanded="/home/u/runtrain-1.out", working_directory="/home/u/run")
    assert SlurmJob.from_slurmdb(record).standard_output == "/home/u/run/train-1.out"


TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("path", "version", "state"),
    [
        (TESTS / Path("real_slurm/recorded/v0.0.42/timeout/slurmdb_job_timeout.json"), "v0.0.42", "TIMEOUT"),
        (TESTS / Path("fixtures/slurm-26.05/slurmdb_job_cancelled_cancelled.json"), "v0.0.45", "CANCELLED"),
    ],
)
def test_a_job_slurm_ended_reads_as_killed_by_the_signal_its_batch_step_holds(path, version, state):
    """Real accounting (24.11 at its time limit, 26.05 cancelled) says SUCCESS/0 at the job level."""
    body = json.loads(path.read_text())
    record = body.get("body", body)["jobs"][0]
    assert record["exit_code"]["status"] == ["SUCCESS"]
    job = SlurmJob.from_slurmdb(record, version)
    assert job.state.base == state and str(job.exit_code) == "signal 15 (TERM)"
    assert "exit code signal 15 (TERM)" in outcome_text(job)


def test_a_cancelled_jobs_shell_exiting_128_plus_sigterm_reads_as_killed_by_sigterm():
    """Real Slurm (24.11 and 26.05, in CI) also records the batch step as ERROR/143: the script's child died
    of scancel's SIGTERM before bash's own landed, and bash exited 128 + 15. It is the same cancel."""
    path = TESTS / Path("fixtures/slurm-26.05/slurmdb_job_cancelled_cancelled.json")
    body = json.loads(path.read_text())
    record = body.get("body", body)["jobs"][0]
    for step in record["steps"]:
        if step["step"]["name"] == "batch":
            step["exit_code"] = {
                "status": ["ERROR"],
                "return_code": {"set": True, "infinite": False, "number": 143},
                "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
            }
    job = SlurmJob.from_slurmdb(record, "v0.0.45")
    assert job.state.base == "CANCELLED" and str(job.exit_code) == "signal 15 (TERM)"
    # a script that itself exits 143 and COMPLETES nothing: a FAILED job keeps its own exit code
    record["state"]["current"] = ["FAILED"]
    record["exit_code"] = {
        **record["exit_code"],
        "status": ["ERROR"],
        "return_code": {"set": True, "infinite": False, "number": 143},
    }
    assert str(SlurmJob.from_slurmdb(record, "v0.0.45").exit_code) == "143"
