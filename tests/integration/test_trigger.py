"""SlurmJobTrigger and its shared poller, run on a real event loop against the emulator."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.api.watch import UNKNOWN_JOB_GRACE
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.poller import SharedJobPoller
from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger

CWD = "/home/tester"


def submit(hook: SlurmJobApiHook, script: str, **job) -> int:
    return hook.submit(JobSpec.build(script, {"current_working_directory": CWD, **job})).job_id


async def first_event(trigger: SlurmJobTrigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("trigger ended without an event")


@pytest.fixture
def hook(slurmapi_emulator):
    return SlurmJobApiHook()


def test_serialize_round_trip():
    trigger = SlurmJobTrigger(job_id=7, poll_interval=3, deadline=123.0, target_states=["RUNNING"], cancel_on_kill=True)
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_slurmapi.triggers.slurmapi.SlurmJobTrigger"
    again = SlurmJobTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert not any("token" in k or "key" in k for k in kwargs)


@pytest.mark.parametrize("coalesce", [True, False])
def test_success_and_failure_events(hook, coalesce):
    ok = submit(hook, "#!/bin/bash\necho ok\n")
    bad = submit(hook, "#!/bin/bash\nexit 4\n")

    async def both():
        return await asyncio.gather(
            first_event(SlurmJobTrigger(ok, poll_interval=0.2, coalesce=coalesce)),
            first_event(SlurmJobTrigger(bad, poll_interval=0.2, coalesce=coalesce)),
        )

    good, failed = asyncio.run(both())
    assert good["status"] == "success" and good["job"]["exit_code"] == 0
    assert failed["status"] == "failed" and failed["job"]["exit_code"] == 4
    assert "exit code 4" in failed["message"]
    assert SharedJobPoller.active() == []


def test_shared_poller_makes_one_batched_call_per_tick(hook, slurmapi_emulator):
    ids = [submit(hook, f"#!/bin/bash\nsleep {0.2 * (n % 5)}\n") for n in range(25)]
    start = len(slurmapi_emulator.calls)

    async def all_of_them():
        return await asyncio.gather(*(first_event(SlurmJobTrigger(i, poll_interval=0.3)) for i in ids))

    events = asyncio.run(all_of_them())
    assert {e["status"] for e in events} == {"success"}
    calls = slurmapi_emulator.calls[start:]
    batched = [c for c in calls if "/jobs/state/" in c[1]]
    accounting = [c for c in calls if c[1].startswith("/slurmdb/") and "/jobs/?" in c[1]]
    assert batched, "the poller did not use the batched path"
    # No per-job call at all: each tick reads the states of every waiting job in one call, and the final
    # records of the jobs that ended in one batched accounting call. (How many ticks that takes depends on
    # how fast the machine runs the jobs, so the count of calls is bounded per tick, not in total.)
    assert [c[1] for c in calls if c not in batched and c not in accounting] == []
    assert len(accounting) <= len(batched)
    assert max(c[1].count("job_id=") for c in batched) >= len(ids) // 2, "one call reads many jobs"
    assert SharedJobPoller.active() == []


def test_a_cancelled_trigger_leaves_the_poller_cleanly(hook):
    long = submit(hook, "#!/bin/bash\nsleep 30\n")
    short = submit(hook, "#!/bin/bash\nsleep 0.5\n")

    async def scenario():
        waiting = asyncio.ensure_future(first_event(SlurmJobTrigger(long, poll_interval=0.2)))
        deadline = time.monotonic() + 30
        while not SharedJobPoller.active() and time.monotonic() < deadline:  # the trigger joins the poller
            await asyncio.sleep(0.05)
        assert len(SharedJobPoller.active()) == 1
        done = await first_event(SlurmJobTrigger(short, poll_interval=0.2))
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return done

    assert asyncio.run(scenario())["status"] == "success"
    assert SharedJobPoller.active() == []
    assert hook.get_job(long).state.base == "RUNNING"  # a trigger going away never cancels


def test_deadline_gives_a_timeout_event(hook):
    job_id = submit(hook, "#!/bin/bash\nsleep 30\n")
    event = asyncio.run(first_event(SlurmJobTrigger(job_id, poll_interval=0.2, deadline=time.time() + 1)))
    assert event["status"] == "timeout"
    assert hook.get_job(job_id).state.base == "RUNNING"


def test_target_state_reached(hook):
    job_id = submit(hook, "#!/bin/bash\nsleep 30\n")
    event = asyncio.run(first_event(SlurmJobTrigger(job_id, poll_interval=0.2, target_states=["RUNNING"])))
    assert event["status"] == "reached" and event["job"]["state"] == "RUNNING"


def test_on_kill_cancels_only_when_asked(hook, slurmapi_emulator):
    watched = submit(hook, "#!/bin/bash\nsleep 30\n")
    owned = submit(hook, "#!/bin/bash\nsleep 30\n")
    asyncio.run(SlurmJobTrigger(watched).on_kill())
    asyncio.run(SlurmJobTrigger(owned, cancel_on_kill=True).on_kill())
    slurmapi_emulator.wait_for_state(owned, ["CANCELLED"], timeout=30)
    assert hook.get_job(watched).state.base == "RUNNING"


def test_on_kill_cancels_the_job_even_when_the_triggerer_cancels_it_again_meanwhile(hook, slurmapi_emulator):
    """A triggerer cancels a trigger it drops again on every loop until it has finished; the job's
    cancel must not be cut short by those."""
    from airflow_provider_slurmapi.triggers import slurmapi as module

    job_id = submit(hook, "#!/bin/bash\nsleep 30\n")

    async def dropped_again_and_again() -> bool:
        kill = asyncio.ensure_future(SlurmJobTrigger(job_id, cancel_on_kill=True).on_kill())
        while not kill.done():
            await asyncio.sleep(0)  # the triggerer's next loop
            kill.cancel("__airflow_user_action__")
        deadline = time.monotonic() + 30
        while module._BACKGROUND and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return kill.cancelled()

    cut_short = asyncio.run(dropped_again_and_again())
    slurmapi_emulator.wait_for_state(job_id, ["CANCELLED"], timeout=30)
    assert not cut_short  # on_kill ran to its end, so what it logged stays in the trigger's log


def test_a_changed_connection_is_picked_up_by_the_next_trigger(hook, slurmapi_emulator, monkeypatch):
    """Settings are parsed once per connection content, so editing the connection takes effect at once."""
    job = submit(hook, "#!/bin/bash\necho ok\n")

    def run_one() -> dict:
        return asyncio.run(first_event(SlurmJobTrigger(job, poll_interval=0.2)))

    assert run_one()["status"] == "success"
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", slurmapi_emulator.connection_json(timeout="soon"))
    broken = run_one()
    assert broken["status"] == "error" and "timeout" in broken["message"], broken
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", slurmapi_emulator.connection_json(timeout=30))
    assert run_one()["status"] == "success"


def test_the_poller_wakes_a_trigger_only_when_its_job_changed(hook, slurmapi_emulator):
    job = submit(hook, "#!/bin/bash\nsleep 60\n")
    slurmapi_emulator.wait_for_state(job, ["RUNNING"], timeout=30)

    async def watch() -> list[str]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-wakeups", 3600.0, lambda: client)
        queue = poller.subscribe(job)
        for _ in range(3):
            await poller.tick()  # RUNNING, RUNNING, RUNNING: one wake-up
        await asyncio.to_thread(hook.cancel_job, job)
        await asyncio.to_thread(slurmapi_emulator.wait_for_state, job, ["CANCELLED"], 30)
        await poller.tick()  # CANCELLED: a second one
        woken = []
        while not queue.empty():
            seen = queue.get_nowait()
            woken.append(seen.state.base if seen.state else f"error {seen.error}")
        await poller.unsubscribe(job, queue)
        return woken

    assert asyncio.run(watch()) == ["RUNNING", "CANCELLED"]
    assert SharedJobPoller.active() == []


def bounded(trigger: SlurmJobTrigger, seconds: float = 30.0) -> dict:
    """The trigger's first event, or a test failure (not a hang) when none comes within ``seconds``."""

    async def wait() -> dict:
        try:
            return await asyncio.wait_for(first_event(trigger), seconds)
        except asyncio.TimeoutError:
            raise AssertionError(f"no event within {seconds}s from the trigger of job {trigger.job_id!r}") from None

    return asyncio.run(wait())


