"""The provider in a production-shaped deployment: PostgreSQL, Celery with two workers, two triggerers.

Each scenario asserts on the cluster's own record (the emulator's job list, queue and accounting) and
on the metadata database, as whoever runs the deployment would check it. ``SLURMAPI_DEPLOYMENT_N`` sets
how many submit tasks and how many sensors wait at once (default 300 each).
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import time

import pytest

from tests.harness.deployment import Deployment, describe
from tests.harness.standalone import wait_for

N = int(os.environ.get("SLURMAPI_DEPLOYMENT_N", "300"))
INTERVAL = 5.0  # the poll interval of every task and sensor of the suite
HEALTH_CHECK_THRESHOLD = 15  # deploy.sh: [triggerer] triggerer_health_check_threshold
# The dead triggerer's last heartbeat may be up to [triggerer] job_heartbeat_sec (5 s) old when it dies,
# and the survivor looks for unassigned triggers once per loop (1 s) after the threshold has passed.
TAKEOVER_DEADLINE = HEALTH_CHECK_THRESHOLD + 10
# Starting N tasks on two Celery workers: each start is a task process of its own.
START_TIMEOUT = max(600, N * 3)
TRIGGERERS = {"127.0.0.11": "triggerer-1", "127.0.0.12": "triggerer-2"}
# Each scenario bounds its own waits (START_TIMEOUT and the like); this is a backstop for a hang.
pytestmark = pytest.mark.timeout(max(1800, 4 * START_TIMEOUT))


def calls_per_tick(deployment: Deployment, ticks: int) -> tuple[float, dict[str, float], list[str]]:
    """Watch ``ticks`` poll intervals: the API calls per tick (submits aside), each triggerer's CPU seconds."""
    names = [name for name in TRIGGERERS.values() if deployment.alive(name)]
    cpu_before = {name: deployment.cpu_seconds(name) for name in names}
    start = time.time()
    wait_for(f"{ticks} ticks", lambda: time.time() - start >= ticks * INTERVAL, timeout=ticks * INTERVAL + 30)
    end = time.time()
    cpu = {name: round(deployment.cpu_seconds(name) - cpu_before[name], 2) for name in names}
    paths = [path for _, method, path in deployment.emulator.calls(start, end) if "submit" not in path]
    # Each live triggerer polls its share every tick: without this floor the bounds below would also pass
    # if no call were read from the emulator's log at all.
    assert len(paths) >= len(names) * (ticks - 1), f"{len(paths)} calls in {ticks} ticks from {names}: {paths}"
    return len(paths) / ((end - start) / INTERVAL), cpu, paths


