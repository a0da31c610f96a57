"""Real Slurm 24.11 through slurmrestd, straight over HTTP (no project code): the replies a client meets.

Every reply is saved under the fixture's record dir (``.real-slurm/recorded/<version>/<scenario>/...``),
so the project's emulator can later be held against what Slurm really said.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.harness.real_slurm import RealSlurm, ended_by_sigterm, is_terminal

pytestmark = [pytest.mark.real_slurm, pytest.mark.timeout(600)]

V = "v0.0.42"
VERSIONS = ["v0.0.40", "v0.0.41", "v0.0.42"]
UNKNOWN_JOB = 999999


# --- helpers ---------------------------------------------------------------------------------------
def number(value: Any) -> int | None:
    """Slurm's {set, infinite, number} struct (or a plain int) as an int; None when unset."""
    if isinstance(value, dict):
        return value["number"] if value.get("set") and not value.get("infinite") else None
    return value


def job_body(cluster: RealSlurm, name: str, script: str, **fields: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name,
        "partition": cluster.partition,
        "current_working_directory": cluster.home,
        "environment": ["PATH=/bin:/usr/bin"],
        "time_limit": {"set": True, "number": 5},
        "standard_output": f"{cluster.home}/{name}-%j.out",
    }
    job.update(fields)
    return {"job": job, "script": script}


def submit(cluster: RealSlurm, body: dict[str, Any], version: str = V, record: str | None = None) -> int:
    status, reply = cluster.call("POST", f"/slurm/{version}/job/submit", body, record=record)
    assert status == 200, reply
    assert reply["errors"] == [], reply["errors"]
    return int(reply["job_id"])


def state_key(status: int, body: Any) -> str:
    """A file-name-friendly label for a /slurm or /slurmdb job reply: its state, or its HTTP status."""
    if status != 200 or not isinstance(body, dict):
        return f"http_{status}"
    jobs = body.get("jobs") or []
    if not jobs:
        return "no_jobs"
    state = jobs[0]["job_state"] if "job_state" in jobs[0] else jobs[0]["state"]["current"]
    return "_".join(state).lower()


def wait_job(
    cluster: RealSlurm,
    job_id: int,
    until: Any,
    *,
    version: str = V,
    timeout: float = 60,
    record: str | None = None,
) -> dict[str, Any]:
    """Poll /slurm/.../job/ID until ``until(job_state)``; return that job record."""
    _, body = cluster.poll(
        "GET",
        f"/slurm/{version}/job/{job_id}",
        until=lambda s, b: s == 200 and until(b["jobs"][0]["job_state"]),
        timeout=timeout,
        what=f"job {job_id} ({version}) to reach the wanted state",
        record=record,
        key=state_key,
    )
    return body["jobs"][0]


def wait_terminal(cluster: RealSlurm, job_id: int, **kw: Any) -> dict[str, Any]:
    return wait_job(cluster, job_id, is_terminal, **kw)


def wait_db(
    cluster: RealSlurm, job_id: int, *, version: str = V, timeout: float = 60, record: str | None = None
) -> dict[str, Any]:
    """Poll /slurmdb/.../job/ID until accounting holds the job in a terminal state (it lags slurmctld)."""

    def done(status: int, body: Any) -> bool:
        return status == 200 and bool(body.get("jobs")) and is_terminal(body["jobs"][0]["state"]["current"])

    _, body = cluster.poll(
        "GET",
        f"/slurmdb/{version}/job/{job_id}",
        until=done,
        timeout=timeout,
        what=f"slurmdb to record job {job_id} ({version}) as finished",
        record=record,
        key=state_key,
    )
    return body["jobs"][0]


