"""Slurm jobs as the provider sees them: SlurmJob, one view of /slurm and /slurmdb records, and job arrays."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_slurmapi.api import results, usage
from airflow_provider_slurmapi.api.shapes import number, obj
from airflow_provider_slurmapi.api.states import JobState
from airflow_provider_slurmapi.api.versions import DEFAULT_VERSION, output_is_pattern


def _int(value: Any) -> int | None:
    n = number(value)
    return int(n) if n is not None else None


# The last second a datetime holds (9999-12-31T23:59:59Z): a time past it is no time Slurm gave.
_LAST_SECOND = 253402300799


def _time(value: Any) -> datetime | None:
    n = _int(value)
    return datetime.fromtimestamp(n, tz=timezone.utc) if n and 0 < n <= _LAST_SECOND else None


def _seconds(value: Any) -> timedelta | None:
    """A duration in seconds; None for one no job could have lasted (negative, or past year 9999)."""
    n = _int(value)
    return timedelta(seconds=n) if n is not None and 0 <= n <= _LAST_SECOND else None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def expand_output_pattern(pattern: str, *, job_id: int, name: str, user: str = "", array: Any = None) -> str:
    """Expand the ``%j``/``%x``/``%u``/``%A``/``%a`` of a Slurm output pattern."""
    if not pattern or "%" not in pattern:
        return pattern
    master, task = array if array else (job_id, None)
    values = {
        "j": str(job_id),
        "x": name,
        "u": user,
        "A": str(master),
        "a": "" if task is None else str(task),
    }
    return re.sub(r"%([jxuAa%])", lambda m: "%" if m.group(1) == "%" else values[m.group(1)], pattern)


@dataclass
class ExitCode:
    """How a job's batch script ended: return code, or the signal that killed it."""

    return_code: int | None = None
    signal: int | None = None
    signal_name: str = ""
    status: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: Any) -> ExitCode:
        if isinstance(value, int):
            return cls(return_code=value)
        if not isinstance(value, Mapping):
            return cls()
        sig = obj(value.get("signal"))
        status = value.get("status")
        return cls(
            return_code=_int(value.get("return_code")),
            signal=_int(sig.get("id")),
            signal_name=_str(sig.get("name")),
            status=tuple(status) if isinstance(status, list) else (),
        )

    def __str__(self) -> str:
        if self.signal:
            return f"signal {self.signal}{f' ({self.signal_name})' if self.signal_name else ''}"
        return "unknown" if self.return_code is None else str(self.return_code)


