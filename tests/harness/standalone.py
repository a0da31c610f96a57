"""The pieces of the standalone suite: the emulator process, ``airflow standalone`` and how to talk to them.

The session fixtures in ``conftest.py`` put them together:

``standalone`` (session fixture) gives a running Airflow: scheduler, dag-processor, triggerer and
api-server (webserver on 2.x) on SQLite with the LocalExecutor (SequentialExecutor on 2.x, which
refuses LocalExecutor on SQLite), in a private AIRFLOW_HOME, on free ports, parsing ``example_dags``
and the suite's own DAGs in ``tests/standalone/dags`` (two LocalDagBundles on Airflow 3; on 2.x a
``dags_folder`` holding a link to each), and the emulator (started as a separate process by
``emulator_process``) as the ``slurmapi_default`` connection through ``AIRFLOW_CONN_SLURMAPI_DEFAULT``.

The triggerer can be stopped (SIGTERM, or SIGKILL of its whole process tree) and started again as an
``airflow triggerer`` of the harness's own (``Standalone.stop_triggerer`` / ``start_triggerer``):
``airflow standalone`` does not restart a child that died. A task's process is found by the pid Airflow
records on the task instance (``Standalone.task_process``).

Users: ``admin``/``ADMIN_PASSWORD`` (role ADMIN on Airflow 3's simple auth manager, Admin on 2.x FAB),
and on Airflow 3 ``nobody``/``NOBODY_PASSWORD``, a user without any role (so without DAG access).

Readiness is polled on the health endpoints with a deadline; teardown kills both process groups.
Logs end up in ``artifacts/standalone/airflow-<version>[-<xdist worker>]/``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import requests

if TYPE_CHECKING:
    from airflow_provider_slurmapi.api.jobs import SlurmJob

ROOT = Path(__file__).resolve().parents[2]
SUITE_DAGS = ROOT / "tests" / "standalone" / "dags"
ARTIFACTS = ROOT / "artifacts"


def _session_folder() -> str:
    """This test process's own folder of logs: suites of two Airflow versions, or several pytest-xdist
    workers, run side by side, and each reads its own emulator's log back (``EmulatorProcess.calls``)."""
    from importlib.metadata import version

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"airflow-{version('apache-airflow')}" + (f"-{worker}" if worker else "")


LOGS = ARTIFACTS / "standalone" / _session_folder()
BIN = Path(sys.executable).parent
ADMIN_USER, ADMIN_PASSWORD = "admin", "slurmapi-admin-pw"
NOBODY_USER, NOBODY_PASSWORD = "nobody", "slurmapi-nobody-pw"
_FAB_ADMIN = ("--role", "Admin", "--firstname", "Ad", "--lastname", "Min", "--email", "admin@example.com")
# How long `airflow standalone` may take to be healthy: about 60 s alone, and more than 180 s was measured
# on a loaded 2-core machine (CI's four workers and another suite beside them): a bound, not a pace.
READY_TIMEOUT = float(os.environ.get("SLURMAPI_STANDALONE_READY_TIMEOUT", "480"))


