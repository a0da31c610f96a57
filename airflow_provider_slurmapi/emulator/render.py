"""Job records rendered into the recorded slurmrestd shapes: ``job_info`` and the slurmdb job record."""

from __future__ import annotations

import time
from typing import Any

from .jobs import TERMINAL_STATES, Job
from .notation import absolute_path, hostlist
from .templates import exit_code, number, template
from .versions import PATTERNS

_UNLIMITED_RUN = 365 * 24 * 3600  # slurmctld's expected end of a job without a time limit


def _cpus(job: Job) -> int:
    req = job.request
    return max(req.cpus_per_task, 1) * max(req.tasks, req.tasks_per_node * req.node_count, 1)


def _time_limit(job: Job) -> dict[str, Any]:
    limit = job.request.time_limit
    return number(None, infinite=True) if limit is None else number(limit)


def _exit_code(job: Job) -> dict[str, Any]:
    return exit_code(job.return_code, job.signal, job.exit_status)


def _started(job: Job) -> bool:
    return job.base_state != "PENDING" and bool(job.nodes)


def job_info(job: Job, cluster: str) -> dict[str, Any]:
    """One element of ``jobs`` in ``GET /slurm/v0.0.42/job/{id}`` and ``/jobs/``."""
    info: dict[str, Any] = template("job_info")
    req = job.request
    started = _started(job)
    cpus = _cpus(job)
    info.update(
        {
            "account": req.account or "default",
            "accrue_time": number(job.eligible_time or (job.submit_time if started else 0)),
            "array_job_id": number(job.array_job_id),
            "array_task_id": number(job.array_task_id),
            "array_max_tasks": number(job.array_max_tasks),
            "array_task_string": "",
            "batch_host": job.nodes[0] if started else "",
            "cluster": cluster,
            "comment": req.comment,
            "extra": req.extra,
            "cpus_per_task": number(req.cpus_per_task),
            "dependency": (req.dependency if job.dependency_text is None else job.dependency_text)
            if job.base_state == "PENDING"
            else "",
            "eligible_time": number(job.eligible_time or (job.submit_time if started else 0)),
            "end_time": number(_end_time(job)),
            "exit_code": _exit_code(job),
            "group_name": job.user,
            "hold": job.held,
            "job_id": job.job_id,
            "job_state": list(job.state),
            "last_sched_evaluation": number(job.start_time or job.submit_time),
            "mail_user": job.user,
            "name": req.name,
            "nodes": hostlist(job.nodes) if started else "",
            "cpus": number(cpus),
            "node_count": number(req.node_count),
            "tasks": number(max(req.tasks, req.tasks_per_node * req.node_count, 1)),
            "tasks_per_node": number(req.tasks_per_node),
            "partition": req.partition,
            "memory_per_node": number(req.memory_per_node or 0),
            "minimum_cpus_per_node": number(max(req.cpus_per_task, 1)),
            "priority": number(0 if job.held else 1),
            "restart_cnt": job.restart_cnt,
            "requeue": req.requeue,
            "start_time": number(job.start_time),
            "state_reason": job.reason,
            "standard_error": job.stderr_path,
            "standard_input": job.stdin_path,
            "standard_output": job.stdout_path,
            "submit_time": number(job.submit_time),
            "time_limit": _time_limit(job),
            "tres_per_node": req.tres_per_node,
            "tres_req_str": f"cpu={cpus},node={req.node_count},billing={cpus}",
            "tres_alloc_str": f"cpu={cpus},node={req.node_count},billing={cpus}" if started else "",
            "user_name": job.user,
            "current_working_directory": req.current_working_directory,
        }
    )
    # the raw patterns, shown from v0.0.43 on (versions.adapt takes them out of every reply)
    info[PATTERNS] = {
        "standard_output": req.standard_output or ("slurm-%A_%a.out" if job.array_job_id else "slurm-%j.out"),
        "standard_error": req.standard_error,
        "standard_input": req.standard_input,
    }
    flags = [flag for flag in info["flags"] if flag != "JOB_WAS_RUNNING"]
    if job.base_state == "RUNNING":
        flags.insert(0, "JOB_WAS_RUNNING")
    info["flags"] = flags
    info["billable_tres"] = (
        {"set": True, "infinite": False, "number": float(cpus)}
        if started
        else {
            "set": False,
            "infinite": False,
            "number": 0.0,
        }
    )
    info["job_resources"] = _job_resources(info["job_resources"], job, cpus) if started else None
    return info


