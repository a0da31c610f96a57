"""``scontrol update JobId=<id> Comment=...`` for the emulator's jobs, with slurmctld 24.11's rules.

A running job of real Slurm may update its own record with ``scontrol``; the provider's result wrapper
(``api/results.py``) does so. The emulator puts an ``scontrol`` on its jobs' ``PATH`` that sends its
arguments to a :class:`ControlServer` on loopback, which applies them to the cluster's record under
its lock, as slurmctld does: ``Comment`` and ``Extra`` up to 1024 bytes ("Pathname of a file,
directory or other parameter too long"), refused once the job is ending ("Job has already finished").

``scontrol requeue <id>`` sends a job back to the queue, as Slurm does, unless it was submitted with
``requeue: false``.

The same shim, named ``sacctmgr``, runs ``sacctmgr -i modify job where JobId=<id> set Comment=...`` as
Slurm 24.11's does for the job's own user: it writes the job's accounting comment (``comment.job`` of
``/slurmdb/{v}/job/{id}``) whatever ``AccountingStoreFlags`` says, with each quote turned into a backtick,
once slurmdbd has recorded the job ("Request didn't affect anything" before), and at any time after.
"""

from __future__ import annotations

import dataclasses
import json
import socketserver
import stat
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import Cluster

# slurmctld's limit on a job's comment and extra (measured on Slurm 24.11: 1024 bytes pass, 1025 fail).
FIELD_LIMIT = 1024
_FIELDS = ("comment", "extra")

# The shim on the jobs' PATH: plain Python, no import of this package (fast, and any environment).
_SHIM = """#!{python}
import json, os, socket, sys
s = socket.create_connection(("127.0.0.1", {port}))
s.sendall(json.dumps([os.path.basename(sys.argv[0])] + sys.argv[1:]).encode() + b"\\n")
reply = json.loads(s.makefile("rb").readline())
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.exit(reply["rc"])
"""


def update(cluster: Cluster, argv: list[str]) -> tuple[int, str, str]:
    """Run ``scontrol <argv>`` against ``cluster``: ``(exit code, stdout, stderr)``."""
    if len(argv) == 2 and argv[0].lower() == "requeue":
        return requeue(cluster, argv[1])
    if not argv or argv[0].lower() != "update":
        return 1, "", "emulator scontrol: only 'update JobId=<id> Comment=...|Extra=...' and 'requeue <id>'\n"
    values: dict[str, str] = {}
    for item in argv[1:]:
        key, sep, value = item.partition("=")
        if not sep:
            return 1, "", f"scontrol: error: Invalid input: {item}\n"
        values[key.lower()] = value
    text = values.pop("jobid", "")
    unknown = [k for k in values if k not in _FIELDS]
    array_id, sep, task_text = text.partition("_")
    if not array_id.isdigit() or (sep and not task_text.isdigit()) or unknown:
        return 1, "", f"scontrol: error: Invalid input: {' '.join(argv[1:])}\n"
    with cluster.lock:
        # JobId=<id>: the job, or every task of the array <id> (real slurmctld: the last task's record id
        # is the array's, so a task that names itself by $SLURM_JOB_ID may update the whole array);
        # JobId=<array>_<task>: that task alone.
        jobs = cluster.active(int(array_id))
        if sep:
            jobs = [job for job in jobs if job.array_task_id == int(task_text)]
        if not jobs:
            return 1, "", f"Invalid job id specified for job {text}\n"
        live = [job for job in jobs if job.ending is None and not job.is_final]
        if not live:
            return 1, "", f"Job has already finished for job {text}\n"
        if any(len(v.encode()) > FIELD_LIMIT for v in values.values()):
            return 1, "", f"Pathname of a file, directory or other parameter too long for job {text}\n"
        for job in live:
            # A task of an array shares the array's request: the update is its own (as a split-off task's is).
            job.request = dataclasses.replace(
                job.request,
                comment=values.get("comment", job.request.comment),
                extra=values.get("extra", job.request.extra),
            )
    return 0, "", ""


def requeue(cluster: Cluster, text: str) -> tuple[int, str, str]:
    """``scontrol requeue <id>``, as Slurm 24.11 and 26.05 answer it (tests/real_slurm/test_scenarios_signals.py):
    a job submitted with ``requeue: false`` is refused ("Requested operation is presently disabled"), one
    still pending too; a running or ended job still in the queue goes back to PENDING, its restart count up."""
    job = cluster.get(int(text)) if text.isdigit() else None
    if job is None or not job.in_queue:
        return 1, "", f"Invalid job id specified for job {text}\n"
    refused = cluster.requeue(job)
    return (1, "", f"{refused} for job {text}\n") if refused else (0, "", "")


def sacctmgr(cluster: Cluster, argv: list[str]) -> tuple[int, str, str]:
    """Run ``sacctmgr <argv>`` against ``cluster``'s accounting: ``(exit code, stdout, stderr)``."""
    usage = "emulator sacctmgr: only '-i modify job where JobId=<id> set Comment=...' is emulated\n"
    words = [a for a in argv if a not in ("-i", "--immediate")]
    if len(words) != 6 or [w.lower() for w in (*words[:3], words[4])] != ["modify", "job", "where", "set"]:
        return 1, "", usage
    key, _, text = words[3].partition("=")
    field, sep, value = words[5].partition("=")
    if key.lower() != "jobid" or field.lower() != "comment" or not sep:
        return 1, "", usage
    array_id, sep, task_text = text.partition("_")
    if not array_id.isdigit() or (sep and not task_text.isdigit()):
        return 1, "", f" Bad job id: {text}\n"
    with cluster.lock:
        jobs = [job for job in cluster.accounting(int(array_id)) if not sep or job.array_task_id == int(task_text)]
        if not sep:  # <id> names one record: the job, or an array's record of that id
            jobs = [job for job in jobs if job.job_id == int(array_id)]
        if not jobs:
            return (
                1,
                " Error with request: Data has not changed since time specified\n",
                "sacctmgr: error: Request didn't affect anything\n",
            )
        for job in jobs:
            job.accounted_comment = value.replace('"', "`").replace("'", "`")
    listed = "".join(f"  {job.job_id} submitted at {job.submit_time}\n" for job in jobs)
    return 0, f" Modified jobs...\n{listed}", ""


class ControlServer:
    """Answers the jobs' ``scontrol`` shims; :meth:`start` writes the shim to ``bin_dir``."""

    def __init__(self, cluster: Cluster, bin_dir: Path) -> None:
        self.cluster = cluster
        self.bin_dir = bin_dir
        control = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    prog, *argv = (str(a) for a in json.loads(self.rfile.readline()))
                    run = sacctmgr if prog == "sacctmgr" else update
                    rc, out, err = run(control.cluster, argv)
                except Exception as exc:  # the shim gets an answer whatever happens
                    rc, out, err = 1, "", f"emulator scontrol: {exc}\n"
                reply: dict[str, Any] = {"rc": rc, "stdout": out, "stderr": err}
                self.wfile.write(json.dumps(reply).encode() + b"\n")

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="slurm-emulator-scontrol", daemon=True)

    def start(self) -> None:
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in ("scontrol", "sacctmgr"):
            shim = self.bin_dir / name
            shim.write_text(_SHIM.format(python=sys.executable, port=self._server.server_address[1]))
            shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
