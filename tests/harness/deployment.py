"""A production-shaped Airflow deployment (``deploy.sh``) driven from the tests: PostgreSQL, Redis, the
Celery executor with two workers, two triggerers, each process its own; the emulator as the cluster.

What the tests read is what an operator of such a deployment would read: the metadata database (task
instances, triggers and the triggerer that holds each), the cluster's own job list, each process's CPU.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import requests

from airflow_provider_slurmapi.api.identity import TaskIdentity, name_identity
from tests.harness.standalone import ARTIFACTS, ROOT, EmulatorProcess, wait_for

DEPLOY = ROOT / "tests" / "deployment" / "deploy.sh"
DAGS = ROOT / "tests" / "deployment" / "dags"
SENSOR_DAG = """
import pendulum

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), max_active_tasks=5000):
    for i, job_id in enumerate({job_ids!r}):
        SlurmJobSensor(
            task_id=f"wait_{{i}}",
            job_id=job_id,
            deferrable=True,
            start_from_trigger={start_from_trigger!r},
            poke_interval=5,
        )
"""
LOGS = ARTIFACTS / "deployment"


@dataclass
class TaskJobs:
    """Each task instance (map index) of a run and the jobs the cluster has under its identity."""

    jobs: dict[int, list[Any]]

    def counts(self) -> Counter[int]:
        return Counter({index: len(found) for index, found in self.jobs.items()})


@dataclass
class Deployment:
    state: Path
    api_port: int
    emulator: EmulatorProcess
    env: dict[str, str]
    triggerers: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def dags(self) -> Path:
        return self.state / "dags"

    def write_sensor_dag(self, dag_id: str, job_ids: list[int], *, start_from_trigger: bool = True) -> None:
        """A DAG of one deferrable ``SlurmJobSensor`` per job (``wait_<i>`` on ``job_ids[i]``)."""
        (self.dags / f"{dag_id}.py").write_text(
            SENSOR_DAG.format(dag_id=dag_id, job_ids=job_ids, start_from_trigger=start_from_trigger)
        )

    # -- the deployment's processes -----------------------------------------------------------------

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(DEPLOY), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=check,
        )

    def pid(self, name: str) -> int:
        return int((self.state / "pids" / name).read_text())

    def processes(self, name: str) -> list[psutil.Process]:
        """The process ``name`` and every process it started."""
        root = psutil.Process(self.pid(name))
        return [root, *root.children(recursive=True)]

    def cpu_seconds(self, name: str) -> float:
        """User + system CPU seconds of ``name`` and its live children so far."""
        total = 0.0
        for proc in self.processes(name):
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def alive(self, name: str) -> bool:
        try:
            return psutil.Process(self.pid(name)).status() != psutil.STATUS_ZOMBIE
        except (psutil.Error, OSError, ValueError):
            return False

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to the process group of ``name`` (the process and what it started)."""
        os.killpg(self.pid(name), sig)

        wait_for(f"{name} to be gone", lambda: not self.alive(name), timeout=30)

    def start(self, name: str) -> None:
        self.script("start", name)

    # -- the metadata database ----------------------------------------------------------------------

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg2

        with (
            contextlib.closing(
                psycopg2.connect(host="127.0.0.1", port=self.env["DEPLOY_PG_PORT"], user="airflow", password="airflow")
            ) as conn,
            conn.cursor() as cur,
        ):
            cur.execute(query, args)
            return list(cur.fetchall()) if cur.description else []

    def task_states(self, dag_id: str, run_id: str, task_id: str = "train") -> dict[int, tuple[str | None, int]]:
        """``{map_index: (state, try_number)}`` of the run's task instances of ``task_id``."""
        rows = self.sql(
            "SELECT map_index, state, try_number FROM task_instance WHERE dag_id=%s AND run_id=%s AND task_id=%s",
            dag_id,
            run_id,
            task_id,
        )
        return {index: (state, tries) for index, state, tries in rows}

    def run_task_states(self, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
        """``{task_id: (state, try_number)}`` of every (unmapped) task instance of the run."""
        rows = self.sql(
            "SELECT task_id, state, try_number FROM task_instance WHERE dag_id=%s AND run_id=%s", dag_id, run_id
        )
        return {task: (state, tries) for task, state, tries in rows}

    def left_deferred_after(self, job_end: float, *runs: tuple[str, str]) -> list[float]:
        """Seconds from ``job_end`` (epoch) until each task instance of ``runs`` was queued to resume."""
        latencies = []
        for dag_id, run_id in runs:
            rows = self.sql(
                "SELECT extract(epoch FROM queued_dttm) FROM task_instance WHERE dag_id=%s AND run_id=%s",
                dag_id,
                run_id,
            )
            latencies += [float(queued) - job_end for (queued,) in rows if queued is not None]
        return latencies

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.sql("SELECT state FROM dag_run WHERE dag_id=%s AND run_id=%s", dag_id, run_id)
        return rows[0][0] if rows else None

    def triggers_by_triggerer(self) -> dict[str | None, int]:
        """How many triggers each triggerer holds, by its hostname (None: not assigned)."""
        rows = self.sql(
            "SELECT j.hostname, count(t.id) FROM trigger t LEFT JOIN job j ON j.id = t.triggerer_id GROUP BY j.hostname"
        )
        return {host: count for host, count in rows}

    # -- the REST API (what the UI's buttons call) --------------------------------------------------

    def session(self) -> requests.Session:
        s = requests.Session()
        token = requests.get(f"{self.url}/auth/token", timeout=30).json()["access_token"]
        s.headers["Authorization"] = f"Bearer {token}"
        return s

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        s = self.session()

        def parsed() -> bool:
            reply = s.get(f"{self.url}/api/v2/dags/{dag_id}", timeout=10)
            return reply.status_code == 200 and not reply.json().get("is_paused", True)

        wait_for(f"DAG {dag_id} to be parsed and unpaused", parsed, timeout=180, log=self.log("dag-processor"))
        reply = s.post(
            f"{self.url}/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}, timeout=30
        )
        assert reply.status_code in (200, 201), reply.text
        return str(reply.json()["dag_run_id"])

    def set_state(self, dag_id: str, run_id: str, map_index: int, state: str, task_id: str = "train") -> None:
        url = f"{self.url}/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}"
        reply = self.session().patch(url, json={"new_state": state}, timeout=60)
        assert reply.status_code == 200, reply.text

    def clear(self, dag_id: str, run_id: str, map_indexes: list[int], task_id: str = "train") -> None:
        body = {
            "dry_run": False,
            "task_ids": [[task_id, i] for i in map_indexes],
            "dag_run_id": run_id,
            "only_failed": False,
            "reset_dag_runs": True,
        }
        reply = self.session().post(f"{self.url}/api/v2/dags/{dag_id}/clearTaskInstances", json=body, timeout=120)
        assert reply.status_code == 200, reply.text

    # -- waiting ------------------------------------------------------------------------------------

    def task_log(self, dag_id: str, run_id: str, map_index: int, *, attempt: int, task_id: str = "train") -> str:
        """The log the task's try ``attempt`` wrote (the workers share this machine's log folder)."""
        path = (
            self.state
            / "airflow"
            / "logs"
            / f"dag_id={dag_id}"
            / f"run_id={run_id}"
            / f"task_id={task_id}"
            / f"map_index={map_index}"
            / f"attempt={attempt}.log"
        )
        return path.read_text(errors="replace") if path.exists() else ""

    def log(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    def wait_for_states(
        self, dag_id: str, run_id: str, n: int, states: set[str], *, timeout: float, what: str, mapped: bool = True
    ) -> dict[Any, tuple[str | None, int]]:
        """Until ``n`` task instances of the run are in one of ``states``: the mapped ``train`` task's, or
        (``mapped=False``) the run's unmapped tasks'."""

        def reached() -> dict[Any, tuple[str | None, int]] | None:
            found: dict[Any, tuple[str | None, int]] = (
                dict(self.task_states(dag_id, run_id)) if mapped else dict(self.run_task_states(dag_id, run_id))
            )
            done = [i for i, (state, _) in found.items() if state in states]
            return found if len(done) == n else None

        return wait_for(what, reached, timeout=timeout, interval=2, log=self.log("scheduler"))

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float) -> str:
        def finished() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in ("success", "failed") else None

        return str(
            wait_for(f"run {run_id} to finish", finished, timeout=timeout, interval=2, log=self.log("scheduler"))
        )

    # -- the cluster's record -----------------------------------------------------------------------

    def jobs_by_task(self, dag_id: str, run_id: str, n: int, task_id: str = "train") -> TaskJobs:
        """Every job the cluster has (queue and accounting) of each of the ``n`` task instances."""
        digests = {TaskIdentity.of(dag_id, task_id, run_id, i).digest: i for i in range(n)}
        with self.emulator.client() as client:
            jobs = {j.job_id: j for j in client.list_accounted_jobs()}
            jobs.update({j.job_id: j for j in client.list_jobs() if j.job_id not in jobs or not j.state.is_terminal})
        found: dict[int, list[Any]] = {i: [] for i in range(n)}
        for job in sorted(jobs.values(), key=lambda j: j.job_id):
            identity = name_identity(job.name)
            if identity is not None and identity[0] in digests:
                found[digests[identity[0]]].append(job)
        return TaskJobs(found)

    def submit_held(self, n: int, name: str) -> list[int]:
        """``n`` jobs submitted straight to the cluster (not by Airflow), RUNNING until released."""
        from airflow_provider_slurmapi.api.versions import DEFAULT_VERSION as version

        ids = []
        with self.emulator.client() as client:
            for i in range(n):
                job = {"name": f"{name}-{i}", "current_working_directory": "/deploy", "environment": ["A=1"]}
                body = {"job": job, "script": "#!/bin/bash\n#EMULATOR runtime=5 hold=1\ntrue\n"}
                status, reply = client.call_slurm("POST", f"/slurm/{version}/job/submit", body)
                assert status == 200, reply
                ids.append(int(reply["job_id"]))
        return ids

    def release(self) -> None:
        """Start the clock of every held job (the emulator's SIGUSR1): each ends 5 s later."""
        os.kill(self.emulator.proc.pid, signal.SIGUSR1)

    def cancels(self) -> list[str]:
        return [line for line in self.emulator.log.read_text(errors="replace").splitlines() if "DELETE /slurm/" in line]


@contextlib.contextmanager
def run_deployment(emulator: EmulatorProcess, *, triggerers: int = 2) -> Iterator[Deployment]:
    """``deploy.sh up`` on ``emulator``; ``down`` after, the logs kept in ``artifacts/deployment``."""
    state = Path(os.environ.get("DEPLOY_STATE", "/var/tmp/slurmapi-deployment-tests"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        {
            "DEPLOY_STATE": str(state),
            "DEPLOY_CONNECTION": emulator.connection_json,
            "DEPLOY_TRIGGERERS": str(triggerers),
            "DEPLOY_PG_PORT": env.get("DEPLOY_PG_PORT", "54329"),
            "DEPLOY_API_PORT": env.get("DEPLOY_API_PORT", "28080"),
        }
    )
    deployment = Deployment(state, int(env["DEPLOY_API_PORT"]), emulator, env, triggerers)
    deployment.script("down", check=False)  # what an interrupted earlier run left
    # The DAGs folder: the suite's DAGs, and those a scenario writes (sensors on the ids of its jobs).
    env["DEPLOY_DAGS"] = str(deployment.dags)
    deployment.dags.mkdir(parents=True)
    shutil.copy(DAGS / "deployment_dags.py", deployment.dags)
    try:
        up = deployment.script("up", check=False)
        if up.returncode != 0:
            raise RuntimeError(f"deploy.sh up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
        yield deployment
    finally:
        if (state / "logs").exists():
            shutil.rmtree(LOGS, ignore_errors=True)
            shutil.copytree(state / "logs", LOGS, dirs_exist_ok=True)
        if (state / "airflow" / "logs").exists():  # the tasks' and triggers' own logs
            shutil.copytree(state / "airflow" / "logs", LOGS / "task-logs", dirs_exist_ok=True)
        deployment.script("down", check=False)


def describe(tasks: TaskJobs) -> str:
    """The tasks whose job count is not one, for a failure message."""
    odd = {i: [(j.job_id, j.state.base) for j in jobs] for i, jobs in tasks.jobs.items() if len(jobs) != 1}
    return json.dumps(odd)[:2000]


__all__ = ["Deployment", "TaskJobs", "describe", "run_deployment"]
