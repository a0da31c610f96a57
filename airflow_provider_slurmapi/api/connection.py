"""A slurmapi connection's extra fields, read and checked into ConnectionSettings (no Airflow imports)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_slurmapi.api import checks, versions
from airflow_provider_slurmapi.api.auth import CLOUD_PLATFORM_SCOPE, AuthConfig, parse_chain
from airflow_provider_slurmapi.api.client import RetryPolicy
from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import ClusterRef, is_loopback
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.fields import CONNECTION_FIELDS, DEFAULT_CONN_ID, DEFAULT_TIMEOUT
from airflow_provider_slurmapi.api.staging import StagingLocation

_PREFIX = "extra__slurmapi__"


@dataclass(frozen=True)
class ConnectionSettings:
    """Everything the clients need from a connection, checked."""

    cluster: ClusterRef | SlurmrestdRef
    auth: AuthConfig
    api_version: str
    timeout: float
    job_link_template: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    slurm_user: str = ""
    # Where jobs stage their full output and results (``staging_uri``); None: the job's Slurm comment only.
    staging: StagingLocation | None = None

    def client_kwargs(self) -> dict[str, Any]:
        return {
            "auth": self.auth,
            "api_version": self.api_version,
            "timeout": self.timeout,
            "retry": self.retry,
            "slurm_user": self.slurm_user or None,
        }

    def link_fields(self) -> dict[str, str]:
        """What a ``job_link_template`` may use besides ``{job_id}``."""
        c = self.cluster
        if isinstance(c, ClusterRef):
            return {"project_id": c.project_id, "region": c.region, "cluster_id": c.cluster_id, "url": c.base_url}
        return {"project_id": "", "region": "", "cluster_id": "", "url": c.url}


def settings_from_extra(
    extra: Mapping[str, Any],
    conn_id: str = DEFAULT_CONN_ID,
    *,
    login: str | None = None,
    password: str | None = None,
) -> ConnectionSettings:
    """Read and check a connection's extra; every error names the field and the connection.

    With ``slurmrestd_url`` set the connection talks to slurmrestd directly (``login``/``password`` are
    the defaults of ``slurm_user``/``slurm_jwt``); otherwise to the Google Slurm Job API.
    """
    values = {k.removeprefix(_PREFIX): v for k, v in extra.items() if v not in (None, "")}
    unknown = sorted(set(values) - set(CONNECTION_FIELDS))
    if unknown:
        raise SlurmJobSpecError(
            f"connection {conn_id!r} extra {unknown[0]!r}",
            "is not a slurmapi connection field",
            f"Use only: {', '.join(CONNECTION_FIELDS)}.",
        )
    try:
        keyfile = values.get("keyfile_dict")
        if isinstance(keyfile, str):
            try:
                keyfile = json.loads(keyfile)
            except ValueError:
                raise SlurmJobSpecError(
                    "keyfile_dict", "is not valid JSON", "Paste the service-account key file's content."
                ) from None
        endpoint = values.get("endpoint")
        common: dict[str, Any] = {
            "api_version": versions.check_version(values.get("api_version", versions.DEFAULT_VERSION)),
            "timeout": checks.seconds(values.get("timeout", DEFAULT_TIMEOUT), "timeout", text=True),
            "job_link_template": _link_template(values.get("job_link_template")),
            "retry": RetryPolicy(
                attempts=_count(values.get("retries", 4)) + 1,
                initial_delay=checks.seconds(values.get("retry_delay", 1.0), "retry_delay", zero=True, text=True),
            ),
            "staging": StagingLocation.parse(values["staging_uri"]) if values.get("staging_uri") else None,
        }
        if values.get("slurmrestd_url"):
            direct = SlurmrestdRef(
                url=str(values["slurmrestd_url"]),
                user=str(values.get("slurm_user") or login or ""),
                token=str(values.get("slurm_jwt") or password or ""),
            )
            return ConnectionSettings(cluster=direct, auth=AuthConfig(), slurm_user=direct.user, **common)
        common["slurm_user"] = _slurm_user(values.get("slurm_user"))
        cluster = ClusterRef(
            project_id=values.get("project_id"),  # type: ignore[arg-type]
            region=values.get("region"),  # type: ignore[arg-type]
            cluster_id=values.get("cluster_id"),  # type: ignore[arg-type]
            endpoint=endpoint,
            universe_domain=str(values.get("universe_domain") or "googleapis.com"),
        )
        scopes = values.get("scopes") or [CLOUD_PLATFORM_SCOPE]
        if isinstance(scopes, str):
            scopes = [s.strip() for s in scopes.split(",") if s.strip()]
        loopback = bool(cluster.endpoint) and is_loopback(_host(cluster.endpoint or ""))
        auth = AuthConfig(
            key_path=values.get("key_path"),
            keyfile_dict=keyfile,
            impersonation_chain=parse_chain(values.get("impersonation_chain")),
            scopes=tuple(scopes),
            quota_project_id=values.get("quota_project_id"),
            # A loopback endpoint is the emulator, which also plays Google's IAM credentials API.
            iam_endpoint=cluster.endpoint if loopback else None,
        )
        return ConnectionSettings(cluster=cluster, auth=auth, **common)
    except SlurmJobSpecError as err:
        raise SlurmJobSpecError(f"connection {conn_id!r} field {err.field}", err.problem, err.fix) from None


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _count(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20:
        raise SlurmJobSpecError("retries", f"{value!r} is not a count from 0 to 20", "Give e.g. 4.")
    return value


def _link_template(value: Any) -> str:
    """The template of the task's job link: an http(s) URL, since Airflow's UI puts it in a link as is."""
    template = str(value or "")
    if template and not template.lower().startswith(("https://", "http://", "{url}")):
        raise SlurmJobSpecError(
            "job_link_template",
            f"{template[:100]!r} is not an http(s) link",
            "Start it with https:// (or with {url}, the cluster's endpoint), "
            "e.g. https://grafana.example.com/d/slurm?job={job_id}.",
        )
    return template


def _slurm_user(value: Any) -> str:
    """The Linux account the cluster runs this connection's jobs as ("" when not set)."""
    text = "" if value is None else str(value).strip()
    if text and not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}", text):
        raise SlurmJobSpecError(
            "slurm_user", f"{value!r} is not a Linux user name", "Give the account your jobs run as, e.g. jdoe."
        )
    return text
