"""The data parser versions slurmrestd 24.11 serves: v0.0.42 replies reshaped as v0.0.40 and v0.0.41.

The emulator builds every reply in v0.0.42's shape (its templates are v0.0.42 recordings); this module
turns one into what real slurmrestd 24.11.5 answers to the same call at an older version, difference by
difference as recorded (tests/real_slurm/recorded/v0.0.4x, checked by tests/real_slurm/test_conformance):

- every reply: ``meta.plugin.data_parser`` names the version;
- job_info (``/slurm/.../job/ID``, ``/slurm/.../jobs/``): no ``priority_by_partition`` /
  ``required_switches``; ``minimum_switches``, ``exclusive``, ``oversubscribe``, ``show_flags``
  instead; at v0.0.40 ``job_resources`` is the older flat object (``{}`` while pending);
- submit: an extra ``result`` object besides ``job_id``;
- DELETE: no ``status`` array and no errors, for a real cancel, an unknown job and a finished job alike;
- ping: no ``responding`` / ``primary``;
- ``/slurmdb`` job records: no ``qosreq`` / ``restart_cnt``; at v0.0.40 also no
  ``stdin``/``stdout``/``stderr`` (nor their ``_expanded``) and no ``time.planned``;
- ``/slurmdb/.../ping/`` exists only from v0.0.42 (the caller routes that).
"""

from __future__ import annotations

from typing import Any

NEWEST = 42


def adapt(version: int, route: str, reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` (v0.0.42 shape) as data parser ``v0.0.{version}`` gives it; ``route`` names the handler."""
    meta = reply.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("plugin"), dict):
        meta["plugin"]["data_parser"] = f"data_parser/v0.0.{version}"
    if version >= NEWEST:
        return reply
    if route in ("get_job", "jobs") and isinstance(reply.get("jobs"), list):
        reply["jobs"] = [_job_info(version, job) for job in reply["jobs"]]
    elif route == "submit" and "job_id" in reply:
        result = {
            "job_id": reply["job_id"],
            "step_id": reply.get("step_id", "batch"),
            "error_code": 0,
            "error": "No error",
            "job_submit_user_msg": reply.get("job_submit_user_msg", ""),
        }
        reply = {"result": result, **reply}
    elif route == "cancel":
        reply.pop("status", None)
        reply["errors"] = []
    elif route == "ping":
        for ping in reply.get("pings") or []:
            ping.pop("responding", None)
            ping.pop("primary", None)
    elif route in ("db_job", "db_jobs") and isinstance(reply.get("jobs"), list):
        reply["jobs"] = [_slurmdb_job(version, job) for job in reply["jobs"]]
    return reply


def _job_info(version: int, info: dict[str, Any]) -> dict[str, Any]:
    old: dict[str, Any] = {}
    for key, value in info.items():
        if key == "priority_by_partition":
            continue
        if key == "required_switches":
            old["minimum_switches"] = value
            old["exclusive"] = []
            old["oversubscribe"] = True
            old["show_flags"] = []
            continue
        if key == "job_resources" and version == 40:
            value = _job_resources_v40(value)
        old[key] = value
    return old


def _job_resources_v40(resources: dict[str, Any] | None) -> dict[str, Any]:
    """v0.0.40's ``job_resources``: ``{}`` until the job has nodes, then the flat allocation."""
    if not resources:
        return {}
    nodes = resources.get("nodes") or {}
    allocated = []
    for node in nodes.get("allocation") or []:
        sockets: dict[str, Any] = {}
        for socket in node.get("sockets") or []:
            cores = {
                str(core["index"]): "allocated"
                for core in socket.get("cores") or []
                if "ALLOCATED" in (core.get("status") or [])
            }
            if cores:
                sockets[str(socket["index"])] = {"cores": cores}
        allocated.append(
            {
                "sockets": sockets,
                "nodename": node.get("name", ""),
                "cpus_used": (node.get("cpus") or {}).get("used", 0),
                "memory_used": (node.get("memory") or {}).get("used", 0),
                "memory_allocated": (node.get("memory") or {}).get("allocated", 0),
            }
        )
    return {
        "nodes": nodes.get("list", ""),
        "allocated_cores": resources.get("cpus", 0),
        "allocated_cpus": 0,
        "allocated_hosts": nodes.get("count", len(allocated)),
        "allocated_nodes": allocated,
    }


_DB_V41_MISSING = ("qosreq", "restart_cnt")
_DB_V40_MISSING = ("stdin", "stdout", "stderr", "stdin_expanded", "stdout_expanded", "stderr_expanded")


def _slurmdb_job(version: int, record: dict[str, Any]) -> dict[str, Any]:
    missing = _DB_V41_MISSING + (_DB_V40_MISSING if version == 40 else ())
    old = {key: value for key, value in record.items() if key not in missing}
    if version == 40 and isinstance(old.get("time"), dict):
        old["time"] = {key: value for key, value in old["time"].items() if key != "planned"}
    return old
