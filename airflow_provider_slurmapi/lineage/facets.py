"""The run facets of a task's Slurm job, as OpenLineage's classes (needs the ``openlineage`` extra).

Imported only by ``get_openlineage_facets_on_complete`` / ``_on_failure``, which only Airflow's OpenLineage
listener calls: this module may import OpenLineage (through ``airflow.providers.common.compat``, as
official providers do).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.openlineage.facet import ExternalQueryRunFacet, RunFacet
from airflow.providers.openlineage.extractors import OperatorLineage
from attrs import define

from airflow_provider_slurmapi.lineage import EXTERNAL_QUERY_FACET, SLURM_JOB_FACET, SOURCE, facet_fields


@define
class SlurmJobRunFacet(RunFacet):
    """The Slurm job a task ran (``slurmJob`` in its run's facets); see
    :func:`~airflow_provider_slurmapi.lineage.facet_fields` for what each field holds (in camelCase, as
    OpenLineage's own facets name theirs)."""

    jobId: int
    cluster: str
    connectionId: str
    displayId: str | None = None
    name: str | None = None
    partition: str | None = None
    state: str | None = None
    stateReason: str | None = None
    exitCode: int | None = None
    exitSignal: int | None = None
    submitTime: str | None = None
    startTime: str | None = None
    endTime: str | None = None
    elapsedSeconds: int | None = None
    nodes: str | None = None
    arrayTaskCount: int | None = None
    arrayTasksCompleted: int | None = None
    usage: dict[str, Any] | None = None

    # Ids, names and times, never secrets: OpenLineage's redaction leaves them as they are.
    _additional_skip_redact = ["jobId", "cluster", "connectionId", "displayId", "state", "usage"]


def run_facets(
    job_id: int, summary: Mapping[str, Any] | None, *, cluster: str, connection_id: str
) -> dict[str, RunFacet]:
    """``externalQuery`` and ``slurmJob``: the facets of the run of a task whose Slurm job is ``job_id``."""
    return {
        EXTERNAL_QUERY_FACET: ExternalQueryRunFacet(externalQueryId=str(job_id), source=SOURCE),
        SLURM_JOB_FACET: SlurmJobRunFacet(
            **facet_fields(job_id, summary, cluster=cluster, connection_id=connection_id)
        ),
    }


def operator_lineage(
    job_id: int | None, summary: Mapping[str, Any] | None, *, cluster: str, connection_id: str
) -> OperatorLineage:
    """What the task tells OpenLineage: its job's run facets, none before a job was submitted (no inputs or
    outputs: what a batch script reads and writes is not known to the provider)."""
    if job_id is None:
        return OperatorLineage()
    return OperatorLineage(run_facets=run_facets(job_id, summary, cluster=cluster, connection_id=connection_id))
