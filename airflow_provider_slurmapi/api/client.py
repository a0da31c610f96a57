"""SlurmJobApiClient (requests) and AsyncSlurmJobApiClient (httpx): thin I/O shells around one core.

Everything that is not I/O lives in :class:`BaseSlurmJobApiClient` and :mod:`.operations`: building the
envelope, reading replies, mapping errors, deciding on retries. Each client only sends bytes.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import random
import ssl
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api import versions
from airflow_provider_slurmapi.api.auth import AuthConfig, TokenSource, token_source
from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import Call, ClusterRef, HttpRequest, ReplyBody, SlurmReply
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    SlurmApiVersionError,
    SlurmAuthError,
    SlurmBusyError,
    SlurmJobApiError,
    SlurmTransportError,
    fate_unknown,
)
from airflow_provider_slurmapi.api.fields import DEFAULT_TIMEOUT
from airflow_provider_slurmapi.api.identity import TaskIdentity
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.reattach import SubmitOutcome, submit_once
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.watch import within

log = logging.getLogger(__name__)
T = TypeVar("T")
_DETECTED: dict[str, str] = {}
# Connections (``_version_key``) whose Slurm release was read for a removal notice, in this process.
_NOTICED: set[str] = set()
Target = ClusterRef | SlurmrestdRef
_DETECTED_LOCK = threading.Lock()
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for idempotent calls (GET, DELETE) that failed transiently."""

    attempts: int = 5
    initial_delay: float = 1.0
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return base * random.uniform(1 - self.jitter, 1 + self.jitter)


@dataclass
class Tries:
    """One call's tries so far, and whether its token has already been refreshed after a 401."""

    count: int = 0
    refreshed: bool = False


