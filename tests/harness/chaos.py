"""The chaos harness: N submit-and-wait tasks with retries through real Airflow while a fifth of all calls fail.

Used by ``tests/integration/test_chaos_airflow.py``, ``tests/real_slurm/test_chaos_real.py`` and the
benchmark that prints its figures, ``python -m benchmarks.chaos``.

The DAGs are ``tests/dags/slurm_chaos_dags.py``: N mapped ``SlurmSubmitJobOperator`` tasks, half waiting
in the worker and half deferred, ``retries=5`` and a ``retry_delay`` longer than a slow reply. Each DAG
runs with ``dag.test()`` (Airflow's own task runner; deferred tasks run their trigger in line; a task
that fails goes up_for_retry and is run again once its retry_delay has passed) against a simulated-run
emulator with seeded faults on every kind of call:

* per call (``rate`` of every call, and more on submits and accounting reads): 503 UNAVAILABLE,
  429 RESOURCE_EXHAUSTED, 500 INTERNAL, connection resets, truncated JSON, replies slower than the
  client's timeout, 502 from slurmdb (slurmdbd down), token endpoint errors, and submits Slurm accepted
  whose reply never reached the client or came back as 503 UNAVAILABLE / 504 DEADLINE_EXCEEDED;
* per job (seeded, by a thread watching the cluster): NODE_FAIL or PREEMPTED of a running job that Slurm
  requeues, a job purged from the active queue early (while running, or right after it ended), and every
  access token revoked early.

``chaos`` is the provider; ``chaos_naive`` the baseline: the same tasks, an operator that submits, submits
again when the submit call fails, and submits anew on every task try.
"""

from __future__ import annotations

import contextlib
import os
import random
import runpy
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_slurmapi.emulator import Call, SlurmJobApiEmulator
    from tests.harness.real_slurm import RealSlurm

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "tests" / "dags" / "slurm_chaos_dags.py"
# Faults on every call, split evenly; lost replies hit submits only and slurmdbd_down /slurmdb paths only.
GENERIC_FAULTS = ("unavailable", "resource_exhausted", "internal", "reset", "malformed", "slow")
# The client's attempts per call on the chaos connection (its first and 3 retries).
CLIENT_ATTEMPTS = 4
# Submits Slurm accepted whose answer the client never saw, or saw as a Google 5xx (fate unknown).
SUBMIT_FAULTS = ("lost_reply", "unavailable_after", "deadline_exceeded_after")
FAULT_KINDS = (*GENERIC_FAULTS, "slurmdbd_down", "token_error", *SUBMIT_FAULTS)
# What happens to a job while it runs, each with its share of ``job_event_rate``.
JOB_EVENTS = ("node_fail_requeued", "preempted_requeued", "purged_running", "purged_ended")
TOKEN_EXPIRY = "tokens_expired"
EVENT_KINDS = (*JOB_EVENTS, TOKEN_EXPIRY)
CLIENT_TIMEOUT = 1.0
SLOW_REPLY = 1.5  # past the client's timeout, shorter than the DAG's retry_delay
TOKEN_FAULT_RATE = 0.5


def arm_faults(emu: SlurmJobApiEmulator, rate: float) -> None:
    """Seeded faults (the emulator's seed) on ``rate`` of every call; submits, slurmdb reads and tokens get more.

    The first submits meet each submit fault once for certain (a run's own timing decides which call
    draws which seeded fault, so a short run could otherwise miss one kind); then each has its share.
    """
    for kind in SUBMIT_FAULTS:
        emu.inject_fault(kind, count=1, path_contains="/job/submit", method="POST")
    after = 1 - (1 - rate) ** (1 / len(SUBMIT_FAULTS))
    for kind in SUBMIT_FAULTS:
        emu.inject_fault(kind, count=None, probability=after, path_contains="/job/submit", method="POST")
    emu.inject_fault("slurmdbd_down", count=None, probability=rate)
    each = 1 - (1 - rate) ** (1 / len(GENERIC_FAULTS))
    for kind in GENERIC_FAULTS:
        emu.inject_fault(kind, count=None, probability=each, delay=SLOW_REPLY)
    # The token endpoint is asked rarely (once per process, then after each revocation): half its requests.
    emu.inject_fault("token_error", count=None, probability=max(rate, TOKEN_FAULT_RATE))


