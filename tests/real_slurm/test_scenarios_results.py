"""What a job did, in Airflow, through real Airflow (``dag.test()``): emulator and real Slurm.

The job publishes its result and the tail of its output in its own Slurm comment (api/results.py);
the same test code on both backends (``backends.py``), with the operator waiting in the worker and
deferred.

Facts of real Slurm 24.11.5 the design depends on, each pinned by a scenario here:

- a running job's own ``scontrol update JobId=$SLURM_JOB_ID Comment=...`` succeeds as the job's user, and
  ``GET /slurm/{v}/job/{id}`` returns the new comment until the job leaves the queue; quotes, newlines,
  backslashes and the RS/US control characters survive (``test_the_json_...``, ``test_a_failed_job_...``);
- a comment of 1024 bytes passes, 1025 is refused (``test_a_comment_over_the_limit_is_refused_by_slurm``;
  measured by hand: ``Extra`` has the same limit);
- once slurmctld marks a job as ending (cancel, time limit) its update is refused ("Job has already
  finished"), though its TERM trap still runs (``test_a_job_being_cancelled_...``, ``test_a_job_killed_...``);
- at the time limit every process of the job gets TERM, the script too (``test_a_job_killed_...``);
- the last task of an array has the array's own id as ``$SLURM_JOB_ID``, and an update of that id reaches
  every task of the array: a task must name itself ``<array>_<task>`` (``test_an_array_...``);
- accounting keeps no comment by default (``test_a_record_read_after_the_job_left_the_queue_...``).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from backends import Backend

from airflow_provider_slurmapi.api import results
from tests.fixtures import dag_file

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]
MODES = ["sync", "deferred"]
DAGS_MODULE = dag_file("slurm_results_dags")
DAGS = DAGS_MODULE.DAGS
OUT, ERR = DAGS_MODULE.OUT_MARKER, DAGS_MODULE.ERR_MARKER


def run(backend: Backend, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], dag_id: str, **conf):
    backend.connect(monkeypatch)
    capfd.readouterr()
    dag_run = DAGS[dag_id].test(run_conf={"cwd": backend.cwd, **conf})
    (ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "train"]
    out, err = capfd.readouterr()
    return ti, out + err


def state(ti) -> str:
    return str(ti.state).rsplit(".", 1)[-1].lower()


@pytest.mark.parametrize("mode", MODES)
def test_the_json_the_job_writes_is_xcom_slurm_result(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_value_{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    assert ti.xcom_pull(task_ids="train", key="slurm_result") == {
        "val_acc": 0.93,
        "checkpoint": f"ckpt-{job_id}.pt",
    }
    assert "training" in log  # the output's tail, in the task log
    assert "published" not in ti.xcom_pull(task_ids="train", key="slurm_job")  # the tails stay in the log
    # what the job used, from the record the wait read: its allocation times its run
    job = ti.xcom_pull(task_ids="train", key="slurm_job")
    used = ti.xcom_pull(task_ids="train", key="slurm_usage")
    assert used == job["usage"] and used["cpus"] >= 1 and used["nodes"] == 1 and used["gpus"] == 0
    assert used["elapsed_seconds"] == job["elapsed_seconds"] and used["queue_wait_seconds"] >= 0
    assert used["cpu_hours"] == round(used["cpus"] * used["elapsed_seconds"] / 3600, 4)
    assert f"Slurm job {job_id} used 1 node, {used['cpus']} CPU" in log


@pytest.mark.parametrize("mode", MODES)
def test_the_peak_memory_of_a_job_whose_steps_were_sampled_is_its_max_rss(backend, monkeypatch, capfd, mode):
    """Real Slurm records a step's peak RSS (``tres.requested.max``'s ``mem``) only once jobacct_gather has
    sampled it: a job shorter than the cluster's JobAcctGatherFrequency (30 s on the test clusters) has none
    unless it asks a shorter interval (``account_gather_frequency``), as this one does."""
    # (a time limit far past the job: the emulator's minute is a second, and a loaded machine is slow)
    ti, log = run(backend, monkeypatch, capfd, f"results_memory_{mode}", time_limit=60)
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    used = ti.xcom_pull(task_ids="train", key="slurm_usage")
    assert 200 << 20 <= used["max_rss_bytes"] < 1 << 30, used  # the 200 MiB the job held, and its Python
    assert used == ti.xcom_pull(task_ids="train", key="slurm_job")["usage"]
    line = re.search(rf"Slurm job {job_id} used 1 node, .*; max RSS (\d+\.\d) MiB", log)
    assert line and float(line[1]) == round(used["max_rss_bytes"] / 2**20, 1), log[-3000:]


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_job_shows_its_output_and_its_error_quotes_stderr(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_failure_{mode}")
    assert state(ti) == "failed"
    assert f"stdout, last 1 lines:\n{OUT}" in log
    assert f"stderr, last 1 lines:\n{ERR}" in log
    assert "exit code 3" in log and f"Last lines of its stderr:\n{ERR}" in log  # the failure's message
    assert ti.xcom_pull(task_ids="train", key="slurm_result") is None


@pytest.mark.parametrize("mode", MODES)
def test_a_job_killed_at_its_time_limit_still_publishes_its_tail(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_time_limit_{mode}", time_limit=backend.short_time_limit)
    assert state(ti) == "failed"
    assert "TIMEOUT" in log
    # The publication before the limit (in the queue's record: slurmctld refuses the job's update once it
    # ends) or, deferred, the final one after the TERM (in accounting's copy, which sacctmgr still writes).
    # Real slurmstepd writes its "CANCELLED ... DUE TO TIME LIMIT" line between the two ("slurmstepd-<node>:
    # error: ..." on 24.11, "[<time>] error: ..." on 26.05).
    final = (
        rf"output \(stdout and stderr\), last [23] lines:\n{OUT}\n"
        rf"(.*error: \*\*\* JOB \d+ ON .* DUE TO TIME LIMIT \*\*\*\n)?{DAGS_MODULE.TERM_MARKER}"
    )
    early = rf"output \(stdout and stderr\), last 1 lines:\n{OUT}"
    at = log.find("output (stdout and stderr)")  # the tail as the task log shows it
    assert re.search(final if mode == "deferred" else early, log), log[at : at + 1500] if at >= 0 else log[-3000:]
    output = ti.xcom_pull(task_ids="train", key="slurm_job")["standard_output"]
    assert DAGS_MODULE.TERM_MARKER in backend.host_path(output).read_text()  # the TERM reached the script


@pytest.mark.parametrize("mode", MODES)
def test_a_python_script_runs_unchanged(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_python_{mode}")
    assert state(ti) == "success", log[-3000:]
    result = ti.xcom_pull(task_ids="train", key="slurm_result")
    assert result["job"] == str(ti.xcom_pull(task_ids="train"))  # its $SLURM_* environment
    assert result["argv0"].startswith("slurmapi-script.")  # run by python3 itself, from the wrapper's copy
    assert OUT in log


@pytest.mark.parametrize(
    ("dag", "said"),
    [("results_not_json", "is not valid JSON"), ("results_too_large", "more than its Slurm comment holds")],
)
def test_a_result_that_cannot_be_used_fails_the_task(backend, monkeypatch, capfd, dag, said):
    ti, log = run(backend, monkeypatch, capfd, f"{dag}_sync")
    assert state(ti) == "failed"
    assert said in log
    assert ti.xcom_pull(task_ids="train", key="slurm_result") is None


@pytest.mark.parametrize("mode", MODES)
def test_an_array_publishes_one_result_per_task(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_array_{mode}")
    assert state(ti) == "success", log[-3000:]
    job_id = ti.xcom_pull(task_ids="train")
    result = ti.xcom_pull(task_ids="train", key="slurm_result")
    assert result == {f"{job_id}_{n}": {"task": n} for n in range(3)}
    assert all(f"task {n}" in log for n in range(3))
    used = ti.xcom_pull(task_ids="train", key="slurm_usage")  # summed over the array's three tasks
    assert used["tasks"] == 3 and used["cpus"] >= 1 and f"Slurm job {job_id} used 3 tasks, " in log


@pytest.mark.parametrize("mode", MODES)
def test_a_masked_value_stays_masked_in_the_tail(backend, monkeypatch, capfd, mode):
    ti, log = run(backend, monkeypatch, capfd, f"results_masked_{mode}")
    assert state(ti) == "success", log[-3000:]
    assert "token is ***" in log and DAGS_MODULE.SECRET not in log, log[-4000:]
    # The job page shows the tail as the task log did: from what the task recorded (XCom), masked, though
    # Slurm's record holds the secret in the clear (issue #31 item 4).
    from airflow_provider_slurmapi.plugins.job_view import JobView
    from airflow_provider_slurmapi.plugins.slurm_job_page import pages_available

    record = backend.connect(monkeypatch).get_job(ti.xcom_pull(task_ids="train"))
    assert record.published is not None and DAGS_MODULE.SECRET in record.published.stdout_tail
    if pages_available():  # the page reads the task's record from the metadata database itself
        from airflow_provider_slurmapi.api.identity import parse_tag
        from airflow_provider_slurmapi.plugins.app import _recorded

        recorded = _recorded(parse_tag(record.comment))
    else:
        recorded = ti.xcom_pull(task_ids="train", key=results.XCOM_SHOWN)
    assert recorded is not None and DAGS_MODULE.SECRET not in json.dumps(recorded)
    view = JobView.build(record, recorded=recorded)
    assert view.published is not None and "token is ***" in view.published.stdout_tail
    assert DAGS_MODULE.SECRET not in view.raw_json


def test_publish_results_false_submits_the_script_as_it_is(backend, monkeypatch, capfd):
    ti, log = run(backend, monkeypatch, capfd, "results_off_sync")
    assert state(ti) == "success", log[-3000:]
    job = ti.xcom_pull(task_ids="train", key="slurm_job")
    output = backend.host_path(job["standard_output"]).read_text()
    assert "return file: [unset]" in output and "slurmapi-script" not in output  # no wrapper around it
    hook = backend.connect(monkeypatch)
    record = hook.get_job(job["job_id"])
    assert results.split(record.comment)[1] is None and record.comment.startswith("airflow-ti:")
    assert ti.xcom_pull(task_ids="train", key="slurm_result") is None
    assert "output tail" not in log and "last 1 lines" not in log


def test_no_result_file_no_xcom(backend, monkeypatch, capfd):
    ti, log = run(backend, monkeypatch, capfd, "results_nothing_deferred")
    assert state(ti) == "success"
    assert ti.xcom_pull(task_ids="train", key="slurm_result") is None
    assert "no result" in log


@pytest.mark.parametrize("copy", [True, False], ids=["accounting-copy", "queue-only"])
def test_a_record_read_after_the_job_left_the_queue(backend, monkeypatch, copy):
    """Accounting keeps no job comment by default, but keeps what the job's user writes with sacctmgr: with
    the wrapper's accounting copy the result outlives the queue's record (``MinJobAge``); without it, read
    too late, the result is absent and the reason given."""
    hook = backend.connect(monkeypatch)
    comment = "airflow-ti:d/t/r/-1 try:1"
    script = results.wrap_script("#!/bin/sh\necho done\necho '[1, 2]' > \"$SLURMAPI_RETURN_FILE\"\n", comment)
    environment = None if copy else {"SLURMAPI_PUBLISH_ACCOUNTING": "0"}
    job_id = hook.submit(backend.spec(script, comment=comment, environment=environment)).job_id
    ended = backend.wait_for_end(hook, job_id)
    assert ended.source == "slurm" and ended.comment.startswith(comment + " ")  # the tag kept, first
    assert results.read(ended.summary()).result == [1, 2]
    gone = backend.wait_until_left_queue(hook, job_id)
    reading = results.read(gone.summary())
    if copy:
        assert (
            reading.has_result
            and reading.result == [1, 2]
            and f"Slurm job {job_id} output (stdout and stderr), last 1 lines:\ndone" in reading.log
        )
        assert gone.comment.startswith(comment + " ")  # accounting's copy keeps the tag first too
    else:
        assert not reading.has_result
        assert "AccountingStoreFlags=job_comment" in reading.log[0] and "sacctmgr" in reading.log[0]


def test_a_comment_over_the_limit_is_refused_by_slurm(backend, monkeypatch):
    """The limit the wrapper keeps to: slurmctld refuses a comment longer than 1024 bytes from the job."""
    hook = backend.connect(monkeypatch)
    script = (
        "#!/bin/sh\n"
        f"c=$(yes a | head -n {results.COMMENT_LIMIT} | tr -d '\\n')\n"
        'scontrol update JobId=$SLURM_JOB_ID Comment="$c" || exit 7\n'
        'scontrol update JobId=$SLURM_JOB_ID Comment="${c}b" && exit 8\n'
        "exit 0\n"
    )
    job_id = hook.submit(backend.spec(script)).job_id
    ended = backend.wait_for_end(hook, job_id)
    assert ended.exit_code.return_code == 0, json.dumps(ended.summary())
    assert ended.comment == "a" * results.COMMENT_LIMIT


def test_a_job_being_cancelled_can_no_longer_update_its_comment(backend, monkeypatch):
    """Why the wrapper also publishes before the time limit: once slurmctld marks a job as ending (cancel,
    time limit), the job's own ``scontrol update`` is refused, though its TERM trap still runs."""
    hook = backend.connect(monkeypatch)
    script = (
        "#!/bin/bash\n"
        "trap 'scontrol update JobId=$SLURM_JOB_ID Comment=late; echo late-rc=$?; exit 0' TERM\n"
        "scontrol update JobId=$SLURM_JOB_ID Comment=early\n"
        "while :; do sleep 600 & wait; done\n"  # only the trap ends it (the sleep may die of the TERM first)
    )
    job_id = hook.submit(backend.spec(script, standard_output="cancel-%j.out")).job_id
    deadline = time.monotonic() + 60
    while hook.get_job(job_id).comment != "early":
        assert time.monotonic() < deadline, "the running job did not update its own comment"
        time.sleep(0.3)
    hook.cancel_job(job_id)
    ended = backend.wait_for_end(hook, job_id)
    assert ended.state.base == "CANCELLED" and ended.comment == "early"
    output = backend.host_path(f"{backend.cwd}/cancel-{job_id}.out").read_text()
    assert "Job has already finished" in output and "late-rc=1" in output


