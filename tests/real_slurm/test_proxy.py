"""The emulator in proxy mode: Google's layer emulated, Slurm's real (slurmrestd 24.11 behind it).

The provider talks to the emulator exactly as to Google (service-account token flow, callSlurmRestApi
envelope) and every Slurm call is answered by the real cluster of the `real_slurm` fixture.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from airflow_provider_slurmapi.api.errors import SlurmRequestRejectedError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.emulator.app import ProxyModeError
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.fixtures import load_module

pytestmark = pytest.mark.real_slurm
ROOT = Path(__file__).resolve().parents[2]
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


@pytest.fixture(scope="module")
def proxy(real_slurm, tmp_path_factory) -> Iterator[SlurmJobApiEmulator]:
    emu = SlurmJobApiEmulator(
        upstream=real_slurm.rest_url,
        upstream_user=real_slurm.user,
        upstream_token=real_slurm.jwt,
        state_dir=tmp_path_factory.mktemp("proxy-emulator"),
    )
    with emu:
        yield emu


@pytest.fixture
def hook(proxy, monkeypatch) -> SlurmJobApiHook:
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", proxy.connection_json())
    return SlurmJobApiHook()


def job(real_slurm, **fields):
    return {"current_working_directory": real_slurm.home, "partition": real_slurm.partition, **fields}


def envelope_call(emu: Any, envelope: dict, cluster: str | None = None):
    creds = service_account.Credentials.from_service_account_file(emu.key_path, scopes=SCOPES)
    url = (
        f"{emu.endpoint}/v1beta1/projects/{emu.project}/locations/{emu.region}"
        f"/modelDevelopmentClusters/{cluster or emu.cluster}:callSlurmRestApi"
    )
    with AuthorizedSession(creds) as session:
        return session.post(url, json=envelope, timeout=30)


def test_submit_completes_with_output_written(real_slurm, proxy, hook):
    job_id = hook.submit_job("#!/bin/bash\necho through the proxy $SLURM_JOB_ID\n", job(real_slurm, name="proxy-ok"))
    done = hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    assert done.state.is_success and done.exit_code.return_code == 0
    assert done.name == "proxy-ok" and done.user == real_slurm.user
    assert real_slurm.host_path(done.standard_output).read_text().strip() == f"through the proxy {job_id}"
    submits = [call for call in proxy.calls if call.method == "POST" and call.path.endswith("/job/submit")]
    assert submits and submits[-1].status == 200


def test_exit_3_is_failed_with_its_code(real_slurm, hook):
    job_id = hook.submit_job("#!/bin/bash\nexit 3\n", job(real_slurm))
    done = hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    assert done.state.base == "FAILED" and done.exit_code.return_code == 3


def test_cancel_running(real_slurm, hook):
    job_id = hook.submit_job("#!/bin/bash\nsleep 300\n", job(real_slurm))
    real_slurm.poll(
        "GET",
        f"/slurm/v0.0.42/job/{job_id}",
        lambda status, body: status == 200 and "RUNNING" in body["jobs"][0]["job_state"],
        timeout=60,
        what="the job to start",
    )
    assert not hook.cancel_job(job_id).already_finished
    done = hook.wait_for_job(job_id, poll_interval=0.2, timeout=120)
    assert done.state.base == "CANCELLED" and done.state.is_terminal


def test_bad_partition_is_a_clear_error(real_slurm, hook):
    with pytest.raises(SlurmRequestRejectedError, match="Invalid partition name specified"):
        hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm, partition="nosuch"))


def test_unknown_field_warning_is_surfaced(real_slurm, hook, capfd):
    submitted = hook.submit(JobSpec.build("#!/bin/bash\ntrue\n", job(real_slurm, no_such_field=1)))
    assert "no_such_field" in str(submitted.warnings[0])
    assert "Slurm warning on submit" in capfd.readouterr().out


def test_google_layer_stays_the_emulators(real_slurm, proxy, hook):
    ping = {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/ping/"}
    reply = envelope_call(proxy, ping)
    assert reply.status_code == 200 and reply.json()["status"] == 200
    assert reply.json()["structuredBody"]["pings"][0]["responding"] is True
    assert envelope_call(proxy, ping, cluster="other").json()["error"]["status"] == "NOT_FOUND"
    # slurmrestd's plain-text replies: an unknown path, an unparsable query
    for path in ("/slurm/v0.0.42/no/such/path", "/slurm/v0.0.42/jobs/state/?job_id=1,2", "/openapi/v3"):
        reply = envelope_call(proxy, {"method": "HTTP_METHOD_GET", "path": path})
        assert reply.status_code == 400 and reply.json()["error"]["status"] == "INVALID_ARGUMENT", path
    big = {"method": "HTTP_METHOD_POST", "path": "/slurm/v0.0.42/job/submit", "body": {"script": "x" * 1_100_000}}
    assert envelope_call(proxy, big).json()["error"]["status"] == "INVALID_ARGUMENT"
    # a Google fault on the first poll: the wait rides it out against the real job
    job_id = hook.submit_job("#!/bin/bash\ntrue\n", job(real_slurm))
    proxy.inject_fault("unavailable", count=1, path_contains=f"/job/{job_id}")
    assert hook.wait_for_job(job_id, poll_interval=0.5, timeout=120).state.is_success
    assert any(call.status == 503 and call.path.endswith(f"/job/{job_id}") for call in proxy.calls)
    with pytest.raises(ProxyModeError, match="proxy mode"):
        proxy.job(job_id)
    with pytest.raises(ProxyModeError):
        proxy.read_output(job_id)


def test_unreachable_upstream_is_unavailable(tmp_path):
    with SlurmJobApiEmulator(
        upstream="http://127.0.0.1:9", upstream_user="nobody", upstream_token="t", state_dir=tmp_path
    ) as emu:
        reply = envelope_call(emu, {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/ping/"})
    assert reply.status_code == 503 and reply.json()["error"]["status"] == "UNAVAILABLE"


@pytest.mark.usefixtures("airflow_db")
def test_example_dag_end_to_end_through_the_proxy(real_slurm, proxy, monkeypatch):
    workdir = f"{real_slurm.home}/slurm-demo-{uuid.uuid4().hex[:8]}"
    host_dir = real_slurm.host_path(workdir)
    host_dir.mkdir()
    home = real_slurm.host_path(real_slurm.home).stat()
    os.chown(host_dir, home.st_uid, home.st_gid)  # the job user's, as on a real cluster
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", proxy.connection_json())
    monkeypatch.setenv("SLURMAPI_EXAMPLE_WORKDIR", workdir)
    monkeypatch.setenv("SLURMAPI_EXAMPLE_PARTITION", real_slurm.partition)
    monkeypatch.setenv("SLURMAPI_EXAMPLE_GPUS", "0")  # the test cluster has no GPUs
    module = load_module(ROOT / "example_dags" / "example_slurm_training.py")
    train_task = module.dag.get_task("train")
    assert train_task.deferrable and train_task.partition == real_slurm.partition

    before = len(proxy.calls)
    dag_run = module.dag.test()

    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    states = {task_id: str(ti.state).rsplit(".", 1)[-1].lower() for task_id, ti in tis.items()}
    tasks = ["prepare_data", "train", "evaluate", "evaluation_done", "check_accuracy", "publish"]
    assert states == dict.fromkeys(tasks, "success")
    summary = tis["train"].xcom_pull(task_ids="train", key="slurm_job")
    assert summary["state"] == "COMPLETED"
    train_id = tis["train"].xcom_pull(task_ids="train")
    result = tis["train"].xcom_pull(task_ids="train", key="slurm_result")  # what the job published, via the proxy
    assert result["checkpoint"] == f"checkpoints/model-{train_id}.ckpt" and result["val_acc"] > 0.9
    # the file itself (the summary's path can come from accounting: see test_relative_output_from_accounting)
    assert "checkpoint written" in (host_dir / f"train-{train_id}.out").read_text()
    assert (host_dir / "checkpoints" / f"model-{train_id}.ckpt").is_file()
    assert (host_dir / "published" / "model-latest.ckpt").read_text() == (
        host_dir / "checkpoints" / f"model-{train_id}.ckpt"
    ).read_text()
    # every Slurm call went through the proxy to the real cluster, and the train task deferred
    paths = [call.path for call in proxy.calls[before:]]
    assert sum(path.endswith("/job/submit") for path in paths) == 4
    assert any("/jobs/state/" in path for path in paths)


def test_relative_output_from_accounting(real_slurm, hook):
    """slurmdbd 24.11.5 reports a relative pattern's path without the "/" after the working directory."""
    job_id = hook.submit_job("#!/bin/bash\necho rel\n", job(real_slurm, standard_output="rel-%j.out"))
    hook.wait_for_job(job_id, poll_interval=0.5, timeout=120)
    expected = f"{real_slurm.home}/rel-{job_id}.out"
    assert real_slurm.host_path(expected).read_text().strip() == "rel"
    status, body = hook.call_slurm("GET", f"/slurmdb/v0.0.42/job/{job_id}")
    assert status == 200
    assert SlurmJob.from_slurmdb(body["jobs"][0]).standard_output == expected


