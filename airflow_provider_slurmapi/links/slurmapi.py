"""SlurmJobLink: the task's "Slurm Job" button, pointing at the job's status page.

Where it goes:

* the connection's ``job_link_template`` when it sets one (the Cloud console, Grafana, anything), with
  ``{job_id}``, ``{project_id}``, ``{region}``, ``{cluster_id}`` and ``{url}`` filled in;
* otherwise, on Airflow 3.1+, the provider's own job page inside the Airflow web server
  (``/slurmapi/jobs/<job_id>``, served by the provider's plugin);
* otherwise (Airflow 2.x without a template) nowhere: the button stays hidden.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom, conf

from airflow_provider_slurmapi.plugins.urls import DEFAULT_CONN_ID, job_page_url

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import TaskInstanceKey

log = logging.getLogger(__name__)

XCOM_LINK_KEY = "slurm_job_link"
# The operator attribute holding the link a task stored in this process ({} while it has stored none).
_STORED = "_slurm_job_link"
# A job_link_template for the cluster in the Google Cloud console (no longer the default target).
CLOUD_CONSOLE_LINK_TEMPLATE = (
    "https://console.cloud.google.com/vertex-ai/model-development-clusters/locations/{region}/"
    "clusters/{cluster_id}?project={project_id}&slurmJob={job_id}"
)


def render_link(template: str, *, job_id: int | str, **fields: str) -> str:
    """``template`` with ``{job_id}``, ``{project_id}``, ``{region}``, ``{cluster_id}`` and ``{url}`` filled in.

    Empty without a template (or with one that does not render): the link then opens the provider's
    job page (see :meth:`SlurmJobLink.persist`).
    """
    if not template:
        return ""
    try:
        return template.format(job_id=job_id, **fields)
    except (KeyError, IndexError, ValueError, AttributeError) as err:
        log.warning(
            "The connection's job_link_template %r does not render (%s: %s); the link opens the provider's "
            "job page instead. Use only the placeholders {job_id}, {project_id}, {region}, {cluster_id}, {url}.",
            template,
            type(err).__name__,
            err,
        )
        return ""


def default_job_url(job_id: int | str, conn_id: str | None) -> str:
    """The provider's job page in this Airflow's web server; empty where the pages are not served (2.x)."""
    # Here, not at the top: a DAG file that imports the operators loads no plugin (test_import_cost).
    from airflow_provider_slurmapi.plugins.slurm_job_page import pages_available

    if not pages_available():
        return ""
    base_url = conf.get("api", "base_url", fallback="") or ""
    return job_page_url(job_id, conn_id or DEFAULT_CONN_ID, base_url=base_url)


class SlurmJobLink(BaseOperatorLink):
    """Opens the Slurm job a task submitted or waits on.

    The URL is worked out when the job is known (before waiting or deferring) and kept in XCom, so the
    link works while the job runs and after the task ends.

    Airflow 3 reads every extra link as a task finishes, on the worker, and its SDK logs a missing
    XCom at error level: a task that failed before its job was known (a rejected spec, a missing
    connection) would end with a misleading ``XCom not found ... key=slurm_job_link``. So an operator
    marks itself with :meth:`none_yet` when it starts, and the link it stores is also kept on it: in that
    process the link is answered without reading XCom. A resumed task (after a deferral) and the web
    server read the XCom.
    """

    name = "Slurm Job"
    key: ClassVar[str] = XCOM_LINK_KEY

    @staticmethod
    def persist(context: Any, *, url: str, job_id: int | str, conn_id: str | None = None) -> None:
        """Store the link for the running task instance.

        ``url`` is the rendered ``job_link_template``; when empty, the provider's job page is used (the
        connection is ``conn_id``, else the task's ``slurmapi_conn_id``).
        """
        if conn_id is None:
            conn_id = getattr(context.get("task"), "slurmapi_conn_id", None) or DEFAULT_CONN_ID
        target = url or default_job_url(job_id, conn_id)
        value = {"url": target, "job_id": str(job_id), "conn_id": conn_id}
        context["ti"].xcom_push(key=XCOM_LINK_KEY, value=value)
        if context.get("task") is not None:
            setattr(context["task"], _STORED, value)

    @staticmethod
    def none_yet(operator: Any) -> None:
        """Mark ``operator`` as running in this process with no link stored yet (see the class's notes)."""
        setattr(operator, _STORED, {})

    @classmethod
    def persist_for(cls, context: Any, hook: Any, job_id: int | str) -> None:
        """Render the connection's ``job_link_template`` for ``job_id`` and store the link (see :meth:`persist`)."""
        settings = hook.settings
        url = render_link(settings.job_link_template, job_id=job_id, **settings.link_fields())
        cls.persist(context, url=url, job_id=job_id, conn_id=hook.slurmapi_conn_id)

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        stored = getattr(operator, _STORED, None)
        value = stored if isinstance(stored, dict) else XCom.get_value(key=XCOM_LINK_KEY, ti_key=ti_key)
        if isinstance(value, dict):
            return str(value.get("url") or "")
        return ""
