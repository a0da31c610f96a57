"""The Slurm Job API protocol core: envelope, errors, jobs, auth and clients, with no Airflow imports.

Usable on its own from a notebook or a script::

    from airflow_provider_slurmapi.api.client import SlurmJobApiClient
    from airflow_provider_slurmapi.api.envelope import ClusterRef
    from airflow_provider_slurmapi.api.spec import JobSpec

    with SlurmJobApiClient(ClusterRef("my-project", "us-central1", "my-cluster")) as client:
        spec = JobSpec.build("#!/bin/bash\\necho hi", {"current_working_directory": "/home/me"})
        job_id = client.submit_job(spec).job_id
        print(client.get_job(job_id).state)

The package itself imports nothing: Airflow's providers manager reads ``api.fields`` in every Airflow
process, and that must not load the clients.
"""
