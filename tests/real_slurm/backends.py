"""Two backends behind one test interface: the emulator's simulated cluster, and real Slurm.

Both are reached the same way, through the emulator's Google layer (service-account token flow,
callSlurmRestApi envelope, injectable faults): on the emulator backend its simulated cluster answers
each Slurm call, on the real backend the emulator forwards it to the real slurmrestd of the
``real_slurm`` fixture (proxy mode). A scenario written against :class:`Backend` therefore runs the same
code on both, and where they disagree, the real one is right.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.emulator.app import DEFAULT_PARTITIONS
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.harness.real_slurm import RELEASE, SCENARIO_API_VERSION

BACKENDS = ["emulator", "real"]
# The emulator plays Google's IAM too: a connection impersonating this account acts as its own user.
OTHER_ACCOUNT = "slurm-runner@demo-project.iam.gserviceaccount.com"
# api_version: v0.0.42 on Slurm 24.11, "auto" (-> v0.0.45) on 26.05 (tests.harness.real_slurm.SCENARIO_API_VERSION)
FAST = {"retries": 3, "retry_delay": 0.05, "timeout": 20, "api_version": SCENARIO_API_VERSION}
# The emulator's stand-in for slurm.conf's cred_expire (10 s on the real test cluster): how long a requeued job
# stays PENDING (BeginTime) before its next run.
EMULATED_REQUEUE_DELAY = 1.0
PREEMPTIBLE = "preemptible"


@dataclass
class Disruptions:
    """What the cluster or its administrator does to a job, on either backend, past the provider (neither
    goes through the Google layer, so injected faults do not touch them): the emulator's chaos hooks, or
    Slurm commands in the real cluster's chroot.

    ``preempt(job_id)``: a higher-priority job takes the node of the running job (real: a job of the
    preemptor partition); Slurm requeues the preempted job unless it was submitted with ``requeue: false``,
    then it ends PREEMPTED. Returns once the job no longer runs. ``node_down(job_id)``: the node of the running
    job goes DOWN (requeued, or NODE_FAIL likewise); ``nodes_up()`` puts every node back in service.
    ``requeue(job_id)``: an administrator's ``scontrol requeue``. ``state(job_id)``: the job's state and
    restart count as the active queue has them (``([], -1)`` once it left). ``find(prefix)``: the ids of the
    active queue's jobs whose names start so.
    """

    preemptible_partition: str  # its jobs take the whole node, and a preemptor's job takes it from them
    preempt: Callable[[int], None]
    node_down: Callable[[int], None]
    nodes_up: Callable[[], None]
    requeue: Callable[[int], None]
    state: Callable[[int], tuple[list[str], int]]
    find: Callable[[str], list[int]]

    def wait_for(self, job_id: int, what: str, until: Callable[[list[str], int], bool], timeout: float = 120) -> None:
        """Poll the job's state (past the provider) until ``until(state, restart_count)``; fail at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            state, restarts = self.state(job_id)
            if until(state, restarts):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} did not {what} within {timeout:.0f}s: {state}, restart {restarts}")
            time.sleep(0.2)


