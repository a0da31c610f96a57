"""SlurmJobEventTrigger against the emulator: what it does when accounting will not answer."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_slurmapi.api.ended import Watermark
from airflow_provider_slurmapi.api.spec import JobSpec
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
from airflow_provider_slurmapi.triggers.events import GAP_TRIES, EndedJobs, SlurmJobEventTrigger, ended_since
from tests.fixtures import AssetStateStore


def test_a_gap_that_cannot_be_read_is_given_up_by_name_and_new_jobs_fire_again(slurmapi_emulator, monkeypatch):
    """A watcher restarted after a long pause reads the gap it missed on its own. When that read keeps
    failing (here: accounting answers 500 to it), it tries GAP_TRIES times, then says which time range it
    gives up and fires for the jobs that end from then on (it used to retry the same read forever)."""
    # One try per read (the client's own retries would only slow the test down).
    monkeypatch.setenv("AIRFLOW_CONN_SLURMAPI_DEFAULT", slurmapi_emulator.connection_json(retries=0))
    hook = SlurmJobApiHook()
    job_id = hook.submit(JobSpec.build("#!/bin/bash\necho hi\n", {"current_working_directory": "/home/t"})).job_id
    hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    store = AssetStateStore()
    trigger = SlurmJobEventTrigger(poll_interval=3600, settle=5)
    trigger.asset_state_store = store  # type: ignore[assignment]
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(f"test-watcher-{id(trigger)}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    trigger._log = logger  # type: ignore[assignment]  # what the trigger logs, as plain records
    stopped = time.time() - 86400  # a day ago
    store.values[trigger._state_key] = Watermark.starting(stopped).as_dict()

    async def polls() -> list[EndedJobs]:
        async with await hook.get_async_conn() as client:
            jobs = [job for job in await ended_since(client, time.time() - 60) if job.job_id == job_id]
        assert jobs, "accounting lists the job that ended"
        now = time.time()
        return [EndedJobs(now + n, now + n - 60, jobs) for n in range(GAP_TRIES)]

    snapshots = asyncio.run(polls())
    # From here on every read of accounting's gap fails; the snapshots are the group's own reads.
    slurmapi_emulator.inject_fault("internal", count=None, path_contains="/slurmdb/")

    async def fired() -> list[dict[str, Any]]:
        async def feed() -> AsyncIterator[EndedJobs]:
            for snapshot in snapshots:
                yield snapshot

        return [event.payload async for event in trigger.filter_shared_stream(feed())]

    events = asyncio.run(asyncio.wait_for(fired(), 120))
    slurmapi_emulator.clear_faults()
    assert [e["job_id"] for e in events] == [job_id]
    given_up = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stopped))
    (warning,) = [line for line in said if "could not read the jobs that ended from" in line]
    assert f"from {given_up} to " in warning and f"({GAP_TRIES} tries" in warning, warning
    assert "those jobs fire no event" in warning
    assert len([line for line in said if "could not read the jobs since it stopped" in line]) == GAP_TRIES - 1
