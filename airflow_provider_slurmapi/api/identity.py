"""Who a Slurm job belongs to: a task instance's identity in the job's name, and its tag in the comment.

The one home of both formats, written and read only here:

* the **name** ends with ``~af<digest>r<run>`` (:class:`TaskIdentity`): ``digest`` is 12 hex digits of the
  SHA-256 of ``dag_id/task_id/run_id/map_index``, ``run`` the first try since the task instance was last
  cleared. Slurm's accounting keeps names whatever its ``AccountingStoreFlags``;
* the **comment** starts with ``airflow-ti:<dag_id>/<task_id>/<run_id>/<map_index> try:<n>``, for people
  reading ``squeue`` and for the job page, which maps a job to the DAG whose readers may see it
  (:func:`parse_tag`). Accounting keeps the submitted comment only with ``AccountingStoreFlags=job_comment``
  (a publishing job's wrapper writes accounting a copy, tag first, at exit: :mod:`.results`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.jobs import SlurmJob

TAG_PREFIX = "airflow-ti:"
_MAX_TAG = 240
# task_instance_tag() cuts a long dag_id to this many characters in its hashed form.
_HASHED_DAG_ID_CHARS = 80
# slurmdbd stores a job name in a TINYTEXT (255 bytes); squeue and sacct show the start of it.
MAX_JOB_NAME = 200
_IDENTITY = re.compile(r"~af([0-9a-f]{12})r([1-9][0-9]{0,8})")
# What a name may hold so that accounting's job_name filter (a CSV list) and the shell read it as written.
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.:+@=-]")


def task_instance_tag(dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> str:
    """A readable tag of one task instance (all its tries share it), for the job's comment."""
    tag = f"{TAG_PREFIX}{dag_id}/{task_id}/{run_id}/{map_index}"
    if len(tag) > _MAX_TAG:
        digest = hashlib.sha256(tag.encode()).hexdigest()[:32]
        tag = f"{TAG_PREFIX}{dag_id[:_HASHED_DAG_ID_CHARS]}/{task_id[:80]}/sha256:{digest}"
    return tag


_TRY = re.compile(r"try:([1-9][0-9]{0,8})")


def tagged_comment(tag: str, comment: str | None, try_number: int | None = None) -> str:
    """The job comment: ``tag`` first, then ``try:<n>`` (when known), then the user's own comment."""
    head = f"{tag} try:{try_number}" if try_number is not None else tag
    return f"{head} {comment}" if comment else head


def split_comment(comment: str) -> tuple[str | None, int | None, str]:
    """A comment's task-instance tag, the try that submitted the job, and the user's own comment (without
    what the job published at its end, :mod:`~airflow_provider_slurmapi.api.results`)."""
    comment = results.split(comment)[0]
    if not comment.startswith(TAG_PREFIX):
        return None, None, comment
    tag, _, rest = comment.partition(" ")
    first, _, after = rest.partition(" ")
    match = _TRY.fullmatch(first)
    if match is None:
        return tag, None, rest
    return tag, int(match.group(1)), after


@dataclass(frozen=True)
class TaskTry:
    """Which try of a task instance is submitting, and where its current run of tries began.

    :param number: this try's number (Airflow's ``ti.try_number``, from 1).
    :param run_start: the first try since the task instance was last cleared (1 if never cleared).
        Airflow raises ``max_tries`` to ``try_number + retries`` when it clears a task instance, so
        this is ``max_tries - retries + 1``, the same figure Airflow's sensors use for their first
        reschedule. Jobs of tries before it belong to an earlier run and are never reattached.
    """

    number: int
    run_start: int = 1

    @classmethod
    def of(cls, try_number: object, max_tries: object, retries: object) -> TaskTry:
        """From a task instance's ``try_number``/``max_tries`` and the task's ``retries``, as Airflow keeps them."""
        number = _positive(try_number, 1)
        start = _positive(max_tries, 0) - _positive(retries, 0) + 1 if max_tries is not None else 1
        return cls(number, min(max(start, 1), number))

    @property
    def starts_a_run(self) -> bool:
        """No earlier try of this run can have submitted a job."""
        return self.number <= self.run_start


def _positive(value: object, default: int) -> int:
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return default
    return number if number >= 0 else default


@dataclass(frozen=True)
class TaskIdentity:
    """A task instance and the run of its tries that submits, as the end of its jobs' names says.

    Build it with :meth:`of`; :meth:`job_name` gives the name to submit, :meth:`run_of` reads a job's.
    """

    digest: str
    task_try: TaskTry = field(default_factory=lambda: TaskTry(1))

    @classmethod
    def of(
        cls, dag_id: str, task_id: str, run_id: str, map_index: int = -1, task_try: TaskTry | None = None
    ) -> TaskIdentity:
        key = f"{dag_id}/{task_id}/{run_id}/{map_index}".encode()
        return cls(hashlib.sha256(key).hexdigest()[:12], task_try or TaskTry(1))

    @property
    def run(self) -> int:
        return self.task_try.run_start

    @property
    def suffix(self) -> str:
        return f"~af{self.digest}r{self.run}"

    def job_name(self, base: str) -> str:
        """``base`` made safe (characters outside ``[A-Za-z0-9_.:+@=-]`` become ``_``), cut, then the suffix."""
        safe = _NAME_UNSAFE.sub("_", base)[: MAX_JOB_NAME - len(self.suffix)]
        return safe + self.suffix

    def run_of(self, job: SlurmJob) -> int | None:
        """The run of this task instance that submitted ``job``; None for a job of another task instance."""
        found = name_identity(job.name)
        return found[1] if found is not None and found[0] == self.digest else None

    def this_run(self, job: SlurmJob) -> bool:
        return self.run_of(job) == self.run


def name_identity(name: str) -> tuple[str, int] | None:
    """The ``(digest, run)`` a job name ends with (see :class:`TaskIdentity`), or None."""
    match = _IDENTITY.search(name)
    if match is None or match.end() != len(name):
        return None
    return match.group(1), int(match.group(2))


@dataclass(frozen=True)
class TaskRef:
    """The task instance a job's tag names.

    ``run_id``/``map_index`` are None for the hashed form of a long tag; ``dag_id_exact`` is False when
    that form may have cut the dag_id short (then it cannot be used to check access).
    """

    dag_id: str
    task_id: str
    run_id: str | None
    map_index: int | None
    tag: str
    dag_id_exact: bool = True


def parse_tag(comment: str) -> TaskRef | None:
    """The task instance named by the tag at the start of a job's comment (the queue's, or accounting's
    percent-quoted copy); None without a tag."""
    comment = results.split(comment)[0] if comment else comment
    if not comment or not comment.startswith(TAG_PREFIX):
        return None
    tag = comment.split(" ", 1)[0]
    parts = tag[len(TAG_PREFIX) :].split("/")
    if any(not p for p in parts[:2]):
        return None
    if len(parts) == 3 and parts[2].startswith("sha256:"):
        exact = len(parts[0]) < _HASHED_DAG_ID_CHARS
        return TaskRef(parts[0], parts[1], None, None, tag=tag, dag_id_exact=exact)
    if len(parts) < 4:
        return None
    try:
        map_index = int(parts[-1])
    except ValueError:
        return None
    run_id = "/".join(parts[2:-1])
    if not run_id or map_index < -1:
        return None
    return TaskRef(parts[0], parts[1], run_id, map_index, tag=tag)
