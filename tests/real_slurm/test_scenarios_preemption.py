"""Preemption, node failures and requeues, through real Airflow (``dag.test()``): emulator and real Slurm.

Each DAG (``tests/dags/slurm_preemption_dags.py``) runs its job twice, waited on in the worker and
deferred; the test disrupts each job once the task has seen it run, past the provider (``backends.py``'s
``Disruptions``: the emulator's chaos hooks, or Slurm itself in the real cluster's chroot).

Facts of real Slurm 24.11.5 these rest on (``start_slurm.sh``: partition ``preemptible``, PriorityTier 1,
``PreemptMode=REQUEUE``; ``urgent``, PriorityTier 10; both ``OverSubscribe=EXCLUSIVE``;
``PreemptType=preempt/partition_prio``, ``AuthInfo=cred_expire=10``, ``SchedulerParameters=sched_interval=2``;
measured):

- A preempted job that may be requeued (``JobRequeue=1``, the default) is PENDING again at once, reason
  ``BeginTime``, ``restart_cnt`` 1, under the same id; ``jobs/state`` says ``PENDING``. It may start again
  cred_expire + 1 s after the requeue (default 120 s), once a scheduler pass comes (``sched_interval``,
  default 60 s). Its new run writes its output file afresh.
- A job submitted with ``requeue: false`` ends ``PREEMPTED`` (reason None, ``/slurm`` exit SIGNALED 15;
  accounting SUCCESS/0, its batch step CANCELLED by SIGTERM).
- A node set DOWN under a running job: requeued the same way; with ``requeue: false`` the job ends
  ``NODE_FAIL``, reason ``NodeDown`` (``/slurm`` exit SIGNALED 1, accounting ERROR/1). The node comes back by
  itself once its slurmd answers (``ReturnToService=2``); the tests RESUME it anyway.
- ``scontrol requeue`` of a job that COMPLETED and is still in the active queue: PENDING (reason None, then
  ``BeginTime``), ``restart_cnt`` 1, then its next run.
- Accounting keeps one record per run: the earlier ones ``PREEMPTED``, ``NODE_FAIL`` or ``PENDING+REQUEUED``
  (restart 0), then the latest (restart 1), in ``/slurmdb/.../job/{id}`` and in listings, where the order
  is not the runs' (a listing gave earlier runs of later jobs first): the provider keeps the record of
  the highest ``restart_cnt`` (then submit time, which Slurm resets at a requeue), as ``sacct`` does.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from backends import Backend, Disruptions

from airflow_provider_slurmapi.api import operations as ops
from airflow_provider_slurmapi.api.failures import SlurmJobPreemptedError, SlurmNodeFailureError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.fixtures import dag_file

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]
DAGS_MODULE = dag_file("slurm_preemption_dags")
DAGS = DAGS_MODULE.DAGS
TASKS = tuple(DAGS_MODULE.WAITS)


@pytest.fixture
def disruptions(backend: Backend) -> Iterator[Disruptions]:
    assert backend.disruptions is not None
    yield backend.disruptions
    backend.emu.clear_faults()
    backend.disruptions.nodes_up()  # whatever happened, every later test finds its node in service


class Disrupter(threading.Thread):
    """Does ``act(job_id)`` once to the job of each task of ``dag_id``, once its first run is RUNNING and the
    task has polled it since (so the task saw it run): a failure here is re-raised in the test."""

    def __init__(self, backend: Backend, dag_id: str, act: Callable[[int], None]) -> None:
        super().__init__(name=f"disrupt-{dag_id}", daemon=True)
        assert backend.disruptions is not None
        self.backend, self.disruptions, self.dag_id, self.act = backend, backend.disruptions, dag_id, act
        self.done: dict[str, int] = {}
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set() and len(self.done) < len(TASKS):
                for task_id in TASKS:
                    if task_id not in self.done:
                        self._try(task_id)
                time.sleep(0.2)
        except BaseException as err:  # pytest.fail's too
            self.error = err

    def _try(self, task_id: str) -> None:
        for job_id in self.disruptions.find(f"{self.dag_id}.{task_id}~"):
            state, restarts = self.disruptions.state(job_id)
            if state[:1] == ["RUNNING"] and restarts == 0:
                self._until_polled(job_id)
                self.act(job_id)
                self.done[task_id] = job_id

    def _until_polled(self, job_id: int, timeout: float = 120) -> None:
        """Until the task's wait has read the running job (a call about it, answered, after now)."""
        about = re.compile(rf"(?:job/|job_id=){job_id}(?:\D|$)")
        since = len(self.backend.emu.calls)
        deadline = time.monotonic() + timeout
        while not any(c.status == 200 and about.search(c.path) for c in self.backend.emu.calls[since:]):
            if self.stopping.is_set() or time.monotonic() > deadline:
                pytest.fail(f"the task never polled its running job {job_id} within {timeout:.0f}s")
            time.sleep(0.1)


