"""What a job used, from the record the wait already read (no extra call): how long it ran and waited, and
its node-, CPU- and GPU-hours from the resources Slurm allocated it (its TRES), summed over an array's tasks.

The allocation is ``tres_alloc_str`` in the active queue's record (``cpu=8,mem=64G,node=2,billing=8,
gres/gpu=16``) and ``tres.allocated`` in accounting's; the hours are the allocation times the elapsed time,
as Slurm's own ``sacct --format=CPUTime`` counts them. ``max_rss_bytes`` is the largest ``mem`` in the
accounting record's steps' ``tres.requested.max``, present only on clusters that gather it
(``JobAcctGatherType``). No Airflow imports; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_slurmapi.api.jobs import SlurmJob


@dataclass(frozen=True)
class Usage:
    """One job's (or an array's) use of the cluster. Hours are rounded to 1/10,000."""

    elapsed_seconds: int
    queue_wait_seconds: int | None
    nodes: int
    cpus: int
    gpus: int
    node_hours: float
    cpu_hours: float
    gpu_hours: float
    max_rss_bytes: int | None = None
    tasks: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """``2 nodes, 16 CPUs, 8 GPUs for 1h02m (queued 0m40s): 2.07 node-hours, 16.5 CPU-hours, 8.27
        GPU-hours; max RSS 3.2 GiB``."""
        from airflow_provider_slurmapi.api.watch import format_duration

        head = f"{self.tasks} tasks, " if self.tasks > 1 else ""
        text = f"{head}{self.nodes} node{'s' * (self.nodes != 1)}, {self.cpus} CPU{'s' * (self.cpus != 1)}"
        if self.gpus:
            text += f", {self.gpus} GPU{'s' * (self.gpus != 1)}"
        text += f" for {format_duration(self.elapsed_seconds)}"
        if self.queue_wait_seconds is not None:
            text += f" (queued {format_duration(self.queue_wait_seconds)})"
        text += f": {_hours(self.node_hours)} node-hours, {_hours(self.cpu_hours)} CPU-hours"
        if self.gpus:
            text += f", {_hours(self.gpu_hours)} GPU-hours"
        if self.max_rss_bytes is not None:
            text += f"; max RSS {_size(self.max_rss_bytes)}"
        return text


# Past these, a record does not describe a real job (a hundred years; a billion CPUs): it has no usage.
_MOST_SECONDS = 100 * 365 * 86400
_MOST_COUNT = 10**9


def _hours(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _size(value: int) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def allocated(tres: str) -> dict[str, int]:
    """``{"cpu": 8, "node": 2, "gpu": 16}`` from a TRES string (``cpu=8,mem=64G,node=2,gres/gpu=16``). GPUs:
    the untyped ``gres/gpu`` count, else the sum of the typed ones (``gres/gpu:a100=8``)."""
    counts: dict[str, int] = {}
    typed_gpus = 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if key in ("cpu", "node"):
            counts[key] = int(value)
        elif key == "gres/gpu":
            counts["gpu"] = int(value)
        elif key.startswith("gres/gpu:"):
            typed_gpus += int(value)
    counts.setdefault("gpu", typed_gpus)
    return counts


def max_rss(record: Mapping[str, Any]) -> int | None:
    """The largest ``mem`` of the steps' ``tres.requested.max`` in an accounting record (bytes); None when no
    step has one (the cluster gathers no step statistics, or the record is the queue's)."""
    found: int | None = None
    steps = record.get("steps")
    for step in steps if isinstance(steps, list) else ():
        tres = step.get("tres") if isinstance(step, Mapping) else None
        requested = tres.get("requested") if isinstance(tres, Mapping) else None
        most = requested.get("max") if isinstance(requested, Mapping) else None
        for item in most if isinstance(most, list) else ():
            if not isinstance(item, Mapping):
                continue
            count = item.get("count")
            if item.get("type") == "mem" and isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                found = count if found is None else max(found, count)
    return found


def of_job(job: SlurmJob) -> Usage | None:
    """What one job (or one array task) used; None before it started or when its run time is unknown."""
    if job.start_time is None or job.elapsed is None:
        return None
    seconds = max(0, int(job.elapsed.total_seconds()))
    counts = allocated(job.tres_allocated)
    nodes = counts.get("node", job.node_count or 0)
    cpus, gpus = counts.get("cpu", 0), counts.get("gpu", 0)
    if seconds > _MOST_SECONDS or max(nodes, cpus, gpus) > _MOST_COUNT:
        return None  # not a record of a real job: no figures made up from it
    wait = None
    if job.submit_time is not None:
        wait = max(0, int((job.start_time - job.submit_time).total_seconds()))
    return Usage(
        elapsed_seconds=seconds,
        queue_wait_seconds=wait,
        nodes=nodes,
        cpus=cpus,
        gpus=gpus,
        node_hours=round(nodes * seconds / 3600, 4),
        cpu_hours=round(cpus * seconds / 3600, 4),
        gpu_hours=round(gpus * seconds / 3600, 4),
        max_rss_bytes=max_rss(job.raw) if isinstance(job.raw, Mapping) else None,
    )


def summed(parts: Iterable[Usage], elapsed_seconds: int | None = None) -> Usage | None:
    """An array's usage: its tasks' hours summed, the largest allocation and RSS, the longest run (or the
    array's ``elapsed_seconds``) and the shortest queue wait."""
    items = list(parts)
    if not items:
        return None
    waits = [u.queue_wait_seconds for u in items if u.queue_wait_seconds is not None]
    rss = [u.max_rss_bytes for u in items if u.max_rss_bytes is not None]
    return Usage(
        elapsed_seconds=elapsed_seconds if elapsed_seconds is not None else max(u.elapsed_seconds for u in items),
        queue_wait_seconds=min(waits) if waits else None,
        nodes=max(u.nodes for u in items),
        cpus=max(u.cpus for u in items),
        gpus=max(u.gpus for u in items),
        node_hours=round(sum(u.node_hours for u in items), 4),
        cpu_hours=round(sum(u.cpu_hours for u in items), 4),
        gpu_hours=round(sum(u.gpu_hours for u in items), 4),
        max_rss_bytes=max(rss) if rss else None,
        tasks=sum(u.tasks for u in items),
    )
