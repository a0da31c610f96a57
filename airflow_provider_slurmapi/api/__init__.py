"""The Slurm Job API protocol core: envelope, errors, jobs, auth and clients, with no Airflow imports.

Usable on its own from a notebook or a script::

    from airflow_provider_slurmapi.api import ClusterRef, SlurmJobApiClient

    client = SlurmJobApiClient(ClusterRef("my-project", "us-central1", "my-cluster"))
    job_id = client.submit_job("#!/bin/bash\\necho hi", {"current_working_directory": "/home/me"})
"""

from __future__ import annotations

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

__all__ = [
    "ClusterRef",
    "GoogleApiError",
    "JobSpec",
    "JobState",
    "SlurmApiError",
    "SlurmJob",
    "SlurmJobApiError",
    "SlurmJobFailedError",
    "SlurmJobNotFoundError",
    "SlurmJobSpecError",
    "SlurmReply",
    "SlurmRequestRejectedError",
    "SlurmTransportError",
]


def __getattr__(name: str) -> object:
    # The clients pull in requests/httpx/google-auth; load them only when asked for.
    if name in ("SlurmJobApiClient", "AsyncSlurmJobApiClient"):
        from airflow_provider_slurmapi.api import client

        return getattr(client, name)
    raise AttributeError(name)