@dataclass
class SlurmJob:
    """One Slurm job, normalized from either an active-queue job_info or an accounting record."""

    job_id: int
    name: str
    state: JobState
    state_reason: str = ""
    state_description: str = ""
    exit_code: ExitCode = field(default_factory=ExitCode)
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    elapsed: timedelta | None = None
    time_limit_minutes: int | None = None
    nodes: str = ""
    node_count: int | None = None
    partition: str = ""
    user: str = ""
    account: str = ""
    comment: str = ""
    standard_output: str = ""
    standard_error: str = ""
    working_directory: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    # The tasks an array's pending record still stands for ("2-5%2"), while Slurm keeps them on one record.
    array_task_string: str = ""
    het_job_id: int | None = None
    het_job_offset: int | None = None
    restart_count: int = 0
    tres_requested: str = ""
    tres_allocated: str = ""
    source: str = "slurm"
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def display_id(self) -> str:
        """``123``; for an array task ``123_4``, for an array's pending tasks ``123_[5-9]``, as squeue shows them."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        if self.array_job_id and self.array_task_string:
            return f"{self.array_job_id}_[{self.array_task_string}]"
        return str(self.job_id)

    @property
    def label(self) -> str:
        """How logs and errors name it: ``Slurm job 123`` (``Slurm array job 123`` for a whole array)."""
        return f"Slurm job {self.display_id}"

    @property
    def task_count(self) -> int:
        """How many array tasks this record stands for: 1, or more for an array's pending record."""
        if self.array_task_id is None and self.array_task_string:
            return array_task_count(self.array_task_string) or 1
        return 1

    @classmethod
    def from_job_info(cls, record: Mapping[str, Any], version: str = DEFAULT_VERSION) -> SlurmJob:
        """From a ``/slurm/{v}/job/{id}`` ``jobs[]`` entry."""
        job_id = _int(record.get("job_id")) or 0
        name = _str(record.get("name"))
        user = _str(record.get("user_name"))
        array = _array(record.get("array_job_id"), record.get("array_task_id"))
        master = _int(record.get("array_job_id")) or None
        start, end = _time(record.get("start_time")), _time(record.get("end_time"))
        state = JobState.parse(record.get("job_state"))
        stdout, stderr = _outputs(record, version, job_id=job_id, name=name, user=user, array=array)
        if master and array is None:
            stdout = stderr = ""  # an array's pending record: Slurm expands %a to 4294967294 there
        return cls(
            job_id=job_id,
            name=name,
            state=state,
            state_reason=_reason(record.get("state_reason")),
            state_description=_str(record.get("state_description")),
            exit_code=ExitCode.parse(record.get("exit_code")),
            submit_time=_time(record.get("submit_time")),
            start_time=start,
            end_time=end,
            elapsed=_elapsed(start, end, state),
            time_limit_minutes=_int(record.get("time_limit")),
            nodes=_str(record.get("nodes")),
            node_count=_int(record.get("node_count")),
            partition=_str(record.get("partition")),
            user=user,
            account=_str(record.get("account")),
            comment=_str(record.get("comment")),
            standard_output=stdout,
            standard_error=stderr,
            working_directory=_str(record.get("current_working_directory")),
            array_job_id=master,
            array_task_id=array[1] if array else None,
            array_task_string=_str(record.get("array_task_string")) if array is None and master else "",
            het_job_id=_int(record.get("het_job_id")) or None,
            het_job_offset=_int(record.get("het_job_offset")) if _int(record.get("het_job_id")) else None,
            restart_count=_int(record.get("restart_cnt")) or 0,
            tres_requested=_str(record.get("tres_req_str")),
            tres_allocated=_str(record.get("tres_alloc_str")),
            source="slurm",
            raw=dict(record),
        )

    @classmethod
    def from_slurmdb(cls, record: Mapping[str, Any], version: str = DEFAULT_VERSION) -> SlurmJob:
        """From a ``/slurmdb/{v}/job/{id}`` ``jobs[]`` entry (state in ``state.current``, times in ``time``)."""
        job_id = _int(record.get("job_id")) or 0
        name = _str(record.get("name"))
        user = _str(record.get("user"))
        arr = obj(record.get("array"))
        array = _array(arr.get("job_id"), arr.get("task_id"))
        times = obj(record.get("time"))
        state_block = record.get("state")
        if isinstance(state_block, Mapping):
            state, reason = JobState.parse(state_block.get("current")), _reason(state_block.get("reason"))
        else:
            state, reason = JobState.parse(state_block), ""
        het = obj(record.get("het"))
        comment = record.get("comment")
        pending_tasks = _task_string(arr.get("task")) if array is None and _int(arr.get("job_id")) else ""
        names = {"job_id": job_id, "name": name, "user": user, "array": array}
        elapsed = times.get("elapsed")
        tres = obj(record.get("tres"))
        return cls(
            job_id=job_id,
            name=name,
            state=state,
            state_reason=reason,
            exit_code=_db_exit_code(record, state),
            submit_time=_time(times.get("submission")),
            start_time=_time(times.get("start")),
            end_time=_time(times.get("end")),
            elapsed=_seconds(elapsed),
            time_limit_minutes=_int(times.get("limit")),
            nodes=_str(record.get("nodes")),
            node_count=_int(record.get("allocation_nodes")),
            partition=_str(record.get("partition")),
            user=user,
            account=_str(record.get("account")),
            comment=_str(comment.get("job")) if isinstance(comment, Mapping) else _str(comment),
            standard_output="" if pending_tasks else _db_output(record, "stdout", **names),
            standard_error="" if pending_tasks else _db_output(record, "stderr", **names),
            working_directory=_str(record.get("working_directory")),
            array_job_id=_int(arr.get("job_id")) or None,
            array_task_id=array[1] if array else None,
            array_task_string=pending_tasks,
            het_job_id=_int(het.get("job_id")) or None,
            het_job_offset=_int(het.get("job_offset")),
            restart_count=_int(record.get("restart_cnt")) or 0,
            tres_requested=_tres_string(tres.get("requested")),
            tres_allocated=_tres_string(tres.get("allocated")),
            source="slurmdb",
            raw=dict(record),
        )

    def describe_state(self) -> str:
        """``PENDING (Resources)``, ``RUNNING on node[1-4]``, ``FAILED (NonZeroExitCode)``; ``COMPLETED`` without
        a reason (accounting keeps a requeued job's last pending reason, ``BeginTime``, on its COMPLETED run)."""
        text = str(self.state)
        if self.state.base == "RUNNING" and self.nodes:
            return f"{text} on {self.nodes}"
        if self.state_reason and self.state_reason != "None" and not self.state.is_success:
            return f"{text} ({self.state_reason})"
        return text

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly summary for XCom and logs."""
        summary = {
            "job_id": self.job_id,
            "display_id": self.display_id,
            "name": self.name,
            "state": str(self.state),
            "state_reason": self.state_reason,
            "exit_code": self.exit_code.return_code,
            "exit_signal": self.exit_code.signal,
            "submit_time": self.submit_time.isoformat() if self.submit_time else None,
            "start_time": self.start_time.isoformat() if self.start_time else None,
            "end_time": self.end_time.isoformat() if self.end_time else None,
            "elapsed_seconds": int(self.elapsed.total_seconds()) if self.elapsed is not None else None,
            "nodes": self.nodes,
            "partition": self.partition,
            "standard_output": self.standard_output,
            "standard_error": self.standard_error,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
            "source": self.source,
        }
        published = self.published
        if published is not None:
            summary["published"] = published.as_dict()
        elif other := results.foreign(self.comment, self.display_id):
            summary["published_for"] = other
        if self.array_task_string:
            summary["array_task_string"] = self.array_task_string
        if self.time_limit_minutes is not None:
            summary["time_limit_minutes"] = self.time_limit_minutes
        if self.restart_count:  # Slurm requeued the job: this record is of its run number restart_count + 1
            summary["restart_count"] = self.restart_count
        if self.cancelled_by:
            summary["cancelled_by"] = self.cancelled_by
        used = self.usage
        if used is not None:
            summary["usage"] = used.as_dict()
        return summary

    @property
    def usage(self) -> usage.Usage | None:
        """What the job used (:mod:`~airflow_provider_slurmapi.api.usage`), once it has ended."""
        return usage.of_job(self) if self.state.is_terminal else None

    @property
    def cancelled_by(self) -> str:
        """Who cancelled the job, as accounting records it (``kill_request_user``); "" when unknown."""
        who = self.raw.get("kill_request_user") if isinstance(self.raw, Mapping) else None
        return who.strip()[:100] if isinstance(who, str) else ""

    def task_summary(self) -> dict[str, Any]:
        """The short per-task entry of an array's summary."""
        task: dict[str, Any] = {
            "job_id": self.job_id,
            "display_id": self.display_id,
            "array_task_id": self.array_task_id,
            "task_count": self.task_count,
            "state": str(self.state),
            "state_reason": self.state_reason,
            "exit_code": self.exit_code.return_code,
            "exit_signal": self.exit_code.signal,
            "start_time": self.start_time.isoformat() if self.start_time else None,
            "elapsed_seconds": int(self.elapsed.total_seconds()) if self.elapsed is not None else None,
            "nodes": self.nodes,
            "standard_output": self.standard_output,
            "standard_error": self.standard_error,
            "source": self.source,
        }
        published = self.published
        if published is not None:
            task["published"] = published.as_dict()
        elif other := results.foreign(self.comment, self.display_id):
            task["published_for"] = other
        return task

    @property
    def published(self) -> results.Published | None:
        """What the job published in its comment (its result, the tails of its output), if anything: only
        a publication that names this job (another job of the same user may write this job's comment)."""
        return results.parse(self.comment, self.display_id)


