"""Where the Slurm job pages live (cheap to import: used by the job link in every worker)."""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlsplit

from airflow_provider_slurmapi.api.fields import DEFAULT_CONN_ID

# The plugin's FastAPI app is mounted here, under the Airflow API server.
PAGES_PREFIX = "/slurmapi"
# SlurmJobApiHook.default_conn_name, repeated so that this module imports nothing heavy.


def base_path(base_url: str) -> str:
    """The path part of ``[api] base_url`` (``/`` or ``/airflow/``), always ending with ``/``."""
    path = urlsplit(base_url or "/").path or "/"
    return path if path.endswith("/") else path + "/"


def _query(conn_id: str, **more: str) -> str:
    params = {k: v for k, v in (("conn_id", conn_id if conn_id != DEFAULT_CONN_ID else ""), *more.items()) if v}
    return f"?{urlencode(params)}" if params else ""


def job_page_path(job_id: int | str, conn_id: str = DEFAULT_CONN_ID, *, base_url: str = "") -> str:
    """``/slurmapi/jobs/123`` (``?conn_id=...`` for another connection), below ``base_url``'s path."""
    prefix = base_path(base_url).rstrip("/") + PAGES_PREFIX
    return f"{prefix}/jobs/{quote(str(job_id), safe='')}{_query(conn_id)}"


def job_list_path(conn_id: str = DEFAULT_CONN_ID, *, base_url: str = "") -> str:
    prefix = base_path(base_url).rstrip("/") + PAGES_PREFIX
    return f"{prefix}/jobs{_query(conn_id)}"


def job_page_url(job_id: int | str, conn_id: str = DEFAULT_CONN_ID, *, base_url: str = "") -> str:
    """The job page as the link opens it: absolute when ``[api] base_url`` is, else from the site root."""
    path = job_page_path(job_id, conn_id, base_url=base_url)
    parts = urlsplit(base_url or "")
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}{path}"
    return path
