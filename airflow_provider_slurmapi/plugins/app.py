"""The Slurm job pages: a FastAPI app that the plugin mounts under the Airflow 3 API server at ``/slurmapi``.

Every route needs an authenticated Airflow user, found exactly as the Airflow API finds one (its
``get_user`` dependency: the ``Authorization: Bearer`` header, else the UI's ``_token`` cookie), so a
missing or bad token gets the API server's own 401/403. A job is shown only to users who may read the
DAG named by the task-instance tag in its comment; a job without a tag (or whose tag cannot name its
DAG exactly) only to users who may read every DAG; the check is made on each record the page shows.
A connection is used only for users the auth manager lets read it; a missing connection, one of
another type and one the user may not read all get the same 404. The pages only read: there is no
route that sends anything but a GET to Slurm.

A page load asks Slurm once per call (no retries) with a short timeout, runs in this app's own few
threads (never the API server's shared thread pool) and answers within ``PAGE_DEADLINE_SECONDS``;
while ``MAX_PAGE_LOADS`` loads are already waiting on Slurm, another gets a quick 503.

Imported only by the API server (through the plugin), never by schedulers or workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypeVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import (
    ConnectionDetails,
    DagAccessEntity,
    DagDetails,
)
from airflow.api_fastapi.core_api.security import get_user
from airflow.models.connection import Connection
from airflow.models.dag import DagModel
from airflow.models.xcom import XComModel  # type: ignore[attr-defined,unused-ignore]  # Airflow 3 (as the pages)
from airflow.providers.common.compat.sdk import AirflowNotFoundException, conf
from airflow.utils.session import create_session
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.client import RetryPolicy
from airflow_provider_slurmapi.api.connection import ConnectionSettings
from airflow_provider_slurmapi.api.errors import SlurmApiError, SlurmJobApiError, SlurmJobNotFoundError
from airflow_provider_slurmapi.api.identity import TaskRef, parse_tag
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.versions import check_job_id
from airflow_provider_slurmapi.api.watch import within
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.plugins import output, render
from airflow_provider_slurmapi.plugins.job_view import JobView, listed, merge_listing
from airflow_provider_slurmapi.plugins.urls import DEFAULT_CONN_ID, PAGES_PREFIX, base_path

log = logging.getLogger(__name__)
T = TypeVar("T")

# A page waits on Slurm for a person: a few seconds, not the connection's timeout and retries.
PAGE_CALL_TIMEOUT_SECONDS = 4.0
PAGE_DEADLINE_SECONDS = 6.0
MAX_PAGE_LOADS = 4

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


class PageHook(SlurmJobApiHook):
    """The hook as a page uses it: one try per call, and at most ``PAGE_CALL_TIMEOUT_SECONDS`` per call."""

    def _client_kwargs(self, settings: ConnectionSettings) -> dict[str, Any]:
        kwargs = super()._client_kwargs(settings)
        kwargs.update(timeout=min(settings.timeout, PAGE_CALL_TIMEOUT_SECONDS), retry=RetryPolicy(attempts=1))
        return kwargs


def may_read_connection(user: BaseUser, conn_id: str) -> bool:
    """Whether ``user`` may read the connection ``conn_id``, as the auth manager says (as the API's
    connection routes ask it; with multi-team on, a connection whose team cannot be read is refused)."""
    team = None
    if conf.getboolean("core", "multi_team", fallback=False):
        try:
            team = Connection.get_team_name(conn_id)
        except Exception:
            log.warning("Could not look up the team of connection %s: refusing it", conn_id, exc_info=True)
            return False
    try:
        details = ConnectionDetails(conn_id=conn_id, team_name=team)
    except TypeError:  # Airflow without teams
        details = ConnectionDetails(conn_id=conn_id)
    return bool(get_auth_manager().is_authorized_connection(method="GET", details=details, user=user))


def _hook(conn_id: str, user: BaseUser) -> SlurmJobApiHook:
    """The page's hook on ``conn_id``: a slurmapi connection that ``user`` may read.

    Whether the connection is missing, of another type or not readable by the user, the answer is the
    same 404: the page tells nothing about connections the user may not see.
    """
    not_found = HTTPException(404, f"There is no Slurm Job API connection {conn_id!r} that you may use.")
    if not may_read_connection(user, conn_id):
        raise not_found
    hook = PageHook(slurmapi_conn_id=conn_id)
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise not_found from None
    if conn.conn_type != SlurmJobApiHook.conn_type:
        raise not_found
    return hook


class PageLoads:
    """Runs page loads in a few threads of their own, each answered within ``deadline`` seconds.

    A load that waits on Slurm holds one of ``slots`` until its thread is done (its calls end by their
    own timeout); when every slot is held, another load is refused at once (503), so hung loads never
    take the API server's shared thread pool or pile up.
    """

    def __init__(self, slots: int, deadline: float) -> None:
        self.deadline = deadline
        self._slots = threading.BoundedSemaphore(slots)
        self._threads = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="slurmapi-page")

    async def run(self, load: Callable[[], T]) -> T:
        if not self._slots.acquire(blocking=False):
            raise HTTPException(
                503,
                "Too many Slurm job pages are waiting on Slurm right now; try again in a few seconds.",
                headers={"Retry-After": "5"},
            )

        def in_thread() -> T:
            try:
                return load()
            finally:
                self._slots.release()

        try:
            work = asyncio.get_running_loop().run_in_executor(self._threads, in_thread)
        except BaseException:
            self._slots.release()
            raise
        try:
            return await within(self.deadline, work)
        except asyncio.TimeoutError:
            raise HTTPException(
                504, f"Slurm did not answer within {self.deadline:g} seconds; try again later."
            ) from None


def _close(hook: SlurmJobApiHook) -> None:
    client = hook._client
    if client is not None:
        client.close()


def may_read_dag(user: BaseUser, dag_id: str | None, access_entity: DagAccessEntity | None = None) -> bool:
    """Whether ``user`` may read the DAG ``dag_id`` (``None``: every DAG), or with ``access_entity`` that
    part of it (e.g. its task logs), as the auth manager says."""
    details = None
    if dag_id is not None:
        team = None
        try:
            get_team = getattr(DagModel, "get_team_name", None)
            team = get_team(dag_id) if get_team else None
        except Exception:
            log.debug("Could not look up the team of DAG %s", dag_id, exc_info=True)
        try:
            details = DagDetails(id=dag_id, team_name=team)
        except TypeError:  # Airflow without teams
            details = DagDetails(id=dag_id)
    return bool(
        get_auth_manager().is_authorized_dag(method="GET", access_entity=access_entity, details=details, user=user)
    )


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
    if not _same_job(job, accounted):
        notes.append(
            "Accounting's (/slurmdb) record of this id is of another job (the id was used again); showing "
            "the active queue's record."
        )
        return job
    # Accounting keeps no comment by default (AccountingStoreFlags=job_comment): the queue's tag stands.
    fill = {
        name: getattr(job, name)
        for name in ("standard_output", "standard_error", "state_description", "working_directory", "nodes", "comment")
        if not getattr(accounted, name) and getattr(job, name)
    }
    return dataclasses.replace(accounted, **fill) if fill else accounted


def _same_job(queued: SlurmJob, accounted: SlurmJob) -> bool:
    """Whether accounting's record is the queue's job, not an earlier or later job with the same id."""
    if queued.submit_time and accounted.submit_time and queued.submit_time != accounted.submit_time:
        return False
    tag, accounted_tag = parse_tag(queued.comment), parse_tag(accounted.comment)
    return accounted_tag is None or (tag is not None and tag.tag == accounted_tag.tag)


def _login_url(request: Request) -> str | None:
    try:
        return str(get_auth_manager().get_url_login(next_url=str(request.url)))
    except Exception:
        return None


def _job_list(user: BaseUser, conn_id: str, days: int, pages_root: str) -> HTMLResponse:
    require_some_dag_access(user)
    hook = _hook(_check_conn_id(conn_id), user)
    notes: list[str] = []
    try:
        active = hook.list_jobs()
        try:
            accounted = hook.list_accounted_jobs(start_time=str(int(time.time()) - days * 86400))
        except SlurmApiError as err:
            accounted = []
            notes.append(f"Accounting (/slurmdb) could not be read ({err}): only jobs still in the queue are shown.")
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


def _require_access(user: BaseUser, job: SlurmJob) -> None:
    if not may_read_dag(user, _access_dag_id(parse_tag(job.comment))):
        raise HTTPException(403, "Forbidden")


def _recorded(ref: TaskRef | None) -> Any:
    """What the task instance ``ref`` names recorded for the page (XCom ``slurm_published``), read from
    the metadata database as the API's own XCom route reads it; None when nothing can be found."""
    if ref is None or ref.run_id is None:
        return None
    query = XComModel.get_many(
        run_id=ref.run_id,
        key=results.XCOM_SHOWN,
        task_ids=ref.task_id,
        dag_ids=ref.dag_id,
        map_indexes=ref.map_index if ref.map_index is not None else -1,
        limit=1,
    )
    try:
        with create_session() as session:
            row = session.scalars(query).first()
            return XComModel.deserialize_value(row) if row is not None else None
    except Exception:  # the page still shows the job, without what only the task's record would show
        log.exception("Slurm job page: could not read XCom %s of %s", results.XCOM_SHOWN, ref.tag)
        return None


