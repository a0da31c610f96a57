"""What a job used (api/usage.py), from records real Slurm 24.11 and 26.05 gave, and how the operator reports
it: XCom ``slurm_usage``, a log line, and the failure message of a failed job."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api import usage
from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.failures import SlurmJobFailedError
from airflow_provider_slurmapi.api.job_event import JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from tests.fixtures import drive_op, recorded, recorded_status
from tests.unit.test_task_resume import Ti


def accounted(name: str, release: str) -> list[SlurmJob]:
    return [SlurmJob.from_slurmdb(j) for j in recorded(name, release)["jobs"]]


@pytest.mark.parametrize(
    ("release", "name", "source"),
    [
        ("24.11", "slurmdb_job", "accounting"),
        ("24.11", "job_completed", "queue"),
        ("26.05", "slurmdb_job_completed", "accounting"),
    ],
)
def test_a_real_records_usage_is_its_allocation_times_its_run(release, name, source):
    record = recorded(name, release)["jobs"][0]
    job = SlurmJob.from_slurmdb(record) if source == "accounting" else SlurmJob.from_job_info(record)
    used = job.summary()["usage"]
    assert job.elapsed is not None and job.start_time is not None and job.submit_time is not None
    seconds = int(job.elapsed.total_seconds())
    assert used["elapsed_seconds"] == seconds > 0
    assert used["queue_wait_seconds"] == int((job.start_time - job.submit_time).total_seconds())
    assert used["cpus"] >= 1 and used["nodes"] == 1 and used["gpus"] == 0
    assert used["cpu_hours"] == round(used["cpus"] * seconds / 3600, 4)
    assert used["node_hours"] == round(seconds / 3600, 4) and used["gpu_hours"] == 0
    # these jobs ended before the test cluster's first sample (JobAcctGatherFrequency=30): no step statistics
    assert used["max_rss_bytes"] is None


def test_a_real_arrays_usage_sums_its_tasks():
    tasks = accounted("slurmdb_array_completed", "26.05")
    assert tasks[0].array_job_id is not None
    array = SlurmArrayJob.of(tasks[0].array_job_id, tasks)
    used = array.summary()["usage"]
    parts = [usage.of_job(t) for t in tasks]
    assert used["tasks"] == len(tasks) > 1
    assert used["cpu_hours"] == round(sum(p.cpu_hours for p in parts if p), 4)


def test_gpus_come_from_the_allocation_untyped_or_summed_by_type():
    assert usage.allocated("cpu=8,mem=64G,node=2,billing=8,gres/gpu=16,gres/gpu:a100=16") == {
        "cpu": 8,
        "node": 2,
        "gpu": 16,
    }
    assert usage.allocated("cpu=4,gres/gpu:a100=2,gres/gpu:h100=1")["gpu"] == 3
    assert usage.allocated("garbage,cpu=x,=3") == {"gpu": 0}
    job = SlurmJob.from_slurmdb(recorded("slurmdb_job", "24.11")["jobs"][0])
    job.tres_allocated = "cpu=16,node=2,gres/gpu=8"
    job.elapsed = timedelta(hours=2)
    used = usage.of_job(job)
    assert used is not None and (used.node_hours, used.cpu_hours, used.gpu_hours) == (4.0, 32.0, 16.0)
    assert "8 GPUs for 2h 00m 00s" in used.describe() and "16 GPU-hours" in used.describe()


def test_max_rss_is_the_largest_step_maximum_and_hostile_values_are_ignored():
    record: dict[str, Any] = copy.deepcopy(recorded("slurmdb_job", "24.11")["jobs"][0])
    record["steps"] = [
        {"tres": {"requested": {"max": [{"type": "mem", "count": 3 * 2**30}, {"type": "cpu", "count": 9}]}}},
        {"tres": {"requested": {"max": [{"type": "mem", "count": 2**30}, {"type": "mem", "count": "lots"}]}}},
        {"tres": "not a mapping"},
        "not a step",
    ]
    assert usage.max_rss(record) == 3 * 2**30
    used = usage.of_job(SlurmJob.from_slurmdb(record))
    assert used is not None and "max RSS 3.0 GiB" in used.describe()


def test_a_job_that_never_ran_has_no_usage():
    record = copy.deepcopy(recorded("job_pending", "24.11")["jobs"][0])
    assert "usage" not in SlurmJob.from_job_info(record).summary()


def ended(state: str) -> dict[str, Any]:
    record = copy.deepcopy(recorded("job_completed", "24.11")["jobs"][0])
    record["job_state"] = [state]
    return JobEvent.ended(record["job_id"], SlurmJob.from_job_info(record)).payload()


def test_the_task_pushes_its_jobs_usage_logs_it_and_names_it_when_the_job_failed():
    ti = Ti()
    SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n", publish_results=False).execute_complete(
        {"ti": ti}, ended("COMPLETED")
    )
    assert ti.pushed["slurm_usage"]["cpu_hours"] == ti.pushed["slurm_job"]["usage"]["cpu_hours"] > 0
    with pytest.raises(SlurmJobFailedError, match=r"It used 1 node, 1 CPU for 2s \(queued 2s\): 0.0006 node-hours"):
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n", publish_results=False).execute_complete(
            {"ti": Ti()}, ended("OUT_OF_MEMORY")
        )


def test_a_real_sampled_steps_peak_is_the_jobs_max_rss():
    """24.11, a job holding 200 MiB for 3 s with ``account_gather_frequency: "task=1"``: its batch step's
    ``tres.requested.max`` has ``mem`` (and Python's own on top)."""
    [job] = accounted("slurmdb_job_sampled", "24.11")
    used = job.usage
    assert used is not None and used.max_rss_bytes == 221741056
    assert used.describe().endswith("; max RSS 211.5 MiB")


def test_the_peak_is_read_from_accounting_for_the_runs_the_wait_saw_only():
    [job] = accounted("slurmdb_job_sampled", "24.11")
    assert job.start_time is not None
    reply = SlurmReply.from_structured(recorded_status("slurmdb_job_sampled"), recorded("slurmdb_job_sampled"))
    found, calls = drive_op(ops.peak_memory("v0.0.42", job.job_id, frozenset({job.start_time})), [reply])
    assert found == (True, 221741056)
    assert [(c.method, c.path, c.best_effort) for c in calls] == [("GET", "/slurmdb/v0.0.42/job/69", True)]
    # another run (a later requeue, an earlier job with the same id): not recorded yet, and not its peak
    other = frozenset({job.start_time + timedelta(seconds=1)})
    assert drive_op(ops.peak_memory("v0.0.42", job.job_id, other), [reply])[0] == (False, None)


@pytest.mark.slurmapi_emulator(min_job_age=60)
def test_the_task_adds_the_peak_from_accounting_and_a_down_slurmdbd_costs_one_try_not_the_task(
    slurmapi_emulator, capfd
):
    """The wait ends on the active queue's record, which has no step statistics: the task reads accounting
    once for the job's max RSS. With slurmdbd down it says the figure is unknown, after one try, and
    succeeds; the emulator records a peak only for a run sampled at least once (as real Slurm does)."""
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

    hook = SlurmJobApiHook()
    holds = "#!/bin/bash\npython3 -c 'import time; b = bytearray(64 << 20); time.sleep(1.5)'\n"
    sampled = hook.submit_job(holds, {"current_working_directory": "/tmp", "account_gather_frequency": "task=1"})
    unsampled = hook.submit_job(holds, {"current_working_directory": "/tmp"})  # the cluster samples every 30 s
    ends = {job_id: hook.wait_for_job(job_id, poll_interval=0.2) for job_id in (sampled, unsampled)}
    assert {job.source for job in ends.values()} == {"slurm"}

    def finish(job_id: int) -> dict[str, Any]:
        ti = Ti()
        event = JobEvent.ended(job_id, ends[job_id]).payload()
        SlurmSubmitJobOperator(task_id="t", script="#!/bin/sh\n", publish_results=False).execute_complete(
            {"ti": ti}, event
        )
        return ti.pushed["slurm_usage"]

    def accounting_reads() -> int:
        return sum(call.path.startswith("/slurmdb/") for call in slurmapi_emulator.calls)

    slurmapi_emulator.set_slurmdbd_down(True)
    before = accounting_reads()
    assert finish(sampled)["max_rss_bytes"] is None
    assert accounting_reads() == before + 1
    said = capfd.readouterr().out
    assert f"Slurm job {sampled}'s max RSS is unknown: Slurm's accounting (slurmdbd) did not answer" in said

    slurmapi_emulator.set_slurmdbd_down(False)
    assert 64 << 20 <= finish(sampled)["max_rss_bytes"] < 1 << 30
    assert finish(unsampled)["max_rss_bytes"] is None
