"""OpenLineage: a task's COMPLETE and FAIL events carry its Slurm job, and the job gets the task's run.

Real ``dag.test()`` runs of ``tests/dags/slurm_lineage_dags.py`` against the emulator, with the OpenLineage
provider (the ``openlineage`` extra) writing its events through OpenLineage's own file transport into the
test's folder. Each run is its own Python process, configured before Airflow starts, as a worker is: the
provider decides once, when Airflow loads its plugin, whether its listener runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi import lineage

pytest.importorskip("airflow.providers.openlineage", reason="needs the openlineage extra")
pytestmark = pytest.mark.usefixtures("airflow_db")

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "slurm-lineage-tests"
RUNNER = """
import json, sys
from tests.fixtures import dag_file

dag_run = dag_file("slurm_lineage_dags").DAGS["lineage"].test()
tasks = {}
for ti in dag_run.get_task_instances():
    pull = lambda key: ti.xcom_pull(task_ids=ti.task_id, key=key)
    tasks[ti.task_id] = {
        "state": str(ti.state).rsplit(".", 1)[-1].lower(),
        "job_id": pull("slurm_job_id"),
        "usage": pull("slurm_usage"),
        "return_value": pull("return_value"),
    }
from airflow.listeners.listener import get_listener_manager

listeners = sorted(type(p).__name__ for p in get_listener_manager().pm.get_plugins())
with open(sys.argv[1], "w") as out:  # not stdout: Airflow's and OpenLineage's logs share it, mid-line
    json.dump({"tasks": tasks, "listeners": listeners}, out, default=str)
"""


def run_lineage_dag(env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Run the ``lineage`` DAG with ``dag.test()`` in a new Python process with ``env``: each task's state,
    Slurm job id, XCom ``slurm_usage`` and return value; and the types of the listeners Airflow ran."""
    with tempfile.TemporaryDirectory() as folder:
        found = Path(folder) / "ran.json"
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER, str(found)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
            timeout=280,
        )
        assert proc.returncode == 0 and found.is_file(), proc.stdout[-3000:] + proc.stderr[-5000:]
        ran = json.loads(found.read_text())
    return ran["tasks"], ran["listeners"]


def printed_parent(output: str) -> dict[str, str]:
    """The ``OPENLINEAGE_*=value`` lines a job of the DAG printed."""
    pairs = (line.partition("=") for line in output.splitlines() if line.startswith("OPENLINEAGE_"))
    return {name: value for name, _, value in pairs}


@pytest.fixture(scope="module")
def ran(airflow_db: str, module_emulator: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The DAG, run once for the module's tests with OpenLineage on: the tasks, the events, the emulator."""
    emu = module_emulator
    events_file = tmp_path_factory.mktemp("openlineage") / "events.jsonl"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    tasks, listeners = run_lineage_dag(
        {
            **emu.airflow_env(),
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE,
        }
    )
    assert "OpenLineageListener" in listeners
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    return {"tasks": tasks, "events": events, "emu": emu}


@pytest.fixture(scope="module")
def module_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An emulator for the module's one run (the ``slurmapi_emulator`` fixture's settings)."""
    from airflow_provider_slurmapi.emulator.app import SlurmJobApiEmulator
    from airflow_provider_slurmapi.emulator.pytest_plugin import FAST_DEFAULTS

    emulator = SlurmJobApiEmulator(**FAST_DEFAULTS, state_dir=tmp_path_factory.mktemp("slurmapi-emulator"))
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


def task_event(events: list[dict[str, Any]], task_id: str, event_type: str) -> dict[str, Any]:
    """The task's one event of ``event_type`` (COMPLETE, FAIL)."""
    found = [e for e in events if e["job"]["name"] == f"lineage.{task_id}" and e["eventType"] == event_type]
    assert len(found) == 1, [(e["job"]["name"], e["eventType"]) for e in events]
    return found[0]


