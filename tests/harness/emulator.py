"""Helpers for the emulator tests and the real-Slurm conformance suite: raw callSlurmRestApi calls over
google-auth, recordings, shape checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-24.11"
V = "v0.0.42"
CWD = "/home/ciuser"
PATH_ENV = "PATH=/usr/local/bin:/usr/bin:/bin"


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def recorded_index() -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    lines = (FIXTURES / "INDEX.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        values = line.split("\t")
        rows[values[0]] = dict(zip(header, values, strict=False))
    return rows


def shape_diff(actual: Any, expected: Any, where: str = "$") -> list[str]:
    """Where ``actual`` differs from ``expected`` in keys or value types (recursively); values may differ.

    A list is compared element by element against the first recorded element.
    """
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: {type(actual).__name__} instead of an object"]
        problems = [f"{where}: missing key {key!r}" for key in expected if key not in actual]
        problems += [f"{where}: extra key {key!r}" for key in actual if key not in expected]
        for key in expected.keys() & actual.keys():
            problems += shape_diff(actual[key], expected[key], f"{where}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{where}: {type(actual).__name__} instead of a list"]
        if not expected:
            return []
        problems = []
        for index, item in enumerate(actual):
            problems += shape_diff(item, expected[0], f"{where}[{index}]")
        return problems
    if type(actual) is not type(expected):
        return [f"{where}: {type(actual).__name__} instead of {type(expected).__name__}"]
    return []


def same_shape(actual: Any, expected: Any) -> bool:
    return not shape_diff(actual, expected)


def job_desc(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "t",
        "partition": "debug",
        "current_working_directory": CWD,
        "environment": [PATH_ENV],
        "minimum_nodes": 1,
        "tasks_per_node": 1,
    }
    job.update(overrides)
    return {key: value for key, value in job.items() if value is not None}


def credentials(emu: SlurmJobApiEmulator) -> Credentials:
    return service_account.Credentials.from_service_account_file(emu.key_path, scopes=SCOPES)


class Api:
    """callSlurmRestApi through google-auth's real service-account flow (never the project's client)."""

    def __init__(self, emu: SlurmJobApiEmulator, creds: Credentials | None = None, cluster: str | None = None):
        self.emu = emu
        self.session = AuthorizedSession(creds or credentials(emu))
        self.url = call_url(emu, cluster=cluster)

    def close(self) -> None:
        self.session.close()

    def post(self, envelope: Any, **kwargs: Any) -> requests.Response:
        return self.session.post(self.url, json=envelope, timeout=30, **kwargs)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        envelope: dict[str, Any] = {"method": f"HTTP_METHOD_{method}", "path": path}
        if body is not None:
            envelope["body"] = body
        response = self.post(envelope)
        assert response.status_code == 200, response.text
        reply = response.json()
        assert set(reply) == {"status", "structuredBody"}, reply
        return reply["status"], reply["structuredBody"]

    def submit(self, script: str = "#!/bin/bash\ntrue\n", **job: Any) -> int:
        status, body = self.call("POST", f"/slurm/{V}/job/submit", {"job": job_desc(**job), "script": script})
        assert status == 200, body
        return int(body["job_id"])

    def job(self, job_id: int | str) -> tuple[int, dict[str, Any]]:
        return self.call("GET", f"/slurm/{V}/job/{job_id}")

    def state(self, job_id: int) -> list[str]:
        status, body = self.job(job_id)
        assert status == 200, body
        return list(body["jobs"][0]["job_state"])

    def cancel(self, job_id: int | str) -> tuple[int, dict[str, Any]]:
        return self.call("DELETE", f"/slurm/{V}/job/{job_id}")

    def db_job(self, job_id: int | str) -> tuple[int, dict[str, Any]]:
        return self.call("GET", f"/slurmdb/{V}/job/{job_id}")


def call_url(
    emu: SlurmJobApiEmulator, project: str | None = None, region: str | None = None, cluster: str | None = None
) -> str:
    return (
        f"{emu.endpoint}/v1beta1/projects/{project or emu.project}/locations/{region or emu.region}"
        f"/modelDevelopmentClusters/{cluster or emu.cluster}:callSlurmRestApi"
    )


def bearer(emu: SlurmJobApiEmulator) -> dict[str, str]:
    """An Authorization header from a freshly refreshed service-account credential."""
    import google.auth.transport.requests

    creds = credentials(emu)
    creds.refresh(google.auth.transport.requests.Request())
    return {"Authorization": f"Bearer {creds.token}"}


def eventually(check: Any, timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Call ``check()`` until it returns something truthy (for conditions seen only through the API)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout}s (last {value!r})")
        time.sleep(interval)


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, session)`` of a live process, from /proc; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[3])


def processes_in_sessions(sessions: set[int]) -> list[int]:
    """Live processes (zombies included) whose session is one of ``sessions``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat[2] in sessions:
                found.append(int(entry.name))
    return found
