"""Injected faults: each kind, its filters, and that the emulator recovers afterwards."""

from __future__ import annotations

import time

import pytest
import requests

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.harness.emulator import Api, V, bearer, call_url, job_desc

PING = {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/ping/"}


def post(emu: SlurmJobApiEmulator, envelope: dict, headers: dict[str, str]) -> requests.Response:
    return requests.post(call_url(emu), json=envelope, headers=headers, timeout=10)


@pytest.mark.parametrize(
    ("kind", "code", "status"),
    [
        ("unavailable", 503, "UNAVAILABLE"),
        ("resource_exhausted", 429, "RESOURCE_EXHAUSTED"),
        ("internal", 500, "INTERNAL"),
    ],
)
def test_google_error_faults(emu: SlurmJobApiEmulator, kind: str, code: int, status: str) -> None:
    headers = bearer(emu)
    emu.inject_fault(kind, count=2)
    for _ in range(2):
        response = post(emu, PING, headers)
        assert response.status_code == code and response.json()["error"]["status"] == status
    assert post(emu, PING, headers).status_code == 200
    assert [call.status for call in emu.calls] == [code, code, 200]


def test_filters_by_path_and_method(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    emu.inject_fault("unavailable", count=None, path_contains="/jobs/state", method="GET")
    assert post(emu, PING, headers).status_code == 200
    assert post(emu, {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/jobs/state/"}, headers).status_code == 503
    assert post(emu, {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/jobs/state/"}, headers).status_code == 503
    emu.clear_faults()
    assert post(emu, {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/jobs/state/"}, headers).status_code == 200


def test_probability_is_seedable() -> None:
    def pattern(seed: int) -> list[int]:
        with SlurmJobApiEmulator(seed=seed) as emu:
            headers = bearer(emu)
            emu.inject_fault("unavailable", count=None, probability=0.5)
            return [post(emu, PING, headers).status_code for _ in range(12)]

    first = pattern(7)
    assert first == pattern(7)
    assert set(first) == {200, 503}


def test_slurmdbd_down_fault_and_switch(api: Api, emu: SlurmJobApiEmulator) -> None:
    emu.inject_fault("slurmdbd_down", count=1)
    assert api.call("GET", f"/slurm/{V}/ping/")[0] == 200, "only /slurmdb paths are hit"
    status, body = api.call("GET", f"/slurmdb/{V}/job/1")
    assert status == 502 and body["errors"][0]["error_number"] == 7000
    assert api.call("GET", f"/slurmdb/{V}/job/1")[0] == 200
    emu.set_slurmdbd_down(True)
    assert api.call("GET", f"/slurmdb/{V}/jobs/")[0] == 502
    assert api.call("GET", f"/slurmdb/{V}/ping/")[0] == 502
    job_id = api.submit()
    emu.set_slurmdbd_down(False)
    emu.wait_for_state(job_id, "COMPLETED", 10)
    assert api.db_job(job_id)[1]["jobs"][0]["job_id"] == job_id


def test_reset_closes_without_a_reply(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    emu.inject_fault("reset")
    with pytest.raises(requests.ConnectionError):
        post(emu, PING, headers)
    assert post(emu, PING, headers).status_code == 200
    assert [call.status for call in emu.calls] == [0, 200]


def test_lost_reply_executes_the_call(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    emu.inject_fault("lost_reply", path_contains="job/submit")
    envelope = {
        "method": "HTTP_METHOD_POST",
        "path": f"/slurm/{V}/job/submit",
        "body": {"job": job_desc(name="lost"), "script": "#!/bin/bash\ntrue\n"},
    }
    with pytest.raises(requests.ConnectionError):
        post(emu, envelope, headers)
    (job,) = emu.jobs()
    assert job["name"] == "lost", "the job was submitted although the client saw no reply"


def test_slow_delays_the_answer(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    emu.inject_fault("slow", delay=0.5)
    started = time.monotonic()
    assert post(emu, PING, headers).status_code == 200
    assert time.monotonic() - started >= 0.5
    with pytest.raises(requests.Timeout):
        emu.inject_fault("slow", delay=1.0)
        requests.post(call_url(emu), json=PING, headers=headers, timeout=0.3)


def test_malformed_reply_is_truncated_json(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    emu.inject_fault("malformed")
    response = post(emu, PING, headers)
    assert response.status_code == 200
    with pytest.raises(ValueError):
        response.json()
    assert post(emu, PING, headers).json()["status"] == 200


def test_token_error(emu: SlurmJobApiEmulator) -> None:
    emu.inject_fault("token_error")
    creds_form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "x"}
    assert requests.post(emu.token_uri, data=creds_form, timeout=10).status_code == 500
    assert requests.post(emu.token_uri, data=creds_form, timeout=10).status_code == 400


def test_token_slow(emu: SlurmJobApiEmulator) -> None:
    emu.inject_fault("token_slow", delay=0.5)
    creds_form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "x"}
    started = time.monotonic()
    assert requests.post(emu.token_uri, data=creds_form, timeout=10).status_code == 400  # answered, late
    assert time.monotonic() - started >= 0.5
    assert emu.faults.fired == ["token_slow"]
    assert post(emu, PING, bearer(emu)).status_code == 200  # calls are not slowed


def test_unknown_fault_kind_is_an_error(emu: SlurmJobApiEmulator) -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        emu.inject_fault("gremlins")
