"""A deferred job's staged output reaches the task's log through the real triggerer while the job runs.

``dag.test()`` runs a trigger in the task's own process, so only a real triggerer shows that what the trigger
logs reaches the log a user reads (the REST API's, which the UI shows) on Airflow 3.3 and 2.11. The job
prints ``LINES`` lines and then waits for the test to release it: the lines must be in the task's log while
the task is deferred and the job still running, and once in the log of the whole try, also when the
triggerer was killed in between and another one took the trigger over.
"""

from __future__ import annotations

import re
import signal

import pytest

from airflow_provider_slurmapi.plugins.output import PAGE_LINES
from tests.harness.standalone import NOBODY_PASSWORD, NOBODY_USER, Standalone, wait_for
from tests.standalone.dags.streaming_dags import BULK, LINES, MARKER, SECRET, WORKDIR

pytestmark = pytest.mark.standalone

DAG_ID = "streaming_deferred"
TASK = "train"


def start(standalone: Standalone) -> tuple[str, int, list[str]]:
    """A run of the DAG, once its job's first lines are in the task's log: its id, the job's, the lines."""
    run_id = standalone.trigger(DAG_ID)
    standalone.wait_for_task(DAG_ID, run_id, TASK, ("deferred",))

    def submitted() -> int:
        jobs = standalone.emulator.jobs_of(DAG_ID, TASK, run_id)
        return jobs[0].job_id if jobs else 0

    job_id = int(wait_for("the task's job", submitted, timeout=60, log=standalone.log))
    lines = [f"[{job_id} stdout] {MARKER} {i}" for i in range(1, LINES + 1)]

    def streamed() -> str | None:
        log = standalone.task_log(DAG_ID, run_id, TASK, 1)
        return log if all(line in log for line in lines) else None

    wait_for("the job's lines in the task's log", streamed, timeout=120, interval=1, log=standalone.log)
    return run_id, job_id, lines


def polls(standalone: Standalone, job_id: int) -> int:
    """How often a trigger has asked the cluster for this job's state (the shared poller's batched GET)."""
    polled = re.compile(rf"GET /slurm/\S+/jobs/state/\S*[?&]job_id={job_id}(&|\s|$)")
    return sum(1 for line in standalone.emulator.log.read_text(errors="replace").splitlines() if polled.search(line))


def test_a_deferred_jobs_output_reaches_the_task_log_while_it_runs(standalone: Standalone):
    run_id, job_id, lines = start(standalone)
    # still running, still deferred: the lines came from the triggerer as the job printed them
    with standalone.emulator.client() as client:
        job = client.get_job(job_id)
    assert job.state.base == "RUNNING", job.describe_state()
    assert standalone.task_instance(DAG_ID, run_id, TASK)["state"] == "deferred"
    if standalone.major >= 3:  # the job's page shows them live, as the task's log does
        admin = standalone.session()

        def shown() -> str | None:  # (a page load that took too long on a busy machine answers 504)
            page = admin.get(f"{standalone.url}/slurmapi/jobs/{job_id}", timeout=30)
            return page.text if page.status_code == 200 and 'id="logged-tail"' in page.text else None

        text = str(wait_for("the job's page to show its output", shown, timeout=60, log=standalone.log))
        assert "Live: the last lines" in text and "stdout</span>" in text and SECRET not in text

    standalone.wait_for_worker_exit(DAG_ID, run_id, TASK)
    release = standalone.emulator.host_path(WORKDIR) / f"release-{job_id}"
    release.touch()
    assert standalone.wait_for_run(DAG_ID, run_id) == "success"
    log = standalone.task_log(DAG_ID, run_id, TASK, 1)
    for line in lines:
        assert log.count(line) == 1, (line, log[-3000:])
    assert f"[{job_id} stdout] released" in log, log[-3000:]
    assert f"[{job_id} stdout] token is ***" in log and SECRET not in log
    uri = standalone.xcom(DAG_ID, run_id, TASK, "slurm_output_uri")
    assert uri.startswith("gs://slurmapi-staging/standalone/") and uri.endswith(f"/{job_id}/run-0"), uri
    if standalone.major >= 3:
        assert_the_pages_show_the_output_as_the_log_does(standalone, job_id)


def assert_the_pages_show_the_output_as_the_log_does(standalone: Standalone, job_id: int) -> None:
    """The job's page (its last lines) and its output pages (all of them, paged), masked as the log is; a
    user who may not read the DAG's task logs gets none of it."""
    admin = standalone.session()
    total = 1 + LINES + BULK + 1  # the token line, the marked lines, the bulk, "released"
    url = f"{standalone.url}/slurmapi/jobs/{job_id}/output"
    first = admin.get(url, timeout=30)
    assert first.status_code == 200, first.text[-2000:]
    assert f"{total} lines, page 1 of 2" in first.text and 'id="next"' in first.text, first.text[:3000]
    assert "token is ***" in first.text and SECRET not in first.text
    assert "     1 stdout</span> token is ***" in first.text
    assert f"{PAGE_LINES:6d} stdout</span> bulk {PAGE_LINES - 1 - LINES}" in first.text
    second = admin.get(url, params={"page": 2}, timeout=30)
    assert f"{total:6d} stdout</span> released" in second.text and 'id="previous"' in second.text
    assert "bulk 1\n" not in second.text  # only its own lines
    page = admin.get(f"{standalone.url}/slurmapi/jobs/{job_id}", timeout=30)
    assert f"The whole output, {total} lines, paged" in page.text and "released" in page.text
    assert SECRET not in page.text
    nobody = standalone.session(NOBODY_USER, NOBODY_PASSWORD)
    assert nobody.get(url, timeout=30).status_code == 403


def test_a_triggerer_killed_mid_stream_leaves_no_line_logged_twice(standalone: Standalone):
    """The trigger keeps how far it logged (XCom ``slurm_stream_position``); the one that replaces it after
    the triggerer's SIGKILL goes on from there: each line is in the try's log once, none missing."""
    run_id, job_id, lines = start(standalone)

    def kept() -> bool:
        position = standalone.xcom(DAG_ID, run_id, TASK, "slurm_stream_position")
        return bool(position) and position["offsets"]["stdout"] > 0

    wait_for("the trigger to keep its position", kept, timeout=60, log=standalone.log)
    before = polls(standalone, job_id)
    standalone.stop_triggerer(signal.SIGKILL)
    standalone.start_triggerer()
    # the new triggerer runs the trigger (after the dead one's heartbeat is old) and follows the job again
    wait_for("a new trigger to poll the job", lambda: polls(standalone, job_id) > before, timeout=120)
    assert standalone.task_instance(DAG_ID, run_id, TASK)["state"] == "deferred"

    standalone.wait_for_worker_exit(DAG_ID, run_id, TASK)
    (standalone.emulator.host_path(WORKDIR) / f"release-{job_id}").touch()
    assert standalone.wait_for_run(DAG_ID, run_id) == "success"
    log = standalone.task_log(DAG_ID, run_id, TASK, 1)
    for line in [*lines, f"[{job_id} stdout] released"]:
        assert log.count(line) == 1, (line, log[-3000:])
