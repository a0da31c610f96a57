"""SlurmJobApiHook against the emulator: real HTTP on loopback, google-auth's real token flow."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.api.connection import settings_from_extra
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    SlurmJobNotFoundError,
    SlurmJobSpecError,
    SlurmRequestRejectedError,
)
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

CWD = "/home/tester"
OK = "#!/bin/bash\necho hello from $SLURM_JOB_ID\n"


def use_connection(monkeypatch, emu, conn_id="slurmapi_default", **overrides):
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", emu.connection_json(**overrides))
    return SlurmJobApiHook(slurmapi_conn_id=conn_id)


@pytest.fixture
def hook(slurmapi_emulator, monkeypatch):
    return use_connection(monkeypatch, slurmapi_emulator)


def test_submit_wait_completed_with_output(hook, slurmapi_emulator):
    job_id = hook.submit_job(OK, {"current_working_directory": CWD, "name": "hello"})
    job = hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    assert job.state.is_success
    assert job.exit_code.return_code == 0
    assert job.name == "hello"
    assert job.standard_output == f"{CWD}/slurm-{job_id}.out"
    assert slurmapi_emulator.read_output(job_id).strip() == f"hello from {job_id}"


def test_failed_job_reports_exit_code(hook):
    job_id = hook.submit_job("#!/bin/bash\nexit 3\n", {"current_working_directory": CWD})
    job = hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    assert job.state.base == "FAILED"
    assert job.exit_code.return_code == 3


def test_cancel_running_job(hook, slurmapi_emulator):
    job_id = hook.submit_job("#!/bin/bash\nsleep 300\n", {"current_working_directory": CWD})
    slurmapi_emulator.wait_for_state(job_id, ["RUNNING"], timeout=30)
    result = hook.cancel_job(job_id)
    assert not result.already_finished
    seen: list[str] = []
    job = hook.wait_for_job(job_id, poll_interval=0.05, timeout=60, on_poll=lambda j: seen.append(str(j.state)))
    assert job.state.base == "CANCELLED" and job.state.is_terminal
    # The wait went on past CANCELLED+COMPLETING (not terminal by Slurm's rule) to CANCELLED.
    assert seen[-1] == "CANCELLED" and all(s.startswith(("RUNNING", "CANCELLED")) for s in seen)
    assert hook.cancel_job(job_id).already_finished


def test_finished_job_is_read_from_accounting_after_purge(hook, slurmapi_emulator):
    job_id = hook.submit_job(OK, {"current_working_directory": CWD})
    hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    slurmapi_emulator.purge(job_id)
    job = hook.get_job(job_id)
    assert job.source == "slurmdb"
    assert job.state.is_success
    assert hook.cancel_job(job_id).already_finished


def test_unknown_job(hook):
    with pytest.raises(SlurmJobNotFoundError, match="neither in the active queue nor in accounting"):
        hook.get_job(987654)


def test_bad_partition_is_rejected_by_slurm(hook):
    with pytest.raises(SlurmRequestRejectedError, match="Invalid partition name specified"):
        hook.submit_job(OK, {"current_working_directory": CWD, "partition": "nosuch"})


def test_unknown_field_warning_is_logged(hook, capfd):
    hook.submit_job(OK, {"current_working_directory": CWD, "no_such_field": 1})
    out = capfd.readouterr()
    assert "no_such_field" in out.out + out.err


def test_list_jobs_and_raw_call(hook):
    job_id = hook.submit_job(OK, {"current_working_directory": CWD})
    assert job_id in [j.job_id for j in hook.list_jobs()]
    status, body = hook.call_slurm("GET", f"/slurm/v0.0.42/job/{job_id}")
    assert status == 200 and body["jobs"][0]["job_id"] == job_id


def test_test_connection_reports_slurm_version(hook):
    ok, message = hook.test_connection()
    assert ok, message
    assert "24.11" in message


def test_keyfile_dict_connection(slurmapi_emulator, monkeypatch):
    hook = use_connection(
        monkeypatch, slurmapi_emulator, key_path=None, keyfile_dict=json.dumps(slurmapi_emulator.keyfile_dict)
    )
    assert hook.test_connection()[0]


def test_impersonation_chain(slurmapi_emulator, monkeypatch):
    target = slurmapi_emulator.impersonation_targets[0]
    hook = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_imp", impersonation_chain=target)
    ok, message = hook.test_connection()
    assert ok, message


def test_unknown_cluster_is_not_found(slurmapi_emulator, monkeypatch):
    hook = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_wrong", cluster_id="no-such-cluster")
    with pytest.raises(GoogleApiError) as info:
        hook.list_jobs()
    assert info.value.status == "NOT_FOUND" and "cluster_id" in str(info.value)


def test_transient_unavailable_is_retried(hook, slurmapi_emulator):
    slurmapi_emulator.inject_fault("unavailable", count=1)
    assert isinstance(hook.list_jobs(), list)


def test_submit_is_not_blindly_retried_after_an_ambiguous_failure(hook, slurmapi_emulator):
    from airflow_provider_slurmapi.api.errors import SlurmTransportError

    before = len(slurmapi_emulator.jobs())
    slurmapi_emulator.inject_fault("lost_reply", count=1, path_contains="job/submit")
    with pytest.raises(SlurmTransportError) as info:
        hook.submit_job(OK, {"current_working_directory": CWD})
    assert info.value.ambiguous
    assert len(slurmapi_emulator.jobs()) == before + 1


def test_oversize_script_is_refused_before_sending(hook, slurmapi_emulator):
    calls = len(slurmapi_emulator.calls)
    with pytest.raises(SlurmJobSpecError, match="shared storage"):
        hook.submit_job("#!/bin/bash\n" + "#" * 1_100_000, {"current_working_directory": CWD})
    assert len(slurmapi_emulator.calls) == calls


def test_no_token_in_logs_or_reprs(hook, caplog, capfd):
    with caplog.at_level(logging.DEBUG):
        job_id = hook.submit_job(OK, {"current_working_directory": CWD, "no_such_field": 1})
        hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    out = capfd.readouterr()
    printed = out.out + out.err + caplog.text
    assert "Slurm job" in printed  # the logs were captured, so the check below means something
    client = hook.get_conn()
    assert client.tokens is not None
    token = client.tokens.token()
    assert len(token) > 10
    for text in (printed, repr(hook), repr(client), repr(client.tokens), repr(client.auth)):
        assert token not in text
    assert "PRIVATE KEY" not in repr(hook.settings)


def test_async_client_shares_the_core(hook):
    job_id = hook.submit_job(OK, {"current_working_directory": CWD})
    hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)

    async def read():
        settings = await hook.aget_settings()
        async with AsyncSlurmJobApiClient(settings.cluster, **settings.client_kwargs()) as client:
            return await client.get_job(job_id), await client.job_states([job_id])

    job, states = asyncio.run(read())
    assert job.state.is_success
    assert str(states[str(job_id)]) == "COMPLETED"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"region": "us-central1", "cluster_id": "c"}, "project_id"),
        ({"project_id": "p", "cluster_id": "c"}, "region"),
        ({"project_id": "p", "region": "us-central1"}, "cluster_id"),
        ({"project_id": "p", "region": "r1", "cluster_id": "c", "endpoint": "http://10.0.0.1"}, "endpoint"),
        ({"project_id": "p", "region": "r1", "cluster_id": "c", "api_version": "v0.0.39"}, "api_version"),
        ({"project_id": "p", "region": "r1", "cluster_id": "c", "timeout": "soon"}, "timeout"),
        ({"project_id": "p", "region": "r1", "cluster_id": "c", "keyfile_dict": "{not json"}, "keyfile_dict"),
        (
            {"project_id": "p", "region": "r1", "cluster_id": "c", "impersonation_chain": "nobody"},
            "impersonation_chain",
        ),
        ({"project_id": "p", "region": "r1", "cluster_id": "c", "colour": "blue"}, "colour"),
    ],
)
def test_bad_connections_name_the_field(extra, field):
    with pytest.raises(SlurmJobSpecError) as info:
        settings_from_extra(extra, "my_conn")
    assert field in str(info.value) and "my_conn" in str(info.value)


def test_a_changed_connection_is_seen_by_the_next_hook(slurmapi_emulator, monkeypatch):
    first = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_changed", timeout=11)
    assert first.settings.timeout == 11
    changed = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_changed", timeout=12)
    assert asyncio.run(changed.aget_settings()).timeout == 12
    assert changed.settings.timeout == 12


def test_one_token_refresh_at_a_time(hook, slurmapi_emulator):
    import threading

    client = hook.get_conn()
    assert client.tokens is not None
    client.tokens.invalidate()
    before = slurmapi_emulator.token_requests
    threads = [threading.Thread(target=client.tokens.token) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def many() -> None:
        client.tokens.invalidate()
        await asyncio.gather(*(client.tokens.atoken() for _ in range(50)))

    asyncio.run(many())
    assert slurmapi_emulator.token_requests - before == 2  # one per invalidation, however many callers


def test_a_refused_token_is_forgotten_without_waiting_for_a_refresh_in_flight(hook, slurmapi_emulator):
    import threading

    tokens = hook.get_conn().tokens
    assert tokens is not None
    old = tokens.token()
    slurmapi_emulator.inject_fault("token_slow", delay=3.0)
    tokens.invalidate()
    refresh = threading.Thread(target=tokens.token)
    refresh.start()
    while slurmapi_emulator.faults.fired != ["token_slow"]:  # the refresh is at the token endpoint
        time.sleep(0.01)
    tokens.invalidate(old)  # e.g. a 401 on the event loop: must not wait for that refresh
    assert refresh.is_alive()
    refresh.join()
    fresh = tokens.token()
    assert fresh != old
    before = slurmapi_emulator.token_requests
    tokens.invalidate(old)  # a late 401 for the old token keeps the new one
    assert tokens.token() == fresh and slurmapi_emulator.token_requests == before


def test_quota_project_header(slurmapi_emulator, monkeypatch):
    hook = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_quota", quota_project_id="billing-proj")
    client = hook.get_conn()
    from airflow_provider_slurmapi.api.envelope import Call

    request = client._request(Call("GET", "/slurm/v0.0.42/ping/"), "tok")
    assert request.headers["x-goog-user-project"] == "billing-proj"
    assert hook.test_connection()[0]


def test_a_principal_without_access_is_refused(slurmapi_emulator, monkeypatch):
    slurmapi_emulator.allowed_principals.clear()
    hook = use_connection(monkeypatch, slurmapi_emulator, conn_id="slurmapi_denied")
    with pytest.raises(GoogleApiError) as info:
        hook.list_jobs()
    assert info.value.status == "PERMISSION_DENIED" and "roles/aiplatform.user" in str(info.value)
