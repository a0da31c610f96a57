"""The Slurm job pages: a FastAPI app that the plugin mounts under the Airflow 3 API server at ``/slurmapi``.

Every route needs an authenticated Airflow user, found exactly as the Airflow API finds one (its
``get_user`` dependency: the ``Authorization: Bearer`` header, else the UI's ``_token`` cookie), so a
missing or bad token gets the API server's own 401/403. A job is shown only to users who may read the
DAG named by the task-instance tag in its comment; a job without a tag (or whose tag cannot name its
DAG exactly) only to users who may read every DAG. The pages only read: there is no route that sends
anything but a GET to Slurm.

Imported only by the API server (through the plugin), never by schedulers or workers.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.core_api.security import get_user
from airflow.providers.common.compat.sdk import AirflowNotFoundException, conf
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.errors import SlurmApiError, SlurmJobApiError, SlurmJobNotFoundError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.versions import check_job_id
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.plugins import render
from airflow_provider_slurmapi.plugins.job_view import JobView, TaskRef, listed, merge_listing, parse_tag
from airflow_provider_slurmapi.plugins.urls import DEFAULT_CONN_ID, base_path

log = logging.getLogger(__name__)

# The Airflow API's own authentication: a missing, expired or invalid token gets its 401/403.
UserDep = Annotated[BaseUser, Depends(get_user)]
ConnIdQuery = Annotated[str, Query(description="the slurmapi connection")]

_CONN_ID = re.compile(r"[A-Za-z0-9_.\-]{1,250}")
_SECURITY_HEADERS = {
    # No script at all; styles are inline; the pages may be framed by the Airflow UI only.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _ui_root() -> str:
    return base_path(conf.get("api", "base_url", fallback="") or "")


def _pages_root(request: Request) -> str:
    """The mount point as the browser sees it (``/slurmapi``, or below a base path)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=_SECURITY_HEADERS)


def _check_conn_id(conn_id: str) -> str:
    if not _CONN_ID.fullmatch(conn_id):
        raise HTTPException(422, "conn_id must be an Airflow connection id (letters, digits, _ . -)")
    return conn_id


def _hook(conn_id: str) -> SlurmJobApiHook:
    """The provider's hook on ``conn_id``, refusing connections that are not of type slurmapi."""
    hook = SlurmJobApiHook(slurmapi_conn_id=conn_id)
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise HTTPException(404, f"There is no connection {conn_id!r}.") from None
    if conn.conn_type != SlurmJobApiHook.conn_type:
        raise HTTPException(404, f"Connection {conn_id!r} is not a Slurm Job API (slurmapi) connection.")
    return hook


def _close(hook: SlurmJobApiHook) -> None:
    client = hook._client
    if client is not None:
        client.close()


def may_read_dag(user: BaseUser, dag_id: str | None) -> bool:
    """Whether ``user`` may read the DAG ``dag_id`` (``None``: every DAG), as the auth manager says."""
    details = None
    if dag_id is not None:
        team = None
        try:
            from airflow.models.dag import DagModel

            get_team = getattr(DagModel, "get_team_name", None)
            team = get_team(dag_id) if get_team else None
        except Exception:
            log.debug("Could not look up the team of DAG %s", dag_id, exc_info=True)
        try:
            details = DagDetails(id=dag_id, team_name=team)
        except TypeError:  # Airflow without teams
            details = DagDetails(id=dag_id)
    return bool(get_auth_manager().is_authorized_dag(method="GET", details=details, user=user))


def require_some_dag_access(user: BaseUser) -> None:
    """Refuse, before any call to Slurm, a user who may read no DAG at all (so could see no job)."""
    manager = get_auth_manager()
    if manager.get_authorized_dag_ids(user=user, method="GET") or may_read_dag(user, None):
        return
    raise HTTPException(403, "Forbidden")


def _access_dag_id(ref: TaskRef | None) -> str | None:
    """The DAG whose read permission guards a job: None (every DAG) when the tag cannot name one."""
    return ref.dag_id if ref is not None and ref.dag_id_exact else None


def _finished_from_accounting(hook: SlurmJobApiHook, job: SlurmJob, notes: list[str]) -> SlurmJob:
    """For a job that has ended but is still in the queue, accounting's record (its own final word)."""
    if not job.state.is_terminal or job.source != "slurm":
        return job
    client = hook.get_conn()
    try:
        accounted = client.run(ops.get_accounted_job(client.api_version, job.display_id))
    except SlurmJobApiError as err:
        notes.append(f"Accounting (/slurmdb) could not be read ({err}); showing the active queue's record.")
        return job
    if accounted is None:
        notes.append("Accounting (/slurmdb) has no record of the job yet; showing the active queue's record.")
        return job
    fill = {
        name: getattr(job, name)
        for name in ("standard_output", "standard_error", "state_description", "working_directory", "nodes")
        if not getattr(accounted, name) and getattr(job, name)
    }
    return dataclasses.replace(accounted, **fill) if fill else accounted


