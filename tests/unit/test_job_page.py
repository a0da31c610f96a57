"""The Slurm job pages: what they show (job_view, render) and who may see it (the plugin's FastAPI app)."""

from __future__ import annotations

import copy
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_slurmapi.api.envelope import SlurmReply
from airflow_provider_slurmapi.api.errors import SlurmApiError, SlurmJobNotFoundError
from airflow_provider_slurmapi.api.identity import parse_tag, tagged_comment, task_instance_tag
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.plugins import urls
from airflow_provider_slurmapi.plugins.job_view import (
    JobView,
    Resources,
    format_duration,
    listed,
    merge_listing,
    task_url,
    user_comment,
)
from airflow_provider_slurmapi.plugins.slurm_job_page import SlurmJobPagePlugin, pages_available
from tests.fixtures import recorded

RUN_ID = "manual__2026-01-01T00:00:00+00:00"
TAG = task_instance_tag("train_dag", "train", RUN_ID)


def job_info(fixture: str = "job_completed", **changes: Any) -> dict[str, Any]:
    record = copy.deepcopy(recorded(fixture)["jobs"][0])
    record.update(changes)
    return record


def slurmdb(fixture: str = "slurmdb_job", **changes: Any) -> dict[str, Any]:
    record = copy.deepcopy(recorded(fixture)["jobs"][0])
    record.update(changes)
    return record


def tagged(record: dict[str, Any], tag: str = TAG, comment: str | None = None) -> SlurmJob:
    record = dict(record, comment=tagged_comment(tag, comment))
    return SlurmJob.from_job_info(record)


# -- tags -------------------------------------------------------------------------------------------


def test_tag_round_trips_with_the_operator_tag():
    ref = parse_tag(tagged_comment(TAG, "nightly run"))
    assert ref is not None
    assert (ref.dag_id, ref.task_id, ref.run_id, ref.map_index, ref.dag_id_exact) == (
        "train_dag",
        "train",
        RUN_ID,
        -1,
        True,
    )
    assert ref.tag == TAG
    assert user_comment(tagged_comment(TAG, "nightly run")) == "nightly run"
    assert user_comment(tagged_comment(TAG, "nightly run", 3)) == "nightly run"


def test_mapped_task_links_to_its_map_index():
    ref = parse_tag(task_instance_tag("d", "t", "r/with/slashes", 3))
    assert ref is not None and ref.run_id == "r/with/slashes" and ref.map_index == 3
    assert task_url(ref, "/") == "/dags/d/runs/r%2Fwith%2Fslashes/tasks/t/mapped/3"
    assert task_url(parse_tag(TAG), "/airflow") == (  # type: ignore[arg-type]
        "/airflow/dags/train_dag/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/train"
    )


def test_hashed_tag_names_the_dag_only_when_it_was_not_cut():
    short = parse_tag(task_instance_tag("d", "t" * 100, "r" * 200))
    assert short is not None and short.run_id is None and short.dag_id_exact and short.dag_id == "d"
    assert task_url(short, "/") == f"/dags/d/tasks/{'t' * 80}"
    cut = parse_tag(task_instance_tag("d" * 120, "t", "r" * 200))
    assert cut is not None and not cut.dag_id_exact


@pytest.mark.parametrize("comment", ["", "plain comment", "airflow-ti:", "airflow-ti:d/t", "airflow-ti:d/t/r/x"])
def test_no_tag(comment):
    assert parse_tag(comment) is None


# -- what a job page shows --------------------------------------------------------------------------


def test_durations():
    assert format_duration(None) == "—"
    assert format_duration(timedelta(seconds=42)) == "42s"
    assert format_duration(timedelta(minutes=3, seconds=5)) == "3m 05s"
    assert format_duration(timedelta(hours=2, minutes=7)) == "2h 07m 00s"
    assert format_duration(timedelta(days=3, hours=4, minutes=10)) == "3d 4h 10m"


def test_gpus_from_tres():
    res = Resources.from_tres("cpu=96,mem=1400G,node=4,billing=96,gres/gpu=32,gres/gpu:h100=32")
    assert (res.cpus, res.memory, res.nodes, res.gpus) == ("96", "1400G", "4", 32)
    assert res.other == (("billing", "96"),)
    assert Resources.from_tres("cpu=8,gres/gpu:a100=4,gres/gpu:h100=2").gpus == 6
    assert Resources.from_tres("cpu=1,mem=19284,node=1").memory == "19284M"  # accounting counts MB
    assert Resources.from_tres("").empty


