"""The chaos suite's DAGs: N submit-and-wait tasks (half waiting in the worker, half deferred), with retries.

``chaos`` uses the provider as shipped; ``chaos_naive`` is the baseline the benchmark compares against: the
same tasks through an operator that does what a provider without task-instance tags does. The size, the
simulated job's runtime and the cluster's working directory come from the run's conf
(``{"tasks": 100, "runtime": 1.0, "cwd": ...}``); ``chaos_purged_retries`` waits past MinJobAge before
each retry (for real Slurm). Run them with ``tests/harness/chaos.py``, which arms the faults (the chaos
tests and ``python -m benchmarks.chaos`` do).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

from airflow_provider_slurmapi.api.errors import SlurmJobApiError
from airflow_provider_slurmapi.operators.slurmapi import SlurmJobError, SlurmSubmitJobOperator

CWD = "/home/tester/chaos"
# Airflow's retries; retry_delay outlasts a reply that arrives after the client's timeout, so that the
# next try's look-up sees a job whose submit was slow to land.
RETRIES = 5
RETRY_DELAY = timedelta(seconds=3)
# On real Slurm (MinJobAge 10 s, purged on a 10 s sweep, a sweep now and then skipped): a retry that comes
# after the job of an earlier try has left the active queue, so accounting alone can tell it.
PURGED_RETRY_DELAY = timedelta(seconds=35)
POLL_INTERVAL = 0.2
SCRIPT = "#!/bin/bash\n#EMULATOR runtime={{ params.runtime }} exit=0\necho chaos task $CHAOS_TASK\n"
# Each of these is mapped over its share of the run's tasks: the first half waits in the worker, the
# second half defers to the triggerer.
WAITS = {"sync": False, "deferred": True}
NAIVE_SUBMIT_ATTEMPTS = 3
DAGS: dict[str, DAG] = {}


class NaiveSubmitJobOperator(SlurmSubmitJobOperator):
    """The baseline: submit, submit again when the submit call fails, and submit anew on every task try.

    The job is still named after its task instance (so the benchmark can count jobs per task), but
    nothing looks it up: no reattach, no check after a lost reply.
    """

    def execute(self, context: Any) -> int:
        hook = self.hook
        spec = self.build_spec(context)
        for attempt in range(1, NAIVE_SUBMIT_ATTEMPTS + 1):
            try:
                self.job_id = hook.submit(spec).job_id
                break
            except SlurmJobApiError as err:
                if attempt == NAIVE_SUBMIT_ATTEMPTS:
                    raise SlurmJobError(str(err)) from None
        assert self.job_id is not None
        if self.deferrable:
            self._defer(context, self.job_id)
        return self._wait(context, hook, self.job_id)


@task
def chaos_tasks(wait: str, params: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """One environment per task of this half of the run; mapping over it makes one task instance each."""
    total = int((params or {})["tasks"])
    first = 0 if wait == "sync" else (total + 1) // 2
    last = (total + 1) // 2 if wait == "sync" else total
    return [{"CHAOS_TASK": str(n)} for n in range(first, last)]


def _chaos_dag(dag_id: str, operator: type[SlurmSubmitJobOperator], retry_delay: timedelta = RETRY_DELAY) -> DAG:
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        params={"tasks": 100, "runtime": 1.0, "cwd": CWD},
        default_args={"retries": RETRIES, "retry_delay": retry_delay},
    ) as dag:
        for wait, deferrable in WAITS.items():
            operator.partial(
                task_id=f"submit_{wait}",
                script=SCRIPT,
                current_working_directory="{{ params.cwd }}",
                time_limit=10,
                deferrable=deferrable,
                poll_interval=POLL_INTERVAL,
            ).expand(environment=chaos_tasks.override(task_id=f"tasks_{wait}")(wait))
    DAGS[dag_id] = dag
    return dag


chaos = _chaos_dag("chaos", SlurmSubmitJobOperator)
chaos_naive = _chaos_dag("chaos_naive", NaiveSubmitJobOperator)
chaos_purged_retries = _chaos_dag("chaos_purged_retries", SlurmSubmitJobOperator, PURGED_RETRY_DELAY)
