"""Talking to the real-Slurm test cluster: REST calls as the job user, reply recording, cluster controls.

Used by tests/real_slurm/conftest.py (the `real_slurm` fixture) and imported by its tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

HERE = Path(__file__).resolve().parents[1] / "real_slurm"  # start_slurm.sh, ctl.sh and the recordings
TERMINAL = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}

Reply = tuple[int, Any]


def load_env_file(path: Path) -> dict[str, str]:
    """Read start_slurm.sh's env file: KEY='value' lines (also valid shell)."""
    env = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", line.strip())
        if m:
            env[m.group(1)] = m.group(2).strip("'")
    return env


def is_terminal(state: list[str]) -> bool:
    """Slurm's own rule: a terminal base state, and no longer COMPLETING."""
    return bool(state) and state[0] in TERMINAL and "COMPLETING" not in state


def ended_by_sigterm(code: dict[str, Any]) -> bool:
    """A batch script's ``exit_code`` after the SIGTERM of its time limit: the shell killed by it (SIGNALED,
    15), or the shell exiting 128 + 15 (ERROR, 143) when its child died of the signal before the shell
    handled its own. Real Slurm answered the second under CI's load, 24.11 and 26.05 (the batch step FAILED,
    143); the job's state is TIMEOUT either way."""
    if code["status"] == ["SIGNALED"]:
        return bool(code["signal"]["id"]["number"] == 15)
    return code["status"] == ["ERROR"] and code["return_code"]["number"] == 143


# The REST versions each Slurm release's slurmrestd serves (start_slurm.sh's -d list).
RELEASE_VERSIONS = {
    "24.11": ("v0.0.40", "v0.0.41", "v0.0.42"),
    "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
}


def suite_release() -> str:
    """The Slurm release this session tests: ``SLURM_RELEASE``, else the one in ``SLURMAPI_REAL_SLURM_ENV``'s file."""
    release = os.environ.get("SLURM_RELEASE")
    external = os.environ.get("SLURMAPI_REAL_SLURM_ENV")
    if not release and external and Path(external).is_file():
        release = load_env_file(Path(external)).get("SLURM_RELEASE")
    return release or "24.11"


RELEASE = suite_release()
SERVED = RELEASE_VERSIONS[RELEASE]
# What the scenarios' connections use: the default v0.0.42 on 24.11; on 26.05 "auto", which picks v0.0.45
SCENARIO_API_VERSION = "v0.0.42" if RELEASE == "24.11" else "auto"
SCENARIO_RESOLVED = "v0.0.42" if RELEASE == "24.11" else SERVED[-1]


