"""OpenLineage's part (airflow_provider_slurmapi/lineage): the ``slurmJob`` facet built from real Slurm records,
the job's parent-run variables, and when a job gets them. tests/integration/test_lineage.py runs it all in
Airflow with OpenLineage's listener."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from airflow_provider_slurmapi import lineage
from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import ClusterRef
from airflow_provider_slurmapi.api.job_event import JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.exceptions import SlurmJobFailedNoRetry
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator
from tests.fixtures import recorded
from tests.unit.test_task_resume import Ti

CLUSTER = ClusterRef(project_id="my-project", region="us-central1", cluster_id="train-1")
PARENT = lineage.LineageRun("airflow-prod", "etl.train", "0190a4e5-1111-7000-8000-000000000001")
ROOT = lineage.LineageRun("airflow-prod", "etl", "0190a4e5-2222-7000-8000-000000000002")


def real_job(release: str, name: str) -> SlurmJob:
    return SlurmJob.from_slurmdb(recorded(name, release)["jobs"][0])


@pytest.mark.parametrize(("release", "name"), [("24.11", "slurmdb_job"), ("26.05", "slurmdb_job_completed")])
def test_the_facet_of_a_real_completed_job(release, name):
    job = real_job(release, name)
    summary = job.summary()
    fields = lineage.facet_fields(job.job_id, summary, cluster=CLUSTER.resource_name, connection_id="slurm_prod")
    assert fields["jobId"] == job.job_id
    assert fields["cluster"] == "projects/my-project/locations/us-central1/modelDevelopmentClusters/train-1"
    assert fields["connectionId"] == "slurm_prod"
    assert fields["state"] == "COMPLETED" and fields["exitCode"] == 0 and fields["exitSignal"] is None
    assert fields["name"] == job.name and fields["partition"] == job.partition
    assert fields["startTime"] == summary["start_time"] and fields["endTime"] == summary["end_time"]
    assert fields["elapsedSeconds"] == int(job.elapsed.total_seconds()) > 0  # type: ignore[union-attr]
    assert fields["usage"] == summary["usage"] and fields["usage"]["cpus"] >= 1
    assert fields["arrayTaskCount"] is None  # not an array


def test_the_facet_of_a_real_failed_job_has_its_exit():
    job = real_job("26.05", "slurmdb_job_failed_failed")
    fields = lineage.facet_fields(job.job_id, job.summary(), cluster="", connection_id="c")
    assert fields["state"] == "FAILED" and fields["exitCode"] == 3


def test_the_facet_of_a_real_array_counts_its_tasks():
    tasks = [SlurmJob.from_slurmdb(j) for j in recorded("slurmdb_array_completed", "26.05")["jobs"]]
    assert tasks[0].array_job_id is not None
    array = SlurmArrayJob.of(tasks[0].array_job_id, tasks)
    fields = lineage.facet_fields(array.job_id, array.summary(), cluster="", connection_id="c")
    # array "0-2", whose task 1 failed (tests/fixtures/__init__.py)
    assert fields["arrayTaskCount"] == 3 and fields["arrayTasksCompleted"] == 2
    assert fields["usage"]["tasks"] == 3


def test_a_job_the_task_did_not_see_end_has_only_its_id_and_cluster():
    fields = lineage.facet_fields(42, None, cluster="https://slurm.example:6820", connection_id="c")
    assert {k: v for k, v in fields.items() if v is not None} == {
        "jobId": 42,
        "cluster": "https://slurm.example:6820",
        "connectionId": "c",
    }


def test_the_cluster_is_the_google_resource_or_the_slurmrestd_url():
    direct = SlurmrestdRef(url="https://slurm.example:6820", user="jdoe", token="t")
    assert lineage.cluster_name(CLUSTER) == CLUSTER.resource_name
    assert lineage.cluster_name(direct) == "https://slurm.example:6820"


def test_the_parent_variables_name_the_task_run_and_the_dag_run():
    variables = lineage.parent_variables(PARENT, ROOT)
    assert variables["OPENLINEAGE_PARENT_ID"] == "airflow-prod/etl.train/0190a4e5-1111-7000-8000-000000000001"
    assert variables["OPENLINEAGE_ROOT_PARENT_ID"] == "airflow-prod/etl/0190a4e5-2222-7000-8000-000000000002"
    assert json.loads(variables["OPENLINEAGE_CONTEXT"]) == {
        "parent": {
            "run": {"runId": PARENT.run_id},
            "job": {"namespace": "airflow-prod", "name": "etl.train"},
            "root": {"run": {"runId": ROOT.run_id}, "job": {"namespace": "airflow-prod", "name": "etl"}},
        }
    }


def test_a_namespace_with_a_slash_goes_in_the_context_only():
    """``namespace/name/run_id`` could not carry it: a reader would split ``airflow://prod`` in the wrong place."""
    variables = lineage.parent_variables(PARENT._replace(namespace="airflow://prod"), ROOT)
    assert set(variables) == {"OPENLINEAGE_CONTEXT"}
    assert json.loads(variables["OPENLINEAGE_CONTEXT"])["parent"]["job"]["namespace"] == "airflow://prod"


