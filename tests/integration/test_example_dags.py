"""Every example DAG parses cleanly and runs to success against the emulator, deferrable and not."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.fixtures import load_module

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
pytestmark = pytest.mark.usefixtures("airflow_db")


def load(name: str) -> ModuleType:
    return load_module(EXAMPLES / f"{name}.py")


def manual(dag, **kwargs):
    """A run as a user's "Trigger" makes it: on Airflow 3 without a logical date, so a template that needs
    one (``{{ ds }}``, ``{{ ts }}``, ``data_interval_*``) fails the run rather than the user's first day."""
    if AIRFLOW_V_3_0_PLUS:
        kwargs.setdefault("logical_date", None)
    return dag.test(**kwargs)


def states(dag_run) -> dict[str, str]:
    return {
        f"{ti.task_id}[{ti.map_index}]": str(ti.state).rsplit(".", 1)[-1].lower() for ti in dag_run.get_task_instances()
    }


def waited_in_triggerer(emu) -> bool:
    """Deferred waits poll through the trigger's shared poller (batched jobs/state), sync ones per job."""
    return any("/jobs/state/" in call.path for call in emu.calls)


@pytest.fixture(params=[False, True], ids=["sync", "deferrable"])
def default_deferrable(request, monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", str(request.param))
    return request.param


def test_every_example_parses():
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert {
        "example_slurm_training",
        "example_slurm_external_job",
        "example_slurm_sweep",
        "example_slurm_dependency",
        "example_slurm_taskflow",
    } <= set(bag.dag_ids)
    # Event-driven scheduling (asset watchers) is Airflow 3's; on 2.x the file defines no DAG.
    assert ("example_slurm_job_events" in bag.dag_ids) == AIRFLOW_V_3_0_PLUS


def test_sweep_fans_out_one_job_per_parameter_set(slurmapi_emulator, default_deferrable):
    run = manual(load("example_slurm_sweep").dag)
    assert waited_in_triggerer(slurmapi_emulator) is default_deferrable
    assert set(states(run).values()) == {"success"} and len(states(run)) == 3
    outputs = sorted(slurmapi_emulator.read_output(j["job_id"]) for j in slurmapi_emulator.jobs())
    assert [o.splitlines()[-1] for o in outputs] == [
        "lr=0.001 batch=128 score=0.999",
        "lr=0.01 batch=64 score=0.99",
        "lr=0.1 batch=32 score=0.9",
    ]
    tags = {j["comment"] for j in slurmapi_emulator.jobs()}
    assert len(tags) == 3  # one task instance (map index) per job


def test_slurm_orders_the_dependency(slurmapi_emulator, default_deferrable):
    run = manual(load("example_slurm_dependency").dag)
    assert set(states(run).values()) == {"success"}
    assert waited_in_triggerer(slurmapi_emulator) is default_deferrable
    pre, train = sorted(slurmapi_emulator.jobs(), key=lambda j: j["job_id"])
    assert train["dependency"] == f"afterok:{pre['job_id']}"
    assert train["start_time"] >= pre["end_time"]
    assert "trained" in slurmapi_emulator.read_output(train["job_id"])


def test_taskflow_script_runs_what_the_function_returned(slurmapi_emulator):
    run = manual(load("example_slurm_taskflow").example_slurm_taskflow_dag)
    assert set(states(run).values()) == {"success"}
    jobs = {j["name"].split("~")[0]: j for j in slurmapi_emulator.jobs()}
    job, counted = jobs["example_slurm_taskflow.tokenize"], jobs["example_slurm_taskflow.count_shards"]
    output = slurmapi_emulator.read_output(job["job_id"])
    assert "tokenizing shard-a for " in output and f"in job {job['job_id']}" in output
    assert "tokenizing shard-b" in output and "{{" not in output  # rendered before it was sent
    (report,) = [ti for ti in run.get_task_instances() if ti.task_id == "report"]
    assert report.xcom_pull(task_ids="report") == (
        f"tokenized in Slurm job {job['job_id']}; 2 shards counted in job {counted['job_id']}"
    )


def test_waits_on_an_externally_submitted_job(slurmapi_emulator, default_deferrable):
    external = (
        SlurmJobApiHook()
        .submit(JobSpec.build("#!/bin/bash\nsleep 1\n", {"current_working_directory": "/home/someone"}))
        .job_id
    )
    run = manual(load("example_slurm_external_job").dag, run_conf={"job_id": external})
    assert set(states(run).values()) == {"success"}
    summarize = max(slurmapi_emulator.jobs(), key=lambda j: j["job_id"])
    assert f"job {external} finished" in slurmapi_emulator.read_output(summarize["job_id"])


def test_training_pipeline(slurmapi_emulator, default_deferrable):
    run = manual(load("example_slurm_training").dag)
    assert states(run) == dict.fromkeys(
        ["prepare_data[-1]", "train[-1]", "evaluate[-1]", "evaluation_done[-1]", "check_accuracy[-1]", "publish[-1]"],
        "success",
    )
    jobs = {j["name"].split("~af")[0].rsplit(".", 1)[-1]: j for j in slurmapi_emulator.jobs()}
    assert set(jobs) == {"prepare_data", "train", "evaluate", "publish"}
    assert all(j["state"] == ["COMPLETED"] for j in jobs.values())
    # publish ran after the gate, on the checkpoint of this run's training job
    assert jobs["publish"]["start_time"] >= jobs["evaluate"]["end_time"]
    published = slurmapi_emulator.read_output(jobs["publish"]["job_id"])
    assert f"published checkpoints/model-{jobs['train']['job_id']}.ckpt as published/model-latest.ckpt" in published
    # the training job's result (XCom slurm_result) fed evaluate and the branch
    train = run.get_task_instance("train")
    result = train.xcom_pull(task_ids="train", key="slurm_result")
    assert result == {"val_acc": 0.933, "checkpoint": f"checkpoints/model-{jobs['train']['job_id']}.ckpt"}
    assert "val_acc=0.933" in slurmapi_emulator.read_output(jobs["evaluate"]["job_id"])


def test_training_pipeline_publishes_nothing_below_the_threshold(slurmapi_emulator):
    run = manual(load("example_slurm_training").dag, run_conf={"min_val_acc": 0.99})
    assert states(run)["check_accuracy[-1]"] == "success"
    assert states(run)["publish[-1]"] == "skipped"
    assert not [j for j in slurmapi_emulator.jobs() if ".publish~af" in j["name"]]
