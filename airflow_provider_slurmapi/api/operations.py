"""Every API operation, written once as a sans-IO generator that yields Calls and receives SlurmReplies.

A client drives an operation with ``send``: the sync client does the I/O with requests, the async
client with httpx, and both share every line of request building, reply reading and error mapping::

    op = get_job("v0.0.42", 123)
    call = next(op)
    while True:
        reply = do_the_io(call)
        try:
            call = op.send(reply)
        except StopIteration as done:
            return done.value
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from airflow_provider_slurmapi.api import usage, versions
from airflow_provider_slurmapi.api.envelope import Call, SlurmReply, slurm_error
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    MalformedReplyError,
    SlurmApiError,
    SlurmJobApiError,
    SlurmJobNotFoundError,
    SlurmMessage,
    format_messages,
)
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob, array_tasks, latest_runs, merge_task_records
from airflow_provider_slurmapi.api.shapes import obj, seq
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.states import JobState

T = TypeVar("T")
Operation = Generator[Call, SlurmReply, T]

ERR_INVALID_JOB_ID = 2017
# Ids per batched call (``jobs/state``, accounting's ``step`` filter): keeps URLs short.
CHUNK = 500
ERR_ALREADY_DONE = 2021


@dataclass
class Submitted:
    """A job accepted by Slurm, with the warnings it gave (ignored fields, changed values)."""

    job_id: int
    warnings: list[SlurmMessage] = field(default_factory=list)
    user_message: str = ""


@dataclass
class Cancelled:
    """The outcome of a cancel: ``already_finished`` when Slurm said there was nothing left to stop."""

    job_id: int
    already_finished: bool = False
    warnings: list[SlurmMessage] = field(default_factory=list)


@dataclass
class Ping:
    """Slurm's answer to a ping: its release and whether every controller responds."""

    release: str
    cluster: str
    responding: bool
    data_parser: str = ""


def raw_call(method: str, path: str, body: Mapping[str, Any] | None = None) -> Operation[SlurmReply]:
    """Any Slurm REST call, returning the reply as it came (nothing raised for Slurm-level errors)."""
    return (yield Call(method.upper().removeprefix("HTTP_METHOD_"), path, body))


def submit_call(version: str, spec: JobSpec) -> Call:
    """The ``job/submit`` call that sends ``spec``."""
    return Call("POST", versions.submit_path(version), spec.body())


def submit_job(version: str, spec: JobSpec) -> Operation[Submitted]:
    reply = yield submit_call(version, spec)
    reply.raise_for_errors("submit the job")
    job_id = reply.body.get("job_id")
    if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
        raise SlurmApiError(
            f"Slurm accepted the submit but its reply has no job id (job_id={job_id!r}); look for the job "
            "with list_jobs() before submitting again.",
            http_status=reply.status,
            warnings=reply.warnings,
        )
    return Submitted(job_id, reply.warnings, str(reply.body.get("job_submit_user_msg") or ""))


def get_active_job(version: str, job_id: object) -> Operation[SlurmJob | None]:
    """The job from the active queue, or None once it has left it (HTTP 404 / error 2017)."""
    reply = yield Call("GET", versions.job_path(version, job_id))
    return _pick_job(_active_jobs(reply, job_id, version), job_id)


def get_accounted_job(version: str, job_id: object) -> Operation[SlurmJob | None]:
    """The job from accounting (/slurmdb), or None when it holds no record of it (yet)."""
    return _pick_job((yield from _accounted_jobs(version, job_id)), job_id)


