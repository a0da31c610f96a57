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


# A job listing read for a few of its jobs (``Call.only_jobs``, the poller's read of the jobs that ended in
# the queue): the wanted records decode exactly as a whole read gives them, the rest are dropped unread.


def _queue_of(count: int) -> dict:
    listing = recorded("jobs_list")
    first = listing["jobs"][0]
    return dict(listing, jobs=[dict(first, job_id=1000 + n, name=f"job-{n}") for n in range(count)])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_listing_read_for_some_jobs_keeps_exactly_those_records(shape):
    content = shaped(200, _queue_of(50), shape)
    whole = parse_reply(200, content, what="GET /slurm/v0.0.42/jobs/")
    some = parse_reply(200, content, what="GET /slurm/v0.0.42/jobs/", only_jobs=frozenset({"1003", "1040", "7"}))
    by_id = {r["job_id"]: r for r in whole.body["jobs"]}
    kept = [r for r in some.body["jobs"] if r["job_id"] in (1003, 1040)]
    assert kept == [by_id[1003], by_id[1040]]
    assert some.status == whole.status == 200 and some.ok
    assert some.body["meta"] == whole.body["meta"]  # the release, for the version-removal notice
    assert some.warnings == whole.warnings and some.errors == whole.errors
    if shape != "body-object":  # a body a proxy already decoded is read whole, as before
        assert len(some.body["jobs"]) == 2


def test_a_listing_read_directly_from_slurmrestd_keeps_the_wanted_records():
    from airflow_provider_slurmapi.api.direct import SlurmrestdRef

    queue = _queue_of(20)
    ref = SlurmrestdRef("http://127.0.0.1:6820", "slurm", "jwt")
    some = ref.parse(200, json.dumps(queue).encode(), what="GET jobs", only_jobs=frozenset({"1019"}))
    assert some.body["jobs"] == [queue["jobs"][19]] and some.body["meta"] == queue["meta"]


@pytest.mark.parametrize("shape", SHAPES)
def test_errors_read_the_same_when_only_some_jobs_are_wanted(shape):
    only = frozenset({"1"})
    reply = parse_reply(200, wrap("slurmdb_job_slurmdbd_down", shape), what="list jobs", only_jobs=only)
    with pytest.raises(SlurmAccountingUnavailableError, match="Unable to connect to database"):
        reply.raise_for_errors("list jobs")
    content = json.dumps({"error": {"code": 503, "message": "try later", "status": "UNAVAILABLE"}}).encode()
    with pytest.raises(GoogleApiError, match="try later"):
        parse_reply(503, content, what="GET /slurm/v0.0.42/jobs/", only_jobs=only)


@pytest.mark.parametrize(
    "content",
    [b'{"status": 200, "structuredBody": {"jobs": [{"job_id": 1}', b'{"status": 200, "body": "{\\"jobs\\": [tr"}'],
)
def test_a_cut_listing_is_malformed_when_only_some_jobs_are_wanted(content):
    from airflow_provider_slurmapi.api.errors import MalformedReplyError

    with pytest.raises(MalformedReplyError):
        parse_reply(200, content, what="GET x", only_jobs=frozenset({"1"}))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_listing_with_a_record_that_is_not_an_object_reads_as_before(shape):
    from airflow_provider_slurmapi.api.operations import records

    queue = _queue_of(3)
    queue["jobs"].insert(1, None)
    content = shaped(200, queue, shape)
    some = parse_reply(200, content, what="GET jobs", only_jobs=frozenset({"1002"}))
    assert [r["job_id"] for r in records(some) if r["job_id"] == 1002] == [1002]