class JobWatcher(threading.Thread):
    """Follows one job's /slurm state from a thread, so a long job (TIMEOUT) runs while other tests do."""

    def __init__(self, cluster: RealSlurm, job_id: int, record: str, timeout: float) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster.new_client()
        self.job_id = job_id
        self.record = record
        self.deadline = time.monotonic() + timeout
        self.states: list[list[str]] = []
        self.final: dict[str, Any] | None = None
        self.error: str | None = None

    def run(self) -> None:
        path = f"/slurm/{V}/job/{self.job_id}"
        try:
            while time.monotonic() < self.deadline:
                status, body = self.cluster.call("GET", path)
                if status != 200:
                    self.error = f"GET {path} -> {status}: {body!r:.500}"
                    return
                state = body["jobs"][0]["job_state"]
                if not self.states or self.states[-1] != state:
                    self.states.append(state)
                    self.cluster.recorder.save(f"{self.record}_{state_key(status, body)}", "GET", path, status, body)
                if is_terminal(state):
                    self.final = body["jobs"][0]
                    return
                time.sleep(0.5)
            self.error = f"job {self.job_id} not finished in time; states seen {self.states}"
        except Exception as exc:  # surfaced by the test that joins this thread
            self.error = repr(exc)


@pytest.fixture(scope="module")
def timeout_job(real_slurm: RealSlurm) -> JobWatcher:
    """A `sleep 300` with a 1-minute limit, submitted once at the start and watched in the background.

    Slurm enforces time limits on a ~30 s sweep, so TIMEOUT arrives 60-95 s after start; running it
    alongside the other tests keeps that out of the suite's wall time.
    """
    body = job_body(
        real_slurm, "timeout", "#!/bin/bash\necho start\nsleep 300\n", time_limit={"set": True, "number": 1}
    )
    job_id = submit(real_slurm, body, record=f"{V}/timeout/submit")
    watcher = JobWatcher(real_slurm, job_id, record=f"{V}/timeout/job", timeout=240)
    watcher.start()
    return watcher


# --- the cluster itself ----------------------------------------------------------------------------
def test_cluster_serves_three_versions(real_slurm: RealSlurm, timeout_job: JobWatcher) -> None:
    for version in VERSIONS:
        status, body = real_slurm.call("GET", f"/slurm/{version}/ping/", record=f"{version}/ping/slurm")
        assert status == 200, body
        assert body["pings"][0]["pinged"] == "UP"
        assert body["meta"]["slurm"]["release"].startswith("24.11.")
    status, body = real_slurm.call("GET", "/openapi/v3")
    assert status == 200
    versions = {p.split("/")[2] for p in body["paths"] if p.startswith(("/slurm/", "/slurmdb/"))}
    assert versions == set(VERSIONS)
    # /slurmdb/.../ping/ only exists from v0.0.42 on
    assert real_slurm.call("GET", f"/slurmdb/{V}/ping/", record=f"{V}/ping/slurmdb")[0] == 200
    status, body = real_slurm.call("GET", "/slurmdb/v0.0.41/ping/", record="v0.0.41/ping/slurmdb")
    assert status == 404


# --- core scenarios, at every data parser version ---------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_submit_runs_to_completed_and_writes_output(real_slurm: RealSlurm, version: str) -> None:
    name = f"hello-{version}"
    script = '#!/bin/bash\necho "hello from $SLURM_JOB_ID as $(id -un)"\nsleep 1\n'
    job_id = submit(real_slurm, job_body(real_slurm, name, script), version, record=f"{version}/complete/submit")

    job = wait_terminal(real_slurm, job_id, version=version, record=f"{version}/complete/job")
    assert job["job_id"] == job_id
    assert job["job_state"] == ["COMPLETED"]
    assert number(job["exit_code"]["return_code"]) == 0
    assert job["user_name"] == real_slurm.user
    out = f"{real_slurm.home}/{name}-{job_id}.out"
    assert job["standard_output"] == out
    assert real_slurm.host_path(out).read_text() == f"hello from {job_id} as {real_slurm.user}\n"

    status, body = real_slurm.call("GET", f"/slurm/{version}/jobs/", record=f"{version}/complete/jobs_list")
    assert status == 200
    assert job_id in [j["job_id"] for j in body["jobs"]]

    db = wait_db(real_slurm, job_id, version=version, record=f"{version}/complete/slurmdb_job")
    assert db["job_id"] == job_id
    assert db["state"]["current"] == ["COMPLETED"]
    assert number(db["exit_code"]["return_code"]) == 0
    assert db["user"] == real_slurm.user


