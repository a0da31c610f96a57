"""slurmrestd's job endpoints (24.11: v0.0.40-v0.0.42, 26.05: v0.0.42-v0.0.45) on top of the simulated cluster."""

from __future__ import annotations

import re
import secrets
import signal
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .cluster import Cluster, SubmitError
from .jobs import Job, JobRequest
from .notation import NotationError, parse_dependency
from .render import job_info, slurmdb_job
from .templates import data_type_name, envelope, job_desc_fields, meta, number, record
from .versions import RELEASES, adapt

_PATH = re.compile(r"^/(slurm|slurmdb)/v0\.0\.([0-9]+)/(.*)$")
_JOB_PATH = re.compile(r"^job/([^/]+)/?$")
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+))?$")

Reply = tuple[int, dict[str, Any]]


class InvalidPath(Exception):
    """A path slurmrestd does not serve; Google answers INVALID_ARGUMENT for it."""


class TextFault(Exception):
    """slurmrestd answered a status other than 400/404 in plain text: Google turns it into 500 INTERNAL."""

    def __init__(self, status: int) -> None:
        super().__init__(f"Internal error encountered: the Slurm REST API answered HTTP {status} without JSON.")
        self.status = status


class BodyError(Exception):
    """A job field slurmrestd's parser would reject."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        super().__init__(f"{field}: expected {expected}")
        self.field = field
        self.value = value
        self.expected = expected


class SlurmRest:
    """Maps ``(method, path, body)`` to slurmrestd's ``(status, JSON reply)``."""

    def __init__(self, cluster: Cluster, release: str = "24.11") -> None:
        self.cluster = cluster
        self.release = release
        self.versions = RELEASES[release][1]
        self.slurmdbd_down = False

    def call(self, method: str, path: str, body: dict[str, Any] | None, user: str) -> Reply:
        """Answer one call; raises ``InvalidPath`` for anything slurmrestd would not route."""
        parts = urlsplit(path)
        match = _PATH.match(parts.path)
        if not match:
            raise InvalidPath(path)
        service, version, rest = match.group(1), int(match.group(2)), match.group(3)
        if version not in self.versions:
            raise InvalidPath(path)
        if "," in parts.query:
            # slurmrestd answers a raw comma in a query in plain text: 24.11 400 "Unable to parse query.",
            # 26.05 500 "Unspecified error" (the proxy mode's UpstreamSlurm turns them into the same errors)
            if self.release == "24.11":
                raise InvalidPath(path)
            raise TextFault(500)
        if "%2c" in parts.query.lower():
            return 422, self._reply("slurmdbd" if service == "slurmdb" else "slurmctld", errors=[_query_error()])
        # Lists come as repeated parameters (job_id=1&job_id=2), the only form slurmrestd accepts.
        query = {key: ",".join(values) for key, values in parse_qs(parts.query).items()}
        handler = self._route(service, method, rest)
        if handler is None or (handler == self._db_ping and version < 42):
            # slurmrestd 24.11 serves /slurmdb/.../ping/ only from v0.0.42 (404 text before)
            raise InvalidPath(path)
        if service == "slurmdb" and self.slurmdbd_down:
            return 502, adapt(version, "", self.dbd_down_reply(), self.release)
        status, reply = handler(rest, query, body or {}, user)
        if status == 500 and handler == self._submit and self.release != "24.11":
            status = 422  # a refused submit (bad partition, no environment): 24.11 says 500, 26.05 422
        return status, adapt(version, handler.__name__.lstrip("_"), reply, self.release)

    def _route(self, service: str, method: str, rest: str) -> Callable[..., Reply] | None:
        routes: dict[tuple[str, str, str], Callable[..., Reply]] = {
            ("slurm", "POST", "job/submit"): self._submit,
            ("slurm", "GET", "jobs"): self._jobs,
            ("slurm", "GET", "jobs/state"): self._jobs_state,
            ("slurm", "GET", "ping"): self._ping,
            ("slurmdb", "GET", "jobs"): self._db_jobs,
            ("slurmdb", "GET", "ping"): self._db_ping,
        }
        key = rest.rstrip("/")
        if (service, method, key) in routes:
            return routes[(service, method, key)]
        job_match = _JOB_PATH.match(rest)
        if job_match and key != "job/submit" and _JOB_ID.match(job_match.group(1)):
            job_routes: dict[tuple[str, str], Callable[..., Reply]] = {
                ("slurm", "GET"): self._get_job,
                ("slurm", "DELETE"): self._cancel,
                ("slurm", "POST"): self._update,
                ("slurmdb", "GET"): self._db_job,
            }
            return job_routes.get((service, method))
        return None

    # ---- reply builders ----------------------------------------------------------------------------

    def dbd_down_reply(self) -> dict[str, Any]:
        """What every /slurmdb path answers (with status 502) while slurmdbd is unreachable."""
        return self._error_reply("slurmdbd", [record("slurmdbd_down")])

    def _error_reply(self, kind: str, errors: list[dict[str, Any]], warnings: list[Any] | None = None) -> dict:
        return {"errors": errors, "warnings": warnings or [], "meta": meta(kind, self.cluster.name)}

    def _reply(self, kind: str, **fields: Any) -> dict[str, Any]:
        return envelope(kind, self.cluster.name, **fields)

    def _lookup(self, text: str) -> list[Job]:
        """Jobs a path id names: ``12`` (a job, or an array's tasks) or ``12_3`` (one task)."""
        match = _JOB_ID.match(text)
        assert match is not None
        job_id = int(match.group(1))
        if match.group(2) is None:
            return self.cluster.active(job_id)
        task = int(match.group(2))
        return [job for job in self.cluster.active(job_id) if job.array_task_id == task]

    # ---- /slurm ------------------------------------------------------------------------------------

    def _submit(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        warnings: list[dict[str, Any]] = []
        job = body.get("job")
        if job is None and isinstance(body.get("jobs"), list) and len(body["jobs"]) == 1:
            job = body["jobs"][0]
        if not isinstance(job, dict):
            error = record("no_script")
            error["description"] = 'Specify a "job" object to submit a batch job'
            return 422, self._error_reply("slurmctld", [error])
        for name, value in job.items():
            if name not in job_desc_fields():
                warning = record("unknown_field")
                warning["description"] = (
                    f'Ignoring unknown field "{name}" of type {data_type_name(value)} in DATA_PARSER_JOB_DESC_MSG'
                )
                warning["source"] = f"#/job/{name}/"
                warnings.append(warning)
        script = body.get("script") or job.get("script")
        if not isinstance(script, str) or not script:
            return 422, self._error_reply("slurmctld", [record("no_script")], warnings)
        try:
            request = parse_job(job, script)
            if not request.environment:
                error = record("no_environment")
                if self.release != "24.11":  # 26.05 names the problem (error 2127), 24.11 said 2019 "I/O error"
                    error.update({"error_number": 2127, "error": "Environment is missing in job"})
                return 500, self._error_reply("slurmctld", [error], warnings)
            job_id = self.cluster.submit(request, user)
        except BodyError as exc:
            error = {
                "description": f'Rejecting field "{exc.field}" of type {data_type_name(exc.value)}: '
                f"expected {exc.expected}",
                "error_number": 9202,
                "error": "Unable to convert data type",
                "source": f"#/job/{exc.field}/",
            }
            return 400, self._error_reply("slurmctld", [error], warnings)
        except SubmitError as exc:
            error = record(exc.record)
            if exc.error:
                error["error"], error["error_number"] = exc.error, exc.number
            return exc.status, self._error_reply("slurmctld", [error], warnings)
        return 200, self._reply("slurmctld", job_id=job_id, step_id="batch", job_submit_user_msg="", warnings=warnings)

    def _get_job(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        text = rest.split("/")[1]
        with self.cluster.lock:
            jobs = [job_info(job, self.cluster.name) for job in self._lookup(text)]
        if not jobs:
            error = record("not_found")
            error["description"] = f"Unable to query JobId={text}"
            return 404, self._reply(
                "slurmctld", jobs=[], last_backfill=number(0), last_update=number(0), errors=[error]
            )
        return 200, self._reply("slurmctld", jobs=jobs, last_backfill=number(0), last_update=number(int(time.time())))

    def _jobs(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        with self.cluster.lock:
            jobs = [job_info(job, self.cluster.name) for job in self.cluster.active_jobs()]
        return 200, self._reply("slurmctld", jobs=jobs, last_backfill=number(0), last_update=number(int(time.time())))

    def _jobs_state(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        with self.cluster.lock:
            if "job_id" in query:
                jobs: list[Job] = []
                for text in query["job_id"].split(","):
                    if _JOB_ID.match(text.strip()):
                        jobs.extend(self._lookup(text.strip()))
            else:
                jobs = self.cluster.active_jobs()
            states = [{"job_id": job.display_id, "state": list(job.state)} for job in jobs]
        return 200, self._reply("slurmctld", jobs=states)

    def _cancel(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        text = rest.split("/")[1]
        signum = _signal_number(query.get("signal", ""))
        with self.cluster.lock:
            jobs = self._lookup(text)
            problems = [self.cluster.cancel(job, signum, user) for job in jobs]
        if not jobs:
            status = record("cancel_not_found")
            status["step_id"] = text
            return 200, self._reply("slurmctld", status=[status])
        if all(problems):
            # real slurmrestd v0.0.42 names one error per request: "denied" wins over "already done"
            status = record("cancel_denied" if "cancel_denied" in problems else "cancel_done")
            status["step_id"] = text
            status["job_id"] = number(jobs[0].job_id)
            return 200, self._reply("slurmctld", status=[status])
        return 200, self._reply("slurmctld", status=[])

    def _update(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        text = rest.split("/")[1]
        with self.cluster.lock:
            jobs = self._lookup(text)
            if not jobs:
                error = record("not_found")
                error["description"] = f"Job update for JobId={text} failed"
                return 500, self._error_reply("slurmctld", [error])
            for job in jobs:
                if "hold" in body:
                    self.cluster.release(job, bool(body["hold"]))
                if isinstance(body.get("comment"), str):
                    job.request.comment = body["comment"]
        results = [
            {"job_id": job.job_id, "step_id": "batch", "error_code": 0, "error": "No error", "why": "Job modified"}
            for job in jobs
        ]
        return 200, self._reply("slurmctld", results=results)

    def _ping(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        ping = record("ping")
        ping.update({"hostname": f"{self.cluster.name}-controller", "latency": 100 + secrets.randbelow(900)})
        return 200, self._reply("slurmctld", pings=[ping])

    # ---- /slurmdb ----------------------------------------------------------------------------------

    def _found_nothing(self) -> dict[str, Any]:
        warning = record("found_nothing")
        warning["description"] = f"slurmdb_jobs_get(0x{secrets.randbits(44):012x}) found nothing"
        return warning

    def _db_job(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        text = rest.split("/")[1]
        match = _JOB_ID.match(text)
        assert match is not None
        with self.cluster.lock:
            jobs = self.cluster.accounting(int(match.group(1)))
            if match.group(2) is not None:
                jobs = [job for job in jobs if job.array_task_id == int(match.group(2))]
            records = [slurmdb_job(job, self.cluster.name, self.cluster.accounting_store_flags) for job in jobs]
        warnings = [] if records else [self._found_nothing()]
        return 200, self._reply("slurmdbd", jobs=records, warnings=warnings)

    def _db_jobs(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        filters: dict[str, Callable[[Job], str]] = {
            "users": lambda job: job.user,
            "state": lambda job: job.base_state,
            "job_name": lambda job: job.request.name,
            "partition": lambda job: job.request.partition,
            "account": lambda job: job.request.account or "default",
        }
        wanted = {
            key: {value.strip().upper() for value in query[key].split(",") if value.strip()}
            for key in filters
            if key in query
        }
        steps = {value.strip().split(".")[0] for value in query.get("step", "").split(",") if value.strip()}
        # As real slurmdbd (measured on 24.11): start_time=T keeps the jobs that ended at or after T, or
        # have not ended; skip_steps (any value) leaves each record's steps out, and the records of a requeued
        # job's earlier runs with them (only its latest run is listed then).
        since = int(query["start_time"]) if query.get("start_time", "").isdigit() else None
        with self.cluster.lock:
            jobs = [
                job
                for job in self.cluster.accounting()
                if all(filters[key](job).upper() in values for key, values in wanted.items())
                and (not steps or str(job.job_id) in steps)
                and (since is None or not job.end_time or job.end_time >= since)
                and not (job.run_ended and "skip_steps" in query)
            ]
            records = [slurmdb_job(job, self.cluster.name, self.cluster.accounting_store_flags) for job in jobs]
        if "skip_steps" in query:
            for entry in records:
                entry["steps"] = []
        warnings = [] if records else [self._found_nothing()]
        return 200, self._reply("slurmdbd", jobs=records, warnings=warnings)

    def _db_ping(self, rest: str, query: dict[str, str], body: dict[str, Any], user: str) -> Reply:
        ping = record("slurmdb_ping")
        ping.update({"hostname": f"{self.cluster.name}-dbd", "latency": 100 + secrets.randbelow(900)})
        return 200, self._reply("slurmdbd", pings=[ping])


def _query_error() -> dict[str, Any]:
    """What real slurmrestd 24.11 said to a query with an encoded comma (recorded, HTTP 422)."""
    return {
        "description": "Rejecting request. Failure parsing query",
        "error_number": 9000,
        "error": "Query empty or not RFC7320 compliant",
        "source": "op_handler_job_states",
    }


def _signal_number(text: str) -> int | None:
    text = text.strip().upper().removeprefix("SIG")
    if not text:
        return None
    if text.isdigit():
        return int(text)
    try:
        return int(signal.Signals["SIG" + text])
    except KeyError:
        return None


# ---- job description parsing ---------------------------------------------------------------------


def _int(job: dict[str, Any], field: str, default: int | None) -> int | None:
    """An integer field given plainly or as a ``{set, infinite, number}`` struct."""
    value = job.get(field)
    if value is None:
        return default
    if isinstance(value, bool):
        raise BodyError(field, value, "an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, dict) and isinstance(value.get("number", 0), int):
        if value.get("infinite"):
            return None
        if value.get("set", True) is False:
            return default
        return int(value.get("number", 0))
    raise BodyError(field, value, "an integer or a {set, infinite, number} object")


def _str(job: dict[str, Any], field: str, default: str = "") -> str:
    value = job.get(field, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BodyError(field, value, "a string")
    return value


def _node_count(job: dict[str, Any]) -> int:
    count = _int(job, "minimum_nodes", None)
    if count is not None:
        return count
    nodes = job.get("nodes")
    if isinstance(nodes, int) and not isinstance(nodes, bool):
        return nodes
    if isinstance(nodes, str) and nodes.strip():
        first = nodes.strip().split("-")[0]
        if not first.isdigit():
            raise BodyError("nodes", nodes, 'a node count such as "2" or "2-4"')
        return int(first)
    return 1


def _gather_seconds(frequency: str) -> int | None:
    """The task sampling interval of ``account_gather_frequency`` (``"task=5"``, ``"5"``, or a list such as
    ``"task=5,energy=30"``); None when it names none."""
    for item in frequency.split(","):
        key, _, value = item.strip().rpartition("=")
        if key in ("", "task") and value.isdigit():
            return int(value)
    return None


def parse_job(job: dict[str, Any], script: str) -> JobRequest:
    """A ``v0.0.42_job_desc_msg`` as the emulator's ``JobRequest``."""
    environment = job.get("environment") or []
    if not isinstance(environment, list) or not all(isinstance(item, str) for item in environment):
        raise BodyError("environment", environment, 'a list of "NAME=value" strings')
    dependency = _str(job, "dependency")
    try:
        dependencies = parse_dependency(dependency) if dependency else []
    except NotationError as exc:
        raise SubmitError("bad_partition", error="Job dependency problem", number=2038) from exc
    hold = job.get("hold", False)
    if not isinstance(hold, bool):
        raise BodyError("hold", hold, "a boolean")
    requeue = job.get("requeue", True)
    if not isinstance(requeue, bool):
        raise BodyError("requeue", requeue, "a boolean")
    warn_signal = None
    if job.get("kill_warning_signal") not in (None, ""):
        warn_signal = _signal_number(str(job["kill_warning_signal"]))
        if warn_signal is None:
            raise BodyError("kill_warning_signal", job["kill_warning_signal"], 'a signal such as "USR1" or "10"')
    warn_flags = job.get("kill_warning_flags") or []
    if not isinstance(warn_flags, list) or not all(isinstance(flag, str) for flag in warn_flags):
        raise BodyError("kill_warning_flags", warn_flags, "a list of flag names")
    return JobRequest(
        script=script,
        environment=list(environment),
        gather_seconds=_gather_seconds(_str(job, "account_gather_frequency")),
        name=_str(job, "name"),
        partition=_str(job, "partition"),
        node_count=_node_count(job),
        cpus_per_task=_int(job, "cpus_per_task", 1) or 1,
        tasks_per_node=_int(job, "tasks_per_node", 0) or 0,
        tasks=_int(job, "tasks", 0) or 0,
        current_working_directory=_str(job, "current_working_directory", "/tmp") or "/tmp",
        standard_output=_str(job, "standard_output"),
        standard_error=_str(job, "standard_error"),
        standard_input=_str(job, "standard_input"),
        time_limit=_int(job, "time_limit", None),
        comment=_str(job, "comment"),
        dependency=dependency,
        dependencies=dependencies,
        hold=hold,
        array=_str(job, "array"),
        tres_per_node=_str(job, "tres_per_node"),
        memory_per_node=_int(job, "memory_per_node", None),
        account=_str(job, "account"),
        requeue=requeue,
        warn_signal=warn_signal,
        warn_delay=_int(job, "kill_warning_delay", 60) or 60,
        warn_flags=tuple(warn_flags),
    )
