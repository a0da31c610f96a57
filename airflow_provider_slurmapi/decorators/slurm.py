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

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import (
    DecoratedOperator,
    TaskDecorator,
    context_merge,
    determine_kwargs,
    task_decorator_factory,
)

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.operators.slurmapi import SlurmJobFailedNoRetry, SlurmSubmitJobOperator

# What the script is until the function has run (Airflow shows it in the task's rendered fields).
SCRIPT_SET_AT_RUN = "(the batch script: returned by the decorated function when the task runs)"


class _SlurmScriptDecoratedOperator(DecoratedOperator, SlurmSubmitJobOperator):
    """Runs the decorated function, then submits the batch script it returned (templated like ``script``).

    :param python_callable: the function; it returns the batch script's content (a non-empty string).
    :param op_args: positional arguments for it (templated).
    :param op_kwargs: keyword arguments for it (templated).
    """

    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *SlurmSubmitJobOperator.template_fields)
    template_fields_renderers = {  # typed as its base declares it (ClassVar on Airflow 3, not on 2)
        **DecoratedOperator.template_fields_renderers,
        **SlurmSubmitJobOperator.template_fields_renderers,
    }
    custom_operator_name: str = "@task.slurm_script"
    overwrite_rtif_after_execution: bool = True  # the UI shows the script that was really submitted

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "script" in kwargs:
            raise SlurmJobSpecError(
                "script", "is given to @task.slurm_script", "Return the script from the decorated function instead."
            )
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            script=SCRIPT_SET_AT_RUN,
            **kwargs,
        )

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
