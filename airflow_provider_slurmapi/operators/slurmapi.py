"""SlurmSubmitJobOperator and SlurmCancelJobOperator: run a Slurm batch job as an Airflow task.

How a job's end maps to the task's end (each failure raises its own type, from
:mod:`airflow_provider_slurmapi.api.failures`):

=====================================================  ==========================================
Slurm outcome                                          Task
=====================================================  ==========================================
COMPLETED                                              success; XCom ``slurm_job`` = job summary
PREEMPTED                                              ``SlurmJobPreemptedError``, retried per ``retries``
NODE_FAIL, BOOT_FAIL                                   ``SlurmNodeFailureError``, retried per ``retries``
OUT_OF_MEMORY                                          ``SlurmJobOutOfMemoryError``, not retried
TIMEOUT                                                ``SlurmJobTimeLimitError``, not retried
CANCELLED                                              ``SlurmJobCancelledError``, not retried
DEADLINE                                               ``SlurmJobDeadlineError``, not retried
FAILED (non-zero exit, or killed by a signal)          ``SlurmJobExitCodeError``, not retried
job spec rejected (by this provider or by Slurm)       fails without retry
API unreachable past the retry and error budgets       fails, retried per ``retries``
=====================================================  ==========================================

"Not retried": the exception is also an ``AirflowFailException``, unless ``retry_on_job_failure=True`` or
the task has a ``retry_policy`` (Airflow 3.3+, e.g. :class:`~airflow_provider_slurmapi.retry.SlurmRetryPolicy`),
which then decides.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.common.compat.sdk import (
    BaseOperator,
    mask_secret,
    redact,
)

from airflow_provider_slurmapi import lineage
from airflow_provider_slurmapi.api import checks, failures, results, staging, storage, usage
from airflow_provider_slurmapi.api.errors import (
    GoogleApiError,
    SlurmAccountingUnavailableError,
    SlurmApiVersionError,
    SlurmJobApiError,
    SlurmJobFailedError,
    SlurmJobSpecError,
    SlurmRequestRejectedError,
    SlurmTransportError,
)
from airflow_provider_slurmapi.api.identity import (
    TaskIdentity,
    TaskTry,
    tagged_comment,
    task_instance_tag,
)
from airflow_provider_slurmapi.api.job_event import FAILED, SUCCESS, TIMEOUT, JobEvent
from airflow_provider_slurmapi.api.jobs import SlurmArrayJob, SlurmJob
from airflow_provider_slurmapi.api.spec import DEFAULT_WARNING_DELAY, JobSpec, warning_delay, warning_signal
from airflow_provider_slurmapi.api.staging import StagingLocation
from airflow_provider_slurmapi.api.watch import failure_error, outcome_text
from airflow_provider_slurmapi.exceptions import SlurmJobError, SlurmJobFailedNoRetry, task_failure
from airflow_provider_slurmapi.hooks.slurmapi import SlurmApiHookMixin, SlurmJobApiHook, default_deferrable
from airflow_provider_slurmapi.links.slurmapi import SlurmJobLink
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS

XCOM_JOB_ID = "slurm_job_id"
XCOM_JOB = "slurm_job"
XCOM_RESULT = "slurm_result"
XCOM_OUTPUT_URI = "slurm_output_uri"
XCOM_USAGE = "slurm_usage"


def usage_text(summary: Mapping[str, Any]) -> str:
    """What a job's summary says it used, in words (:meth:`~airflow_provider_slurmapi.api.usage.Usage.describe`);
    "" when it has no usage (the job never ran)."""
    used = summary.get("usage") if isinstance(summary, Mapping) else None
    if not isinstance(used, Mapping):
        return ""
    try:
        return usage.Usage(**used).describe()
    except (TypeError, ValueError):  # a summary an older release wrote
        return ""


# Where the operator records its job in Airflow 3.3's task_state_store (shared by the task's tries).
STATE_STORE_KEY = "slurm_job_id"


# Google's answers that say the connection is wrong (no such cluster, no permission, bad credentials): the
# task's next try would meet the same answer.
CONFIGURATION_CODES = frozenset({400, 401, 403, 404})


def is_configuration_error(error: SlurmJobApiError) -> bool:
    """An error a retry cannot cure: the connection or the cluster is wrong (see docs/troubleshooting.rst)."""
    if isinstance(error, GoogleApiError):
        return error.code in CONFIGURATION_CODES and not error.retryable
    if isinstance(error, SlurmTransportError):  # a redirect, a TLS certificate that fails verification
        return not error.retryable
    return isinstance(error, SlurmApiVersionError)


def _fail(error: SlurmJobApiError, *, retry_on_job_failure: bool, policy: bool = False) -> Exception:
    """The task's exception for ``error``. ``policy``: the task has a ``retry_policy`` (Airflow 3.3+), which
    decides on a failed job's retry (Airflow never asks it about an AirflowFailException)."""
    if isinstance(error, (SlurmJobSpecError, SlurmRequestRejectedError)) or is_configuration_error(error):
        return SlurmJobFailedNoRetry(str(error))
    if isinstance(error, SlurmJobFailedError):
        return task_failure(error, final=not (error.retryable or retry_on_job_failure or policy))
    return SlurmJobError(str(error))


