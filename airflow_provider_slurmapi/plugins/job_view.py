"""What the Slurm job pages show, worked out from a SlurmJob: no Airflow, web or template imports.

* :func:`parse_tag` reads the ``airflow-ti:<dag_id>/<task_id>/<run_id>/<map_index>`` tag the operator
  puts at the start of every job's ``comment`` (see ``api.reattach``), which is how a page knows the
  DAG whose readers may see the job, and where its task instance is;
* :class:`JobView` is one job as the page lays it out: state, timeline, resources, paths, warnings;
* :func:`merge_listing` builds the overview of the tagged jobs of a connection, newest first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.identity import TaskRef, name_identity, parse_tag, split_comment
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.results import Published
from airflow_provider_slurmapi.api.watch import format_duration as watch_duration

_STATE_CLASSES = {
    "COMPLETED": "ok",
    "RUNNING": "running",
    "PENDING": "pending",
    "SUSPENDED": "pending",
    "CANCELLED": "warn",
    "PREEMPTED": "warn",
}


def task_url(ref: TaskRef, ui_root: str = "/") -> str:
    """The task instance in the Airflow 3 UI (the task's overview when the run is unknown)."""
    root = ui_root if ui_root.endswith("/") else ui_root + "/"
    dag, task = quote(ref.dag_id, safe=""), quote(ref.task_id, safe="")
    if ref.run_id is None:
        return f"{root}dags/{dag}/tasks/{task}"
    url = f"{root}dags/{dag}/runs/{quote(ref.run_id, safe='')}/tasks/{task}"
    if ref.map_index is not None and ref.map_index >= 0:
        url += f"/mapped/{ref.map_index}"
    return url


def user_comment(comment: str) -> str:
    """The user's own part of a comment, after the task-instance tag and its try."""
    return split_comment(comment)[2]


def format_duration(value: timedelta | None) -> str:
    """A duration as the page shows it (an em dash when unknown)."""
    return watch_duration(value, unknown="—")


def format_time(value: datetime | None) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


# -- resources --------------------------------------------------------------------------------------

_GPU_KEY = re.compile(r"gres/gpu(?::[^=]+)?")
_GPU_PER_NODE = re.compile(r"gres[/:]gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def parse_tres(text: str) -> list[tuple[str, str]]:
    """``cpu=4,mem=16G,node=1,gres/gpu=8`` as ordered (name, value) pairs."""
    pairs = []
    for item in (text or "").split(","):
        name, sep, value = item.strip().partition("=")
        if name and sep:
            pairs.append((name, value))
    return pairs


def gpu_count(pairs: Iterable[tuple[str, str]]) -> int | None:
    """GPUs in a TRES list: ``gres/gpu`` if given, else the sum of its typed forms (``gres/gpu:h100``)."""
    total: dict[str, int] = {}
    for name, value in pairs:
        if _GPU_KEY.fullmatch(name) and value.isdigit():
            total[name] = total.get(name, 0) + int(value)
    if "gres/gpu" in total:
        return total["gres/gpu"]
    return sum(total.values()) if total else None


def _memory(value: str) -> str:
    return f"{value}M" if value.isdigit() else value


@dataclass(frozen=True)
class Resources:
    """One TRES list for display: the usual ones first, then everything else as Slurm wrote it."""

    cpus: str = ""
    memory: str = ""
    nodes: str = ""
    gpus: int | None = None
    other: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_tres(cls, text: str, *, gpus_fallback: int | None = None) -> Resources:
        pairs = parse_tres(text)
        known = dict(pairs)
        gpus = gpu_count(pairs)
        other = tuple((k, v) for k, v in pairs if k not in {"cpu", "mem", "node"} and not _GPU_KEY.fullmatch(k))
        return cls(
            cpus=known.get("cpu", ""),
            memory=_memory(known.get("mem", "")),
            nodes=known.get("node", ""),
            gpus=gpus if gpus is not None else gpus_fallback,
            other=other,
        )

    @property
    def empty(self) -> bool:
        return not (self.cpus or self.memory or self.nodes or self.gpus is not None or self.other)


def requested_gpus(raw: dict[str, Any], node_count: int | None) -> int | None:
    """GPUs asked for by ``tres_per_node`` (times the nodes) or ``tres_per_job``, when TRES says nothing."""
    per_node = raw.get("tres_per_node")
    if isinstance(per_node, str) and (m := _GPU_PER_NODE.search(per_node)):
        return int(m.group(1)) * (node_count or 1)
    per_job = raw.get("tres_per_job")
    if isinstance(per_job, str) and (m := _GPU_PER_NODE.search(per_job)):
        return int(m.group(1))
    return None


def allocated_gpus(raw: dict[str, Any]) -> int | None:
    """GPUs the queue's ``gres_detail`` names as allocated (``gpu:h100:8(IDX:0-7)``, one entry per node)."""
    detail = raw.get("gres_detail")
    total = None
    for entry in detail if isinstance(detail, list) else ():
        if not isinstance(entry, str):
            continue
        for item in entry.split("(")[0].split(","):
            parts = item.strip().split(":")
            if len(parts) >= 2 and parts[0] == "gpu" and parts[-1].isdigit():
                total = (total or 0) + int(parts[-1])
    return total


# -- the page ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One point of the timeline: Submitted, Started, Ended."""

    label: str
    at: str
    detail: str
    reached: bool


def state_class(job: SlurmJob) -> str:
    """A CSS class for the state badge: ok, running, pending, warn or bad."""
    if job.state.base in _STATE_CLASSES:
        return _STATE_CLASSES[job.state.base]
    return "bad" if job.state.is_terminal or job.state.base != "UNKNOWN" else "pending"


def run_time(job: SlurmJob, now: datetime) -> timedelta | None:
    """How long the job has run (so far, for a running job)."""
    if job.start_time is None or job.state.is_pending:
        return None
    if job.state.is_terminal and job.end_time is not None:
        return max(job.end_time - job.start_time, timedelta(0))
    if job.elapsed is not None and job.source == "slurmdb":
        return job.elapsed
    return max(now - job.start_time, timedelta(0))


def queue_time(job: SlurmJob, now: datetime) -> timedelta | None:
    """How long the job waited (or has waited so far) between submit and start."""
    if job.submit_time is None:
        return None
    if job.state.is_pending or job.start_time is None:
        return max(now - job.submit_time, timedelta(0)) if not job.state.is_terminal else None
    return max(job.start_time - job.submit_time, timedelta(0))


def timeline(job: SlurmJob, now: datetime) -> list[Step]:
    waited, ran = queue_time(job, now), run_time(job, now)
    pending = job.state.is_pending or job.start_time is None
    reason = job.state_reason if job.state_reason and job.state_reason != "None" else ""
    steps = [Step("Submitted", format_time(job.submit_time), "", job.submit_time is not None)]
    if pending:
        detail = ""
        if not job.state.is_terminal:
            detail = f"waiting {format_duration(waited)}" + (f" ({reason})" if reason else "")
        steps.append(Step("Started", "—", detail or "never started", False))
    else:
        steps.append(
            Step("Started", format_time(job.start_time), f"after {format_duration(waited)} in the queue", True)
        )
    if job.state.is_terminal:
        detail = f"ran {format_duration(ran)}" if ran is not None else ""
        steps.append(Step("Ended", format_time(job.end_time), detail, True))
    elif not pending:
        limit = f" of {format_duration(timedelta(minutes=job.time_limit_minutes))}" if job.time_limit_minutes else ""
        steps.append(Step("Ended", "—", f"running for {format_duration(ran)}{limit}", False))
    else:
        steps.append(Step("Ended", "—", "", False))
    return steps


def job_warnings(job: SlurmJob, ref: TaskRef | None, now: datetime) -> list[str]:
    """What a user should notice about this job, in plain words."""
    notes: list[str] = []
    base, reason = job.state.base, job.state_reason if job.state_reason not in ("", "None") else ""
    if job.state.is_pending and reason:
        notes.append(f"Pending: {reason}" + (f" — {job.state_description}" if job.state_description else ""))
    elif job.state_description:
        notes.append(job.state_description)
    if job.state.is_terminal:
        if job.exit_code.signal:
            notes.append(f"The batch script was killed by {job.exit_code}.")
        elif job.exit_code.return_code not in (None, 0):
            notes.append(f"The batch script exited with code {job.exit_code.return_code}.")
        if base == "TIMEOUT":
            notes.append("The job reached its time limit and was stopped.")
        elif base == "CANCELLED":
            by = job.raw.get("kill_request_user")
            notes.append(f"The job was cancelled{f' by {by}' if isinstance(by, str) and by else ''}.")
        elif base == "OUT_OF_MEMORY":
            notes.append("The job ran out of memory.")
        elif base in ("NODE_FAIL", "BOOT_FAIL"):
            notes.append("A node failed under the job: another try may well succeed.")
        elif base == "PREEMPTED":
            notes.append("The job was preempted by a higher-priority job.")
    elif not job.state.is_pending and job.time_limit_minutes and job.start_time is not None:
        ran = run_time(job, now)
        if ran is not None and ran >= timedelta(minutes=job.time_limit_minutes) * 0.9:
            notes.append("The job is close to its time limit.")
    if job.state.flags:
        notes.append(f"State flags: {', '.join(sorted(job.state.flags))}.")
    if job.restart_count:
        notes.append(f"The job was requeued {job.restart_count} time(s).")
    if ref is None:
        notes.append("This job carries no Airflow task-instance tag: it was not submitted by this provider's operator.")
    elif ref.run_id is None:
        notes.append("The task-instance tag is in its hashed (long) form: the DAG run cannot be told from it.")
    if job.source == "none":
        notes.append("Slurm has not recorded this job yet.")
    return notes


@dataclass(frozen=True)
class JobView:
    """One job laid out for its page."""

    job: SlurmJob
    ref: TaskRef | None
    state: str
    state_class: str
    reason: str
    live: bool
    steps: list[Step]
    queued: str
    ran: str
    exit_code: str
    requested: Resources
    allocated: Resources
    warnings: list[str]
    comment: str
    raw_json: str
    source_label: str
    extra_rows: list[tuple[str, str]] = field(default_factory=list)
    # What the job published at its end (api/results.py): its result and the tails of its output, as the
    # task's log showed them (masked); None while the task has not recorded it (``published_hidden``).
    published: Published | None = None
    published_hidden: bool = False
    comment_hidden: bool = False

    @classmethod
    def build(
        cls,
        job: SlurmJob,
        *,
        now: datetime | None = None,
        queue_record: SlurmJob | None = None,
        recorded: Any = None,
    ) -> JobView:
        """``queue_record``: the active queue's record of a job shown from accounting (for what only it says).
        ``recorded``: what the task that submitted the job recorded for this page (XCom
        ``slurm_published``): the page shows the job's comment and publication only as that task's log
        showed them, masked, and hides them while the task has recorded nothing about them."""
        now = now or datetime.now(tz=timezone.utc)
        publication = job.published or (queue_record.published if queue_record is not None else None)
        published = results.shown_publication(publication, recorded, job.display_id)
        own_comment = user_comment(job.comment)
        comment = results.shown_comment(own_comment, recorded) if own_comment else ""
        ref = parse_tag(job.comment)
        reason = job.state_reason if job.state_reason not in ("", "None") else ""
        exit_code = str(job.exit_code) if job.state.is_terminal or job.exit_code.signal else "—"
        if exit_code == "unknown":
            exit_code = "—"
        req_gpus = requested_gpus(job.raw, job.node_count)
        if req_gpus is None and queue_record is not None:
            queue_gpus = Resources.from_tres(queue_record.tres_requested).gpus
            req_gpus = (
                queue_gpus if queue_gpus is not None else requested_gpus(queue_record.raw, queue_record.node_count)
            )
        extra: list[tuple[str, str]] = []
        for label, value in (
            ("User", job.user),
            ("Account", job.account),
            ("Working directory", job.working_directory),
            (
                "Time limit",
                format_duration(timedelta(minutes=job.time_limit_minutes)) if job.time_limit_minutes else "",
            ),
            ("Array", f"{job.array_job_id}_{job.array_task_id}" if job.array_job_id else ""),
            ("Heterogeneous job", f"{job.het_job_id}+{job.het_job_offset}" if job.het_job_id else ""),
        ):
            if value:
                extra.append((label, value))
        return cls(
            job=job,
            ref=ref,
            state=str(job.state),
            state_class=state_class(job),
            reason=reason,
            live=not job.state.is_terminal,
            steps=timeline(job, now),
            queued=format_duration(queue_time(job, now)),
            ran=format_duration(run_time(job, now)),
            exit_code=exit_code,
            requested=Resources.from_tres(job.tres_requested, gpus_fallback=req_gpus),
            allocated=Resources.from_tres(job.tres_allocated, gpus_fallback=_allocated_gpus(job, req_gpus)),
            warnings=job_warnings(job, ref, now),
            comment=comment or "",
            raw_json=json.dumps(_shown_raw(job, comment), indent=2, sort_keys=True, default=str),
            source_label={
                "slurm": "the active queue (/slurm)",
                "slurmdb": "accounting (/slurmdb)",
            }.get(job.source, "nowhere yet"),
            extra_rows=extra,
            published=published,
            published_hidden=publication is not None and published is None,
            comment_hidden=comment is None,
        )


def _shown_raw(job: SlurmJob, comment: str | None) -> dict[str, Any]:
    """The raw record, with its comment as the page shows it: the tag, the user's comment as the task's log
    showed it (or a note that it is hidden) and, in place of what the job published, a pointer to it; and
    without the batch script accounting may keep."""
    raw = dict(job.raw)
    tag, try_number, _ = split_comment(job.comment)
    parts = [tag or "", f"try:{try_number}" if try_number else ""]
    parts.append(comment if comment is not None else "(the comment: hidden until its task has read the job)")
    if results.split(job.comment)[1] is not None:
        parts.append("(what the job published: see Output)")
    shown = " ".join(part for part in parts if part)
    if isinstance(raw.get("comment"), dict):
        raw["comment"] = {**raw["comment"], "job": shown}
    elif "comment" in raw:
        raw["comment"] = shown
    # Accounting keeps the batch script with AccountingStoreFlags=job_script: the rendered script, which
    # Airflow masks in the task's rendered fields, is never shown here.
    if isinstance(raw.get("script"), str) and raw["script"]:
        raw["script"] = "(the batch script, kept by accounting: not shown; see the task's Rendered Template)"
    return raw


def _allocated_gpus(job: SlurmJob, requested: int | None) -> int | None:
    """GPUs of a started job whose allocated TRES leaves them out (a cluster that does not account
    ``gres/gpu``): the queue's ``gres_detail``, else what it asked for (Slurm starts a job only with its
    whole GRES request)."""
    if job.start_time is None or job.state.is_pending:
        return None
    found = allocated_gpus(job.raw)
    return found if found is not None else requested


# -- the overview -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedJob:
    """One row of the overview."""

    job: SlurmJob
    ref: TaskRef | None  # None: accounting's record of a job whose tag was not kept
    state: str
    state_class: str
    submitted: str
    duration: str
    exit_code: str


def merge_listing(active: Iterable[SlurmJob], accounted: Iterable[SlurmJob]) -> list[tuple[SlurmJob, TaskRef | None]]:
    """This Airflow's jobs of both sources, one per id (the queue's record while the job is active,
    accounting's once it has ended), newest first, each with the task its tag names.

    Slurm's accounting keeps no comment by default (``AccountingStoreFlags``), so an ended job's tag
    is taken from the queue's record while the queue still has it; a job known only to accounting is
    recognised by the task identity its name ends with, and comes without a tag (``None``).
    """
    by_id: dict[str, SlurmJob] = {}
    refs: dict[str, TaskRef] = {}
    for job in accounted:
        by_id[job.display_id] = job
    for job in active:
        known = by_id.get(job.display_id)
        if known is None or not job.state.is_terminal or not known.state.is_terminal:
            by_id[job.display_id] = job
        if (ref := parse_tag(job.comment)) is not None:
            refs[job.display_id] = ref
    rows: list[tuple[SlurmJob, TaskRef | None]] = []
    for key, job in by_id.items():
        ref = parse_tag(job.comment) or refs.get(key)
        if ref is not None or name_identity(job.name or "") is not None:
            rows.append((job, ref))
    epoch = datetime.fromtimestamp(0, tz=timezone.utc)
    rows.sort(key=lambda r: (r[0].submit_time or epoch, r[0].job_id, r[0].array_task_id or 0), reverse=True)
    return rows


def listed(job: SlurmJob, ref: TaskRef | None, *, now: datetime | None = None) -> ListedJob:
    now = now or datetime.now(tz=timezone.utc)
    exit_code = str(job.exit_code) if job.state.is_terminal else ""
    return ListedJob(
        job=job,
        ref=ref,
        state=str(job.state),
        state_class=state_class(job),
        submitted=format_time(job.submit_time),
        duration=format_duration(run_time(job, now)),
        exit_code="" if exit_code == "unknown" else exit_code,
    )