def test_completed_job_view():
    job = tagged(job_info("job_completed"))
    view = JobView.build(job)
    assert view.state == "COMPLETED" and view.state_class == "ok" and not view.live
    assert view.exit_code == "0"
    assert [s.label for s in view.steps] == ["Submitted", "Started", "Ended"]
    assert all(s.reached for s in view.steps)
    assert view.steps[2].detail.startswith("ran ")
    assert view.ref is not None and view.ref.task_id == "train"
    assert view.requested.memory == "19284M" and view.requested.cpus == "1"
    assert '"job_state"' in view.raw_json


def test_failed_job_explains_itself():
    view = JobView.build(tagged(job_info("job_failed")))
    assert view.state_class == "bad" and view.exit_code == "3" and view.reason == "NonZeroExitCode"
    assert "The batch script exited with code 3." in view.warnings


def test_pending_job_is_live_and_waiting():
    record = job_info("job_pending", state_reason="Resources", tres_per_node="gres/gpu:8", node_count=2)
    now = datetime.fromtimestamp(1796228993 + 75, tz=timezone.utc)
    view = JobView.build(tagged(record), now=now)
    assert view.live and view.state_class == "pending" and view.exit_code == "—"
    assert not view.steps[1].reached and view.steps[1].detail == "waiting 1m 15s (Resources)"
    assert view.requested.gpus == 16
    assert "Pending: Resources" in view.warnings


def test_running_job_counts_its_run_time():
    now = datetime.fromtimestamp(1796228995 + 30, tz=timezone.utc)
    view = JobView.build(tagged(job_info("job_running", time_limit=5)), now=now)
    assert view.live and view.state_class == "running"
    assert view.steps[2].detail == "running for 30s of 5m 00s"
    assert view.ran == "30s"


def test_untagged_job_says_so():
    view = JobView.build(SlurmJob.from_job_info(job_info("job_completed")))
    assert view.ref is None
    assert any("no Airflow task-instance tag" in w for w in view.warnings)


def test_accounting_record_view():
    record = slurmdb("slurmdb_job", comment={"job": TAG, "administrator": "", "system": ""})
    record["tres"]["allocated"].append({"type": "gres", "name": "gpu", "id": 1001, "count": 8})
    view = JobView.build(SlurmJob.from_slurmdb(record))
    assert view.source_label == "accounting (/slurmdb)"
    assert view.allocated.gpus == 8 and view.ran == "2s" and view.ref is not None


def test_listing_merges_queue_and_accounting_newest_first():
    old = SlurmJob.from_slurmdb(slurmdb("slurmdb_job", comment={"job": TAG}))  # id 1, submitted first
    finished_in_queue = tagged(job_info("job_completed", job_id=1))
    newer = tagged(job_info("job_failed"))  # id 3
    untagged = SlurmJob.from_job_info(job_info("job_running", job_id=7))
    rows = merge_listing([finished_in_queue, newer, untagged], [old])
    assert [j.job_id for j, _ in rows] == [3, 1]
    assert rows[1][0].source == "slurmdb"  # an ended job: accounting's record wins


def test_listing_keeps_the_tag_accounting_dropped_and_finds_jobs_by_their_name():
    """Real Slurm's accounting keeps no comment by default: the queue's tag stands for its ended job, and a
    job known only to accounting is listed by the identity its name ends with (without a task)."""
    ended = tagged(job_info("job_completed", job_id=1))
    accounted = SlurmJob.from_slurmdb(slurmdb("slurmdb_job", comment={"job": ""}))  # id 1, tag lost
    only_accounted = SlurmJob.from_slurmdb(
        slurmdb("slurmdb_job", job_id=5, name="train~af0123456789abr17", comment={"job": ""})
    )
    foreign = SlurmJob.from_slurmdb(slurmdb("slurmdb_job", job_id=6, name="someone_else", comment={"job": ""}))
    rows = merge_listing([ended], [accounted, only_accounted, foreign])
    by_id = {job.job_id: (job, ref) for job, ref in rows}
    assert sorted(by_id) == [1, 5]
    assert by_id[1][0].source == "slurmdb" and by_id[1][1] is not None and by_id[1][1].tag == TAG
    assert by_id[5][1] is None


def test_html_escapes_everything():
    from airflow_provider_slurmapi.plugins import render

    evil = "<script>alert(1)</script>"
    job = tagged(job_info("job_failed", name=evil, partition='"><img src=x>'), comment=evil)
    html = render.render_job_page(
        JobView.build(job), conn_id="slurmapi_default", pages_root="/slurmapi", ui_root="/", list_url="/slurmapi/jobs"
    )
    assert "<script>" not in html and "<img src=x>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="/dags/train_dag/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/train"' in html
    assert 'http-equiv="refresh"' not in html  # finished: no refresh


