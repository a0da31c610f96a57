"""Batch scripts as local processes: spawning them, and killing and reaping everything they started."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from .jobs import Job
from .notation import hostlist

_BASH = shutil.which("bash") or "/bin/bash"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux), so a job's leftovers are reaped here, not left as zombies.

    Some init processes (containers, micro-VMs) never reap re-parented zombies; as a subreaper this
    process gets them and ``Reaper`` waits for exactly the pids it killed, never for other children.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def spawn(
    script: Path, cwd: Path, env: dict[str, str], stdout: Path, stderr: Path | None, stdin: Path | None
) -> subprocess.Popen[bytes]:
    """Start ``bash script`` as the leader of a new session, output appended to files like slurmstepd."""
    cwd.mkdir(parents=True, exist_ok=True)
    files: list[IO[bytes]] = []
    try:
        out = _open_output(stdout, files)
        err = _open_output(stderr, files) if stderr is not None else out
        source: Any = subprocess.DEVNULL
        if stdin is not None:
            source = open(stdin, "rb")  # noqa: SIM115 - handed to the child, closed below
            files.append(source)
        return subprocess.Popen(
            [_BASH, str(script)],
            cwd=cwd,
            env=env,
            stdin=source,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        for handle in files:
            handle.close()


def _open_output(path: Path, files: list[IO[bytes]]) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "wb")  # noqa: SIM115 - handed to the child, closed by spawn()
    files.append(handle)
    return handle


def job_environment(
    job: Job,
    cluster: str,
    cwd: Path,
    fs_root: Path,
    array_indexes: list[int],
    *,
    bin_dir: Path | None = None,
    minute_seconds: float = 60.0,
    node_environment: dict[str, str] | None = None,
) -> dict[str, str]:
    """The batch script's environment: the job's ``environment`` list and the SLURM_* variables only.

    ``bin_dir`` (the emulator's ``scontrol``) goes first on ``PATH``, as Slurm's own commands are on a
    real node's; ``SLURM_JOB_END_TIME`` counts the time limit in the emulator's minutes;
    ``node_environment`` (where the node's metadata server is, ...) fills in what the job does not set.
    """
    env: dict[str, str] = {}
    for item in job.request.environment:
        key, sep, value = item.partition("=")
        if sep:
            env[key] = value
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}:{env['PATH']}" if env.get("PATH") else str(bin_dir)
    req = job.request
    tasks = req.tasks or max(req.tasks_per_node, 1) * req.node_count
    nodelist = hostlist(job.nodes)
    env.update(
        {
            "SLURM_JOB_ID": str(job.job_id),
            "SLURM_JOBID": str(job.job_id),
            "SLURM_JOB_NAME": req.name,
            "SLURM_JOB_USER": job.user,
            "SLURM_JOB_ACCOUNT": req.account or "default",
            "SLURM_SUBMIT_DIR": str(cwd),
            "SLURM_NNODES": str(req.node_count),
            "SLURM_JOB_NUM_NODES": str(req.node_count),
            "SLURM_JOB_PARTITION": req.partition,
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist,
            "SLURMD_NODENAME": job.nodes[0],
            "SLURM_CPUS_PER_TASK": str(req.cpus_per_task),
            "SLURM_NTASKS": str(tasks),
            "SLURM_CLUSTER_NAME": cluster,
            "SLURM_RESTART_COUNT": str(job.restart_cnt),
            "SLURM_JOB_START_TIME": str(job.start_time),
            # Not Slurm's: where cluster paths live on this machine, for scripts that need absolute paths.
            "SLURM_EMULATOR_ROOT": str(fs_root),
        }
    )
    # The simulated node's own temporary folder: two emulators on one machine are two clusters, whose jobs
    # number from 1 alike, so they must not share /tmp (the result wrapper names its files by job id).
    tmp = fs_root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.setdefault("TMPDIR", str(tmp))
    for key, value in (node_environment or {}).items():
        env.setdefault(key, value)
    if req.time_limit is not None:
        env["SLURM_JOB_END_TIME"] = str(job.start_time + int(req.time_limit * minute_seconds))
    if req.tasks_per_node:
        env["SLURM_NTASKS_PER_NODE"] = str(req.tasks_per_node)
    if job.array_task_id is not None:
        env.update(
            {
                "SLURM_ARRAY_JOB_ID": str(job.array_job_id),
                "SLURM_ARRAY_TASK_ID": str(job.array_task_id),
                "SLURM_ARRAY_TASK_COUNT": str(len(array_indexes)),
                "SLURM_ARRAY_TASK_MIN": str(min(array_indexes)),
                "SLURM_ARRAY_TASK_MAX": str(max(array_indexes)),
            }
        )
    return env


def killpg(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def session_members(session: int) -> list[int]:
    """Pids of the live processes of a session (a job's processes: its batch script leads one)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:
            members.append(int(entry.name))
    return members


class Reaper:
    """Ends jobs' process trees: kills what a finished batch script left behind and reaps it all."""

    def __init__(self) -> None:
        self._strays: set[int] = set()

    @property
    def busy(self) -> bool:
        return bool(self._strays)

    def finished(self, proc: subprocess.Popen[bytes]) -> int | None:
        """The script's wait status if it has ended (then nothing of its job survives), else None."""
        ended = self.finished_with_usage(proc)
        return None if ended is None else ended[0]

    def finished_with_usage(self, proc: subprocess.Popen[bytes]) -> tuple[int, int | None] | None:
        """``(wait status, peak resident memory in bytes)`` once the script has ended (then nothing of its
        job survives), else None. The peak is the script's own or that of a child it waited for, whichever
        is larger (``wait4``); None when the script was reaped elsewhere.

        Slurm kills every process of a job when its batch script ends. The script is still a
        zombie while we kill, so its session and group ids cannot have been reused yet.
        """
        try:
            ended = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            code = proc.poll()
            return None if code is None else (code, None)
        if ended is None:
            return None
        self._kill_session(proc)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except ChildProcessError:
            return proc.wait(), None
        proc.returncode = os.waitstatus_to_exitcode(status)
        return proc.returncode, usage.ru_maxrss * 1024  # Linux counts it in KiB

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a job's whole process tree now; it is reaped by ``finished``/``sweep``."""
        self._kill_session(proc)

    def _kill_session(self, proc: subprocess.Popen[bytes]) -> None:
        killpg(proc, signal.SIGKILL)
        for pid in session_members(proc.pid):
            if pid != proc.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                self._strays.add(pid)

    def sweep(self) -> None:
        """Reap killed descendants that were re-parented to this process; forget those that are not."""
        me = os.getpid()
        for pid in list(self._strays):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                if _parent(pid) not in (me, *self._strays):
                    self._strays.discard(pid)
                continue
            if done == pid:
                self._strays.discard(pid)

    def stop_all(self, procs: list[subprocess.Popen[bytes]], timeout: float = 10.0) -> None:
        """Kill and reap the given scripts and everything they started."""
        for proc in procs:
            self._kill_session(proc)
        for proc in procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + timeout
        while self._strays and time.monotonic() < deadline:
            self.sweep()
            if self._strays:
                time.sleep(0.01)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None