def _logged_output(user: BaseUser, ref: TaskRef | None, job_id: str) -> output.LoggedOutput | None:
    """The job's output as its task logged it, for users who may read that DAG's task logs."""
    dag_id = _access_dag_id(ref)
    if ref is None or dag_id is None or not may_read_dag(user, dag_id, DagAccessEntity.TASK_LOGS):
        return None
    return output.logged_output(ref, job_id)


def _read_job(user: BaseUser, job_id: str, conn_id: str, notes: list[str] | None = None) -> tuple[SlurmJob, SlurmJob]:
    """The queue's record of the job, checked against ``user`` before anything else is asked, and (with
    ``notes``) accounting's final word on a job that ended (else the queue's record again)."""
    require_some_dag_access(user)
    hook = _hook(_check_conn_id(conn_id), user)
    try:
        try:
            queued = hook.get_job(job_id)
        except SlurmJobNotFoundError:
            raise HTTPException(404, f"Slurm knows no job {job_id} on connection {conn_id!r}.") from None
        _require_access(user, queued)  # before anything else is asked about the job
        job = _finished_from_accounting(hook, queued, notes) if notes is not None else queued
    except SlurmJobApiError as err:
        raise HTTPException(502, f"Slurm could not be read through connection {conn_id!r}: {err}") from None
    finally:
        _close(hook)
    return queued, job


