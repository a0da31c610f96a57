"""The Google layer: token grant, impersonation, token expiry, and Google-format errors."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import google.auth.transport.requests
import pytest
import requests
from google.auth import impersonated_credentials
from google.auth.exceptions import RefreshError

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.harness.emulator import SCOPES, Api, V, bearer, call_url, credentials

PING = {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/ping/"}


def google_error(response: requests.Response, code: int, status: str) -> str:
    assert response.status_code == code, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}
    assert body["error"]["code"] == code and body["error"]["status"] == status
    return str(body["error"]["message"])


def test_key_file_is_a_service_account_key(emu: SlurmJobApiEmulator) -> None:
    key = json.loads(Path(emu.key_path).read_text())
    assert key == emu.keyfile_dict
    assert key["type"] == "service_account" and key["project_id"] == emu.project
    assert key["client_email"] == emu.service_account_email == f"airflow@{emu.project}.iam.gserviceaccount.com"
    assert key["token_uri"] == emu.token_uri == f"{emu.endpoint}/token"
    assert key["private_key"].startswith("-----BEGIN PRIVATE KEY-----")


def test_service_account_flow_and_ping(api: Api, emu: SlurmJobApiEmulator) -> None:
    status, body = api.call("GET", f"/slurm/{V}/ping/")
    assert status == 200 and body["pings"][0]["pinged"] == "UP"
    assert body["meta"]["slurm"]["cluster"] == emu.cluster
    assert emu.token_requests == 1
    api.call("GET", f"/slurm/{V}/ping/")
    assert emu.token_requests == 1, "google-auth reuses its token"


def test_token_endpoint_answers_oauth_form(emu: SlurmJobApiEmulator) -> None:
    creds = credentials(emu)
    creds.refresh(google.auth.transport.requests.Request())
    assert creds.token and creds.expiry is not None
    lifetime = (creds.expiry - creds.expiry.utcnow()).total_seconds()
    assert 3500 < lifetime <= 3600


@pytest.mark.parametrize(
    "form",
    [
        {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "not.a.jwt"},
        {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": "x"},
        {"grant_type": "client_credentials"},
    ],
)
def test_bad_assertion_is_refused(emu: SlurmJobApiEmulator, form: dict[str, str]) -> None:
    response = requests.post(emu.token_uri, data=form, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"] in {"invalid_grant", "unsupported_grant_type"}
    assert response.json()["error_description"]


def test_tampered_assertion_is_refused(emu: SlurmJobApiEmulator) -> None:
    creds = credentials(emu)
    assertion = creds._make_authorization_grant_assertion()  # type: ignore[attr-defined]
    header, payload, signature = (assertion.decode() if isinstance(assertion, bytes) else assertion).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["iss"] = "intruder@elsewhere.iam.gserviceaccount.com"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    response = requests.post(
        emu.token_uri,
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
            "assertion": f"{header}.{forged}.{signature}",
        },
        timeout=10,
    )
    assert response.status_code == 400 and response.json()["error"] == "invalid_grant"
    assert "Signature" in response.json()["error_description"]


def test_foreign_key_is_refused(emu: SlurmJobApiEmulator, tmp_path) -> None:
    with SlurmJobApiEmulator(state_dir=tmp_path / "other") as other:
        info = dict(other.keyfile_dict, token_uri=emu.token_uri)
    from google.oauth2 import service_account

    creds = service_account.Credentials.from_service_account_info(info, scopes=SCOPES)
    with pytest.raises(RefreshError, match="invalid_grant"):
        creds.refresh(google.auth.transport.requests.Request())


def test_no_or_invalid_token_is_unauthenticated(emu: SlurmJobApiEmulator) -> None:
    url = call_url(emu)
    google_error(requests.post(url, json=PING, timeout=10), 401, "UNAUTHENTICATED")
    response = requests.post(url, json=PING, headers={"Authorization": "Bearer ya29.bogus"}, timeout=10)
    google_error(response, 401, "UNAUTHENTICATED")
    assert "Bearer" in response.headers["WWW-Authenticate"]


def test_expire_tokens_gives_401_and_google_auth_refreshes(api: Api, emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    api.call("GET", f"/slurm/{V}/ping/")
    emu.expire_tokens()
    google_error(requests.post(api.url, json=PING, headers=headers, timeout=10), 401, "UNAUTHENTICATED")
    assert api.call("GET", f"/slurm/{V}/ping/")[0] == 200, "AuthorizedSession refreshes on 401 and retries"
    assert [call.status for call in emu.calls[-2:]] == [401, 200]
    assert emu.token_requests == 3


@pytest.mark.slurmapi_emulator(token_lifetime=1)
def test_tokens_expire_after_token_lifetime(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    url = call_url(emu)
    assert requests.post(url, json=PING, headers=headers, timeout=10).status_code == 200
    time.sleep(1.1)  # the token's lifetime, on the real clock
    google_error(requests.post(url, json=PING, headers=headers, timeout=10), 401, "UNAUTHENTICATED")


@pytest.mark.slurmapi_emulator(allowed_principals=["someone-else@demo-project.iam.gserviceaccount.com"])
def test_principal_without_permission_is_denied(emu: SlurmJobApiEmulator) -> None:
    message = google_error(
        requests.post(call_url(emu), json=PING, headers=bearer(emu), timeout=10), 403, "PERMISSION_DENIED"
    )
    assert "modelDevelopmentClusters.run" in message


@pytest.mark.parametrize("part", ["project", "region", "cluster"])
def test_unknown_resource_is_not_found(emu: SlurmJobApiEmulator, part: str) -> None:
    url = call_url(emu, **{part: "nope"})
    message = google_error(requests.post(url, json=PING, headers=bearer(emu), timeout=10), 404, "NOT_FOUND")
    assert "nope" in message


def test_other_google_paths_are_not_found(emu: SlurmJobApiEmulator) -> None:
    headers = bearer(emu)
    google_error(
        requests.post(f"{emu.endpoint}/v1/projects/x:run", json={}, headers=headers, timeout=10), 404, "NOT_FOUND"
    )
    google_error(requests.get(call_url(emu), headers=headers, timeout=10), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    "envelope",
    [
        {"method": "HTTP_METHOD_PUT", "path": f"/slurm/{V}/ping/"},
        {"method": "GET", "path": f"/slurm/{V}/ping/"},
        {"path": f"/slurm/{V}/ping/"},
        {"method": "HTTP_METHOD_POST", "path": f"/slurm/{V}/job/submit"},
        {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/ping/", "body": {"x": 1}},
        {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/nosuchthing"},
        {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.39/ping/"},
        {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/job/abc"},
        {"method": "HTTP_METHOD_GET", "path": "/etc/passwd"},
        {"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/ping/", "extra": 1},
        ["not", "an", "object"],
    ],
)
def test_bad_envelope_is_invalid_argument(api: Api, envelope: object) -> None:
    google_error(api.post(envelope), 400, "INVALID_ARGUMENT")


def test_malformed_json_is_invalid_argument(api: Api) -> None:
    response = api.session.post(api.url, data=b'{"method": ', headers={"Content-Type": "application/json"})
    assert "Invalid JSON" in google_error(response, 400, "INVALID_ARGUMENT")


def test_request_over_one_megabyte_is_refused_before_reading(api: Api, emu: SlurmJobApiEmulator) -> None:
    script = "#!/bin/bash\n" + "#" * 1_000_001
    envelope = {"method": "HTTP_METHOD_POST", "path": f"/slurm/{V}/job/submit", "body": {"script": script}}
    message = google_error(api.post(envelope), 400, "INVALID_ARGUMENT")
    assert "1000000" in message
    assert emu.jobs() == []
    assert api.call("GET", f"/slurm/{V}/ping/")[0] == 200, "the next call still works"


def test_slightly_under_the_limit_is_accepted(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\n" + "#" * 990_000 + "\ntrue\n")
    assert emu.wait_for_state(job_id, "COMPLETED", 10)["exit_code"] == 0


def test_impersonation(emu: SlurmJobApiEmulator) -> None:
    target = emu.impersonation_targets[0]
    creds = impersonated_credentials.Credentials(
        source_credentials=credentials(emu),
        target_principal=target,
        target_scopes=SCOPES,
        lifetime=600,
        iam_endpoint_override=emu.impersonation_url(target),
    )
    api = Api(emu, creds)
    try:
        status, _ = api.call("GET", f"/slurm/{V}/ping/")
        assert status == 200
        job_id = api.submit()
        assert emu.job(job_id)["user"] == target.split("@")[0]
    finally:
        api.close()


@pytest.mark.slurmapi_emulator(allowed_principals=["slurm-runner@demo-project.iam.gserviceaccount.com"])
def test_only_the_impersonated_principal_is_allowed(emu: SlurmJobApiEmulator) -> None:
    google_error(requests.post(call_url(emu), json=PING, headers=bearer(emu), timeout=10), 403, "PERMISSION_DENIED")
    target = emu.impersonation_targets[0]
    creds = impersonated_credentials.Credentials(
        source_credentials=credentials(emu),
        target_principal=target,
        target_scopes=SCOPES,
        iam_endpoint_override=emu.impersonation_url(target),
    )
    api = Api(emu, creds)
    try:
        assert api.call("GET", f"/slurm/{V}/ping/")[0] == 200
    finally:
        api.close()


def test_impersonating_an_unknown_account_fails(emu: SlurmJobApiEmulator) -> None:
    target = f"nobody@{emu.project}.iam.gserviceaccount.com"
    response = requests.post(
        emu.impersonation_url(target), json={"scope": SCOPES, "lifetime": "600s"}, headers=bearer(emu), timeout=10
    )
    google_error(response, 404, "NOT_FOUND")
    response = requests.post(emu.impersonation_url(emu.impersonation_targets[0]), json={"scope": SCOPES}, timeout=10)
    google_error(response, 401, "UNAUTHENTICATED")


def test_generate_access_token_reply(emu: SlurmJobApiEmulator) -> None:
    response = requests.post(
        emu.impersonation_url(emu.impersonation_targets[0]),
        json={"scope": SCOPES, "lifetime": "600s", "delegates": []},
        headers=bearer(emu),
        timeout=10,
    )
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"accessToken", "expireTime"}
    time.strptime(body["expireTime"], "%Y-%m-%dT%H:%M:%SZ")


def test_reply_shape_body_carries_slurms_answer_as_a_json_string(tmp_path: Path) -> None:
    with (
        SlurmJobApiEmulator(state_dir=tmp_path / "a") as structured,
        SlurmJobApiEmulator(state_dir=tmp_path / "b", reply_shape="body") as stringly,
    ):
        replies = []
        for emu in (structured, stringly):
            response = requests.post(call_url(emu), json=PING, headers=bearer(emu), timeout=30)
            assert response.status_code == 200, response.text
            replies.append(response.json())
    object_reply, string_reply = replies
    assert set(object_reply) == {"status", "structuredBody"}
    assert set(string_reply) == {"status", "body"} and isinstance(string_reply["body"], str)
    assert string_reply["status"] == object_reply["status"] == 200
    answer = json.loads(string_reply["body"])
    assert answer.keys() == object_reply["structuredBody"].keys()
    assert answer["pings"][0]["pinged"] == object_reply["structuredBody"]["pings"][0]["pinged"] == "UP"


def test_an_unknown_reply_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="reply_shape"):
        SlurmJobApiEmulator(reply_shape="structured_body")