def get_job(version: str, job_id: object, *, recently_submitted: bool = False) -> Operation[SlurmJob]:
    """The active queue first; once the job has left it, accounting.

    An array's id gives the whole array (a :class:`SlurmArrayJob`): its tasks from the active queue,
    and, once every task there has ended, from accounting too (tasks that already left the queue).

    ``recently_submitted``: the caller knows the job exists, so an empty answer from both places means
    "not recorded yet" (a pending placeholder is returned) rather than "gone".
    """
    reply = yield Call("GET", versions.job_path(version, job_id))
    active = _active_jobs(reply, job_id, version)
    tasks = array_tasks(job_id, active)
    if active and tasks is None:
        return _choose(active, job_id)
    if tasks and not all(t.state.is_terminal for t in tasks):
        return SlurmArrayJob.of(int(str(job_id)), tasks)
    accounted = yield from _accounted_jobs(version, job_id)
    if tasks:
        # Every task in the queue has ended: accounting also has those that already left it.
        return SlurmArrayJob.of(int(str(job_id)), merge_task_records(array_tasks(job_id, accounted) or [], tasks))
    if accounted:
        tasks = array_tasks(job_id, accounted)
        return SlurmArrayJob.of(int(str(job_id)), tasks) if tasks else _choose(accounted, job_id)
    if recently_submitted:
        return SlurmJob(
            job_id=int(str(job_id).split("_")[0]),
            name="",
            state=JobState("PENDING"),
            state_reason="NotYetRecorded",
            source="none",
        )
    raise SlurmJobNotFoundError(
        f"Slurm job {job_id} is neither in the active queue nor in accounting (slurmdb): check the job id "
        "and the connection's cluster, or whether accounting keeps jobs this old.",
        http_status=404,
    )


def _active_jobs(reply: SlurmReply, job_id: object, version: str) -> list[SlurmJob]:
    """The records of a ``/slurm/{v}/job/{id}`` reply; none once the job has left the queue."""
    if reply.status == 404 or any(e.error_number == ERR_INVALID_JOB_ID for e in reply.errors):
        return []
    reply.raise_for_errors(f"read job {job_id}")
    return [SlurmJob.from_job_info(r, version) for r in records(reply)]


def _accounted_jobs(version: str, job_id: object, *, best_effort: bool = False) -> Operation[list[SlurmJob]]:
    """Accounting's records of a job (of each task of an array): of a requeued job, its latest run's.
    ``best_effort``: one try, no retry (see ``Call``)."""
    reply = yield Call("GET", versions.slurmdb_job_path(version, job_id), best_effort=best_effort)
    reply.raise_for_errors(f"read job {job_id} from accounting (slurmdbd)")
    return latest_runs(SlurmJob.from_slurmdb(r, version) for r in records(reply))


def peak_memory(version: str, job_id: object, starts: frozenset[datetime]) -> Operation[tuple[bool, int | None]]:
    """From accounting's step records, the peak resident memory (bytes) of the runs of ``job_id`` (of an array,
    its tasks) that started at ``starts``, the runs a wait saw end in the active queue, which holds no step
    statistics: whether accounting has recorded every one's end yet, and the largest peak (None: no step
    has one). Records of other runs or of an earlier job with the same id are left out. One try: the figure
    is not worth a task's delay while slurmdbd is down."""
    accounted = yield from _accounted_jobs(version, job_id, best_effort=True)
    runs = [job for job in accounted if job.start_time in starts]
    recorded = len(runs) >= len(starts) and all(job.state.is_terminal for job in runs)
    peaks = [peak for job in runs if (peak := usage.max_rss(job.raw)) is not None]
    return recorded, max(peaks, default=None)


def get_jobs(version: str, job_id: object) -> Operation[list[SlurmJob]]:
    """Every record of a job id: for an array job, one per task (active queue, else accounting)."""
    reply = yield Call("GET", versions.job_path(version, job_id))
    active = _active_jobs(reply, job_id, version)
    return active or (yield from _accounted_jobs(version, job_id))


def list_jobs(version: str) -> Operation[list[SlurmJob]]:
    reply = yield Call("GET", versions.jobs_path(version))
    reply.raise_for_errors("list jobs")
    return [SlurmJob.from_job_info(r, version) for r in records(reply)]


def list_accounted_jobs(version: str, **filters: str) -> Operation[list[SlurmJob]]:
    """Accounting's jobs matching ``filters``: one record per job, of a requeued job its latest run's."""
    reply = yield Call("GET", versions.slurmdb_jobs_path(version, **filters))
    reply.raise_for_errors("list jobs from accounting (slurmdbd)")
    return latest_runs(SlurmJob.from_slurmdb(r, version) for r in records(reply))