def test_live_page_refreshes_itself():
    from airflow_provider_slurmapi.plugins import render

    html = render.render_job_page(
        JobView.build(tagged(job_info("job_running"))),
        conn_id="c",
        pages_root="/slurmapi",
        ui_root="/",
        list_url="/slurmapi/jobs",
    )
    assert f'<meta http-equiv="refresh" content="{render.LIVE_REFRESH_SECONDS}">' in html


# -- URLs and the plugin ----------------------------------------------------------------------------


def test_page_urls():
    assert urls.job_page_url(12) == "/slurmapi/jobs/12"
    assert urls.job_page_url("12_3", "other") == "/slurmapi/jobs/12_3?conn_id=other"
    assert urls.job_page_url(12, base_url="https://af.example.com/airflow/") == (
        "https://af.example.com/airflow/slurmapi/jobs/12"
    )
    assert urls.job_list_path("x", base_url="/af") == "/af/slurmapi/jobs?conn_id=x"


def test_plugin_registers_pages_only_where_served():
    plugin = SlurmJobPagePlugin()
    if pages_available():
        assert [a["url_prefix"] for a in plugin.fastapi_apps] == ["/slurmapi"]
        assert plugin.external_views[0]["href"] == "/slurmapi/jobs"
        assert plugin.external_views is plugin.external_views  # one list: Airflow may edit it
    else:
        assert plugin.fastapi_apps == [] and plugin.external_views == []


def test_link_defaults_to_the_page_and_template_overrides():
    from airflow_provider_slurmapi.links.slurmapi import CLOUD_CONSOLE_LINK_TEMPLATE, SlurmJobLink, render_link

    pushed: dict[str, Any] = {}

    class TI:
        def xcom_push(self, key: str, value: Any) -> None:
            pushed[key] = value

    class Task:
        slurmapi_conn_id = "gpu_cluster"

    SlurmJobLink.persist({"ti": TI(), "task": Task()}, url="", job_id=42)
    expected = "/slurmapi/jobs/42?conn_id=gpu_cluster" if pages_available() else ""
    assert pushed["slurm_job_link"] == {"url": expected, "job_id": "42", "conn_id": "gpu_cluster"}
    console = render_link(CLOUD_CONSOLE_LINK_TEMPLATE, job_id=42, project_id="p", region="r", cluster_id="c", url="")
    SlurmJobLink.persist({"ti": TI()}, url=console, job_id=42)
    assert pushed["slurm_job_link"]["url"].startswith("https://console.cloud.google.com/") and "slurmJob=42" in console
    assert render_link("", job_id=1, project_id="p") == ""
    assert render_link("{nope}", job_id=1) == ""


def test_a_link_template_that_does_not_render_is_named_in_a_warning(caplog):
    from airflow_provider_slurmapi.links.slurmapi import render_link

    with caplog.at_level("WARNING", logger="airflow_provider_slurmapi.links.slurmapi"):
        assert render_link("https://x/{jobid}", job_id=1) == ""
    assert "job_link_template 'https://x/{jobid}' does not render (KeyError: 'jobid')" in caplog.text
    assert "{job_id}, {project_id}, {region}, {cluster_id}, {url}" in caplog.text


# -- who may see what: the FastAPI app --------------------------------------------------------------


class FakeClient:
    """Answers the page's one accounting call (``/slurmdb/.../job/{id}``) with ``records``, through the
    real operation that reads it."""

    api_version = "v0.0.42"

    def __init__(self, calls: list[str], records: list[dict[str, Any]]) -> None:
        self.calls, self.records = calls, records

    def run(self, operation: Any) -> Any:
        call = next(operation)
        self.calls.append(f"{call.method} {call.path}")
        try:
            operation.send(SlurmReply.from_structured(200, {"jobs": self.records, "errors": [], "warnings": []}))
        except StopIteration as done:
            return done.value
        raise AssertionError("the page makes one accounting call")


class FakeHook:
    def __init__(
        self,
        jobs: list[SlurmJob],
        accounted: list[SlurmJob] | None = None,
        accounting_records: list[dict[str, Any]] | None = None,
    ) -> None:
        self.jobs = {j.display_id: j for j in jobs}
        self.accounted = accounted  # None: accounting is down
        self.accounting_records = accounting_records  # what /slurmdb/.../job/{id} answers
        self.calls: list[str] = []
        self._client = None

    def get_job(self, job_id: str) -> SlurmJob:
        self.calls.append(f"get_job {job_id}")
        if job_id not in self.jobs:
            raise SlurmJobNotFoundError(f"no job {job_id}", http_status=404)
        return self.jobs[job_id]

    def list_jobs(self) -> list[SlurmJob]:
        self.calls.append("list_jobs")
        return list(self.jobs.values())

    def list_accounted_jobs(self, **filters: str) -> list[SlurmJob]:
        self.calls.append(f"list_accounted_jobs {sorted(filters)}")
        if self.accounted is None:
            raise SlurmApiError("slurmdbd down", http_status=502)
        return self.accounted

    def get_conn(self) -> Any:
        if self.accounting_records is None:
            raise AssertionError("a running job needs no accounting call")
        return FakeClient(self.calls, self.accounting_records)


