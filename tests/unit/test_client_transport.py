"""Both clients against hostile servers on loopback: real HTTP, real TLS, each failure mapped one way."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient, RetryPolicy, SlurmJobApiClient
from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import MAX_REPLY_BYTES
from airflow_provider_slurmapi.api.errors import SlurmTransportError
from tests import hostile_http as hostile
from tests.hostile_http import LoopbackServer

JWT = "jwt-SECRET-value"
LIST = "/slurm/v0.0.42/jobs/"
ONE_TRY = RetryPolicy(attempts=1)
QUICK_RETRIES = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.01)


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def call(kind: str, url: str, *, method: str = "GET", timeout: float = 5.0, retry: RetryPolicy = ONE_TRY) -> Any:
    """``call_slurm`` through the ``kind`` client on a direct slurmrestd at ``url``: (status, body)."""
    body = {"script": "#!/bin/bash\ntrue\n", "job": {}} if method == "POST" else None
    path = "/slurm/v0.0.42/job/submit" if method == "POST" else LIST
    target = SlurmrestdRef(url, "tester", JWT)
    if kind == "sync":
        with SlurmJobApiClient(target, timeout=timeout, retry=retry) as client:
            return client.call_slurm(method, path, body)

    async def run() -> Any:
        async with AsyncSlurmJobApiClient(target, timeout=timeout, retry=retry) as client:
            return await client.call_slurm(method, path, body)

    return asyncio.run(run())


def failure(kind: str, url: str, **kwargs: Any) -> tuple[SlurmTransportError, float]:
    started = time.monotonic()
    with pytest.raises(SlurmTransportError) as info:
        call(kind, url, **kwargs)
    return info.value, time.monotonic() - started


def test_a_well_behaved_server_answers(kind):
    with LoopbackServer(hostile.reply()) as server:
        assert call(kind, server.url) == (200, {"jobs": [], "errors": [], "warnings": []})
    assert server.seen[0].headers["x-slurm-user-token"] == JWT


@pytest.mark.parametrize("head_too", [True, False], ids=["whole-reply", "body"])
def test_a_trickled_reply_ends_at_the_deadline(kind, head_too):
    # One byte every 50 ms: no read ever waits 1 s, yet the reply would take minutes.
    with LoopbackServer(hostile.trickle(head_too=head_too)) as server:
        error, elapsed = failure(kind, server.url, timeout=1.0)
    assert elapsed < 6.0, f"the call took {elapsed:.1f}s with timeout=1"
    assert "no complete reply within 1s" in str(error)
    assert error.ambiguous and error.retryable


def test_a_reply_cut_short_is_a_retried_ambiguous_transport_error(kind):
    with LoopbackServer(hostile.cut()) as server:
        error, _ = failure(kind, server.url, retry=QUICK_RETRIES)
    assert error.ambiguous and error.retryable
    assert "before the whole reply arrived" in str(error)
    assert len(server.seen) == 3  # every try of the GET was made: the cut went through the retry policy


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_redirect_is_refused_and_names_its_target(kind, status, method):
    with LoopbackServer(hostile.reply()) as elsewhere:
        target = elsewhere.url + "/other/place"
        with LoopbackServer(hostile.redirect(target, status)) as server:
            error, _ = failure(kind, server.url, method=method, retry=QUICK_RETRIES)
    assert elsewhere.seen == []  # neither the job nor the JWT went anywhere else
    assert len(server.seen) == 1  # and it is not retried
    assert target in str(error) and f"HTTP {status}" in str(error)
    assert not error.retryable
    assert error.ambiguous  # a submit's fate is looked up: a 303 answers a POST that was acted on
    assert JWT not in str(error)


def test_a_relative_redirect_names_the_absolute_target(kind):
    with LoopbackServer(hostile.redirect("/login?next=x", 302)) as server:
        error, _ = failure(kind, server.url)
    assert f"{server.url}/login?next=x" in str(error)


@pytest.mark.parametrize("declare", [True, False], ids=["announced", "unannounced"])
def test_a_reply_over_the_cap_is_refused_while_streaming(kind, declare):
    size = 2 * MAX_REPLY_BYTES
    with LoopbackServer(hostile.flood(size, declare=declare)) as server:
        error, _ = failure(kind, server.url, retry=QUICK_RETRIES)
    assert "64 MiB cap (MAX_REPLY_BYTES" in str(error)
    assert not error.retryable and error.ambiguous
    assert len(server.seen) == 1
    # The client stopped reading: what the server got out is the cap (or less) plus socket buffers.
    limit = 8 * 2**20 if declare else MAX_REPLY_BYTES + 16 * 2**20
    assert server.sent < limit, f"the server sent {server.sent:,} bytes"


def trust(monkeypatch: pytest.MonkeyPatch, ca_file: Path) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_untrusted_certificate_is_named_and_neither_retried_nor_ambiguous(kind, method, tmp_path):
    certs = hostile.make_certificates(tmp_path)
    with LoopbackServer(hostile.reply(), tls=certs.server) as server:
        error, _ = failure(kind, server.url, method=method, retry=QUICK_RETRIES)
    assert "TLS certificate failed verification" in str(error)
    assert "REQUESTS_CA_BUNDLE" in str(error) and "SSL_CERT_FILE" in str(error)
    assert not error.retryable and not error.ambiguous
    assert server.connections == 1 and server.seen == []


def test_a_certificate_for_another_host_is_named(kind, tmp_path, monkeypatch):
    certs = hostile.make_certificates(tmp_path, names=("slurm.example.org",))
    trust(monkeypatch, certs.ca_file)
    with LoopbackServer(hostile.reply(), tls=certs.server) as server:
        error, _ = failure(kind, server.url, retry=QUICK_RETRIES)
    assert "TLS certificate failed verification" in str(error) and "mismatch" in str(error)
    assert not error.retryable and server.connections == 1


def test_a_certificate_from_a_ca_trusted_through_the_environment_works(kind, tmp_path, monkeypatch):
    certs = hostile.make_certificates(tmp_path)
    trust(monkeypatch, certs.ca_file)
    with LoopbackServer(hostile.reply(), tls=certs.server) as server:
        assert call(kind, server.url)[0] == 200


def test_the_deadline_holds_through_a_proxy(kind, monkeypatch):
    # The proxy trickles; the cluster's own address (nothing listens there) is never reached directly.
    with LoopbackServer(hostile.trickle(head_too=True)) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        error, elapsed = failure(kind, "http://127.0.0.1:9", timeout=1.0)
    assert proxy.seen and proxy.seen[0].path == f"http://127.0.0.1:9{LIST}"
    assert elapsed < 6.0 and "no complete reply within 1s" in str(error)
