"""A task that fails says why where the user looks first, and nothing else at error level."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_0_PLUS
from tests.integration.test_operators import run, state

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_failure_before_the_submit_logs_no_missing_link(slurmapi_emulator, capfd):
    """Airflow 3 reads the task's extra links as it ends: a task that failed before its job was known
    had stored no link, and the SDK logged ``XCom not found ... key=slurm_job_link`` at error level."""
    _, tis = run("submit_no_cwd")
    out, err = capfd.readouterr()
    assert state(tis["train"]) == "failed"
    assert "current_working_directory" in out + err  # the real cause is in the log
    assert "XCom not found" not in out + err and "slurm_job_link" not in out + err


@pytest.mark.parametrize("deferrable", [False, True])
def test_the_link_is_the_stored_one(slurmapi_emulator, deferrable):
    """Airflow 3 keeps the link it reads as the task ends: known in the process that stored it (no XCom
    read), read from XCom by a task resumed after deferring. Airflow 2 reads it in the web server, from
    an operator that never ran (the XCom)."""
    from airflow_provider_slurmapi.links.slurmapi import SlurmJobLink

    _, tis = run(f"submit_wait_{deferrable}")
    ti = tis["train"]
    stored = ti.xcom_pull(task_ids="train", key="slurm_job_link")
    assert stored["job_id"] == str(ti.xcom_pull(task_ids="train"))
    if AIRFLOW_V_3_0_PLUS:  # the provider's job page (Airflow 2 has none: no URL without a template)
        assert stored["url"]
        assert ti.xcom_pull(task_ids="train", key=SlurmJobLink().xcom_key) == stored["url"]
    else:
        assert SlurmJobLink().get_link(object(), ti_key=ti.key) == stored["url"]


def test_a_comment_with_a_control_character_is_refused_before_anything_is_sent(slurmapi_emulator, capfd):
    """A (templated) comment carrying the publication mark would pass for the job's result: refused,
    naming the field, before the submit."""
    _, tis = run("submit_forged_comment")
    out, err = capfd.readouterr()
    assert state(tis["train"]) == "failed"
    assert "comment: contains the control character '\\x1e' at offset 0" in out + err, (out + err)[-2000:]
    assert slurmapi_emulator.jobs() == []


@pytest.mark.parametrize("wrong", ["cluster_id", "permission"])
def test_a_connection_that_cannot_work_fails_the_task_without_its_retries(slurmapi_emulator, monkeypatch, wrong):
    """Google's 404 (no such cluster) or 403 (no permission) answers every try alike: the task fails at
    once (AirflowFailException), it does not spend its three retries; the log says what to fix."""
    extra = {"cluster_id": "no-such-cluster"} if wrong == "cluster_id" else {}
    conn = slurmapi_emulator.connection_json(retries=0, **extra)
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_WRONG", conn)
    if wrong == "permission":
        slurmapi_emulator.allowed_principals.clear()  # (this test's own emulator) nobody may run jobs
    _, tis = run("submit_wrong_connection")
    ti = tis["train"]
    assert state(ti) == "failed" and ti.try_number == 1, (state(ti), ti.try_number)
    assert slurmapi_emulator.jobs() == []