class ClusterChaos:
    """A thread that does to each new job what a cluster does now and then, seeded; counts what it did.

    When a job is first seen running it draws its fate: requeued after NODE_FAIL or PREEMPTED (Slurm
    keeps the job id and runs it again), purged from the active queue while running or as soon as it
    ends (read from accounting from then on), or nothing; independently, every access token may be
    revoked (the next call gets 401).
    """

    def __init__(self, emu: SlurmJobApiEmulator, seed: int, job_event_rate: float, expiry_rate: float) -> None:
        self.emu = emu
        self.random = random.Random(seed)
        self.job_event_rate = job_event_rate
        self.expiry_rate = expiry_rate
        self.events: Counter[str] = Counter()
        self._seen: set[int] = set()
        self._purge_when_ended: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cluster-chaos", daemon=True)

    def __enter__(self) -> ClusterChaos:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            for job in self.emu.jobs():
                self._visit(job)

    def _visit(self, job: dict[str, Any]) -> None:
        job_id = job["job_id"]
        if job_id in self._purge_when_ended and job["state"] == ["COMPLETED"] and job["in_queue"]:
            self._purge_when_ended.discard(job_id)
            self.emu.purge(job_id)
            self.events["purged_ended"] += 1
        if job_id in self._seen or job["state"] != ["RUNNING"]:
            return
        self._seen.add(job_id)
        if self.random.random() < self.expiry_rate:
            self.emu.expire_tokens()
            self.events[TOKEN_EXPIRY] += 1
        if self.random.random() >= self.job_event_rate:
            return
        event = self.random.choice(JOB_EVENTS)
        try:
            if event == "purged_ended":
                self._purge_when_ended.add(job_id)
                return
            if event == "purged_running":
                self.emu.purge(job_id)
            else:
                self.emu.fail_job(job_id, "NODE_FAIL" if event == "node_fail_requeued" else "PREEMPTED", requeue=True)
        except ValueError:  # it ended between the look and the blow: nothing happened to it
            return
        self.events[event] += 1


@dataclass
class ChaosRun:
    """What one chaos run left behind: the task instances, the emulator's jobs, calls and faults."""

    dag_id: str
    tasks: int
    seconds: float
    ti_states: dict[str, str]
    tries: int
    jobs: list[dict[str, Any]]
    calls: list[Call]
    token_requests: int
    faults: Counter[str]
    events: Counter[str]
    job_tags: list[str | None] = field(default_factory=list)  # each job's task instance (by its name)
    jobs_per_tag: Counter[str] = field(init=False)

    def __post_init__(self) -> None:
        self.jobs_per_tag = Counter(tag for tag in self.job_tags if tag is not None)

    @property
    def tasks_failed(self) -> int:
        return sum(1 for state in self.ti_states.values() if state != "success")

    @property
    def duplicates(self) -> int:
        """Jobs beyond the first of their task instance."""
        return sum(count - 1 for count in self.jobs_per_tag.values())

    @property
    def lost(self) -> int:
        """Task instances with no COMPLETED job of their own."""
        completed = {tag for job, tag in zip(self.jobs, self.job_tags, strict=True) if job["state"] == ["COMPLETED"]}
        return sum(1 for tag in self.ti_states if tag not in completed)

    @property
    def total_calls(self) -> int:
        """Every request the provider made: callSlurmRestApi and the token endpoint, faulted ones included."""
        return len(self.calls) + self.token_requests + self.faults["token_error"]

    @property
    def fault_rate(self) -> float:
        return sum(self.faults.values()) / max(1, self.total_calls)


def load_dags() -> dict[str, Any]:
    """The chaos DAG file's globals (``DAGS``, ``RETRIES``), run from its path."""
    return runpy.run_path(str(DAG_FILE))


def state_name(ti: Any) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