def known(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as an event carries them: OpenLineage leaves out what is None (max_rss_bytes, here)."""
    return {k: v for k, v in values.items() if v is not None}


def expected_cluster(emu: Any) -> str:
    extra = json.loads(emu.connection_json())["extra"]
    return f"projects/{extra['project_id']}/locations/{extra['region']}/modelDevelopmentClusters/{extra['cluster_id']}"


def parent_of(event: dict[str, Any]) -> tuple[str, str]:
    """``(parent id, root parent id)`` a job of the event's task should have been given: the task's run, and
    the root its event names (the DAG run)."""
    root = event["run"]["facets"]["parent"]["root"]
    return (
        f"{NAMESPACE}/{event['job']['name']}/{event['run']['runId']}",
        f"{root['job']['namespace']}/{root['job']['name']}/{root['run']['runId']}",
    )


@pytest.mark.parametrize("task_id", ["script", "script_deferred"])
def test_a_completed_job_is_in_the_complete_event(ran, task_id):
    task = ran["tasks"][task_id]
    assert task["state"] == "success"
    facets = task_event(ran["events"], task_id, "COMPLETE")["run"]["facets"]
    assert facets["externalQuery"]["externalQueryId"] == str(task["job_id"])
    assert facets["externalQuery"]["source"] == "slurm"
    job = facets["slurmJob"]
    assert job["jobId"] == task["job_id"]
    assert job["cluster"] == expected_cluster(ran["emu"])
    assert job["connectionId"] == "slurmapi_default"
    assert job["state"] == "COMPLETED" and job["exitCode"] == 0
    assert job["name"].startswith(f"lineage.{task_id}~af")
    assert job["usage"] == known(task["usage"]) and job["usage"]["cpus"] >= 1  # what XCom slurm_usage says


@pytest.mark.parametrize("task_id", ["fails", "fails_deferred"])
def test_a_failed_job_is_in_the_fail_event(ran, task_id):
    task = ran["tasks"][task_id]
    assert task["state"] == "failed"
    event = task_event(ran["events"], task_id, "FAIL")
    facets = event["run"]["facets"]
    assert facets["externalQuery"]["externalQueryId"] == str(task["job_id"])
    job = facets["slurmJob"]
    assert job["jobId"] == task["job_id"]
    assert job["cluster"] == expected_cluster(ran["emu"])
    assert job["state"] == "FAILED" and job["exitCode"] == 3
    assert job["usage"] == known(task["usage"]) and job["usage"]["elapsed_seconds"] >= 0
    assert "exit" in facets["errorMessage"]["message"].lower()  # the listener's own facet: the task's error


@pytest.mark.parametrize("task_id", ["script", "script_deferred"])
def test_the_job_was_given_its_task_run(ran, task_id):
    task = ran["tasks"][task_id]
    event = task_event(ran["events"], task_id, "COMPLETE")
    parent_id, root_id = parent_of(event)
    seen = printed_parent(ran["emu"].read_output(task["job_id"]))
    assert seen["OPENLINEAGE_PARENT_ID"] == parent_id
    assert seen["OPENLINEAGE_ROOT_PARENT_ID"] == root_id
    context = json.loads(seen["OPENLINEAGE_CONTEXT"])["parent"]
    assert context["run"]["runId"] == event["run"]["runId"]
    assert context["job"] == {"namespace": NAMESPACE, "name": f"lineage.{task_id}"}
    assert context["root"]["run"]["runId"] == event["run"]["facets"]["parent"]["root"]["run"]["runId"]


def test_a_python_job_sees_its_task_run(ran):
    task = ran["tasks"]["python"]
    assert task["state"] == "success"
    event = task_event(ran["events"], "python", "COMPLETE")
    parent_id, root_id = parent_of(event)
    assert task["return_value"] == {
        "parent": parent_id,
        "root": root_id,
        "context_run": event["run"]["runId"],
        "context_root_run": event["run"]["facets"]["parent"]["root"]["run"]["runId"],
    }
    assert event["run"]["facets"]["slurmJob"]["jobId"] == task["job_id"]


def test_a_task_that_names_its_parent_itself_keeps_it(ran):
    task = ran["tasks"]["own_parent"]
    seen = printed_parent(ran["emu"].read_output(task["job_id"]))
    assert seen == {
        "OPENLINEAGE_PARENT_ID": "elsewhere/a.job/0190a4e5-0000-7000-8000-000000000001",
        "OPENLINEAGE_ROOT_PARENT_ID": "unset",
        "OPENLINEAGE_CONTEXT": "unset",
    }
    # the task's own event still tells of its job
    assert task_event(ran["events"], "own_parent", "COMPLETE")["run"]["facets"]["slurmJob"]["jobId"] == task["job_id"]


def test_without_a_transport_nothing_is_added_or_emitted(slurmapi_emulator, monkeypatch):
    """The extra installed but OpenLineage not configured (what every other test here runs with): the jobs'
    environment has no OpenLineage variable, and the provider registers no listener."""
    for name in list(os.environ):
        if name.startswith(("OPENLINEAGE", "AIRFLOW__OPENLINEAGE")):
            monkeypatch.delenv(name)
    assert not lineage.enabled()
    tasks, listeners = run_lineage_dag({})
    assert "OpenLineageListener" not in listeners
    assert tasks["script"]["state"] == "success" and tasks["python"]["state"] == "failed"  # no CONTEXT to read
    seen = printed_parent(slurmapi_emulator.read_output(tasks["script"]["job_id"]))
    assert seen == {name: "unset" for name in lineage.PARENT_VARIABLES}