class Recorder:
    """Saves every real reply as ``<dir>/<name>.json`` = {method, path, status, body}, plus INDEX.tsv."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.index: dict[str, str] = {}
        self.lock = threading.Lock()  # a JobWatcher thread records too

    def save(self, name: str, method: str, path: str, status: int, body: Any) -> None:
        safe = "/".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", part) for part in name.split("/") if part)
        record = {"method": method, "path": path, "status": status, "body": body}
        with self.lock:
            target = self.directory / f"{safe}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(record, indent=2) + "\n")
            self.index[safe] = f"{safe}\t{method}\t{path}\t{status}"
            lines = ["name\tmethod\tpath\tstatus", *(self.index[k] for k in sorted(self.index))]
            (self.directory / "INDEX.tsv").write_text("\n".join(lines) + "\n")


class RealSlurm:
    """A running test cluster: REST calls as the job user, plus the few controls tests need."""

    def __init__(self, env: dict[str, str], recorder: Recorder) -> None:
        self.env = env
        self.rest_url = env["SLURM_REST_URL"].rstrip("/")
        self.jwt = env["SLURM_JWT"]
        self.user = env["SLURM_USER"]
        self.partition = env.get("SLURM_PARTITION", "debug")
        # start_slurm.sh's preemption partitions: jobs of the second take the node from the first's
        self.preemptible_partition = env.get("SLURM_PREEMPTIBLE_PARTITION", "")
        self.preemptor_partition = env.get("SLURM_PREEMPTOR_PARTITION", "")
        self.root = Path(env["SLURM_ROOT"])
        self.versions = env.get("SLURM_API_VERSIONS", "v0.0.42").split(",")
        self.min_job_age = int(env.get("SLURM_MIN_JOB_AGE", "300"))
        self.home = f"/home/{self.user}"
        self.ctl = Path(env.get("SLURM_CTL", HERE / "ctl.sh"))
        self.recorder = recorder
        self.session = requests.Session()
        self.session.headers.update({"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.jwt})

    def new_client(self) -> RealSlurm:
        """Another handle on the same cluster with its own HTTP session (requests' are not thread-safe)."""
        return RealSlurm(self.env, self.recorder)

    # --- REST -----------------------------------------------------------------------------------
    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, record: str | None = None) -> Reply:
        """One slurmrestd call. Returns (HTTP status, JSON body as dict, or the raw text if not JSON)."""
        resp = self.session.request(method, self.rest_url + path, json=body, timeout=60)
        parsed: Any
        try:
            parsed = resp.json()
        except ValueError:
            parsed = resp.text
        if record:
            self.recorder.save(record, method, path, resp.status_code, parsed)
        return resp.status_code, parsed

    def poll(
        self,
        method: str,
        path: str,
        until: Callable[[int, Any], bool],
        *,
        timeout: float,
        what: str,
        record: str | None = None,
        key: Callable[[int, Any], str] | None = None,
        interval: float = 0.25,
    ) -> Reply:
        """Repeat a call until ``until(status, body)`` holds, or fail after ``timeout`` seconds.

        With ``record``, each distinct ``key(status, body)`` seen on the way is saved as
        ``<record>_<key>`` (so PENDING, RUNNING, ... replies are all kept, not just the last).
        """
        deadline = time.monotonic() + timeout
        seen: set[str] = set()
        last: Reply | None = None
        while True:
            status, body = self.call(method, path)
            last = (status, body)
            if record and key:
                k = key(status, body)
                if k not in seen:
                    seen.add(k)
                    self.recorder.save(f"{record}_{k}", method, path, status, body)
            if until(status, body):
                return status, body
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last reply: {last!r:.2000}")
            time.sleep(interval)

    def job_state(self, job_id: int | str, version: str = "v0.0.42") -> list[str]:
        status, body = self.call("GET", f"/slurm/{version}/job/{job_id}")
        if status != 200:
            return []
        return list(body["jobs"][0]["job_state"])

    def cancel_all_jobs(self) -> None:
        """Cancel whatever the tests left in the queue (best effort: this runs at teardown)."""
        try:
            status, body = self.call("GET", "/slurm/v0.0.42/jobs/")
            if status != 200:
                return
            for job in body.get("jobs", []):
                if job.get("user_name") == self.user and not is_terminal(job.get("job_state", [])):
                    self.call("DELETE", f"/slurm/v0.0.42/job/{job['job_id']}")
        except requests.RequestException:
            pass

    # --- the cluster's files and daemons ---------------------------------------------------------
    def host_path(self, cluster_path: str) -> Path:
        """Where a file inside the cluster (e.g. a job's output) is on this host."""
        if not cluster_path.startswith("/"):
            raise ValueError(f"cluster paths are absolute, got {cluster_path!r}")
        return self.root / cluster_path.lstrip("/")

    def _ctl(self, *args: str) -> str:
        # only what ctl.sh needs: a SLURM_JWT in its environment would change how Slurm authenticates
        env = dict(os.environ)
        env.pop("SLURM_JWT", None)
        env.update({k: self.env[k] for k in ("SLURM_ROOT", "SLURM_STATE_DIR", "SLURM_USER") if k in self.env})
        proc = subprocess.run([str(self.ctl), *args], env=env, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            pytest.fail(f"ctl.sh {' '.join(args)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc.stdout

    def slurm_command(self, *argv: str, as_job_user: bool = False, check: bool = True) -> str:
        """Run a Slurm command (``scontrol``, ``sbatch``, ``sinfo``...) in the cluster's chroot: as root, its
        administrator, or ``as_job_user``; its stdout, or (``check``) the test fails saying what the command
        said (else its stdout and stderr)."""
        command = ["chroot", str(self.root)]
        if as_job_user:
            command += ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--init-groups"]
        # a SLURM_JWT in the environment would switch the command to JWT auth: it gets a bare one
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": self.home if as_job_user else "/"}
        proc = subprocess.run([*command, *argv], env=env, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0 and check:
            pytest.fail(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc.stdout if proc.returncode == 0 else proc.stdout + proc.stderr

    def add_user(self, name: str) -> str:
        """A second unprivileged Slurm user (created once); returns a fresh JWT for it."""
        self._ctl("add-user", name)
        return self._ctl("token", name, "14400").strip()

    def stop_slurmdbd(self) -> None:
        self._ctl("slurmdbd-stop")

    def start_slurmdbd(self) -> None:
        self._ctl("slurmdbd-start")