class BaseSlurmJobApiClient:
    """The shared, I/O-free half of both clients.

    ``timeout``: the seconds each try of a call may take in all, from connecting to the reply's last byte
    (not only each read). Replies are read as a stream, capped at ``envelope.MAX_REPLY_BYTES``; redirects
    are refused, never followed.
    """

    def __init__(
        self,
        cluster: Target,
        *,
        auth: AuthConfig | None = None,
        api_version: str = versions.DEFAULT_VERSION,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        tokens: TokenSource | None = None,
        slurm_user: str | None = None,
    ) -> None:
        self.cluster = cluster
        # The Slurm user this connection's jobs run as: only its jobs are reattached or cancelled.
        self.slurm_user = slurm_user or (cluster.user if isinstance(cluster, SlurmrestdRef) else None)
        self.auth = auth or AuthConfig()
        # Only the Google API takes Google tokens; a direct slurmrestd carries its JWT in the target.
        self.tokens = tokens or (token_source(self.auth) if isinstance(cluster, ClusterRef) else None)
        self._api_version = versions.check_version(api_version)
        # True once the configured version is known to be served (after a path-not-routed answer)
        self._version_checked = False
        self._probing = False
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise SlurmJobApiError(f"timeout: {timeout!r} is not a positive number of seconds.")
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cluster.name}, api_version={self._api_version})"

    def _request(self, call: Call, token: str | None) -> HttpRequest:
        request = self.cluster.request(call, token)
        if token and self.auth.quota_project_id:
            request.headers["x-goog-user-project"] = self.auth.quota_project_id
        return request

    def check_submit(self, spec: JobSpec) -> None:
        """Refuse, without any call, a submit this target would not send (above the API's 1 MB request
        limit; 64 MB for a direct slurmrestd), so that nothing is looked up for a job that cannot go out."""
        # Every version's submit path has the same length: an undetected ("auto") version measures the same.
        version = versions.DEFAULT_VERSION if self._api_version == versions.AUTO else self._api_version
        self.cluster.request(ops.submit_call(version, spec))

    def _retry_delay(self, call: Call, error: SlurmJobApiError, tries: Tries) -> float | None:
        """Seconds to wait before trying ``call`` again, or None to give up and raise ``error``."""
        attempt = tries.count
        # A token can be revoked or expire early between two tries of one call (the first may have met
        # a 503): a 401 gets one fresh token per call, whichever try it answers (the refused token was
        # forgotten in _reply, without waiting on a refresh in flight).
        if isinstance(error, GoogleApiError) and error.code == 401 and not tries.refreshed and self.tokens:
            tries.refreshed = True
            return 0.0
        if not error.retryable or call.best_effort or attempt >= self.retry.attempts:
            return None
        if not call.idempotent and not _never_sent(error):
            return None
        delay = self.retry.delay(attempt)
        log.warning(
            "%s failed (%s); retry %d/%d in %.1fs",
            call.describe(),
            error,
            attempt,
            self.retry.attempts - 1,
            delay,
        )
        return delay

    def _transport_error(
        self, call: Call, err: BaseException, *, sent: bool, timed_out: bool = False
    ) -> SlurmTransportError:
        """The error for a try that got no complete reply; ``sent``: the request may have been written."""
        what, cause = call.describe(), type(err).__name__
        certificate = next((e for e in _causes(err) if isinstance(e, ssl.SSLCertVerificationError)), None)
        if certificate is not None:
            # Verification is part of the TLS handshake, before any of the request is written.
            return SlurmTransportError(
                f"{what}: the server's TLS certificate failed verification "
                f"({certificate.verify_message or certificate}), so nothing was sent. Check the endpoint's "
                "host name; for a private CA, point REQUESTS_CA_BUNDLE (tasks) and SSL_CERT_FILE (the "
                "triggerer) at its certificate.",
                retryable=False,
            )
        if not sent:
            return SlurmTransportError(f"{what}: could not connect ({cause})")
        if timed_out:
            return self._timed_out(call, cause)
        return SlurmTransportError(
            f"{what}: connection failed before the whole reply arrived ({cause}); the request may have been received",
            ambiguous=True,
        )

    def _timed_out(self, call: Call, cause: str) -> SlurmTransportError:
        return SlurmTransportError(
            f"{call.describe()}: no complete reply within {self.timeout:g}s ({cause})", ambiguous=True
        )

    def _reply(self, call: Call, token: str | None, status: int, content: bytes) -> SlurmReply:
        """The reply read; a token the API refused (401) is forgotten so the retry fetches a new one.

        A read that slurmrestd answered 502/503/504 (it could not reach slurmdbd or slurmctld just then)
        is tried again like a Google 5xx; once the tries are spent, that reply is the answer.
        """
        try:
            reply = self.cluster.parse(status, content, what=call.describe(), only_jobs=call.only_jobs)
        except GoogleApiError as err:
            if err.code == 401 and token and self.tokens:
                self.tokens.invalidate(token)
            raise
        if call.idempotent and reply.status in _SLURM_BUSY:
            raise SlurmBusyError(reply)
        if reply.ok:
            self._notice_removal(reply)
        return reply

    def _unserved(self, call: Call, reply: SlurmReply | None, error: Exception | None) -> str | None:
        """The configured version, when this answer says the cluster may not serve it (not yet checked)."""
        if self._version_checked or self._probing or self._api_version == versions.AUTO:
            return None
        version = ops.unserved_path(call, reply, error)
        return version if version == self._api_version else None

    def _verdict(self, version: str, served: list[str]) -> None:
        """Raise :class:`SlurmApiVersionError` when the cluster serves versions, but not ``version``.

        Serving none (every ping refused) says nothing about versions: the original answer stands.
        """
        if served and version not in served:
            raise SlurmApiVersionError(version, served)
        self._version_checked = bool(served)

    def _notice_removal(self, reply: SlurmReply) -> None:
        """Log once per connection that its version goes away in a later Slurm (v0.0.42 on 26.05+)."""
        if self._api_version not in versions.REMOVED_IN:
            return
        key = self._version_key()
        meta = reply.body.get("meta")
        slurm = meta.get("slurm") if isinstance(meta, dict) else None
        number = slurm.get("version") if isinstance(slurm, dict) else None
        try:
            release = (int(number["major"]), int(number["minor"]))  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            return
        with _DETECTED_LOCK:
            if key in _NOTICED:
                return
            _NOTICED.add(key)
        notice = versions.removal_notice(self._api_version, release)
        if notice:
            log.warning("%s: %s", self.cluster.name, notice)

    def _give_up(self, error: SlurmJobApiError) -> SlurmReply:
        """What a call whose tries are spent ends with: Slurm's own busy answer, else ``error``."""
        if isinstance(error, SlurmBusyError):
            return error.reply
        raise error

    def _version_key(self) -> str:
        return f"{self.cluster.name}|{self.auth.cache_key()}"


_SLURM_BUSY = frozenset({502, 503, 504})