class FakeAuthManager:
    def __init__(self, readable: set[str] | None, connections: set[str] | None = None) -> None:
        self.readable = readable  # None: every DAG
        self.connections = connections  # None: every connection
        self.connection_checks: list[tuple[str, str | None]] = []

    def is_authorized_connection(self, *, method: str, user: Any, details: Any = None) -> bool:
        self.connection_checks.append((method, details.conn_id if details else None))
        if self.connections is None:
            return True
        return method == "GET" and details is not None and details.conn_id in self.connections

    def is_authorized_dag(self, *, method: str, user: Any, details: Any = None, access_entity: Any = None) -> bool:
        assert method == "GET"
        if self.readable is None:
            return True
        return details is not None and details.id in self.readable

    def get_authorized_dag_ids(self, *, user: Any, method: str = "GET") -> set[str]:
        return {"train_dag", "another_dag", "secret_dag"} if self.readable is None else set(self.readable)

    def get_url_login(self, **kwargs: Any) -> str:
        return "/auth/login"


@pytest.fixture
def page_client(monkeypatch):
    if not pages_available():
        pytest.skip("the job pages are served by Airflow 3.1+ only")
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from airflow_provider_slurmapi.plugins import app as page_app

    state: dict[str, Any] = {"auth": FakeAuthManager(None), "hook": FakeHook([]), "real_hook": page_app._hook}
    monkeypatch.setattr(page_app, "get_auth_manager", lambda: state["auth"])
    monkeypatch.setattr(page_app, "_hook", lambda conn_id, user: state["hook"])

    def client(*, authenticated: bool = True) -> TestClient:
        app = page_app.create_app()
        if authenticated:
            app.dependency_overrides[get_user] = lambda: object()
        return TestClient(app, root_path="/slurmapi")

    state["client"] = client
    return state


def test_page_refuses_unauthenticated(page_client):
    client = page_client["client"](authenticated=False)
    for path in ("/jobs/5", "/jobs", "/"):
        reply = client.get(path)
        assert reply.status_code == 401 and reply.json() == {"detail": "Not authenticated"}
    reply = client.get("/jobs/5", headers={"Accept": "text/html"})
    assert reply.status_code == 401 and 'href="/auth/login"' in reply.text
    assert page_client["hook"].calls == []


def test_page_shows_a_job_to_readers_of_its_dag(page_client):
    page_client["hook"] = FakeHook([tagged(job_info("job_running"))])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    reply = page_client["client"]().get("/jobs/1")
    assert reply.status_code == 200, reply.text
    assert "RUNNING" in reply.text and 'http-equiv="refresh"' in reply.text
    assert "script-src" not in reply.headers["content-security-policy"]
    assert "frame-ancestors 'self'" in reply.headers["content-security-policy"]
    assert 'href="/slurmapi/jobs"' in reply.text


def test_page_refuses_users_who_may_not_read_the_dag(page_client):
    page_client["hook"] = FakeHook([tagged(job_info("job_running"))])
    page_client["auth"] = FakeAuthManager({"another_dag"})
    reply = page_client["client"]().get("/jobs/1")
    assert reply.status_code == 403 and reply.json() == {"detail": "Forbidden"}


def test_untagged_job_needs_access_to_every_dag(page_client):
    page_client["hook"] = FakeHook([SlurmJob.from_job_info(job_info("job_running"))])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    assert page_client["client"]().get("/jobs/1").status_code == 403
    page_client["auth"] = FakeAuthManager(None)
    assert page_client["client"]().get("/jobs/1").status_code == 200


def test_users_who_may_read_no_dag_are_refused_before_slurm_is_asked(page_client):
    page_client["hook"] = FakeHook([tagged(job_info("job_running"))], accounted=[])
    page_client["auth"] = FakeAuthManager(set())
    client = page_client["client"]()
    assert client.get("/jobs/1").status_code == 403
    assert client.get("/jobs").status_code == 403
    assert page_client["hook"].calls == []


def test_unknown_or_invalid_job(page_client):
    client = page_client["client"]()
    assert client.get("/jobs/99").status_code == 404
    assert client.get("/jobs/abc").status_code == 404
    assert client.get("/jobs?conn_id=bad%20id").status_code == 422