@contextlib.contextmanager
def connection(emu: SlurmJobApiEmulator) -> Iterator[None]:
    """``slurmapi_default`` points at ``emu`` (fast client retries, a short timeout) for the block."""
    name = "AIRFLOW_CONN_SLURMAPI_DEFAULT"
    before = os.environ.get(name)
    os.environ[name] = emu.connection_json(retries=CLIENT_ATTEMPTS - 1, retry_delay=0.05, timeout=CLIENT_TIMEOUT)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def run_chaos(
    dag_id: str,
    tasks: int,
    rate: float,
    seed: int,
    runtime: float = 0.5,
    job_event_rate: float = 0.4,
    expiry_rate: float = 0.1,
    real: RealSlurm | None = None,
) -> ChaosRun:
    """Run the DAG ``dag_id`` with ``tasks`` tasks through ``dag.test()`` under seeded faults.

    With ``real``, Slurm calls go to that slurmrestd (the faults stay the emulator's Google layer's; the
    cluster events, which only a simulated cluster can stage, do not happen) and the jobs are counted
    from its queue and accounting.
    """
    from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator

    dag = load_dags()["DAGS"][dag_id]
    started = time.monotonic()
    conf: dict[str, Any] = {"tasks": tasks, "runtime": runtime}
    if real is None:
        emu = SlurmJobApiEmulator(simulate=True, partitions={"debug": 16}, min_job_age=3600, seed=seed)
    else:
        emu = SlurmJobApiEmulator(upstream=real.rest_url, upstream_user=real.user, upstream_token=real.jwt, seed=seed)
        conf["cwd"] = real.home
    with emu:
        if real is not None:
            # The first look-up of a job by its name (a try resolving its lost submit reply) fails through
            # all the client's attempts, so that task surely needs Airflow's retry, which comes past
            # MinJobAge: its job is then in accounting only. Otherwise the seeded faults leave it to timing.
            emu.inject_fault("unavailable", count=CLIENT_ATTEMPTS, path_contains="job_name=", method="GET")
        arm_faults(emu, rate)
        with connection(emu):
            if real is None:
                with ClusterChaos(emu, seed, job_event_rate, expiry_rate) as chaos:
                    dag_run = dag.test(run_conf=conf)
                events = chaos.events
            else:
                dag_run = dag.test(run_conf=conf)
                events = Counter()
        emu.clear_faults()
        tis = [ti for ti in dag_run.get_task_instances() if ti.task_id.startswith("submit_")]
        jobs = emu.jobs() if real is None else _real_jobs(real)
        tags = _tags_by_digest(tis)
        ours = [(job, tags[d]) for job in jobs if (d := _digest(job["name"])) in tags]
        return ChaosRun(
            dag_id=dag_id,
            tasks=tasks,
            seconds=time.monotonic() - started,
            ti_states={tags[_ti_digest(ti)]: state_name(ti) for ti in tis},
            tries=sum(int(ti.try_number) for ti in tis),
            jobs=[job for job, _ in ours],
            calls=emu.calls,
            token_requests=emu.token_requests,
            faults=Counter(emu.faults.fired),
            events=events,
            job_tags=[tag for _, tag in ours],
        )


def _ti_digest(ti: Any) -> str:
    """The digest that ends the names of the task instance's jobs."""
    from airflow_provider_slurmapi.api.identity import TaskIdentity

    return TaskIdentity.of(ti.dag_id, ti.task_id, ti.run_id, ti.map_index).digest


def _tags_by_digest(tis: list[Any]) -> dict[str, str]:
    """Each task instance's tag, keyed by the digest that ends its jobs' names."""
    from airflow_provider_slurmapi.api.identity import task_instance_tag

    return {_ti_digest(ti): task_instance_tag(ti.dag_id, ti.task_id, ti.run_id, ti.map_index) for ti in tis}


def _digest(name: str) -> str | None:
    from airflow_provider_slurmapi.api.identity import name_identity

    found = name_identity(name)
    return found[0] if found is not None else None


def _real_jobs(real: RealSlurm) -> list[dict[str, Any]]:
    """Every job of the real cluster, from accounting and the queue, as ``{job_id, name, state}``."""
    from airflow_provider_slurmapi.api.client import SlurmJobApiClient
    from airflow_provider_slurmapi.api.connection import settings_from_extra

    settings = settings_from_extra({"slurmrestd_url": real.rest_url}, login=real.user, password=real.jwt)
    with SlurmJobApiClient(settings.cluster, **settings.client_kwargs()) as client:
        found = {j.job_id: j for j in client.list_accounted_jobs()}
        found.update({j.job_id: j for j in client.list_jobs()})
    return [{"job_id": j.job_id, "name": j.name, "state": [j.state.base]} for j in found.values()]
