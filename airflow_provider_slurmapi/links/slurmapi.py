"""SlurmJobLink: the task's "Slurm Job" button, pointing at the job's status page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import BaseOperatorLink, XCom

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import TaskInstanceKey

XCOM_LINK_KEY = "slurm_job_link"
# Where the link goes when the connection sets no job_link_template: the cluster in the Cloud console.
DEFAULT_LINK_TEMPLATE = (
    "https://console.cloud.google.com/vertex-ai/model-development-clusters/locations/{region}/"
    "clusters/{cluster_id}?project={project_id}&slurmJob={job_id}"
)


def render_link(template: str, *, job_id: int | str, **fields: str) -> str:
    """``template`` with ``{job_id}``, ``{project_id}``, ``{region}``, ``{cluster_id}`` and ``{url}`` filled in.

    A direct slurmrestd connection has no console: without a template its link is empty (hidden).
    """
    if not template and not fields.get("project_id"):
        return ""
    try:
        return (template or DEFAULT_LINK_TEMPLATE).format(job_id=job_id, **fields)
    except (KeyError, IndexError, ValueError):
        return ""


class SlurmJobLink(BaseOperatorLink):
    """Opens the Slurm job a task submitted or waits on.

    The URL is rendered when the job is known (before waiting or deferring) and kept in XCom, so the
    link works while the job runs and after the task ends.
    """

    name = "Slurm Job"
    key: ClassVar[str] = XCOM_LINK_KEY

    @staticmethod
    def persist(context: Any, *, url: str, job_id: int | str) -> None:
        """Store the link for the running task instance."""
        context["ti"].xcom_push(key=XCOM_LINK_KEY, value={"url": url, "job_id": str(job_id)})

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        value = XCom.get_value(key=XCOM_LINK_KEY, ti_key=ti_key)
        if isinstance(value, dict):
            return str(value.get("url") or "")
        return ""
