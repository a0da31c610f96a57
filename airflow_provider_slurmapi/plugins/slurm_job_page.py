"""The provider's Airflow plugin (entry point ``airflow.plugins``): Slurm job pages in the Airflow UI.

On Airflow 3.1+ it mounts the pages' FastAPI app at ``/slurmapi`` under the API server and adds a
"Slurm jobs" entry to the UI's Browse menu. On Airflow 2.x it registers nothing: there the job link
falls back to the connection's ``job_link_template`` (hidden when none is set).

Importing this module is cheap (every Airflow process loads plugins): the app, and with it FastAPI,
Jinja2 and the hook, is built only when the API server asks for ``fastapi_apps``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.providers.common.compat.sdk import AirflowPlugin
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_1_PLUS

from airflow_provider_slurmapi.plugins.urls import PAGES_PREFIX, base_path

PLUGIN_NAME = "slurmapi"


def pages_available() -> bool:
    """Whether this Airflow serves the job pages (the plugin's FastAPI app and UI entry: 3.1+)."""
    return AIRFLOW_V_3_1_PLUS


@cache
def _fastapi_apps() -> list[dict[str, Any]]:
    from airflow_provider_slurmapi.plugins.app import app_info

    return [app_info()]


def _external_views() -> list[dict[str, Any]]:
    from airflow.providers.common.compat.sdk import conf

    root = base_path(conf.get("api", "base_url", fallback="") or "")
    return [
        {
            "name": "Slurm jobs",
            "href": f"{root.rstrip('/')}{PAGES_PREFIX}/jobs",
            "destination": "nav",
            "category": "browse",
            "url_route": "slurm-jobs",
        }
    ]


class SlurmJobPagePlugin(AirflowPlugin):
    """Slurm job status pages, and their entry in the navigation (Airflow 3.1+ only)."""

    name = PLUGIN_NAME

    @property  # type: ignore[override]
    def fastapi_apps(self) -> list[Any]:
        return _fastapi_apps() if pages_available() else []

    @fastapi_apps.setter
    def fastapi_apps(self, value: list[Any]) -> None:  # Airflow never sets it; keeps the attribute writable
        raise AttributeError("SlurmJobPagePlugin.fastapi_apps is computed")

    @property  # type: ignore[override]
    def external_views(self) -> list[Any]:
        return self._views if pages_available() else []

    @external_views.setter
    def external_views(self, value: list[Any]) -> None:
        raise AttributeError("SlurmJobPagePlugin.external_views is computed")

    @property
    def _views(self) -> list[dict[str, Any]]:
        views = self.__dict__.get("_external_views")
        if views is None:
            views = self.__dict__["_external_views"] = _external_views()
        return views