@pytest.mark.parametrize("bad", ["abc", "1;DELETE", "1.5"])
def test_a_malformed_job_id_fails_its_own_trigger_only(hook, bad):
    running = submit(hook, "#!/bin/bash\nsleep 1\n")

    async def both() -> tuple[dict, dict]:
        return await asyncio.gather(
            first_event(SlurmJobTrigger(bad, poll_interval=0.2)),
            first_event(SlurmJobTrigger(running, poll_interval=0.2)),
        )

    malformed, good = asyncio.run(asyncio.wait_for(both(), 30))
    assert malformed["status"] == "error" and "is not a Slurm job id" in malformed["message"], malformed
    assert good["status"] == "success", good  # the job sharing the poller was not failed with it
    assert SharedJobPoller.active() == []


def test_the_poller_fails_the_subscribers_of_a_malformed_id_only(hook):
    """Whoever subscribes a bad id directly (not through the trigger, which checks first)."""
    job = submit(hook, "#!/bin/bash\nsleep 30\n")

    async def tick() -> tuple[Any, Any]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-bad-id", 3600.0, lambda: client)
        bad, good = poller.subscribe("1;DELETE"), poller.subscribe(job)
        await poller.tick()
        seen = bad.get_nowait(), good.get_nowait()
        await poller.unsubscribe("1;DELETE", bad)
        await poller.unsubscribe(job, good)
        return seen

    bad, good = asyncio.run(tick())
    assert bad.error is not None and bad.error.field == "job_id"
    assert good.error is None and good.state is not None and good.state.base in ("PENDING", "RUNNING")
    assert SharedJobPoller.active() == []


