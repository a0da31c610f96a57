"""The envelope: URL, request body, size limit and reply parsing, on real recorded replies."""

from __future__ import annotations

import json

import pytest

from airflow_provider_slurmapi.api.envelope import Call, ClusterRef, build_envelope, encode_envelope, parse_reply
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    SlurmAccountingUnavailableError,
    SlurmJobSpecError,
    SlurmRequestRejectedError,
)
from tests.fixtures import recorded, recorded_status

# callSlurmRestApi's two documented reply shapes: Slurm's reply as a ``structuredBody`` object, or as a
# ``body`` JSON string (and a ``body`` a proxy already decoded into the object).
SHAPES = ("structuredBody", "body", "body-object")


def wrap(name: str, shape: str = "structuredBody") -> bytes:
    return shaped(recorded_status(name), recorded(name), shape)


def shaped(status: int, slurm_reply: object, shape: str) -> bytes:
    if shape == "structuredBody":
        return json.dumps({"status": status, "structuredBody": slurm_reply}).encode()
    if shape == "body":
        return json.dumps({"status": status, "body": json.dumps(slurm_reply)}).encode()
    return json.dumps({"status": status, "body": slurm_reply}).encode()


def test_default_url_is_the_regional_endpoint():
    ref = ClusterRef("my-project", "us-central1", "train-1")
    assert ref.url == (
        "https://us-central1-aiplatform.googleapis.com/v1beta1/projects/my-project/locations/us-central1/"
        "modelDevelopmentClusters/train-1:callSlurmRestApi"
    )


def test_endpoint_override_and_universe_domain():
    assert ClusterRef("p", "europe-west4", "c", universe_domain="example.com").base_url == (
        "https://europe-west4-aiplatform.example.com"
    )
    assert ClusterRef("p", "r1", "c", endpoint="http://127.0.0.1:8080/").base_url == "http://127.0.0.1:8080"


@pytest.mark.parametrize("domain", ["googleapis.com", "apis-tpczero.goog", "Sovereign.Example.EU", "a1.b-2.example"])
def test_universe_domains_that_are_dns_names_are_accepted(domain):
    ref = ClusterRef("p", "r1", "c", universe_domain=domain)
    assert ref.base_url == f"https://r1-aiplatform.{domain.lower()}"


@pytest.mark.parametrize("endpoint", ["http://example.com", "ftp://x", "not a url", "https://h/?q=1"])
def test_unsafe_endpoints_are_refused(endpoint):
    with pytest.raises(SlurmJobSpecError, match="endpoint"):
        ClusterRef("p", "r1", "c", endpoint=endpoint)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"project_id": "", "region": "r1", "cluster_id": "c"}, "project_id"),
        ({"project_id": "p", "region": "US Central", "cluster_id": "c"}, "region"),
        ({"project_id": "p", "region": "r1", "cluster_id": "c/../x"}, "cluster_id"),
    ],
)
def test_bad_cluster_ids_name_the_field(kwargs, field):
    with pytest.raises(SlurmJobSpecError) as info:
        ClusterRef(**kwargs)
    assert info.value.field == field


def test_body_only_for_post():
    assert build_envelope(Call("GET", "/slurm/v0.0.42/job/1")) == {
        "method": "HTTP_METHOD_GET",
        "path": "/slurm/v0.0.42/job/1",
    }
    post = build_envelope(Call("POST", "/slurm/v0.0.42/job/submit", {"script": "x"}))
    assert post["method"] == "HTTP_METHOD_POST" and post["body"] == {"script": "x"}
    with pytest.raises(SlurmJobSpecError, match="body"):
        build_envelope(Call("POST", "/slurm/v0.0.42/job/submit"))
    with pytest.raises(SlurmJobSpecError, match="body"):
        build_envelope(Call("DELETE", "/slurm/v0.0.42/job/1", {"x": 1}))


@pytest.mark.parametrize("path", ["/etc/passwd", "slurm/v0.0.42/jobs", "/slurm/v0.0.42/job/1/../../x", "/slurm/v1/x"])
def test_bad_paths_are_refused(path):
    with pytest.raises(SlurmJobSpecError, match="path"):
        build_envelope(Call("GET", path))