VARIABLES = {"OPENLINEAGE_PARENT_ID": "ns/a.b/1", "OPENLINEAGE_CONTEXT": "{}"}


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (None, VARIABLES),
        ({"EPOCHS": "5"}, {**VARIABLES, "EPOCHS": "5"}),
        (["EPOCHS=5"], ["OPENLINEAGE_PARENT_ID=ns/a.b/1", "OPENLINEAGE_CONTEXT={}", "EPOCHS=5"]),
        # the task names a parent itself (an empty one: none): the job gets that, nothing added
        ({"OPENLINEAGE_PARENT_ID": "mine/x.y/2"}, {"OPENLINEAGE_PARENT_ID": "mine/x.y/2"}),
        (["OPENLINEAGE_CONTEXT="], ["OPENLINEAGE_CONTEXT="]),
        ({"OPENLINEAGE_ROOT_PARENT_ID": ""}, {"OPENLINEAGE_ROOT_PARENT_ID": ""}),
        # not an environment: left for the spec's check, which names the field
        ("EPOCHS=5", "EPOCHS=5"),
    ],
)
def test_the_variables_join_the_environment_the_task_gives(environment, expected):
    assert lineage.with_parent(environment, VARIABLES) == expected


def test_openlineage_disabled_adds_nothing():
    assert lineage.with_parent({"A": "1"}, {}) == {"A": "1"}


def test_enabled_is_the_providers_own_switch(monkeypatch):
    pytest.importorskip("airflow.providers.openlineage")
    for name in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED", "AIRFLOW__OPENLINEAGE__DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AIRFLOW__OPENLINEAGE__TRANSPORT", raising=False)
    assert not lineage.enabled()  # installed, no transport: off, as the provider's listener is
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", '{"type": "console"}')
    assert lineage.enabled()
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "true")
    assert not lineage.enabled()
    assert lineage.parent_environment(object()) == {}  # no macro is asked


# -- with OpenLineage's classes (the openlineage extra) ------------------------------------------------------


def facets_of(op: SlurmSubmitJobOperator, failed: bool = False) -> dict[str, Any]:
    pytest.importorskip("airflow.providers.openlineage")
    from openlineage.client.serde import Serde

    method = op.get_openlineage_facets_on_failure if failed else op.get_openlineage_facets_on_complete
    found = method(None)
    assert found.inputs == [] and found.outputs == [] and found.job_facets == {}
    return {name: json.loads(Serde.to_json(facet)) for name, facet in found.run_facets.items()}


def ended(fixture: str, release: str = "24.11") -> dict[str, Any]:
    record = copy.deepcopy(recorded(fixture, release)["jobs"][0])
    return JobEvent.ended(record["job_id"], SlurmJob.from_job_info(record)).payload()


def operator() -> SlurmSubmitJobOperator:
    return SlurmSubmitJobOperator(task_id="train", script="#!/bin/bash\ntrue\n", publish_results=False)


def test_a_resumed_task_tells_of_its_completed_job(monkeypatch):
    extra = {"project_id": "my-project", "region": "us-central1", "cluster_id": "train-1"}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_PROD", json.dumps({"conn_type": "slurmapi", "extra": extra}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", '{"type": "console"}')
    op = SlurmSubmitJobOperator(
        task_id="train", script="#!/bin/bash\ntrue\n", publish_results=False, slurmapi_conn_id="slurm_prod"
    )
    ti, event = Ti(), ended("job_completed")
    op.execute_complete({"ti": ti}, event)
    facets = facets_of(op)
    assert facets["externalQuery"]["externalQueryId"] == str(event["job_id"])
    assert facets["externalQuery"]["source"] == "slurm"
    assert facets["externalQuery"]["_schemaURL"].endswith("/ExternalQueryRunFacet.json#/$defs/ExternalQueryRunFacet")
    job = facets["slurmJob"]
    assert job["jobId"] == event["job_id"] and job["state"] == "COMPLETED" and job["exitCode"] == 0
    assert job["cluster"] == CLUSTER.resource_name and job["connectionId"] == "slurm_prod"
    # the XCom's own usage; OpenLineage leaves out what is None
    assert job["usage"] == {k: v for k, v in ti.pushed["slurm_usage"].items() if v is not None}


def test_a_failed_task_tells_of_its_failed_job(monkeypatch):
    monkeypatch.delenv("AIRFLOW__OPENLINEAGE__TRANSPORT", raising=False)
    ti = Ti()
    op = operator()
    with pytest.raises(SlurmJobFailedNoRetry):
        op.execute_complete({"ti": ti}, ended("job_failed"))
    job = facets_of(op, failed=True)["slurmJob"]
    assert job["state"] == "FAILED" and job["exitCode"] == ti.pushed["slurm_job"]["exit_code"] != 0
    assert job["cluster"] == ""  # OpenLineage not enabled: the connection was not read for it


def test_a_task_that_submitted_nothing_tells_of_no_job():
    assert facets_of(operator()) == {}
