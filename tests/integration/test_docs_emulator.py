"""The user guide's examples of testing with the built-in emulator (docs/emulator.rst includes them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from airflow_provider_slurmapi.api.errors import GoogleApiError
from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

EXAMPLES = Path(__file__).resolve().parents[2] / "example_dags"
pytestmark = pytest.mark.usefixtures("airflow_db")


def load_dag(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_the_hello_dag_runs_its_one_job(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    dag_run = load_dag("example_slurm_hello").test()

    assert str(dag_run.state).endswith("success")
    (job,) = slurmapi_emulator.jobs()
    assert job["partition"] == "debug"
    assert slurmapi_emulator.read_output(job["job_id"]).startswith("hello from ")


# [START howto_emulator_dag_test]
def test_the_sweep_runs_one_job_per_parameter_set(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    dag_run = load_dag("example_slurm_sweep").test()

    assert str(dag_run.state).endswith("success")
    jobs = slurmapi_emulator.jobs()
    assert len(jobs) == 3
    assert all(job["state"] == ["COMPLETED"] for job in jobs)
    outputs = [slurmapi_emulator.read_output(job["job_id"]) for job in jobs]
    assert any("lr=0.01 batch=64" in output for output in outputs)


# [END howto_emulator_dag_test]


# [START howto_emulator_simulated]
@pytest.mark.slurmapi_emulator(simulate=True, partitions={"gpu": 8}, default_partition="gpu")
def test_a_job_that_exits_3_is_reported_failed(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    hook = SlurmJobApiHook()
    job_id = hook.submit_job(
        "#!/bin/bash\n#EMULATOR runtime=1 exit=3\nsrun python train.py\n",
        {"current_working_directory": "/home/me", "time_limit": 10},
    )
    job = hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)

    assert job.state.base == "FAILED"
    assert job.exit_code.return_code == 3


# [END howto_emulator_simulated]


# [START howto_emulator_faults]
def test_reads_ride_out_an_unavailable_cluster(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    hook = SlurmJobApiHook()
    job_id = hook.submit_job("#!/bin/bash\necho hi\n", {"current_working_directory": "/home/me"})
    slurmapi_emulator.inject_fault("unavailable", count=2, method="GET")

    job = hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)

    assert job.state.base == "COMPLETED"
    assert [call.status for call in slurmapi_emulator.calls].count(503) == 2


def test_a_wrong_cluster_is_named(slurmapi_emulator: SlurmJobApiEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", slurmapi_emulator.connection_json(cluster_id="no-such"))

    with pytest.raises(GoogleApiError, match="NOT_FOUND"):
        SlurmJobApiHook().list_jobs()


# [END howto_emulator_faults]
