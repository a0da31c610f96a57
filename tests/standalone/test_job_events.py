"""``SlurmJobEventTrigger`` under a real triggerer (Airflow 3.3 ``airflow standalone``).

A DAG scheduled on an asset watched by the trigger (``tests/standalone/dags/job_event_dags.py``) runs once
per matching Slurm job that ends, and for no other job; after a triggerer restart it does not run again for
the jobs it has already seen, and does for the job that ended while no triggerer ran (the watcher's
watermark lives in the asset's state store). The jobs are submitted outside Airflow, straight to the
cluster (the emulator process).
"""

from __future__ import annotations

import functools
import signal
from typing import Any

import pytest

from airflow_provider_slurmapi.api.ended import EndedJobFilter
from airflow_provider_slurmapi.api.spec import JobSpec
from tests.harness.standalone import Standalone, airflow_major, wait_for
from tests.standalone.dags.job_event_dags import DAG_ID, NAME_PREFIX

pytestmark = [
    pytest.mark.standalone,
    pytest.mark.timeout(600),
    pytest.mark.skipif(airflow_major() < 3, reason="event-driven scheduling (AssetWatcher) is Airflow 3+"),
]


def watcher_line(**wanted: Any) -> str:
    """What the watcher with this filter logs when it starts (its state key names the filter)."""
    return f"Slurm job watcher slurmapi.ended_jobs.{EndedJobFilter.of(**wanted).digest()} "


WATCHER_LINE = watcher_line(name_prefix=NAME_PREFIX, states=["COMPLETED"])
EXAMPLE_LINE = watcher_line(name_prefix="pretrain-", states=["COMPLETED"])


def submit(standalone: Standalone, name: str, script: str = "#!/bin/bash\necho done\n") -> int:
    spec = JobSpec.build(script, {"name": name, "current_working_directory": "/home/airflow", "time_limit": 5})
    with standalone.emulator.client() as client:
        return int(client.submit_job(spec).job_id)


def wait_ended(standalone: Standalone, job_ids: list[int]) -> None:
    with standalone.emulator.client() as client:

        def ended(job_id: int) -> bool:
            return bool(client.get_job(job_id).state.is_terminal)

        for job_id in job_ids:
            wait_for(f"job {job_id} to end", functools.partial(ended, job_id), timeout=120)


def watcher_starts(standalone: Standalone, line: str = WATCHER_LINE) -> int:
    """How often a watcher has started, in the standalone's log and those of triggerers started since."""
    logs = [standalone.log, *standalone.triggerer_logs]
    return sum(log.read_text(errors="replace").count(line) for log in logs if log.exists())


def runs(standalone: Standalone, dag_id: str = DAG_ID) -> list[dict[str, Any]]:
    reply = standalone.session().get(f"{standalone.api}/dags/{dag_id}/dagRuns", timeout=30)
    assert reply.status_code == 200, reply.text
    return list(reply.json()["dag_runs"])


def fired_job_ids(standalone: Standalone) -> list[int]:
    """The job ids of the asset's events (each event's extra is the trigger's payload)."""
    s = standalone.session()
    assets = s.get(f"{standalone.api}/assets", params={"name_pattern": "slurm-job-events-test"}, timeout=30).json()
    (asset,) = assets["assets"]
    events = s.get(f"{standalone.api}/assets/events", params={"asset_id": asset["id"]}, timeout=30).json()
    return sorted(int(e["extra"]["payload"]["job_id"]) for e in events["asset_events"])


def finished_runs(standalone: Standalone, count: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        found = runs(standalone)
        return found if len(found) >= count and all(r["state"] in ("success", "failed") for r in found) else None

    return list(wait_for(f"{count} finished runs of {DAG_ID}", done, timeout=180, interval=1, log=standalone.log))


def test_a_dag_runs_once_per_matching_job_that_ends_and_not_again_after_a_triggerer_restart(standalone: Standalone):
    wait_for("the Slurm job watcher to start", lambda: watcher_starts(standalone) >= 1, timeout=180, log=standalone.log)
    # Jobs that must not start the DAG end first: a failed one with the watched prefix, and another name.
    others = [submit(standalone, f"{NAME_PREFIX}bad", "#!/bin/bash\nexit 3\n"), submit(standalone, "unwatched-job")]
    wait_ended(standalone, others)
    # One job at a time: events that reach Airflow together start one run that holds them all.
    matching = []
    for n in range(3):
        matching.append(submit(standalone, f"{NAME_PREFIX}{n}"))
        finished_runs(standalone, n + 1)

    first = finished_runs(standalone, 3)
    assert [r["state"] for r in first] == ["success"] * 3
    assert fired_job_ids(standalone) == sorted(matching)
    pulled = [standalone.xcom(DAG_ID, r["dag_run_id"], "evaluate") for r in first]
    assert sorted(pulled) == sorted([job_id] for job_id in matching), "each run sees the job that started it"

    # The triggerer stops; a job ends meanwhile; the triggerer starts again. The watcher resumes from
    # its stored watermark: the three jobs it fired for are not fired again, the new one is.
    starts = watcher_starts(standalone)
    standalone.stop_triggerer(signal.SIGTERM)
    later = submit(standalone, f"{NAME_PREFIX}while-down")
    wait_ended(standalone, [later])
    standalone.start_triggerer()
    wait_for("the watcher to start again", lambda: watcher_starts(standalone) > starts, timeout=180, log=standalone.log)

    after = finished_runs(standalone, 4)
    assert len(after) == 4, [r["dag_run_id"] for r in after]
    assert fired_job_ids(standalone) == sorted([*matching, later])


def test_the_example_dag_runs_when_a_pretrain_job_completes(standalone: Standalone):
    """``example_dags/example_slurm_job_events.py`` as shipped (it polls every 60 s)."""
    wait_for("the example's watcher to start", lambda: watcher_starts(standalone, EXAMPLE_LINE), timeout=180)
    job_id = submit(standalone, "pretrain-demo")
    wait_ended(standalone, [job_id])

    def finished() -> dict[str, Any] | None:
        found = runs(standalone, "example_slurm_job_events")
        return found[0] if found and found[0]["state"] in ("success", "failed") else None

    run = wait_for("a run of example_slurm_job_events", finished, timeout=240, interval=2, log=standalone.log)
    assert run["state"] == "success"
    assert standalone.xcom("example_slurm_job_events", run["dag_run_id"], "evaluate") == ["pretrain-demo"]