def _causes(err: BaseException) -> Iterator[BaseException]:
    """``err`` and every exception it wraps: causes, contexts, and the arguments and reasons of library errors."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = (current.__cause__, current.__context__, getattr(current, "reason", None), *current.args)
        todo.extend(e for e in wrapped if isinstance(e, BaseException))


def _never_sent(error: SlurmJobApiError) -> bool:
    """True when the request certainly did nothing, so even a submit may be sent again (see ``fate_unknown``)."""
    if isinstance(error, SlurmAuthError):
        return True
    return isinstance(error, (GoogleApiError, SlurmTransportError)) and not fate_unknown(error)


class SlurmJobApiClient(BaseSlurmJobApiClient):
    """Blocking client over a pooled ``requests.Session``."""

    def __init__(self, cluster: Target, **kwargs: Any) -> None:
        super().__init__(cluster, **kwargs)
        import requests

        from airflow_provider_slurmapi.api.deadline import DeadlineAdapter

        self._session = requests.Session()
        for prefix in ("https://", "http://"):
            self._session.mount(prefix, DeadlineAdapter(pool_maxsize=16))

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> SlurmJobApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, op: Generator[Call, SlurmReply, T]) -> T:
        """Drive a sans-IO operation from :mod:`.operations` to its result."""
        try:
            call = next(op)
            while True:
                try:
                    reply = self._send(call)
                except SlurmJobApiError as err:
                    self._check_served(call, None, err)
                    call = op.throw(err)
                else:
                    self._check_served(call, reply, None)
                    call = op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _check_served(self, call: Call, reply: SlurmReply | None, error: Exception | None) -> None:
        """A path-not-routed answer at the configured version: ask which versions the cluster serves."""
        version = self._unserved(call, reply, error)
        if version is not None:
            self._probing = True  # the pings below are not checked themselves
            try:
                served = self.run(ops.served_versions())
            finally:
                self._probing = False
            self._verdict(version, served)

    def _send(self, call: Call) -> SlurmReply:
        tries = Tries()
        while True:
            tries.count += 1
            try:
                return self._send_once(call)
            except SlurmJobApiError as err:
                delay = self._retry_delay(call, err, tries)
                if delay is None:
                    return self._give_up(err)
                time.sleep(delay)

    def _send_once(self, call: Call) -> SlurmReply:
        import requests
        import urllib3

        from airflow_provider_slurmapi.api.deadline import Deadline

        token = self.tokens.token() if self.tokens else None
        request = self._request(call, token)
        with Deadline(self.timeout) as deadline:
            try:
                body = self._exchange(call, request)
            except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException) as err:
                if deadline.expired:
                    raise self._timed_out(call, "total deadline") from None
                # requests' errors are OSErrors; urllib3's may escape from the body's stream.
                connecting = isinstance(err, requests.exceptions.ConnectTimeout) or any(
                    isinstance(e, urllib3.exceptions.NewConnectionError) for e in _causes(err)
                )
                raise self._transport_error(
                    call, err, sent=not connecting, timed_out=isinstance(err, requests.exceptions.Timeout)
                ) from None
            if deadline.expired:  # cut in its head, a reply can read as complete and short
                raise self._timed_out(call, "total deadline")
        return self._reply(call, token, body.status, body.content)

    def _exchange(self, call: Call, request: HttpRequest) -> ReplyBody:
        """Send ``request`` and read its reply as a stream (see :class:`ReplyBody`)."""
        with self._session.request(
            request.method,
            request.url,
            data=request.content,
            headers=request.headers,
            timeout=self.timeout,
            stream=True,
            allow_redirects=False,
        ) as response:
            body = ReplyBody(call.describe(), request.url, response.status_code, response.headers)
            for chunk in response.iter_content(_CHUNK):
                body.add(chunk)
        return body

    @property
    def api_version(self) -> str:
        """The Slurm REST version in use; ``auto`` is resolved once per connection and cached."""
        if self._api_version == versions.AUTO:
            key = self._version_key()
            with _DETECTED_LOCK:
                found = _DETECTED.get(key)
            if found is None:
                found = self.run(ops.detect_version())
                with _DETECTED_LOCK:
                    _DETECTED[key] = found
            self._api_version = found
        return self._api_version

    def call_slurm(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict]:
        reply = self.run(ops.raw_call(method, path, body))
        return reply.status, reply.body

    def submit_job(self, spec: JobSpec) -> ops.Submitted:
        return self.run(ops.submit_job(self.api_version, spec))

    def submit_once(
        self, spec: JobSpec, identity: TaskIdentity, *, reattach: bool = True, known_job_id: int | None = None
    ) -> SubmitOutcome:
        operation = submit_once(
            self.api_version, spec, identity, reattach=reattach, known_job_id=known_job_id, user=self.slurm_user
        )
        outcome = self.run(operation)
        self.slurm_user = self.slurm_user or outcome.user  # learnt for certain: no second probe from this client
        return outcome

    def get_job(self, job_id: object, *, recently_submitted: bool = False) -> SlurmJob:
        return self.run(ops.get_job(self.api_version, job_id, recently_submitted=recently_submitted))

    def get_jobs(self, job_id: object) -> list[SlurmJob]:
        return self.run(ops.get_jobs(self.api_version, job_id))

    def list_jobs(self) -> list[SlurmJob]:
        return self.run(ops.list_jobs(self.api_version))

    def peak_memory(self, job_id: object, starts: frozenset[datetime]) -> tuple[bool, int | None]:
        return self.run(ops.peak_memory(self.api_version, job_id, starts))

    def list_accounted_jobs(self, **filters: str) -> list[SlurmJob]:
        return self.run(ops.list_accounted_jobs(self.api_version, **filters))

    def cancel_job(self, job_id: object) -> ops.Cancelled:
        return self.run(ops.cancel_job(self.api_version, job_id))

    def ping(self) -> ops.Ping:
        return self.run(ops.ping(self.api_version))


class AsyncSlurmJobApiClient(BaseSlurmJobApiClient):
    """Non-blocking client over ``httpx.AsyncClient``; token refreshes run off the event loop."""

    def __init__(self, cluster: Target, **kwargs: Any) -> None:
        super().__init__(cluster, **kwargs)
        self._http: Any = None

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> AsyncSlurmJobApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def run(self, op: Generator[Call, SlurmReply, T]) -> T:
        """Drive a sans-IO operation from :mod:`.operations` to its result."""
        try:
            call = next(op)
            while True:
                try:
                    reply = await self._send(call)
                except SlurmJobApiError as err:
                    await self._check_served(call, None, err)
                    call = op.throw(err)
                else:
                    await self._check_served(call, reply, None)
                    call = op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _check_served(self, call: Call, reply: SlurmReply | None, error: Exception | None) -> None:
        """A path-not-routed answer at the configured version: ask which versions the cluster serves."""
        version = self._unserved(call, reply, error)
        if version is not None:
            self._probing = True  # the pings below are not checked themselves
            try:
                served = await self.run(ops.served_versions())
            finally:
                self._probing = False
            self._verdict(version, served)

    async def _send(self, call: Call) -> SlurmReply:
        tries = Tries()
        while True:
            tries.count += 1
            try:
                return await self._send_once(call)
            except SlurmJobApiError as err:
                delay = self._retry_delay(call, err, tries)
                if delay is None:
                    return self._give_up(err)
                await asyncio.sleep(delay)

    async def _send_once(self, call: Call) -> SlurmReply:
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout, follow_redirects=False)
        token = await self.tokens.atoken() if self.tokens else None
        request = self._request(call, token)
        try:
            # httpx bounds each read; the whole exchange gets the same time in total.
            body = await within(self.timeout, self._exchange(call, request))
        except asyncio.TimeoutError:
            raise self._timed_out(call, "total deadline") from None
        except httpx.RequestError as err:
            connecting = isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
            raise self._transport_error(
                call, err, sent=not connecting, timed_out=isinstance(err, httpx.TimeoutException)
            ) from None
        return self._reply(call, token, body.status, body.content)

    async def _exchange(self, call: Call, request: HttpRequest) -> ReplyBody:
        """Send ``request`` and read its reply as a stream (see :class:`ReplyBody`)."""
        async with self._http.stream(
            request.method, request.url, content=request.content, headers=request.headers
        ) as response:
            body = ReplyBody(call.describe(), request.url, response.status_code, response.headers)
            async for chunk in response.aiter_bytes(_CHUNK):
                body.add(chunk)
        return body

    async def api_version(self) -> str:
        """The Slurm REST version in use; ``auto`` is resolved once per connection and cached."""
        if self._api_version == versions.AUTO:
            key = self._version_key()
            found = _DETECTED.get(key)
            if found is None:
                found = await self.run(ops.detect_version())
                _DETECTED[key] = found
            self._api_version = found
        return self._api_version

    async def call_slurm(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> tuple[int, dict]:
        reply = await self.run(ops.raw_call(method, path, body))
        return reply.status, reply.body

    async def get_job(self, job_id: object, *, recently_submitted: bool = False) -> SlurmJob:
        version = await self.api_version()
        return await self.run(ops.get_job(version, job_id, recently_submitted=recently_submitted))

    async def get_jobs(self, job_id: object) -> list[SlurmJob]:
        return await self.run(ops.get_jobs(await self.api_version(), job_id))

    async def list_accounted_jobs(self, **filters: str) -> list[SlurmJob]:
        return await self.run(ops.list_accounted_jobs(await self.api_version(), **filters))

    async def job_states(self, job_ids: list[object]) -> dict[str, JobState]:
        return await self.run(ops.job_states(await self.api_version(), job_ids))

    async def cancel_job(self, job_id: object) -> ops.Cancelled:
        return await self.run(ops.cancel_job(await self.api_version(), job_id))
