"""Kill paths under a real ``airflow standalone``: what happens to the Slurm job when Airflow's side dies.

- the worker of a sync-mode task is SIGKILLed mid-wait: the retry reattaches, one job in Slurm;
- the triggerer stops (SIGTERM) or dies (SIGKILL) mid-wait and starts again: the job is left running and
  the deferred task succeeds;
- a user marks a task failed while it waits in the worker: the job is cancelled (the operator's on_kill);
- a user marks a deferred task failed or success, or clears it: the job is cancelled within seconds; a
  cleared task's new try submits its own job (cancelling the first itself if the trigger has not yet),
  and a task cleared after it succeeded runs its job again;
- a deferred task's ``execution_timeout`` passes: the job is cancelled and the task fails (also when the
  task resumes late, and when the triggerer is stalled at the deadline).

The DAGs are in ``tests/standalone/dags/kill_path_dags.py``; each job runs until the test releases it.
What is asserted is what a user checks: the task instance's state and tries through the REST API, its log,
and in the emulator (the cluster) how many jobs carry the task instance's tag and how they ended.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime
from typing import Any

import pytest

from airflow_provider_slurmapi.api.identity import task_instance_tag
from airflow_provider_slurmapi.api.jobs import SlurmJob
from tests.harness.standalone import EmulatorProcess, Standalone, wait_for
from tests.standalone.dags.kill_path_dags import TIMEOUT_SECONDS, WORKDIR

pytestmark = [pytest.mark.standalone, pytest.mark.timeout(600)]

TASK = "train"
MAPPED = "train_mapped"
CANCEL_DEADLINE = 60  # "the job reads CANCELLED within seconds": what the tests allow


class Run:
    """One DAG run of a kill-path DAG and its task ``train``, as the test sees them."""

    def __init__(self, standalone: Standalone, dag_id: str) -> None:
        self.airflow = standalone
        self.emulator: EmulatorProcess = standalone.emulator
        self.dag_id = dag_id
        self.run_id = standalone.trigger(dag_id)
        self.tag = task_instance_tag(dag_id, TASK, self.run_id)

    def ti(self) -> dict[str, Any]:
        return self.airflow.task_instance(self.dag_id, self.run_id, TASK)

    def wait_for_task(self, *states: str, timeout: float = 120) -> dict[str, Any]:
        return self.airflow.wait_for_task(self.dag_id, self.run_id, TASK, states, timeout=timeout)

    def jobs(self) -> list[SlurmJob]:
        """Every job in the cluster tagged with this task instance, oldest first."""
        return self.emulator.jobs_of(self.dag_id, TASK, self.run_id)

    def wait_for_running_job(self, count: int = 1, *, timeout: float = 120) -> SlurmJob:
        """The newest of this task's jobs once there are ``count`` and it is RUNNING."""

        def running() -> SlurmJob | None:
            jobs = self.jobs()
            assert len(jobs) <= count, f"more than {count} job(s) tagged {self.tag}: {describe(jobs)}"
            return jobs[-1] if len(jobs) == count and jobs[-1].state.base == "RUNNING" else None

        return wait_for(f"job {count} of {self.tag} to run", running, timeout=timeout, log=self.emulator.log)

    def wait_for_job_state(self, job_id: int, base: str, *, timeout: float) -> SlurmJob:
        def reached() -> SlurmJob | None:
            job = next(j for j in self.jobs() if j.job_id == job_id)
            return job if job.state.base == base and job.state.is_terminal else None

        return wait_for(f"job {job_id} to read {base}", reached, timeout=timeout, log=self.emulator.log)

    def trigger_polls(self, job_id: int) -> int:
        """How often a trigger has asked the cluster for this job's state (the shared poller's batched GET)."""
        polled = re.compile(rf"GET /slurm/\S+/jobs/state/\S*[?&]job_id={job_id}(&|\s|$)")
        lines = self.emulator.log.read_text(errors="replace").splitlines()
        return sum(1 for line in lines if polled.search(line))

    def wait_for_trigger(self, job_id: int, *, more_than: int = 0, timeout: float = 120) -> int:
        """Wait until a triggerer runs this task's trigger: the job's state is polled (again)."""

        def polled() -> int:
            n = self.trigger_polls(job_id)
            return n if n > more_than else 0

        return int(wait_for(f"a trigger to poll job {job_id}", polled, timeout=timeout, log=self.airflow.log))

    def release(self, job_id: int) -> None:
        """Let the job end (COMPLETED): the file its script waits for."""
        path = self.emulator.host_path(WORKDIR) / f"release-{job_id}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def log(self, try_number: int) -> str:
        return self.airflow.task_log(self.dag_id, self.run_id, TASK, try_number)

    def wait_for_log(self, try_number: int, *texts: str, timeout: float = 60) -> str:
        """The try's log once it says one of ``texts``."""

        def says() -> str | None:
            log = self.log(try_number)
            return log if any(text in log for text in texts) else None

        what = f"try {try_number}'s log to say {' or '.join(map(repr, texts))}"
        return str(wait_for(what, says, timeout=timeout, log=self.airflow.log))

    def finish(self, *, timeout: float = 240) -> str:
        return self.airflow.wait_for_run(self.dag_id, self.run_id, timeout=timeout)