def test_pages_cannot_change_anything(page_client):
    page_client["hook"] = FakeHook([tagged(job_info("job_running"))])
    client = page_client["client"]()
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert client.request(method, "/jobs/1").status_code == 405
    assert page_client["hook"].calls == []


def test_listing_shows_only_readable_dags(page_client):
    mine = tagged(job_info("job_running", job_id=4))
    theirs = tagged(job_info("job_failed", job_id=5), tag=task_instance_tag("secret_dag", "t", "r"))
    untagged = SlurmJob.from_job_info(job_info("job_completed", job_id=6))
    page_client["hook"] = FakeHook([mine, theirs, untagged], accounted=[])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    reply = page_client["client"]().get("/jobs")
    assert reply.status_code == 200
    assert 'href="/slurmapi/jobs/4"' in reply.text and "/slurmapi/jobs/5" not in reply.text
    assert "1 job(s) of DAGs you may not read" in reply.text
    assert "list_accounted_jobs ['start_time']" in page_client["hook"].calls


def test_listing_survives_accounting_being_down(page_client):
    page_client["hook"] = FakeHook([tagged(job_info("job_running", job_id=4))], accounted=None)
    reply = page_client["client"]().get("/jobs", headers={"Accept": "text/html"})
    assert reply.status_code == 200
    assert "Accounting (/slurmdb) could not be read" in reply.text and 'href="/slurmapi/jobs/4"' in reply.text


def test_gpus_asked_in_the_queue_show_on_an_accounting_record():
    queue = tagged(job_info("job_completed", tres_per_node="gres/gpu:4", node_count=2))
    accounted = SlurmJob.from_slurmdb(slurmdb("slurmdb_job", comment={"job": TAG}))
    assert JobView.build(accounted).requested.gpus is None
    assert JobView.build(accounted, queue_record=queue).requested.gpus == 8


# -- the record shown is the record checked (issue #16 item 17) ------------------------------------


def test_an_ended_job_shows_accountings_record_under_the_queues_tag(page_client):
    # Accounting keeps no comment by default: its record of the same job (same submit time) is shown,
    # and the queue's tag still says whose job it is.
    page_client["hook"] = FakeHook([tagged(job_info("job_completed"))], accounting_records=[slurmdb("slurmdb_job")])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    reply = page_client["client"]().get("/jobs/1")
    assert reply.status_code == 200, reply.text
    assert "accounting (/slurmdb)" in reply.text
    assert 'href="/dags/train_dag/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/train"' in reply.text
    # what it used, from the record shown (real Slurm 24.11's: 1 CPU on 1 node for 2 s)
    assert '<dd id="usage">1 node, 1 CPU for 2s (queued 2s): 0.0006 node-hours, 0.0006 CPU-hours</dd>' in reply.text
    assert page_client["hook"].calls == ["get_job 1", "GET /slurmdb/v0.0.42/job/1"]


@pytest.mark.parametrize("submitted_later", [True, False])
def test_a_reused_job_id_never_shows_another_dags_job(page_client, submitted_later):
    # Job 1 of train_dag has ended and is still in the queue; accounting's record of id 1 is another
    # job, of secret_dag (the id was used again: a later submit time, or a different tag).
    theirs = slurmdb("slurmdb_job", name="secret-run", comment={"job": task_instance_tag("secret_dag", "leak", "r")})
    if submitted_later:
        theirs["time"]["submission"] += 3600
    page_client["hook"] = FakeHook([tagged(job_info("job_completed"))], accounting_records=[theirs])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    reply = page_client["client"]().get("/jobs/1", headers={"Accept": "text/html"})
    assert reply.status_code == 200, reply.text
    assert "secret" not in reply.text and "leak" not in reply.text
    assert "the active queue (/slurm)" in reply.text and "the id was used again" in reply.text


def test_a_record_whose_dag_the_user_may_not_read_is_refused_wherever_it_comes_from(page_client, monkeypatch):
    from airflow_provider_slurmapi.plugins import app as page_app

    # Even if accounting's record were taken for the queue's job, the check is made on it.
    monkeypatch.setattr(page_app, "_same_job", lambda queued, accounted: True)
    theirs = slurmdb("slurmdb_job", comment={"job": task_instance_tag("secret_dag", "leak", "r")})
    page_client["hook"] = FakeHook([tagged(job_info("job_completed"))], accounting_records=[theirs])
    page_client["auth"] = FakeAuthManager({"train_dag"})
    assert page_client["client"]().get("/jobs/1").status_code == 403


# -- connections: one 404, and the auth manager's say (issue #16 item 18) --------------------------