@dataclass
class Run:
    hook: SlurmJobApiHook
    tis: dict[str, Any]
    jobs: dict[str, int]  # each task's job, as the test disrupted it
    log: str


def run(
    backend: Backend,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    act: Callable[[int], None],
    partition: str,
) -> Run:
    hook = backend.connect(monkeypatch)
    DAGS_MODULE.FAILURES.clear()
    capfd.readouterr()
    disrupter = Disrupter(backend, dag_id, act)
    disrupter.start()
    try:
        dag_run = DAGS[dag_id].test(run_conf={"cwd": backend.cwd, "partition": partition})
    finally:
        disrupter.stopping.set()
        disrupter.join(timeout=120)
    out, err = capfd.readouterr()
    if disrupter.error is not None:
        raise disrupter.error
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    assert set(disrupter.done) == set(TASKS), f"not every task's job ran and was disrupted: {disrupter.done}"
    return Run(hook, tis, disrupter.done, out + err)


def state(ti: Any) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


def accounted_runs(hook: SlurmJobApiHook, job_id: int, timeout: float = 60) -> list[SlurmJob]:
    """Accounting's listing of the job's name, once every record in it has ended (accounting may lag)."""
    name = hook.get_job(job_id).name
    deadline = time.monotonic() + timeout
    while True:
        jobs = [j for j in hook.list_accounted_jobs(job_name=name) if j.name == name]
        if (jobs and all(j.state.is_terminal for j in jobs)) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.5)


def assert_followed_to_completion(run: Run, backend: Backend) -> None:
    """Each task succeeded on its first try with its one job, which Slurm had requeued once."""
    for task_id, ti in run.tis.items():
        job_id = run.jobs[task_id]
        assert (state(ti), ti.try_number) == ("success", 1), run.log[-4000:]
        assert ti.xcom_pull(task_ids=task_id) == job_id, "the task's job is the one that was requeued"
        summary = ti.xcom_pull(task_ids=task_id, key="slurm_job")
        assert (summary["state"], summary.get("restart_count")) == ("COMPLETED", 1)
        # the log says so as it happens, and at the end
        assert f"Slurm job {job_id} was requeued" in run.log
        assert re.search(rf"Slurm job {job_id} \([^)]*\) ended COMPLETED, requeued 1 time,", run.log)
        # one submit: the task's name has one job, whose accounting reads as its last run (not the requeued one)
        runs = accounted_runs(run.hook, job_id)
        assert [(j.job_id, j.state.base, j.restart_count) for j in runs] == [(job_id, "COMPLETED", 1)]
        assert [j.job_id for j in run.hook.list_jobs() if j.name == runs[0].name] in ([job_id], [])
        client = run.hook.get_conn()
        last = client.run(ops.get_accounted_job(client.api_version, job_id))
        assert last is not None and (last.state.base, last.restart_count) == ("COMPLETED", 1)
        # the requeued run wrote its output afresh
        assert backend.host_path(f"{backend.cwd}/slurm-{job_id}.out").read_text() == f"run 1 of job {job_id}\n"


