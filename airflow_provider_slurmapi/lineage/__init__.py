"""OpenLineage for the tasks that run Slurm jobs (the ``openlineage`` extra: apache-airflow-providers-openlineage).

With the OpenLineage provider installed and enabled (a transport configured), a task of
:class:`~airflow_provider_slurmapi.operators.slurmapi.SlurmSubmitJobOperator`, ``@task.slurm`` or
``@task.slurm_script``:

* tells of its Slurm job in its COMPLETE and FAIL events, as two run facets: ``externalQuery``
  (OpenLineage's ``ExternalQueryRunFacet``: ``externalQueryId`` the job id, ``source`` ``slurm``) and
  ``slurmJob`` (:class:`~airflow_provider_slurmapi.lineage.facets.SlurmJobRunFacet`: the job's cluster,
  connection, state, exit, times and usage, :func:`facet_fields`);
* gives its job the task's OpenLineage run, in the job's environment (:data:`PARENT_VARIABLES`, the names
  OpenLineage's own integrations read, e.g. ``dbt-ol``), so that lineage the job emits itself has the task
  as its parent. A task whose own ``environment`` (or ``job["environment"]``) sets any of them gets none
  added: its values (an empty one: no parent) are the job's.

This module imports nothing of OpenLineage at its top (a DAG file that imports the operators loads none of it,
tests/unit/test_import_cost.py); :mod:`~airflow_provider_slurmapi.lineage.facets` does, and only Airflow's
OpenLineage listener, which exists only where the provider is installed, makes the operator import it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import ClusterRef

log = logging.getLogger(__name__)

# The job's environment: the task's run as ``namespace/job_name/run_id``, the DAG run's (the root) likewise,
# and both as OpenLineage's JSON context. OpenLineage's integrations read the context first and fall back to
# the two ids (openlineage-integration-common's ``get_parent_run_metadata``, which dbt-ol uses).
PARENT_ID = "OPENLINEAGE_PARENT_ID"
ROOT_PARENT_ID = "OPENLINEAGE_ROOT_PARENT_ID"
CONTEXT = "OPENLINEAGE_CONTEXT"
PARENT_VARIABLES = (PARENT_ID, ROOT_PARENT_ID, CONTEXT)

# ExternalQueryRunFacet's ``source``, and the run facets' names in an event.
SOURCE = "slurm"
EXTERNAL_QUERY_FACET = "externalQuery"
SLURM_JOB_FACET = "slurmJob"


class LineageRun(NamedTuple):
    """A run as OpenLineage names it: its job's namespace and name, and its run id (a UUID)."""

    namespace: str
    name: str
    run_id: str

    @property
    def parent_id(self) -> str:
        """``namespace/name/run_id``, the form of ``OPENLINEAGE_PARENT_ID`` (and of the provider's
        ``lineage_parent_id`` macro)."""
        return f"{self.namespace}/{self.name}/{self.run_id}"

    def as_context(self) -> dict[str, Any]:
        return {"run": {"runId": self.run_id}, "job": {"namespace": self.namespace, "name": self.name}}


def enabled() -> bool:
    """The OpenLineage provider is installed and enabled: a transport is configured and ``[openlineage]
    disabled`` is not set (the provider's own test, which also decides whether its listener runs)."""
    if importlib.util.find_spec("airflow.providers.openlineage") is None:
        return False
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    try:
        return not conf.is_disabled()
    except Exception as err:  # a transport setting that is not JSON: the provider's listener fails on it too
        log.warning("OpenLineage's configuration could not be read (%s): the Slurm job gets no parent run", err)
        return False


def parent_variables(parent: LineageRun, root: LineageRun) -> dict[str, str]:
    """The job's environment entries naming its parent run (the task's) and root run (the DAG run's).

    ``OPENLINEAGE_CONTEXT`` always; the two ``..._ID`` variables only when no part has a ``/`` in it, which
    their ``namespace/name/run_id`` form could not carry (a reader would split it wrongly).
    """
    variables: dict[str, str] = {}
    if not any("/" in part for part in (*parent, *root)):
        variables[PARENT_ID] = parent.parent_id
        variables[ROOT_PARENT_ID] = root.parent_id
    context = {"parent": {**parent.as_context(), "root": root.as_context()}}
    variables[CONTEXT] = json.dumps(context, separators=(",", ":"), sort_keys=True)
    return variables


