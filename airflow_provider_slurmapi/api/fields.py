"""A slurmapi connection's fields for Airflow's connection form: cheap to import.

Airflow's providers manager calls ``get_provider_info`` in every Airflow process (the scheduler, the
DAG processor, each task), so what it needs lives here, away from the clients and their dependencies
(it reads the default REST version from ``api.versions``, which needs only ``api.errors``).
"""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi.api.versions import DEFAULT_VERSION

DEFAULT_TIMEOUT = 60.0
# The connection id every hook, operator, sensor, trigger and page uses unless told otherwise.
DEFAULT_CONN_ID = "slurmapi_default"

# The connection's extra fields: name -> (label, description). One list for every UI generation, in the
# order the form shows them: the Google cluster first.
CONNECTION_FIELDS: dict[str, tuple[str, str]] = {
    "project_id": ("Project ID", "Google Cloud project that owns the cluster"),
    "region": ("Region", "Region of the cluster, e.g. us-central1"),
    "cluster_id": ("Cluster ID", "ID of the model development cluster"),
    "endpoint": ("Endpoint override", "Default https://REGION-aiplatform.googleapis.com"),
    "universe_domain": ("Universe domain", "Default googleapis.com"),
    "key_path": ("Key file path", "Service-account key file; empty = Application Default Credentials"),
    "keyfile_dict": ("Key file JSON", "Service-account key JSON (kept secret)"),
    "impersonation_chain": ("Impersonation chain", "Service accounts to impersonate, comma separated"),
    "scopes": ("Scopes", "Comma-separated OAuth scopes (default cloud-platform)"),
    "quota_project_id": ("Quota project", "Project billed for API quota"),
    "api_version": ("Slurm REST API version", f"v0.0.40 .. v0.0.45, or auto (default {DEFAULT_VERSION})"),
    "slurm_user": (
        "Slurm user",
        "The Linux account your jobs run as: only its jobs are reattached or cancelled "
        "(direct slurmrestd: X-SLURM-USER-NAME)",
    ),
    "job_link_template": ("Job link template", "http(s) URL for the job link, with {job_id}, {cluster_id}, ..."),
    "timeout": ("Timeout (seconds)", "Limit of each HTTP try, the whole reply included (default 60)"),
    "retries": ("Retries", "Retries of a transiently failed GET/DELETE, with backoff (default 4)"),
    "retry_delay": ("First retry delay (seconds)", "Doubles on each retry, with jitter (default 1)"),
    "staging_uri": (
        "Staging location",
        "gs://BUCKET/PREFIX where jobs stage their full output and results (empty: the job's Slurm comment)",
    ),
    "slurmrestd_url": ("slurmrestd URL", "Call an on-premises slurmrestd directly instead of Google"),
    "slurm_jwt": ("Slurm JWT", "X-SLURM-USER-TOKEN for slurmrestd_url (kept secret)"),
}
# The form's sections (Airflow 3.2+ shows each as a fold of its own), in the order of CONNECTION_FIELDS.
CONNECTION_SECTIONS: dict[str, tuple[str, ...]] = {
    "Google Cloud cluster": ("project_id", "region", "cluster_id", "endpoint", "universe_domain"),
    "Google credentials": ("key_path", "keyfile_dict", "impersonation_chain", "scopes", "quota_project_id"),
    "Slurm": ("api_version", "slurm_user", "job_link_template"),
    "Calls": ("timeout", "retries", "retry_delay"),
    "Full output and results": ("staging_uri",),
    "Direct slurmrestd (instead of Google)": ("slurmrestd_url", "slurm_jwt"),
}
SECRET_FIELDS = frozenset({"keyfile_dict", "slurm_jwt"})


def section_of(name: str) -> str:
    """The form section a connection field is shown in."""
    return next(title for title, names in CONNECTION_SECTIONS.items() if name in names)


def ui_field_behaviour() -> dict[str, Any]:
    """Every standard field is hidden: the form opens with the Google cluster (login and password, still
    read for a direct slurmrestd connection made from a URI, are the Slurm user and JWT fields)."""
    return {
        "hidden_fields": ["host", "schema", "port", "extra", "login", "password"],
        "relabeling": {},
        "placeholders": {
            "project_id": "my-project",
            "region": "us-central1",
            "cluster_id": "my-cluster",
            "api_version": DEFAULT_VERSION,
            "key_path": "/path/to/key.json",
            "timeout": str(int(DEFAULT_TIMEOUT)),
        },
    }
