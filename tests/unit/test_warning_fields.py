"""``kill_warning_signal``, ``kill_warning_delay`` and ``requeue`` on the operator and the decorators: the Slurm
fields they send (what Slurm does with them: tests/real_slurm/test_scenarios_signals.py)."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.shapes import no_val
from airflow_provider_slurmapi.api.spec import JobSpec, warning_signal
from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator

SCRIPT = "#!/bin/bash\ntrue\n"


def fields(**kwargs) -> dict:
    op = SlurmSubmitJobOperator(task_id="t", script=SCRIPT, current_working_directory="/h", **kwargs)
    return op.job_fields("dag", "t")


@pytest.mark.parametrize(("given", "name"), [("USR1", "USR1"), ("sigusr2", "USR2"), (10, "USR1"), (" 14 ", "ALRM")])
def test_a_signal_is_sent_by_the_name_slurm_knows(given, name):
    assert warning_signal(given) == name


def test_the_warning_goes_to_the_batch_script_with_slurms_default_delay():
    sent = JobSpec.build(SCRIPT, fields(kill_warning_signal="SIGUSR1", time_limit=10)).job
    assert sent["kill_warning_signal"] == "USR1" and sent["kill_warning_delay"] == no_val(60)
    assert sent["kill_warning_flags"] == ["BATCH_JOB"]
    assert results.warning_of(sent) == ("USR1", True)  # the wrapper passes it on to the script


def test_the_job_dict_wins_and_full_job_leaves_the_signal_to_slurm():
    sent = fields(kill_warning_signal="USR1", kill_warning_delay=300, job={"kill_warning_flags": ["FULL_JOB"]})
    assert sent["kill_warning_delay"] == 300
    assert results.warning_of(JobSpec.build(SCRIPT, sent).job) == ("USR1", False)


def test_without_a_warning_or_requeue_nothing_is_sent():
    sent = fields()
    assert not {"kill_warning_signal", "kill_warning_delay", "kill_warning_flags", "requeue"} & set(sent)
    assert results.warning_of(sent) == ("", False)


@pytest.mark.parametrize("requeue", [True, False])
def test_requeue_is_sent_as_given(requeue):
    assert fields(requeue=requeue)["requeue"] is requeue


def test_the_decorators_take_them():
    from airflow_provider_slurmapi.decorators.slurm import _SlurmPythonDecoratedOperator

    def train() -> int:
        return 1

    op = _SlurmPythonDecoratedOperator(
        task_id="train",
        python_callable=train,
        current_working_directory="/h",
        kill_warning_signal="USR2",
        kill_warning_delay=120,
        requeue=False,
    )
    sent = op.job_fields("dag", "train")
    assert (sent["kill_warning_signal"], sent["kill_warning_delay"], sent["requeue"]) == ("USR2", 120, False)
