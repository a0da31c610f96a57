"""Server-side HTML of the Slurm job pages (Jinja2 with autoescaping: every value is escaped)."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from airflow_provider_slurmapi.plugins.job_view import JobView, ListedJob, task_url

# Seconds between reloads of a page showing a job that is still queued or running.
LIVE_REFRESH_SECONDS = 5


@cache
def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("airflow_provider_slurmapi.plugins", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["task_url"] = task_url
    return env


def _now() -> str:
    return datetime.now(tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_job_page(
    view: JobView,
    *,
    conn_id: str,
    pages_root: str,
    ui_root: str,
    list_url: str,
    notes: list[str] | None = None,
    logged: Any = None,
    output_url: str = "",
) -> str:
    """The page of one job; ``logged``: its output as its task logged it (``output.LoggedOutput``), whose
    last lines it shows, with a link to the whole output at ``output_url``."""
    template = _env().get_template("job.html")
    return template.render(
        view=view,
        job=view.job,
        conn_id=conn_id,
        pages_root=pages_root,
        ui_root=ui_root,
        list_url=list_url,
        task_url=task_url(view.ref, ui_root) if view.ref else None,
        refresh=LIVE_REFRESH_SECONDS if view.live else None,
        notes=notes or [],
        rendered_at=_now(),
        logged=logged,
        output_url=output_url,
    )


def render_output_page(
    job: Any, logged: Any, *, page: int, conn_id: str, job_url: str, output_url: str, list_url: str, ui_root: str
) -> str:
    """One page of a job's whole output as its task logged it (``logged``: ``output.LoggedOutput`` or None)."""
    pages = logged.pages if logged is not None else 1
    page = min(max(1, page), pages)
    return (
        _env()
        .get_template("output.html")
        .render(
            job=job,
            logged=logged,
            lines=logged.page(page) if logged is not None else [],
            page=page,
            pages=pages,
            conn_id=conn_id,
            job_url=job_url,
            output_url=output_url,
            list_url=list_url,
            ui_root=ui_root,
            refresh=LIVE_REFRESH_SECONDS if not job.state.is_terminal and page == pages else None,
            rendered_at=_now(),
        )
    )


def render_job_list(
    rows: list[ListedJob],
    *,
    conn_id: str,
    pages_root: str,
    ui_root: str,
    job_url: Any,
    hidden: int,
    notes: list[str],
    days: int,
) -> str:
    """The overview of the jobs this Airflow submitted on a connection."""
    live = any(not r.job.state.is_terminal for r in rows)
    template = _env().get_template("jobs.html")
    return template.render(
        rows=rows,
        conn_id=conn_id,
        pages_root=pages_root,
        ui_root=ui_root,
        job_url=job_url,
        hidden=hidden,
        notes=notes,
        days=days,
        refresh=LIVE_REFRESH_SECONDS * 2 if live else None,
        rendered_at=_now(),
    )


def render_problem(*, status: int, title: str, detail: str, login_url: str | None, ui_root: str) -> str:
    """The page a browser gets instead of the web server's JSON refusal (same status code)."""
    template = _env().get_template("problem.html")
    return template.render(
        status=status, title=title, detail=detail, login_url=login_url, ui_root=ui_root, pages_root=None
    )