@dataclass
class SlurmArrayJob(SlurmJob):
    """A whole job array as one job: its tasks' records and one outcome for all of them.

    Its ``state`` is the array's: PENDING while every unfinished task is pending, RUNNING while any task
    is still going, COMPLETED once every task COMPLETED; otherwise the state of the first failed task
    (by task id), a cluster failure (NODE_FAIL, BOOT_FAIL, PREEMPTED) only when every failed task is one,
    so ``state.is_retryable_failure`` follows the rule "retry only if every failure was the cluster's".
    """

    tasks: list[SlurmJob] = field(default_factory=list)

    @property
    def usage(self) -> usage.Usage | None:
        """What the array's tasks used, summed, once the array has ended."""
        if not self.state.is_terminal:
            return None
        elapsed = int(self.elapsed.total_seconds()) if self.elapsed is not None else None
        return usage.summed((u for t in self.tasks if (u := usage.of_job(t)) is not None), elapsed)

    @classmethod
    def of(cls, array_id: int, records: Iterable[SlurmJob]) -> SlurmArrayJob:
        """The array from its task records (a pending record may stand for several tasks)."""
        tasks = sorted(records, key=lambda t: (t.array_task_id is None, t.array_task_id or 0, t.job_id))
        first = tasks[0] if tasks else SlurmJob(job_id=array_id, name="", state=JobState("PENDING"))
        unfinished = [t for t in tasks if not t.state.is_terminal]
        failed = [t for t in tasks if t.state.is_terminal and not t.state.is_success]
        reason = ""
        exit_code = ExitCode()
        if unfinished or not tasks:
            going = any(not t.state.is_pending for t in unfinished)
            state = JobState("RUNNING" if going else "PENDING")
            reason = "" if going else next((t.state_reason for t in unfinished if t.state_reason), "")
        elif failed:
            retryable = all(t.state.is_retryable_failure for t in failed)
            worst = next(t for t in failed if t.state.is_retryable_failure == retryable)
            state, reason, exit_code = JobState(worst.state.base), worst.state_reason, worst.exit_code
        else:
            state, exit_code = JobState("COMPLETED"), ExitCode(return_code=0)
        starts = [t.start_time for t in tasks if t.start_time]
        ends = [t.end_time for t in tasks if t.end_time]
        submits = [t.submit_time for t in tasks if t.submit_time]
        start = min(starts) if starts else None
        end = max(ends) if ends and state.is_terminal else None
        return cls(
            job_id=array_id,
            name=first.name,
            state=state,
            state_reason=reason,
            exit_code=exit_code,
            submit_time=min(submits) if submits else None,
            start_time=start,
            end_time=end,
            elapsed=_elapsed(start, end, state) if start else None,
            time_limit_minutes=first.time_limit_minutes,
            partition=first.partition,
            user=first.user,
            account=first.account,
            comment=first.comment,
            working_directory=first.working_directory,
            array_job_id=array_id,
            source="slurm" if any(t.source == "slurm" for t in tasks) else first.source,
            tasks=tasks,
        )

    @property
    def display_id(self) -> str:
        return str(self.job_id)

    @property
    def label(self) -> str:
        return f"Slurm array job {self.job_id}"

    @property
    def task_count(self) -> int:
        return sum(t.task_count for t in self.tasks)

    @property
    def completed_count(self) -> int:
        return sum(t.task_count for t in self.tasks if t.state.is_success)

    @property
    def failed_tasks(self) -> list[SlurmJob]:
        """The tasks that ended in a state other than COMPLETED, by task id."""
        return [t for t in self.tasks if t.state.is_terminal and not t.state.is_success]

    def describe_state(self) -> str:
        """How many tasks are in each state: ``1 RUNNING, 2 PENDING``."""
        counts: dict[str, int] = {}
        for task in self.tasks:
            counts[str(task.state)] = counts.get(str(task.state), 0) + task.task_count
        order = {"RUNNING": 0, "PENDING": 1, "COMPLETED": 2}
        ranked = sorted(counts, key=lambda s: (order.get(s, 3), s))
        return ", ".join(f"{counts[s]} {s}" for s in ranked) or str(self.state)

    def summary(self) -> dict[str, Any]:
        """The array's summary, with ``tasks``: one entry per task record (state, exit code, outputs)."""
        summary = super().summary()
        summary.pop("usage", None)
        used = self.usage
        if used is not None:
            summary["usage"] = used.as_dict()
        summary.update(
            array_task_count=self.task_count,
            array_tasks_completed=self.completed_count,
            tasks=[t.task_summary() for t in self.tasks],
        )
        return summary