def test_tasks_and_sensors_wait_across_two_triggerers_and_survive_losing_one(deployment: Deployment) -> None:
    """N deferrable submit tasks and N sensors (started in the triggerer) wait across both triggerers:
    the calls per tick stay within each triggerer's coalesced share. SIGKILL the triggerer holding the
    most: the other takes its triggers over within the health-check threshold, and then polls alone
    within one triggerer's share; no job is cancelled or submitted twice; every task succeeds on its
    first try."""
    waiting = 2 * N
    # N jobs submitted outside Airflow, and a DAG of one sensor per job.
    targets = deployment.submit_held(N, "external")
    deployment.write_sensor_dag("deployment_sensors", targets)
    sensors_run = deployment.trigger("deployment_sensors", {})
    submit_run = deployment.trigger("deployment_deferred", {"n": N, "runtime": 5, "hold": 1})

    deployment.wait_for_states(
        "deployment_deferred", submit_run, N, {"deferred"}, timeout=START_TIMEOUT, what="the submit tasks to defer"
    )
    deployment.wait_for_states(
        "deployment_sensors",
        sensors_run,
        N,
        {"deferred"},
        timeout=START_TIMEOUT,
        what="the sensors to defer",
        mapped=False,
    )

    def held() -> dict[str | None, int] | None:
        found = deployment.triggers_by_triggerer()
        return found if None not in found and sum(found.values()) == waiting else None

    holders = wait_for("every trigger to be held by a triggerer", held, timeout=120, interval=1)
    per_tick, cpu, paths = calls_per_tick(deployment, ticks=4)
    bound = 2 * (math.ceil(waiting / 500) + 1)
    print(
        f"\n{waiting} waiting triggers held {holders}: {per_tick:.1f} calls per tick (bound {bound}), "
        f"triggerer CPU {cpu}"
    )
    assert per_tick <= bound, paths[:40]

    victim_host = max(holders, key=lambda host: holders[host])
    victim = TRIGGERERS[str(victim_host)]
    survivor_host = next(host for host in TRIGGERERS if host != victim_host)
    killed_at = time.monotonic()
    deployment.kill(victim, signal.SIGKILL)

    def taken_over() -> bool:
        return deployment.triggers_by_triggerer() == {survivor_host: waiting}

    wait_for("the surviving triggerer to hold every trigger", taken_over, timeout=120, interval=0.5)
    takeover = time.monotonic() - killed_at
    print(f"SIGKILL {victim}: its {holders[victim_host]} triggers taken over in {takeover:.1f} s")
    assert takeover <= TAKEOVER_DEADLINE, f"the takeover took {takeover:.1f} s (threshold {HEALTH_CHECK_THRESHOLD} s)"

    per_tick, cpu, paths = calls_per_tick(deployment, ticks=3)
    alone = math.ceil(waiting / 500) + 1
    print(f"the survivor alone: {per_tick:.1f} calls per tick (bound {alone}), CPU {cpu}")
    assert per_tick <= alone, paths[:40]

    # Nothing touched the jobs: one RUNNING job per task, no cancel sent.
    jobs = deployment.jobs_by_task("deployment_deferred", submit_run, N)
    assert set(jobs.counts().values()) == {1}, describe(jobs)
    assert {job.state.base for found in jobs.jobs.values() for job in found} == {"RUNNING"}
    assert deployment.cancels() == []

    released = time.time()
    deployment.release()
    assert deployment.wait_for_run("deployment_deferred", submit_run, timeout=START_TIMEOUT) == "success"
    assert deployment.wait_for_run("deployment_sensors", sensors_run, timeout=START_TIMEOUT) == "success"
    states = list(deployment.task_states("deployment_deferred", submit_run).values())
    states += deployment.run_task_states("deployment_sensors", sensors_run).values()
    assert len(states) == waiting
    assert {state for state, _ in states} == {"success"}
    assert {tries for _, tries in states} == {1}, "a task needed a second try"
    jobs = deployment.jobs_by_task("deployment_deferred", submit_run, N)
    assert set(jobs.counts().values()) == {1}, describe(jobs)
    assert {job.state.base for found in jobs.jobs.values() for job in found} == {"COMPLETED"}
    assert deployment.cancels() == []
    latency = sorted(
        deployment.left_deferred_after(
            released + 5, ("deployment_deferred", submit_run), ("deployment_sensors", sensors_run)
        )
    )
    print(
        f"job end -> task queued to resume: p50 {statistics.median(latency):.1f} s, "
        f"p95 {latency[int(0.95 * (len(latency) - 1))]:.1f} s, max {latency[-1]:.1f} s"
    )
    deployment.start(victim)  # the next scenario has two triggerers again


WORKERS = {"127.0.0.21": "worker-1", "127.0.0.22": "worker-2"}


def wait_for_running_jobs(deployment: Deployment, dag_id: str, run_id: str, n: int, what: str) -> None:
    """Until each of the ``n`` tasks has exactly one job and it is RUNNING (held)."""

    def running() -> bool:
        jobs = deployment.jobs_by_task(dag_id, run_id, n)
        return all(len(found) == 1 and found[0].state.base == "RUNNING" for found in jobs.jobs.values())

    wait_for(what, running, timeout=START_TIMEOUT, interval=2)


