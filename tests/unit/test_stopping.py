"""A waiting trigger stops when told: no cancel is lost at the end of a call, and the poller ends anyway."""

from __future__ import annotations

import asyncio

import pytest

from airflow_provider_slurmapi.api.watch import within
from airflow_provider_slurmapi.triggers.poller import Observation, SharedJobPoller


class _Client:
    async def aclose(self) -> None:
        return None


def test_a_poller_whose_cancel_was_lost_mid_tick_does_not_sleep_on():
    # Python 3.11's wait_for can swallow a cancel that arrives as a call ends: the last unsubscribe's
    # cancel of the poller's task is then lost while the task is inside a tick. The task must still end,
    # not sleep for an interval (the test hung for the 300 s pytest timeout before).
    async def scenario() -> bool:
        poller = SharedJobPoller(("loop", "conn", 3600.0), _Client(), 3600.0)  # type: ignore[arg-type]
        ticks = 0

        async def tick() -> dict[str, Observation]:
            nonlocal ticks
            ticks += 1
            # What unsubscribe does, but its cancel is lost: the task runs on.
            poller.subscribers.clear()
            poller._task = None
            return {}

        poller.tick = tick  # type: ignore[method-assign]
        poller.subscribe("1")
        task = asyncio.all_tasks() - {asyncio.current_task()}
        done, _ = await asyncio.wait(task, timeout=5)
        return bool(done) and ticks == 1

    assert asyncio.run(scenario())


@pytest.mark.parametrize("bound", [within], ids=["client.within"])
def test_a_cancel_that_comes_as_a_call_ends_is_not_lost(bound):
    # The call's result and the cancel arrive in the same turn of the loop: asyncio.wait_for on Python
    # 3.11 returns the result and drops the cancel; the client's bound must raise CancelledError.
    async def scenario() -> str:
        reply = asyncio.get_running_loop().create_future()

        async def call() -> int:
            return await reply

        task = asyncio.create_task(bound(5, call()))
        for _ in range(3):
            await asyncio.sleep(0)
        reply.set_result(200)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(scenario()) == "cancelled"
