"""Full output and large results through Cloud Storage (``staging_uri``), on the emulator and real Slurm.

The job's wrapper uploads its output as it runs and its result at its end, with a token from the node's
metadata server (the emulator's stand-in) to Cloud Storage (fake-gcs-server, a real third-party server, behind
a proxy that can answer 503); Airflow reads them back with google-cloud-storage and the connection's
credentials. Same test code on both backends (``backends.py``), waiting in the worker and deferred.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import pytest
from backends import Backend

from airflow_provider_slurmapi.api import storage as staged
from airflow_provider_slurmapi.api.staging import (
    INLINE_LIMIT,
    StagedReport,
    StagingLocation,
    parse_announcement,
    parse_chunk,
    parse_inline,
)
from tests.fixtures import dag_file
from tests.harness.storage import STAGING_BUCKET, FakeGcs

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]
MODES = ["sync", "deferred"]
DAGS_MODULE = dag_file("slurm_staging_dags")
DAGS = DAGS_MODULE.DAGS


def run(
    backend: Backend, fake_gcs: FakeGcs, monkeypatch, capfd, dag_id: str, prefix: str, job_storage: str = ""
) -> tuple[Any, str]:
    backend.connect(monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)  # where Airflow's google-cloud-storage reads
    capfd.readouterr()
    conf = {
        "cwd": backend.cwd,
        "staging": f"gs://{STAGING_BUCKET}/{prefix}",
        "metadata": backend.emu.metadata_host,
        "storage": job_storage or fake_gcs.url,
    }
    dag_run = DAGS[dag_id].test(run_conf=conf)
    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "train"]
    out, err = capfd.readouterr()
    return ti, out + err


def state(ti) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


def staged_stream(fake_gcs: FakeGcs, job_prefix: str, stream: str) -> bytes:
    """A stream as staged: its chunks in order, each starting where the one before ended."""
    names = sorted(n for n in fake_gcs.objects(STAGING_BUCKET, job_prefix + "/") if n.count("/") >= 1)
    data = b""
    for name in names:
        parsed = parse_chunk(name[len(job_prefix) + 1 :])
        if parsed is None or parsed[0] != stream:
            continue
        assert parsed[1] == len(data), f"{name}: a gap or an overlap in the staged {stream}"
        data += fake_gcs.read(STAGING_BUCKET, name)
    return data


@pytest.mark.parametrize("mode", MODES)
def test_the_whole_output_and_a_200_kb_result_come_through_staging(backend, fake_gcs, monkeypatch, capfd, mode):
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_large_{mode}", f"large-{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    result = ti.xcom_pull(task_ids="train", key="slurm_result")
    assert len(result["metrics"]) == DAGS_MODULE.RESULT_ITEMS and result["metrics"][1] == {"step": 1, "loss": 0.5}
    assert len(json.dumps(result)) > 200_000

    uri = ti.xcom_pull(task_ids="train", key="slurm_output_uri")
    assert uri.startswith(f"gs://{STAGING_BUCKET}/large-{mode}/") and uri.endswith(f"/{job_id}/run-0")
    job_prefix = uri.removeprefix(f"gs://{STAGING_BUCKET}/")
    stdout = staged_stream(fake_gcs, job_prefix, "stdout").decode()
    lines = stdout.splitlines()
    assert len(lines) == DAGS_MODULE.LINES and lines[-1].startswith(f"line {DAGS_MODULE.LINES:06d} ")
    assert staged_stream(fake_gcs, job_prefix, "stderr") == b"warning: stderr line\n"
    # the job announced each chunk it stored (what lets one listing per tick serve every follower)
    root = StagingLocation(STAGING_BUCKET, f"large-{mode}")
    announced = {
        parsed[1]
        for name in fake_gcs.objects(STAGING_BUCKET, f"large-{mode}/.changes/")
        if (parsed := parse_announcement(root, name)) is not None
    }
    chunk_objects = {
        n for n in fake_gcs.objects(STAGING_BUCKET, job_prefix + "/") if parse_chunk(n[len(job_prefix) + 1 :])
    }
    assert chunk_objects and announced == chunk_objects
    # a chunk small enough travels in its announcement too (what spares a triggerer reading it), exactly
    carried = {
        parsed[1]: parse_inline(metadata)
        for name, metadata in fake_gcs.metadata(STAGING_BUCKET, f"large-{mode}/.changes/").items()
        if (parsed := parse_announcement(root, name)) is not None
    }
    small = {n for n, size in fake_gcs.objects(STAGING_BUCKET, job_prefix + "/").items() if size <= INLINE_LIMIT}
    assert small & chunk_objects, "no small chunk: the stderr line should be one"
    for name in chunk_objects:
        assert carried[name] == (fake_gcs.read(STAGING_BUCKET, name) if name in small else None), name
    # the task log ends with the last output_tail_lines lines, far past a Slurm comment's 1 KB
    tail = "\n".join(lines[-DAGS_MODULE.TAIL : -1])
    assert f"Slurm job {job_id} stdout, last {DAGS_MODULE.TAIL} lines:\n{tail}\n{lines[-1]}" in log.replace(
        f"{lines[-1]} [",
        f"{lines[-1]}\n[",  # Airflow 3's console log puts the logger's name after the text
    ), log[-2000:]
    # every line reached the log as the job printed it, once
    streamed = re.findall(rf"\[{job_id} stdout\] (line \d+) ", log)
    assert len(set(streamed)) == DAGS_MODULE.LINES, len(set(streamed))


@pytest.mark.parametrize("mode", MODES)
def test_10000_lines_over_a_minute_reach_the_log_as_they_come_and_5_mb_are_staged(
    backend, fake_gcs, monkeypatch, capfd, mode
):
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_stream_{mode}", f"stream-{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    job_prefix = ti.xcom_pull(task_ids="train", key="slurm_output_uri").removeprefix(f"gs://{STAGING_BUCKET}/")
    stdout = staged_stream(fake_gcs, job_prefix, "stdout")
    assert len(stdout) > 5_000_000
    assert [line[:10] for line in stdout.decode().splitlines()] == [
        f"line {i:05d}" for i in range(1, DAGS_MODULE.STREAM_LINES + 1)
    ]
    ended = datetime.fromisoformat(ti.xcom_pull(task_ids="train", key="slurm_job")["end_time"])
    streamed: dict[str, set[datetime]] = {}
    for at, line in timed_lines(log):
        found = re.search(rf"\[{job_id} stdout\] (line \d{{5}}) ", line)
        if found and at:
            streamed.setdefault(found.group(1), set()).add(at)
    # every line reached the task log once (2.11's dag.test() prints a record twice, at one time) ...
    assert len(streamed) == DAGS_MODULE.STREAM_LINES and all(len(times) == 1 for times in streamed.values())
    # ... the first ones long before the job ended
    first = min(min(times) for times in streamed.values())
    assert (ended - first).total_seconds() > 30, (first, ended)
    if mode == "deferred":
        # The trigger was told of each chunk by the announcements: while the job ran, it never listed the
        # task instance's objects itself (the worker's wait lists them every poll).
        job = ti.xcom_pull(task_ids="train", key="slurm_job")
        started, ended_at = (datetime.fromisoformat(job[key]).timestamp() for key in ("start_time", "end_time"))
        own = "prefix=" + quote(job_prefix.rsplit("/try-", 1)[0] + "/", safe="")
        listed = [at for method, path, at in fake_gcs.requests_timed() if method == "GET" and own in path]
        assert not [at for at in listed if started <= at < ended_at], (started, ended_at, listed)


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_jobs_error_quotes_its_staged_stderr(backend, fake_gcs, monkeypatch, capfd, mode):
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_failure_{mode}", f"failure-{mode}")
    assert state(ti) == "failed", log[-3000:]
    assert "Last lines of its stderr:" in log and "last-words-of-the-job" in log
    assert f"stderr line {DAGS_MODULE.LINES - 1}" in log


def timed_lines(log: str) -> list[tuple[datetime | None, str]]:
    """Each line of ``log`` with the time of the record it is in: a record of several lines (the job's lines
    that one poll found) has its time on its first line only, and its other lines start with the job's
    ``[42 stdout] ``; any other line without a time has none (pytest's own copy of the log, for one)."""
    timed: list[tuple[datetime | None, str]] = []
    last = None
    for line in log.splitlines():
        last = last if staged.LOGGED_LINE.match(line) else log_time(line)
        timed.append((last, line))
    return timed


def log_time(line: str) -> datetime | None:
    """When a log line was written (UTC, the machine's zone): Airflow 3's ``2026-12-06T23:47:23.711861Z
    [info ...`` or 2.11's ``[2026-12-07 00:00:20,379] {...}``; None for a line without a time."""
    found = re.search(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:[.,](\d+))?", line)
    if found is None:
        return None
    stamp = datetime.fromisoformat(f"{found.group(1)}T{found.group(2)}")
    return stamp.replace(microsecond=int((found.group(3) or "0").ljust(6, "0")[:6]), tzinfo=timezone.utc)


@pytest.mark.parametrize("mode", MODES)
def test_a_running_jobs_output_reaches_the_task_log_before_it_ends(backend, fake_gcs, monkeypatch, capfd, mode):
    """Each poll prints the lines the job staged since the last one: the worker's wait, or the trigger."""
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_live_{mode}", f"live-{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    ended = datetime.fromisoformat(ti.xcom_pull(task_ids="train", key="slurm_job")["end_time"])
    # (Airflow 2.11's dag.test() prints each log record twice, with the same time)
    timed = timed_lines(log)
    streamed = {at for at, line in timed if at and f"[{job_id} stdout] {DAGS_MODULE.LIVE_MARKER}" in line}
    done = {at for at, line in timed if at and f"[{job_id} stdout] done" in line}
    assert len(streamed) == 1 and len(done) == 1, log[-3000:]  # each line once
    assert "how far the job's output was logged" not in log, log[-3000:]  # its position kept without a fault
    # the job sleeps 8 s after the line: it was in the log seconds before the job ended
    assert (ended - streamed.pop()).total_seconds() > 3, ended
    if mode == "deferred":
        # The trigger took the lines from the announcements: it read no chunk while the job ran, unless it
        # began after the job had staged its first line (then it lists the task instance's prefix once and
        # reads what it finds there).
        job = ti.xcom_pull(task_ids="train", key="slurm_job")
        started, ended_at = (datetime.fromisoformat(job[key]).timestamp() for key in ("start_time", "end_time"))
        instance = ti.xcom_pull(task_ids="train", key="slurm_output_uri").removeprefix(f"gs://{STAGING_BUCKET}/")
        own = quote(instance.rsplit("/try-", 1)[0] + "/", safe="")
        during = [(m, p) for m, p, at in fake_gcs.requests_timed() if own in p and started <= at < ended_at]
        read = [p for m, p in during if m == "GET" and "alt=media" in p]
        listed = [p for m, p in during if m == "GET" and "prefix=" in p]
        assert not read or listed, during


def test_task_slurm_takes_a_2_mb_argument_and_returns_1_mb_through_staging(backend, fake_gcs, monkeypatch, capfd):
    backend.connect(monkeypatch)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    capfd.readouterr()
    conf = {
        "cwd": backend.cwd,
        "staging": f"gs://{STAGING_BUCKET}/taskflow",
        "metadata": backend.emu.metadata_host,
        "storage": fake_gcs.url,
    }
    dag_run = DAGS["staging_taskflow"].test(run_conf=conf)
    out, err = capfd.readouterr()
    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "embed"]
    assert state(ti) == "success", (out + err)[-3000:]
    value = ti.xcom_pull(task_ids="embed")
    size = DAGS_MODULE.ARGUMENT_BYTES
    assert value["read"] == size and value["sha256"] == hashlib.sha256(b"x" * size).hexdigest()
    assert len(value["blob"]) == DAGS_MODULE.RETURN_BYTES
    assert "go to the job as gs://" in out + err
    assert [n for n in fake_gcs.objects(STAGING_BUCKET, "taskflow/") if "/call-" in n]  # staged, not inline


def test_storage_refusing_every_request_during_the_run_loses_nothing_the_comment_holds(
    backend, fake_gcs, monkeypatch, capfd
):
    """The job completes and the task succeeds with the result its comment carries; the log says what the
    storage lost and why. (The job reaches the storage through a second proxy that answers 503 to all.)"""
    with FakeGcs() as refusing:
        refusing.fail_next(10**6)
        ti, log = run(backend, fake_gcs, monkeypatch, capfd, "staging_small_sync", "refused", refusing.url)
    assert state(ti) == "success", log[-3000:]
    assert ti.xcom_pull(task_ids="train", key="slurm_result") == {"ok": 1}
    assert "could not stage the last 6 of the 6 bytes of its stdout, its result in gs://" in log, log[-3000:]
    assert "HTTP 503" in log and "its result was not staged; the copy in its Slurm comment is used" in log
    assert fake_gcs.objects(STAGING_BUCKET, "refused/") == {}


def test_a_staged_result_altered_after_the_job_wrote_it_is_refused(fake_gcs, monkeypatch):
    """What the reader checks: the size and SHA-256 the job published, against the object as it is now."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    from google.auth.credentials import AnonymousCredentials

    client = staged.storage_client(AnonymousCredentials(), "demo-project")
    location = StagingLocation.parse(f"gs://{STAGING_BUCKET}/altered").for_task("d", "t", "r", -1, 1).for_job("7")
    name = location.object_name("result.json")
    data = b'{"val_acc": 0.93}'
    report = StagedReport(result=(len(data), hashlib.sha256(data).hexdigest()))
    fake_gcs.write(STAGING_BUCKET, name, data)
    assert staged.read_result(client, location, report, 1000) == data

    fake_gcs.write(STAGING_BUCKET, name, b'{"val_acc": 0.99}')  # same size, other bytes
    with pytest.raises(staged.StagedReadError, match="altered after the job wrote it"):
        staged.read_result(client, location, report, 1000)
    fake_gcs.write(STAGING_BUCKET, name, b'{"val_acc": 0.999, "ckpt": "gs://mallory/x"}')
    with pytest.raises(staged.StagedReadError, match="replaced after the job wrote it"):
        staged.read_result(client, location, report, 1000)
    with pytest.raises(staged.StagedReadError, match=f"more than max_result_bytes=10.*{name}|{name}.*max_result"):
        staged.read_result(client, location, report, 10)


def test_a_staged_input_that_is_not_what_the_task_wrote_stops_the_job_before_its_script(backend, fake_gcs, monkeypatch):
    """The wrapper fetches a staged input (``@task.slurm``'s arguments) and checks its size and SHA-256: an
    object altered after the task wrote it fails the job, saying so, and the script never runs."""
    from airflow_provider_slurmapi.api import results
    from airflow_provider_slurmapi.api.staging import StagedInput

    hook = backend.connect(monkeypatch)
    location = StagingLocation.parse(f"gs://{STAGING_BUCKET}/inputs").for_task("d", "t", "r", -1, 1)
    wrote = b'{"args": [1], "kwargs": {}}'
    fake_gcs.write(STAGING_BUCKET, location.object_name("call-1.json"), b'{"args": [2], "kwargs": {}}')
    good = StagedInput("call-1.json", len(wrote), hashlib.sha256(wrote).hexdigest(), "SLURMAPI_CALL_FILE")
    script = results.wrap_script(
        "#!/bin/sh\necho the-script-ran\n", "airflow-ti:d/t/r/-1 try:1", staging=location, inputs=[good]
    )
    env = {"GCE_METADATA_HOST": backend.emu.metadata_host, "STORAGE_EMULATOR_HOST": fake_gcs.url}
    spec = backend.spec(script, environment=[f"{k}={v}" for k, v in env.items()] + ["PATH=/usr/bin:/bin"])
    job = backend.wait_for_end(hook, hook.submit(spec).job_id)
    assert job.state.base == "FAILED", job.state
    output = backend.host_path(job.standard_output).read_text()
    assert "the-script-ran" not in output
    assert f"slurmapi: cannot read {location.object_uri('call-1.json')}: it is not the object the task wrote" in output


@pytest.mark.parametrize("mode", MODES)
def test_an_arrays_tasks_each_stage_their_output_and_a_result_too_large_for_a_comment(
    backend, fake_gcs, monkeypatch, capfd, mode
):
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_array_{mode}", f"array-{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    pad = "0" * DAGS_MODULE.ARRAY_PAD
    assert ti.xcom_pull(task_ids="train", key="slurm_result") == {
        f"{job_id}_{n}": {"task": n, "pad": pad} for n in range(3)
    }
    uris = ti.xcom_pull(task_ids="train", key="slurm_output_uri")
    assert sorted(uris) == [f"{job_id}_{n}" for n in range(3)], uris
    for n in range(3):
        job_prefix = uris[f"{job_id}_{n}"].removeprefix(f"gs://{STAGING_BUCKET}/")
        assert f"/try-1/{job_id}_{n}/run-" in f"/{job_prefix}", job_prefix
        lines = [f"array task {n} line {i}" for i in (1, 2, 3)]
        assert staged_stream(fake_gcs, job_prefix, "stdout").decode().splitlines() == lines
        assert all(line in log for line in lines), log[-3000:]


@pytest.mark.parametrize("mode", MODES)
def test_a_later_try_reattaches_to_a_staged_job_and_reads_it_below_the_first_tries_prefix(
    backend, fake_gcs, monkeypatch, capfd, mode
):
    """The first try dies once its job is submitted; the second finds the job (task_state_store on 3.3,
    Slurm's records before), follows its output and reads its result where the job staged them: below the
    prefix of the try that submitted it, not its own."""
    ti, log = run(backend, fake_gcs, monkeypatch, capfd, f"staging_reattach_{mode}", f"reattach-{mode}")
    assert state(ti) == "success" and ti.try_number == 2, log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    assert f"Reattached to Slurm job {job_id} " in log, log[-3000:]
    names = fake_gcs.objects(STAGING_BUCKET, f"reattach-{mode}/")
    assert {name.split("/try-")[1].split("/")[1] for name in names} == {str(job_id)}, sorted(names)  # one job
    assert all("/try-1/" in name for name in names), sorted(names)
    uri = ti.xcom_pull(task_ids="train", key="slurm_output_uri")
    assert f"/try-1/{job_id}/run-" in uri, uri
    assert ti.xcom_pull(task_ids="train", key="slurm_result") == {"pad": "0" * DAGS_MODULE.ARRAY_PAD}
    # the second try followed the running job: what it printed after the loss reached the log as it came
    assert re.search(rf"\[{job_id} stdout\] after-the-loss", log), log[-3000:]
