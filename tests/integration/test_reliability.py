"""Never lose, never duplicate: the provider against the emulator's injected faults."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.api.errors import SlurmJobApiError
from airflow_provider_slurmapi.api.identity import TaskIdentity, TaskTry
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.fixtures import task_jobs

CWD = "/home/tester"
FAST = {"retries": 3, "retry_delay": 0.05, "timeout": 2}


@pytest.fixture
def hook(slurmapi_emulator, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", slurmapi_emulator.connection_json(**FAST))
    return SlurmJobApiHook()


def submit(hook, script="#!/bin/bash\nsleep 1\n", **job):
    return hook.submit_job(script, {"current_working_directory": CWD, **job})


@pytest.mark.parametrize("kind", ["unavailable", "resource_exhausted", "internal", "reset", "malformed"])
def test_a_wait_rides_out_transient_faults(hook, slurmapi_emulator, kind):
    job_id = submit(hook)
    slurmapi_emulator.inject_fault(kind, count=6, method=None)
    job = hook.wait_for_job(job_id, poll_interval=0.1, timeout=60)
    assert job.state.is_success
    assert slurmapi_emulator.faults.fired.count(kind) == 6


def test_replies_slower_than_the_timeout_are_retried(hook, slurmapi_emulator):
    job_id = submit(hook)
    slurmapi_emulator.inject_fault("slow", count=2, delay=3.0, path_contains=f"/job/{job_id}")
    assert hook.wait_for_job(job_id, poll_interval=0.1, timeout=60).state.is_success


def test_slurmdbd_down_while_the_job_leaves_the_queue(hook, slurmapi_emulator):
    job_id = submit(hook, "#!/bin/bash\ntrue\n")
    slurmapi_emulator.wait_for_state(job_id, "COMPLETED", 30)
    slurmapi_emulator.set_slurmdbd_down(True)
    slurmapi_emulator.purge(job_id)
    with pytest.raises(SlurmJobApiError) as info:
        hook.get_job(job_id)
    assert info.value.retryable
    slurmapi_emulator.set_slurmdbd_down(False)
    assert hook.wait_for_job(job_id, poll_interval=0.1, timeout=30).state.is_success


def test_a_read_that_slurmrestd_answers_502_is_tried_again(hook, slurmapi_emulator):
    job_id = submit(hook, "#!/bin/bash\ntrue\n")
    slurmapi_emulator.wait_for_state(job_id, "COMPLETED", 30)
    slurmapi_emulator.inject_fault("slurmdbd_down", count=2)
    assert job_id in [j.job_id for j in hook.list_accounted_jobs()]
    assert slurmapi_emulator.faults.fired.count("slurmdbd_down") == 2
    # Past the tries, Slurm's answer is the error, named as such.
    slurmapi_emulator.inject_fault("slurmdbd_down", count=None)
    with pytest.raises(SlurmJobApiError, match="7000"):
        hook.list_accounted_jobs()


def test_token_endpoint_failures_and_early_expiry(hook, slurmapi_emulator):
    job_id = submit(hook, "#!/bin/bash\nsleep 2\n")
    slurmapi_emulator.expire_tokens()
    slurmapi_emulator.inject_fault("token_error", count=2)
    assert hook.wait_for_job(job_id, poll_interval=0.2, timeout=60).state.is_success


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_token_revoked_while_a_call_is_retried_is_refreshed(hook, slurmapi_emulator, client):
    # Found by the chaos suite: a 401 on a call's second try (the first met a 503) failed the call,
    # and with it the task's wait, instead of fetching a new token.
    import asyncio

    from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient

    job_id = submit(hook, "#!/bin/bash\ntrue\n")
    slurmapi_emulator.expire_tokens()
    slurmapi_emulator.inject_fault("unavailable", count=1)  # faults answer before the token is checked
    if client == "sync":
        job = hook.get_job(job_id)
    else:
        settings = hook.settings

        async def read():
            async with AsyncSlurmJobApiClient(settings.cluster, **settings.client_kwargs()) as aclient:
                return await aclient.get_job(job_id)

        job = asyncio.run(read())
    assert job.job_id == job_id
    assert [call.status for call in slurmapi_emulator.calls[-3:]] == [503, 401, 200]


def test_requeued_job_is_still_waited_on(hook, slurmapi_emulator):
    # The first run lasts until it is failed (however slow the machine); the requeued run ends at once.
    job_id = submit(hook, '#!/bin/bash\n[ "$SLURM_RESTART_COUNT" = 1 ] || sleep 60\n')
    slurmapi_emulator.wait_for_state(job_id, "RUNNING", 30)
    slurmapi_emulator.fail_job(job_id, "NODE_FAIL", requeue=True)
    job = hook.wait_for_job(job_id, poll_interval=0.1, timeout=60)
    # The wait did not stop at NODE_FAIL: it followed the requeued run to its end.
    assert job.state.is_success
    assert slurmapi_emulator.job(job_id)["restart_cnt"] == 1


def test_node_fail_is_a_retryable_failure(hook, slurmapi_emulator):
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_provider_slurmapi.api.failures import SlurmNodeFailureError
    from airflow_provider_slurmapi.api.watch import failure_error
    from airflow_provider_slurmapi.operators.slurmapi import SlurmJobError, _fail

    job_id = submit(hook, "#!/bin/bash\nsleep 30\n")
    slurmapi_emulator.wait_for_state(job_id, "RUNNING", 30)
    slurmapi_emulator.fail_job(job_id, "NODE_FAIL")
    job = hook.wait_for_job(job_id, poll_interval=0.1, timeout=60)
    assert job.state.base == "NODE_FAIL" and job.state.is_retryable_failure
    error = _fail(failure_error(job), retry_on_job_failure=False)
    assert isinstance(error, SlurmNodeFailureError) and isinstance(error, SlurmJobError)
    assert not isinstance(error, AirflowFailException) and "retry may succeed" in str(error)


def test_purged_while_running_is_followed_in_accounting(hook, slurmapi_emulator):
    job_id = submit(hook, "#!/bin/bash\nsleep 1\n")
    slurmapi_emulator.wait_for_state(job_id, "RUNNING", 30)
    slurmapi_emulator.purge(job_id)
    assert hook.wait_for_job(job_id, poll_interval=0.1, timeout=60).state.is_success


def task_spec(script: str, run_id: str, task_try: TaskTry) -> tuple[JobSpec, TaskIdentity]:
    identity = TaskIdentity.of("d", "t", run_id, -1, task_try)
    return JobSpec.build(script, {"current_working_directory": CWD, "name": identity.job_name("d.t")}), identity


@pytest.mark.parametrize("kind", ["lost_reply", "unavailable_after", "deadline_exceeded_after", "internal_after"])
def test_a_submit_of_unknown_fate_gives_exactly_one_job(hook, slurmapi_emulator, kind):
    spec, identity = task_spec("#!/bin/bash\ntrue\n", f"run-{kind}", TaskTry(1))
    slurmapi_emulator.inject_fault(kind, count=1, path_contains="job/submit")
    outcome = hook.submit_once(spec, identity)
    assert outcome.reattached
    assert [j["job_id"] for j in task_jobs(slurmapi_emulator)] == [outcome.job_id]
    # Without slurm_user, the look-up learnt its user from a held job, cancelled at once.
    assert [j["state"] for j in slurmapi_emulator.jobs() if j not in task_jobs(slurmapi_emulator)] == [["CANCELLED"]]
    # The task's next try finds the same job again.
    spec, identity = task_spec("#!/bin/bash\ntrue\n", f"run-{kind}", TaskTry(2))
    again = hook.submit_once(spec, identity)
    assert again.reattached and again.job_id == outcome.job_id
    assert len(task_jobs(slurmapi_emulator)) == 1


def test_a_failed_earlier_job_is_resubmitted_on_retry(hook, slurmapi_emulator):
    spec, identity = task_spec("#!/bin/bash\nexit 1\n", "run-2", TaskTry(1))
    first = hook.submit_once(spec, identity)
    slurmapi_emulator.wait_for_state(first.job_id, "FAILED", 30)
    spec, identity = task_spec("#!/bin/bash\nexit 1\n", "run-2", TaskTry(2))
    second = hook.submit_once(spec, identity)
    assert not second.reattached and second.job_id != first.job_id


def test_a_cleared_task_cancels_its_earlier_runs_job_before_it_submits(hook, slurmapi_emulator):
    script = "#!/bin/bash\nsleep 300\n"
    spec, identity = task_spec(script, "run-3", TaskTry(1))
    first = hook.submit_once(spec, identity)
    slurmapi_emulator.wait_for_state(first.job_id, "RUNNING", 30)
    # Try 1 was cleared while its job ran; try 2 starts a new run of tries.
    spec, identity = task_spec(script, "run-3", TaskTry(2, run_start=2))
    second = hook.submit_once(spec, identity)
    assert not second.reattached and second.cancelled == [first.job_id]
    jobs = {j["job_id"]: j for j in task_jobs(slurmapi_emulator)}
    assert set(jobs) == {first.job_id, second.job_id}
    assert hook.get_job(first.job_id).state.base == "CANCELLED"
    # Cancelled first, submitted after: the two never ran at the same time.
    assert [c[:2] for c in slurmapi_emulator.calls if c[0] in ("DELETE", "POST")][-2:] == [
        ("DELETE", f"/slurm/v0.0.42/job/{first.job_id}"),
        ("POST", "/slurm/v0.0.42/job/submit"),
    ]
    hook.cancel_job(second.job_id)


def test_persistent_faults_exhaust_the_error_budget(hook, slurmapi_emulator):
    job_id = submit(hook, "#!/bin/bash\nsleep 30\n")
    slurmapi_emulator.inject_fault("unavailable", count=None)
    with pytest.raises(SlurmJobApiError, match="consecutive failed polls"):
        hook.wait_for_job(job_id, poll_interval=0.05, timeout=120, error_budget=3)
