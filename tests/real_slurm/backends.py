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
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.harness.real_slurm import RELEASE, SCENARIO_API_VERSION

BACKENDS = ["emulator", "real"]
# The emulator plays Google's IAM too: a connection impersonating this account acts as its own user.
OTHER_ACCOUNT = "slurm-runner@demo-project.iam.gserviceaccount.com"
# api_version: v0.0.42 on Slurm 24.11, "auto" (-> v0.0.45) on 26.05 (tests.harness.real_slurm.SCENARIO_API_VERSION)
FAST = {"retries": 3, "retry_delay": 0.05, "timeout": 20, "api_version": SCENARIO_API_VERSION}


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
    extra: dict[str, Any] = field(default_factory=dict)

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


def emulator_backend(tmp_path_factory: pytest.TempPathFactory) -> tuple[Backend, SlurmJobApiEmulator]:
    emu = SlurmJobApiEmulator(
        min_job_age=2.0,
        minute_seconds=1.0,
        completing_time=0.2,
        state_dir=tmp_path_factory.mktemp("scenario-emulator"),
        slurm_release=RELEASE,  # the release the real backend runs
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
    )
    return backend, emu


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
    )
    return backend, emu