def array_tasks(job_id: object, jobs: Iterable[SlurmJob]) -> list[SlurmJob] | None:
    """The records of array ``job_id``'s tasks among ``jobs``, or None when ``job_id`` is no array's id.

    ``123_4`` names one task, never the array; the own id of a task (other than the array's) is a job.
    """
    text = str(job_id)
    if not text.isdigit():
        return None
    tasks = [j for j in jobs if j.array_job_id == int(text)]
    return tasks or None


def merge_task_records(accounted: Iterable[SlurmJob], active: Iterable[SlurmJob]) -> list[SlurmJob]:
    """Accounting's task records overlaid with the active queue's (fresher) ones, per record id."""
    merged = {job.job_id: job for job in accounted}
    merged.update((job.job_id, job) for job in active)
    return list(merged.values())


def latest_runs(records: Iterable[SlurmJob]) -> list[SlurmJob]:
    """Accounting's records with one per job (per array task): the record of its latest run.

    Slurm requeues a job (preempted, its node failed, ``scontrol requeue``) under the same id, and
    accounting keeps a record of each run (24.11 and 26.05 recorded): the earlier ones say ``PREEMPTED``,
    ``NODE_FAIL`` or ``PENDING+REQUEUED``, and a listing may give them in any order. The latest run has the
    highest ``restart_cnt`` (not in accounting before v0.0.42) and, as Slurm resets the submit time at a
    requeue, the latest submit time. The order of first appearance is kept; ``sacct`` shows the same
    (``--duplicates`` shows every run).
    """
    latest: dict[tuple[int, int | None], SlurmJob] = {}
    for job in records:
        key = (job.job_id, job.array_task_id)
        kept = latest.get(key)
        if kept is None or _run_order(job) >= _run_order(kept):
            latest[key] = job
    return list(latest.values())