@dataclass
class Backend:
    """One cluster as the provider sees it, plus what a scenario needs to set up and check it."""

    name: str
    emu: SlurmJobApiEmulator
    cwd: str
    partition: str
    user: str  # the Slurm user the connection's jobs run as
    other_user: str  # a second Slurm user on the same cluster
    other_cwd: str  # a folder other_user's jobs may write their output to (not ``cwd``: not theirs)
    other_connection: dict[str, Any]  # a connection that acts as other_user
    set_slurmdbd: Callable[[bool], None]  # True: up, False: down (and back before returning)
    purge_bound: float  # seconds after its end by which a job has surely left the active queue
    host_path: Callable[[str], Path]  # where a file the job wrote on the cluster is on this machine
    short_time_limit: int = 1  # minutes: the shortest time limit a job that should outlive it gets
    slurm_second: float = 1.0  # how long one second of Slurm's time (time limits, warning delays) lasts here
    extra: dict[str, Any] = field(default_factory=dict)
    disruptions: Disruptions | None = None

    def connect(
        self, monkeypatch: pytest.MonkeyPatch, conn_id: str = "slurmapi_default", **extra: Any
    ) -> SlurmJobApiHook:
        """A hook on a connection to this backend (set as ``AIRFLOW_CONN_<ID>`` for the test)."""
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", self.emu.connection_json(**{**FAST, **extra}))
        return SlurmJobApiHook(slurmapi_conn_id=conn_id)

    def other_hook(self, monkeypatch: pytest.MonkeyPatch) -> SlurmJobApiHook:
        monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_OTHER_USER", json.dumps(self.other_connection))
        return SlurmJobApiHook(slurmapi_conn_id="slurmapi_other_user")

    def fields(self, **job: Any) -> dict[str, Any]:
        return {"current_working_directory": self.cwd, "partition": self.partition, "time_limit": 5, **job}

    def spec(self, script: str, **job: Any) -> JobSpec:
        return JobSpec.build(script, self.fields(**job))

    def other_spec(self, script: str, **job: Any) -> JobSpec:
        """A job for ``other_hook``: in other_user's own folder (a job that cannot open its output fails at
        once on real Slurm, and a scenario that expects it to keep running would then race its start)."""
        return JobSpec.build(script, self.fields(**{"current_working_directory": self.other_cwd, **job}))

    def wait_until_left_queue(self, hook: SlurmJobApiHook, job_id: int, timeout: float | None = None) -> SlurmJob:
        """Wait until the ended job is known to accounting only (``/slurm`` forgot it); return that record."""
        deadline = time.monotonic() + (timeout or self.purge_bound + 60)
        while True:
            job = hook.get_job(job_id)
            if job.state.is_terminal and job.source == "slurmdb":
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: job {job_id} still in the active queue ({job.state}, {job.source})")
            time.sleep(0.5)

    def wait_until_running(self, hook: SlurmJobApiHook, job_id: int, timeout: float = 60) -> SlurmJob:
        """Wait until the job has started (its batch step exists); fail if it ends or never starts."""
        deadline = time.monotonic() + timeout
        while True:
            job = hook.get_job(job_id)
            if job.state.base == "RUNNING":
                return job
            if job.state.is_terminal or time.monotonic() > deadline:
                pytest.fail(f"{self.name}: job {job_id} did not run ({job.state}, {job.source})")
            time.sleep(0.3)

    def wait_for_end(self, hook: SlurmJobApiHook, job_id: int, timeout: float = 120) -> SlurmJob:
        return hook.wait_for_job(job_id, poll_interval=0.3, timeout=timeout)

    def accounted(self, hook: SlurmJobApiHook, name: str, *, count: int, timeout: float = 60) -> list[SlurmJob]:
        """Accounting's records of jobs named ``name``, once it holds ``count`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            jobs = [j for j in hook.list_accounted_jobs(job_name=name) if j.name == name]
            if len(jobs) >= count or time.monotonic() > deadline:
                return jobs
            time.sleep(0.5)


def emulator_backend(
    tmp_path_factory: pytest.TempPathFactory, minute_seconds: float = 1.0
) -> tuple[Backend, SlurmJobApiEmulator]:
    """The emulator's cluster; its minute lasts ``minute_seconds`` (1 s: short time limits pass quickly)."""
    emu = SlurmJobApiEmulator(
        min_job_age=2.0,
        minute_seconds=minute_seconds,
        completing_time=0.2,
        state_dir=tmp_path_factory.mktemp("scenario-emulator"),
        slurm_release=RELEASE,  # the release the real backend runs
        partitions={**DEFAULT_PARTITIONS, PREEMPTIBLE: 1},
        requeue_delay=EMULATED_REQUEUE_DELAY,
    )
    emu.start()
    user = emu.service_account_email.split("@")[0]
    other = {"conn_type": "slurmapi", "extra": emu.connection_extra(impersonation_chain=OTHER_ACCOUNT, **FAST)}

    def set_slurmdbd(up: bool) -> None:
        emu.set_slurmdbd_down(not up)

    backend = Backend(
        name="emulator",
        emu=emu,
        cwd="/home/tester",
        partition=emu.default_partition,
        user=user,
        other_user=OTHER_ACCOUNT.split("@")[0],
        other_cwd="/home/tester",
        other_connection=other,
        set_slurmdbd=set_slurmdbd,
        purge_bound=emu.min_job_age + 2,
        host_path=emu.host_path,
        # the emulator's minute is 1 s: 4 s leave its wrapper time to publish before the limit
        short_time_limit=4,
        slurm_second=minute_seconds / 60,
        disruptions=_emulated_disruptions(emu),
    )
    return backend, emu


def _emulated_disruptions(emu: SlurmJobApiEmulator) -> Disruptions:
    def state(job_id: int) -> tuple[list[str], int]:
        job = emu.job(job_id)
        return (list(job["state"]), int(job["restart_cnt"])) if job["in_queue"] else ([], -1)

    return Disruptions(
        preemptible_partition=PREEMPTIBLE,
        preempt=lambda job_id: emu.fail_job(job_id, "PREEMPTED", requeue=None),
        node_down=lambda job_id: emu.fail_job(job_id, "NODE_FAIL", requeue=None),
        nodes_up=lambda: None,  # the emulator's nodes never stay down
        requeue=emu.requeue,
        state=state,
        find=lambda prefix: [j["job_id"] for j in emu.jobs() if j["in_queue"] and str(j["name"]).startswith(prefix)],
    )