def _end_time(job: Job) -> int:
    if job.end_time:
        return job.end_time
    if job.base_state != "RUNNING":
        return 0
    limit = job.request.time_limit
    return job.start_time + (_UNLIMITED_RUN if limit is None else limit * 60)


def _job_resources(resources: dict[str, Any], job: Job, cpus: int) -> dict[str, Any]:
    nodes = resources["nodes"]
    allocation = nodes["allocation"][0]
    per_node = max(cpus // max(len(job.nodes), 1), 1)
    entries = []
    for index, name in enumerate(job.nodes):
        entry = dict(allocation)
        entry.update({"index": index, "name": name, "cpus": {"count": per_node, "used": 0}})
        entries.append(entry)
    nodes.update({"count": len(job.nodes), "list": hostlist(job.nodes), "allocation": entries})
    resources["cpus"] = cpus
    return resources


def slurmdb_job(job: Job, cluster: str, store_flags: frozenset[str] = frozenset()) -> dict[str, Any]:
    """One element of ``jobs`` in ``GET /slurmdb/v0.0.42/job/{id}`` and ``/jobs/``.

    As in real Slurm, accounting keeps the job's comment only with ``AccountingStoreFlags=job_comment``
    (``store_flags``), which is not the default: without it the record reads what the job's user wrote
    with ``sacctmgr modify job`` (``"job": ""`` when nothing).
    """
    record: dict[str, Any] = template("slurmdb_job")
    req = job.request
    started = _started(job)
    cpus = _cpus(job)
    now = int(time.time())
    end = job.end_time if job.is_final or job.end_time else 0
    record.update(
        {
            "account": req.account or "default",
            "comment": {
                "administrator": "",
                "job": req.comment if "job_comment" in store_flags else job.accounted_comment,
                "system": "",
            },
            "allocation_nodes": req.node_count if started else 0,
            "cluster": cluster,
            "exit_code": _db_exit_code(job),
            "flags": record["flags"] if started else [],
            "group": job.user,
            "job_id": job.job_id,
            "name": req.name,
            "nodes": hostlist(job.nodes) if started else "None assigned",
            "partition": req.partition,
            "hold": job.held,
            "priority": number(0 if job.held else 1),
            "kill_request_user": job.kill_request_user,
            "restart_cnt": job.restart_cnt,
            "stdin_expanded": job.stdin_path if req.standard_input else "",
            "stdout_expanded": job.stdout_path,
            "stderr_expanded": job.stderr_path if req.standard_error else "",
            "stdout": _pattern(job, req.standard_output, "slurm-%A_%a.out" if job.array_job_id else "slurm-%j.out"),
            "stderr": _pattern(job, req.standard_error, ""),
            "stdin": _pattern(job, req.standard_input, ""),
            # slurmdbd keeps no reason for an ended job: "None" whatever ended it (24.11 and 26.05 recorded);
            # a requeued job's earlier run says how it ended: PREEMPTED, NODE_FAIL or PENDING+REQUEUED, and
            # its run after the requeue keeps the reason it waited for once it has started: BeginTime
            "state": {
                "current": list(job.run_ended) or [job.base_state],
                "reason": _db_reason(job),
            },
            "user": job.user,
            "working_directory": req.current_working_directory,
        }
    )
    record["association"].update({"account": req.account or "default", "cluster": cluster, "user": job.user})
    record["array"].update(
        {
            "job_id": job.array_job_id,
            "task_id": number(job.array_task_id),
            "task": "",
        }
    )
    record["array"]["limits"]["max"]["running"]["tasks"] = job.array_max_tasks
    record["required"]["CPUs"] = cpus
    record["required"]["memory_per_node"] = number(req.memory_per_node or 0)
    times = record["time"]
    start = job.start_time if started or job.start_time else 0
    times.update(
        {
            "elapsed": max(0, (end or now) - start) if start else 0,
            "eligible": job.eligible_time,
            "end": end,
            "start": start,
            "submission": job.submit_time,
            "limit": _time_limit(job),
        }
    )
    times["planned"] = number(max(0, (start or now) - job.submit_time))
    for entry in record["tres"]["requested"]:
        entry["count"] = {"cpu": cpus, "node": req.node_count, "billing": cpus}.get(entry["type"], entry["count"])
    if started:
        for entry in record["tres"]["allocated"]:
            entry["count"] = {"cpu": cpus, "node": req.node_count, "billing": cpus}.get(entry["type"], entry["count"])
        record["steps"] = [_batch_step(record["steps"][0], job, start, end, now)]
    else:
        record["tres"]["allocated"] = []
        record["steps"] = []
    return record


def _db_reason(job: Job) -> str:
    if job.run_ended:
        return "None"
    if job.restart_cnt and job.base_state != "PENDING":
        return "BeginTime"  # recorded on 24.11: the later runs of requeued jobs that COMPLETED
    return "None" if job.base_state in TERMINAL_STATES else job.reason


def _killed_by_slurm(job: Job) -> bool:
    """Cancelled, timed out or preempted: slurmctld signalled the batch script (SIGTERM, then SIGKILL)."""
    return job.signal is not None and job.base_state in ("CANCELLED", "TIMEOUT", "PREEMPTED")


def _db_exit_code(job: Job) -> dict[str, Any]:
    """The job's exit code in accounting: SUCCESS/0 when Slurm itself killed it (cancel, time limit,
    preemption); ERROR/1 for a node failure.

    Real slurmdbd 24.11 keeps the signal on the batch step only (recorded/v0.0.42/cancel, timeout):
    ``/slurm`` says SIGNALED/15 for the same job. A NODE_FAIL job's raw status 1 reads as signal 1 on
    ``/slurm`` and as return code 1 in accounting, its batch step CANCELLED with no exit code (measured).
    """
    if _killed_by_slurm(job):
        return exit_code(0, None, "SUCCESS")
    if job.base_state == "NODE_FAIL":
        return exit_code(1, None, "ERROR")
    return _exit_code(job)


def _pattern(job: Job, pattern: str, default: str) -> str:
    return absolute_path(job.request.current_working_directory, pattern or default)


def _batch_step(step: dict[str, Any], job: Job, start: int, end: int, now: int) -> dict[str, Any]:
    step["time"].update(
        {
            "elapsed": max(0, (end or now) - start),
            "end": number(end) if end else number(None),
            "start": number(start),
        }
    )
    node_fail = job.base_state == "NODE_FAIL"
    step["exit_code"] = exit_code(None, None, "PENDING") if node_fail else _exit_code(job)
    step["nodes"] = {"count": len(job.nodes), "range": hostlist(job.nodes), "list": list(job.nodes)}
    # a timed-out job's batch step was cancelled by slurmctld: accounting says so (recorded/v0.0.42/timeout)
    step["state"] = ["CANCELLED"] if _killed_by_slurm(job) or node_fail else [job.base_state]
    step["kill_request_user"] = job.kill_request_user
    step["step"] = {"id": f"{job.job_id}.batch", "name": "batch"}
    if job.max_rss_bytes is not None:
        # one task on the first node: its peak is the step's maximum, minimum, average and total
        mem = {"type": "mem", "name": "", "id": 2, "count": job.max_rss_bytes}
        where = {"task": 0, "node": job.nodes[0] if job.nodes else ""}
        requested = step["tres"]["requested"]
        requested["max"], requested["min"] = [{**mem, **where}], [{**mem, **where}]
        requested["average"] = [*requested["average"], dict(mem)]
        requested["total"] = [*requested["total"], dict(mem)]
    return step