def _output_page(user: BaseUser, job_id: str, conn_id: str, page: int, pages_root: str) -> HTMLResponse:
    job, _ = _read_job(user, job_id, conn_id)
    ref = parse_tag(job.comment)
    dag_id = _access_dag_id(ref)
    if dag_id is None or not may_read_dag(user, dag_id, DagAccessEntity.TASK_LOGS):
        raise HTTPException(403, "Forbidden: the output is shown from the task's log, which you may not read.")
    logged = output.logged_output(ref, job.display_id) if ref is not None else None
    query = f"?conn_id={conn_id}" if conn_id != DEFAULT_CONN_ID else ""
    return _html(
        render.render_output_page(
            job,
            logged,
            page=page,
            conn_id=conn_id,
            job_url=f"{pages_root}/jobs/{job.display_id}{query}",
            output_url=f"{pages_root}/jobs/{job.display_id}/output?conn_id={conn_id}",
            list_url=f"{pages_root}/jobs{query}",
            ui_root=_ui_root(),
        )
    )


def _job_page(user: BaseUser, job_id: str, conn_id: str, pages_root: str) -> HTMLResponse:
    notes: list[str] = []
    queued, job = _read_job(user, job_id, conn_id, notes)
    if job is not queued:
        _require_access(user, job)  # the record shown is the one whose DAG the user must be able to read
    list_url = f"{pages_root}/jobs" + (f"?conn_id={conn_id}" if conn_id != DEFAULT_CONN_ID else "")
    ref = parse_tag(job.comment) or parse_tag(queued.comment)
    recorded = _recorded(ref)
    return _html(
        render.render_job_page(
            JobView.build(job, queue_record=queued if queued is not job else None, recorded=recorded),
            conn_id=conn_id,
            pages_root=pages_root,
            ui_root=_ui_root(),
            list_url=list_url,
            notes=notes,
            logged=_logged_output(user, ref, job.display_id),
            output_url=f"{pages_root}/jobs/{job.display_id}/output?conn_id={conn_id}",
        )
    )


def _job_id(job_id: str) -> str:
    """A job id from the URL, in Slurm's spelling; 404 for anything else."""
    try:
        return check_job_id(job_id)
    except SlurmJobApiError:
        raise HTTPException(404, f"{job_id!r} is not a Slurm job id.") from None


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
    async def index(request: Request, user: UserDep) -> RedirectResponse:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{_pages_root(request)}/jobs{query}", status_code=307)

    loads = PageLoads(MAX_PAGE_LOADS, PAGE_DEADLINE_SECONDS)

    @app.get("/jobs", response_class=HTMLResponse, name="job_list")
    async def job_list(
        request: Request,
        user: UserDep,
        conn_id: ConnIdQuery = DEFAULT_CONN_ID,
        days: Annotated[int, Query(ge=1, le=366)] = 7,
    ) -> HTMLResponse:
        """The Slurm jobs this Airflow submitted on a connection (by their task-instance tag), newest first."""
        pages_root = _pages_root(request)
        return await loads.run(lambda: _job_list(user, conn_id, days, pages_root))

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, name="job_page")
    async def job_page(
        request: Request,
        job_id: str,
        user: UserDep,
        conn_id: ConnIdQuery = DEFAULT_CONN_ID,
    ) -> HTMLResponse:
        """One job: state and reason, timeline, exit, placement, resources, paths, its task, raw record."""
        job_id, pages_root = _job_id(job_id), _pages_root(request)
        return await loads.run(lambda: _job_page(user, job_id, conn_id, pages_root))

    @app.get("/jobs/{job_id}/output", response_class=HTMLResponse, name="job_output")
    async def job_output(
        request: Request,
        job_id: str,
        user: UserDep,
        conn_id: ConnIdQuery = DEFAULT_CONN_ID,
        page: Annotated[int, Query(ge=1, le=10**6, description="the page, from 1")] = 1,
    ) -> HTMLResponse:
        """The job's whole output as its task logged it, ``output.PAGE_LINES`` lines a page."""
        job_id, pages_root = _job_id(job_id), _pages_root(request)
        return await loads.run(lambda: _output_page(user, job_id, conn_id, page, pages_root))

    return app


def app_info() -> dict[str, Any]:
    """The plugin's ``fastapi_apps`` entry."""
    return {"app": create_app(), "url_prefix": PAGES_PREFIX, "name": "Slurm job pages"}