@pytest.mark.parametrize("copy", [True, False], ids=["accounting-copy", "queue-only"])
def test_jobs_that_ended_together_are_read_in_one_tick_each_with_its_own_result(backend, monkeypatch, copy):
    """The deferred wait of several jobs that ended in one tick. The wrapper's accounting copy (``sacctmgr
    modify job``, as the job's user: Slurm keeps it with the default ``AccountingStoreFlags``, quotes and all
    once percent-quoted) comes with the tick's batched accounting read. Without it (``queue-only``: no
    sacctmgr on the node), the shared poller reads their records from the whole active queue (one ``GET
    .../jobs/``, decoding only their records), and learns that accounting lacks them. Either way each job's
    own result comes back, whatever else is in the queue."""
    import asyncio

    from airflow_provider_slurmapi.triggers.poller import SharedJobPoller

    hook = backend.connect(monkeypatch)
    if backend.name == "emulator":  # real Slurm's test cluster keeps an ended job 10 s or more
        monkeypatch.setattr(backend.emu, "min_job_age", 30.0)
    gate = f"ended-together-{time.time_ns()}"  # in the jobs' working directory
    comment = "airflow-ti:d/t/r/-1 try:1"
    script = results.wrap_script(
        f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.1; done\n"
        'printf \'{"job": %s, "q": "it%ss \\\\"%s\\\\" `x`"}\' "$SLURM_JOB_ID" "\'" 100% > "$SLURMAPI_RETURN_FILE"\n',
        comment,
    )
    environment = None if copy else {"SLURMAPI_PUBLISH_ACCOUNTING": "0"}
    ids = [hook.submit(backend.spec(script, comment=comment, environment=environment)).job_id for _ in range(3)]
    deadline = time.monotonic() + 120
    while any(hook.get_job(job_id).state.base != "RUNNING" for job_id in ids):
        assert time.monotonic() < deadline, "the three jobs did not all start"
        time.sleep(0.2)
    backend.host_path(f"{backend.cwd}/{gate}").write_text("")
    ended = [backend.wait_for_end(hook, job_id) for job_id in ids]
    assert [job.state.base for job in ended] == ["COMPLETED"] * 3

    async def one_tick() -> tuple[dict[str, Any], bool | None]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-ended-together", 3600.0, lambda: client)
        queues = {job_id: poller.subscribe(job_id, published=True) for job_id in ids}
        try:
            first = {job_id: await asyncio.wait_for(queues[job_id].get(), 60) for job_id in ids}
            return {str(j): o.job for j, o in first.items()}, poller.comments_accounted
        finally:
            for job_id, queue in queues.items():
                await poller.unsubscribe(job_id, queue)

    records, accounted = asyncio.run(one_tick())
    assert {j: results.read(r.summary()).result if r else None for j, r in records.items()} == {
        str(j): {"job": j, "q": 'it\'s "100%" `x`'} for j in ids
    }
    assert {r.source for r in records.values() if r} == {"slurmdb" if copy else "slurm"}
    assert accounted is copy  # Slurm's default: accounting keeps no comment but what sacctmgr wrote