def _login_url(request: Request) -> str | None:
    try:
        return str(get_auth_manager().get_url_login(next_url=str(request.url)))
    except Exception:
        return None


def create_app() -> FastAPI:
    """The pages' app (one per API server process)."""
    app = FastAPI(title="Slurm job pages", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(StarletteHTTPException)
    async def refusal(request: Request, exc: StarletteHTTPException) -> Response:
        """The API server's refusal: its JSON for API clients, the same status as a page for browsers."""
        headers = dict(getattr(exc, "headers", None) or {})
        if "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)
        titles = {401: "Not authenticated", 403: "Forbidden", 404: "Not found", 422: "Bad request"}
        body = render.render_problem(
            status=exc.status_code,
            title=titles.get(exc.status_code, "Slurm could not be read"),
            detail=str(exc.detail),
            login_url=_login_url(request) if exc.status_code == 401 else None,
            ui_root=_ui_root(),
        )
        return HTMLResponse(body, status_code=exc.status_code, headers={**_SECURITY_HEADERS, **headers})

    @app.get("/", include_in_schema=False)
    def index(request: Request, user: UserDep) -> RedirectResponse:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{_pages_root(request)}/jobs{query}", status_code=307)

    @app.get("/jobs", response_class=HTMLResponse, name="job_list")
    def job_list(
        request: Request,
        user: UserDep,
        conn_id: ConnIdQuery = DEFAULT_CONN_ID,
        days: Annotated[int, Query(ge=1, le=366)] = 7,
    ) -> HTMLResponse:
        """The Slurm jobs this Airflow submitted on a connection (by their task-instance tag), newest first."""
        require_some_dag_access(user)
        hook = _hook(_check_conn_id(conn_id))
        notes: list[str] = []
        try:
            active = hook.list_jobs()
            try:
                accounted = hook.list_accounted_jobs(start_time=str(int(time.time()) - days * 86400))
            except SlurmApiError as err:
                accounted = []
                notes.append(
                    f"Accounting (/slurmdb) could not be read ({err}): only jobs still in the queue are shown."
                )
        except SlurmJobApiError as err:
            raise HTTPException(502, f"Slurm could not be read through connection {conn_id!r}: {err}") from None
        finally:
            _close(hook)
        allowed: dict[str | None, bool] = {}
        rows, hidden = [], 0
        for job, ref in merge_listing(active, accounted):
            key = _access_dag_id(ref)
            if key not in allowed:
                allowed[key] = may_read_dag(user, key)
            if allowed[key]:
                rows.append(listed(job, ref))
            else:
                hidden += 1
        pages_root = _pages_root(request)

        def job_url(job_id: str) -> str:
            suffix = f"?conn_id={conn_id}" if conn_id != DEFAULT_CONN_ID else ""
            return f"{pages_root}/jobs/{job_id}{suffix}"

        return _html(
            render.render_job_list(
                rows,
                conn_id=conn_id,
                pages_root=pages_root,
                ui_root=_ui_root(),
                job_url=job_url,
                hidden=hidden,
                notes=notes,
                days=days,
            )
        )

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, name="job_page")
    def job_page(
        request: Request,
        job_id: str,
        user: UserDep,
        conn_id: ConnIdQuery = DEFAULT_CONN_ID,
    ) -> HTMLResponse:
        """One job: state and reason, timeline, exit, placement, resources, paths, its task, raw record."""
        try:
            job_id = check_job_id(job_id)
        except SlurmJobApiError:
            raise HTTPException(404, f"{job_id!r} is not a Slurm job id.") from None
        require_some_dag_access(user)
        hook = _hook(_check_conn_id(conn_id))
        notes: list[str] = []
        try:
            try:
                job = hook.get_job(job_id)
            except SlurmJobNotFoundError:
                raise HTTPException(404, f"Slurm knows no job {job_id} on connection {conn_id!r}.") from None
            if not may_read_dag(user, _access_dag_id(parse_tag(job.comment))):
                raise HTTPException(403, "Forbidden")
            queued = job
            job = _finished_from_accounting(hook, job, notes)
        except SlurmJobApiError as err:
            raise HTTPException(502, f"Slurm could not be read through connection {conn_id!r}: {err}") from None
        finally:
            _close(hook)
        pages_root = _pages_root(request)
        list_url = f"{pages_root}/jobs" + (f"?conn_id={conn_id}" if conn_id != DEFAULT_CONN_ID else "")
        return _html(
            render.render_job_page(
                JobView.build(job, queue_record=queued if queued is not job else None),
                conn_id=conn_id,
                pages_root=pages_root,
                ui_root=_ui_root(),
                list_url=list_url,
                notes=notes,
            )
        )

    return app


def app_info() -> dict[str, Any]:
    """The plugin's ``fastapi_apps`` entry."""
    from airflow_provider_slurmapi.plugins.urls import PAGES_PREFIX

    return {"app": create_app(), "url_prefix": PAGES_PREFIX, "name": "Slurm job pages"}