def test_a_refused_batched_read_falls_back_to_one_call_per_job_for_that_tick_only_unless_the_path_is_unknown(
    hook, slurmapi_emulator
):
    """A 400 may be one id's doing: that tick reads each job on its own, and the next tick batches again.
    A 404 says the cluster has no batched path: one call per job from then on."""
    jobs = [submit(hook, "#!/bin/bash\nsleep 60\n") for _ in range(2)]

    async def ticks() -> tuple[list[bool], list[list[str]]]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-batch-400", 3600.0, lambda: client)
        queues = [poller.subscribe(job) for job in jobs]
        batched, paths = [], []
        for kind in ("invalid_argument", None, "not_found", None):
            if kind:  # every batched call of this tick (the client may ask again once it checked the version)
                slurmapi_emulator.inject_fault(kind, count=None, path_contains="/jobs/state")
            before = len(slurmapi_emulator.calls)
            seen = await poller.tick()
            slurmapi_emulator.clear_faults()
            assert all(o.error is None and o.state is not None for o in seen.values()), seen
            batched.append(poller.batched)
            called = [c[1].split("?")[0] for c in slurmapi_emulator.calls[before:]]
            # (the first tick finds the version; a call retried after a slow reply, under load, counts once)
            paths.append(list(dict.fromkeys(path for path in called if "/ping/" not in path)))
        for job, queue in zip(jobs, queues, strict=True):
            await poller.unsubscribe(job, queue)
        return batched, paths

    batched, paths = asyncio.run(ticks())
    assert batched == [True, True, False, False]
    state_path = "/slurm/v0.0.42/jobs/state/"
    assert paths[0][0] == state_path and paths[0][-2:] == [f"/slurm/v0.0.42/job/{job}" for job in jobs]
    assert paths[1] == [state_path]  # batched again
    assert paths[3] == [f"/slurm/v0.0.42/job/{job}" for job in jobs], paths
    for job in jobs:
        hook.cancel_job(job)


