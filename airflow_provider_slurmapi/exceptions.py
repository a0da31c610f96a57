"""The exceptions a task of this provider fails with.

A failed job's task raises an error of the job's failure type (:mod:`airflow_provider_slurmapi.api.failures`:
``SlurmJobPreemptedError``, ``SlurmJobOutOfMemoryError``, ...), which is also either a
:class:`SlurmJobFailedNoRetry` (an ``AirflowFailException``: Airflow fails the task at once, whatever its
``retries``) or a :class:`SlurmJobError` (the task's ``retries`` and ``retry_policy`` apply): e.g.
``SlurmJobOutOfMemoryErrorNoRetry`` or ``SlurmJobPreemptedErrorRetry``. Match and catch the failure type;
its attributes (``job_id``, ``state``, ``reason``, ``exit_code``, ...) say what happened.
"""

from __future__ import annotations

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_slurmapi.api import failures
from airflow_provider_slurmapi.api.errors import SlurmJobFailedError


class SlurmJobError(AirflowException):
    """A Slurm job ended badly in a way a retry may cure (the task's ``retries`` apply)."""


class SlurmJobFailedNoRetry(AirflowFailException):
    """A Slurm job failed, or its spec was rejected: retrying the same job would not help."""


# The task's exception for a failed job: its type (api/failures.py) and whether Airflow's own retries apply,
# e.g. SlurmJobOutOfMemoryErrorNoRetry (a SlurmJobOutOfMemoryError and a SlurmJobFailedNoRetry, which is
# an AirflowFailException) or SlurmJobPreemptedErrorRetry (a SlurmJobPreemptedError and a SlurmJobError).
_TASK_FAILURES: dict[tuple[type[SlurmJobFailedError], bool], type[Exception]] = {}
for _kind in failures.FAILURE_TYPES:
    for _final, _mixin in ((True, SlurmJobFailedNoRetry), (False, SlurmJobError)):
        _name = f"{_kind.__name__}{'NoRetry' if _final else 'Retry'}"
        _cls = type(_name, (_kind, _mixin), {"__module__": __name__, "__qualname__": _name, "__doc__": _kind.__doc__})
        globals()[_name] = _TASK_FAILURES[(_kind, _final)] = _cls


def task_failure(error: SlurmJobFailedError, *, final: bool) -> Exception:
    """``error`` as the task raises it: of the same type (with its attributes), and a
    :class:`SlurmJobFailedNoRetry` when ``final`` (Airflow fails the task at once), else a
    :class:`SlurmJobError` (the task's ``retries`` and ``retry_policy`` apply)."""
    raised = _TASK_FAILURES[(type(error) if type(error) in failures.FAILURE_TYPES else SlurmJobFailedError, final)]
    copy = raised.__new__(raised)
    copy.__dict__.update(error.__dict__)
    copy.args = error.args
    return copy
