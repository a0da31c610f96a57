"""The simulated slurmctld + slurmdbd: job queue, scheduler thread, real or simulated job runs."""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import os
import posixpath
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from .jobs import Job, JobRequest
from .notation import absolute_path, expand_pattern, parse_array
from .procs import Reaper, become_subreaper, job_environment, killpg, spawn
from .scontrol import ControlServer
from .templates import signal_name

_MIN_PASS_INTERVAL = 0.02


class SubmitError(Exception):
    """slurmctld refused a submission: ``record`` names the recorded error, ``status`` the HTTP code."""

    def __init__(self, record: str, status: int = 500, error: str = "", number: int = 0) -> None:
        super().__init__(error or record)
        self.record = record
        self.status = status
        self.error = error
        self.number = number


class Cluster:
    """All job state behind one lock; a background thread advances it."""

    def __init__(
        self,
        *,
        name: str,
        partitions: dict[str, int],
        default_partition: str,
        state_dir: Path,
        min_job_age: float,
        minute_seconds: float,
        accounting_delay: float,
        simulate: bool,
        completing_time: float = 0.3,
        kill_wait: float = 2.0,
        tick: float = 0.05,
        accounting_store_flags: frozenset[str] = frozenset(),
    ) -> None:
        self.name = name
        # slurm.conf's AccountingStoreFlags: what accounting keeps besides the defaults (job_comment, ...).
        self.accounting_store_flags = accounting_store_flags
        self.default_partition = default_partition
        self.state_dir = state_dir
        self.min_job_age = min_job_age
        self.minute_seconds = minute_seconds
        self.accounting_delay = accounting_delay
        self.simulate = simulate
        self.completing_time = completing_time
        self.kill_wait = kill_wait
        self.tick = tick
        # slurm.conf's AuthInfo=cred_expire (120 s by default): how long a requeued job waits to start again.
        self.requeue_delay = 0.0
        # slurm.conf's JobAcctGatherFrequency: a run's memory is sampled every so many seconds (a job's
        # ``account_gather_frequency`` may ask a shorter interval).
        self.acct_gather_frequency = 30
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.partitions: dict[str, list[str]] = {
            part: [self._node_name(part, i) for i in range(1, count + 1)] for part, count in partitions.items()
        }
        # Free nodes as heaps of indexes into ``self.partitions[part]``: the lowest-numbered go first.
        self._free: dict[str, list[int]] = {part: list(range(len(nodes))) for part, nodes in self.partitions.items()}
        self._jobs: dict[int, Job] = {}
        self._arrays: dict[int, list[Job]] = {}
        self._array_running: dict[int, int] = {}
        self._pending: dict[str, dict[int, Job]] = {part: {} for part in self.partitions}
        self._running: dict[int, Job] = {}
        self._orphans: list[subprocess.Popen[bytes]] = []
        self.spawned_pids: list[int] = []
        self._reaper = Reaper()
        self._timers: list[tuple[float, int, int, int, str]] = []
        # Simulated runs started with ``#EMULATOR hold=1``: (job, token, runtime), clock not started yet.
        self._held: list[tuple[Job, int, float]] = []
        self._seq = itertools.count()
        self._next_id = 1
        self._dirty = False
        self._last_pass = 0.0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._control: ControlServer | None = None
        # What every node adds to a job's environment unless the job sets it (the metadata server, ...).
        self.node_environment: dict[str, str] = {}

    def _node_name(self, partition: str, index: int) -> str:
        prefix = "node" if partition == self.default_partition else f"{partition}-node"
        return f"{prefix}{index}"

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.simulate:
            become_subreaper()
            self._control = ControlServer(self, self.state_dir / "bin")
            self._control.start()
        self._thread = threading.Thread(target=self._loop, name=f"slurm-emulator-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the scheduler, kill every process group it started and reap them all."""
        with self.lock:
            self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            procs = [job.proc for job in self._running.values() if job.proc is not None] + self._orphans
            self._orphans = []
            for job in self._running.values():
                job.proc = None
        self._reaper.stop_all(procs)
        if self._control is not None:
            self._control.stop()
            self._control = None

    def host_path(self, cluster_path: str) -> Path:
        """Where the cluster-side absolute path ``cluster_path`` lives on this machine."""
        normalized = posixpath.normpath("/" + cluster_path).lstrip("/")
        return self.state_dir / "fs" / normalized

    # ---- submission --------------------------------------------------------------------------------

    def submit(self, request: JobRequest, user: str) -> int:
        """Queue a job (or a whole array); returns its id (the array's master id)."""
        with self.lock:
            partition = request.partition or self.default_partition
            if partition not in self.partitions:
                raise SubmitError("bad_partition")
            request.partition = partition
            if request.node_count > len(self.partitions[partition]) or request.node_count < 1:
                raise SubmitError("bad_partition", error="Requested node configuration is not available", number=2014)
            for clause in request.dependencies:
                for dep_id in clause.job_ids:
                    dep = self._jobs.get(dep_id)
                    if dep is None or not dep.in_queue:
                        raise SubmitError("bad_partition", error="Job dependency problem", number=2038)
            indexes: tuple[int | None, ...] = (None,)
            max_tasks = 0
            if request.array:
                try:
                    spec = parse_array(request.array)
                except ValueError as exc:
                    raise SubmitError("bad_partition", error="Invalid job array specification", number=2081) from exc
                indexes, max_tasks = spec.indexes, spec.max_running
            master = self._next_id
            self._next_id += len(indexes)
            now = int(time.time())
            recorded_at = time.monotonic() + self.accounting_delay
            tasks: list[Job] = []
            for offset, index in enumerate(indexes):
                job = Job(
                    job_id=_task_job_id(master, offset, len(indexes)),
                    request=request,
                    user=user,
                    submit_time=now,
                    recorded_at=recorded_at,
                    array_job_id=master if index is not None else 0,
                    array_task_id=index,
                    array_max_tasks=max_tasks,
                    held=request.hold,
                )
                self._expand_paths(job)
                self._jobs[job.job_id] = job
                self._pending[partition][job.job_id] = job
                tasks.append(job)
            if request.array:
                self._arrays[master] = tasks
                self._array_running[master] = 0
            self._set_pending_reasons(tasks)
            self._mark_dirty()
            return master

    def _set_pending_reasons(self, jobs: list[Job]) -> None:
        for job in jobs:
            job.reason = self._ineligible_reason(job) or "None"

    def _expand_paths(self, job: Job) -> None:
        req = job.request
        default = "slurm-%A_%a.out" if job.array_task_id is not None else "slurm-%j.out"

        def expand(pattern: str) -> str:
            return expand_pattern(
                absolute_path(req.current_working_directory, pattern),
                job_id=job.job_id,
                name=req.name,
                user=job.user,
                node=job.nodes[0] if job.nodes else "",
                array_job_id=job.array_job_id,
                array_task_id=job.array_task_id,
            )

        job.stdout_path = expand(req.standard_output or default)
        job.stderr_path = expand(req.standard_error) if req.standard_error else job.stdout_path
        if req.standard_input:
            job.stdin_path = expand(req.standard_input)

    # ---- queries -----------------------------------------------------------------------------------

    def get(self, job_id: int) -> Job | None:
        return self._jobs.get(job_id)

    def active(self, job_id: int) -> list[Job]:
        """Jobs ``GET /slurm/.../job/{id}`` returns: the job, or every task still queued of an array."""
        tasks = self._arrays.get(job_id)
        if tasks is not None:
            return [task for task in tasks if task.in_queue]
        job = self._jobs.get(job_id)
        return [job] if job is not None and job.in_queue else []

    def active_jobs(self) -> list[Job]:
        return [job for job in self._jobs.values() if job.in_queue]

    def accounting(self, job_id: int | None = None) -> list[Job]:
        """Jobs slurmdbd has recorded (all of them, or one job / one array)."""
        now = time.monotonic()
        if job_id is None:
            candidates: Iterable[Job] = self._jobs.values()
        elif job_id in self._arrays:
            candidates = self._arrays[job_id]
        else:
            job = self._jobs.get(job_id)
            candidates = [job] if job is not None else []
        # a requeued job's earlier runs first, each its own record (real slurmdbd 24.11 and 26.05)
        return [run for job in candidates if job.recorded_at <= now for run in (*job.earlier_runs, job)]

    def all_jobs(self) -> list[Job]:
        return list(self._jobs.values())

    # ---- control -----------------------------------------------------------------------------------

    def cancel(self, job: Job, signum: int | None, user: str) -> str | None:
        """Cancel (or, with a signal other than KILL, just signal) a job; returns a recorded error name."""
        with self.lock:
            if job.user != user:
                return "cancel_denied"  # real slurmctld: only the job's own user (or an operator) may
            if job.is_final or job.ending is not None:
                return "cancel_done"
            if signum not in (None, signal.SIGKILL):
                if job.proc is not None:
                    killpg(job.proc, signum)
                return None
            job.kill_request_user = user
            if job.base_state == "PENDING":
                self._pending[job.request.partition].pop(job.job_id, None)
                now = int(time.time())
                job.start_time = job.end_time = now
                job.state = ["CANCELLED"]
                job.reason = "None"
                self._finalize(job)
            else:
                self._stop_running(job, "CANCELLED", signal.SIGTERM)
            return None

    def requeue(self, job: Job) -> str | None:
        """``scontrol requeue``: a running or ended job back to PENDING, its restart count up, startable again
        ``requeue_delay`` s later (reason ``BeginTime``; slurmctld waits cred_expire, about two minutes by
        default). Accounting keeps the earlier run as ``PENDING+REQUEUED``, its batch step COMPLETED (or as
        it ended) or, for a running job, CANCELLED by SIGTERM (real Slurm 24.11). Returns why slurmctld would
        refuse, or None."""
        with self.lock:
            if not job.request.requeue:
                return "Requested operation is presently disabled"
            if job.base_state == "PENDING":
                return "Job is pending execution"
            if job.is_running:
                self._end_run_now(job)
                job.state, job.reason, job.end_time = ["CANCELLED"], "None", int(time.time())
                job.return_code, job.signal, job.exit_status = None, signal.SIGTERM, "SIGNALED"
            self._requeue(job, ["PENDING", "REQUEUED"])
            return None

    def release(self, job: Job, hold: bool) -> None:
        with self.lock:
            if job.base_state == "PENDING":
                job.held = hold
                job.reason = self._ineligible_reason(job) or "None"
                self._mark_dirty()

    def purge(self, job_id: int) -> None:
        with self.lock:
            for job in self._arrays.get(job_id) or [self._jobs[job_id]]:
                job.in_queue = False
            self.changed.notify_all()

    def release_held(self) -> int:
        """Start the clock of every held simulated run (``#EMULATOR hold=1``): each ends ``runtime`` from now."""
        with self.lock:
            now = time.monotonic()
            held, self._held = self._held, []
            released = 0
            for job, token, runtime in held:
                if job.token == token and job.is_running:
                    self._push_timer(now + runtime, job, "sim_end")
                    released += 1
            return released

    def fail_job(self, job_id: int, state: str, requeue: bool | None) -> None:
        """A node failure or preemption of a running job, requeued like Slurm does: when ``requeue`` (None:
        as Slurm would, JobRequeue=1) and the job may be (a job submitted with ``requeue: false`` never is).

        As real Slurm 24.11 records it: PREEMPTED ends by SIGTERM, NODE_FAIL (reason NodeDown) with the raw
        status 1 (``/slurm`` reads signal 1, accounting return code 1); a requeued job's ended run stays in
        accounting under that state, and the job waits ``requeue_delay`` s (BeginTime) to run again.
        """
        with self.lock:
            job = self._jobs[job_id]
            if not job.is_running:
                raise ValueError(f"job {job_id} is {job.state}, not running")
            self._end_run_now(job)
            job.state = [state]
            job.reason = "NodeDown" if state == "NODE_FAIL" else "None"
            job.end_time = int(time.time())
            ended_by = {"PREEMPTED": signal.SIGTERM, "NODE_FAIL": signal.SIGHUP}.get(state, signal.SIGKILL)
            job.return_code, job.signal, job.exit_status = None, ended_by, "SIGNALED"
            if requeue is not False and job.request.requeue:
                self._requeue(job, [state])
                return
            self._finalize(job)

    def _end_run_now(self, job: Job) -> None:
        """A running job's run ends at once (requeued, preempted, its node failed): its process is killed, its
        timers void, its nodes free; the caller sets the state it ended in. Under ``self.lock``."""
        job.token += 1
        if job.proc is not None:
            self._reaper.kill(job.proc)
            self._orphans.append(job.proc)
            job.proc = None
        self._release_nodes(job)

    def _requeue(self, job: Job, accounted: list[str]) -> None:
        """Back to PENDING (BeginTime) for the job's next run, startable ``requeue_delay`` s from now; its
        ended run stays in accounting, recorded as ``accounted``. Slurm resets the submit time."""
        job.earlier_runs.append(dataclasses.replace(job, earlier_runs=[], run_ended=accounted, proc=None))
        job.token += 1
        job.restart_cnt += 1
        job.state, job.reason, job.ending = ["PENDING"], "BeginTime", None
        job.start_time = job.end_time = 0
        job.nodes = []
        job.return_code, job.signal, job.exit_status = 0, None, "SUCCESS"
        job.submit_time = int(time.time())
        job.begin_at = time.monotonic() + self.requeue_delay
        job.eligible_time = job.submit_time + int(self.requeue_delay)
        self._pending[job.request.partition][job.job_id] = job
        self._push_timer(job.begin_at, job, "begin")
        self._mark_dirty()

    # ---- the scheduler thread ------------------------------------------------------------------------

    def _mark_dirty(self) -> None:
        self._dirty = True
        self._wake.set()
        self.changed.notify_all()

    def _loop(self) -> None:
        while True:
            with self.lock:
                if self._stopping:
                    return
                now = time.monotonic()
                self._reap(now)
                self._fire_timers(now)
                if self._dirty and now - self._last_pass >= _MIN_PASS_INTERVAL:
                    self._schedule(now)
                wait = self._next_wait(time.monotonic())
            self._wake.wait(wait)
            self._wake.clear()

    def _next_wait(self, now: float) -> float:
        wait = 1.0
        if self._orphans or self._reaper.busy or any(job.proc is not None for job in self._running.values()):
            wait = self.tick
        if self._timers:
            wait = min(wait, max(0.0, self._timers[0][0] - now))
        if self._dirty:
            wait = min(wait, max(0.0, _MIN_PASS_INTERVAL - (now - self._last_pass)))
        return wait

    def _push_timer(self, when: float, job: Job, kind: str) -> None:
        heapq.heappush(self._timers, (when, next(self._seq), job.job_id, job.token, kind))
        self._wake.set()

    def _fire_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, _, job_id, token, kind = heapq.heappop(self._timers)
            job = self._jobs.get(job_id)
            if job is None or job.token != token:
                continue
            if kind == "time_limit" and job.base_state == "RUNNING":
                self._stop_running(job, "TIMEOUT", signal.SIGTERM)
            elif kind == "sim_end" and job.proc is None and job.is_running:
                code = int(job.request.directives().get("exit", "0") or 0)
                self._exited(job, -signal.SIGTERM if job.ending else code, now)
            elif kind == "warning" and job.base_state == "RUNNING":
                self._warn(job)
            elif kind == "kill" and job.proc is not None:
                self._reaper.kill(job.proc)
            elif kind == "completing_done" and job.is_running and job.proc is None:
                self._finish(job)
            elif kind == "purge" and job.is_final:
                job.in_queue = False
                self.changed.notify_all()
            elif kind == "begin":
                self._mark_dirty()

    def _warn(self, job: Job) -> None:
        """slurmctld's warning before the time limit, where its ``kill_warning_flags`` send it (measured on Slurm
        24.11 and 26.05): ``BATCH_JOB`` the batch script's process alone, ``FULL_JOB`` its whole process group
        (and every step); without either, the steps only: the emulator has none, so no process gets it."""
        job.warned_at = time.time()
        flags, signum = job.request.warn_flags, job.request.warn_signal
        if job.proc is None or signum is None:
            return
        if "FULL_JOB" in flags:
            killpg(job.proc, signum)
        elif "BATCH_JOB" in flags:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(job.proc.pid, signum)

    def _reap(self, now: float) -> None:
        self._orphans = [proc for proc in self._orphans if self._reaper.finished(proc) is None]
        self._reaper.sweep()
        for job in list(self._running.values()):
            if job.proc is not None:
                ended = self._reaper.finished_with_usage(job.proc)
                if ended is not None:
                    job.proc = None
                    self._gathered(job, ended[1])
                    self._exited(job, ended[0], now)

    def _gathered(self, job: Job, peak_rss: int | None) -> None:
        """What jobacct_gather/linux would have recorded of the run: its peak RSS, if it was sampled once."""
        interval = job.request.gather_seconds or self.acct_gather_frequency
        if peak_rss is not None and time.time() - job.start_time >= interval:
            job.max_rss_bytes = peak_rss

    def _exited(self, job: Job, code: int, now: float) -> None:
        """The batch script ended with wait status ``code`` (negative: killed by that signal)."""
        if code < 0:
            job.return_code, job.signal, job.exit_status = None, -code, "SIGNALED"
        else:
            job.return_code, job.signal, job.exit_status = code, None, ("SUCCESS" if code == 0 else "ERROR")
        if job.ending is None:
            job.end_time = int(time.time())
            if code == 0:
                job.state = ["COMPLETED"]
            else:
                job.state = ["FAILED"]
                job.reason = "NonZeroExitCode" if code > 0 else f"RaisedSignal:{-code}({signal_name(-code).title()})"
            self._finish(job)
        elif now < job.completing_until:
            job.token += 1
            self._push_timer(job.completing_until, job, "completing_done")
        else:
            self._finish(job)

    def _finish(self, job: Job) -> None:
        if job.ending is not None:
            job.state = [job.ending]
            job.reason = "TimeLimit" if job.ending == "TIMEOUT" else "None"
        self._release_nodes(job)
        self._finalize(job)

    def _finalize(self, job: Job) -> None:
        self._running.pop(job.job_id, None)
        job.token += 1
        self._push_timer(time.monotonic() + self.min_job_age, job, "purge")
        self._mark_dirty()

    def _release_nodes(self, job: Job) -> None:
        if self._running.pop(job.job_id, None) is None:
            return
        free = self._free[job.request.partition]
        for node in job.nodes:
            heapq.heappush(free, _node_index(node))
        if job.array_job_id:
            self._array_running[job.array_job_id] -= 1

    def _stop_running(self, job: Job, final_state: str, signum: int) -> None:
        now = time.monotonic()
        job.ending = final_state
        job.state = [final_state, "COMPLETING"]
        job.end_time = int(time.time())
        job.completing_until = now + self.completing_time
        job.token += 1
        if job.proc is not None:
            killpg(job.proc, signum)
            self._push_timer(now + self.kill_wait, job, "kill")
        else:
            self._push_timer(job.completing_until, job, "sim_end")
        self.changed.notify_all()

    def _schedule(self, now: float) -> None:
        self._dirty = False
        self._last_pass = now
        for partition, queue in self._pending.items():
            free = self._free[partition]
            blocked = False
            for job in list(queue.values()):
                reason = self._ineligible_reason(job)
                if reason:
                    job.reason, job.eligible_time = reason, 0
                    continue
                if not job.eligible_time:
                    job.eligible_time = int(time.time())
                if blocked:
                    job.reason = "Priority"
                elif job.request.node_count > len(free):
                    job.reason, blocked = "Resources", True
                else:
                    del queue[job.job_id]
                    self._start(job, free)
        self.changed.notify_all()

    def _ineligible_reason(self, job: Job) -> str:
        if job.held:
            return "JobHeldUser"
        if job.begin_at > time.monotonic():
            return "BeginTime"
        if job.request.dependencies:
            reason = self._dependency_reason(job)
            if reason:
                return reason
        if (
            job.array_job_id
            and job.array_max_tasks
            and self._array_running.get(job.array_job_id, 0) >= job.array_max_tasks
        ):
            return "JobArrayTaskLimit"
        return ""

    def _dependency_reason(self, job: Job) -> str:
        """``Dependency`` / ``DependencyNeverSatisfied`` / ``""``; sets the job's dependency text as Slurm
        prints it: each clause not yet satisfied, ``kind:ID(unfulfilled)`` or ``kind:ID(failed)``."""
        waiting = never = False
        parts: list[str] = []
        for clause in job.request.dependencies:
            for dep_id in clause.job_ids:
                unfulfilled = failed = False
                for target in self._arrays.get(dep_id) or [self._jobs[dep_id]]:
                    ok = target.base_state == "COMPLETED"
                    if clause.kind == "after":
                        unfulfilled = unfulfilled or target.base_state == "PENDING"
                    elif not target.is_final:
                        unfulfilled = True
                    elif (clause.kind == "afterok" and not ok) or (clause.kind == "afternotok" and ok):
                        failed = True
                if failed:
                    parts.append(f"{clause.kind}:{dep_id}(failed)")
                    never = True
                elif unfulfilled:
                    parts.append(f"{clause.kind}:{dep_id}(unfulfilled)")
                    waiting = True
        job.dependency_text = ",".join(parts)
        if never:
            return "DependencyNeverSatisfied"
        return "Dependency" if waiting else ""

    def _start(self, job: Job, free: list[int]) -> None:
        names = self.partitions[job.request.partition]
        job.nodes = [names[heapq.heappop(free)] for _ in range(job.request.node_count)]
        job.state, job.reason = ["RUNNING"], "None"
        job.start_time = int(time.time())
        job.end_time = 0
        job.ending = None
        job.max_rss_bytes = None
        job.split_off = job.array_task_id is not None
        job.token += 1
        self._running[job.job_id] = job
        if job.array_job_id:
            self._array_running[job.array_job_id] += 1
        self._expand_paths(job)
        now = time.monotonic()
        if job.request.time_limit is not None:
            self._push_timer(now + job.request.time_limit * self.minute_seconds, job, "time_limit")
            if job.request.warn_signal is not None:
                # kill_warning_delay seconds (in the emulator's time) before the end the job is told
                end = job.start_time + int(job.request.time_limit * self.minute_seconds)
                at = end - job.request.warn_delay * self.minute_seconds / 60
                self._push_timer(now + max(0.0, at - time.time()), job, "warning")
        if self.simulate:
            directives = job.request.directives()
            runtime = float(directives.get("runtime", "1.0") or 1.0)
            if directives.get("hold", "0") not in ("", "0"):
                self._held.append((job, job.token, runtime))
            else:
                self._push_timer(now + runtime, job, "sim_end")
            return
        try:
            job.proc = self._spawn(job)
            self.spawned_pids.append(job.proc.pid)
        except OSError as exc:
            job.end_time = int(time.time())
            job.state, job.reason = ["FAILED"], f"launch failed: {exc.strerror}"
            job.return_code, job.signal, job.exit_status = 1, None, "ERROR"
            self._release_nodes(job)
            self._finalize(job)

    def _array_indexes(self, job: Job) -> list[int]:
        if job.array_task_id is None:
            return []
        return [task.array_task_id or 0 for task in self._arrays[job.array_job_id]]

    def _spawn(self, job: Job) -> subprocess.Popen[bytes]:
        req = job.request
        spool = self.state_dir / "spool" / f"job{job.job_id:08d}.{job.restart_cnt}"
        spool.mkdir(parents=True, exist_ok=True)
        script = spool / "script"
        script.write_text(req.script, encoding="utf-8")
        cwd = self.host_path(req.current_working_directory)
        return spawn(
            script,
            cwd,
            job_environment(
                job,
                self.name,
                cwd,
                self.state_dir / "fs",
                self._array_indexes(job),
                bin_dir=self.state_dir / "bin",
                minute_seconds=self.minute_seconds,
                node_environment=self.node_environment,
            ),
            self.host_path(job.stdout_path),
            self.host_path(job.stderr_path) if job.stderr_path != job.stdout_path else None,
            self.host_path(job.stdin_path) if req.standard_input else None,
        )

    def wait_for(self, job_id: int, states: frozenset[str], timeout: float) -> Job:
        """Block until the job's state matches ``states`` (see ``Job.matches``)."""
        return self.wait_until(job_id, lambda job: job.matches(states), timeout, f"reach {sorted(states)}")

    def wait_until(self, job_id: int, predicate: Callable[[Job], bool], timeout: float, what: str) -> Job:
        """Block until ``predicate(job)`` holds, woken by every state change; ``TimeoutError`` otherwise."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                job = self._jobs.get(job_id)
                if job is not None and predicate(job):
                    return job
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    current = job.state if job is not None else "unknown"
                    raise TimeoutError(f"job {job_id} did not {what} within {timeout}s (state {current})")
                self.changed.wait(remaining)


def _node_index(name: str) -> int:
    digits = len(name) - len(name.rstrip("0123456789"))
    return int(name[-digits:]) - 1


def _task_job_id(master: int, offset: int, count: int) -> int:
    """The job id of an array's ``offset``-th task.

    slurmctld 24.11 splits each task off the pending array record under a new id as it starts, so the
    array's own id ends on the last task: ``0-2`` submitted as 35 gives tasks 0, 1, 2 the ids 36, 37, 35
    (recorded/v0.0.42/array). The emulator numbers tasks in index order, as tasks start in that order.
    """
    if count == 1 or offset == count - 1:
        return master
    return master + 1 + offset
