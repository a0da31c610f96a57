"""A ready retry policy for Slurm jobs (Airflow 3.3+'s ``retry_policy``): retry what the cluster did to the
job soon, fail at once what another try would repeat.

.. code-block:: python

    from datetime import timedelta

    from airflow.sdk import RetryAction
    from airflow_provider_slurmapi.retry import SlurmRetryPolicy

    SlurmSubmitJobOperator(
        task_id="train",
        script="train.sh",
        retries=5,
        retry_policy=SlurmRetryPolicy(time_limit=RetryAction.RETRY, cluster_fault_delay=timedelta(seconds=30)),
    )

=========================== ========================================= ===================
failure                     what the job met                          default action
=========================== ========================================= ===================
``preempted``               PREEMPTED and not requeued                retry after ``cluster_fault_delay`` (1 min)
``node_failure``            NODE_FAIL, BOOT_FAIL                      retry after ``cluster_fault_delay``
``out_of_memory``           OUT_OF_MEMORY                             fail
``time_limit``              TIMEOUT                                   fail
``cancelled``               CANCELLED (scancel, an admin)             fail
``deadline``                DEADLINE                                  fail
``exit_code``               FAILED (its script's non-zero exit)       fail
``other``                   any other end (SPECIAL_EXIT; an array     ``DEFAULT`` (the task's ``retries``)
                            whose tasks failed in different ways)
=========================== ========================================= ===================

Each is a keyword argument taking a :class:`~airflow.sdk.RetryAction` (``RETRY``, ``FAIL`` or ``DEFAULT``);
``rules`` are asked first (your own :class:`~airflow.sdk.RetryRule` list). A retry still counts against the
task's ``retries``. With a ``retry_policy`` on the task, the operator's ``retry_on_job_failure`` no longer
applies: the policy decides. A job spec that Slurm or the provider refuses always fails at once
(``SlurmJobFailedNoRetry``, an ``AirflowFailException``, which Airflow never asks a policy about: the same
spec fails the same way), and a failure to reach the API follows the task's ``retries``. Airflow before 3.3
has no retry policies: use ``retry_on_job_failure``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

try:
    from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule
except ImportError:  # pragma: no cover - Airflow before 3.3
    raise ImportError(
        "SlurmRetryPolicy needs Airflow 3.3 or later (retry_policy); before it, use the operator's retry_on_job_failure"
    ) from None

from airflow_provider_slurmapi.api import failures

__all__ = ["SlurmRetryPolicy"]

CLUSTER_FAULT_DELAY = timedelta(minutes=1)


class SlurmRetryPolicy(ExceptionRetryPolicy):
    """Retries a task whose job the cluster lost (preempted, node failure) after ``cluster_fault_delay``,
    fails it at once on out-of-memory, time limit, cancel, deadline and a non-zero exit; each overridable
    (see the module's table).

    :param rules: asked before the policy's own (first match wins).
    :param cluster_fault_delay: the retry delay after a preemption or a node failure (default 1 minute).
    :param preempted: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobPreemptedError`.
    :param node_failure: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmNodeFailureError`.
    :param out_of_memory: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobOutOfMemoryError`.
    :param time_limit: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobTimeLimitError`.
    :param cancelled: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobCancelledError`.
    :param deadline: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobDeadlineError`.
    :param exit_code: action on :class:`~airflow_provider_slurmapi.api.failures.SlurmJobExitCodeError`.
    :param other: action on any other failed job (``SlurmJobFailedError`` itself: SPECIAL_EXIT, an array
        whose tasks failed in different ways) (default ``DEFAULT``: the task's ``retries`` apply).
    """

    def __init__(
        self,
        rules: Sequence[RetryRule] = (),
        *,
        cluster_fault_delay: timedelta = CLUSTER_FAULT_DELAY,
        preempted: RetryAction = RetryAction.RETRY,
        node_failure: RetryAction = RetryAction.RETRY,
        out_of_memory: RetryAction = RetryAction.FAIL,
        time_limit: RetryAction = RetryAction.FAIL,
        cancelled: RetryAction = RetryAction.FAIL,
        deadline: RetryAction = RetryAction.FAIL,
        exit_code: RetryAction = RetryAction.FAIL,
        other: RetryAction = RetryAction.DEFAULT,
    ) -> None:
        for name, value in (
            ("preempted", preempted),
            ("node_failure", node_failure),
            ("out_of_memory", out_of_memory),
            ("time_limit", time_limit),
            ("cancelled", cancelled),
            ("deadline", deadline),
            ("exit_code", exit_code),
            ("other", other),
        ):
            if not isinstance(value, RetryAction):
                raise TypeError(f"SlurmRetryPolicy: {name}={value!r} is not a RetryAction (RETRY, FAIL or DEFAULT)")
        if not isinstance(cluster_fault_delay, timedelta):
            raise TypeError(f"SlurmRetryPolicy: cluster_fault_delay={cluster_fault_delay!r} is not a timedelta")
        cluster = "The cluster lost the job (%s): retrying it"

        def rule(
            kind: type[BaseException], action: RetryAction, reason: str, delay: timedelta | None = None
        ) -> RetryRule:
            return RetryRule(exception=kind, action=action, reason=reason, retry_delay=delay)

        own = [
            rule(failures.SlurmJobPreemptedError, preempted, cluster % "preempted", cluster_fault_delay),
            rule(failures.SlurmNodeFailureError, node_failure, cluster % "a node failed", cluster_fault_delay),
            rule(failures.SlurmJobOutOfMemoryError, out_of_memory, "The job ran out of memory: ask for more"),
            rule(failures.SlurmJobTimeLimitError, time_limit, "The job reached its time limit"),
            rule(failures.SlurmJobCancelledError, cancelled, "The job was cancelled"),
            rule(failures.SlurmJobDeadlineError, deadline, "The job missed its deadline"),
            rule(failures.SlurmJobExitCodeError, exit_code, "The job's script failed"),
            rule(failures.SlurmJobFailedError, other, "The Slurm job failed"),
        ]
        super().__init__(rules=[*rules, *own], default=RetryAction.DEFAULT)
