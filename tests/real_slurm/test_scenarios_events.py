"""``SlurmJobEventTrigger`` on the emulator and on real Slurm, same code.

What the watcher depends on is proven here first: accounting's ``start_time=T`` lists the jobs that
ended at or after ``T`` (not those that ended before), and ``skip_steps`` leaves the steps out. Then the
watchers, fed the snapshots the real poll code reads: each fires once per matching job, nothing for the
others, and nothing again once restarted from its stored watermark. Under a real triggerer (Airflow 3.3,
the asset state store, a DAG scheduled on the asset): tests/standalone/test_job_events.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pytest
from backends import Backend

from airflow_provider_slurmapi.api.ended import Watermark
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.events import EndedJobs, SlurmJobEventTrigger, ended_since
from tests.fixtures import AssetStateStore

pytestmark = pytest.mark.timeout(600)
OK = "#!/bin/bash\necho done\n"
FAIL = "#!/bin/bash\nexit 3\n"


def watcher(store: AssetStateStore, **kwargs: Any) -> SlurmJobEventTrigger:
    trigger = SlurmJobEventTrigger(poll_interval=3600, settle=60, **kwargs)
    trigger.asset_state_store = store  # type: ignore[assignment]
    return trigger


async def snapshot(trigger: SlurmJobEventTrigger) -> EndedJobs:
    """One poll, by the code the triggerer runs for a group of watchers."""
    stream = cast(AsyncGenerator[EndedJobs, None], type(trigger).open_shared_stream(trigger.serialize()[1]))
    try:
        return await stream.__anext__()
    finally:
        await stream.aclose()


async def fired(trigger: SlurmJobEventTrigger, *snapshots: EndedJobs) -> list[dict[str, Any]]:
    async def feed() -> AsyncIterator[EndedJobs]:
        for item in snapshots:
            yield item

    return [event.payload async for event in trigger.filter_shared_stream(feed())]


def run_jobs(backend: Backend, hook: SlurmJobApiHook, jobs: dict[str, str]) -> dict[str, SlurmJob]:
    """Submit ``name -> script``, wait for each to end and for accounting to list it ended; by name."""
    ids = {name: hook.submit(backend.spec(script, name=name)).job_id for name, script in jobs.items()}
    for job_id in ids.values():
        backend.wait_for_end(hook, job_id)
    deadline = time.monotonic() + 60
    while True:
        listed = {job.job_id: job for job in asyncio.run(_ended_since(hook, time.time() - 600))}
        if all(job_id in listed and listed[job_id].state.is_terminal for job_id in ids.values()):
            return {name: listed[job_id] for name, job_id in ids.items()}
        if time.monotonic() > deadline:
            pytest.fail(f"{backend.name}: accounting does not list {ids} as ended")
        time.sleep(0.5)


async def _ended_since(hook: SlurmJobApiHook, since: float) -> list[SlurmJob]:
    async with await hook.get_async_conn() as client:
        return await ended_since(client, since)


def test_accounting_lists_the_jobs_that_ended_since_a_time(backend: Backend, monkeypatch):
    hook = backend.connect(monkeypatch)
    prefix = f"evt-{uuid.uuid4().hex[:6]}"
    before = run_jobs(backend, hook, {f"{prefix}-before": OK})[f"{prefix}-before"]
    assert before.end_time is not None
    boundary = before.end_time.timestamp() + 1
    while time.time() < boundary + 1:  # the next job ends in a later second than the boundary
        time.sleep(0.2)
    after = run_jobs(backend, hook, {f"{prefix}-after": OK})[f"{prefix}-after"]

    listed = asyncio.run(_ended_since(hook, boundary))
    names = {job.name for job in listed}
    assert f"{prefix}-after" in names and f"{prefix}-before" not in names, sorted(names)
    (record,) = [job for job in listed if job.job_id == after.job_id]
    assert record.raw.get("steps") == [], "skip_steps leaves the steps out"


def test_watchers_fire_once_per_matching_job_and_not_again_after_a_restart(backend: Backend, monkeypatch):
    hook = backend.connect(monkeypatch)
    prefix = f"evt-{uuid.uuid4().hex[:6]}"
    stores = {key: AssetStateStore() for key in ("completed", "failed", "nobody")}
    started = time.time() - 1  # the watchers "started" here: jobs that end later are theirs

    def watchers() -> dict[str, SlurmJobEventTrigger]:
        made = {
            "completed": watcher(stores["completed"], name_prefix=f"{prefix}-train", states=["COMPLETED"]),
            "failed": watcher(stores["failed"], name_prefix=prefix, states="FAILED"),
            "nobody": watcher(stores["nobody"], users="no-such-user"),
        }
        for key, trigger in made.items():  # a watcher that has run before keeps its own watermark
            stores[key].values.setdefault(trigger._state_key, Watermark.starting(started).as_dict())
        return made

    first = watchers()
    jobs = run_jobs(
        backend,
        hook,
        {
            f"{prefix}-train-1": OK,
            f"{prefix}-train-2": OK,
            f"{prefix}-train-3": OK,
            f"{prefix}-train-bad": FAIL,
            f"{prefix}-other": OK,
        },
    )
    poll = asyncio.run(snapshot(first["completed"]))
    events = {key: asyncio.run(fired(trigger, poll)) for key, trigger in first.items()}

    assert sorted(e["name"] for e in events["completed"]) == [f"{prefix}-train-{n}" for n in (1, 2, 3)]
    assert [e["job_id"] for e in events["failed"]] == [jobs[f"{prefix}-train-bad"].job_id]
    assert events["failed"][0]["state"].startswith("FAILED") and events["failed"][0]["exit_code"] == 3
    assert events["nobody"] == []
    assert {e["user"] for e in events["completed"]} == {backend.user}

    # The triggerer restarts: new trigger objects, the same stored watermarks, the next polls.
    again = watchers()
    later = asyncio.run(snapshot(again["completed"]))
    assert {key: asyncio.run(fired(trigger, later)) for key, trigger in again.items()} == {
        "completed": [],
        "failed": [],
        "nobody": [],
    }
    # ... and a job that ends after the restart fires.
    new = run_jobs(backend, hook, {f"{prefix}-train-4": OK})[f"{prefix}-train-4"]
    latest = asyncio.run(snapshot(again["completed"]))
    assert [e["job_id"] for e in asyncio.run(fired(again["completed"], latest))] == [new.job_id]


def test_many_watchers_share_one_accounting_call(backend: Backend, monkeypatch):
    """Before 3.3's shared streams, the provider coalesces the watchers of one event loop itself."""
    hook = backend.connect(monkeypatch)
    prefix = f"evt-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{n}" for n in range(5)]
    started = time.time() - 1
    run_jobs(backend, hook, dict.fromkeys(names, OK))
    triggers = []
    for name in names:
        store = AssetStateStore()
        trigger = watcher(store, names=name)
        store.values[trigger._state_key] = Watermark.starting(started).as_dict()
        triggers.append(trigger)

    async def first_event(trigger: SlurmJobEventTrigger) -> dict[str, Any]:
        events = cast(AsyncGenerator[Any, None], trigger.run())
        try:
            return (await events.__anext__()).payload
        finally:
            await events.aclose()

    async def all_watchers() -> list[dict[str, Any]]:
        return await asyncio.gather(*(first_event(t) for t in triggers))

    calls_before = len(backend.emu.calls)
    payloads = asyncio.run(asyncio.wait_for(all_watchers(), 120))
    polls = [c for c in backend.emu.calls[calls_before:] if c.path.startswith("/slurmdb/") and "start_time=" in c.path]
    assert [p["name"] for p in payloads] == names
    assert len(polls) == 1, polls
