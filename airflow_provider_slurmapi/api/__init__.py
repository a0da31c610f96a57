"""The Slurm Job API protocol core: envelope, errors, jobs, auth and clients, with no Airflow imports.

Usable on its own from a notebook or a script::

    from airflow_provider_slurmapi.api import ClusterRef, JobSpec, SlurmJobApiClient

    with SlurmJobApiClient(ClusterRef("my-project", "us-central1", "my-cluster")) as client:
        spec = JobSpec.build("#!/bin/bash\\necho hi", {"current_working_directory": "/home/me"})
        job_id = client.submit_job(spec).job_id
        print(client.get_job(job_id).state)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient, SlurmJobApiClient
    from airflow_provider_slurmapi.api.envelope import ClusterRef, SlurmReply
    from airflow_provider_slurmapi.api.errors import (
        GoogleApiError,
        SlurmApiError,
        SlurmJobApiError,
        SlurmJobFailedError,
        SlurmJobNotFoundError,
        SlurmJobSpecError,
        SlurmRequestRejectedError,
        SlurmTransportError,
    )
    from airflow_provider_slurmapi.api.jobs import JobSpec, JobState, SlurmJob

# Where each name lives. Nothing is imported with the package: Airflow's providers manager imports
# ``api.fields`` in every Airflow process, and a DAG file pays only for the modules it uses.
_HOMES = {
    "AsyncSlurmJobApiClient": "client",
    "SlurmJobApiClient": "client",
    "ClusterRef": "envelope",
    "SlurmReply": "envelope",
    "GoogleApiError": "errors",
    "SlurmApiError": "errors",
    "SlurmJobApiError": "errors",
    "SlurmJobFailedError": "errors",
    "SlurmJobNotFoundError": "errors",
    "SlurmJobSpecError": "errors",
    "SlurmRequestRejectedError": "errors",
    "SlurmTransportError": "errors",
    "JobSpec": "jobs",
    "JobState": "jobs",
    "SlurmJob": "jobs",
}

__all__ = [
    "AsyncSlurmJobApiClient",
    "ClusterRef",
    "GoogleApiError",
    "JobSpec",
    "JobState",
    "SlurmApiError",
    "SlurmJob",
    "SlurmJobApiClient",
    "SlurmJobApiError",
    "SlurmJobFailedError",
    "SlurmJobNotFoundError",
    "SlurmJobSpecError",
    "SlurmReply",
    "SlurmRequestRejectedError",
    "SlurmTransportError",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