def test_a_record_no_reader_foresaw_fails_its_own_jobs_wait_only(hook, monkeypatch, caplog):
    """One job's record that a reader cannot read (a value nobody foresaw; played by a reader that raises
    for that job alone, since the fuzzed readers no longer do): its own trigger ends with an error naming
    it; the job sharing the poller ends as it should; the poller goes on."""
    from airflow_provider_slurmapi.api.jobs import SlurmJob

    bad, good = submit(hook, "#!/bin/bash\nsleep 0.5\n"), submit(hook, "#!/bin/bash\nsleep 0.5\n")
    readers = {name: getattr(SlurmJob, name).__func__ for name in ("from_job_info", "from_slurmdb")}

    def picky(name: str) -> Any:
        def read(cls, record, *args, **kwargs):
            if record.get("job_id") == bad:
                raise OverflowError("timestamp out of range for platform time_t")
            return readers[name](cls, record, *args, **kwargs)

        return classmethod(read)

    for name in readers:
        monkeypatch.setattr(SlurmJob, name, picky(name))

    async def both() -> tuple[dict, dict]:
        return await asyncio.gather(
            first_event(SlurmJobTrigger(bad, poll_interval=0.2, error_budget=2)),
            first_event(SlurmJobTrigger(good, poll_interval=0.2, error_budget=2)),
        )

    failed, ended = asyncio.run(asyncio.wait_for(both(), 60))
    assert ended["status"] == "success", ended
    assert failed["status"] == "error" and f"the record of Slurm job {bad} could not be read" in failed["message"]
    assert "OverflowError" in failed["message"], failed
    assert f"Slurm job {bad}: its record could not be read" in caplog.text
    assert SharedJobPoller.active() == []


def test_a_tick_that_fails_unforeseen_is_logged_and_the_poller_goes_on(hook, monkeypatch, caplog):
    """The poller never ends silently: a failed tick wakes every subscriber with the error, the next
    tick comes, and the wait ends as it should."""
    job = submit(hook, "#!/bin/bash\nsleep 0.5\n")
    real_tick, failures = SharedJobPoller.tick, list[int]()

    async def failing_once(self):
        if not failures:
            failures.append(1)
            raise RecursionError("maximum recursion depth exceeded")
        return await real_tick(self)

    monkeypatch.setattr(SharedJobPoller, "tick", failing_once)
    event = bounded(SlurmJobTrigger(job, poll_interval=0.2, error_budget=2))
    assert event["status"] == "success", event
    assert failures == [1] and "failed a tick; it goes on polling" in caplog.text
    assert SharedJobPoller.active() == []


@pytest.mark.parametrize("spelling", ["0{}", " {}", "{}\n"])
@pytest.mark.parametrize("coalesce", [True, False])
def test_a_non_canonical_spelling_of_a_real_id_ends(hook, spelling, coalesce):
    job = submit(hook, "#!/bin/bash\necho ok\n")
    event = bounded(SlurmJobTrigger(spelling.format(job), poll_interval=0.2, coalesce=coalesce))
    assert event["status"] == "success", event
    assert event["job"]["job_id"] == job
    assert SharedJobPoller.active() == []


@pytest.mark.parametrize("coalesce", [True, False])
def test_an_unknown_job_id_ends_after_its_grace(hook, coalesce):
    submit(hook, "#!/bin/bash\ntrue\n")  # a real job on the cluster; the trigger waits on another id
    start = time.monotonic()
    event = bounded(SlurmJobTrigger(987654, poll_interval=0.2, coalesce=coalesce, unknown_job_grace=1))
    assert event["status"] == "error", event
    assert "Slurm job 987654 is unknown" in event["message"] and "Check the job id" in event["message"]
    assert 1 <= time.monotonic() - start < 20
    assert SharedJobPoller.active() == []


def test_the_operators_own_job_keeps_the_long_grace():
    """Its job was just submitted: slurmdbd may lag, so the trigger it defers to waits 600 s (the sensor 120 s)."""
    assert SlurmJobTrigger(5).unknown_job_grace == UNKNOWN_JOB_GRACE == 600


def test_a_missing_connection_is_named_in_the_event(slurmapi_emulator):
    event = bounded(SlurmJobTrigger(1, slurmapi_conn_id="no_such_connection", poll_interval=0.2))
    assert event["status"] == "error", event
    assert "no_such_connection" in event["message"] and "Could not read connection" in event["message"], event


