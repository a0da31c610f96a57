"""``@task.slurm_script``: the decorated function returns a batch script; the task submits it and waits.

Registered as ``task.slurm_script`` through the provider info's ``task-decorators``, on Airflow 2.11
and 3.x, the way ``@task.bash`` turns a function's return value into a command::

    @task.slurm_script(partition="gpu", gpus_per_node=8, current_working_directory="/shared/runs")
    def train(epochs: int) -> str:
        return f"#!/bin/bash\\nsrun python train.py --epochs {epochs}\\n"

Every :class:`~airflow_provider_slurmapi.operators.slurmapi.SlurmSubmitJobOperator` argument works
(resources, ``deferrable``, ``array``, ``reattach``...), and the task behaves as that operator does:
one job per task instance however often the task is retried, the job id as its ``return_value``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import (
    DecoratedOperator,
    TaskDecorator,
    context_merge,
    determine_kwargs,
    task_decorator_factory,
)

from airflow_provider_slurmapi.api import checks
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.results import Reading
from airflow_provider_slurmapi.api.staging import StagedInput
from airflow_provider_slurmapi.decorators import pyjob
from airflow_provider_slurmapi.operators.slurmapi import XCOM_RESULT, SlurmJobFailedNoRetry, SlurmSubmitJobOperator

# What the script is until the function has run (Airflow shows it in the task's rendered fields).
SCRIPT_SET_AT_RUN = "(the batch script: returned by the decorated function when the task runs)"


class _SlurmDecoratedOperator(DecoratedOperator, SlurmSubmitJobOperator):
    """What both decorators share: the operator's arguments but ``script``, which the task sets when it runs."""

    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *SlurmSubmitJobOperator.template_fields)
    template_fields_renderers = {  # typed as its base declares it (ClassVar on Airflow 3, not on 2)
        **DecoratedOperator.template_fields_renderers,
        **SlurmSubmitJobOperator.template_fields_renderers,
    }
    overwrite_rtif_after_execution: bool = True  # the UI shows the script that was really submitted
    custom_operator_name: str = ""
    script_fix = ""  # what to do instead of giving ``script``

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "script" in kwargs:
            raise SlurmJobSpecError("script", f"is given to {self.custom_operator_name}", self.script_fix)
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            script=SCRIPT_SET_AT_RUN,
            **kwargs,
        )


class _SlurmScriptDecoratedOperator(_SlurmDecoratedOperator):
    """Runs the decorated function, then submits the batch script it returned (templated like ``script``).

    :param python_callable: the function; it returns the batch script's content (a non-empty string).
    :param op_args: positional arguments for it (templated).
    :param op_kwargs: keyword arguments for it (templated).
    """

    custom_operator_name: str = "@task.slurm_script"
    script_fix = "Return the script from the decorated function instead."

    def execute(self, context: Any) -> Any:
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        script = self.python_callable(*self.op_args, **kwargs)
        if not isinstance(script, str) or not script.strip():
            bad = SlurmJobSpecError(
                "return value",
                f"the function {self.python_callable.__name__!r} returned {type(script).__name__} {script!r:.60}",
                "Return the batch script as a non-empty string (starting with #!/bin/bash).",
            )
            raise SlurmJobFailedNoRetry(str(bad))  # the same function returns the same value on a retry
        self.script = script
        self.render_template_fields(context)
        return super().execute(context)


def slurm_script_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """Wrap a function that returns a batch script into a task that submits it to Slurm and waits.

    .. seealso::
        How to use it: :doc:`/operators/slurmapi`.

    Takes every :class:`~airflow_provider_slurmapi.operators.slurmapi.SlurmSubmitJobOperator` argument
    except ``script``. The returned script is rendered as a template (Jinja, like ``script``), so
    ``{{ ds }}`` and friends work in it.

    :param python_callable: the function (given when used as ``@task.slurm_script`` without arguments).
    """
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_SlurmScriptDecoratedOperator,
        **kwargs,
    )