@pytest.mark.parametrize("version", VERSIONS)
def test_cancel_running_job(real_slurm: RealSlurm, version: str) -> None:
    body = job_body(real_slurm, f"cancel-{version}", "#!/bin/bash\necho start\nsleep 300\n")
    job_id = submit(real_slurm, body, version, record=f"{version}/cancel/submit")
    wait_job(real_slurm, job_id, lambda s: s == ["RUNNING"], version=version, record=f"{version}/cancel/job")

    status, reply = real_slurm.call("DELETE", f"/slurm/{version}/job/{job_id}", record=f"{version}/cancel/delete")
    assert status == 200, reply
    assert reply["errors"] == []
    # the kill is accepted at once, the job takes a moment: CANCELLED+COMPLETING is not terminal yet
    status, reply = real_slurm.call(
        "GET", f"/slurm/{version}/job/{job_id}", record=f"{version}/cancel/job_right_after_delete"
    )
    assert status == 200
    assert reply["jobs"][0]["job_state"] in (["CANCELLED", "COMPLETING"], ["CANCELLED"])

    job = wait_terminal(real_slurm, job_id, version=version, record=f"{version}/cancel/job")
    assert job["job_state"] == ["CANCELLED"]
    db = wait_db(real_slurm, job_id, version=version, record=f"{version}/cancel/slurmdb_job")
    assert db["state"]["current"] == ["CANCELLED"]

    # cancelling a finished job is still HTTP 200; only v0.0.42 says why in status[] (v0.0.40/41 say nothing)
    status, reply = real_slurm.call("DELETE", f"/slurm/{version}/job/{job_id}", record=f"{version}/cancel/delete_again")
    assert status == 200, reply
    assert reply["errors"] == []
    if version == "v0.0.42":
        assert reply["status"][0]["error"]["code"] == 2021  # "Job/step already completing or completed"
    else:
        assert "status" not in reply


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_job(real_slurm: RealSlurm, version: str) -> None:
    status, body = real_slurm.call("GET", f"/slurm/{version}/job/{UNKNOWN_JOB}", record=f"{version}/unknown/job")
    assert status == 404
    assert body["errors"][0]["error_number"] == 2017  # "Invalid job id specified"

    # DELETE of an unknown job is HTTP 200 too: v0.0.42 reports 2017 in status[], v0.0.40/41 report nothing
    status, body = real_slurm.call("DELETE", f"/slurm/{version}/job/{UNKNOWN_JOB}", record=f"{version}/unknown/delete")
    assert status == 200, body
    assert body["errors"] == []
    if version == "v0.0.42":
        assert body["status"][0]["error"]["code"] == 2017
    else:
        assert "status" not in body

    status, body = real_slurm.call(
        "GET", f"/slurmdb/{version}/job/{UNKNOWN_JOB}", record=f"{version}/unknown/slurmdb_job"
    )
    assert status == 200
    assert body["jobs"] == []


# --- what a job can end as ---------------------------------------------------------------------------
def test_script_exit_3_is_failed_with_return_code_3(real_slurm: RealSlurm) -> None:
    body = job_body(real_slurm, "fail3", "#!/bin/bash\necho bad >&2\nexit 3\n")
    job_id = submit(real_slurm, body, record=f"{V}/fail3/submit")
    job = wait_terminal(real_slurm, job_id, record=f"{V}/fail3/job")
    assert job["job_state"] == ["FAILED"]
    assert number(job["exit_code"]["return_code"]) == 3
    assert job["exit_code"]["status"] == ["ERROR"]
    db = wait_db(real_slurm, job_id, record=f"{V}/fail3/slurmdb_job")
    assert db["state"]["current"] == ["FAILED"]
    assert number(db["exit_code"]["return_code"]) == 3


def task_states_key(status: int, body: Any) -> str:
    """Label for an array reply: the set of its tasks' states, e.g. ``completed_failed_running``."""
    if status != 200:
        return f"http_{status}"
    return "_".join(sorted({"-".join(t["job_state"]) for t in body.get("jobs", [])})).lower()