# The job's wrapper writes no accounting copy of its publication (as on a node without sacctmgr).
NO_ACCOUNTING_COPY = {"SLURMAPI_PUBLISH_ACCOUNTING": "0"}


def _published_calls(hook, emulator, *, jobs: int, environment=None) -> tuple[list[dict], list]:
    """``jobs`` wrapped jobs that have all ended, then their triggers: their events and the calls they made."""
    from airflow_provider_slurmapi.api import results

    comment = "airflow-ti:d/t/r/-1 try:1"
    script = results.wrap_script('#!/bin/sh\necho line\necho \'{"n": 1}\' > "$SLURMAPI_RETURN_FILE"\n', comment)
    ids = [submit(hook, script, comment=comment, environment=environment) for _ in range(jobs)]
    for job_id in ids:
        hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    start = len(emulator.calls)

    async def all_of_them():
        return await asyncio.gather(
            *(first_event(SlurmJobTrigger(i, poll_interval=0.3, read_results=True)) for i in ids)
        )

    events = asyncio.run(all_of_them())
    return events, [c[1] for c in emulator.calls[start:]]


def test_the_accounting_copy_carries_what_the_jobs_published_at_no_extra_call(hook, slurmapi_emulator):
    """The wrapper's sacctmgr copy: the tick's one accounting call brings every ended job's publication."""
    events, calls = _published_calls(hook, slurmapi_emulator, jobs=5)
    assert [e["job"]["published"]["result_text"] for e in events] == ['{"n": 1}'] * 5
    assert {e["job"]["source"] for e in events} == {"slurmdb"}
    assert not [c for c in calls if c.endswith("/jobs/") or "/job/" in c], calls


def test_the_final_record_carries_what_the_job_published_at_one_call_per_tick(hook, slurmapi_emulator):
    """Without the accounting copy (and accounting keeps no comment by default), the jobs that ended in the
    queue are read from there, all of a tick's with one call (the whole queue), not one per job."""
    events, calls = _published_calls(hook, slurmapi_emulator, jobs=5, environment=NO_ACCOUNTING_COPY)
    for event in events:
        assert event["status"] == "success"
        assert event["job"]["published"]["result_text"] == '{"n": 1}'
        assert event["job"]["published"]["stdout_tail"] == "line"
    ticks: list[list[str]] = []  # each tick starts with its batched state call
    for call in calls:
        if "/jobs/state/" in call:
            ticks.append([])
        ticks[-1].append(call)
    for tick in ticks:
        reads = [c for c in tick if "/job/" in c or c.endswith("/jobs/")]
        assert len(tick) <= 3 and len(reads) <= 1, tick  # state, accounting, at most one queue read


@pytest.mark.slurmapi_emulator(accounting_store_flags=["job_comment"])
def test_accounting_that_keeps_the_comment_costs_no_extra_call(hook, slurmapi_emulator):
    events, calls = _published_calls(hook, slurmapi_emulator, jobs=3)
    assert {e["job"]["published"]["result_text"] for e in events} == {'{"n": 1}'}
    assert not [c for c in calls if c.endswith("/jobs/") or "/job/" in c], calls


def test_one_ended_job_is_read_with_one_get(hook, slurmapi_emulator):
    events, calls = _published_calls(hook, slurmapi_emulator, jobs=1, environment=NO_ACCOUNTING_COPY)
    assert events[0]["job"]["published"]["result_text"] == '{"n": 1}'
    assert [c for c in calls if "/job/" in c or c.endswith("/jobs/")] == [f"/slurm/v0.0.42/job/{events[0]['job_id']}"]


def _wrapped(hook, count: int, environment=None) -> list[int]:
    from airflow_provider_slurmapi.api import results

    comment = "airflow-ti:d/t/r/-1 try:1"
    script = results.wrap_script('#!/bin/sh\necho \'{"n": 2}\' > "$SLURMAPI_RETURN_FILE"\n', comment)
    ids = [submit(hook, script, comment=comment, environment=environment) for _ in range(count)]
    for job_id in ids:
        hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    return ids