def job_states(version: str, job_ids: Iterable[object]) -> Operation[dict[str, JobState]]:
    """States of many active jobs in one call; ids not in the active queue are absent."""
    reply = yield Call("GET", versions.jobs_state_path(version, job_ids))
    reply.raise_for_errors("read job states")
    states: dict[str, JobState] = {}
    for entry in records(reply):
        job_id = entry.get("job_id")
        if isinstance(job_id, dict):
            job_id = job_id.get("number")
        if job_id is not None:
            states[str(job_id)] = JobState.parse(entry.get("state", entry.get("job_state")))
    return states


def states_in_queue(version: str, job_ids: list[str]) -> Operation[dict[str, JobState]]:
    """States of the jobs still in the active queue, in chunks of :data:`CHUNK` ids."""
    states: dict[str, JobState] = {}
    for start in range(0, len(job_ids), CHUNK):
        states.update((yield from job_states(version, job_ids[start : start + CHUNK])))
    return states


def accounted_jobs(version: str, job_ids: list[str]) -> Operation[tuple[dict[str, SlurmJob], set[str]]]:
    """Accounting's records of many jobs, batched with slurmdb's ``step`` filter.

    Returns the plain jobs by id (of a requeued job, its latest run), and the ids that turned out to be
    arrays (their tasks' records).
    """
    jobs: dict[str, SlurmJob] = {}
    arrays: set[str] = set()
    for start in range(0, len(job_ids), CHUNK):
        chunk = job_ids[start : start + CHUNK]
        reply = yield Call("GET", versions.slurmdb_jobs_path(version, step=chunk))
        reply.raise_for_errors("read finished jobs from accounting (slurmdbd)")
        for job in latest_runs(SlurmJob.from_slurmdb(record, version) for record in records(reply)):
            if job.array_job_id:
                arrays.add(str(job.array_job_id))
            else:
                jobs[str(job.job_id)] = job
    return jobs, arrays & set(job_ids)


def queued_jobs(version: str, job_ids: list[str]) -> Operation[dict[str, SlurmJob]]:
    """The active queue's records of jobs that ended there (with the comment the job published, which
    accounting has only with ``AccountingStoreFlags=job_comment`` or the wrapper's ``sacctmgr`` copy): one
    ``GET`` of the job for one id,
    one ``GET`` of the whole queue for more, however many ended at once."""
    if len(job_ids) == 1:
        job = yield from get_active_job(version, job_ids[0])
        return {job_ids[0]: job} if job is not None else {}
    wanted = frozenset(job_ids)
    # Only the wanted records are decoded (``only_jobs``) and parsed: the whole queue may hold thousands.
    reply = yield Call("GET", versions.jobs_path(version), only_jobs=wanted)
    reply.raise_for_errors("list jobs")
    return {
        str(record.get("job_id")): SlurmJob.from_job_info(record, version)
        for record in records(reply)
        if str(record.get("job_id")) in wanted
    }


def cancel_job(version: str, job_id: object) -> Operation[Cancelled]:
    """Ask Slurm to cancel; a job that has already finished counts as success."""
    reply = yield Call("DELETE", versions.job_path(version, job_id))
    reply.raise_for_errors(f"cancel job {job_id}")
    numeric = int(str(job_id).split("_")[0])
    problems = _status_errors(reply)
    codes = {code for code, _ in problems}
    if not problems:
        return Cancelled(numeric, warnings=reply.warnings)
    if codes <= {ERR_ALREADY_DONE}:
        return Cancelled(numeric, already_finished=True, warnings=reply.warnings)
    if ERR_INVALID_JOB_ID in codes:
        # The active queue has forgotten it: if accounting knows it, it has finished.
        job = yield from get_accounted_job(version, job_id)
        if job is not None:
            return Cancelled(numeric, already_finished=True, warnings=reply.warnings)
        raise SlurmJobNotFoundError(
            f"Slurm could not cancel job {job_id}: {format_messages(m for _, m in problems)}. The job is "
            "unknown to the cluster; check the job id and the connection's cluster.",
            http_status=reply.status,
            errors=[m for _, m in problems],
        )
    raise slurm_error(
        SlurmReply(reply.status, reply.body, [m for _, m in problems], reply.warnings), f"cancel job {job_id}"
    )