def test_job_array_with_one_failing_task(real_slurm: RealSlurm) -> None:
    script = '#!/bin/bash\necho "task $SLURM_ARRAY_TASK_ID"\n[ "$SLURM_ARRAY_TASK_ID" != 1 ] || exit 1\n'
    body = job_body(real_slurm, "array", script, array="0-2", standard_output=f"{real_slurm.home}/array-%A_%a.out")
    array_id = submit(real_slurm, body, record=f"{V}/array/submit")

    def all_tasks_done(status: int, reply: Any) -> bool:
        tasks = reply.get("jobs", []) if status == 200 else []
        return len(tasks) == 3 and all(is_terminal(t["job_state"]) for t in tasks)

    _, reply = real_slurm.poll(
        "GET",
        f"/slurm/{V}/job/{array_id}",
        until=all_tasks_done,
        timeout=60,
        what=f"array {array_id}: three finished tasks",
        record=f"{V}/array/job",
        key=task_states_key,
    )
    tasks = {number(t["array_task_id"]): t for t in reply["jobs"]}
    assert set(tasks) == {0, 1, 2}
    assert all(number(t["array_job_id"]) == array_id for t in tasks.values())
    # each task has its own job_id; the array's own id ends up on one of them (here the last task)
    assert array_id in [t["job_id"] for t in tasks.values()]
    assert len({t["job_id"] for t in tasks.values()}) == 3
    assert [tasks[i]["job_state"] for i in (0, 1, 2)] == [["COMPLETED"], ["FAILED"], ["COMPLETED"]]
    assert number(tasks[1]["exit_code"]["return_code"]) == 1
    for i in (0, 2):
        path = f"{real_slurm.home}/array-{array_id}_{i}.out"
        assert real_slurm.host_path(path).read_text() == f"task {i}\n"

    assert real_slurm.call("GET", f"/slurmdb/{V}/job/{array_id}", record=f"{V}/array/slurmdb_job")[0] == 200


def test_dependency_afterok(real_slurm: RealSlurm) -> None:
    first = submit(
        real_slurm, job_body(real_slurm, "dep-first", "#!/bin/bash\nsleep 4\n"), record=f"{V}/dep/submit_first"
    )
    then = submit(
        real_slurm,
        job_body(real_slurm, "dep-then", "#!/bin/bash\necho after\n", dependency=f"afterok:{first}"),
        record=f"{V}/dep/submit_then",
    )
    waiting = real_slurm.call("GET", f"/slurm/{V}/job/{then}", record=f"{V}/dep/then_waiting")[1]["jobs"][0]
    assert waiting["job_state"] == ["PENDING"]
    assert waiting["state_reason"] == "Dependency"
    assert waiting["dependency"] == f"afterok:{first}(unfulfilled)"

    assert wait_terminal(real_slurm, first, record=f"{V}/dep/first")["job_state"] == ["COMPLETED"]
    job = wait_terminal(real_slurm, then, record=f"{V}/dep/then")
    assert job["job_state"] == ["COMPLETED"]
    assert job["start_time"]["number"] >= wait_db(real_slurm, first)["time"]["end"]

    # afterok on a job that failed can never start; without kill_invalid_depend it just waits
    failed = submit(
        real_slurm, job_body(real_slurm, "dep-fails", "#!/bin/bash\nexit 1\n"), record=f"{V}/dep/submit_failing"
    )
    never = submit(
        real_slurm,
        job_body(real_slurm, "dep-never", "#!/bin/bash\ntrue\n", dependency=f"afterok:{failed}"),
        record=f"{V}/dep/submit_never",
    )
    assert wait_terminal(real_slurm, failed)["job_state"] == ["FAILED"]
    job = wait_job(
        real_slurm,
        never,
        lambda s: s == ["PENDING"],
        record=f"{V}/dep/never",
    )
    real_slurm.poll(
        "GET",
        f"/slurm/{V}/job/{never}",
        until=lambda s, b: b["jobs"][0]["state_reason"] == "DependencyNeverSatisfied",
        timeout=60,
        what=f"job {never} to be marked DependencyNeverSatisfied",
        record=f"{V}/dep/never_reason",
        key=lambda s, b: b["jobs"][0]["state_reason"],
    )
    assert real_slurm.call("DELETE", f"/slurm/{V}/job/{never}")[0] == 200


