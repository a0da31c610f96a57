"""Simulated-run mode: the same state machine without processes, cheap enough for thousands of jobs."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from tests.harness.emulator import Api, V, job_desc


@pytest.mark.slurmapi_emulator(simulate=True)
def test_directives_set_runtime_and_exit_code(api: Api, emu: SlurmJobApiEmulator) -> None:
    ok = api.submit("#!/bin/bash\n#EMULATOR runtime=1.5\nrm -rf /\n")
    bad = api.submit("#!/bin/bash\n#EMULATOR runtime=0.1 exit=4\n")
    done = emu.wait_for_state(ok, "COMPLETED", 5)
    # It ran for its runtime, as its record says in whole seconds (a look right after submit may find it
    # still PENDING on a busy machine).
    assert done["exit_code"] == 0 and done["end_time"] - done["start_time"] >= 1, done
    assert emu.wait_for_state(bad, "FAILED", 5)["exit_code"] == 4
    assert emu.spawned_pids == []


@pytest.mark.slurmapi_emulator(simulate=True)
def test_simulated_cancel_and_timeout(api: Api, emu: SlurmJobApiEmulator) -> None:
    long = api.submit("#!/bin/bash\n#EMULATOR runtime=60\n")
    limited = api.submit("#!/bin/bash\n#EMULATOR runtime=60\n", time_limit=1)
    emu.wait_for_state(long, "RUNNING", 5)
    api.cancel(long)
    assert api.state(long) == ["CANCELLED", "COMPLETING"]
    assert emu.wait_for_state(long, "CANCELLED", 5)["signal"] == 15
    assert emu.wait_for_state(limited, "TIMEOUT", 5)["reason"] == "TimeLimit"


@pytest.mark.slurmapi_emulator(simulate=True)
def test_held_runs_start_their_clock_when_released(api: Api, emu: SlurmJobApiEmulator) -> None:
    held = api.submit("#!/bin/bash\n#EMULATOR runtime=0.1 hold=1\n")
    free = api.submit("#!/bin/bash\n#EMULATOR runtime=0.5\n")
    emu.wait_for_state(free, "COMPLETED", 5)
    # Five times its runtime later, the held job still runs: its clock has not started.
    assert api.state(held) == ["RUNNING"]
    assert emu.release_held() == 1
    assert emu.wait_for_state(held, "COMPLETED", 5)["exit_code"] == 0
    assert emu.release_held() == 0


def test_two_thousand_jobs(tmp_path_factory: pytest.TempPathFactory) -> None:
    with SlurmJobApiEmulator(
        simulate=True, partitions={"debug": 500}, state_dir=tmp_path_factory.mktemp("load")
    ) as emu:
        api = Api(emu)
        try:
            ids = []
            for index in range(2000):
                job = job_desc(name=f"load{index}", array=None)
                script = f"#!/bin/bash\n#EMULATOR runtime={0.05 + (index % 7) * 0.05:.2f}\n"
                status, body = api.call("POST", f"/slurm/{V}/job/submit", {"job": job, "script": script})
                assert status == 200
                ids.append(body["job_id"])
            assert ids == list(range(1, 2001))
            query = "&job_id=".join(str(job_id) for job_id in ids[:500])
            status, body = api.call("GET", f"/slurm/{V}/jobs/state/?job_id={query}")
            assert status == 200 and len(body["jobs"]) == 500
            for job_id in ids:
                emu.wait_for_state(job_id, "COMPLETED", 60)
            status, body = api.call("GET", f"/slurm/{V}/jobs/state/")
            assert {tuple(job["state"]) for job in body["jobs"]} == {("COMPLETED",)}
            assert len(body["jobs"]) == 2000
        finally:
            api.close()