def _run_order(job: SlurmJob) -> tuple[int, float]:
    return job.restart_count, job.submit_time.timestamp() if job.submit_time else 0.0


def array_task_count(text: str) -> int | None:
    """How many tasks a Slurm array expression names: ``0-2`` 3, ``[1-9:2%2]`` 5, ``1,4`` 2; None if unreadable."""
    body = text.strip().strip("[]").split("%")[0]
    if body.lower().startswith("0x"):
        try:
            return bin(int(body, 16)).count("1")
        except ValueError:
            return None
    total = 0
    for item in filter(None, body.split(",")):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item.strip())
        if not match:
            return None
        low, high, step = int(match.group(1)), int(match.group(2) or match.group(1)), int(match.group(3) or 1)
        if high < low or step < 1:
            return None
        total += (high - low) // step + 1
    return total or None


def _task_string(value: Any) -> str:
    """Accounting's pending-tasks field: a hex bitmap (``0xE``: tasks 1-3) turned into ranges (``1-3``)."""
    text = _str(value)
    if not text.lower().startswith("0x"):
        return text
    try:
        bits = int(text, 16)
    except ValueError:
        return text
    indexes = [i for i in range(bits.bit_length()) if bits >> i & 1]
    ranges: list[str] = []
    for index in indexes:
        if ranges and int(ranges[-1].split("-")[-1]) == index - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{index}"
        else:
            ranges.append(str(index))
    return ",".join(ranges)