# --- the active queue forgets, accounting remembers ----------------------------------------------------
def test_finished_job_leaves_active_queue_after_min_job_age(real_slurm: RealSlurm) -> None:
    job_id = submit(real_slurm, job_body(real_slurm, "purge", "#!/bin/bash\ntrue\n"), record=f"{V}/purge/submit")
    job = wait_terminal(real_slurm, job_id, record=f"{V}/purge/job")
    ended = number(job["end_time"])
    assert ended
    min_age = real_slurm.min_job_age
    # the purge sweep runs every max(10, MinJobAge) s when MinJobAge < 60, else every 60 s, and
    # skips a round while backfill is busy: allow two sweeps
    sweep = max(10, min_age) if 0 < min_age < 60 else 60
    real_slurm.poll(
        "GET",
        f"/slurm/{V}/job/{job_id}",
        until=lambda s, b: s == 404,
        timeout=min_age + 2 * sweep + 15,
        what=f"job {job_id} to leave the active queue (MinJobAge={min_age})",
        record=f"{V}/purge/job",
        key=state_key,
        interval=0.5,
    )
    gone_after = time.time() - ended
    print(f"job {job_id} left the active queue {gone_after:.1f}s after it ended (MinJobAge={min_age})")
    assert min_age - 1 <= gone_after <= min_age + 2 * sweep + 5
    status, body = real_slurm.call("GET", f"/slurm/{V}/job/{job_id}", record=f"{V}/purge/job_gone")
    assert status == 404
    assert body["errors"][0]["error_number"] == 2017
    db = wait_db(real_slurm, job_id, record=f"{V}/purge/slurmdb_job")
    assert db["state"]["current"] == ["COMPLETED"]


def test_slurmdbd_down_then_recovers(real_slurm: RealSlurm) -> None:
    before = submit(real_slurm, job_body(real_slurm, "dbd-before", "#!/bin/bash\ntrue\n"))
    wait_db(real_slurm, before)
    real_slurm.stop_slurmdbd()
    try:
        status, body = real_slurm.call("GET", f"/slurmdb/{V}/job/{before}", record=f"{V}/dbd_down/slurmdb_job")
        assert status == 502, body
        assert body["errors"][0]["error_number"] == 7000
        status, body = real_slurm.call("GET", f"/slurmdb/{V}/ping/", record=f"{V}/dbd_down/slurmdb_ping")
        assert status == 502, body
        # slurmctld keeps working and queues the accounting records for later
        during = submit(
            real_slurm,
            job_body(real_slurm, "dbd-during", "#!/bin/bash\necho during\n"),
            record=f"{V}/dbd_down/submit",
        )
        assert wait_terminal(real_slurm, during, record=f"{V}/dbd_down/job")["job_state"] == ["COMPLETED"]
        # the purge does not wait for accounting: for a while neither side knows the job
        real_slurm.poll(
            "GET",
            f"/slurm/{V}/job/{during}",
            until=lambda s, b: s == 404,
            timeout=real_slurm.min_job_age + 60,
            what=f"job {during} to leave the active queue while slurmdbd is down",
            record=f"{V}/dbd_down/job",
            key=state_key,
            interval=0.5,
        )
        status, body = real_slurm.call("GET", f"/slurmdb/{V}/job/{during}", record=f"{V}/dbd_down/slurmdb_job_purged")
        assert status == 502, body
    finally:
        real_slurm.start_slurmdbd()
    restarted = time.monotonic()
    # slurmctld retries its slurmdbd connection on its own schedule (~10-20 s here), then sends the backlog
    db = wait_db(real_slurm, during, timeout=120, record=f"{V}/dbd_down/slurmdb_job_after_restart")
    assert db["state"]["current"] == ["COMPLETED"]
    print(f"job {during} reached slurmdb {time.monotonic() - restarted:.1f}s after slurmdbd restarted")