def describe(jobs: list[SlurmJob]) -> list[str]:
    return [f"{j.job_id} {j.describe_state()}" for j in jobs]


def test_sync_worker_killed_mid_wait_the_retry_reattaches(standalone: Standalone):
    run = Run(standalone, "kill_worker_sync")
    job = run.wait_for_running_job()
    ti = run.wait_for_task("running")
    assert ti["try_number"] == 1

    task = standalone.task_process(run.dag_id, run.run_id, TASK)
    task.kill()  # SIGKILL: no on_kill, no clean-up; as the OOM killer or a lost node would
    task.wait(timeout=30)

    def second_try() -> dict[str, Any] | None:
        now = run.ti()
        return now if now["try_number"] >= 2 and now["state"] in ("running", "success", "failed") else None

    ti = wait_for("the task's second try to start", second_try, timeout=180, log=standalone.log)
    assert (ti["try_number"], ti["state"]) == (2, "running"), ti
    run.wait_for_log(2, f"Reattached to Slurm job {job.job_id}")
    assert [j.job_id for j in run.jobs()] == [job.job_id], describe(run.jobs())
    assert run.jobs()[0].state.base == "RUNNING"  # the SIGKILL left the job alone

    run.release(job.job_id)
    assert run.finish() == "success"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("success", 2)
    (final,) = run.jobs()
    assert final.job_id == job.job_id and final.state.is_success, describe(run.jobs())
    assert f"Submitted Slurm job {job.job_id}" in run.log(1)
    assert "Reattached" not in run.log(1)
    assert run.emulator.cancel_calls(job.job_id) == []
    assert int(standalone.xcom(run.dag_id, run.run_id, TASK)) == job.job_id


