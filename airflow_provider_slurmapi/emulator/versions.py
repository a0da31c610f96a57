"""The data parser versions slurmrestd serves: v0.0.42 replies reshaped as older and newer versions.

Slurm 24.11 (the default) serves v0.0.40-v0.0.42, Slurm 26.05 (``slurm_release="26.05"``) v0.0.42-v0.0.45.

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

And what real slurmrestd 26.05.5 answers at the newer versions (tests/fixtures/slurm-26.05, checked by
tests/real_slurm/test_conformance on 26.05); its v0.0.42 replies have 24.11's keys. At every version 26.05
answers a rejected submit with 422 where 24.11 said 500 (SlurmRest routes that).

- v0.0.43+: job_info's ``standard_output``/``_error``/``_input`` are the raw patterns and
  ``stdout_expanded``/``stderr_expanded``/``stdin_expanded`` the paths; ``licenses_allocated`` and
  ``segment_size`` are new; ``/slurmdb`` records add ``segment_size`` and ``reservation.requested``, their
  steps ``time.limit`` and ``step.stdout``/``stderr``/``stdin`` (and ``_expanded``, all empty);
- v0.0.44+: job_info adds ``step_id`` and ``submit_line``;
- v0.0.45: job_info drops ``power``, adds ``container_type``, ``memory_update_delay`` and
  ``memory_update_margin``, and its ``step_id`` carries the job's ``sluid``; ``/slurmdb`` records add
  ``sluid``, ``original_sluid``, ``exclusive`` and ``oversubscribe``, their steps ``submit_line`` instead
  of ``pid``; a ping (``/slurm`` and ``/slurmdb``) has
  ``status`` instead of ``pinged`` and ``mode``.
"""

from __future__ import annotations

from typing import Any

NEWEST = 42
# The Slurm releases the emulator can answer as: the full release and the data parsers each serves.
RELEASES: dict[str, tuple[str, tuple[int, ...]]] = {
    "24.11": ("24.11.5", (40, 41, 42)),
    "26.05": ("26.05.5", (42, 43, 44, 45)),
}
# job_info's raw output patterns, which render.job_info hands over under this key (v0.0.43+ shows them)
PATTERNS = "_stdio_patterns"


def adapt(version: int, route: str, reply: dict[str, Any], release: str = "24.11") -> dict[str, Any]:
    """``reply`` (v0.0.42 shape) as data parser ``v0.0.{version}`` gives it; ``route`` names the handler."""
    meta = reply.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("plugin"), dict):
        meta["plugin"]["data_parser"] = f"data_parser/v0.0.{version}"
        full = RELEASES[release][0]
        major, minor, micro = full.split(".")
        meta["slurm"].update({"release": full, "version": {"major": major, "micro": micro, "minor": minor}})
    patterns = [job.pop(PATTERNS, {}) for job in reply.get("jobs") or [] if isinstance(job, dict)]
    if version > NEWEST:
        return _newer(version, route, reply, patterns)
    if version == NEWEST:
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


def _newer(version: int, route: str, reply: dict[str, Any], patterns: list[dict[str, str]]) -> dict[str, Any]:
    """v0.0.43-v0.0.45 as slurmrestd 26.05 answers them (see the module's docstring)."""
    if route in ("get_job", "jobs") and isinstance(reply.get("jobs"), list):
        reply["jobs"] = [_newer_job_info(version, job, raw) for job, raw in zip(reply["jobs"], patterns, strict=True)]
    elif route in ("db_job", "db_jobs") and isinstance(reply.get("jobs"), list):
        for record in reply["jobs"]:
            record["segment_size"] = 0
            if isinstance(record.get("reservation"), dict):
                record["reservation"]["requested"] = ""
            for step in record.get("steps") or []:
                _newer_step(version, step)
            if version >= 45:
                sluid = _sluid(int(record.get("job_id") or 0))
                record.update({"sluid": sluid, "original_sluid": sluid, "exclusive": "NO", "oversubscribe": "NO"})
    elif route in ("ping", "db_ping") and version >= 45:
        for ping in reply.get("pings") or []:
            ping.pop("pinged", None)
            ping.pop("mode", None)
            ping["status"] = "No error"
    return reply


def _newer_step(version: int, step: dict[str, Any]) -> None:
    step["time"]["limit"] = {"set": False, "infinite": True, "number": 0}
    step["step"].update({name: "" for name in ("stderr", "stdin", "stdout")})
    step["step"].update({f"{name}_expanded": "" for name in ("stderr", "stdin", "stdout")})
    if version >= 45:
        step.pop("pid", None)
        step["submit_line"] = ""


def _newer_job_info(version: int, info: dict[str, Any], patterns: dict[str, str]) -> dict[str, Any]:
    new = dict(info)
    for stream, short in (("output", "stdout"), ("error", "stderr"), ("input", "stdin")):
        new[f"{short}_expanded"] = info.get(f"standard_{stream}", "")
        new[f"standard_{stream}"] = patterns.get(f"standard_{stream}", "")
    new.update({"licenses_allocated": "", "segment_size": 0})
    if version >= 44:
        job_id = int(info.get("job_id") or 0)
        new["step_id"] = {
            "sluid": _sluid(job_id),
            "job_id": {"set": True, "infinite": False, "number": job_id},
            "step_het_component": {"set": False, "infinite": False, "number": 0},
            "step_id": "entire",
        }
        new["submit_line"] = ""
    if version >= 45:
        new.pop("power", None)
        new.update({"container_type": "", "memory_update_delay": 0, "memory_update_margin": 0})
    return new


def _sluid(job_id: int) -> str:
    """A stand-in for Slurm 26.05's sortable unique job id (``s`` and base-32 digits, as recorded)."""
    digits = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    text = ""
    value = job_id or 1
    while value:
        value, digit = divmod(value, 32)
        text = digits[digit] + text
    return "s" + text.rjust(13, "0")