def airflow_major() -> int:
    from importlib.metadata import version

    return int(version("apache-airflow").split(".")[0])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    what: str, check: Callable[[], Any], *, timeout: float, interval: float = 0.5, log: Path | None = None
) -> Any:
    """Poll ``check`` until it returns something truthy; fail with the log's tail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except (requests.RequestException, OSError, ValueError, KeyError) as err:
            last_error, result = err, None
        if result:
            return result
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error!r}){log_tail(log)}")


def log_tail(log: Path | None, lines: int = 60) -> str:
    """The last ``lines`` of ``log`` for a failure message: CI keeps the output, not the file."""
    if log is None or not log.exists():
        return ""
    return f"\n--- last lines of {log} ---\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def kill_group(proc: subprocess.Popen[bytes], *, grace: float = 15.0) -> None:
    """SIGTERM the process group ``proc`` leads, then SIGKILL whatever is left of it."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if not group_alive(pgid):
            return
        time.sleep(0.5)
        if not group_alive(pgid):
            return


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_members(sid: int) -> list[int]:
    """Pids of the processes in session ``sid`` (also those that moved to a process group of their own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp session ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def kill_strays(sid: int) -> None:
    """SIGKILL what is left of the session we started (Airflow 2's DAG processor leaves the group)."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


# -- the emulator, as its own process ---------------------------------------------------------------

# A call as the emulator logs it: ``<local time> <METHOD> <path> -> <status>``.
_CALL = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (GET|POST|DELETE) (\S+) -> (\d+)")


@dataclass
class EmulatorProcess:
    proc: subprocess.Popen[bytes]
    connection: dict[str, Any]
    state_dir: Path
    log: Path

    @property
    def connection_json(self) -> str:
        return json.dumps(self.connection)

    def client(self) -> Any:
        """A Slurm Job API client on the emulator's connection (no Airflow involved)."""
        from airflow_provider_slurmapi.api.client import SlurmJobApiClient
        from airflow_provider_slurmapi.api.connection import settings_from_extra

        extra = self.connection.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra)
        settings = settings_from_extra(
            extra, login=self.connection.get("login"), password=self.connection.get("password")
        )
        return SlurmJobApiClient(settings.cluster, **settings.client_kwargs())

    def jobs_of(self, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> list[SlurmJob]:
        """Every job of that task instance, any try or run of tries (queue and accounting), oldest first.

        Found by the identity at the end of their names, which accounting keeps (it keeps no comment).
        """
        from airflow_provider_slurmapi.api.identity import TaskIdentity

        identity = TaskIdentity.of(dag_id, task_id, run_id, map_index)
        with self.client() as client:
            jobs = {j.job_id: j for j in client.list_accounted_jobs()}
            jobs.update({j.job_id: j for j in client.list_jobs() if j.job_id not in jobs or not j.state.is_terminal})
        return sorted((j for j in jobs.values() if identity.run_of(j) is not None), key=lambda j: j.job_id)

    def host_path(self, cluster_path: str) -> Path:
        """Where the cluster-side absolute path ``cluster_path`` lives on this machine (the jobs' files)."""
        return self.state_dir / "fs" / cluster_path.lstrip("/")

    def calls(self, start: float, end: float) -> list[tuple[float, str, str]]:
        """``(time, method, path)`` of every call the emulator logged between ``start`` and ``end`` (epoch)."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines() if self.log.exists() else []:
            match = _CALL.match(line)
            if match is None:
                continue
            when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if start <= when <= end:
                found.append((when, match.group(2), match.group(3)))
        return found

    def cancel_calls(self, job_id: int) -> list[str]:
        """The emulator's log lines of every cancel (``DELETE .../job/<id>``) it was sent for ``job_id``."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return [line for line in lines if "DELETE /slurm/" in line and f"/job/{job_id} " in line]


def read_connection(log: Path) -> dict[str, Any] | None:
    """The connection the emulator printed: a JSON object on a line of its own or after ``connection:``."""
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        line = line.strip()
        if line.lower().startswith("connection:"):
            line = line.split(":", 1)[1].strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("conn_type") == "slurmapi":
            return value
    return None


@contextlib.contextmanager
def run_emulator(*extra_args: str) -> Iterator[EmulatorProcess]:
    """``python -m airflow_provider_slurmapi.emulator`` on a free port, in its own process group.

    ``extra_args``: more command-line options (e.g. ``--simulate``, ``--storage-emulator-host``).
    """
    try:
        found = importlib.util.find_spec("airflow_provider_slurmapi.emulator.__main__") is not None
    except ImportError:
        found = False
    if not found:
        pytest.skip("the Slurm Job API emulator (python -m airflow_provider_slurmapi.emulator) is not there")
    LOGS.mkdir(parents=True, exist_ok=True)
    state_dir = Path(tempfile.mkdtemp(prefix="slurmapi-emulator-"))
    log = LOGS / "emulator.log"
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airflow_provider_slurmapi.emulator",
                "--port",
                str(port),
                "--state-dir",
                str(state_dir),
                *extra_args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=ROOT,
        )
    try:

        def started() -> dict[str, Any] | None:
            if proc.poll() is not None:
                pytest.fail(f"the emulator exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
            return read_connection(log)

        connection = wait_for("the emulator's connection JSON", started, timeout=60, interval=0.2, log=log)
        emu = EmulatorProcess(proc, connection, state_dir, log)
        with emu.client() as client:
            wait_for("the emulator to answer a ping", lambda: client.ping().responding, timeout=30, log=log)
        yield emu
    finally:
        kill_group(proc, grace=5)
        kill_strays(proc.pid)
        shutil.rmtree(state_dir, ignore_errors=True)


# -- airflow standalone -----------------------------------------------------------------------------


@dataclass
class Standalone:
    """A running ``airflow standalone`` and how to talk to it."""

    home: Path
    port: int
    major: int
    proc: subprocess.Popen[bytes]
    log: Path
    emulator: EmulatorProcess
    env: dict[str, str] = field(default_factory=dict)
    _tokens: dict[str, str] = field(default_factory=dict)
    _triggerers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _triggerer_logs: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # The logs of the triggerers started by start_triggerer, oldest first (the standalone's own is ``log``).
    triggerer_logs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- authentication ---------------------------------------------------------------------------

    def token(self, user: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> str:
        """A JWT from the api-server's token endpoint (Airflow 3), as the UI's login gets one."""
        assert self.major >= 3, "tokens are an Airflow 3 thing"
        if user not in self._tokens:
            reply = requests.post(f"{self.url}/auth/token", json={"username": user, "password": password}, timeout=30)
            reply.raise_for_status()
            self._tokens[user] = reply.json()["access_token"]
        return self._tokens[user]

    def session(self, user: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> requests.Session:
        """A requests session authenticated for the REST API (Bearer on 3.x, basic auth on 2.x)."""
        s = requests.Session()
        if self.major >= 3:
            s.headers["Authorization"] = f"Bearer {self.token(user, password)}"
        else:
            s.auth = (user, password)
        return s

    @property
    def api(self) -> str:
        return f"{self.url}/api/v2" if self.major >= 3 else f"{self.url}/api/v1"

    # -- DAG runs ---------------------------------------------------------------------------------

    def trigger(self, dag_id: str, *, timeout: float = 120) -> str:
        """Wait until ``dag_id`` is parsed and unpaused, then trigger a run; returns its run id."""
        s = self.session()

        def parsed() -> bool:
            reply = s.get(f"{self.api}/dags/{dag_id}", timeout=10)
            return reply.status_code == 200 and not reply.json().get("is_paused", True)

        wait_for(f"DAG {dag_id} to be parsed and unpaused", parsed, timeout=timeout, log=self.log)
        body: dict[str, Any] = {"logical_date": None, "conf": {}} if self.major >= 3 else {"conf": {}}
        reply = s.post(f"{self.api}/dags/{dag_id}/dagRuns", json=body, timeout=30)
        assert reply.status_code in (200, 201), reply.text
        return str(reply.json()["dag_run_id"])

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float = 240) -> str:
        """The run's final state (``success`` or ``failed``)."""
        s = self.session()

        def finished() -> str | None:
            state = s.get(f"{self.api}/dags/{dag_id}/dagRuns/{run_id}", timeout=10).json()["state"]
            return state if state in ("success", "failed") else None

        return str(wait_for(f"run {run_id} of {dag_id} to finish", finished, timeout=timeout, interval=1, log=self.log))

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        reply = self.session().get(f"{self.api}/dags/{dag_id}/dagRuns/{run_id}/taskInstances", timeout=30)
        reply.raise_for_status()
        return {ti["task_id"]: ti for ti in reply.json()["task_instances"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        url = f"{self.api}/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        reply = self.session().get(url, params={"deserialize": "true"}, timeout=30)
        reply.raise_for_status()
        value = reply.json()["value"]
        if isinstance(value, str):  # Airflow 2.x: str() of the value
            for parse in (json.loads, ast.literal_eval):
                with contextlib.suppress(ValueError, SyntaxError):
                    return parse(value)
        return value

    def extra_links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str | None]:
        url = f"{self.api}/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/links"
        reply = self.session().get(url, timeout=30)
        reply.raise_for_status()
        data = reply.json()
        return dict(data.get("extra_links", data))

    def ti_url(self, dag_id: str, run_id: str, task_id: str) -> str:
        return f"{self.api}/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        reply = self.session().get(self.ti_url(dag_id, run_id, task_id), timeout=30)
        reply.raise_for_status()
        return dict(reply.json())

    def wait_for_task(
        self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...], *, timeout: float = 120
    ) -> dict[str, Any]:
        """The task instance once its state is one of ``states``."""

        def reached() -> dict[str, Any] | None:
            ti = self.task_instance(dag_id, run_id, task_id)
            return ti if ti.get("state") in states else None

        what = f"{dag_id}.{task_id} in {run_id} to be {' or '.join(states)}"
        return dict(wait_for(what, reached, timeout=timeout, log=self.log))

    def wait_for_worker_exit(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> None:
        """Wait until the scheduler has read the executor's event of the try's worker process (a deferred
        task's worker exits when it defers). Airflow 3.3 marks a deferred task failed when its trigger
        fires and the task is queued again before the scheduler has read that event (apache/airflow#72716):
        a test that ends a job within seconds of its deferral waits for this first."""
        key = f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}', try_number={try_number},"
        seen = f"Received executor event with state success for task instance {key}"
        wait_for(
            f"the scheduler to read the exit of {dag_id}.{task_id}'s worker",
            lambda: seen in self.log.read_text(errors="replace"),
            timeout=120,
            log=self.log,
        )

    def set_task_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        """Mark a task instance ``failed``/``success``, as the UI's buttons do (PATCH on the REST API)."""
        body: dict[str, Any] = {"new_state": state} if self.major >= 3 else {"new_state": state, "dry_run": False}
        reply = self.session().patch(self.ti_url(dag_id, run_id, task_id), json=body, timeout=30)
        assert reply.status_code == 200, reply.text

    def clear_task(self, dag_id: str, run_id: str, task_id: str) -> None:
        """Clear one task instance (whatever its state), as the UI's Clear button does."""
        body = {
            "dry_run": False,
            "task_ids": [task_id],
            "dag_run_id": run_id,
            "only_failed": False,
            "reset_dag_runs": True,
        }
        reply = self.session().post(f"{self.api}/dags/{dag_id}/clearTaskInstances", json=body, timeout=30)
        assert reply.status_code == 200, reply.text

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause a DAG (the UI's toggle): a paused DAG's task instances are not queued."""
        reply = self.session().patch(f"{self.api}/dags/{dag_id}", json={"is_paused": paused}, timeout=30)
        assert reply.status_code == 200, reply.text

    def task_log_files(self, dag_id: str, run_id: str, task_id: str) -> str:
        """Every log file of the task instance on disk, the triggerers' ones included (3.x writes a
        trigger's log next to the try's, as ``attempt=N.log.trigger.<triggerer job id>.log``)."""
        task_dir = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return "\n".join(p.read_text(errors="replace") for p in sorted(task_dir.glob("attempt=*.log*")))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The log of one try, as the UI shows it (the REST API's log endpoint): JSON on 3.x, text on 2.x."""
        url = f"{self.ti_url(dag_id, run_id, task_id)}/logs/{try_number}"
        accept = "application/json" if self.major >= 3 else "text/plain"
        reply = self.session().get(url, params={"full_content": "true"}, headers={"Accept": accept}, timeout=30)
        reply.raise_for_status()
        return reply.text

    # -- processes --------------------------------------------------------------------------------

    def task_process(self, dag_id: str, run_id: str, task_id: str) -> psutil.Process:
        """The process running the task's code: the pid Airflow records on the running task instance.

        It must be one of this Airflow's processes (a descendant of ``airflow standalone``), so nothing
        else on the machine can be hit.
        """
        pid = self.task_instance(dag_id, run_id, task_id).get("pid")
        assert pid, f"{dag_id}.{task_id} in {run_id} records no pid"
        ours = {p.pid: p for p in psutil.Process(self.proc.pid).children(recursive=True)}
        assert pid in ours, f"pid {pid} of {dag_id}.{task_id} is not a process of this airflow standalone"
        return ours[pid]

    def triggerer_processes(self) -> list[psutil.Process]:
        """The running triggerer(s): standalone's own child and those the harness started, with their children."""
        roots = [psutil.Process(self.proc.pid)]
        roots += [psutil.Process(t.pid) for t in self._triggerers if t.poll() is None]
        found: list[psutil.Process] = []
        for root in roots:
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    if proc not in found and "triggerer" in " ".join(proc.cmdline()).split():
                        found.append(proc)
        return found

    def stop_triggerer(self, sig: signal.Signals, *, timeout: float = 90) -> None:
        """Stop every running triggerer: SIGTERM its main process (a clean shutdown, as systemd or k8s
        stop it), or SIGKILL its whole process tree (a crash: nothing gets to clean up). Waits until
        they are gone."""
        procs = self.triggerer_processes()
        assert procs, "no triggerer is running"
        mains = procs if sig == signal.SIGKILL else [p for p in procs if p.parent() not in procs]
        for proc in mains:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(sig)

        def gone() -> bool:
            for proc in procs:
                try:
                    if proc.status() != psutil.STATUS_ZOMBIE:  # standalone never reaps its dead child
                        return False
                except psutil.NoSuchProcess:
                    continue
            return True

        wait_for(f"the triggerer to stop after {sig.name}", gone, timeout=timeout, log=self.log)
        for t in self._triggerers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                t.wait(timeout=1)

    @contextlib.contextmanager
    def triggerer_frozen(self) -> Iterator[None]:
        """SIGSTOP every triggerer process for the block, SIGCONT after: it keeps its triggers but does
        nothing (no polls, no cancels) meanwhile, as a triggerer stalled under load would."""
        procs = self.triggerer_processes()
        assert procs, "no triggerer is running"

        def signal_all(sig: signal.Signals) -> None:
            for proc in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(sig)

        # A triggerer stopped inside a SQLite transaction would hold the database's lock for the whole
        # block, and every other component's write would fail with "database is locked" (a stall of our
        # making, not one a triggerer on a server database causes): freeze it only between transactions.
        for _ in range(60):
            signal_all(signal.SIGSTOP)
            if self._database_unlocked():
                break
            signal_all(signal.SIGCONT)
            time.sleep(0.5)
        else:
            raise AssertionError("the triggerer held the SQLite database's lock at every try to freeze it")
        try:
            yield
        finally:
            signal_all(signal.SIGCONT)

    def _database_unlocked(self) -> bool:
        """Whether the metadata database can be locked exclusively within a few seconds: the components
        that run hold its lock for milliseconds; a stopped process holding it never lets go."""
        db = sqlite3.connect(self.home / "airflow.db", timeout=3, isolation_level=None)
        try:
            db.execute("BEGIN EXCLUSIVE")
            db.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()

    def start_triggerer(self, *, alongside: bool = False) -> None:
        """Start an ``airflow triggerer`` (same configuration) and wait until it is healthy.

        ``alongside``: while another one runs (triggerer HA); otherwise none may be running."""
        assert alongside or not self.triggerer_processes(), "a triggerer is already running"
        log = LOGS / f"triggerer-{next(self._triggerer_logs)}.log"
        self.triggerer_logs.append(log)
        with log.open("wb") as out:
            self._triggerers.append(
                subprocess.Popen(
                    [str(BIN / "airflow"), "triggerer"],
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=self.home,
                )
            )
        self.wait_healthy(("triggerer",), log=log)

    def wait_healthy(self, components: tuple[str, ...], *, log: Path | None = None) -> None:
        url = f"{self.api}/monitor/health" if self.major >= 3 else f"{self.url}/health"
        wait_for(f"{', '.join(components)} to be healthy", lambda: healthy(url, components), timeout=120, log=log)

    def close(self) -> None:
        """Stop the triggerers the harness started (teardown)."""
        for t in self._triggerers:
            kill_group(t)
            kill_strays(t.pid)


def write_users(home: Path, env: dict[str, str], major: int) -> None:
    if major >= 3:
        passwords = home / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps({ADMIN_USER: ADMIN_PASSWORD, NOBODY_USER: NOBODY_PASSWORD}))
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{ADMIN_USER}:admin,{NOBODY_USER}:"
        env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(passwords)
        return
    # Airflow 2.x: FAB users live in the metadata database, which must exist first.
    airflow = str(BIN / "airflow")
    for command in (
        [airflow, "db", "migrate"],
        [airflow, "users", "create", "--username", ADMIN_USER, "--password", ADMIN_PASSWORD, *_FAB_ADMIN],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, f"{command[1:3]} failed:\n{result.stdout}\n{result.stderr}"


_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


def suite_dags_folder(home: Path, major: int) -> Path:
    """``example_dags`` on Airflow 3 (the suite's DAGs are a second bundle); on 2.x, which has a single
    DAG folder, a folder in ``home`` linking to both (Airflow 2 follows links in its DAG folder)."""
    if major >= 3:
        return ROOT / "example_dags"
    folder = home / "dags"
    folder.mkdir(exist_ok=True)
    (folder / "example_dags").symlink_to(ROOT / "example_dags", target_is_directory=True)
    (folder / "standalone_dags").symlink_to(SUITE_DAGS, target_is_directory=True)
    return folder


def healthy(url: str, components: tuple[str, ...]) -> bool:
    health = requests.get(url, timeout=5).json()
    return all(health.get(c, {}).get("status") == "healthy" for c in components)


@contextlib.contextmanager
def run_standalone(
    emulator: EmulatorProcess, *, dags_folder: Path | None = None, extra_env: dict[str, str] | None = None
) -> Iterator[Standalone]:
    """A real ``airflow standalone`` on ``emulator``, ready (health endpoints green) when this yields.

    ``dags_folder`` (default ``example_dags``) is for the benchmarks; ``extra_env`` is set on top (Airflow
    settings, ``STORAGE_EMULATOR_HOST``).
    """
    major = airflow_major()
    home = Path(tempfile.mkdtemp(prefix="slurmapi-standalone-"))
    LOGS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder or suite_dags_folder(home, major)),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            # A triggerer that died without a word hands its triggers over after this many seconds.
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
            # The log servers of the worker and the triggerer default to fixed ports (8793, 8794).
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW_CONN_SLURMAPI_DEFAULT": emulator.connection_json,
            "NO_COLOR": "1",
        }
    )
    if major >= 3:
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
                "AIRFLOW__API__SECRET_KEY": os.urandom(24).hex(),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
                    [
                        {"name": "dags-folder", "classpath": _BUNDLE, "kwargs": {"path": str(ROOT / "example_dags")}},
                        {"name": "standalone-dags", "classpath": _BUNDLE, "kwargs": {"path": str(SUITE_DAGS)}},
                    ]
                ),
            }
        )
    else:
        env.update(
            {
                "AIRFLOW__WEBSERVER__WEB_SERVER_HOST": "127.0.0.1",
                "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(port),
                "AIRFLOW__WEBSERVER__WORKERS": "1",
                "AIRFLOW__WEBSERVER__SECRET_KEY": os.urandom(24).hex(),
                "AIRFLOW__API__AUTH_BACKENDS": "airflow.api.auth.backend.basic_auth",
                "AIRFLOW__API__ENABLE_XCOM_DESERIALIZE_SUPPORT": "True",
                "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "5",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            }
        )
    env.update(extra_env or {})
    write_users(home, env, major)
    log = LOGS / "standalone.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "airflow"), "standalone"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=home,
        )
    started = time.monotonic()
    try:
        components: tuple[str, ...] = ("metadatabase", "scheduler", "triggerer")
        if major >= 3:
            url, components = f"http://127.0.0.1:{port}/api/v2/monitor/health", (*components, "dag_processor")
        else:
            url = f"http://127.0.0.1:{port}/health"

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"airflow standalone exited with {proc.returncode}; see {log}{log_tail(log)}")
            return healthy(url, components)

        wait_for("airflow standalone to be healthy", ready, timeout=READY_TIMEOUT, interval=1, log=log)
        (LOGS / "startup_seconds.txt").write_text(f"{time.monotonic() - started:.1f}\n")
        airflow = Standalone(home=home, port=port, major=major, proc=proc, log=log, emulator=emulator, env=env)
        try:
            yield airflow
        finally:
            airflow.close()
    finally:
        kill_group(proc)
        kill_strays(proc.pid)
        logs = home / "logs"
        if logs.exists():
            shutil.copytree(logs, LOGS / "task-logs", dirs_exist_ok=True)
        shutil.rmtree(home, ignore_errors=True)