def test_marking_a_sync_task_failed_while_it_waits_cancels_its_job(standalone: Standalone):
    """Airflow stops the task's process (SIGTERM): the operator's on_kill cancels the job."""
    run = Run(standalone, "kill_mark_failed_sync")
    job = run.wait_for_running_job()
    run.wait_for_task("running")

    standalone.set_task_state(run.dag_id, run.run_id, TASK, "failed")
    run.wait_for_job_state(job.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert run.emulator.cancel_calls(job.job_id), "the job ended CANCELLED but nobody sent a cancel"
    assert run.finish() == "failed"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("failed", 1), ti
    assert len(run.jobs()) == 1
    run.wait_for_log(1, f"Cancelling Slurm job {job.job_id} because the task was killed")


@pytest.mark.parametrize(("marked", "dag_id"), [("failed", "kill_mark_failed"), ("success", "kill_mark_success")])
def test_marking_a_deferred_task_failed_or_success_cancels_its_job(standalone: Standalone, marked: str, dag_id: str):
    run = Run(standalone, dag_id)
    job = run.wait_for_running_job()
    run.wait_for_task("deferred")
    run.wait_for_trigger(job.job_id)

    standalone.set_task_state(run.dag_id, run.run_id, TASK, marked)
    cancelled = run.wait_for_job_state(job.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert [j.job_id for j in run.jobs()] == [cancelled.job_id]
    assert run.emulator.cancel_calls(job.job_id), "the job ended CANCELLED but nobody sent a cancel"
    assert run.finish() == marked
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == (marked, 1), ti  # stays so: no retry, no second job
    assert len(run.jobs()) == 1


def assert_cleared_task_ran_anew(run: Run, first: SlurmJob) -> None:
    """After a clear: the first job CANCELLED (and ended before the second was submitted), the new try
    submitted its own job and succeeded with it, never reattaching to the first."""
    second = run.wait_for_running_job(2)
    assert second.job_id != first.job_id
    run.release(second.job_id)
    state = run.finish()
    if state != "success":  # CI keeps the output, not the files: say why, with every log of the task
        files = run.airflow.task_log_files(run.dag_id, run.run_id, TASK)
        pytest.fail(f"the new try ended {state}: {run.ti()}\n{describe(run.jobs())}\n{files[-6000:]}")
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("success", 2), ti
    jobs = run.jobs()
    assert [(j.job_id, j.state.base) for j in jobs] == [(first.job_id, "CANCELLED"), (second.job_id, "COMPLETED")]
    assert jobs[0].end_time and jobs[1].submit_time and jobs[0].end_time <= jobs[1].submit_time, describe(jobs)
    assert run.emulator.cancel_calls(second.job_id) == []
    assert f"Submitted Slurm job {second.job_id}" in run.log(2)
    assert "Reattached" not in run.log(2)


def test_clearing_a_deferred_task_cancels_its_job_and_the_new_try_submits_anew(standalone: Standalone):
    run = Run(standalone, "kill_clear")
    first = run.wait_for_running_job()
    run.wait_for_task("deferred")
    run.wait_for_trigger(first.job_id)

    standalone.clear_task(run.dag_id, run.run_id, TASK)
    run.wait_for_job_state(first.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert run.emulator.cancel_calls(first.job_id), "the job ended CANCELLED but nobody sent a cancel"
    # Whichever comes first, the old trigger's cancel or the new try's look-up, ends the same way.
    assert_cleared_task_ran_anew(run, first)


def test_a_cleared_task_cancels_its_earlier_job_itself_when_the_triggerer_is_stalled(standalone: Standalone):
    """The race of a clear made certain: the new try looks its task up while the old trigger, in a
    stalled triggerer, has not cancelled the first job yet. The new try cancels it, then submits."""
    run = Run(standalone, "kill_clear_stalled_triggerer")
    first = run.wait_for_running_job()
    run.wait_for_task("deferred")
    run.wait_for_trigger(first.job_id)

    with standalone.triggerer_frozen():
        standalone.clear_task(run.dag_id, run.run_id, TASK)
        log = run.wait_for_log(2, f"cancelled job {first.job_id} of an earlier run", timeout=180)
        assert "Reattached" not in log
        assert run.jobs()[0].state.base == "CANCELLED"
        run.wait_for_task("deferred", timeout=120)
    assert_cleared_task_ran_anew(run, first)


def test_clearing_a_task_that_succeeded_runs_its_job_again(standalone: Standalone):
    """A clear asks for a new run: the earlier COMPLETED job is not taken for the new try's result."""
    run = Run(standalone, "kill_clear_after_success")
    first = run.wait_for_running_job()
    run.release(first.job_id)
    assert run.finish() == "success"

    standalone.clear_task(run.dag_id, run.run_id, TASK)
    second = run.wait_for_running_job(2)
    run.release(second.job_id)

    def second_try_done() -> dict[str, Any] | None:
        ti = run.ti()
        return ti if ti["try_number"] == 2 and ti["state"] in ("success", "failed") else None

    ti = wait_for("the cleared task's new try to end", second_try_done, timeout=240, log=standalone.log)
    assert ti["state"] == "success", ti
    assert [(j.job_id, j.state.base) for j in run.jobs()] == [(first.job_id, "COMPLETED"), (second.job_id, "COMPLETED")]
    assert run.emulator.cancel_calls(first.job_id) == []
    assert int(standalone.xcom(run.dag_id, run.run_id, TASK)) == second.job_id


def test_deferred_execution_timeout_cancels_the_job(standalone: Standalone):
    run = Run(standalone, "kill_execution_timeout")
    job = run.wait_for_running_job()
    run.wait_for_task("deferred")
    assert run.finish(timeout=180) == "failed"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("failed", 1), ti
    run.wait_for_job_state(job.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert len(run.jobs()) == 1
    log = run.log(1)
    assert f"Cancelling Slurm job {job.job_id} because" in log
    # Resumed in time: execute_complete says so. Resumed late (a busy 2.11 SequentialExecutor): Airflow's
    # AirflowTaskTimeout, and on_kill cancels (the test below forces that path).
    assert "execution_timeout reached" in log or "AirflowTaskTimeout" in log, log


def test_deferred_execution_timeout_cancels_the_job_also_when_the_task_resumes_late(standalone: Standalone):
    """The trigger's timeout event is there in time, but the task only resumes after its execution_timeout
    (a busy executor; here: its DAG is paused meanwhile). Airflow 2.11 then times the task out before
    ``execute_complete`` runs, and only ``on_kill`` is left to cancel the job."""
    run = Run(standalone, "kill_execution_timeout_late")
    job = run.wait_for_running_job()
    started = run.wait_for_task("deferred")["start_date"]
    standalone.set_paused(run.dag_id, True)
    try:
        run.wait_for_task("scheduled", timeout=120)  # the trigger's timeout event; the task waits to resume
        assert run.jobs()[0].state.base == "RUNNING"
        wait_for(
            "the execution_timeout to be over",
            lambda: time.time() > datetime.fromisoformat(started).timestamp() + TIMEOUT_SECONDS + 2,
            timeout=120,
        )
    finally:
        standalone.set_paused(run.dag_id, False)
    assert run.finish(timeout=180) == "failed"
    assert run.ti()["state"] == "failed"
    run.wait_for_job_state(job.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert len(run.jobs()) == 1
    assert f"Cancelling Slurm job {job.job_id} because" in run.log(1)


def test_deferred_execution_timeout_cancels_the_job_also_when_the_triggerer_is_stalled(standalone: Standalone):
    """No trigger fires a timeout event: the triggerer is stalled past the execution_timeout. Airflow
    2.11's scheduler then times the deferral out itself and resumes the task to fail it: the task's
    execution_timeout is over, so Airflow raises AirflowTaskTimeout at once and the operator's on_kill
    cancels the job, while the triggerer still sleeps. Airflow 3 keeps the task deferred, and the
    trigger's timeout event, once the triggerer runs again, cancels it."""
    run = Run(standalone, "kill_execution_timeout_stalled")
    job = run.wait_for_running_job()
    started = run.wait_for_task("deferred")["start_date"]
    run.wait_for_trigger(job.job_id)
    with standalone.triggerer_frozen():
        if standalone.major < 3:
            run.wait_for_job_state(job.job_id, "CANCELLED", timeout=180)
            assert run.finish(timeout=180) == "failed"
            assert f"Cancelling Slurm job {job.job_id} because the task was killed" in run.log(1)
        else:
            wait_for(
                "the execution_timeout to be over",
                lambda: time.time() > datetime.fromisoformat(started).timestamp() + TIMEOUT_SECONDS + 2,
                timeout=120,
            )
            assert run.jobs()[0].state.base == "RUNNING"
    run.wait_for_job_state(job.job_id, "CANCELLED", timeout=CANCEL_DEADLINE)
    assert run.finish(timeout=180) == "failed"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("failed", 1), ti
    assert len(run.jobs()) == 1


def test_triggerer_restart_leaves_the_job_running_and_the_task_succeeds(standalone: Standalone):
    run = Run(standalone, "kill_triggerer_restart")
    job = run.wait_for_running_job()
    run.wait_for_task("deferred")
    polls = run.wait_for_trigger(job.job_id)

    for sig in (signal.SIGTERM, signal.SIGKILL):
        standalone.stop_triggerer(sig)
        # No triggerer runs: the task is still deferred and its job untouched.
        assert run.ti()["state"] == "deferred"
        (now,) = run.jobs()
        assert now.state.base == "RUNNING", f"after the triggerer's {sig.name}: {describe(run.jobs())}"
        assert run.emulator.cancel_calls(job.job_id) == []
        polls = run.trigger_polls(job.job_id)
        standalone.start_triggerer()
        # The new triggerer takes the trigger over (after a SIGKILL, once the dead one's heartbeat is old).
        polls = run.wait_for_trigger(job.job_id, more_than=polls, timeout=120)
        assert run.ti()["state"] == "deferred"

    run.release(job.job_id)
    assert run.finish() == "success"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("success", 1), ti
    (final,) = run.jobs()
    assert final.job_id == job.job_id and final.state.is_success, describe(run.jobs())
    assert run.emulator.cancel_calls(job.job_id) == []


def test_a_trigger_that_moves_to_another_triggerer_leaves_the_job_running(standalone: Standalone):
    """Triggerer HA: the first triggerer stalls, a second one takes its triggers over (the first looks
    dead once its heartbeat is older than the health-check threshold), then the first wakes up and
    drops the triggers it no longer owns. Airflow 3.3 drops them as if a user had acted (it calls the
    trigger's on_kill); the jobs must still not be cancelled, and the tasks succeed on their first try.
    The DAG has a plain task and a mapped one: a mapped task's state is read by its map index.

    It ends with one triggerer again, as the suite's other tests expect (on 2.11, a trigger run by the
    second triggerer, whose log server cannot take the port the first holds, is missing from its task's
    log: a later streaming test waited for lines it could never read)."""
    try:
        _trigger_moves(standalone)
    finally:
        procs = standalone.triggerer_processes()
        if len([p for p in procs if p.parent() not in procs]) != 1:
            if procs:
                standalone.stop_triggerer(signal.SIGTERM)
            standalone.start_triggerer()


def _trigger_moves(standalone: Standalone) -> None:
    run = Run(standalone, "kill_trigger_moves")
    job = run.wait_for_running_job()

    def mapped_job() -> SlurmJob | None:
        jobs = run.emulator.jobs_of(run.dag_id, MAPPED, run.run_id, 0)
        return jobs[0] if len(jobs) == 1 and jobs[0].state.base == "RUNNING" else None

    mapped = wait_for("the mapped task's job to run", mapped_job, timeout=120, log=run.emulator.log)
    run.wait_for_task("deferred")
    polls = run.wait_for_trigger(job.job_id)
    mapped_polls = run.wait_for_trigger(mapped.job_id)
    with standalone.triggerer_frozen():
        standalone.start_triggerer(alongside=True)
        # Only the new triggerer can poll while the first is stopped.
        run.wait_for_trigger(job.job_id, more_than=polls + 1, timeout=240)
        run.wait_for_trigger(mapped.job_id, more_than=mapped_polls + 1, timeout=240)

    mapped_logs = standalone.home / "logs" / f"dag_id={run.dag_id}" / f"run_id={run.run_id}" / f"task_id={MAPPED}"

    def dropped_by_the_first() -> bool:
        left = "is left running: its task is still deferred"
        mapped_log = "\n".join(p.read_text(errors="replace") for p in sorted(mapped_logs.rglob("attempt=*.log*")))
        return left in standalone.task_log_files(run.dag_id, run.run_id, TASK) and left in mapped_log

    wait_for("the first triggerer to drop the triggers it lost", dropped_by_the_first, timeout=120, log=standalone.log)
    assert run.jobs()[0].state.base == "RUNNING"
    assert run.emulator.jobs_of(run.dag_id, MAPPED, run.run_id, 0)[0].state.base == "RUNNING"
    assert run.emulator.cancel_calls(job.job_id) == []
    assert run.emulator.cancel_calls(mapped.job_id) == []
    run.release(job.job_id)
    run.release(mapped.job_id)
    assert run.finish() == "success"
    ti = run.ti()
    assert (ti["state"], ti["try_number"]) == ("success", 1), ti
    assert [(j.job_id, j.state.base) for j in run.jobs()] == [(job.job_id, "COMPLETED")]
    mapped_jobs = run.emulator.jobs_of(run.dag_id, MAPPED, run.run_id, 0)
    assert [(j.job_id, j.state.base) for j in mapped_jobs] == [(mapped.job_id, "COMPLETED")]
    assert run.emulator.cancel_calls(job.job_id) == []
    assert run.emulator.cancel_calls(mapped.job_id) == []
