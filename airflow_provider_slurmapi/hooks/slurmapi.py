"""SlurmJobApiHook: an Airflow connection of type ``slurmapi`` turned into a Slurm Job API client."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cached_property
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from airflow_provider_slurmapi.api import checks, storage, versions
from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.auth import build_credentials
from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient, SlurmJobApiClient
from airflow_provider_slurmapi.api.connection import ConnectionSettings, settings_from_extra
from airflow_provider_slurmapi.api.envelope import ClusterRef
from airflow_provider_slurmapi.api.errors import (
    SlurmJobApiError,
    SlurmJobSpecError,
    SlurmJobWaitTimeoutError,
    SlurmTransportError,
)
from airflow_provider_slurmapi.api.fields import CONNECTION_FIELDS, DEFAULT_CONN_ID, SECRET_FIELDS, ui_field_behaviour
from airflow_provider_slurmapi.api.identity import TaskIdentity
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.observe import observe_one
from airflow_provider_slurmapi.api.reattach import SubmitOutcome
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.staging import StagingLocation
from airflow_provider_slurmapi.api.states import DEFAULT_ERROR_BUDGET
from airflow_provider_slurmapi.api.watch import JobWatch, WaitDeadline, outcome_text

# How long the check of a staging location before a submit keeps retrying a storage that fails transiently.
CHECK_SECONDS = 30.0


def default_deferrable() -> bool:
    """``[operators] default_deferrable``: the default of every ``deferrable`` argument here."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