@pytest.mark.parametrize(
    ("kept", "environment"),
    [
        pytest.param(False, NO_ACCOUNTING_COPY, id="accounting-drops-comments"),
        pytest.param(True, None, id="sacctmgr-copy"),
        pytest.param(
            True,
            NO_ACCOUNTING_COPY,
            id="job_comment",
            marks=pytest.mark.slurmapi_emulator(accounting_store_flags=["job_comment"]),
        ),
    ],
)
def test_the_poller_learns_whether_accounting_keeps_comments(hook, slurmapi_emulator, kept, environment):
    """Once an ended job read from both shows it, a tick reads such jobs from the one place that has their
    comment: the queue (no accounting call for them), or accounting (no queue call)."""
    first, later = _wrapped(hook, 1, environment), _wrapped(hook, 3, environment)

    async def watch() -> tuple[list[str], list[str]]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-published", 3600.0, lambda: client)
        start = len(slurmapi_emulator.calls)
        queues = {job_id: poller.subscribe(job_id, published=True) for job_id in first}
        await asyncio.wait_for(queues[first[0]].get(), 30)  # the poller's first tick (then it sleeps an hour)
        learning = [c[1] for c in slurmapi_emulator.calls[start:]]
        assert poller.comments_accounted is kept
        queues.update({job_id: poller.subscribe(job_id, published=True) for job_id in later})
        for job_id in first:
            await poller.unsubscribe(job_id, queues.pop(job_id))
        start = len(slurmapi_emulator.calls)
        seen = await poller.tick()
        learnt = [c[1] for c in slurmapi_emulator.calls[start:]]
        records = [seen[str(j)].job for j in later]
        assert [r.published.result_text if r and r.published else None for r in records] == ['{"n": 2}'] * 3
        for job_id, queue in queues.items():
            await poller.unsubscribe(job_id, queue)
        return learning, learnt

    learning, learnt = asyncio.run(watch())
    ids = "&".join(f"job_id={j}" for j in later)
    steps = "&".join(f"step={j}" for j in later)
    # kept: the batched accounting read carries the comments; not kept: the whole queue, once, no accounting
    assert (
        learnt == [f"/slurm/v0.0.42/jobs/state/?{ids}", f"/slurmdb/v0.0.42/jobs/?{steps}"]
        if kept
        else [
            f"/slurm/v0.0.42/jobs/state/?{ids}",
            "/slurm/v0.0.42/jobs/",
        ]
    ), learnt
    assert len(learning) == (2 if kept else 3), learning  # the learning tick read both


def test_once_accounting_carried_a_publication_a_job_without_its_copy_is_read_from_the_queue(hook, slurmapi_emulator):
    """A job whose accounting copy failed (say slurmdbd had not recorded it yet) costs one queue read, and
    the poller keeps reading the others' from accounting."""
    with_copy, without = _wrapped(hook, 1), _wrapped(hook, 1, NO_ACCOUNTING_COPY)

    async def watch() -> list[str]:
        client = await hook.get_async_conn()
        poller = SharedJobPoller.get("test-published-mixed", 3600.0, lambda: client)
        start = len(slurmapi_emulator.calls)
        queues = {job_id: poller.subscribe(job_id, published=True) for job_id in with_copy + without}
        # the poller's first tick (then it sleeps an hour)
        seen = {job_id: await asyncio.wait_for(queue.get(), 30) for job_id, queue in queues.items()}
        assert poller.comments_accounted is True
        jobs = [seen[j].job for j in with_copy + without]
        assert [job.source if job else None for job in jobs] == ["slurmdb", "slurm"]
        assert {job.published.result_text if job and job.published else None for job in jobs} == {'{"n": 2}'}
        for job_id, queue in queues.items():
            await poller.unsubscribe(job_id, queue)
        return [c[1] for c in slurmapi_emulator.calls[start:]]

    calls = asyncio.run(watch())
    assert [c for c in calls if "/job/" in c or c.endswith("/jobs/")] == [f"/slurm/v0.0.42/job/{without[0]}"], calls