# --- what slurmrestd says about bad requests -----------------------------------------------------------
def test_unknown_job_field_is_a_warning(real_slurm: RealSlurm) -> None:
    body = job_body(real_slurm, "unknown-field", "#!/bin/bash\ntrue\n", no_such_field=1)
    status, reply = real_slurm.call("POST", f"/slurm/{V}/job/submit", body, record=f"{V}/bad/submit_unknown_field")
    assert status == 200, reply
    assert reply["errors"] == []
    assert reply["job_id"]
    assert any('"no_such_field"' in w["description"] for w in reply["warnings"]), reply["warnings"]
    wait_terminal(real_slurm, reply["job_id"])


def test_bad_partition_is_500(real_slurm: RealSlurm) -> None:
    body = job_body(real_slurm, "bad-partition", "#!/bin/bash\ntrue\n", partition="nope")
    status, reply = real_slurm.call("POST", f"/slurm/{V}/job/submit", body, record=f"{V}/bad/submit_bad_partition")
    assert status == 500
    assert reply["errors"][0]["error"] == "Invalid partition name specified"
    assert reply["errors"][0]["error_number"] == 2000
    assert "job_id" not in reply


# --- many jobs in one call -------------------------------------------------------------------------------
def test_jobs_state_batch(real_slurm: RealSlurm) -> None:
    short = submit(real_slurm, job_body(real_slurm, "batch-short", "#!/bin/bash\ntrue\n"))
    long = submit(real_slurm, job_body(real_slurm, "batch-long", "#!/bin/bash\nsleep 120\n"))
    wait_terminal(real_slurm, short)
    wait_job(real_slurm, long, lambda s: s == ["RUNNING"])
    try:
        for version in VERSIONS:
            base = f"/slurm/{version}/jobs/state/"
            # several ids: repeat the parameter; job ids come back as strings, unknown ids are left out
            status, body = real_slurm.call(
                "GET", f"{base}?job_id={short}&job_id={long}&job_id={UNKNOWN_JOB}", record=f"{version}/jobs_state/batch"
            )
            assert status == 200, body
            assert {j["job_id"]: j["state"] for j in body["jobs"]} == {
                str(short): ["COMPLETED"],
                str(long): ["RUNNING"],
            }

            status, body = real_slurm.call("GET", f"{base}?job_id={long}", record=f"{version}/jobs_state/one")
            assert status == 200
            assert body["jobs"] == [{"job_id": str(long), "state": ["RUNNING"]}]

            # a comma list is NOT accepted: a raw comma fails slurmrestd's URL parsing (plain-text 400),
            # an encoded one its query parsing (422, error 9000)
            status, body = real_slurm.call("GET", f"{base}?job_id={short},{long}", record=f"{version}/jobs_state/csv")
            assert (status, body) == (400, "Unable to parse query.")
            status, body = real_slurm.call(
                "GET", f"{base}?job_id={short}%2C{long}", record=f"{version}/jobs_state/csv_encoded"
            )
            assert status == 422
            assert body["errors"][0]["error_number"] == 9000
    finally:
        real_slurm.call("DELETE", f"/slurm/{V}/job/{long}")


# Last on purpose: its job was submitted by the first test and has been running alongside all the others.
def test_time_limit_gives_timeout(real_slurm: RealSlurm, timeout_job: JobWatcher) -> None:
    timeout_job.join(max(0.0, timeout_job.deadline - time.monotonic()) + 5)
    assert timeout_job.error is None, timeout_job.error
    assert timeout_job.final is not None
    assert timeout_job.final["job_state"] == ["TIMEOUT"], timeout_job.states
    assert ["RUNNING"] in timeout_job.states
    assert timeout_job.final["state_reason"] == "TimeLimit"
    # /slurm says the batch script was ended by the SIGTERM (signalled, or bash exiting 143)
    assert ended_by_sigterm(timeout_job.final["exit_code"]), timeout_job.final["exit_code"]
    db = wait_db(real_slurm, timeout_job.job_id, record=f"{V}/timeout/slurmdb_job")
    assert db["state"]["current"] == ["TIMEOUT"]
    # the limit is enforced on a periodic sweep, so the job ran at least its minute, but not much longer
    assert 60 <= db["time"]["elapsed"] <= 120, db["time"]