def test_a_job_writes_its_own_accounting_comment_with_sacctmgr(backend, monkeypatch):
    """What the wrapper's accounting copy rests on: the job's own (non-admin) user may set the job's
    accounting comment with ``sacctmgr -i modify job``, Slurm keeps it with the default
    ``AccountingStoreFlags`` after the job ends, turning quotes into backticks (the wrapper percent-quotes
    them) and keeping ``%`` and backslashes; a job id accounting does not have is refused."""
    hook = backend.connect(monkeypatch)
    script = (
        "#!/bin/sh\n"
        "sacctmgr -i modify job where JobId=99999999 set Comment=x; echo unknown-rc=$?\n"
        'sacctmgr -i modify job where JobId=$SLURM_JOB_ID set Comment="it\'s \\"q\\" 100% a\\\\b" >/dev/null\n'
        "echo own-rc=$?\n"
    )
    job_id = hook.submit(backend.spec(script, standard_output="acct-%j.out")).job_id
    ended = backend.wait_for_end(hook, job_id)
    output = backend.host_path(f"{backend.cwd}/acct-{job_id}.out").read_text()
    assert "unknown-rc=1" in output and "own-rc=0" in output, output
    assert ended.comment == ""  # the queue's record: the submitted comment (none), not accounting's
    deadline = time.monotonic() + 60
    while True:
        status, body = hook.call_slurm("GET", f"/slurmdb/v0.0.42/job/{job_id}")
        jobs = body.get("jobs") or [{}]
        if status == 200 and jobs[0].get("comment", {}).get("job"):
            break
        assert time.monotonic() < deadline, f"accounting never had the job's comment: {status} {body}"
        time.sleep(0.5)
    assert jobs[0]["comment"]["job"] == "it`s `q` 100% a\\b"


