"""A corpus of bad inputs: each is refused before anything is sent, with an error naming the field and fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.connection import settings_from_extra
from airflow_provider_slurmapi.api.envelope import Call, ClusterRef, SlurmReply, encode_envelope, parse_reply
from airflow_provider_slurmapi.api.errors import SlurmApiError, SlurmJobApiError, SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.spec import JobSpec

OK = "#!/bin/bash\ntrue\n"
CWD = {"current_working_directory": "/home/u"}
GOOD_CONN = {"project_id": "p", "region": "us-central1", "cluster_id": "c"}
SECRET = "ya29.SECRET-TOKEN-VALUE"


def spec(script: Any = OK, **job: Any) -> Callable[[], object]:
    return lambda: JobSpec.build(script, {**CWD, **job})


def conn(**extra: Any) -> Callable[[], object]:
    return lambda: settings_from_extra({**GOOD_CONN, **extra}, "bad_conn")


def op(**kwargs: Any) -> Callable[[], object]:
    def build() -> object:
        from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

        return SlurmSubmitJobOperator(task_id="t", script=OK, current_working_directory="/h", **kwargs)

    return build


def job_id(value: Any) -> Callable[[], object]:
    return lambda: next(ops.get_job("v0.0.42", value))


CASES: list[tuple[str, Callable[[], object], str]] = [
    # scripts
    ("empty script", spec(""), "script"),
    ("whitespace script", spec("   \n"), "script"),
    ("script without #!", spec("echo hi"), "script"),
    ("path instead of content", spec("/home/u/train.sh"), "script"),
    ("script is bytes", spec(b"#!/bin/bash"), "script"),
    ("script is None", spec(None), "script"),
    (
        "oversize script",
        lambda: encode_envelope(Call("POST", "/slurm/v0.0.42/job/submit", {"script": "#!" + "x" * 1_000_001})),
        "script",
    ),
    # job fields
    ("no working directory", lambda: JobSpec.build(OK, {}), "current_working_directory"),
    (
        "relative working directory",
        lambda: JobSpec.build(OK, {"current_working_directory": "runs"}),
        "current_working_directory",
    ),
    (
        "working directory is a number",
        lambda: JobSpec.build(OK, {"current_working_directory": 5}),
        "current_working_directory",
    ),
    ("time_limit string", spec(time_limit="2h"), "time_limit"),
    ("time_limit zero", spec(time_limit=0), "time_limit"),
    ("time_limit negative timedelta", spec(time_limit=timedelta(minutes=-5)), "time_limit"),
    ("time_limit float", spec(time_limit=1.5), "time_limit"),
    ("time_limit bool", spec(time_limit=True), "time_limit"),
    ("environment string", spec(environment="PATH=/bin"), "environment"),
    ("environment entry without =", spec(environment=["PATH"]), "environment"),
    ("environment bad name", spec(environment={"A-B": "1"}), "environment"),
    ("environment nested value", spec(environment={"A": ["x"]}), "environment"),
    ("environment None value", spec(environment={"A": None}), "environment"),
    ("partition number", spec(partition=3), "partition"),
    ("name list", spec(name=["a"]), "name"),
    ("minimum_nodes string", spec(minimum_nodes="2"), "minimum_nodes"),
    ("minimum_nodes zero", spec(minimum_nodes=0), "minimum_nodes"),
    ("tasks_per_node bool", spec(tasks_per_node=True), "tasks_per_node"),
    ("cpus_per_task float", spec(cpus_per_task=1.5), "cpus_per_task"),
    ("hold string", spec(hold="yes"), "hold"),
    ("memory nonsense", spec(memory_per_node="lots"), "memory_per_node"),
    ("memory negative", spec(memory_per_node=-1), "memory_per_node"),
    ("array injection", spec(array="0-3;rm -rf"), "array"),
    ("dependency number", spec(dependency=5), "dependency"),
    ("comment dict", spec(comment={"a": 1}), "comment"),
    ("job not a dict", lambda: JobSpec.build(OK, ["a"]), "job"),  # type: ignore[arg-type]
    # only whole values match (a "$" also matches before a final newline), and no NUL goes out
    ("array with a newline", spec(array="0-3\n"), "array"),
    ("array range backwards", spec(array="5-1"), "array"),
    ("array of dashes", spec(array="--"), "array"),
    ("environment name with a newline", spec(environment={"PATH\n": "/bin"}), "environment"),
    ("script with NUL", spec("#!/bin/bash\necho \0\n"), "script"),
    ("output path with NUL", spec(standard_output="/home/u/a\0.out"), "standard_output"),
    ("working directory with NUL", spec(current_working_directory="/home/u\0/x"), "current_working_directory"),
    ("environment value with NUL", spec(environment={"A": "x\0y"}), "environment"),
    ("environment entry with NUL", spec(environment=["A=x\0y"]), "environment"),
    ("cluster id with a newline", conn(cluster_id="c\n"), "cluster_id"),
    ("region with a newline", conn(region="us-central1\n"), "region"),
    ("raw path with a newline", lambda: encode_envelope(Call("GET", "/slurm/v0.0.42/jobs/\n")), "path"),
    # Slurm's ranges and the documented types
    ("time_limit beyond uint32", spec(time_limit=10**12), "time_limit"),
    ("time_limit object beyond uint32", spec(time_limit={"set": True, "number": 2**32}), "time_limit"),
    ("time_limit timedelta beyond uint32", spec(time_limit=timedelta(days=10**7)), "time_limit"),
    ("cpus_per_task 2**64", spec(cpus_per_task=2**64), "cpus_per_task"),
    ("cpus_per_task beyond uint16", spec(cpus_per_task=65536), "cpus_per_task"),
    ("tasks_per_node beyond uint16", spec(tasks_per_node=70000), "tasks_per_node"),
    ("minimum_nodes beyond uint32", spec(minimum_nodes=2**32), "minimum_nodes"),
    ("tasks negative", spec(tasks=-4), "tasks"),
    ("nodes negative int", spec(nodes=-1), "nodes"),
    ("priority negative", spec(priority=-1), "priority"),
    ("priority beyond uint32", spec(priority=2**32), "priority"),
    ("priority object negative", spec(priority={"set": True, "number": -5}), "priority"),
    ("priority float", spec(priority=1.5), "priority"),
    ("memory beyond int64", spec(memory_per_node=2**64), "memory_per_node"),
    ("memory string beyond int64", spec(memory_per_cpu="99999999999999999T"), "memory_per_cpu"),
    ("environment bytes value", spec(environment={"A": b"x"}), "environment"),
    ("environment bool value", spec(environment={"DEBUG": True}), "environment"),
    ("environment nan value", spec(environment={"A": float("nan")}), "environment"),
    ("environment object value", spec(environment={"A": object()}), "environment"),
    ("warning signal KILL", spec(kill_warning_signal="KILL"), "kill_warning_signal"),
    ("warning signal 9", spec(kill_warning_signal=9), "kill_warning_signal"),
    ("warning signal TERM", spec(kill_warning_signal="SIGTERM"), "kill_warning_signal"),
    ("warning signal unknown", spec(kill_warning_signal="USR3"), "kill_warning_signal"),
    ("warning signal bool", spec(kill_warning_signal=True), "kill_warning_signal"),
    ("warning delay zero", spec(kill_warning_signal="USR1", kill_warning_delay=0), "kill_warning_delay"),
    ("warning delay beyond uint16", spec(kill_warning_signal="USR1", kill_warning_delay=65534), "kill_warning_delay"),
    ("warning delay text", spec(kill_warning_signal="USR1", kill_warning_delay="60"), "kill_warning_delay"),
    ("warning delay without a signal", spec(kill_warning_delay=60), "kill_warning_delay"),
    (
        "warning delay past the time limit",
        spec(kill_warning_signal="USR1", kill_warning_delay=120, time_limit=2),
        "kill_warning_delay",
    ),
    ("warning flags a string", spec(kill_warning_signal="USR1", kill_warning_flags="BATCH_JOB"), "kill_warning_flags"),
    ("requeue text", spec(requeue="no"), "requeue"),
    # connections and endpoints
    ("missing project", lambda: settings_from_extra({"region": "r1", "cluster_id": "c"}), "project_id"),
    ("missing region", lambda: settings_from_extra({"project_id": "p", "cluster_id": "c"}), "region"),
    ("missing cluster", lambda: settings_from_extra({"project_id": "p", "region": "r1"}), "cluster_id"),
    ("region with spaces", conn(region="us central"), "region"),
    ("cluster traversal", conn(cluster_id="../x"), "cluster_id"),
    ("http endpoint off loopback", conn(endpoint="http://example.com"), "endpoint"),
    ("endpoint not a URL", conn(endpoint="aiplatform"), "endpoint"),
    ("endpoint with query", conn(endpoint="https://x.example.com/?a=1"), "endpoint"),
    ("endpoint with user", conn(endpoint="https://user@x.example.com"), "endpoint"),
    ("unknown api version", conn(api_version="v0.0.39"), "api_version"),
    ("timeout zero", conn(timeout=0), "timeout"),
    ("timeout text", conn(timeout="soon"), "timeout"),
    ("keyfile not JSON", conn(keyfile_dict="{nope"), "keyfile_dict"),
    ("key_path and keyfile both", conn(key_path="/k.json", keyfile_dict=json.dumps({"a": 1})), "key_path"),
    ("impersonation not an email", conn(impersonation_chain="robot"), "impersonation_chain"),
    ("unknown extra", conn(colour="blue"), "colour"),
    ("universe_domain with a user part", conn(universe_domain="x@evil.example/"), "universe_domain"),
    ("universe_domain with a path", conn(universe_domain="evil.example/x"), "universe_domain"),
    ("universe_domain with a port", conn(universe_domain="googleapis.com:8443"), "universe_domain"),
    ("universe_domain a URL", conn(universe_domain="https://googleapis.com"), "universe_domain"),
    ("universe_domain one label", conn(universe_domain="localhost"), "universe_domain"),
    ("universe_domain with a space", conn(universe_domain=" googleapis.com"), "universe_domain"),
    ("universe_domain not a string", lambda: ClusterRef("p", "r1", "c", universe_domain=5), "universe_domain"),  # type: ignore[arg-type]
    ("job_link_template javascript", conn(job_link_template="javascript:alert(1)//{job_id}"), "job_link_template"),
    ("job_link_template JavaScript", conn(job_link_template=" JavaScript:alert({job_id})"), "job_link_template"),
    ("job_link_template data URL", conn(job_link_template="data:text/html,<b>{job_id}</b>"), "job_link_template"),
    ("job_link_template scheme-relative", conn(job_link_template="//evil.example/{job_id}"), "job_link_template"),
    (
        "direct without user",
        lambda: settings_from_extra({"slurmrestd_url": "http://127.0.0.1:6820", "slurm_jwt": "t"}),
        "slurm_user",
    ),
    # job ids
    ("job id traversal", job_id("1/../../x"), "job_id"),
    ("job id negative", job_id(-1), "job_id"),
    ("job id text", job_id("abc"), "job_id"),
    ("job id zero", job_id(0), "job_id"),
    ("job id bool", job_id(True), "job_id"),
    ("job id float", job_id(1.5), "job_id"),
    ("job id None", job_id(None), "job_id"),
    ("job id with query", job_id("1?x=2"), "job_id"),
    ("job id past 32 bits", job_id(2**32), "job_id"),
    ("job id past 32 bits as text", job_id("99999999999999999"), "job_id"),
    ("array task id past 32 bits", job_id("5_4294967296"), "job_id"),
    # operator arguments
    ("poll_interval zero", op(poll_interval=0), "poll_interval"),
    ("poll_interval text", op(poll_interval="fast"), "poll_interval"),
    ("gpus_per_node text", op(gpus_per_node="8"), "gpus_per_node"),
    ("gpus_per_node negative", op(gpus_per_node=-1), "gpus_per_node"),
    ("kill_warning_signal STOP", op(kill_warning_signal="STOP"), "kill_warning_signal"),
    ("kill_warning_delay without a signal", op(kill_warning_delay=300), "kill_warning_delay"),
    ("kill_warning_delay negative", op(kill_warning_signal="USR1", kill_warning_delay=-5), "kill_warning_delay"),
    ("requeue text on the operator", op(requeue="false"), "requeue"),
]


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize(("what", "make", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field(what, make, field):
    with pytest.raises(SlurmJobSpecError) as info:
        make()
    message = str(info.value)
    assert field in message, message
    assert info.value.fix and info.value.fix.strip().endswith((".", ")")), message


@pytest.mark.parametrize(
    "template",
    ["https://grafana.example.com/d/slurm?job={job_id}", "HTTP://127.0.0.1:8080/jobs/{job_id}", "{url}/jobs/{job_id}"],
)
def test_http_link_templates_are_accepted(template):
    assert settings_from_extra({**GOOD_CONN, "job_link_template": template}).job_link_template == template


REPLIES = [
    ("not JSON", 200, b"<html>oops</html>"),
    ("truncated JSON", 200, b'{"status": 200, "structuredBo'),
    ("JSON list", 200, b"[1, 2]"),
    ("status not a number", 200, b'{"status": "ok", "structuredBody": {}}'),
    ("status outside HTTP's range", 200, b'{"status": 999, "structuredBody": {}}'),
    ("status zero", 200, b'{"status": 0, "structuredBody": {}}'),
    ("nested too deeply", 200, b'{"status": 200, "structuredBody": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("empty body", 200, b""),
    ("Google error without details", 503, b"Service Unavailable"),
    (
        "Google error object",
        403,
        json.dumps({"error": {"code": 403, "message": "no", "status": "PERMISSION_DENIED"}}).encode(),
    ),
]


@pytest.mark.parametrize(("what", "status", "content"), REPLIES, ids=[r[0] for r in REPLIES])
def test_unexpected_reply_shapes_raise_provider_errors(what, status, content):
    with pytest.raises(SlurmJobApiError) as info:
        parse_reply(status, content, what="GET /slurm/v0.0.42/job/1")
    assert "GET /slurm/v0.0.42/job/1" in str(info.value)
    if "status" in what:
        assert "malformed reply" in str(info.value) and "fix" not in str(info.value).lower()


@pytest.mark.parametrize("listing", [None, frozenset({"1"})], ids=["whole", "only-some-jobs"])
def test_a_reply_nested_too_deeply_is_a_malformed_reply_not_a_crash(listing):
    """Python's and msgspec's decoders raise RecursionError past their depth: a reply error, like any other."""
    deep = b"[" * 100000 + b"]" * 100000
    content = b'{"status": 200, "structuredBody": {"jobs": [{"job_id": 1, "x": ' + deep + b"}]}}"
    with pytest.raises(SlurmJobApiError, match="not JSON"):
        parse_reply(200, content, what="GET /slurm/v0.0.42/jobs/", only_jobs=listing)


@pytest.mark.parametrize(
    "body",
    [{"jobs": "not a list"}, {"nothing": 1}, {"jobs": None}],
)
def test_job_replies_without_a_jobs_list(body):
    op_ = ops.get_job("v0.0.42", 5)
    next(op_)
    with pytest.raises(SlurmApiError, match="jobs list"):
        op_.send(SlurmReply.from_structured(200, body))


def test_odd_job_records_do_not_crash_parsing():
    for record in ({}, {"job_state": 5}, {"job_id": "x", "exit_code": "bad", "time_limit": {"set": "?"}}):
        job = SlurmJob.from_job_info(record)
        assert job.state.base == "UNKNOWN" and not job.state.is_terminal
        SlurmJob.from_slurmdb(record)


def test_errors_never_carry_a_token():
    reply = json.dumps({"error": {"code": 401, "message": "bad token", "status": "UNAUTHENTICATED"}}).encode()
    with pytest.raises(SlurmJobApiError) as info:
        parse_reply(401, reply, what="GET /slurm/v0.0.42/jobs/")
    assert SECRET not in str(info.value)
    request = settings_from_extra(GOOD_CONN).cluster.request(Call("GET", "/slurm/v0.0.42/jobs/"), SECRET)
    assert SECRET not in repr(request)