def test_requests_of_a_megabyte_are_refused_before_sending():
    big = "#!/bin/bash\n" + "x" * 1_000_000
    with pytest.raises(SlurmJobSpecError, match="shared storage"):
        encode_envelope(Call("POST", "/slurm/v0.0.42/job/submit", {"script": big}))


@pytest.mark.parametrize("shape", SHAPES)
def test_reply_with_job_id(shape):
    reply = parse_reply(200, wrap("submit", shape), what="submit")
    assert reply.ok and reply.body["job_id"] == 1
    assert reply.body == recorded("submit")


@pytest.mark.parametrize("shape", SHAPES)
def test_unknown_field_warning_is_kept(shape):
    reply = parse_reply(200, wrap("submit_unknown_field", shape), what="submit")
    assert reply.ok
    assert "no_such_field" in reply.warnings[0].description


@pytest.mark.parametrize("shape", SHAPES)
def test_job_records_read_the_same_in_every_shape(shape):
    from airflow_provider_slurmapi.api.operations import records

    reply = parse_reply(200, wrap("job_running", shape), what="GET job")
    assert reply.status == 200
    assert [r["job_state"] for r in records(reply)] == [["RUNNING"]]


def test_a_body_string_that_is_not_json_stays_text():
    # slurmrestd's plain-text answers (404 "Unable to find requested URL ...") carried as the body string
    text = "Unable to find requested URL endpoint."
    reply = parse_reply(200, shaped(404, text, "body"), what="GET /slurm/v0.0.41/ping/")
    assert reply.status == 404 and not reply.ok
    assert reply.body == {"_text": text}
    with pytest.raises(SlurmRequestRejectedError, match="Unable to find requested URL"):
        reply.raise_for_errors("ping")


@pytest.mark.parametrize("empty", ['{"status": 204, "body": ""}', '{"status": 204}', '{"status": "204", "body": null}'])
def test_an_empty_body_is_an_empty_reply(empty):
    reply = parse_reply(200, empty.encode(), what="DELETE x")
    assert reply.status == 204 and reply.body == {} and reply.ok


@pytest.mark.parametrize(
    ("name", "error_cls", "said"),
    [
        ("submit_bad_partition", SlurmRequestRejectedError, "Invalid partition name specified"),
        ("submit_no_script", SlurmRequestRejectedError, '"script" field is required'),
        ("submit_no_environment", SlurmRequestRejectedError, "I/O error writing script/environment"),
        ("slurmdb_job_slurmdbd_down", SlurmAccountingUnavailableError, "Unable to connect to database"),
    ],
)
@pytest.mark.parametrize("shape", SHAPES)
def test_slurm_errors_are_read_whatever_the_status(name, error_cls, said, shape):
    reply = parse_reply(200, wrap(name, shape), what="submit the job")
    with pytest.raises(error_cls) as info:
        reply.raise_for_errors("submit the job")
    assert said in str(info.value)
    assert info.value.http_status == recorded_status(name)
    assert info.value.retryable is (error_cls is SlurmAccountingUnavailableError)


@pytest.mark.parametrize(
    ("code", "status", "retryable"),
    [
        (403, "PERMISSION_DENIED", False),
        (404, "NOT_FOUND", False),
        (400, "INVALID_ARGUMENT", False),
        (401, "UNAUTHENTICATED", False),
        (503, "UNAVAILABLE", True),
        (429, "RESOURCE_EXHAUSTED", True),
    ],
)
def test_google_errors(code, status, retryable):
    content = json.dumps({"error": {"code": code, "message": "denied because reasons", "status": status}}).encode()
    with pytest.raises(GoogleApiError) as info:
        parse_reply(code, content, what="GET /slurm/v0.0.42/jobs/")
    assert info.value.status == status
    assert info.value.retryable is retryable
    assert "denied because reasons" in str(info.value)


@pytest.mark.parametrize(
    "content",
    [
        b"<html>bad gateway</html>",
        b'{"status": 200, "structuredBo',
        b"[]",
        b'{"status": 200, "body": "{\\"jobs\\": [tr"}',
    ],
)
def test_malformed_replies_raise_clearly(content):
    from airflow_provider_slurmapi.api.errors import MalformedReplyError

    with pytest.raises(MalformedReplyError) as info:
        parse_reply(200, content, what="GET x")
    assert info.value.retryable and info.value.ambiguous