def test_another_users_files_in_the_shared_tmp_change_nothing(backend, monkeypatch):
    """A hostile neighbour on the node: another Linux (and Slurm) user's job creates, first, the files in
    the shared temporary folder that the wrapper once named by job id, with a forged result. The next jobs'
    wrappers keep their files in folders of their own (``mktemp -d``, 0700): their results are their own,
    the squatted script is not run. (Before: in a sticky /tmp the job could not remove the other user's
    file, and published the forged result as its own.)"""
    hook = backend.connect(monkeypatch)
    other = backend.other_hook(monkeypatch)
    squat = (
        "#!/bin/sh\n"
        "for i in $(seq $((SLURM_JOB_ID + 1)) $((SLURM_JOB_ID + 30))); do\n"
        '  f="${TMPDIR:-/tmp}/slurmapi-result.$i.json"\n'
        '  printf \'{"val_acc": 0.99, "ckpt": "gs://mallory/evil"}\' > "$f" && chmod 644 "$f"\n'
        "  printf '#!/bin/sh\\necho mallory-ran\\n' > \"${TMPDIR:-/tmp}/slurmapi-script.$i.1\"\n"
        "done\necho squatted\n"
    )
    squatter = other.submit(backend.other_spec(squat, standard_output="squat-%j.out")).job_id
    assert backend.wait_for_end(other, squatter).state.base == "COMPLETED"
    try:
        comment = "airflow-ti:d/t/r/-1 try:1"
        plain = results.wrap_script("#!/bin/sh\necho mine\n", comment)  # writes no result
        valued = results.wrap_script('#!/bin/sh\necho \'{"val_acc": 0.5}\' > "$SLURMAPI_RETURN_FILE"\n', comment)
        jobs = [hook.submit(backend.spec(script, comment=comment)).job_id for script in (plain, valued)]
        assert all(squatter < job_id <= squatter + 30 for job_id in jobs)  # the squatted ids
        readings = [results.read(backend.wait_for_end(hook, job_id).summary()) for job_id in jobs]
        assert not readings[0].has_result, readings[0]
        assert readings[1].has_result and readings[1].result == {"val_acc": 0.5}, readings[1]
        for job_id, reading in zip(jobs, readings, strict=True):
            assert "mallory" not in "\n".join(reading.log), reading.log
            assert f"Slurm job {job_id} output (stdout and stderr)" in reading.log[0]
    finally:
        clean = '#!/bin/sh\nrm -f "${TMPDIR:-/tmp}"/slurmapi-result.*.json "${TMPDIR:-/tmp}"/slurmapi-script.*.1\n'
        backend.wait_for_end(other, other.submit(backend.other_spec(clean, standard_output="squat-%j.out")).job_id)