def test_a_worker_task_process_killed_mid_wait_its_retry_reattaches(deployment: Deployment) -> None:
    """Sync-mode tasks wait in the Celery workers' task processes; SIGKILL those on one worker (as the
    OOM killer or a lost node would): each retry reattaches to its job, one job per task, none cancelled."""
    n, dag_id = 6, "deployment_sync"
    run_id = deployment.trigger(dag_id, {"n": n, "runtime": 5, "hold": 1})
    deployment.wait_for_states(dag_id, run_id, n, {"running"}, timeout=START_TIMEOUT, what="the sync tasks to run")
    wait_for_running_jobs(deployment, dag_id, run_id, n, "one RUNNING job per sync task")
    before = {i: found[0].job_id for i, found in deployment.jobs_by_task(dag_id, run_id, n).jobs.items()}

    rows = deployment.sql(
        "SELECT map_index, pid, hostname FROM task_instance WHERE dag_id=%s AND run_id=%s AND task_id='train'",
        dag_id,
        run_id,
    )
    by_worker: dict[str, list[tuple[int, int]]] = {}
    for index, pid, host in rows:
        by_worker.setdefault(WORKERS[host], []).append((index, pid))
    worker = max(by_worker, key=lambda name: len(by_worker[name]))
    ours = {p.pid: p for p in deployment.processes(worker)}
    victims = sorted(by_worker[worker])
    for index, pid in victims:
        assert pid in ours, f"task {index}'s pid {pid} is not a process of {worker}"
        ours[pid].kill()
    print(f"\nSIGKILL the task processes of {len(victims)} tasks on {worker}")
    killed = {index for index, _ in victims}

    def retried() -> bool:
        states = deployment.task_states(dag_id, run_id)
        return all(states[i] == ("running", 2) for i in killed)

    wait_for("the killed tasks' second tries to run", retried, timeout=300, interval=1)
    deployment.release()
    assert deployment.wait_for_run(dag_id, run_id, timeout=300) == "success"
    states = deployment.task_states(dag_id, run_id)
    assert states == {i: ("success", 2 if i in killed else 1) for i in range(n)}
    jobs = deployment.jobs_by_task(dag_id, run_id, n)
    assert {i: [j.job_id for j in found] for i, found in jobs.jobs.items()} == {i: [before[i]] for i in range(n)}
    assert {job.state.base for found in jobs.jobs.values() for job in found} == {"COMPLETED"}
    assert deployment.cancels() == []
    for index in killed:
        log = deployment.task_log(dag_id, run_id, index, attempt=2)
        assert f"Reattached to Slurm job {before[index]}" in log, log[-2000:]


def test_marked_and_cleared_deferred_tasks_cancel_exactly_their_jobs(deployment: Deployment) -> None:
    """With both triggerers running, a user marks 20 deferred tasks failed and clears 20 others: exactly
    those 40 jobs are cancelled; each cleared task submits once more and succeeds; the rest are untouched."""
    n, dag_id = 60, "deployment_deferred"
    marked, cleared = list(range(0, 20)), list(range(20, 40))
    run_id = deployment.trigger(dag_id, {"n": n, "runtime": 5, "hold": 1})
    deployment.wait_for_states(dag_id, run_id, n, {"deferred"}, timeout=START_TIMEOUT, what="the tasks to defer")
    wait_for_running_jobs(deployment, dag_id, run_id, n, "one RUNNING job per task")
    first = {i: found[0].job_id for i, found in deployment.jobs_by_task(dag_id, run_id, n).jobs.items()}

    for index in marked:
        deployment.set_state(dag_id, run_id, index, "failed")
    deployment.clear(dag_id, run_id, cleared)

    def settled() -> bool:
        jobs = deployment.jobs_by_task(dag_id, run_id, n).jobs
        return all([j.state.base for j in jobs[i]] == ["CANCELLED"] for i in marked) and all(
            [j.state.base for j in jobs[i]] == ["CANCELLED", "RUNNING"] for i in cleared
        )

    wait_for("the marked tasks' jobs cancelled, the cleared ones' resubmitted", settled, timeout=300, interval=2)
    cancelled = {int(line.split("/job/")[1].split()[0]) for line in deployment.cancels()}
    assert cancelled == {first[i] for i in marked + cleared}

    deployment.release()
    assert deployment.wait_for_run(dag_id, run_id, timeout=300) == "failed"  # the 20 marked failed
    states = deployment.task_states(dag_id, run_id)
    assert {i: states[i] for i in marked} == {i: ("failed", 1) for i in marked}
    assert {i: states[i] for i in cleared} == {i: ("success", 2) for i in cleared}
    untouched = [i for i in range(n) if i not in marked + cleared]
    assert {i: states[i] for i in untouched} == {i: ("success", 1) for i in untouched}
    jobs = deployment.jobs_by_task(dag_id, run_id, n).jobs
    assert all([j.state.base for j in jobs[i]] == ["CANCELLED"] for i in marked)
    assert all([j.state.base for j in jobs[i]] == ["CANCELLED", "COMPLETED"] for i in cleared)
    assert all([(j.job_id, j.state.base) for j in jobs[i]] == [(first[i], "COMPLETED")] for i in untouched)
    assert {int(line.split("/job/")[1].split()[0]) for line in deployment.cancels()} == cancelled