@pytest.fixture
def real_connections(page_client, monkeypatch):
    """The page's own connection lookup (not the fake hook), on connections from the environment."""
    from airflow_provider_slurmapi.plugins import app as page_app

    monkeypatch.setattr(page_app, "_hook", page_client["real_hook"])
    monkeypatch.setenv("AIRFLOW_CONN_HTTP_THING", '{"conn_type": "http", "host": "example.com"}')
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPU_CLUSTER",
        '{"conn_type": "slurmapi", "login": "u", "password": "jwt", "extra": {"slurmrestd_url": "http://127.0.0.1:9"}}',
    )
    return page_client


def test_connections_the_user_may_not_use_all_get_the_same_404(real_connections):
    real_connections["auth"] = FakeAuthManager(None, connections={"http_thing", "no_such_conn"})
    client = real_connections["client"]()
    answers = {}
    for conn_id in ("no_such_conn", "http_thing", "gpu_cluster"):  # missing, another type, not readable
        for path in ("/jobs/5", "/jobs"):
            reply = client.get(f"{path}?conn_id={conn_id}")
            answers[conn_id, path] = (reply.status_code, reply.json()["detail"].replace(conn_id, "X"))
    assert set(answers.values()) == {(404, "There is no Slurm Job API connection 'X' that you may use.")}
    assert ("GET", "gpu_cluster") in real_connections["auth"].connection_checks


def test_a_readable_slurmapi_connection_is_used(real_connections):
    real_connections["auth"] = FakeAuthManager(None, connections={"gpu_cluster"})
    reply = real_connections["client"]().get("/jobs/5?conn_id=gpu_cluster")
    # Nothing listens on port 9 (the discard port): the page got as far as calling slurmrestd.
    assert reply.status_code == 502 and "gpu_cluster" in reply.json()["detail"], reply.json()


# -- Slurm down or slow: the page answers soon and holds only its own few threads (item 19) --------


def test_hung_page_loads_hold_only_their_own_few_threads(page_client, monkeypatch):
    from airflow_provider_slurmapi.plugins import app as page_app

    monkeypatch.setattr(page_app, "PAGE_DEADLINE_SECONDS", 0.5)
    release = threading.Event()
    waiting: list[str] = []

    class HungHook(FakeHook):
        def get_job(self, job_id: str) -> SlurmJob:
            waiting.append(threading.current_thread().name)
            release.wait(20)  # Slurm does not answer (until the test lets it)
            return super().get_job(job_id)

    page_client["hook"] = HungHook([tagged(job_info("job_running"))])
    client = page_client["client"]()
    slots = page_app.MAX_PAGE_LOADS
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(slots) as pool:
            hung = list(pool.map(lambda _: client.get("/jobs/1"), range(slots)))
        assert [r.status_code for r in hung] == [504] * slots  # answered, though Slurm still has not
        assert "did not answer within 0.5 seconds" in hung[0].json()["detail"]
        assert time.monotonic() - started < 10
        # Each hung load waits in a thread of the pages' own, not in the API server's shared pool.
        until = time.monotonic() + 10
        while len(waiting) < slots and time.monotonic() < until:
            time.sleep(0.01)  # a busy machine may start a load's thread after its page has answered
        assert len(waiting) == slots and all(name.startswith("slurmapi-page") for name in waiting), waiting
        # With every slot taken, one more load is refused at once instead of queueing behind them.
        started = time.monotonic()
        refused = client.get("/jobs/1")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        assert time.monotonic() - started < 5
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while (reply := client.get("/jobs/1")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.05)  # the released loads are giving their slots back
    assert reply.status_code == 200


def test_a_page_asks_slurm_once_without_retries(page_client, slurmapi_emulator, monkeypatch):
    from airflow_provider_slurmapi.plugins import app as page_app

    monkeypatch.setattr(page_app, "_hook", page_client["real_hook"])
    slurmapi_emulator.inject_fault("unavailable", count=None, path_contains="/job/")
    calls = len(slurmapi_emulator.calls)
    started = time.monotonic()
    reply = page_client["client"]().get("/jobs/1")
    # The connection's own policy retries 4 times with backoff (about 15 s): a page does not.
    assert reply.status_code == 502 and "UNAVAILABLE" in reply.json()["detail"]
    assert time.monotonic() - started < 5
    assert [c.path for c in slurmapi_emulator.calls[calls:] if "/job/" in c.path] == ["/slurm/v0.0.42/job/1"]