def parent_environment(task_instance: Any) -> dict[str, str]:
    """:func:`parent_variables` of ``task_instance``'s OpenLineage run, as the OpenLineage provider's macros
    name it (the same run id as the task's events); empty when OpenLineage is not installed and enabled."""
    if not enabled():
        return {}
    try:
        from airflow.providers.openlineage.plugins import macros

        parent = LineageRun(
            str(macros.lineage_job_namespace()),
            str(macros.lineage_job_name(task_instance)),
            str(macros.lineage_run_id(task_instance)),
        )
        root = LineageRun(
            str(macros.lineage_root_job_namespace(task_instance)),
            str(macros.lineage_root_job_name(task_instance)),
            str(macros.lineage_root_run_id(task_instance)),
        )
    except Exception as err:  # the job still runs: only its own lineage loses its parent
        log.warning("Could not work out the task's OpenLineage run (%s): the Slurm job gets no parent run", err)
        return {}
    return parent_variables(parent, root)


def with_parent(environment: Any, variables: Mapping[str, str]) -> Any:
    """``environment`` (the job's, a dict or a ``KEY=VALUE`` list, or None) with ``variables`` added, unless it
    names any of :data:`PARENT_VARIABLES` itself (even empty: no parent), which then says all the job gets.
    Anything else is returned as it is, for the spec's check to refuse."""
    if not variables:
        return environment
    if environment is None:
        return dict(variables)
    if isinstance(environment, Mapping):
        names = {str(k) for k in environment}
    elif isinstance(environment, (list, tuple)):
        names = {str(e).partition("=")[0] for e in environment}
    else:
        return environment
    if names & set(PARENT_VARIABLES):
        return environment
    if isinstance(environment, Mapping):
        return {**variables, **environment}
    return [f"{k}={v}" for k, v in variables.items()] + list(environment)


def cluster_name(cluster: Any) -> str:
    """A connection's cluster, as the ``slurmJob`` facet names it: the Google resource name
    (``projects/P/locations/R/modelDevelopmentClusters/C``), or a direct slurmrestd's URL."""
    if isinstance(cluster, ClusterRef):
        return cluster.resource_name
    if isinstance(cluster, SlurmrestdRef):
        return cluster.url
    return ""


# The ``slurmJob`` facet's fields from a job summary (``SlurmJob.summary()``, XCom ``slurm_job``).
_SUMMARY_FIELDS = {
    "displayId": "display_id",
    "name": "name",
    "partition": "partition",
    "state": "state",
    "stateReason": "state_reason",
    "exitCode": "exit_code",
    "exitSignal": "exit_signal",
    "submitTime": "submit_time",
    "startTime": "start_time",
    "endTime": "end_time",
    "elapsedSeconds": "elapsed_seconds",
    "nodes": "nodes",
    "arrayTaskCount": "array_task_count",
    "arrayTasksCompleted": "array_tasks_completed",
    "usage": "usage",
}


def facet_fields(job_id: int, summary: Mapping[str, Any] | None, *, cluster: str, connection_id: str) -> dict[str, Any]:
    """The ``slurmJob`` facet's fields: ``jobId``, ``cluster``, ``connectionId``, and from the job's summary
    (None: the task did not see the job end, e.g. ``wait_for_completion=False``) its ``displayId``,
    ``name``, ``partition``, ``state``, ``stateReason``, ``exitCode``, ``exitSignal``, ``submitTime``,
    ``startTime``, ``endTime``, ``elapsedSeconds``, ``nodes``, ``usage`` (XCom ``slurm_usage``'s dict) and,
    for an array, ``arrayTaskCount`` and ``arrayTasksCompleted``. What the summary lacks is None."""
    known = summary if isinstance(summary, Mapping) else {}
    fields: dict[str, Any] = {"jobId": int(job_id), "cluster": cluster, "connectionId": connection_id}
    for name, key in _SUMMARY_FIELDS.items():
        value = known.get(key)
        fields[name] = dict(value) if isinstance(value, Mapping) else value
    if fields["state"] is not None:
        fields["state"] = str(fields["state"])
    return fields
