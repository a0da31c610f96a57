"""A job's whole output on its page, as its task's log shows it: live while it runs, paged once it ended.

With staging (:doc:`staging`), a task logs each line its job prints (``[42 stdout] …``), from the worker's
wait or the trigger, masked as every line of a task log is. The page reads those lines back through
Airflow's own task-log reader, the one the API's log route uses (the worker's and triggerer's files, their
log servers, remote logging): so it shows exactly what the task log shows, masked by the process that knew
the secrets, and the API server needs no access to the bucket. Reading a log is the task-log permission's
business: only users the auth manager lets read the DAG's task logs see it.

Imported only by the API server (through the plugin).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow.models.taskinstance import TaskInstance
from airflow.models.taskinstancehistory import TaskInstanceHistory
from airflow.utils.session import create_session

from airflow_provider_slurmapi.api.identity import TaskRef
from airflow_provider_slurmapi.api.storage import LOGGED_LINE

log = logging.getLogger(__name__)

# Lines per page of the full output, and of the live tail on the job's page.
PAGE_LINES = 500
TAIL_LINES = 50


@dataclass(frozen=True)
class LoggedOutput:
    """The lines of a job's output that one try of its task logged, in the order it logged them."""

    try_number: int
    lines: list[tuple[str, str]]  # (stream, text)

    @property
    def pages(self) -> int:
        return max(1, -(-len(self.lines) // PAGE_LINES))

    def page(self, number: int) -> list[tuple[int, str, str]]:
        """Page ``number`` (from 1): ``(line number, stream, text)``; the last page for a number past it."""
        number = min(max(1, number), self.pages)
        start = (number - 1) * PAGE_LINES
        return [(start + i + 1, s, t) for i, (s, t) in enumerate(self.lines[start : start + PAGE_LINES])]

    def tail(self, lines: int = TAIL_LINES) -> list[tuple[int, str, str]]:
        start = max(0, len(self.lines) - lines)
        return [(start + i + 1, s, t) for i, (s, t) in enumerate(self.lines[start:])]


def job_lines(messages: Iterable[Any], job_id: str) -> list[tuple[str, str]]:
    """The lines of job ``job_id``'s output among a task log's messages (structured, or text lines)."""
    found = []
    for message in messages:
        event = getattr(message, "event", message)
        if not isinstance(event, str):
            continue
        for piece in event.splitlines() or [""]:
            matched = LOGGED_LINE.fullmatch(piece)
            if matched is not None and matched.group("job") == job_id:
                found.append((matched.group("stream"), matched.group("text")))
    return found


def logged_output(ref: TaskRef, job_id: str) -> LoggedOutput | None:
    """What the task instance ``ref`` names logged of job ``job_id``'s output: the newest try whose log
    holds any (a later try that reattached to the job logs its output again, whole). None when no try
    logged any (staging off, or nothing printed yet) or the logs cannot be read."""
    if ref.run_id is None:
        return None
    from airflow.utils.log.log_reader import TaskLogReader

    map_index = ref.map_index if ref.map_index is not None else -1
    try:
        reader = TaskLogReader()
        if not reader.supports_read:
            return None
        with create_session() as session:
            ti = (
                session.query(TaskInstance)
                .filter_by(dag_id=ref.dag_id, task_id=ref.task_id, run_id=ref.run_id, map_index=map_index)
                .one_or_none()
            )
            if ti is None:
                return None
            for number in range(int(ti.try_number or 0), 0, -1):
                row: Any = ti
                if number != ti.try_number:
                    row = (
                        session.query(TaskInstanceHistory)
                        .filter_by(
                            dag_id=ref.dag_id,
                            task_id=ref.task_id,
                            run_id=ref.run_id,
                            map_index=map_index,
                            try_number=number,
                        )
                        .one_or_none()
                    )
                    if row is None:
                        continue
                metadata: Any = {"download_logs": True}  # the whole log, as the API's full_content
                messages, _ = reader.read_log_chunks(row, number, metadata)
                lines = job_lines(messages, job_id)
                if lines:
                    return LoggedOutput(number, lines)
    except Exception:  # the page still shows the job, without its output
        log.exception("Slurm job page: could not read the task log of %s", ref.tag)
    return None
