"""Conformance with Slurm 26.05: the emulator (``slurm_release="26.05"``) against real slurmrestd 26.05.5 at v0.0.45.

The recording session of tests/fixtures/slurm-26.05 (tests/real_slurm/record_fixtures.py) is replayed on
the emulator through callSlurmRestApi; each reply must have the recorded HTTP status, structure (keys and
value types, recursively) and facts (job states, error numbers). The same session at v0.0.42 checks that
26.05 still answers the provider's default version, and v0.0.41 that it is no longer served.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.fixtures import recorded, recorded_status
from tests.harness.emulator import Api, call_url, shape_diff

V = "v0.0.45"
RELEASE = "26.05"
HELD = "#!/bin/bash\nfor _ in $(seq 200); do [ -e go ] && break; sleep 0.05; done\n"
Reply = tuple[int, Any]


def _replay(api: Api, emu: SlurmJobApiEmulator) -> dict[str, Reply]:
    got: dict[str, Reply] = {}
    submit = f"/slurm/{V}/job/submit"

    def run(name: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        got[name] = api.call(method, path, body)
        return got[name][1]

    def job(script: str, **fields: Any) -> dict[str, Any]:
        desc: dict[str, Any] = {"name": "fixture", "partition": "debug", "current_working_directory": "/tmp"}
        desc.update({"environment": ["PATH=/bin:/usr/bin"], "time_limit": {"set": True, "number": 5}, **fields})
        return {"job": desc, "script": script}

    run("ping", "GET", f"/slurm/{V}/ping/")
    run("slurmdb_ping", "GET", f"/slurmdb/{V}/ping/")
    done = run("submit", "POST", submit, job(HELD))["job_id"]
    emu.wait_for_state(done, "RUNNING", 10)
    run("job_running", "GET", f"/slurm/{V}/job/{done}")
    emu.host_path("/tmp/go").touch()
    emu.wait_for_state(done, "COMPLETED", 10)
    run("job_completed", "GET", f"/slurm/{V}/job/{done}")
    failed = run("submit_fail", "POST", submit, job("#!/bin/bash\nexit 3\n"))["job_id"]
    emu.wait_for_state(failed, "FAILED", 10)
    run("job_failed", "GET", f"/slurm/{V}/job/{failed}")
    long = run("submit_long", "POST", submit, job("#!/bin/bash\nsleep 60\n"))["job_id"]
    emu.wait_for_state(long, "RUNNING", 10)
    run("job_long_running", "GET", f"/slurm/{V}/job/{long}")
    run("jobs_state", "GET", f"/slurm/{V}/jobs/state/?job_id={done}&job_id={long}&job_id={failed}")
    run("jobs_list", "GET", f"/slurm/{V}/jobs/")
    run("cancel", "DELETE", f"/slurm/{V}/job/{long}")
    emu.wait_for_state(long, "CANCELLED", 10)
    run("cancel_again", "DELETE", f"/slurm/{V}/job/{long}")
    run("cancel_not_found", "DELETE", f"/slurm/{V}/job/999999")
    run("job_not_found", "GET", f"/slurm/{V}/job/999999")
    run("submit_unknown_field", "POST", submit, job("#!/bin/bash\ntrue\n", no_such_field=1))
    run("submit_bad_partition", "POST", submit, job("#!/bin/bash\ntrue\n", partition="nope"))
    array = run("submit_array", "POST", submit, job('#!/bin/bash\n[ "$SLURM_ARRAY_TASK_ID" != 1 ]\n', array="0-2"))
    deadline = time.monotonic() + 20
    while not _array_ended(api.call("GET", f"/slurm/{V}/job/{array['job_id']}")):
        assert time.monotonic() < deadline, "the array did not end in 20 s"
        time.sleep(0.1)
    run("array_completed", "GET", f"/slurm/{V}/job/{array['job_id']}")
    run("array_jobs_state", "GET", f"/slurm/{V}/jobs/state/?job_id={array['job_id']}")
    run("slurmdb_job_completed", "GET", f"/slurmdb/{V}/job/{done}")
    run("slurmdb_job_failed_failed", "GET", f"/slurmdb/{V}/job/{failed}")
    run("slurmdb_job_cancelled_cancelled", "GET", f"/slurmdb/{V}/job/{long}")
    run("slurmdb_array_completed", "GET", f"/slurmdb/{V}/job/{array['job_id']}")
    run("slurmdb_jobs_filtered", "GET", f"/slurmdb/{V}/jobs/?job_name=fixture")
    run("slurmdb_job_not_found", "GET", f"/slurmdb/{V}/job/999999")
    return got


def _array_ended(reply: Reply) -> bool:
    jobs = reply[1].get("jobs") or []
    return len(jobs) == 3 and all(j["job_state"] in (["COMPLETED"], ["FAILED"]) for j in jobs)


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmJobApiEmulator]:
    with SlurmJobApiEmulator(
        state_dir=tmp_path_factory.mktemp("conformance-2605"),
        partitions={"debug": 2},
        minute_seconds=1.0,
        min_job_age=60,
        slurm_release=RELEASE,
    ) as emu:
        yield emu


@pytest.fixture(scope="module")
def replies(emu: SlurmJobApiEmulator) -> Iterator[dict[str, Reply]]:
    api = Api(emu)
    try:
        yield _replay(api, emu)
    finally:
        api.close()


CASES = [
    "ping",
    "slurmdb_ping",
    "submit",
    "submit_fail",
    "submit_long",
    "job_running",
    "job_completed",
    "job_failed",
    "job_long_running",
    "jobs_state",
    "jobs_list",
    "cancel",
    "cancel_again",
    "cancel_not_found",
    "job_not_found",
    "submit_unknown_field",
    "submit_bad_partition",
    "submit_array",
    "array_completed",
    "array_jobs_state",
    "slurmdb_job_completed",
    "slurmdb_job_failed_failed",
    "slurmdb_job_cancelled_cancelled",
    "slurmdb_array_completed",
    "slurmdb_jobs_filtered",
    "slurmdb_job_not_found",
]


def _facts(body: Any) -> dict[str, Any]:
    jobs = body.get("jobs") or []
    return {
        "errors": sorted(e["error_number"] for e in body.get("errors") or []),
        "status": sorted(s["error"]["code"] for s in body.get("status") or []),
        "states": sorted(str(j.get("job_state") or j.get("state")) for j in jobs if "job_id" in j),
        "meta": (body.get("meta") or {}).get("slurm", {}).get("release"),
        "parser": (body.get("meta") or {}).get("plugin", {}).get("data_parser"),
    }


@pytest.mark.parametrize("name", CASES)
def test_status_shape_and_facts_match_real_slurm_2605(replies: dict[str, Reply], name: str) -> None:
    status, body = replies[name]
    expected = recorded(name, RELEASE)
    assert status == recorded_status(name, RELEASE), body
    assert shape_diff(body, expected) == [], name
    facts, real = _facts(body), _facts(expected)
    if name.startswith("slurmdb_jobs"):  # a list of whatever ran: compare what every entry must be
        facts["states"] = real["states"] = []
    assert facts == real


def test_every_recording_is_replayed() -> None:
    from tests.fixtures import RELEASES

    recordings = {p.stem for p in RELEASES[RELEASE].glob("*.json")}
    # states a poll happened to see on the way, and the plain-text 404 Google turns into INVALID_ARGUMENT
    transient = {"job_pending", "array_pending", "job_long_pending", "unknown_path"}
    transient |= {n for n in recordings if n.startswith("job_after_cancel")}
    assert recordings - transient == set(CASES)


@pytest.mark.parametrize(("version", "served"), [("v0.0.41", False), ("v0.0.42", True), ("v0.0.44", True)])
def test_26_05_serves_v0042_to_v0045(emu: SlurmJobApiEmulator, version: str, served: bool) -> None:
    api = Api(emu)
    try:
        response = api.post({"method": "HTTP_METHOD_GET", "path": f"/slurm/{version}/ping/"})
    finally:
        api.close()
    assert (response.status_code == 200) is served, (call_url(emu), response.text)
    if served:
        assert response.json()["structuredBody"]["meta"]["plugin"]["data_parser"] == f"data_parser/{version}"