class _SlurmPythonDecoratedOperator(_SlurmDecoratedOperator):
    """Runs the decorated function as a Slurm job; its return value comes back as ``return_value``.

    :param python_callable: the function: self-contained (modules imported inside it), defined with ``def``.
    :param op_args: positional arguments for it (templated; JSON values).
    :param op_kwargs: keyword arguments for it (templated; JSON values).
    :param python_command: the cluster's Python, as a shell command line (default ``python3``; a venv's
        ``/path/bin/python`` works).
    """

    custom_operator_name: str = "@task.slurm"
    script_fix = "The job runs the decorated function; use @task.slurm_script to submit a script."

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        python_command: str = pyjob.DEFAULT_PYTHON_COMMAND,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("array") is not None:
            raise SlurmJobSpecError(
                "array",
                "is given to @task.slurm",
                "@task.slurm runs one function call; use .expand() for many, or @task.slurm_script for an array.",
            )
        for name in ("publish_results", "wait_for_completion"):
            if not checks.flag(kwargs.get(name, True), name):
                raise SlurmJobSpecError(
                    name,
                    "is False, so the function's return value could not come back",
                    "Leave it out; use @task.slurm_script to submit without waiting or publishing.",
                )
        self.python_command = pyjob.python_command(python_command)
        # Read and checked when the DAG is parsed (a function the job could not run is refused before
        # anything is sent); the task's run uses this copy.
        self._source = pyjob.function_source(python_callable)
        super().__init__(python_callable=python_callable, **kwargs)
        self.result_source = f"the return value of {python_callable.__name__}()"
        # Arguments known now (not an XCom or a template) are checked now, in the DAG file.
        pyjob.call_json(self.op_args, self.op_kwargs, literal_only=True)

    def execute(self, context: Any) -> Any:
        try:
            call = pyjob.call_json(self.op_args, self.op_kwargs)
        except SlurmJobSpecError as bad:
            raise SlurmJobFailedNoRetry(str(bad)) from None  # the same arguments fail the same way
        location = self.staging_location()
        staged = location is not None and len(call.encode()) > pyjob.STAGED_CALL_BYTES
        if staged and location is not None:
            data = call.encode()
            digest = hashlib.sha256(data).hexdigest()
            name = f"call-{digest[:16]}.json"  # the same text, the same name
            location = self._for_try(context, location, self.task_try(context).number)
            self.hook.stage_object(location, name, call)
            self.staged_inputs = [StagedInput(name, len(data), digest, pyjob.CALL_FILE_VARIABLE)]
            self.log.info(
                "The arguments of %s() (%d bytes) go to the job as %s",
                self.python_callable.__name__,
                len(data),
                location.object_uri(name),
            )
        self.script = pyjob.job_script(
            self._source, self.python_callable.__name__, "" if staged else call, self.python_command, staged=staged
        )
        return super().execute(context)

    def _succeeded(self, job_id: int, reading: Reading | None) -> Any:
        name = self.python_callable.__name__
        if reading is None or not reading.has_result:
            why = (
                reading.unread
                if reading is not None and reading.unread
                else f"the job wrote none: {name}() did not return (did it call sys.exit()?)"
            )
            raise SlurmJobFailedNoRetry(
                f"Slurm job {job_id} succeeded, but the return value of {name}() could not be read: {why}"
            )
        self.log.info("%s() returned on the cluster (also XCom %r)", name, XCOM_RESULT)
        return reading.result


def slurm_task(python_callable: Callable[..., Any] | None = None, **kwargs: Any) -> TaskDecorator:
    """Wrap a function into a task that runs it on Slurm, as a batch job, and returns its return value.

    .. seealso::
        How to use it: :doc:`/operators/slurmapi`.

    The function's source and its arguments (JSON) are sent in the job's script; the job runs it with
    ``python_command`` (default ``python3``), and its JSON return value becomes the task's
    ``return_value`` (through the job's published result, which holds about 900 bytes: return paths and
    metrics, not data). An exception fails the task with the job's traceback in the log. The function must be
    self-contained: modules imported inside it, values passed as arguments; lambdas, closures and
    module-level names are refused when the DAG is parsed. Takes every
    :class:`~airflow_provider_slurmapi.operators.slurmapi.SlurmSubmitJobOperator` argument except
    ``script`` and ``array``.

    :param python_callable: the function (given when used as ``@task.slurm`` without arguments).
    """
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_SlurmPythonDecoratedOperator,
        **kwargs,
    )
