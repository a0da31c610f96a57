"""The direct slurmrestd transport: requests as slurmrestd takes them, replies as it gave them."""

from __future__ import annotations

import json

import pytest

from airflow_provider_slurmapi.api.connection import settings_from_extra
from airflow_provider_slurmapi.api.direct import SlurmrestdRef
from airflow_provider_slurmapi.api.envelope import Call
from airflow_provider_slurmapi.api.errors import SlurmAuthError, SlurmJobSpecError
from tests.fixtures import SLURM_2411

REF = SlurmrestdRef("http://127.0.0.1:6820", "ciuser", "jwt-secret")


def raw(name: str) -> bytes:
    return (SLURM_2411 / f"{name}.json").read_bytes()


def test_request_carries_jwt_headers_and_plain_body():
    request = REF.request(Call("POST", "/slurm/v0.0.42/job/submit", {"script": "#!/bin/bash"}))
    assert request.method == "POST" and request.url == "http://127.0.0.1:6820/slurm/v0.0.42/job/submit"
    assert request.headers["X-SLURM-USER-NAME"] == "ciuser"
    assert request.headers["X-SLURM-USER-TOKEN"] == "jwt-secret"
    assert json.loads(request.content) == {"script": "#!/bin/bash"}
    get = REF.request(Call("GET", "/slurm/v0.0.42/job/1"))
    assert get.method == "GET" and get.content == b""


def test_token_is_not_in_repr():
    assert "jwt-secret" not in repr(REF)
    assert "jwt-secret" not in repr(REF.request(Call("GET", "/slurm/v0.0.42/jobs/")))


@pytest.mark.parametrize(("name", "status"), [("auth_no_headers", 401), ("auth_bad_token", 511)])
def test_auth_failures_raise_clearly(name, status):
    with pytest.raises(SlurmAuthError, match="slurm_jwt"):
        REF.parse(status, raw(name), what="GET /slurm/v0.0.42/jobs/")


def test_json_and_text_replies():
    assert REF.parse(404, raw("job_not_found"), what="x").errors[0].error_number == 2017
    text = REF.parse(404, raw("unknown_path"), what="x")
    assert text.status == 404 and "Unable find requested URL" in text.body["_text"]


def test_connection_selects_direct_mode_with_login_and_password():
    settings = settings_from_extra({"slurmrestd_url": "http://localhost:6820"}, "c", login="u", password="t")
    assert isinstance(settings.cluster, SlurmrestdRef)
    assert settings.cluster.user == "u" and settings.cluster.token == "t"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"slurmrestd_url": "http://slurm.example.com:6820", "slurm_user": "u", "slurm_jwt": "t"}, "slurmrestd_url"),
        ({"slurmrestd_url": "http://127.0.0.1:6820", "slurm_jwt": "t"}, "slurm_user"),
        ({"slurmrestd_url": "http://127.0.0.1:6820", "slurm_user": "u"}, "slurm_jwt"),
    ],
)
def test_direct_connection_errors_name_the_field(extra, field):
    with pytest.raises(SlurmJobSpecError, match=field):
        settings_from_extra(extra, "c")


def test_the_size_check_before_a_submit_is_the_targets_own():
    from airflow_provider_slurmapi.api.client import SlurmJobApiClient
    from airflow_provider_slurmapi.api.envelope import ClusterRef
    from airflow_provider_slurmapi.api.spec import JobSpec

    spec = JobSpec.build("#!/bin/bash\n" + "#" * 1_100_000, {"current_working_directory": "/h"})
    SlurmJobApiClient(REF, api_version="auto").check_submit(spec)  # slurmrestd takes it: no error, no call
    google = SlurmJobApiClient(ClusterRef("p", "us-central1", "c"), api_version="auto", tokens=object())  # type: ignore[arg-type]
    with pytest.raises(SlurmJobSpecError, match="under 1 MB"):
        google.check_submit(spec)
