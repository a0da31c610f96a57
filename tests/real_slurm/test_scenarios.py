"""What the exactly-once rules rely on, proven by the same scenarios on the emulator and on real Slurm.

Each test runs twice, ``[emulator]`` and ``[real]`` (see ``backends.py``: both through the emulator's
Google layer; on ``real`` every Slurm call is answered by slurmrestd 24.11 with the default
``AccountingStoreFlags``). A recorded reply proves a shape; these prove behaviour.

Facts of Slurm that decisions of the provider depend on (``api/reattach.py``, ``api/operations.py``):

1. Accounting keeps a job's name and user, and not its comment (``"comment": {"job": ""}``) unless the
   cluster sets ``AccountingStoreFlags=job_comment``: the task's identity lives in the name.
2. A finished job leaves ``/slurm/.../job/{id}`` some time after ``MinJobAge``; then only ``/slurmdb``
   knows it (the reattach search must ask accounting).
3. A job slurmctld accepted is listed by ``GET /slurm/.../jobs/`` at once: a look right after a submit
   of unknown fate sees it.
4. ``/slurmdb/.../jobs/?job_name=X`` answers the jobs named exactly X, not those whose names start so.
5. A reply's ``meta.client.user`` is not the caller (it is slurmrestd's peer); the job's ``user_name``
   is: the caller's user cannot be learned from ``meta``, only from its jobs or the connection.
6. Another user's job is listed with that user's name, and the caller cannot cancel it.
7. A DELETE of a job that has finished reads as "already finished", also once it left the queue.
8. Accounting records a job that Slurm ended (a cancel) with the job-level exit code SUCCESS/0 and the
   signal on its batch step: what ended a job is read from the batch step (``api/jobs.py``).

Then the provider's promises on both: a retry after the job left the queue reattaches to a COMPLETED
job (one job) and runs a FAILED one again (one new job); a submit answered 503 after Slurm accepted it
gives one job, also when the look-up comes after the job left the queue; another user's job under the
task's name is neither reattached nor cancelled; a cleared task cancels its earlier run's job first;
with slurmdbd down, a retry that cannot know never submits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from backends import Backend

from airflow_provider_slurmapi.api.errors import GoogleApiError, SlurmJobApiError
from airflow_provider_slurmapi.api.identity import TaskIdentity, TaskTry
from airflow_provider_slurmapi.api.reattach import SubmitOutcomeUnknownError
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from tests.harness.real_slurm import SCENARIO_RESOLVED

pytestmark = pytest.mark.timeout(600)
SLEEP = "#!/bin/bash\nsleep 300\n"
QUICK = "#!/bin/bash\necho done\n"


@pytest.fixture
def hook(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmJobApiHook]:
    made = backend.connect(monkeypatch)
    yield made
    backend.emu.clear_faults()
    for job in made.list_jobs():
        if job.user == backend.user and not job.state.is_terminal:
            made.cancel_job(job.job_id)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def task(run_id: str, number: int = 1, run_start: int = 1) -> TaskIdentity:
    return TaskIdentity.of("scenario", "train", run_id, -1, TaskTry(number, run_start))


# ---- facts ----------------------------------------------------------------------------------------


def test_accounting_keeps_the_name_and_user_but_not_the_comment(backend, hook):
    name = unique("fact1")
    job_id = hook.submit(backend.spec(QUICK, name=name, comment="airflow-ti:d/t/r/-1 try:1")).job_id
    queued = hook.get_job(job_id)
    assert queued.comment == "airflow-ti:d/t/r/-1 try:1"  # the active queue has it
    backend.wait_for_end(hook, job_id)
    gone = backend.wait_until_left_queue(hook, job_id)  # fact 2
    assert (gone.name, gone.user, gone.comment) == (name, backend.user, "")
    assert gone.state.is_success


def test_an_accepted_job_is_listed_at_once(backend, hook):
    job_id = hook.submit(backend.spec(SLEEP, name=unique("fact3"))).job_id
    assert job_id in {j.job_id for j in hook.list_jobs()}


def test_accountings_name_filter_is_exact(backend, hook):
    name = unique("fact4")
    exact = hook.submit(backend.spec(QUICK, name=name)).job_id
    longer = hook.submit(backend.spec(QUICK, name=name + "x")).job_id
    for job_id in (exact, longer):
        backend.wait_for_end(hook, job_id)
    (found,) = backend.accounted(hook, name, count=1)
    assert found.job_id == exact
    assert {j.job_id for j in hook.list_accounted_jobs(job_name=name)} == {exact}


def test_replies_name_slurmrestds_peer_not_the_caller(backend, hook):
    job_id = hook.submit(backend.spec(QUICK, name=unique("fact5"))).job_id
    status, body = hook.call_slurm("GET", f"/slurm/{SCENARIO_RESOLVED}/job/{job_id}")
    assert status == 200
    assert body["jobs"][0]["user_name"] == backend.user
    assert body["meta"]["client"]["user"] != backend.user


def test_another_users_job_is_listed_as_theirs_and_cannot_be_cancelled_by_us(backend, hook, monkeypatch):
    other = backend.other_hook(monkeypatch)
    job_id = other.submit(backend.other_spec(SLEEP, name=unique("fact6"))).job_id
    listed = {j.job_id: j for j in hook.list_jobs()}
    assert listed[job_id].user == backend.other_user
    with pytest.raises(SlurmJobApiError, match="2002"):  # v0.0.42+: 200 with status[] "Access/permission denied"
        hook.cancel_job(job_id)
    assert not other.get_job(job_id).state.is_terminal
    other.cancel_job(job_id)


def test_a_cancel_of_a_finished_job_reads_as_finished(backend, hook):
    job_id = hook.submit(backend.spec(QUICK, name=unique("fact7"))).job_id
    backend.wait_for_end(hook, job_id)
    assert hook.cancel_job(job_id).already_finished
    backend.wait_until_left_queue(hook, job_id)
    assert hook.cancel_job(job_id).already_finished


def test_a_cancelled_job_reads_as_killed_by_its_signal_in_accounting(backend, hook):
    name = unique("fact8")
    job_id = hook.submit(backend.spec("#!/bin/bash\necho started\nsleep 300\n", name=name)).job_id
    # RUNNING is Slurm's word, not the script's: a cancel that lands before slurmstepd has launched the
    # script is answered with SIGKILL after KillWait (CI's 3.3 run, under load, read signal 9). Cancel once the
    # script itself has written.
    out = backend.host_path(backend.wait_until_running(hook, job_id).standard_output)
    deadline = time.monotonic() + 60
    while not (out.exists() and "started" in out.read_text()):
        assert time.monotonic() < deadline, f"{backend.name}: job {job_id}'s script never started"
        time.sleep(0.2)
    hook.cancel_job(job_id)
    backend.wait_for_end(hook, job_id)
    deadline = time.monotonic() + 60
    while not (accounted := [j for j in hook.list_accounted_jobs(job_name=name) if j.state.is_terminal]):
        assert time.monotonic() < deadline, f"{backend.name}: accounting never recorded job {job_id}'s end"
        time.sleep(0.5)
    [job] = accounted
    assert job.state.base == "CANCELLED" and job.raw["exit_code"]["status"] == ["SUCCESS"], job.raw["exit_code"]
    assert (job.exit_code.signal, job.exit_code.status) == (15, ("SIGNALED",)), job.raw.get("steps")
    assert str(job.exit_code) == "signal 15 (TERM)"


# ---- the provider's promises ----------------------------------------------------------------------


def submit_task(backend: Backend, hook: SlurmJobApiHook, identity: TaskIdentity, script: str = QUICK, **kw):
    spec = backend.spec(script, name=identity.job_name("scenario.train"))
    return hook.submit_once(spec, identity, **kw)


def test_a_retry_after_the_completed_job_left_the_queue_reattaches(backend, hook):
    run_id = unique("completed")
    first = submit_task(backend, hook, task(run_id, 1))
    backend.wait_for_end(hook, first.job_id)
    backend.wait_until_left_queue(hook, first.job_id)
    again = submit_task(backend, hook, task(run_id, 2))
    assert again.reattached and again.job_id == first.job_id and again.job.source == "slurmdb"
    assert [j.job_id for j in backend.accounted(hook, task(run_id).job_name("scenario.train"), count=1)] == [
        first.job_id
    ]


def test_a_retry_after_the_failed_job_left_the_queue_runs_one_new_job(backend, hook):
    run_id = unique("failed")
    first = submit_task(backend, hook, task(run_id, 1), "#!/bin/bash\nexit 3\n")
    assert backend.wait_for_end(hook, first.job_id).state.base == "FAILED"
    backend.wait_until_left_queue(hook, first.job_id)
    second = submit_task(backend, hook, task(run_id, 2))
    assert not second.reattached and second.job_id != first.job_id
    backend.wait_for_end(hook, second.job_id)
    name = task(run_id).job_name("scenario.train")
    assert sorted(j.job_id for j in backend.accounted(hook, name, count=2)) == [first.job_id, second.job_id]


@pytest.mark.parametrize("kind", ["unavailable_after", "deadline_exceeded_after"])
def test_a_submit_answered_5xx_after_slurm_accepted_it_gives_one_job(backend, hook, kind):
    run_id = unique(kind)
    fired = len(backend.emu.faults.fired)
    backend.emu.inject_fault(kind, count=1, path_contains="job/submit")
    outcome = submit_task(backend, hook, task(run_id, 1), SLEEP)
    assert outcome.reattached, "the job the 5xx hid was found and followed"
    assert backend.emu.faults.fired[fired:] == [kind]
    name = task(run_id).job_name("scenario.train")
    assert [j.job_id for j in hook.list_jobs() if j.name == name] == [outcome.job_id]


def test_a_submit_answered_503_whose_job_left_the_queue_before_the_look_up(backend, hook):
    run_id = unique("late")
    name = task(run_id).job_name("scenario.train")
    backend.emu.inject_fault("unavailable_after", count=1, path_contains="job/submit")
    backend.emu.inject_fault("unavailable", count=None, path_contains="/jobs/")  # the look-up cannot happen
    with pytest.raises(GoogleApiError) as failed:  # (no look-up before this first submit)
        submit_task(backend, hook, task(run_id, 1), reattach=False)
    assert failed.value.retryable  # the try fails; Airflow retries it
    backend.emu.clear_faults()
    (job,) = backend.accounted(hook, name, count=1)
    backend.wait_until_left_queue(hook, job.job_id)
    again = submit_task(backend, hook, task(run_id, 2))
    assert again.reattached and again.job_id == job.job_id and again.job.state.is_success
    assert len(backend.accounted(hook, name, count=1)) == 1


@pytest.mark.parametrize("user_known", [True, False], ids=["slurm_user set", "slurm_user learned"])
def test_another_users_job_under_the_tasks_name_is_neither_reattached_nor_cancelled(backend, monkeypatch, user_known):
    extra = {"slurm_user": backend.user} if user_known else {}
    hook = backend.connect(monkeypatch, conn_id="slurmapi_scenario_owner", **extra)
    other = backend.other_hook(monkeypatch)
    run_id = unique("owner")
    mine = submit_task(backend, hook, task(run_id, 1), SLEEP)
    # Another user copies the task's name, and the name of the run before a clear.
    copy = other.submit(backend.other_spec(SLEEP, name=task(run_id, 1).job_name("scenario.train"))).job_id
    again = submit_task(backend, hook, task(run_id, 2))
    assert again.reattached and again.job_id == mine.job_id
    cleared = submit_task(backend, hook, task(run_id, 3, run_start=3), SLEEP)
    assert not cleared.reattached and cleared.cancelled == [mine.job_id]
    assert not other.get_job(copy).state.is_terminal, "another user's job was cancelled"
    other.cancel_job(copy)
    hook.cancel_job(cleared.job_id)


@pytest.mark.parametrize("user_known", [True, False], ids=["slurm_user set", "slurm_user learned"])
def test_another_users_earlier_job_under_the_tasks_name_is_never_reattached(backend, monkeypatch, user_known):
    """Another user submits a job under the task's predictable name *before* the task's first try. With the
    connection's slurm_user, or without it (the default: the task then learns its user from a held job it
    submits, reads and cancels), the task submits its own job and leaves theirs alone."""
    extra = {"slurm_user": backend.user} if user_known else {}
    hook = backend.connect(monkeypatch, conn_id="slurmapi_scenario_owner", **extra)
    other = backend.other_hook(monkeypatch)
    run_id = unique("forged")
    forged = other.submit(backend.other_spec(SLEEP, name=task(run_id, 1).job_name("scenario.train"))).job_id
    outcome = submit_task(backend, hook, task(run_id, 2), SLEEP)
    assert not outcome.reattached and outcome.job_id != forged
    assert hook.get_job(outcome.job_id).user == backend.user
    assert not other.get_job(forged).state.is_terminal
    probes = [
        j for j in hook.list_jobs() if j.name.startswith("slurmapi-whoami-") and forged < j.job_id < outcome.job_id
    ]
    if user_known:
        assert probes == []
    else:
        (probe,) = probes
        assert probe.user == backend.user and probe.state.base == "CANCELLED"
        assert probe.elapsed is not None and probe.elapsed.total_seconds() == 0  # held: it never ran
    other.cancel_job(forged)
    hook.cancel_job(outcome.job_id)


def test_a_cleared_task_cancels_its_earlier_runs_job_first(backend, hook):
    run_id = unique("cleared")
    first = submit_task(backend, hook, task(run_id, 1), SLEEP)
    second = submit_task(backend, hook, task(run_id, 2, run_start=2), SLEEP)
    assert not second.reattached and second.cancelled == [first.job_id]
    assert backend.wait_for_end(hook, first.job_id).state.base == "CANCELLED"
    calls = [c[:2] for c in backend.emu.calls if c[0] in ("DELETE", "POST")][-2:]
    v = SCENARIO_RESOLVED
    assert calls == [("DELETE", f"/slurm/{v}/job/{first.job_id}"), ("POST", f"/slurm/{v}/job/submit")]


def test_with_accounting_down_a_retry_that_cannot_know_never_submits(backend, hook):
    run_id = unique("dbd")
    first = submit_task(backend, hook, task(run_id, 1), "#!/bin/bash\nexit 3\n")
    backend.wait_for_end(hook, first.job_id)
    posts = sum(1 for c in backend.emu.calls if c[0] == "POST")
    backend.set_slurmdbd(False)
    try:
        with pytest.raises(SlurmJobApiError) as refused:
            submit_task(backend, hook, task(run_id, 2))
        assert refused.value.retryable and not isinstance(refused.value, SubmitOutcomeUnknownError)
        assert sum(1 for c in backend.emu.calls if c[0] == "POST") == posts, "submitted blind"
    finally:
        backend.set_slurmdbd(True)
