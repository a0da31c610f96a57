"""Which Slurm jobs have ended since a watcher last looked: the filter and the watermark, sans I/O.

Used by :class:`~airflow_provider_slurmapi.triggers.events.SlurmJobEventTrigger`. One accounting call
per cluster per interval (``GET /slurmdb/{v}/jobs/?start_time=T&skip_steps``) lists every job that ran
or ended since ``T`` (measured on real slurmrestd 24.11: ``start_time`` selects jobs whose end is at or
after ``T``, or that have not ended); each watcher keeps the ones its :class:`EndedJobFilter` matches
and that its :class:`Watermark` has not fired yet.

slurmctld hands a job's end to slurmdbd asynchronously, so a job that ended at ``t`` may show up in
accounting a little later than one that ended after it. The watermark therefore keeps a job in view for
``settle`` seconds after its end: anything that ended at or after ``after`` and is not in ``fired`` is
new, and ``after`` moves to ``polled_at - settle`` after each poll. Slurm's times are whole seconds, so
``after`` is too: a job that ends in the very second a watcher starts is its own. What it stores
between triggerer restarts is small: ``after`` and the keys of the jobs fired within the settle window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.states import TERMINAL_STATES

# How long after its end a job may still arrive in accounting and fire (slurmdbd's lag, clock skew).
DEFAULT_SETTLE = 300.0


@dataclass(frozen=True)
class EndedJobFilter:
    """Which ended jobs a watcher fires for; every given field must match (empty = any).

    :param users: Slurm user names.
    :param names: exact job names.
    :param name_prefix: a prefix of the job's name (e.g. ``"train-"``).
    :param partitions: partition names.
    :param states: end states (base states such as ``COMPLETED``, ``FAILED``, ``TIMEOUT``); default any.
    """

    users: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    name_prefix: str = ""
    partitions: tuple[str, ...] = ()
    states: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        *,
        users: str | Sequence[str] | None = None,
        names: str | Sequence[str] | None = None,
        name_prefix: str | None = None,
        partitions: str | Sequence[str] | None = None,
        states: str | Sequence[str] | None = None,
    ) -> EndedJobFilter:
        """Checked and normalised: a single string stands for a one-item list; states are upper case."""
        wanted_states = tuple(s.strip().upper() for s in _names(states, "states"))
        unknown = sorted(set(wanted_states) - set(TERMINAL_STATES))
        if unknown:
            raise SlurmJobSpecError(
                "states",
                f"names {', '.join(unknown)}, which are not states a job ends in",
                f"Use some of {', '.join(sorted(TERMINAL_STATES))}.",
            )
        if name_prefix is not None and not isinstance(name_prefix, str):
            raise SlurmJobSpecError(
                "name_prefix", f"is {name_prefix!r}", "Give the start of the job names, e.g. 'train-'."
            )
        return cls(
            users=_names(users, "users"),
            names=_names(names, "names"),
            name_prefix=name_prefix or "",
            partitions=_names(partitions, "partitions"),
            states=wanted_states,
        )

    def matches(self, job: SlurmJob) -> bool:
        """True for an ended job this filter selects."""
        if not job.state.is_terminal or job.end_time is None:
            return False
        return (
            (not self.users or job.user in self.users)
            and (not self.names or job.name in self.names)
            and job.name.startswith(self.name_prefix)
            and (not self.partitions or job.partition in self.partitions)
            and (not self.states or job.state.base in self.states)
        )

    def digest(self) -> str:
        """A short stable name for this filter (where a watcher keeps its watermark)."""
        text = json.dumps([self.users, self.names, self.name_prefix, self.partitions, self.states])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def _names(value: str | Sequence[str] | None, field_name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (str, list, tuple, set, frozenset)):
        raise SlurmJobSpecError(field_name, f"is {value!r}", "Give a name or a list of non-empty names.")
    items = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(item, str) and item.strip() for item in items):
        raise SlurmJobSpecError(field_name, f"is {value!r}", "Give a name or a list of non-empty names.")
    return tuple(item.strip() for item in items)


def ahead_of(jobs: Iterable[SlurmJob], now: float) -> float:
    """How many seconds the latest end among ``jobs`` lies after ``now`` (0 when none does): a cluster
    whose clock runs ahead of the watcher's."""
    ends = [job.end_time.timestamp() for job in jobs if job.state.is_terminal and job.end_time is not None]
    return max([0.0, *(end - now for end in ends)])


def job_key(job: SlurmJob) -> str:
    """``<id>:<end epoch>``: one ended job (a reused job id ends at another time)."""
    end = int(job.end_time.timestamp()) if job.end_time else 0
    return f"{job.display_id}:{end}"


@dataclass
class Watermark:
    """Where a watcher stopped: jobs that ended at or after ``after`` (epoch seconds) and whose key is not
    in ``fired`` are new."""

    after: int
    fired: dict[str, float] = field(default_factory=dict)  # job key -> end epoch

    def new_jobs(self, jobs: Iterable[SlurmJob], wanted: EndedJobFilter) -> list[SlurmJob]:
        """The jobs to fire for, oldest end first; they are marked fired."""
        fresh = []
        for job in jobs:
            if not wanted.matches(job) or job.end_time is None:
                continue
            end = job.end_time.timestamp()
            key = job_key(job)
            if end >= self.after and key not in self.fired:
                self.fired[key] = end
                fresh.append(job)
        return sorted(fresh, key=lambda job: (job.end_time.timestamp() if job.end_time else 0, job.job_id))

    def arrived_late(self, jobs: Iterable[SlurmJob], wanted: EndedJobFilter, seen: set[str]) -> list[SlurmJob]:
        """Matching jobs that ended before ``after`` and that the previous poll (whose job keys are
        ``seen``) did not list: accounting listed them more than ``settle`` seconds after their end
        (slurmdbd's lag, or the watcher's clock ahead of the cluster's), too late to fire."""
        return [
            job
            for job in jobs
            if wanted.matches(job)
            and job.end_time is not None
            and job.end_time.timestamp() < self.after
            and job_key(job) not in seen
            and job_key(job) not in self.fired
        ]

    def advance(self, polled_at: float, settle: float = DEFAULT_SETTLE) -> None:
        """After a poll at ``polled_at``: forget what ended more than ``settle`` seconds before it."""
        self.after = max(self.after, int(polled_at - settle))
        self.fired = {key: end for key, end in self.fired.items() if end >= self.after}

    def as_dict(self) -> dict[str, Any]:
        return {"after": self.after, "fired": dict(self.fired)}

    @classmethod
    def from_dict(cls, data: Any) -> Watermark | None:
        """What :meth:`as_dict` stored, or None for anything else (a watcher then starts afresh)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("after"), (int, float)):
            return None
        fired = data.get("fired")
        if not isinstance(fired, Mapping):
            fired = {}
        return cls(int(data["after"]), {str(k): float(v) for k, v in fired.items() if isinstance(v, (int, float))})

    @classmethod
    def starting(cls, now: float) -> Watermark:
        """A watcher that starts at ``now``: jobs that end from this second on are its own."""
        return cls(int(now))