def test_a_preempted_job_is_followed_through_its_requeue_to_its_end(backend, disruptions, monkeypatch, capfd):
    done = run(
        backend, monkeypatch, capfd, "preempted_requeued", disruptions.preempt, disruptions.preemptible_partition
    )
    assert_followed_to_completion(done, backend)


def test_a_preempted_job_that_may_not_be_requeued_fails_its_task_as_preempted(backend, disruptions, monkeypatch, capfd):
    dag_id = "preempted_not_requeued"
    done = run(backend, monkeypatch, capfd, dag_id, disruptions.preempt, disruptions.preemptible_partition)
    for task_id, ti in done.tis.items():
        job_id = done.jobs[task_id]
        assert (state(ti), ti.try_number) == ("failed", 1)
        error = DAGS_MODULE.FAILURES[f"{dag_id}.{task_id}"]
        assert isinstance(error, SlurmJobPreemptedError), repr(error)
        assert (error.job_id, error.state, error.exit_signal) == (str(job_id), "PREEMPTED", 15)
        assert f"Slurm job {job_id} was requeued" not in done.log
        assert done.hook.get_job(job_id).state.base == "PREEMPTED"


def node_fails(disruptions: Disruptions) -> Callable[[int], None]:
    """The job's node goes DOWN, and is then put back in service (the next job needs it)."""

    def fail(job_id: int) -> None:
        disruptions.node_down(job_id)
        disruptions.nodes_up()

    return fail


def test_a_job_whose_node_fails_is_requeued_and_followed_to_its_end(backend, disruptions, monkeypatch, capfd):
    done = run(backend, monkeypatch, capfd, "node_failure_requeued", node_fails(disruptions), backend.partition)
    assert_followed_to_completion(done, backend)


def test_a_job_whose_node_fails_and_may_not_be_requeued_fails_its_task_as_a_node_failure(
    backend, disruptions, monkeypatch, capfd
):
    dag_id = "node_failure_not_requeued"
    done = run(backend, monkeypatch, capfd, dag_id, node_fails(disruptions), backend.partition)
    for task_id, ti in done.tis.items():
        job_id = done.jobs[task_id]
        assert (state(ti), ti.try_number) == ("failed", 1)
        error = DAGS_MODULE.FAILURES[f"{dag_id}.{task_id}"]
        assert isinstance(error, SlurmNodeFailureError), repr(error)
        # (its reason is not to be relied on: real Slurm said NodeDown, None or ReqNodeNotAvail)
        assert (error.job_id, error.state) == (str(job_id), "NODE_FAIL")
        assert done.hook.get_job(job_id).state.base == "NODE_FAIL"


def test_an_admins_requeue_of_a_job_that_completed_is_followed_when_the_task_had_not_seen_the_end(
    backend, disruptions, monkeypatch, capfd
):
    """The task polls every second; between two polls its job completes and an administrator requeues it
    (``scontrol requeue``). The task's polls are made to fail meanwhile (the emulator's Google layer
    answers 503), so that it cannot see the end before the requeue, however the timing falls."""

    def release_then_requeue(job_id: int) -> None:
        backend.emu.inject_fault("unavailable", count=None)
        try:
            backend.host_path(f"{backend.cwd}/release-{job_id}").write_text("")
            disruptions.wait_for(job_id, "complete", lambda s, restarts: s == ["COMPLETED"] and restarts == 0)
            disruptions.requeue(job_id)
            disruptions.wait_for(job_id, "go back to PENDING", lambda s, restarts: restarts == 1)
        finally:
            backend.emu.clear_faults()

    done = run(backend, monkeypatch, capfd, "requeued_after_it_completed", release_then_requeue, backend.partition)
    assert_followed_to_completion(done, backend)
