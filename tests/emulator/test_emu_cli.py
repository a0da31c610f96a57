"""The command line: ``python -m airflow_provider_slurmapi.emulator`` serves (here as Slurm 26.05, in the ``body``
reply shape), prints, and stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.harness.emulator import V, processes_in_sessions

ROOT = Path(__file__).resolve().parents[2]


def test_cli_prints_the_connection_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_provider_slurmapi.emulator",
            "--state-dir",
            str(tmp_path),
            "--partition",
            "batch=2",
            "--cluster",
            "cli-cluster",
            "--min-job-age",
            "5",
            "--reply-shape",
            "body",
            "--slurm-release",
            "26.05",
            "--storage-emulator-host",
            "http://127.0.0.1:4443",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(6)]
        assert lines[0].startswith("Slurm Job API emulator listening on http://127.0.0.1:")
        assert lines[2].strip() == f"key file: {tmp_path / 'service-account-key.json'}"
        connection = json.loads(lines[3].split("connection: ", 1)[1])
        assert connection["conn_type"] == "slurmapi"
        extra = connection["extra"]
        assert extra["cluster_id"] == "cli-cluster" and extra["key_path"] == str(tmp_path / "service-account-key.json")
        assert lines[4].startswith("export AIRFLOW_CONN_SLURMAPI_DEFAULT='")
        assert json.loads(lines[4].strip()[len("export AIRFLOW_CONN_SLURMAPI_DEFAULT='") : -1]) == connection
        port = lines[0].strip().rsplit(":", 1)[1]
        assert lines[5].strip() == (
            f"jobs see GCE_METADATA_HOST=127.0.0.1:{port} STORAGE_EMULATOR_HOST=http://127.0.0.1:4443"
        )
        from google.auth.transport.requests import AuthorizedSession
        from google.oauth2 import service_account

        creds = service_account.Credentials.from_service_account_file(
            extra["key_path"], scopes=["https://www.googleapis.com/auth/cloud-platform"]
        )
        url = (
            f"{extra['endpoint']}/v1beta1/projects/{extra['project_id']}/locations/{extra['region']}"
            f"/modelDevelopmentClusters/{extra['cluster_id']}:callSlurmRestApi"
        )
        with AuthorizedSession(creds) as session:
            body = {
                "job": {"name": "cli", "current_working_directory": "/w", "environment": ["A=1"]},
                "script": "#!/bin/bash\nsleep 60\n",
            }
            reply = session.post(
                url, json={"method": "HTTP_METHOD_POST", "path": f"/slurm/{V}/job/submit", "body": body}
            ).json()
            # --reply-shape body: Slurm's answer is a JSON string under "body", not a "structuredBody" object
            assert reply["status"] == 200 and "structuredBody" not in reply
            job_id = json.loads(reply["body"])["job_id"]
            job = session.post(url, json={"method": "HTTP_METHOD_GET", "path": f"/slurm/{V}/job/{job_id}"}).json()
            answer = json.loads(job["body"])
            assert answer["jobs"][0]["partition"] == "batch"
            assert answer["meta"]["slurm"]["release"] == "26.05.5"  # --slurm-release 26.05
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "emulator stopped" in out
    assert f"POST /slurm/{V}/job/submit -> 200" in err, "each call is logged on one line"
    assert processes_in_sessions({proc.pid}) == []
    try:
        requests.get(extra["endpoint"], timeout=2)
    except requests.ConnectionError:
        pass
    else:
        raise AssertionError("the emulator still answers after SIGTERM")


def test_sigusr1_releases_the_held_simulated_runs(tmp_path: Path) -> None:
    """``--simulate``: a ``#EMULATOR hold=1`` job stays RUNNING until the process gets SIGUSR1."""
    from airflow_provider_slurmapi.api.client import SlurmJobApiClient
    from airflow_provider_slurmapi.api.connection import settings_from_extra

    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_slurmapi.emulator", "--simulate", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(6)]
        connection = json.loads(lines[3].split("connection: ", 1)[1])
        settings = settings_from_extra(connection["extra"])
        with SlurmJobApiClient(settings.cluster, **settings.client_kwargs()) as client:

            def submit(name: str, script: str) -> int:
                job = {"name": name, "current_working_directory": "/w", "environment": ["A=1"]}
                status, body = client.call_slurm("POST", f"/slurm/{V}/job/submit", {"job": job, "script": script})
                assert status == 200, body
                return int(body["job_id"])

            def ended(job_id: int) -> str:
                deadline = time.monotonic() + 30
                while (state := client.get_job(job_id).state).base in ("PENDING", "RUNNING"):
                    assert time.monotonic() < deadline, f"job {job_id} still {state.base}"
                    time.sleep(0.05)
                return state.base

            held = submit("held", "#!/bin/bash\n#EMULATOR runtime=0 hold=1\n")
            other = submit("other", "#!/bin/bash\n#EMULATOR runtime=0\n")
            assert ended(other) == "COMPLETED"
            assert client.get_job(held).state.base == "RUNNING"  # submitted first, still held
            proc.send_signal(signal.SIGUSR1)
            assert proc.stdout.readline().strip() == "released 1 held simulated runs"
            assert ended(held) == "COMPLETED"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    assert proc.returncode == 0