def real_backend(real_slurm: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Backend, SlurmJobApiEmulator]:
    emu = SlurmJobApiEmulator(
        upstream=real_slurm.rest_url,
        upstream_user=real_slurm.user,
        upstream_token=real_slurm.jwt,
        state_dir=tmp_path_factory.mktemp("scenario-proxy"),
    )
    emu.start()
    other_user = "ciother"
    token = real_slurm.add_user(other_user)
    other = {
        "conn_type": "slurmapi",
        "login": other_user,
        "password": token,
        "extra": {"slurmrestd_url": real_slurm.rest_url, **FAST},
    }

    def set_slurmdbd(up: bool) -> None:
        if up:
            real_slurm.start_slurmdbd()
        else:
            real_slurm.stop_slurmdbd()

    backend = Backend(
        name="real",
        emu=emu,
        cwd=real_slurm.home,
        partition=real_slurm.partition,
        user=real_slurm.user,
        other_user=other_user,
        other_cwd=f"/home/{other_user}",  # ctl.sh add-user makes it (useradd -m)
        other_connection=other,
        set_slurmdbd=set_slurmdbd,
        # slurmctld purges every max(10, MinJobAge) s, or every 60 s; a sweep is skipped while backfill runs
        purge_bound=real_slurm.min_job_age + 60,
        host_path=real_slurm.host_path,
        disruptions=_real_disruptions(real_slurm),
    )
    return backend, emu


def _real_disruptions(real_slurm: Any) -> Disruptions:
    """Slurm's own preemption (start_slurm.sh's partitions), node failures and requeues, in the chroot."""
    rest = real_slurm.new_client()  # its own HTTP session: a test's thread disrupts while Airflow runs

    def state(job_id: int) -> tuple[list[str], int]:
        status, body = rest.call("GET", f"/slurm/v0.0.42/job/{job_id}")
        if status != 200 or not body.get("jobs"):
            return [], -1
        return list(body["jobs"][0]["job_state"]), int(body["jobs"][0]["restart_cnt"])

    def gone_from_its_run(job_id: int, what: str) -> None:
        deadline = time.monotonic() + 60
        while state(job_id)[0][:1] == ["RUNNING"]:
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} still RUNNING 60 s after {what}")
            time.sleep(0.2)

    def preempt(job_id: int) -> None:
        if not real_slurm.preemptor_partition:
            pytest.fail("this real Slurm was started without start_slurm.sh's preemption partitions: restart it")
        # the preemptor partition gives each job the whole node: its job needs the preemptible job's
        real_slurm.slurm_command(
            "sbatch", "--parsable", f"--partition={real_slurm.preemptor_partition}", "--job-name=preemptor",
            "--time=1", f"--chdir={real_slurm.home}", "--output=/dev/null", "--wrap=sleep 1", as_job_user=True,
        )  # fmt: skip
        gone_from_its_run(job_id, "a job of a higher priority tier came")

    def node_down(job_id: int) -> None:
        nodes = real_slurm.slurm_command("squeue", "--noheader", f"--jobs={job_id}", "--format=%N").strip()
        if not nodes:
            pytest.fail(f"job {job_id} runs on no node")
        real_slurm.slurm_command("scontrol", "update", f"NodeName={nodes}", "State=DOWN", "Reason=test node failure")
        gone_from_its_run(job_id, f"its node {nodes} went down")

    def out_of_service() -> list[str]:
        listed = real_slurm.slurm_command("sinfo", "--noheader", "--Node", "--format=%N %t").split("\n")
        return [
            node
            for node, node_state in (line.split() for line in listed if line.strip())
            if node_state.rstrip("*~#!%$@^-") in ("down", "drain", "drng", "fail")
        ]

    def nodes_up() -> None:
        # RESUME: a DOWN node with no job to kill stays DOWN until slurmd next registers (ReturnToService=2). A
        # node back by itself meanwhile refuses it ("Invalid node state specified"): what counts is the end.
        said = ""
        deadline = time.monotonic() + 60
        while down := out_of_service():
            for node in down:
                said = real_slurm.slurm_command("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
            if time.monotonic() > deadline:
                pytest.fail(f"nodes {down} of the real cluster still out of service after RESUME: {said}")
            time.sleep(0.5)

    def requeue(job_id: int) -> None:
        real_slurm.slurm_command("scontrol", "requeue", str(job_id))

    def find(prefix: str) -> list[int]:
        status, body = rest.call("GET", "/slurm/v0.0.42/jobs/")
        if status != 200:
            pytest.fail(f"listing the real cluster's jobs answered {status}: {body!r:.500}")
        return [int(j["job_id"]) for j in body.get("jobs", []) if str(j.get("name", "")).startswith(prefix)]

    return Disruptions(
        preemptible_partition=real_slurm.preemptible_partition,
        preempt=preempt,
        node_down=node_down,
        nodes_up=nodes_up,
        requeue=requeue,
        state=state,
        find=find,
    )
