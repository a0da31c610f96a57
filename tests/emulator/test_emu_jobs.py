"""Jobs really run: processes, output files, states, queueing, arrays, dependencies, holds, MinJobAge."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.harness.emulator import CWD, Api, V, eventually, job_desc, processes_in_sessions

SLEEP = "#!/bin/bash\nsleep 60\n"


def test_job_runs_in_its_directory_with_only_its_environment(api: Api, emu: SlurmJobApiEmulator) -> None:
    script = (
        "#!/bin/bash\n"
        "echo written > result.txt\n"
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodes=$SLURM_JOB_NODELIST nn=$SLURM_NNODES"\n'
        'echo "part=$SLURM_JOB_PARTITION cluster=$SLURM_CLUSTER_NAME cpt=$SLURM_CPUS_PER_TASK"\n'
        'echo "foo=$FOO home=${HOME:-unset}"\n'
        "echo oops >&2\n"
    )
    job_id = api.submit(
        script,
        name="hello",
        environment=["PATH=/usr/bin:/bin", "FOO=bar"],
        standard_output="out-%j-%x.log",
        cpus_per_task=2,
    )
    job = emu.wait_for_state(job_id, "COMPLETED", 10)
    assert job["standard_output"] == job["standard_error"] == f"{CWD}/out-{job_id}-hello.log"
    lines = emu.read_output(job_id).splitlines()
    assert lines[0] == f"id={job_id} name=hello nodes=node1 nn=1"
    assert lines[1] == f"part=debug cluster={emu.cluster} cpt=2"
    assert lines[2] == "foo=bar home=unset"
    assert lines[3] == "oops"
    assert emu.host_path(f"{CWD}/result.txt").read_text() == "written\n"
    status, body = api.job(job_id)
    info = body["jobs"][0]
    assert (status, info["job_state"], info["standard_output"]) == (200, ["COMPLETED"], job["standard_output"])
    assert info["nodes"] == "node1" and info["exit_code"]["return_code"]["number"] == 0


def test_a_jobs_temporary_folder_is_its_own_clusters(api: Api, emu: SlurmJobApiEmulator) -> None:
    """Two emulators on one machine are two clusters numbering jobs from 1: the result wrapper names its
    files in $TMPDIR by job id, so a shared /tmp let one test's job 2 read another's (CI, under xdist)."""
    job_id = api.submit('#!/bin/sh\nprintf "%s" "$TMPDIR" > tmpdir.txt\n')
    emu.wait_for_state(job_id, "COMPLETED", 10)
    tmpdir = emu.host_path(f"{CWD}/tmpdir.txt").read_text()
    assert emu.host_path("/").resolve() in Path(tmpdir).resolve().parents and Path(tmpdir).is_dir()
    # the job's own setting wins
    job_id = api.submit('#!/bin/sh\nprintf "%s" "$TMPDIR" > mine.txt\n', environment=["TMPDIR=/scratch"])
    emu.wait_for_state(job_id, "COMPLETED", 10)
    assert emu.host_path(f"{CWD}/mine.txt").read_text() == "/scratch"


def test_separate_stderr_and_default_output(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\necho out\necho err >&2\n", standard_error="/scratch/err-%j.txt")
    job = emu.wait_for_state(job_id, "COMPLETED", 10)
    assert job["standard_output"] == f"{CWD}/slurm-{job_id}.out"
    assert job["standard_error"] == f"/scratch/err-{job_id}.txt"
    assert emu.read_output(job_id) == "out\n"
    assert emu.read_output(job_id, "stderr") == "err\n"


def test_nonzero_exit_is_failed_with_the_return_code(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\nexit 3\n")
    job = emu.wait_for_state(job_id, ["FAILED", "COMPLETED"], 10)
    assert (job["state"], job["exit_code"], job["reason"]) == (["FAILED"], 3, "NonZeroExitCode")
    info = api.job(job_id)[1]["jobs"][0]
    assert info["exit_code"]["status"] == ["ERROR"] and info["exit_code"]["return_code"]["number"] == 3


def test_time_limit_is_enforced(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(SLEEP, time_limit={"set": True, "number": 1})
    job = emu.wait_for_state(job_id, "TIMEOUT", 10)
    assert job["reason"] == "TimeLimit" and job["signal"] == 15
    info = api.job(job_id)[1]["jobs"][0]
    assert info["job_state"] == ["TIMEOUT"] and info["time_limit"]["number"] == 1
    assert info["exit_code"]["signal"]["name"] == "TERM"
    assert api.db_job(job_id)[1]["jobs"][0]["state"]["current"] == ["TIMEOUT"]


def test_plain_int_time_limit(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(SLEEP, time_limit=1)
    assert emu.wait_for_state(job_id, "TIMEOUT", 10)["time_limit"] == 1


def test_cancel_goes_through_completing(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(SLEEP)
    pid = emu.wait_for_state(job_id, "RUNNING", 10)["pid"]
    status, body = api.cancel(job_id)
    assert (status, body["status"]) == (200, [])
    assert api.state(job_id) == ["CANCELLED", "COMPLETING"]
    job = emu.wait_for_state(job_id, "CANCELLED", 10)
    assert job["signal"] == 15 and job["pid"] is None
    assert processes_in_sessions({pid}) == []
    assert api.state(job_id) == ["CANCELLED"]
    status, body = api.cancel(job_id)
    assert body["status"][0]["error"]["code"] == 2021


def test_cancelling_a_pending_job_is_immediate(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(SLEEP, hold=True)
    api.cancel(job_id)
    assert api.state(job_id) == ["CANCELLED"]


def test_signal_without_cancel(api: Api, emu: SlurmJobApiEmulator) -> None:
    # The signal goes out once the script says its trap is set (its output file exists earlier than that).
    script = "#!/bin/bash\ntrap 'echo got USR1; exit 0' USR1\necho trap set\nwhile :; do sleep 60 & wait; done\n"
    job_id = api.submit(script)
    emu.wait_for_state(job_id, "RUNNING", 10)
    eventually(lambda: "trap set" in emu.read_output(job_id))
    _status, body = api.cancel(f"{job_id}?signal=USR1")
    assert body["status"] == []
    assert emu.wait_for_state(job_id, "COMPLETED", 10)["exit_code"] == 0
    assert "got USR1" in emu.read_output(job_id)


def test_queueing_reasons_and_node_allocation(api: Api, emu: SlurmJobApiEmulator) -> None:
    big = api.submit(SLEEP, minimum_nodes=3)
    assert emu.wait_for_state(big, "RUNNING", 10)["node_list"] == "node[1-3]"
    waiting = api.submit(SLEEP, minimum_nodes=2)
    behind = api.submit("#!/bin/bash\ntrue\n", minimum_nodes=1)
    elsewhere = api.submit("#!/bin/bash\ntrue\n", partition="gpu", minimum_nodes=None, nodes="2")
    assert emu.wait_for_state(elsewhere, "COMPLETED", 10)["node_list"] == "gpu-node[1-2]"
    jobs = {job["job_id"]: job for job in api.call("GET", f"/slurm/{V}/jobs/")[1]["jobs"]}
    assert (jobs[waiting]["job_state"], jobs[waiting]["state_reason"]) == (["PENDING"], "Resources")
    assert (jobs[behind]["job_state"], jobs[behind]["state_reason"]) == (["PENDING"], "Priority")
    api.cancel(big)
    assert emu.wait_for_state(waiting, "RUNNING", 10)["node_list"] == "node[1-2]"
    assert emu.wait_for_state(behind, "COMPLETED", 10)["nodes"] == ["node3"]
    api.cancel(waiting)


def test_request_bigger_than_the_partition_is_rejected(api: Api, emu: SlurmJobApiEmulator) -> None:
    status, body = api.call(
        "POST", f"/slurm/{V}/job/submit", {"job": job_desc(minimum_nodes=5), "script": "#!/bin/bash\n"}
    )
    assert status == 500
    assert body["errors"][0]["error"] == "Requested node configuration is not available"
    assert emu.jobs() == []


def test_array_with_throttle(api: Api, emu: SlurmJobApiEmulator) -> None:
    # Each task runs until the test creates ../go (at most 10 s), so what the test reads while two tasks
    # run cannot change under it however slow the machine is.
    script = (
        "#!/bin/bash\n"
        'echo "$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_JOB_ID"\n'
        "echo start $(date +%s.%N) >> ../spans.txt\n"
        "for _ in $(seq 200); do [ -e ../go ] && break; sleep 0.05; done\n"
        "echo end $(date +%s.%N) >> ../spans.txt\n"
    )
    master = api.submit(script, array="0-3%2", current_working_directory=f"{CWD}/array")
    emu.wait_for_state(master + 1, "RUNNING", 10)  # task 0: the array id ends on the last task
    emu.wait_for_state(master + 2, "RUNNING", 10)
    status, body = api.job(master)
    tasks = body["jobs"]
    assert status == 200 and [t["job_id"] for t in tasks] == [master + 1, master + 2, master + 3, master]
    assert [t["array_task_id"]["number"] for t in tasks] == [0, 1, 2, 3]
    assert {t["array_job_id"]["number"] for t in tasks} == {master}
    assert [t["array_max_tasks"]["number"] for t in tasks] == [2] * 4
    pending = [t for t in tasks if t["job_state"] == ["PENDING"]]
    assert len(pending) == 2 and {t["state_reason"] for t in pending} == {"JobArrayTaskLimit"}
    # jobs/state names a task by its record, as real slurmctld does (fixtures/slurm-24.11-arrays): a
    # pending task is still on the array's own record, a started one has its own id.
    own_ids = {0: master + 1, 1: master + 2, 2: master + 3, 3: master}
    for entry in api.call("GET", f"/slurm/{V}/jobs/state/?job_id={master}")[1]["jobs"]:
        record, task = (int(part) for part in entry["job_id"].split("_"))
        assert record == (master if entry["state"] == ["PENDING"] else own_ids[task]), entry
    spans = emu.host_path(f"{CWD}/spans.txt")
    eventually(lambda: spans.exists() and spans.read_text().count("start") == 2)
    emu.host_path(f"{CWD}/go").touch()
    for offset in range(4):
        emu.wait_for_state(master + offset, "COMPLETED", 10)
    assert emu.read_output(master + 3).strip() == f"{master} 2 {master + 3}"
    assert emu.job(master + 3)["standard_output"] == f"{CWD}/array/slurm-{master}_2.out"
    events = sorted(
        (float(stamp), 1 if kind == "start" else -1)
        for kind, stamp in (line.split() for line in spans.read_text().splitlines())
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2
    states = api.call("GET", f"/slurm/{V}/jobs/state/?job_id={master}")[1]["jobs"]
    assert sorted(s["job_id"] for s in states) == sorted(
        [f"{master + 1}_0", f"{master + 2}_1", f"{master + 3}_2", f"{master}_3"]
    )
    assert api.job(f"{master}_3")[1]["jobs"][0]["job_id"] == master
    assert len(api.db_job(master)[1]["jobs"]) == 4


@pytest.mark.parametrize(("spec", "indexes"), [("1,3,5", [1, 3, 5]), ("0-7:2", [0, 2, 4, 6])])
def test_array_specs(api: Api, emu: SlurmJobApiEmulator, spec: str, indexes: list[int]) -> None:
    master = api.submit("#!/bin/bash\ntrue\n", array=spec)
    assert [t["array_task_id"]["number"] for t in api.job(master)[1]["jobs"]] == indexes


def test_bad_array_spec_is_rejected(api: Api) -> None:
    status, body = api.call("POST", f"/slurm/{V}/job/submit", {"job": job_desc(array="3-1"), "script": "#!/bin/bash\n"})
    assert status == 500 and body["errors"][0]["error_number"] == 2081


def test_afterok_dependency(api: Api, emu: SlurmJobApiEmulator) -> None:
    first = api.submit("#!/bin/bash\nsleep 0.3\n")
    second = api.submit("#!/bin/bash\ntrue\n", dependency=f"afterok:{first}")
    info = api.job(second)[1]["jobs"][0]
    assert (info["job_state"], info["state_reason"], info["dependency"]) == (
        ["PENDING"],
        "Dependency",
        f"afterok:{first}(unfulfilled)",  # as slurmctld prints it
    )
    done = emu.wait_for_state(second, "COMPLETED", 10)
    assert done["start_time"] >= emu.job(first)["end_time"]


def test_dependency_outcomes(api: Api, emu: SlurmJobApiEmulator) -> None:
    failing = api.submit("#!/bin/bash\nexit 1\n")
    never = api.submit("#!/bin/bash\ntrue\n", dependency=f"afterok:{failing}")
    anyway = api.submit("#!/bin/bash\ntrue\n", dependency=f"afterany:{failing}")
    because = api.submit("#!/bin/bash\ntrue\n", dependency=f"afternotok:{failing}")
    emu.wait_for_state(anyway, "COMPLETED", 10)
    emu.wait_for_state(because, "COMPLETED", 10)
    job = emu.job(never)
    assert (job["state"], job["reason"]) == (["PENDING"], "DependencyNeverSatisfied")


def test_dependency_on_an_unknown_job_is_rejected(api: Api) -> None:
    status, body = api.call(
        "POST", f"/slurm/{V}/job/submit", {"job": job_desc(dependency="afterok:4242"), "script": "#!/bin/bash\n"}
    )
    assert status == 500 and body["errors"][0]["error"] == "Job dependency problem"


def test_hold_and_release(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n", hold=True)
    info = api.job(job_id)[1]["jobs"][0]
    assert (info["job_state"], info["state_reason"], info["hold"]) == (["PENDING"], "JobHeldUser", True)
    status, body = api.call("POST", f"/slurm/{V}/job/{job_id}", {"hold": False})
    assert status == 200 and body["results"][0]["job_id"] == job_id
    emu.wait_for_state(job_id, "COMPLETED", 10)


@pytest.mark.slurmapi_emulator(accounting_store_flags=("job_comment",))
def test_comment_round_trips_exactly_where_accounting_keeps_comments(api: Api, emu: SlurmJobApiEmulator) -> None:
    comment = 'airflow-ti:dag_ü/task.x/manual__2026-01-01T00:00:00+00:00/-1 "quoted" \\ back'
    job_id = api.submit("#!/bin/bash\ntrue\n", comment=comment)
    assert api.job(job_id)[1]["jobs"][0]["comment"] == comment
    emu.wait_for_state(job_id, "COMPLETED", 10)
    assert api.db_job(job_id)[1]["jobs"][0]["comment"]["job"] == comment


def test_accounting_keeps_no_comment_by_default_as_real_slurm(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n", comment="kept only in the queue")
    assert api.job(job_id)[1]["jobs"][0]["comment"] == "kept only in the queue"
    emu.wait_for_state(job_id, "COMPLETED", 10)
    assert api.db_job(job_id)[1]["jobs"][0]["comment"]["job"] == ""


def test_accounting_store_flags_are_checked() -> None:
    with pytest.raises(ValueError, match="job_coment"):
        SlurmJobApiEmulator(accounting_store_flags=("job_coment",))


@pytest.mark.slurmapi_emulator(min_job_age=0.5)
def test_min_job_age_moves_a_job_to_accounting_only(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\necho done\n", comment="keep-me", name="aged")
    emu.wait_for_state(job_id, "COMPLETED", 10)
    assert api.job(job_id)[0] == 200
    emu.wait_for_purge(job_id, 10)
    status, body = api.job(job_id)
    assert status == 404 and body["errors"][0]["error_number"] == 2017
    assert job_id not in [j["job_id"] for j in api.call("GET", f"/slurm/{V}/jobs/")[1]["jobs"]]
    assert api.call("GET", f"/slurm/{V}/jobs/state/?job_id={job_id}")[1]["jobs"] == []
    assert api.cancel(job_id)[1]["status"][0]["error"]["code"] == 2017
    (record,) = api.db_job(job_id)[1]["jobs"]
    assert record["state"]["current"] == ["COMPLETED"] and record["comment"]["job"] == ""  # as real Slurm
    assert record["name"] == "aged" and record["stdout_expanded"] == f"{CWD}/slurm-{job_id}.out"
    assert record["time"]["end"] >= record["time"]["start"] >= record["time"]["submission"] > 0
    status, body = api.call("GET", f"/slurmdb/{V}/jobs/?state=COMPLETED&job_name=aged&unknown_filter=1")
    assert [r["job_id"] for r in body["jobs"]] == [job_id]


@pytest.mark.slurmapi_emulator(min_job_age=3600)
def test_min_job_age_set_on_a_running_emulator_applies_to_the_jobs_that_end_next(
    api: Api, emu: SlurmJobApiEmulator
) -> None:
    emu.min_job_age = 0.5
    assert emu.min_job_age == 0.5
    job_id = api.submit("#!/bin/bash\ntrue\n")
    emu.wait_for_state(job_id, "COMPLETED", 10)
    emu.wait_for_purge(job_id, 10)  # not an hour
    assert api.job(job_id)[0] == 404


def test_purge_now(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n")
    emu.wait_for_state(job_id, "COMPLETED", 10)
    emu.purge(job_id)
    assert api.job(job_id)[0] == 404
    assert api.db_job(job_id)[1]["jobs"][0]["job_id"] == job_id


@pytest.mark.slurmapi_emulator(accounting_delay=0.5)
def test_accounting_delay_gives_an_empty_slurmdb_at_first(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit("#!/bin/bash\ntrue\n")
    status, body = api.db_job(job_id)
    assert (status, body["jobs"]) == (200, [])
    assert body["warnings"][0]["description"].endswith("found nothing")
    eventually(lambda: api.db_job(job_id)[1]["jobs"], timeout=5)


def test_jobs_state_with_a_job_id_list(api: Api, emu: SlurmJobApiEmulator) -> None:
    ids = [api.submit("#!/bin/bash\ntrue\n") for _ in range(3)]
    for job_id in ids:
        emu.wait_for_state(job_id, "COMPLETED", 10)
    status, body = api.call("GET", f"/slurm/{V}/jobs/state/?job_id={ids[0]}&job_id={ids[2]}&job_id=999999")
    assert status == 200
    assert body["jobs"] == [
        {"job_id": str(ids[0]), "state": ["COMPLETED"]},
        {"job_id": str(ids[2]), "state": ["COMPLETED"]},
    ]
    # Like slurmrestd 24.11: an encoded comma list is a 422 (error 9000); a raw comma is refused outright.
    status, body = api.call("GET", f"/slurm/{V}/jobs/state/?job_id={ids[0]}%2C{ids[2]}")
    assert status == 422 and body["errors"][0]["error_number"] == 9000


@pytest.mark.slurmapi_emulator(simulate=True)
def test_parallel_submits_get_distinct_ids(emu: SlurmJobApiEmulator) -> None:
    results: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submitter() -> None:
        client = Api(emu)
        try:
            for _ in range(10):
                job_id = client.submit("#!/bin/bash\n#EMULATOR runtime=0.01\n")
                with lock:
                    results.append(job_id)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=submitter) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == list(range(1, 81))


def test_fail_job_and_requeue(api: Api, emu: SlurmJobApiEmulator) -> None:
    lost = api.submit(SLEEP)
    emu.wait_for_state(lost, "RUNNING", 10)
    emu.fail_job(lost, "NODE_FAIL")
    assert api.state(lost) == ["NODE_FAIL"]
    again = api.submit("#!/bin/bash\necho run $SLURM_RESTART_COUNT\n[ $SLURM_RESTART_COUNT = 1 ] || sleep 60\n")
    emu.wait_for_state(again, "RUNNING", 10)
    emu.fail_job(again, "PREEMPTED", requeue=True)
    job = emu.wait_for_state(again, "COMPLETED", 10)
    assert job["restart_cnt"] == 1
    assert api.job(again)[1]["jobs"][0]["restart_cnt"] == 1
    assert emu.read_output(again) == "run 1\n"


def test_wait_for_state_times_out(api: Api, emu: SlurmJobApiEmulator) -> None:
    job_id = api.submit(SLEEP, hold=True)
    with pytest.raises(TimeoutError, match="PENDING"):
        emu.wait_for_state(job_id, "RUNNING", 0.2)


def test_stop_leaves_no_process_behind(tmp_path: Any) -> None:
    emu = SlurmJobApiEmulator(state_dir=tmp_path).start()
    api = Api(emu)
    try:
        ids = [api.submit("#!/bin/bash\nsleep 60 &\nsleep 60 &\nwait\n") for _ in range(3)]
        for job_id in ids:
            emu.wait_for_state(job_id, "RUNNING", 10)
        sessions = set(emu.spawned_pids)
        eventually(lambda: len(processes_in_sessions(sessions)) >= 9)
    finally:
        api.close()
        emu.stop()
    assert processes_in_sessions(sessions) == []
    assert not [t for t in threading.enumerate() if t.name.startswith(("slurm-emulator", "slurmapi-emulator"))]


def test_temporary_state_dir_is_removed_on_stop() -> None:
    with SlurmJobApiEmulator() as emu:
        state_dir = emu.state_dir
        assert (state_dir / "service-account-key.json").exists()
    assert not state_dir.exists()


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_older_api_versions_answer_the_same_shapes(api: Api, emu: SlurmJobApiEmulator, version: str) -> None:
    status, body = api.call(
        "POST", f"/slurm/{version}/job/submit", {"job": job_desc(), "script": "#!/bin/bash\ntrue\n"}
    )
    assert status == 200
    emu.wait_for_state(body["job_id"], "COMPLETED", 10)
    status, body = api.call("GET", f"/slurm/{version}/job/{body['job_id']}")
    assert status == 200 and body["jobs"][0]["job_state"] == ["COMPLETED"]