def _db_exit_code(record: Mapping[str, Any], state: JobState) -> ExitCode:
    """How an accounted job's batch script ended.

    Accounting records a job that Slurm itself ended (cancelled, timed out, preempted) with the job-level
    exit code SUCCESS/0, and the signal on its batch step (24.11 and 26.05 recorded): so a clean 0 of a job
    that did not complete is taken from the batch step, when the record has one. Slurm signals the step's
    processes one by one: when the script's child died of the signal first, bash exits 128 + its number
    (ERROR/143 for SIGTERM, recorded on 24.11 and 26.05 under load), which reads as that signal.
    """
    job_level = ExitCode.parse(record.get("exit_code"))
    if state.is_success or job_level.signal or job_level.return_code not in (None, 0):
        return job_level
    steps = record.get("steps")
    for step in steps if isinstance(steps, list) else ():
        if isinstance(step, Mapping) and _str(obj(step.get("step")).get("name")) == "batch":
            batch = ExitCode.parse(step.get("exit_code"))
            if batch.status == ("ERROR",) and batch.return_code in _SHELL_SIGNALLED:
                return _SHELL_SIGNALLED[batch.return_code]
            return batch if batch.signal or batch.return_code is not None else job_level
    return job_level


# What a batch script's shell exits with when its child died of the signal Slurm ends a job with.
_SHELL_SIGNALLED = {
    128 + 15: ExitCode(signal=15, signal_name="TERM", status=("SIGNALED",)),
    128 + 9: ExitCode(signal=9, signal_name="KILL", status=("SIGNALED",)),
}


def _reason(value: Any) -> str:
    return _str(value) or ""


def _array(master: Any, task: Any) -> tuple[int, int] | None:
    m, t = _int(master), _int(task)
    return (m, t) if m and t is not None else None


def _elapsed(start: datetime | None, end: datetime | None, state: JobState) -> timedelta | None:
    if start is None:
        return None
    if end is not None and end >= start and state.base != "RUNNING":
        return end - start
    return datetime.now(tz=timezone.utc) - start


def _outputs(
    record: Mapping[str, Any], version: str, *, job_id: int, name: str, user: str, array: Any
) -> tuple[str, str]:
    result: list[str] = []
    for key, expanded in (("standard_output", "stdout_expanded"), ("standard_error", "stderr_expanded")):
        path = _str(record.get(expanded))
        if not path:
            raw = _str(record.get(key))
            path = expand_output_pattern(raw, job_id=job_id, name=name, user=user, array=array)
            if not path and key == "standard_error" and not output_is_pattern(version):
                path = result[0] if result else ""
        result.append(path)
    return result[0], result[1]


def _db_output(record: Mapping[str, Any], key: str, **names: Any) -> str:
    raw = _str(record.get(key))
    workdir = _str(record.get("working_directory"))
    if raw and not raw.startswith("/") and workdir:
        # slurmdbd 24.11 joins a relative pattern to the working directory without the "/"
        # (/home/u/runtrain-7.out for train-%j.out in /home/u/run): build the path ourselves.
        return posixpath.join(workdir, expand_output_pattern(raw, **names))
    return _str(record.get(f"{key}_expanded")) or expand_output_pattern(raw, **names)


def _tres_string(items: Any) -> str:
    if not isinstance(items, list):
        return ""
    parts = []
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("count"), int) and item["count"] >= 0:
            kind = _str(item.get("type"))
            name = _str(item.get("name"))
            parts.append(f"{kind}{'/' + name if name else ''}={item['count']}")
    return ",".join(parts)