def test_a_slow_slurm_gets_the_page_a_short_timeout(page_client, slurmapi_emulator, monkeypatch):
    from airflow_provider_slurmapi.plugins import app as page_app

    monkeypatch.setattr(page_app, "_hook", page_client["real_hook"])
    monkeypatch.setattr(page_app, "PAGE_CALL_TIMEOUT_SECONDS", 1.0)
    slurmapi_emulator.inject_fault("slow", count=1, path_contains="/job/", delay=4.0)
    started = time.monotonic()
    reply = page_client["client"]().get("/jobs/1")
    # The connection's timeout is 60 s per call; the page gives up after its own second.
    assert reply.status_code == 502 and "GET /slurm/v0.0.42/job/1" in reply.json()["detail"], reply.json()
    assert time.monotonic() - started < 3.5


def published_tails(published) -> tuple[str, str]:
    return published.stdout_tail, published.stderr_tail


def test_the_page_shows_what_the_job_published_escaped_and_the_comment_without_it():
    from airflow_provider_slurmapi.api import results
    from airflow_provider_slurmapi.plugins import render

    job = tagged(job_info("job_failed"), comment="mine")
    published = results.Published(
        "ok", '{"val_acc": 0.93}', "epoch 3 <done>", "loss is NaN", merged=False, job=job.display_id
    )
    record = (
        results.MARK
        + results.SEP
        + results.SEP.join(
            (job.display_id, published.result_status, "0", published.result_text, *published_tails(published))
        )
    )
    job = SlurmJob.from_job_info({**job.raw, "comment": f"{job.comment} {record}"})
    view = JobView.build(job, recorded=results.shown_record(job.summary(), "mine", redact=str))
    assert view.published == published and view.comment == "mine" and view.ref is not None
    html = render.render_job_page(
        view, conn_id="slurmapi_default", pages_root="/slurmapi", ui_root="/", list_url="/slurmapi/jobs"
    )
    assert '<pre id="published-stdout">epoch 3 &lt;done&gt;</pre>' in html
    assert '<pre id="published-stderr">loss is NaN</pre>' in html
    assert "val_acc" in html and "Comment: mine" in html
    plain = render.render_job_page(
        JobView.build(tagged(job_info("job_failed"))), conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs"
    )
    assert 'id="published-none">No output tail: the job did not publish one' in plain
    running = render.render_job_page(
        JobView.build(tagged(job_info("job_running"))), conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs"
    )
    assert 'id="published-none">No output tail yet: the job publishes' in running  # not a failure, while it runs


# -- what ended the job (issue #31 item 19) ---------------------------------------------------------