# Environment names whose values are masked (docs/security.rst lists them; test_operators checks each).
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|(API|SSH|PRIVATE|ACCESS|AUTH|SIGNING|ENCRYPTION|MASTER)_?KEY",
    re.IGNORECASE,
)


def secret_values(environment: Any) -> list[str]:
    """Values of environment entries whose names look secret (:data:`SECRET_NAME`: see docs/security.rst)."""
    if isinstance(environment, Mapping):
        pairs = [(str(k), v) for k, v in environment.items()]
    elif isinstance(environment, (list, tuple)):
        pairs = [tuple(str(e).partition("=")[::2]) for e in environment]  # type: ignore[misc]
    else:
        return []
    return [str(v) for k, v in pairs if v not in (None, "") and SECRET_NAME.search(k)]


def default_job_name(dag_id: str, task_id: str) -> str:
    """A Slurm-friendly job name from the dag and task ids."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{dag_id}.{task_id}")[:200]


class SlurmSubmitJobOperator(SlurmApiHookMixin, BaseOperator):
    """Submit a Slurm batch job and (by default) wait for it to finish.

    .. seealso::
        How to use it: :doc:`/operators/slurmapi`.

    :param script: the batch script's content, templated. A value ending in ``.sh`` or ``.bash`` is a
        template file found on the DAG's template search path, rendered like BashOperator's.
    :param job: Slurm job fields (templated dict, v0.0.42 ``job_desc_msg`` names); its keys win over the
        convenience arguments below.
    :param name: job name; default ``<dag_id>.<task_id>``.
    :param partition: Slurm partition; default the cluster's default partition.
    :param time_limit: minutes (int) or a ``timedelta``.
    :param nodes: number of nodes (``minimum_nodes``).
    :param tasks_per_node: tasks on each node.
    :param cpus_per_task: CPUs per task.
    :param gpus_per_node: GPUs on each node (``tres_per_node: gres/gpu:N``; 0: none).
    :param memory_per_node: megabytes (int) or a string such as ``"64G"``.
    :param environment: dict or ``KEY=VALUE`` list, merged over ``PATH=/bin:/usr/bin``; values are
        strings or numbers (bytes and bools are refused), without NUL characters.
    :param current_working_directory: the job's directory on the cluster (required here or in ``job``).
    :param standard_output: stdout path pattern (Slurm default ``slurm-%j.out`` in the working directory).
    :param standard_error: stderr path pattern (default: with stdout).
    :param kill_warning_signal: a signal Slurm sends the job's script ``kill_warning_delay`` seconds before its
        time limit, so that it can checkpoint (sbatch's ``--signal=B:USR1@300``): a name such as ``"USR1"``
        (or ``"SIGUSR1"``, or its number, ``10``); HUP, INT, QUIT, ABRT, USR1, USR2, ALRM, CONT, URG and XCPU are
        taken. It goes to the script itself (the program of its ``#!`` line, which must trap it: bash
        ``trap '...' USR1``, Python ``signal.signal``), not to what the script started: pass it on to those
        (``kill -USR1 $pid``; ``srun`` passes it on to its tasks). ``job={"kill_warning_flags": ["FULL_JOB"]}``
        has Slurm signal every process of the job and every step instead, ``[]`` only the ``srun`` steps.
        Slurm may send it up to a minute early (it checks on a sweep). Default None: no warning.
    :param kill_warning_delay: seconds before the time limit (1 to 65533, less than the time limit; default
        60, Slurm's) for ``kill_warning_signal``.
    :param requeue: whether Slurm may requeue the job (run it again from its start, after a node failure, a
        preemption or ``scontrol requeue``); False: it never is (``scontrol requeue`` is refused, "Requested
        operation is presently disabled"). Default None: the cluster's ``JobRequeue`` (Slurm's default: yes).
    :param array: make it a job array, in Slurm's notation (templated): ``"0-15"``, ``"1,3,5"``,
        ``"0-99%10"`` (at most 10 at once); each task sees ``$SLURM_ARRAY_TASK_ID``. The task waits for
        every task of the array and succeeds only if all COMPLETED; the error names each failed task.
    :param wait_for_completion: wait for the job to end (default True); False returns right after submit.
    :param deferrable: wait in the triggerer, freeing the worker (default ``[operators] default_deferrable``).
        This and the other switches take a bool: a string such as ``"false"`` is refused.
    :param poll_interval: seconds between state checks (default 30; a finite number above 0).
    :param cancel_on_kill: cancel the Slurm job when the task is killed (default True).
    :param retry_on_job_failure: let the task's retries re-run jobs that FAILED/TIMEOUT/OOM (default False;
        cluster failures such as NODE_FAIL are always retryable). With a ``retry_policy`` on the task
        (Airflow 3.3+, e.g. :class:`~airflow_provider_slurmapi.retry.SlurmRetryPolicy`) the policy decides.
    :param reattach: before submitting, look for a job of this task instance (named after it, see
        below; on Airflow 3.3+ also recorded in ``task_state_store`` under ``slurm_job_id``, which is
        looked at first) that is still active or COMPLETED and follow it instead of submitting a second
        one (default True). Only jobs of the connection's Slurm user count, and only jobs of tries since
        the task was last cleared: a cleared task runs its job again, and first cancels a job of its
        earlier run that is still active. A submit whose fate is unknown is looked for, never resent,
        even with ``reattach=False``.
    :param publish_results: run the script inside a small ``sh`` wrapper that, when it ends, publishes the
        JSON the job wrote to ``$SLURMAPI_RETURN_FILE`` (pushed as XCom ``slurm_result``) and the last lines
        of its stdout and stderr (printed in the task log, and a failure's last stderr lines in its error)
        in the job's Slurm comment, after the task's tag (default True; see the docs' "Results and output"
        page for what the script sees and what it costs). False submits the script as it is.
    :param output_tail_lines: at most this many last lines of stdout and of stderr are published (default
        50; 0: none, the result only); Slurm's 1024-byte comment bounds them further, except with staging.
    :param staging_uri: ``gs://BUCKET/PREFIX`` where the job stages its full output as it runs and its
        result at its end, lifting the comment's limits (default None: the connection's ``staging_uri``;
        ``""``: no staging for this task, even where the connection sets one). The task log then ends with
        the last ``output_tail_lines`` lines read from there, XCom ``slurm_output_uri`` names the job's
        staged output, and ``slurm_result`` may be up to ``max_result_bytes``. Checked before the submit
        (the URI, and that the connection's credentials can list it). Needs ``publish_results`` and the
        ``staging`` extra; see the docs' "Full output and large results" page.
    :param output_interval: with staging, how often (seconds, 1 to 3600; default 30) the running job
        uploads its new output.
    :param max_result_bytes: with staging, the largest result the task takes (default 10 MiB); a larger
        one fails the task, naming the object and the limit.
    :param slurmapi_conn_id: the ``slurmapi`` connection (default ``slurmapi_default``).

    Every job's name ends with its task instance's identity, ``~af<12 hex digits>r<run>`` (the digits
    hash ``dag_id/task_id/run_id/map_index``; ``run`` is the first try since the task was last cleared),
    which Slurm's accounting keeps; characters of ``name`` outside ``[A-Za-z0-9_.:+@=-]`` become ``_``.
    Its ``comment`` starts with ``airflow-ti:<dag_id>/<task_id>/<run_id>/<map_index> try:<try_number>``
    for people reading ``squeue`` (a ``comment`` you give follows it). Returns (XCom ``return_value``) the
    Slurm job id; also pushes ``slurm_job_id`` at submit time and
    ``slurm_job`` (state, exit code, elapsed, nodes, output paths) when the job ends, and
    ``slurm_published`` (for the job page: the job's comment and publication as this task's log masked
    them, as fingerprints and masked copies) at both; with staging, deferred, its trigger keeps how far it
    logged the job's output in ``slurm_stream_position``. For an array,
    ``slurm_job`` also holds ``tasks`` (one entry per task: ``display_id`` such as ``41_1``, state, exit
    code, output paths), ``array_task_count`` and ``array_tasks_completed``.
    """

    template_fields: Sequence[str] = (
        "script",
        "job",
        "name",
        "partition",
        "environment",
        "current_working_directory",
        "standard_output",
        "standard_error",
        "array",
        "staging_uri",
    )
    template_ext: Sequence[str] = (".sh", ".bash")
    template_fields_renderers = {"script": "bash", "job": "json", "environment": "json"}
    ui_color = "#c6e2ff"
    operator_extra_links = (SlurmJobLink(),)

    def __init__(
        self,
        *,
        script: str,
        job: Mapping[str, Any] | None = None,
        name: str | None = None,
        partition: str | None = None,
        time_limit: int | timedelta | None = None,
        nodes: int | None = None,
        tasks_per_node: int | None = None,
        cpus_per_task: int | None = None,
        gpus_per_node: int | None = None,
        memory_per_node: int | str | None = None,
        environment: Mapping[str, str] | Sequence[str] | None = None,
        current_working_directory: str | None = None,
        standard_output: str | None = None,
        standard_error: str | None = None,
        array: str | None = None,
        kill_warning_signal: str | int | None = None,
        kill_warning_delay: int | None = None,
        requeue: bool | None = None,
        wait_for_completion: bool = True,
        deferrable: bool | None = None,
        poll_interval: float = 30.0,
        cancel_on_kill: bool = True,
        retry_on_job_failure: bool = False,
        reattach: bool = True,
        publish_results: bool = True,
        output_tail_lines: int = results.DEFAULT_TAIL_LINES,
        staging_uri: str | None = None,
        output_interval: int = staging.DEFAULT_OUTPUT_INTERVAL,
        max_result_bytes: int = storage.DEFAULT_MAX_RESULT_BYTES,
        slurmapi_conn_id: str = SlurmJobApiHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reattach = checks.flag(reattach, "reattach")
        self.publish_results = checks.flag(publish_results, "publish_results")
        self.output_tail_lines = results.tail_lines(output_tail_lines)
        self.staging_uri = staging_uri
        # Objects the task staged for its job before the submit (``@task.slurm``'s large arguments).
        self.staged_inputs: list[staging.StagedInput] = []
        self.output_interval = staging.output_interval(output_interval)
        self.max_result_bytes = checks.count(max_result_bytes, "max_result_bytes", minimum=1)
        self.script = script
        self.job = dict(job) if job else {}
        self.name = name
        self.partition = partition
        self.time_limit = time_limit
        self.nodes = nodes
        self.tasks_per_node = tasks_per_node
        self.cpus_per_task = cpus_per_task
        self.gpus_per_node = gpus_per_node
        self.memory_per_node = memory_per_node
        self.environment = environment
        self.current_working_directory = current_working_directory
        self.standard_output = standard_output
        self.standard_error = standard_error
        self.array = array
        self.kill_warning_signal = None if kill_warning_signal is None else warning_signal(kill_warning_signal)
        if kill_warning_delay is not None and kill_warning_signal is None:
            raise SlurmJobSpecError(
                "kill_warning_delay",
                "is given without kill_warning_signal",
                "Give kill_warning_signal too (e.g. 'USR1'), or leave the delay out.",
            )
        self.kill_warning_delay = None if kill_warning_delay is None else warning_delay(kill_warning_delay)
        self.requeue = None if requeue is None else checks.flag(requeue, "requeue")
        self.wait_for_completion = checks.flag(wait_for_completion, "wait_for_completion")
        # Read when the task is built (not when this module is imported), so the setting can change.
        self.deferrable = default_deferrable() if deferrable is None else checks.flag(deferrable, "deferrable")
        self.poll_interval = checks.seconds(poll_interval, "poll_interval")
        self.cancel_on_kill = checks.flag(cancel_on_kill, "cancel_on_kill")
        self.retry_on_job_failure = checks.flag(retry_on_job_failure, "retry_on_job_failure")
        self.slurmapi_conn_id = slurmapi_conn_id
        self.job_id: int | None = None
        # What the task's OpenLineage events say of its job (get_openlineage_facets_on_complete).
        self._lineage_summary: dict[str, Any] | None = None
        self._lineage_cluster: str | None = None
        if gpus_per_node is not None and (
            isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 0
        ):
            raise SlurmJobSpecError(
                "gpus_per_node",
                f"{gpus_per_node!r} is not a GPU count",
                "Give an int: the GPUs on each node (0: none).",
            )

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render, then mask secret-looking environment values before Airflow stores or logs them."""
        super().render_template_fields(context, jinja_env)
        self._ti = context["ti"]  # so that on_kill finds this try's job in any process of the try
        for value in self._secret_values():
            mask_secret(value)

    def _secret_values(self) -> list[str]:
        """The job's secret-looking environment values (masked in the task's log)."""
        job_env = self.job.get("environment") if isinstance(self.job, Mapping) else None
        return secret_values(self.environment) + secret_values(job_env)

    def job_fields(self, dag_id: str, task_id: str) -> dict[str, Any]:
        """The Slurm job fields: convenience arguments first, then ``job`` on top."""
        fields: dict[str, Any] = {"name": self.name or default_job_name(dag_id, task_id)}
        simple = {
            "partition": self.partition,
            "time_limit": self.time_limit,
            "minimum_nodes": self.nodes,
            "tasks_per_node": self.tasks_per_node,
            "cpus_per_task": self.cpus_per_task,
            "memory_per_node": self.memory_per_node,
            "environment": self.environment,
            "current_working_directory": self.current_working_directory,
            "standard_output": self.standard_output,
            "standard_error": self.standard_error,
            "array": self.array,
            "requeue": self.requeue,
        }
        if self.kill_warning_signal is not None:
            # B: Slurm signals the batch script only, the result wrapper, which passes it on to the script
            simple.update(
                kill_warning_signal=self.kill_warning_signal,
                kill_warning_delay=self.kill_warning_delay or DEFAULT_WARNING_DELAY,
                kill_warning_flags=["BATCH_JOB"],
            )
        fields.update({k: v for k, v in simple.items() if v is not None})
        if self.gpus_per_node:
            fields["tres_per_node"] = f"gres/gpu:{self.gpus_per_node}"
        if not isinstance(self.job, Mapping):
            raise SlurmJobSpecError("job", f"is a {type(self.job).__name__}", "Pass the Slurm job fields as a dict.")
        fields.update(self.job)
        return fields

    @staticmethod
    def tag(context: Any) -> str:
        """The task-instance tag this operator puts in the job's ``comment``."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)

        return task_instance_tag(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index)

    def identity(self, context: Any) -> TaskIdentity:
        """This task instance and run of tries, as the end of its jobs' names says (see ``TaskIdentity``)."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return TaskIdentity.of(
            ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, self.task_try(context)
        )

    def build_spec(self, context: Any) -> JobSpec:
        ti = context["ti"]
        fields = self.job_fields(ti.dag_id, ti.task_id)
        comment = fields.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise SlurmJobSpecError("comment", f"{comment!r} is not a string", "Give a string value.")
        text = comment or ""
        bad = next((i for i, ch in enumerate(text) if unicodedata.category(ch) == "Cc"), None)
        if bad is not None:
            raise SlurmJobSpecError(
                "comment",
                f"contains the control character {text[bad]!r} at offset {bad}",
                "Give printable text on one line: the job's comment also carries its published result, which "
                "control characters would let a comment pass for.",
            )
        name = fields.get("name")
        if not isinstance(name, str) or not name.strip():
            raise SlurmJobSpecError("name", f"{name!r} is not a job name", "Give a non-empty string, or leave it out.")
        fields["name"] = self.identity(context).job_name(name)
        fields["comment"] = tagged_comment(self.tag(context), comment, self.task_try(context).number)
        # the task's OpenLineage run, for lineage the job emits itself (where the job sets none of its own)
        parent = lineage.parent_environment(ti)
        if parent:
            fields["environment"] = lineage.with_parent(fields.get("environment"), parent)
        spec = JobSpec.build(self.script, fields)
        if not self.publish_results:
            return spec
        location = self.staging_location()
        if results.room(fields["comment"], staged=location is not None) <= 0:
            raise SlurmJobSpecError(
                "comment",
                f"leaves no room in the job's {results.COMMENT_LIMIT}-byte Slurm comment for its result",
                "Shorten the comment, or pass publish_results=False.",
            )
        number = self.task_try(context).number
        root = location
        if location is not None:
            self.hook.check_staging(location)
            location = self._for_try(context, location, number)
        script = results.wrap_script(
            spec.script,
            fields["comment"],
            self.output_tail_lines,
            location,
            self.output_interval,
            number,
            self.staged_inputs,
            root,
            *results.warning_of(spec.job),  # warning_signal, forward_warning
        )
        return JobSpec(script, spec.job)

    def staging_location(self) -> StagingLocation | None:
        """Where this task's jobs stage their output and result: the task's ``staging_uri``, else the
        connection's; None without (or with ``staging_uri=""``)."""
        if self.staging_uri is None:
            return self.hook.settings.staging
        if self.staging_uri == "":
            return None
        return StagingLocation.parse(self.staging_uri, "staging_uri")

    @staticmethod
    def _for_try(context: Any, location: StagingLocation, try_number: int) -> StagingLocation:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return location.for_task(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, try_number)

    @property
    def has_retry_policy(self) -> bool:
        """The task has a ``retry_policy`` (Airflow 3.3+): it, not ``retry_on_job_failure``, decides whether a
        failed job's task is retried (see :class:`~airflow_provider_slurmapi.retry.SlurmRetryPolicy`)."""
        return getattr(self, "retry_policy", None) is not None

    def task_try(self, context: Any) -> TaskTry:
        """This try, and the first try since the task instance was last cleared (see ``TaskTry``)."""
        ti = context["ti"]
        return TaskTry.of(getattr(ti, "try_number", 1), getattr(ti, "max_tries", None), self.retries)

    def execute(self, context: Any) -> int:
        SlurmJobLink.none_yet(self)
        hook = self.hook
        try:
            spec = self.build_spec(context)
            hook.check_submit(spec)  # a request too large to send is refused before the reattach look-ups
            recorded = self._recorded_job_id(context) if self.reattach else None
            outcome = hook.submit_once(spec, self.identity(context), reattach=self.reattach, known_job_id=recorded)
        except SlurmJobApiError as err:
            raise _fail(err, retry_on_job_failure=self.retry_on_job_failure, policy=self.has_retry_policy) from None
        self.job_id = outcome.job_id
        self._note_for_lineage(None)
        if outcome.job_id != recorded:  # a retry that followed the recorded job has nothing to write
            self._record_job_id(context, outcome.job_id)
        partition = spec.job.get("partition") or "the default partition"
        verb = "Reattached to" if outcome.reattached else "Submitted"
        name = spec.job.get("name")
        if spec.job.get("array"):
            what = f"array job {self.job_id} ({name}, tasks {spec.job['array']})"
        else:
            what = f"job {self.job_id} ({name})"
        self.log.info("%s Slurm %s on %s", verb, what, partition)
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=self.job_id)
        self._record_shown(context, {})
        SlurmJobLink.persist_for(context, hook, self.job_id)
        if not self.wait_for_completion:
            return self.job_id
        if outcome.job is not None and outcome.job.state.is_terminal:
            self.log.info(outcome_text(outcome.job))
            return self._finish(context, outcome.job)
        if self.deferrable:
            self._defer(context, self.job_id)
        return self._wait(context, hook, self.job_id)

    def _recorded_job_id(self, context: Any) -> int | None:
        """The job id an earlier try of this task instance recorded in Airflow 3.3's ``task_state_store``
        (None before 3.3, or when nothing is recorded)."""
        store = context.get("task_state_store")
        if store is None:
            return None
        try:
            value = store.get(STATE_STORE_KEY)
        except Exception as err:
            self.log.warning("Could not read %r from the task state store (%s); searching Slurm", STATE_STORE_KEY, err)
            return None
        try:
            return None if value is None else int(value)
        except (TypeError, ValueError):
            self.log.warning("Ignoring %r in the task state store: %r is not a job id", STATE_STORE_KEY, value)
            return None

    def _record_job_id(self, context: Any, job_id: int) -> None:
        """Record the try's job in ``task_state_store`` (3.3+), where the next try looks first."""
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            store.set(STATE_STORE_KEY, job_id)
        except Exception as err:
            self.log.warning("Could not record Slurm job %s in the task state store: %s", job_id, err)

    def _deadline(self, context: Any) -> float | None:
        """When the trigger gives up: the end of ``execution_timeout``, counted from the task's start.

        Airflow 2.11 also times the deferral out at that moment, and that would leave the job running,
        so there the trigger fires a little earlier and the task cancels the job itself.
        """
        if self.execution_timeout is None:
            return None
        seconds = self.execution_timeout.total_seconds()
        start = getattr(context["ti"], "start_date", None)
        begin = start.timestamp() if start is not None else time.time()
        margin = 0.0 if AIRFLOW_V_3_0_PLUS else min(60.0, 0.1 * seconds)
        return begin + seconds - margin

    def _defer(self, context: Any, job_id: int) -> None:
        self.defer(
            trigger=SlurmJobTrigger(
                job_id=job_id,
                slurmapi_conn_id=self.slurmapi_conn_id,
                poll_interval=self.poll_interval,
                deadline=self._deadline(context),
                cancel_on_kill=self.cancel_on_kill,
                read_results=self.publish_results,
                staging_uri=staged.uri if (staged := self._task_instance_staging(context)) else None,
                staging_root=root.uri if staged and (root := self.staging_location()) else None,
                masked=self._secret_values() if staged else None,
            ),
            method_name="execute_complete",
        )

    def _wait(self, context: Any, hook: SlurmJobApiHook, job_id: int) -> int:
        try:
            job = hook.wait_for_job(job_id, poll_interval=self.poll_interval, on_poll=self._follower(context))
        except SlurmJobApiError as err:
            raise _fail(err, retry_on_job_failure=self.retry_on_job_failure, policy=self.has_retry_policy) from None
        return self._finish(context, job)

    def _follower(self, context: Any) -> Callable[[SlurmJob], None] | None:
        """With staging, what prints a running job's new output lines in the task log at each poll (a
        single job; an array's tasks show their output when they end)."""
        location = self._task_instance_staging(context)
        if location is None:
            return None
        follower: storage.OutputFollower | None = None

        def follow(job: SlurmJob) -> None:
            nonlocal follower
            if isinstance(job, SlurmArrayJob) or job.start_time is None:
                return
            if follower is None:
                follower = storage.OutputFollower(self.hook.storage_client(), location, job.display_id)
            try:
                lines = follower.poll() + (follower.flush() if job.state.is_terminal else [])
            except Exception as err:  # the storage's fault: the wait goes on, the end reads again
                self.log.warning("Could not read Slurm job %s's staged output: %s", job.display_id, err)
                return
            for record in storage.logged_records(job.display_id, lines):
                self.log.info("%s", redact(record))

        return follow

    def _task_instance_staging(self, context: Any) -> StagingLocation | None:
        """With staging, the prefix of this task instance (its tries' and jobs' prefixes are below it)."""
        location = self.staging_location() if self.publish_results else None
        if location is None:
            return None
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return location.for_task_instance(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index)

    def _finish(self, context: Any, job: SlurmJob) -> int:
        summary = job.summary()
        reading = self._push_job(context, summary, succeeded=job.state.is_success)
        if not job.state.is_success:
            error = failure_error(job)
            raise _fail(
                failures.typed_failure(self._with_quote(str(error), summary), job, retryable=error.retryable),
                retry_on_job_failure=self.retry_on_job_failure,
                policy=self.has_retry_policy,
            )
        return self._succeeded(job.job_id, reading)

    # What the job's result is, in messages (``@task.slurm``: the function's return value).
    result_source = ""

    def _succeeded(self, job_id: int, reading: results.Reading | None) -> Any:
        """The task's return value once its job succeeded: the job id (``@task.slurm``: the function's,
        from ``reading``, what the job published; None when ``publish_results`` is off or nothing ended)."""
        return job_id

    def _push_job(self, context: Any, summary: dict[str, Any], *, succeeded: bool) -> results.Reading | None:
        """XCom ``slurm_job`` (without the output tails), and what the job published: its tails in the log,
        its result as XCom ``slurm_result``. A result that is too large or not JSON fails the task (a failed
        job's own error comes first: there the bad result is only logged)."""
        self._add_peak_memory(summary)
        self._note_for_lineage(summary)
        context["ti"].xcom_push(key=XCOM_JOB, value=_without_published(summary))
        self._record_shown(context, summary)
        used = usage_text(summary)
        if used:
            context["ti"].xcom_push(key=XCOM_USAGE, value=summary["usage"])
            self.log.info("Slurm job %s used %s", summary.get("display_id") or summary.get("job_id"), used)
        if not self.publish_results:
            return None
        reading = self._read_published(context, summary)
        if reading.error and self.result_source:
            reading.error = reading.error.replace(results.RESULT_FILE_WORDS, self.result_source)
        for line in reading.log:
            # the job's own output: what Airflow masks stays masked (also where a log handler would not)
            self.log.info("%s", redact(line))
        if reading.error and succeeded:
            raise SlurmJobFailedNoRetry(reading.error)
        if reading.error:
            self.log.warning(reading.error)
        if reading.has_result:
            context["ti"].xcom_push(key=XCOM_RESULT, value=reading.result)
            self.log.info("Pushed the job's result as XCom %r", XCOM_RESULT)
        return reading

    def _add_peak_memory(self, summary: dict[str, Any]) -> None:
        """The job's max RSS in ``summary["usage"]`` (in place): the record the wait ended on, the active
        queue's, holds no step statistics, so accounting is read once (a second or two more while slurmdbd
        has not recorded the end yet). Unknown when accounting cannot be read or holds none."""
        used = summary.get("usage")
        if not isinstance(used, dict) or used.get("max_rss_bytes") is not None:
            return
        entries = summary["tasks"] if isinstance(summary.get("tasks"), list) else [summary]
        if all(isinstance(entry, Mapping) and entry.get("source") == "slurmdb" for entry in entries):
            return  # accounting's own records: what they hold is all there is
        starts = frozenset(
            datetime.fromisoformat(entry["start_time"])
            for entry in entries
            if isinstance(entry, Mapping) and isinstance(entry.get("start_time"), str)
        )
        if not starts:
            return
        job_id = summary.get("job_id")
        try:
            peak = self.hook.peak_memory(str(job_id), starts)
        except SlurmAccountingUnavailableError:  # its message says "retried": this one-try read is not
            self.log.info("Slurm job %s's max RSS is unknown: Slurm's accounting (slurmdbd) did not answer", job_id)
            return
        except Exception as err:  # a figure is not worth failing the task for
            self.log.info("Slurm job %s's max RSS is unknown: accounting could not be read (%s)", job_id, err)
            return
        if peak is not None:
            used["max_rss_bytes"] = peak

    def _read_published(self, context: Any, summary: dict[str, Any]) -> results.Reading:
        """What the job published; with what it staged in Cloud Storage read from there (and XCom
        ``slurm_output_uri`` naming it)."""
        location = self.staging_location() if _staged_anything(summary) else None
        if location is None:
            return results.read(summary)

        def location_of(item: Mapping[str, Any], report: staging.StagedReport) -> StagingLocation:
            # below the try that submitted the job: a later try that reattached to it reads it there
            job = str(item.get("display_id") or item.get("job_id"))
            return self._for_try(context, location, report.try_number).for_job(job, report.run)

        reading, uris = storage.read_staged(
            summary, self.hook.storage_client(), location_of, self.output_tail_lines, self.max_result_bytes
        )
        if uris:
            value: Any = uris if isinstance(summary.get("tasks"), list) else next(iter(uris.values()))
            context["ti"].xcom_push(key=XCOM_OUTPUT_URI, value=value)
            self.log.info("The job's full output is in %s (XCom %r)", value, XCOM_OUTPUT_URI)
        return reading

    def _record_shown(self, context: Any, summary: dict[str, Any]) -> None:
        """XCom ``slurm_published``, for the job page: the job's comment and what it published (from
        ``summary``) as this task's log shows them, masked (see ``results.shown_record``)."""
        comment = self.job.get("comment") if isinstance(self.job, Mapping) else None  # as build_spec took it
        shown = results.shown_record(summary, comment if isinstance(comment, str) else "", redact)
        context["ti"].xcom_push(key=results.XCOM_SHOWN, value=shown)

    def _with_quote(self, message: str, summary: dict[str, Any]) -> str:
        """A failure's message, with what the job used and the last lines of its stderr when it published
        them."""
        used = usage_text(summary)
        if used:
            message = f"{message}\nIt used {used}."
        quote = str(redact(results.read(summary).quote)) if self.publish_results else ""
        return f"{message}\nLast lines of its stderr:\n{quote}" if quote else message

    def execute_complete(self, context: Any, event: dict[str, Any]) -> int:
        """Resume after the trigger's event (a :class:`~airflow_provider_slurmapi.api.job_event.JobEvent`)."""
        ended = JobEvent.from_payload(event)
        job_id = int(ended.job_id)
        self.job_id = job_id
        self._note_for_lineage(None)
        reading = None
        if ended.job is not None and ended.status in (SUCCESS, FAILED):
            reading = self._push_job(context, ended.job, succeeded=ended.status == SUCCESS)
        elif ended.job is not None:
            self._note_for_lineage(ended.job)
            context["ti"].xcom_push(key=XCOM_JOB, value=_without_published(ended.job))
        if ended.status == SUCCESS:
            self.log.info(ended.message)
            return self._succeeded(job_id, reading)
        if ended.status == TIMEOUT:
            self._cancel(job_id, "its execution_timeout passed")
            raise SlurmJobFailedNoRetry(
                f"{ended.message}: execution_timeout reached, so Slurm job {job_id} was cancelled."
            )
        if ended.status == FAILED:
            message = self._with_quote(ended.message, ended.job or {})
            error = failures.typed_failure(message, ended.job, retryable=ended.retryable)
            raise _fail(error, retry_on_job_failure=self.retry_on_job_failure, policy=self.has_retry_policy)
        raise SlurmJobError(f"Waiting for Slurm job {job_id} failed: {ended.message}")

    def _note_for_lineage(self, summary: Mapping[str, Any] | None) -> None:
        """Keep what the task's OpenLineage events tell of its job, in the task's process, where Airflow's
        OpenLineage listener asks for it: the job's summary once it ended, and its cluster (read from the
        connection here, not in the listener's forked process; only when OpenLineage is enabled)."""
        if summary is not None:
            self._lineage_summary = dict(summary)
        if self._lineage_cluster is None and lineage.enabled():
            try:
                self._lineage_cluster = lineage.cluster_name(self.hook.settings.cluster)
            except Exception as err:  # lineage never fails the task
                self.log.warning("OpenLineage: could not read the cluster of %r (%s)", self.slurmapi_conn_id, err)
                self._lineage_cluster = ""

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The run facets of the task's Slurm job (``externalQuery`` and ``slurmJob``, see
        :mod:`airflow_provider_slurmapi.lineage`), for Airflow's OpenLineage listener (the ``openlineage``
        extra): none when no job was submitted."""
        from airflow_provider_slurmapi.lineage.facets import operator_lineage

        return operator_lineage(
            self.job_id,
            self._lineage_summary,
            cluster=self._lineage_cluster or "",
            connection_id=self.slurmapi_conn_id,
        )

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """As :meth:`get_openlineage_facets_on_complete`, for a failed task: the failed job's state, reason, exit
        code and usage are in ``slurmJob``."""
        return self.get_openlineage_facets_on_complete(task_instance)

    def _cancel(self, job_id: int, why: str) -> None:
        self.log.info("Cancelling Slurm job %s because %s", job_id, why)
        try:
            self.hook.cancel_job(job_id)
        except SlurmJobApiError as err:
            self.log.error("Could not cancel Slurm job %s: %s", job_id, err)

    def on_kill(self) -> None:
        if not self.cancel_on_kill:
            return
        job_id = self.job_id if self.job_id is not None else self._submitted_job_id()
        if job_id is not None:
            self._cancel(job_id, "the task was killed")

    def _submitted_job_id(self) -> int | None:
        """This try's job, from its ``slurm_job_id`` XCom, for a process that has not seen the submit.

        Airflow 2.11 resumes a deferred task that comes back after its ``execution_timeout`` with an
        immediate AirflowTaskTimeout and on_kill, before ``execute_complete`` runs.
        """
        ti = getattr(self, "_ti", None)
        if ti is None:
            return None
        try:
            job_id = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_ID, map_indexes=getattr(ti, "map_index", None))
        except Exception as err:
            self.log.warning("Could not read this try's Slurm job id (%s); no job to cancel", err)
            return None
        return None if job_id is None else int(job_id)


def _staged_anything(summary: Mapping[str, Any]) -> bool:
    """Whether the job (or a task of the array) published a staging report."""
    tasks = summary.get("tasks")
    items = tasks if isinstance(tasks, list) else [summary]
    return any(
        isinstance(item, Mapping) and isinstance(item.get("published"), Mapping) and item["published"].get("staged")
        for item in items
    )


def _without_published(summary: dict[str, Any]) -> dict[str, Any]:
    """A job summary for XCom ``slurm_job``: the published output tails stay in the task log only."""
    plain = {k: v for k, v in summary.items() if k != "published"}
    if isinstance(plain.get("tasks"), list):
        plain["tasks"] = [
            {k: v for k, v in t.items() if k != "published"} if isinstance(t, dict) else t for t in plain["tasks"]
        ]
    return plain


class SlurmCancelJobOperator(SlurmApiHookMixin, BaseOperator):
    """Cancel a Slurm job; succeeds also when the job had already finished.

    .. seealso::
        How to use it: :doc:`/operators/slurmapi`.

    :param job_id: the Slurm job id (templated, e.g. ``{{ ti.xcom_pull('train') }}``).
    :param wait_for_termination: wait until the job has really stopped (default True).
    :param poll_interval: seconds between checks while waiting (default 5; a finite number above 0).
    :param slurmapi_conn_id: the ``slurmapi`` connection (default ``slurmapi_default``).
    """

    template_fields: Sequence[str] = ("job_id",)

    def __init__(
        self,
        *,
        job_id: int | str,
        wait_for_termination: bool = True,
        poll_interval: float = 5.0,
        slurmapi_conn_id: str = SlurmJobApiHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_id = job_id
        self.wait_for_termination = checks.flag(wait_for_termination, "wait_for_termination")
        self.poll_interval = checks.seconds(poll_interval, "poll_interval")
        self.slurmapi_conn_id = slurmapi_conn_id

    def execute(self, context: Any) -> dict[str, Any] | None:
        hook = self.hook
        try:
            hook.cancel_job(self.job_id)
            if not self.wait_for_termination:
                return None
            job = hook.wait_for_job(self.job_id, poll_interval=self.poll_interval)
        except SlurmJobApiError as err:
            raise _fail(err, retry_on_job_failure=False) from None
        self.log.info(outcome_text(job))
        return job.summary()