def test_cli_upstream_takes_the_token_from_the_environment(real_slurm, tmp_path):
    import json
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT), SLURM_JWT=real_slurm.jwt)
    args = ["--state-dir", str(tmp_path), "--upstream", real_slurm.rest_url, "--upstream-user", real_slurm.user]
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_slurmapi.emulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].startswith("connection: "):
            line = proc.stdout.readline()
            assert line, f"the CLI ended early: {lines}"
            lines.append(line.strip())
        assert f"proxy mode: Slurm calls go to {real_slurm.rest_url} as {real_slurm.user}" in lines
        assert real_slurm.jwt not in "\n".join(lines)
        extra = json.loads(lines[-1].removeprefix("connection: "))["extra"]
        cli = SimpleNamespace(  # what envelope_call needs, as the CLI printed it
            endpoint=extra["endpoint"],
            key_path=extra["key_path"],
            project=extra["project_id"],
            region=extra["region"],
            cluster=extra["cluster_id"],
        )
        reply = envelope_call(cli, {"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/ping/"})
        assert reply.status_code == 200 and reply.json()["structuredBody"]["meta"]["slurm"]["cluster"] == "ci"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    missing = subprocess.run(
        [sys.executable, "-m", "airflow_provider_slurmapi.emulator", "--upstream", real_slurm.rest_url],
        env={k: v for k, v in env.items() if k not in ("SLURM_JWT", "SLURM_USER")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "--upstream needs" in missing.stderr
