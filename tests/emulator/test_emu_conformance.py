"""Conformance: each recorded slurmrestd 24.11 reply against the emulator's reply to the same call.

One scenario replays the recording session (tests/fixtures/slurm-24.11/INDEX.tsv); each case then
checks the same HTTP status, the same structure (keys and value types, recursively) and the facts
that matter (states, error numbers, warnings).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.harness.emulator import Api, V, recorded, recorded_index, shape_diff

LONG = "#!/bin/bash\nsleep 60\n"
FAIL = "#!/bin/bash\necho failing\nexit 3\n"
HOLDS = "#!/bin/bash\npython3 -c 'import time; held = bytearray(64 << 20); time.sleep(1.5)'\n"
HELD = "#!/bin/bash\nfor _ in $(seq 200); do [ -e go ] && break; sleep 0.05; done\n"

NOT_APPLICABLE = {
    "nodes": "the emulator serves only the job endpoints",
    "partitions": "the emulator serves only the job endpoints",
    "diag": "the emulator serves only the job endpoints",
    "slurmdb_diag": "the emulator serves only the job endpoints",
    "openapi_v3": "not reachable through callSlurmRestApi",
    "submit_malformed_json": "the envelope carries a JSON object: Slurm never sees malformed JSON",
    "unknown_path": "Google answers INVALID_ARGUMENT for it (test_emu_google)",
    "auth_no_headers": "slurmrestd's own auth is behind Google's",
    "auth_bad_token": "slurmrestd's own auth is behind Google's",
    "auth_token_for_other_user": "slurmrestd's own auth is behind Google's",
    "auth_token_only": "slurmrestd's own auth is behind Google's",
    "auth_bearer_header": "slurmrestd's own auth is behind Google's",
    "slurmdb_job_when_slurmdbd_not_configured": "the emulated cluster always has accounting",
    "slurmdb_ping_when_slurmdbd_not_configured": "the emulated cluster always has accounting",
}


def _replay(api: Api, emu: SlurmJobApiEmulator) -> dict[str, tuple[int, dict[str, Any]]]:
    got: dict[str, tuple[int, dict[str, Any]]] = {}
    submit = f"/slurm/{V}/job/submit"

    def run(name: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        got[name] = api.call(method, path, body)
        return got[name][1]

    def job_body(script: str, **job: Any) -> dict[str, Any]:
        desc = {
            "name": "t",
            "partition": "debug",
            "current_working_directory": "/tmp",
            "environment": ["PATH=/bin:/usr/bin"],
            "time_limit": {"set": True, "number": 5},
        }
        desc.update(job)
        return {"job": desc, "script": script}

    run("ping", "GET", f"/slurm/{V}/ping/")
    run("slurmdb_ping", "GET", f"/slurmdb/{V}/ping/")
    # The first job runs until ./go exists (at most 10 s): job_running is read while it surely runs.
    first = run("submit", "POST", submit, job_body(HELD))["job_id"]
    emu.wait_for_state(first, "RUNNING", 10)
    run("job_running", "GET", f"/slurm/{V}/job/{first}")
    emu.host_path("/tmp/go").touch()
    emu.wait_for_state(first, "COMPLETED", 10)
    run("job_completed", "GET", f"/slurm/{V}/job/{first}")
    long = run("submit_long", "POST", submit, job_body(LONG, name="long"))["job_id"]
    emu.wait_for_state(long, "RUNNING", 10)
    run("job_long_running", "GET", f"/slurm/{V}/job/{long}")
    run("jobs_list", "GET", f"/slurm/{V}/jobs/")
    failing = run("submit_fail", "POST", submit, job_body(FAIL, name="f", time_limit=None))["job_id"]
    run("job_pending", "GET", f"/slurm/{V}/job/{failing}")
    run("cancel", "DELETE", f"/slurm/{V}/job/{long}")
    run("job_after_cancel_immediate", "GET", f"/slurm/{V}/job/{long}")
    emu.wait_for_state(long, "CANCELLED", 10)
    run("job_after_cancel", "GET", f"/slurm/{V}/job/{long}")
    run("cancel_again", "DELETE", f"/slurm/{V}/job/{long}")
    emu.wait_for_state(failing, "FAILED", 10)
    run("job_failed", "GET", f"/slurm/{V}/job/{failing}")
    run("jobs_list_after", "GET", f"/slurm/{V}/jobs/")
    run("jobs_state", "GET", f"/slurm/{V}/jobs/state/")
    run("job_not_found", "GET", f"/slurm/{V}/job/999999")
    run("cancel_not_found", "DELETE", f"/slurm/{V}/job/999999")
    run("submit_bad_partition", "POST", submit, job_body("#!/bin/bash\ntrue\n", partition="nope"))
    run("submit_no_script", "POST", submit, {"job": job_body("")["job"]})
    no_env = job_body("#!/bin/bash\ntrue\n")
    del no_env["job"]["environment"]
    run("submit_no_environment", "POST", submit, no_env)
    run("submit_unknown_field", "POST", submit, job_body("#!/bin/bash\ntrue\n", name="u", no_such_field=1))
    run("slurmdb_job", "GET", f"/slurmdb/{V}/job/{first}")
    run("slurmdb_job_cancelled", "GET", f"/slurmdb/{V}/job/{long}")
    run("slurmdb_job_failed", "GET", f"/slurmdb/{V}/job/{failing}")
    run("slurmdb_job_not_found", "GET", f"/slurmdb/{V}/job/999999")
    run("slurmdb_jobs", "GET", f"/slurmdb/{V}/jobs/")
    run("slurmdb_jobs_filtered", "GET", f"/slurmdb/{V}/jobs/?users=ciuser&state=COMPLETED")
    # holds 64 MiB, sampled every second: its batch step has a peak RSS (tres.requested.max's mem)
    sampled = api.call("POST", submit, job_body(HOLDS, name="rsstest", account_gather_frequency="task=1"))[1]
    emu.wait_for_state(sampled["job_id"], "COMPLETED", 20)
    run("slurmdb_job_sampled", "GET", f"/slurmdb/{V}/job/{sampled['job_id']}")
    emu.set_slurmdbd_down(True)
    run("slurmdb_job_slurmdbd_down", "GET", f"/slurmdb/{V}/job/{first}")
    run("slurmdb_ping_slurmdbd_down", "GET", f"/slurmdb/{V}/ping/")
    during = run("submit_while_slurmdbd_down", "POST", submit, job_body("#!/bin/bash\ntrue\n"))["job_id"]
    emu.set_slurmdbd_down(False)
    emu.wait_for_state(during, "COMPLETED", 10)
    run("slurmdb_job_after_dbd_restart", "GET", f"/slurmdb/{V}/job/{during}")
    return got


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, dict[str, Any]]]]:
    with SlurmJobApiEmulator(
        state_dir=tmp_path_factory.mktemp("conformance"), partitions={"debug": 1}, minute_seconds=1.0
    ) as emu:
        api = Api(emu)
        try:
            yield _replay(api, emu)
        finally:
            api.close()


CASES = sorted(set(recorded_index()) - set(NOT_APPLICABLE))


def test_every_recording_is_covered_or_explained(replies: dict[str, Any]) -> None:
    assert sorted(replies) == CASES


@pytest.mark.parametrize("name", CASES)
def test_status_and_shape_match_the_recording(replies: dict[str, tuple[int, dict[str, Any]]], name: str) -> None:
    status, body = replies[name]
    assert status == int(recorded_index()[name]["http_status"])
    assert shape_diff(body, recorded(name)) == []


def _states(body: dict[str, Any]) -> list[list[str]]:
    return [job.get("job_state") or job["state"]["current"] for job in body["jobs"]]


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in CASES
        # slurmdb_jobs caught job 5 of the recording session still pending: timing, not behaviour.
        if n.startswith(("job_", "slurmdb_job")) and "not_found" not in n and "down" not in n and n != "slurmdb_jobs"
    ],
)
def test_job_states_match_the_recording(replies: dict[str, tuple[int, dict[str, Any]]], name: str) -> None:
    assert _states(replies[name][1]) == _states(recorded(name))


@pytest.mark.parametrize("name", [n for n in CASES if recorded(n).get("errors")])
def test_error_numbers_match_the_recording(replies: dict[str, tuple[int, dict[str, Any]]], name: str) -> None:
    ours = [(e["error_number"], e["error"], e["source"]) for e in replies[name][1]["errors"]]
    theirs = [(e["error_number"], e["error"], e["source"]) for e in recorded(name)["errors"]]
    assert ours == theirs


@pytest.mark.parametrize("name", ["cancel", "cancel_again", "cancel_not_found"])
def test_cancel_status_entries_match(replies: dict[str, tuple[int, dict[str, Any]]], name: str) -> None:
    ours = [entry["error"]["code"] for entry in replies[name][1]["status"]]
    assert ours == [entry["error"]["code"] for entry in recorded(name)["status"]]


def test_warnings_match(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    assert replies["submit_unknown_field"][1]["warnings"] == recorded("submit_unknown_field")["warnings"]
    for name in ("slurmdb_job_not_found", "slurmdb_jobs_filtered"):
        (warning,) = replies[name][1]["warnings"]
        assert warning["source"] == "_dump_jobs"
        assert warning["description"].startswith("slurmdb_jobs_get(0x")
        assert warning["description"].endswith(") found nothing")


def test_failed_job_facts(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    job = replies["job_failed"][1]["jobs"][0]
    assert job["exit_code"]["status"] == ["ERROR"] and job["exit_code"]["return_code"]["number"] == 3
    assert job["state_reason"] == "NonZeroExitCode"
    assert job["time_limit"] == {"set": False, "infinite": True, "number": 0}
    assert job["standard_output"] == f"/tmp/slurm-{job['job_id']}.out"
    record = replies["slurmdb_job_failed"][1]["jobs"][0]
    assert record["exit_code"]["return_code"]["number"] == 3
    assert record["stdout"] == "/tmp/slurm-%j.out"


def test_cancelled_job_facts(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    job = replies["job_after_cancel"][1]["jobs"][0]
    assert job["exit_code"]["status"] == ["SIGNALED"]
    assert job["exit_code"]["signal"] == {"id": {"set": True, "infinite": False, "number": 15}, "name": "TERM"}
    assert replies["slurmdb_job_cancelled"][1]["jobs"][0]["kill_request_user"] == "airflow"


def test_meta_names_the_plugin_and_cluster(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    for name, (_, body) in replies.items():
        kind = "slurmdbd" if name.startswith("slurmdb") else "slurmctld"
        assert body["meta"]["plugin"]["type"] == f"openapi/{kind}", name
        assert body["meta"]["slurm"]["release"] == "24.11.5"
        assert body["meta"]["slurm"]["cluster"] == "demo-cluster"


def test_jobs_state_lists_string_ids(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    jobs = replies["jobs_state"][1]["jobs"]
    assert [job["state"] for job in jobs] == [["COMPLETED"], ["CANCELLED"], ["FAILED"]]
    assert all(isinstance(job["job_id"], str) for job in jobs)


def test_a_sampled_jobs_batch_step_has_its_peak_rss(replies: dict[str, tuple[int, dict[str, Any]]]) -> None:
    def peak(body: dict[str, Any]) -> int:
        [step] = body["jobs"][0]["steps"]
        [mem] = [item for item in step["tres"]["requested"]["max"] if item["type"] == "mem"]
        return int(mem["count"])

    assert peak(recorded("slurmdb_job_sampled")) >= 200 << 20  # real 24.11: a job that held 200 MiB
    assert 64 << 20 <= peak(replies["slurmdb_job_sampled"][1]) < 1 << 30  # the emulator's, which held 64 MiB
    # a job that ended before its first sample: no peak, as real 24.11 recorded it
    assert recorded("slurmdb_job")["jobs"][0]["steps"][0]["tres"]["requested"]["max"] == []
    assert replies["slurmdb_job"][1]["jobs"][0]["steps"][0]["tres"]["requested"]["max"] == []