def test_output_that_is_not_utf8_still_publishes_the_result_and_the_tail(backend, monkeypatch):
    """A job whose output holds bytes that are not UTF-8 (a binary dump, a Latin-1 log line): its result and
    tail still come back, without those bytes (slurmrestd drops a comment that is not UTF-8, and the task
    said the job "published nothing")."""
    hook = backend.connect(monkeypatch)
    comment = "airflow-ti:d/t/r/-1 try:1"
    script = results.wrap_script(
        "#!/bin/sh\nprintf 'loss \\377\\376 h\\303\\251\\nafter\\n'\n"
        'printf \'{"ok": 1}\' > "$SLURMAPI_RETURN_FILE"\n',
        comment,
    )
    job_id = hook.submit(backend.spec(script, comment=comment)).job_id
    reading = results.read(backend.wait_for_end(hook, job_id).summary())
    assert reading.has_result and reading.result == {"ok": 1}, reading
    assert f"Slurm job {job_id} output (stdout and stderr), last 2 lines:\nloss  hé\nafter" in reading.log, reading.log


def test_another_job_of_the_same_user_cannot_hand_its_publication_to_a_tasks_job(backend, monkeypatch):
    """Slurm lets a user rewrite the comment of any of their jobs: a publication copied into another job's
    record names the job that wrote it, and is not read as that job's (issue #31 item 6)."""
    from tests.harness.real_slurm import SCENARIO_API_VERSION

    hook = backend.connect(monkeypatch)
    tag = "airflow-ti:scenario/train/publication-bound/-1 try:1"

    def submit(script: str) -> int:
        return hook.submit(backend.spec(results.wrap_script(script, tag), comment=tag)).job_id

    theirs = submit('#!/bin/sh\necho \'{"ckpt": "gs://mallory/evil"}\' > "$SLURMAPI_RETURN_FILE"\n')
    mine = submit("#!/bin/sh\nsleep 300\n")
    backend.wait_for_end(hook, theirs)
    their_record = hook.get_job(theirs)
    assert their_record.published is not None, json.dumps(their_record.summary())
    assert their_record.published.result() == {"ckpt": "gs://mallory/evil"}  # theirs, read as theirs
    backend.wait_until_running(hook, mine)
    version = "v0.0.45" if SCENARIO_API_VERSION == "auto" else SCENARIO_API_VERSION
    status, body = hook.call_slurm("POST", f"/slurm/{version}/job/{mine}", {"comment": their_record.comment})
    try:
        assert status == 200, body
        record = hook.get_job(mine)
        assert record.comment == their_record.comment  # Slurm took the copy: the attack is real
        assert record.published is None and record.summary()["published_for"] == str(theirs)
        reading = results.read(record.summary())
        assert not reading.has_result and f"names job {theirs}, not this one" in reading.log[0]
    finally:
        hook.cancel_job(mine)