def ping(version: str) -> Operation[Ping]:
    reply = yield Call("GET", versions.ping_path(version))
    reply.raise_for_errors("ping the Slurm controller")
    meta = obj(reply.body.get("meta"))
    slurm = obj(meta.get("slurm"))
    plugin = obj(meta.get("plugin"))
    pings = seq(reply.body.get("pings"))
    responding = bool(pings) and all(isinstance(p, Mapping) and p.get("responding", True) for p in pings)
    return Ping(
        release=str(slurm.get("release") or "unknown"),
        cluster=str(slurm.get("cluster") or ""),
        responding=responding,
        data_parser=str(plugin.get("data_parser") or ""),
    )


def serves(version: str) -> Operation[bool]:
    """Whether the cluster serves REST ``version``: its ping answers (Google 400/404 or slurmrestd's text 404: no)."""
    try:
        reply = yield Call("GET", versions.ping_path(version))
    except GoogleApiError as err:
        if err.code in (400, 404):
            return False
        raise
    return 200 <= reply.status < 300


def detect_version() -> Operation[str]:
    """The newest API version the cluster answers a ping on."""
    for version in reversed(versions.SUPPORTED_VERSIONS):
        if (yield from serves(version)):
            return version
    raise SlurmJobApiError(
        f"api_version auto: the cluster answered no Slurm REST version in {versions.SUPPORTED_VERSIONS}. "
        "Set api_version explicitly in the connection."
    )


def served_versions() -> Operation[list[str]]:
    """The versions this provider knows that the cluster serves, oldest first (one ping each)."""
    served = []
    for version in versions.SUPPORTED_VERSIONS:
        if (yield from serves(version)):
            served.append(version)
    return served


def unserved_path(call: Call, reply: SlurmReply | None, error: Exception | None) -> str | None:
    """The REST version ``call`` named if its answer says the path is not routed: slurmrestd's plain-text
    404 ("Unable to find requested URL"), or Google's 400 INVALID_ARGUMENT (its 404 names a missing
    cluster); else None."""
    version = versions.version_of(call.path)
    if version is None:
        return None
    if reply is not None:
        return version if reply.status == 404 and set(reply.body) == {"_text"} else None
    return version if isinstance(error, GoogleApiError) and error.code == 400 else None


def records(reply: SlurmReply) -> list[Mapping[str, Any]]:
    jobs = reply.body.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmApiError(
            f"Slurm's reply has no jobs list (HTTP {reply.status}, keys {sorted(reply.body)[:8]}); the "
            "cluster may speak another API version: set api_version in the connection.",
            http_status=reply.status,
            warnings=reply.warnings,
        )
    return [j for j in jobs if isinstance(j, dict)]  # a JSON object is a dict (cheaper than the Mapping ABC)


def _pick_job(jobs: list[SlurmJob], job_id: object) -> SlurmJob | None:
    return _choose(jobs, job_id) if jobs else None


def _choose(jobs: list[SlurmJob], job_id: object) -> SlurmJob:
    """The record ``job_id`` names among ``jobs`` (``12_3`` picks that task). A reply that holds no record
    of that job is not Slurm's answer about it (a proxy's mix-up, a hostile reply): it is refused, never
    read as the job asked about."""
    wanted = versions.canonical_job_id(job_id)
    for job in jobs:
        if job.display_id == wanted or (str(job.job_id) == wanted and job.array_task_id is None):
            return job
    held = ", ".join(sorted({job.display_id for job in jobs})[:5])
    raise MalformedReplyError(
        f"the reply about Slurm job {wanted} holds no record of it (it holds job {held}): it is not Slurm's "
        "answer to that call; a proxy between the provider and slurmrestd may have mixed up replies"
    )


def _status_errors(reply: SlurmReply) -> list[tuple[int | None, SlurmMessage]]:
    found = []
    for entry in reply.body.get("status") or []:
        error = entry.get("error") if isinstance(entry, Mapping) else None
        if isinstance(error, Mapping) and error.get("code"):
            code = error.get("code") if isinstance(error.get("code"), int) else None
            text = str(error.get("message") or error.get("string") or "")
            found.append((code, SlurmMessage(description=text, error=text, error_number=code)))
    return found