def test_a_cancelled_job_from_accounting_shows_the_batch_steps_signal_not_success():
    """Real accounting records a cancelled job as SUCCESS/0 and keeps the TERM on its batch step (24.11)."""
    from airflow_provider_slurmapi.plugins import render

    record = slurmdb("slurmdb_job_cancelled", comment={"job": TAG})
    assert record["exit_code"]["status"] == ["SUCCESS"]  # what the job level says, recorded
    view = JobView.build(SlurmJob.from_slurmdb(record))
    assert view.state == "CANCELLED" and view.exit_code == "signal 15 (TERM)"
    assert "The batch script was killed by signal 15 (TERM)." in view.warnings
    assert "The job was cancelled by ciuser." in view.warnings
    html = render.render_job_page(view, conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs")
    assert "<dt>Exit status</dt><dd>SIGNALED</dd>" in html and "<dd>SUCCESS" not in html


def test_a_failed_or_completed_accounting_record_keeps_its_own_exit_code():
    failed = SlurmJob.from_slurmdb(slurmdb("slurmdb_job_failed"))
    assert str(failed.exit_code) == "3"
    completed = SlurmJob.from_slurmdb(slurmdb("slurmdb_job"))
    assert str(completed.exit_code) == "0" and completed.exit_code.status == ("SUCCESS",)
    # a job Slurm ended whose record has no steps (a listing read with skip_steps) keeps the job level
    bare = SlurmJob.from_slurmdb(slurmdb("slurmdb_job_cancelled", steps=[]))
    assert str(bare.exit_code) == "0"


def test_a_running_job_shows_no_exit_status():
    from airflow_provider_slurmapi.plugins import render

    view = JobView.build(tagged(job_info("job_running")))
    assert view.exit_code == "—"
    html = render.render_job_page(view, conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs")
    assert "Exit status" not in html and "<dd>SUCCESS" not in html


# -- GPUs a running job holds (issue #31 item 23) ---------------------------------------------------


def test_a_started_job_shows_its_gpus_as_allocated_when_its_tres_leaves_them_out():
    """A cluster that does not account gres/gpu leaves GPUs out of tres_alloc_str: the page shows the
    queue's gres_detail, else what the job asked for (it cannot start with less)."""
    asked = job_info("job_running", tres_per_node="gres/gpu:4", node_count=2)
    view = JobView.build(tagged(asked))
    assert view.requested.gpus == 8 and view.allocated.gpus == 8
    detailed = JobView.build(tagged({**asked, "gres_detail": ["gpu:h100:4(IDX:0-3)", "gpu:h100:3(IDX:0-2)"]}))
    assert detailed.allocated.gpus == 7
    pending = JobView.build(tagged(job_info("job_pending", tres_per_node="gres/gpu:4")))
    assert pending.requested.gpus == 4 and pending.allocated.gpus is None  # nothing is allocated yet
    plain = JobView.build(tagged(job_info("job_running")))
    assert plain.allocated.gpus is None  # asked for none


def test_the_overview_gives_run_ids_a_readable_column():
    from airflow_provider_slurmapi.plugins import render

    html = render.render_job_list(
        [listed(tagged(job_info("job_completed")), parse_tag(TAG))],
        conn_id="c",
        pages_root="/s",
        ui_root="/",
        job_url=lambda job_id: f"/s/jobs/{job_id}",
        hidden=0,
        notes=[],
        days=3,
    )
    assert f'<td class="muted small run">{RUN_ID}</td>' in html
    assert "td.run { min-width:" in html


# -- what the task log masks stays masked on the page (issue #31 item 4) ----------------------------


def masking(secret: str):
    """Airflow's redact, as it behaves once ``secret`` is a masked value in the task's process."""
    return lambda text: text.replace(secret, "***")


def published_job(comment: str, out: str, result: str) -> SlurmJob:
    from airflow_provider_slurmapi.api import results

    job = tagged(job_info("job_completed"), comment=comment)
    fields = [job.display_id, "ok", "1", result, out, ""]
    return SlurmJob.from_job_info(
        {**job.raw, "comment": f"{job.comment} {results.MARK}{results.SEP}" + results.SEP.join(fields)}
    )


def test_the_page_shows_what_the_job_published_and_its_comment_only_as_the_tasks_log_masked_them():
    from airflow_provider_slurmapi.api import results
    from airflow_provider_slurmapi.plugins import render

    secret = "hunter2-token"
    job = published_job(f"key {secret}", f"token is {secret}", f'{{"token": "{secret}"}}')
    assert job.published is not None and secret in job.published.stdout_tail  # Slurm holds it in the clear
    shown = results.shown_record(job.summary(), f"key {secret}", masking(secret))
    assert secret not in json.dumps(shown)  # what the task records holds no secret either
    view = JobView.build(job, recorded=shown)
    html = render.render_job_page(view, conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs")
    assert secret not in html
    assert "token is ***" in html and "Comment: key ***" in html and "{&#34;token&#34;: &#34;***&#34;}" in html
    assert "(what the job published: see Output)" in view.raw_json


def test_the_page_hides_what_no_task_recorded_and_what_changed_since():
    from airflow_provider_slurmapi.api import results
    from airflow_provider_slurmapi.plugins import render

    secret = "hunter2-token"
    job = published_job(f"key {secret}", f"token is {secret}", "1")
    for record in (None, results.shown_record({}, "another comment", str)):
        view = JobView.build(job, recorded=record)  # a running job's task, or one that read other text
        html = render.render_job_page(view, conn_id="c", pages_root="/s", ui_root="/", list_url="/s/jobs")
        assert secret not in html and view.published is None and view.published_hidden and view.comment_hidden
        assert 'id="published-hidden"' in html and 'id="comment-hidden"' in html
    # A publication recorded for this job, then overwritten (e.g. by another job of the user): hidden.
    record = results.shown_record(published_job("c", "first text", "1").summary(), "c", str)
    assert JobView.build(published_job("c", "other text", "1"), recorded=record).published is None
    # Nothing to mask: the task recorded fingerprints only, and the page shows the job's own text.
    plain = published_job("note", "epoch 3", "1")
    record = results.shown_record(plain.summary(), "note", str)
    assert record["jobs"][plain.display_id].keys() == {"sha256"} and record["comment"].keys() == {"sha256"}
    view = JobView.build(plain, recorded=record)
    assert view.published == plain.published and view.comment == "note"


def test_the_raw_record_never_shows_the_batch_script_accounting_keeps():
    """With AccountingStoreFlags=job_script, /slurmdb returns the rendered script, secrets and all."""
    secret = "hunter2-token"
    record = slurmdb("slurmdb_job", comment={"job": TAG}, script=f"#!/bin/sh\nexport API_TOKEN={secret}\n")
    view = JobView.build(SlurmJob.from_slurmdb(record))
    assert secret not in view.raw_json and "the batch script, kept by accounting: not shown" in view.raw_json
