"""Record the replies the provider reads from a running real Slurm, at one REST version, as test fixtures.

``python tests/real_slurm/record_fixtures.py ENV_FILE VERSION OUT_DIR`` (e.g. the 26.05 cluster's
``.real-slurm-26.05/slurm.env``, ``v0.0.45``, ``tests/fixtures/slurm-26.05``): the job endpoints the
provider calls (submit, job info in each state, ``jobs/state``, cancel, accounting, an array with a failing
task, the errors it must read), each saved as ``<name>.json`` (Slurm's reply body) with an ``INDEX.tsv``
(name, method, path, HTTP status), the layout of ``tests/fixtures/slurm-24.11``. The recordings are facts
about that Slurm release: unit tests and the emulator's conformance check read them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import requests

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL"}


def load_env(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip("'\"")
    return env


class Recording:
    def __init__(self, env: dict[str, str], version: str, out: Path) -> None:
        self.url = env["SLURM_REST_URL"].rstrip("/")
        self.home = f"/home/{env['SLURM_USER']}"
        self.partition = env.get("SLURM_PARTITION", "debug")
        self.v = version
        self.out = out
        self.index: dict[str, str] = {}
        self.session = requests.Session()
        self.session.headers.update({"X-SLURM-USER-NAME": env["SLURM_USER"], "X-SLURM-USER-TOKEN": env["SLURM_JWT"]})

    def call(self, name: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = self.session.request(method, self.url + path, json=body, timeout=60)
        try:
            parsed: Any = response.json()
        except ValueError:
            parsed = response.text
        if name and name not in self.index:
            (self.out / f"{name}.json").write_text(json.dumps(parsed, indent=2) + "\n")
            self.index[name] = f"{name}\t{method}\t{path}\t{response.status_code}"
        return response.status_code, parsed

    def submit(self, name: str | None, script: str, **job: Any) -> int:
        fields = {
            "name": "fixture",
            "partition": self.partition,
            "current_working_directory": self.home,
            "environment": ["PATH=/bin:/usr/bin"],
            "time_limit": {"set": True, "number": 5},
            **job,
        }
        status, body = self.call(name, "POST", f"/slurm/{self.v}/job/submit", {"job": fields, "script": script})
        assert status == 200, body
        return int(body["job_id"])

    def state(self, path: str) -> tuple[int, list[list[str]]]:
        status, body = self.call(None, "GET", path)
        if status != 200 or not isinstance(body, dict):
            return status, []
        states = [j.get("job_state") or j["state"]["current"] for j in body.get("jobs") or []]
        return status, states

    def poll(self, prefix: str, path: str, until: Any, timeout: float = 180) -> None:
        """GET ``path`` until ``until(status, states)``; record the first reply of each state as ``prefix_state``."""
        deadline = time.monotonic() + timeout
        while True:
            status, states = self.state(path)
            key = f"http_{status}" if status != 200 else ("_".join(states[0]).lower() if states else "none")
            self.call(f"{prefix}_{key}", "GET", path)
            if until(status, states):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"{path}: no wanted state in {timeout}s (last {status} {states})")
            time.sleep(0.3)

    def save_index(self) -> None:
        lines = ["name\tmethod\tpath\thttp_status", *(self.index[k] for k in sorted(self.index))]
        (self.out / "INDEX.tsv").write_text("\n".join(lines) + "\n")


def ended(status: int, states: list[list[str]]) -> bool:
    return status == 200 and bool(states) and all(set(s) & TERMINAL and "COMPLETING" not in s for s in states)


def record(rec: Recording) -> None:
    v = rec.v
    rec.call("ping", "GET", f"/slurm/{v}/ping/")
    rec.call("slurmdb_ping", "GET", f"/slurmdb/{v}/ping/")
    done = rec.submit("submit", "#!/bin/bash\nsleep 4\necho done\n")
    rec.poll("job", f"/slurm/{v}/job/{done}", ended)
    failed = rec.submit("submit_fail", "#!/bin/bash\nexit 3\n")
    rec.poll("job", f"/slurm/{v}/job/{failed}", ended)
    long = rec.submit("submit_long", "#!/bin/bash\nsleep 300\n")
    rec.poll("job_long", f"/slurm/{v}/job/{long}", lambda s, st: st and "RUNNING" in st[0])
    rec.call("jobs_state", "GET", f"/slurm/{v}/jobs/state/?job_id={done}&job_id={long}&job_id={failed}")
    rec.call("jobs_list", "GET", f"/slurm/{v}/jobs/")
    rec.call("cancel", "DELETE", f"/slurm/{v}/job/{long}")
    rec.call("job_after_cancel_immediate", "GET", f"/slurm/{v}/job/{long}")
    rec.poll("job_after_cancel", f"/slurm/{v}/job/{long}", ended)
    rec.call("cancel_again", "DELETE", f"/slurm/{v}/job/{long}")
    rec.call("cancel_not_found", "DELETE", f"/slurm/{v}/job/999999")
    rec.call("job_not_found", "GET", f"/slurm/{v}/job/999999")
    rec.call("submit_unknown_field", "POST", f"/slurm/{v}/job/submit", _job(rec, no_such_field=1))
    rec.call("submit_bad_partition", "POST", f"/slurm/{v}/job/submit", _job(rec, partition="nope"))
    rec.call("unknown_path", "GET", f"/slurm/{v}/no/such/path")
    array = rec.submit("submit_array", '#!/bin/bash\n[ "$SLURM_ARRAY_TASK_ID" != 1 ]\n', array="0-2")
    rec.call("array_pending", "GET", f"/slurm/{v}/job/{array}")
    rec.poll("array", f"/slurm/{v}/job/{array}", lambda s, st: len(st) == 3 and ended(s, st))
    rec.call("array_jobs_state", "GET", f"/slurm/{v}/jobs/state/?job_id={array}")
    for name, job_id in (("slurmdb_job", done), ("slurmdb_job_failed", failed), ("slurmdb_job_cancelled", long)):
        rec.poll(name, f"/slurmdb/{v}/job/{job_id}", ended, timeout=60)
    rec.poll("slurmdb_array", f"/slurmdb/{v}/job/{array}", lambda s, st: len(st) == 3 and ended(s, st), 60)
    rec.call("slurmdb_jobs_filtered", "GET", f"/slurmdb/{v}/jobs/?job_name=fixture&users=ciuser")
    rec.call("slurmdb_job_not_found", "GET", f"/slurmdb/{v}/job/999999")


def _job(rec: Recording, **fields: Any) -> dict[str, Any]:
    job = {"name": "fixture", "current_working_directory": rec.home, "environment": ["PATH=/bin"], **fields}
    return {"job": {"partition": rec.partition, **job}, "script": "#!/bin/bash\ntrue\n"}


def main(argv: list[str]) -> int:
    env_file, version, out = Path(argv[0]), argv[1], Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rec = Recording(load_env(env_file), version, out)
    try:
        record(rec)
    finally:
        rec.save_index()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