class SlurmJobApiHook(BaseHook):
    """Talks to a cluster's Slurm Job API (``callSlurmRestApi``) through an Airflow connection.

    .. seealso::
        How to use it: :doc:`/hooks/slurmapi`; its connection: :doc:`/connections/slurmapi`.

    :param slurmapi_conn_id: connection of type ``slurmapi`` (default ``slurmapi_default``) whose extra
        holds ``project_id``, ``region``, ``cluster_id`` and optionally credentials and overrides.
    """

    conn_name_attr = "slurmapi_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "slurmapi"
    hook_name = "Slurm Job API (Google Cloud training cluster)"

    def __init__(self, slurmapi_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slurmapi_conn_id = slurmapi_conn_id
        self._settings: ConnectionSettings | None = None
        self._client: SlurmJobApiClient | None = None
        self._storage: Any = None

    # -- connection -------------------------------------------------------------------------------

    @property
    def settings(self) -> ConnectionSettings:
        """The connection's checked settings (read once)."""
        if self._settings is None:
            conn = self.get_connection(self.slurmapi_conn_id)
            self._settings = self._parse(conn, conn.extra_dejson)
        return self._settings

    def get_conn(self) -> SlurmJobApiClient:
        """The blocking client, created once per hook."""
        if self._client is None:
            self._client = SlurmJobApiClient(self.settings.cluster, **self._client_kwargs(self.settings))
        return self._client

    def _client_kwargs(self, settings: ConnectionSettings) -> dict[str, Any]:
        """The clients' options (timeout, retries, auth, version): the connection's."""
        return settings.client_kwargs()

    async def aget_settings(self) -> ConnectionSettings:
        """The connection's settings, read without blocking the event loop.

        Read once per hook (each trigger has its own), so a changed connection is seen by the next trigger.
        """
        if self._settings is None:
            from airflow.providers.common.compat.connection import (
                get_async_connection,
                get_async_extra_dejson,
            )

            conn = await get_async_connection(self.slurmapi_conn_id, self)
            # The lookup has already masked the password and the extra's text; parsing the extra also
            # masks its sensitive values.
            self._settings = self._parse(conn, await get_async_extra_dejson(conn))
        return self._settings

    def _parse(self, conn: Any, extra: Mapping[str, Any]) -> ConnectionSettings:
        return settings_from_extra(extra, self.slurmapi_conn_id, login=conn.login, password=conn.password)

    async def get_async_conn(self) -> AsyncSlurmJobApiClient:
        """A non-blocking client (the caller closes it with ``aclose``)."""
        await self.aget_settings()
        return self.async_client()

    def async_client(self) -> AsyncSlurmJobApiClient:
        """A non-blocking client on the settings already read (``aget_settings``): the one way every
        trigger and poller makes its client (the caller closes it with ``aclose``)."""
        if self._settings is None:
            raise RuntimeError("read the connection first: await aget_settings() (or use get_async_conn)")
        return AsyncSlurmJobApiClient(self._settings.cluster, **self._client_kwargs(self._settings))

    def storage_client(self) -> Any:
        """A ``google.cloud.storage.Client`` with the connection's Google credentials (impersonation chain
        included), created once per hook: what reads staged output and results (``staging`` extra)."""
        if self._storage is None:
            settings = self.settings
            project = settings.cluster.project_id if isinstance(settings.cluster, ClusterRef) else None
            self._storage = storage.storage_client(build_credentials(settings.auth), project)
        return self._storage

    def stage_object(self, location: StagingLocation, name: str, text: str) -> tuple[str, str]:
        """Write ``text`` as the object ``name`` below ``location`` (only where there is none yet: the same
        name holds the same text) and return its bucket and full object name."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self.storage_client().bucket(location.bucket).blob(location.object_name(name))
        with contextlib.suppress(PreconditionFailed):  # there already: a retry of this try wrote it
            blob.upload_from_string(text.encode(), content_type="application/json", if_generation_match=0)
        return location.bucket, location.object_name(name)

    def check_staging(self, location: StagingLocation) -> None:
        """Fail before a submit when the connection's credentials cannot list ``location`` (one request).

        No bucket, or no permission: a spec error (the task's retries would meet the same). A storage that
        still fails after 30 s of retries: a retryable error, as any transient failure before a submit."""
        from google.api_core import exceptions as gexc
        from google.cloud.storage.retry import DEFAULT_RETRY

        client = self.storage_client()
        try:
            retry = DEFAULT_RETRY.with_timeout(CHECK_SECONDS)
            list(client.list_blobs(location.bucket, prefix=location.object_name(""), max_results=1, retry=retry))
        except (gexc.NotFound, gexc.Forbidden, gexc.Unauthorized, gexc.BadRequest) as err:
            raise SlurmJobSpecError(
                "staging_uri",
                f"{location.uri} cannot be read with the connection's credentials ({type(err).__name__}: {err})",
                "Create the bucket, and grant the connection's service account roles/storage.objectViewer on it "
                "(the cluster's nodes need roles/storage.objectCreator).",
            ) from None
        except Exception as err:
            raise SlurmTransportError(
                f"Could not check the staging location {location.uri} ({type(err).__name__}: {err}); "
                "nothing was submitted"
            ) from None

    # -- API --------------------------------------------------------------------------------------

    def call_slurm(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict]:
        """The raw call: ``(status, structuredBody)`` for any Slurm REST method and path."""
        return self.get_conn().call_slurm(method, path, body)

    def submit_job(self, script: str, job: Mapping[str, Any] | None = None) -> int:
        """Validate and submit a batch job; returns its Slurm job id. Slurm's warnings are logged."""
        return self.submit(JobSpec.build(script, job)).job_id

    def submit(self, spec: JobSpec) -> ops.Submitted:
        """Submit an already built :class:`JobSpec`, returning the id and Slurm's warnings."""
        submitted = self.get_conn().submit_job(spec)
        for warning in submitted.warnings:
            self.log.warning("Slurm warning on submit of job %s: %s", submitted.job_id, warning)
        return submitted

    def check_submit(self, spec: JobSpec) -> None:
        """Raise ``SlurmJobSpecError`` when ``spec`` is too large to send, before any call is made."""
        self.get_conn().check_submit(spec)

    def submit_once(
        self,
        spec: JobSpec,
        identity: TaskIdentity,
        *,
        reattach: bool = True,
        known_job_id: int | None = None,
    ) -> SubmitOutcome:
        """Submit unless a job of ``identity``'s run of tries is still active or COMPLETED; see ``api.reattach``.

        ``spec``'s name must end with ``identity.suffix`` (``identity.job_name(base)`` builds it). Only
        the connection's own Slurm user's jobs count (connection field ``slurm_user``, else learnt from a
        held job submitted and cancelled at once, when jobs carry the task's name); an earlier run's
        active job is cancelled first. A submit whose fate is unknown (a 5xx, a lost reply) is looked
        for, never sent again.

        :param known_job_id: the job id an earlier try recorded, looked at first (one call instead of
            searching the queue and accounting).
        """
        outcome = self.get_conn().submit_once(spec, identity, reattach=reattach, known_job_id=known_job_id)
        for note in outcome.notes:
            self.log.info("Slurm job %s: %s", outcome.job_id, note)
        for warning in outcome.warnings:
            self.log.warning("Slurm warning on submit of job %s: %s", outcome.job_id, warning)
        return outcome

    def get_job(self, job_id: int | str, *, recently_submitted: bool = False) -> SlurmJob:
        """The job from the active queue, or from accounting once it has left it.

        An array's id gives the whole array, a ``SlurmArrayJob`` with its ``tasks``; ``"41_1"`` one task.
        """
        return self.get_conn().get_job(job_id, recently_submitted=recently_submitted)

    def get_jobs(self, job_id: int | str) -> list[SlurmJob]:
        """Every record of a job id (all tasks of an array job)."""
        return self.get_conn().get_jobs(job_id)

    def peak_memory(self, job_id: int | str, starts: frozenset[datetime], *, settle_seconds: float = 3.0) -> int | None:
        """The peak resident memory (bytes) accounting's step records hold of the runs of ``job_id`` (of an
        array, its tasks) that started at ``starts``; None when no step has one (the cluster gathers no
        step statistics, or the run was shorter than its sampling interval). The active queue holds none, so
        this reads accounting, again each second for up to ``settle_seconds`` while it has not recorded the
        runs' ends yet (slurmctld sends them to slurmdbd in the background)."""
        deadline = time.monotonic() + settle_seconds
        while True:
            recorded, peak = self.get_conn().peak_memory(job_id, starts)
            if recorded or time.monotonic() >= deadline:
                return peak
            time.sleep(1.0)

    def list_jobs(self) -> list[SlurmJob]:
        """Jobs in the active queue."""
        return self.get_conn().list_jobs()

    def list_accounted_jobs(self, **filters: str) -> list[SlurmJob]:
        """Jobs from accounting; filters as slurmrestd takes them (``users``, ``state``, ...). A requeued job,
        which accounting keeps a record of per run, comes once: its latest run (as ``sacct`` shows it)."""
        return self.get_conn().list_accounted_jobs(**filters)

    def cancel_job(self, job_id: int | str) -> ops.Cancelled:
        """Cancel a job; success also when it had already finished."""
        result = self.get_conn().cancel_job(job_id)
        if result.already_finished:
            self.log.info("Slurm job %s had already finished; nothing to cancel", job_id)
        else:
            self.log.info("Asked Slurm to cancel job %s", job_id)
        return result

    def wait_for_job(
        self,
        job_id: int | str,
        poll_interval: float = 30.0,
        timeout: float | None = None,
        *,
        on_poll: Callable[[SlurmJob], None] | None = None,
        error_budget: int = DEFAULT_ERROR_BUDGET,
    ) -> SlurmJob:
        """Poll until the job is terminal and return it (whatever its final state).

        For an array's id: until every task is terminal, returning the ``SlurmArrayJob``.

        Transient errors are logged and tolerated up to a budget of consecutive failures.

        :param poll_interval: seconds between polls (a finite number above 0).
        :param timeout: give up after this many seconds (``SlurmJobWaitTimeoutError``); None waits forever.
        :param on_poll: called with each job record seen.
        :param error_budget: consecutive failed polls (each already retried by the client) tolerated.
        """

        poll_interval = checks.seconds(poll_interval, "poll_interval")
        if timeout is not None:
            timeout = checks.seconds(timeout, "timeout", zero=True)
        deadline = WaitDeadline.after(timeout)
        watch = JobWatch(job_id, error_budget=error_budget)
        last: SlurmJob | None = None
        client = self.get_conn()
        key = versions.canonical_job_id(job_id)
        while True:
            try:  # the poll the deferred wait's poller makes for one job (api/observe.py)
                seen = client.run(observe_one(client.api_version, key, record=True))
                error, job = seen.error, seen.job
            except SlurmJobApiError as err:  # the version, before any job was asked about
                error, job = err, None
            if error is not None or job is None:
                self.log.warning(watch.failed_poll(error or SlurmJobApiError(f"no record of Slurm job {key}")))
            else:
                last = job
                for line in watch.observe(last):
                    self.log.info(line)
                if on_poll is not None:
                    on_poll(last)
                if last.state.is_terminal:
                    self.log.info(outcome_text(last))
                    return last
            if deadline.passed():
                raise SlurmJobWaitTimeoutError(
                    f"Slurm job {job_id} was still {last.describe_state() if last else 'unknown'} after "
                    f"{timeout}s; it was left running.",
                    job=last,
                )
            remaining = deadline.remaining()
            time.sleep(poll_interval if remaining is None else max(0.0, min(poll_interval, remaining)))

    def test_connection(self) -> tuple[bool, str]:
        """For the UI's Test button: ping Slurm through the API and report its version."""
        try:
            result = self.get_conn().ping()
        except Exception as err:
            return False, str(err)
        if not result.responding:
            return (
                False,
                f"Slurm {result.release} on cluster {result.cluster!r} answered, but not every controller responds",
            )
        return True, f"Connected: Slurm {result.release} on cluster {result.cluster!r} ({result.data_parser})"

    # -- UI ---------------------------------------------------------------------------------------

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra fields of the connection form (Airflow 2.x / pre-3.2 UIs)."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import PasswordField, StringField

        widgets: dict[str, Any] = {}
        for name, (label, description) in CONNECTION_FIELDS.items():
            field_cls, widget = (
                (PasswordField, BS3PasswordFieldWidget) if name in SECRET_FIELDS else (StringField, BS3TextFieldWidget)
            )
            widgets[name] = field_cls(lazy_gettext(label), widget=widget(), description=description)
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hide the standard fields the connection does not use."""
        return ui_field_behaviour()


class SlurmApiHookMixin:
    """The hook the provider's operators and sensor share: one per task run, on ``slurmapi_conn_id``
    (its clients, connection pools and tokens made once), as official providers keep theirs."""

    slurmapi_conn_id: str

    @cached_property
    def hook(self) -> SlurmJobApiHook:
        """The ``slurmapi_conn_id`` connection's hook, made on first use."""
        return SlurmJobApiHook(slurmapi_conn_id=self.slurmapi_conn_id)
