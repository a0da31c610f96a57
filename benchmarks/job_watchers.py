"""Benchmark: N ``SlurmJobEventTrigger`` watchers of one cluster, coalesced vs each polling on its own.

Run: ``.venv/bin/python -m benchmarks.job_watchers [--sizes 1,10,100,1000] [--interval 0.5] [--polls 8]``

Each size runs in one asyncio loop against the emulator (simulated runs, in this process's threads):
N watchers with distinct name filters, all on one connection and interval, each firing once for its own
job. Modes:

- ``coalesced``: ``SlurmJobEventTrigger.run()`` as shipped before Airflow 3.3 (the provider's own
  coalescing: one poll per connection and interval in the loop). On Airflow 3.3+ the triggerer's shared
  streams group the same watchers by the same key (``shared_stream_key``) and run the same poll once.
- ``baseline``: each watcher runs the poll itself (``filter_shared_stream(open_shared_stream(...))``, as
  a trigger without sharing would: one accounting call per watcher per interval).

Figures: accounting polls (``GET /slurmdb/{v}/jobs/?start_time=...``) per interval, counted over
``--polls`` intervals once every watcher has fired; CPU seconds of the whole run (start-up, the wait and
the emulator's threads, which answer every poll); and whether every watcher fired for its job exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # each watcher logs its start


async def watch(mode: str, triggers: list[Any], seconds: float, polls_so_far: Any) -> tuple[list[list[int]], int]:
    """Run the watchers until each has fired, then ``seconds`` more; the accounting polls of that span."""
    from airflow_provider_slurmapi.triggers.events import SlurmJobEventTrigger

    fired: list[list[int]] = [[] for _ in triggers]
    everyone = asyncio.Event()

    async def one(i: int, trigger: SlurmJobEventTrigger) -> None:
        if mode == "coalesced":
            events = trigger.run()
        else:
            events = trigger.filter_shared_stream(type(trigger).open_shared_stream(trigger.serialize()[1]))
        async for event in events:
            fired[i].append(int(event.payload["job_id"]))
            if all(fired):
                everyone.set()

    tasks = [asyncio.create_task(one(i, t)) for i, t in enumerate(triggers)]
    await asyncio.wait_for(everyone.wait(), 300)
    before = polls_so_far()
    await asyncio.sleep(seconds)
    polls = polls_so_far() - before
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return fired, polls


def measure(size: int, mode: str, interval: float, polls_wanted: int) -> dict[str, Any]:
    from airflow_provider_slurmapi.api.ended import Watermark
    from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
    from airflow_provider_slurmapi.triggers.events import SlurmJobEventTrigger

    class Store:  # the asset state store Airflow 3.3 gives each watcher
        def __init__(self, value: Any) -> None:
            self.value = value

        async def aget(self, key: str, default: Any = None) -> Any:
            return self.value

        async def aset(self, key: str, value: Any) -> None:
            self.value = value

    with SlurmJobApiEmulator(simulate=True, partitions={"debug": 100_000}, min_job_age=3600, log_calls=False) as emu:
        os.environ["AIRFLOW_CONN_SLURMAPI_DEFAULT"] = emu.connection_json()
        started = time.time() - 1
        names = [f"bench-{mode}-{n}" for n in range(size)]
        hook = SlurmJobApiHook()
        script = "#!/bin/bash\n#EMULATOR runtime=0.1\n"
        ids = [hook.submit_job(script, {"name": n, "current_working_directory": "/tmp"}) for n in names]
        triggers = []
        for name in names:
            trigger = SlurmJobEventTrigger(names=name, poll_interval=interval)
            trigger.asset_state_store = Store(Watermark.starting(started).as_dict())  # type: ignore[assignment]
            triggers.append(trigger)
        for job_id in ids:
            emu.wait_for_state(job_id, "COMPLETED")

        def polls_so_far() -> int:
            return sum(1 for c in emu.calls if c.path.startswith("/slurmdb/") and "start_time=" in c.path)

        cpu = time.process_time()
        fired, polls = asyncio.run(watch(mode, triggers, interval * polls_wanted, polls_so_far))
        cpu = time.process_time() - cpu
    return {
        "size": size,
        "mode": mode,
        "polls_per_interval": polls / polls_wanted,
        "cpu_s": cpu,
        "each_fired_once": all(f == [job_id] for f, job_id in zip(fired, ids, strict=True)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100,1000")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--polls", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines too")
    args = parser.parse_args()
    print(f"{'watchers':>8} {'mode':>10} {'polls/interval':>15} {'CPU s':>8} {'each fired once':>16}")
    for size in (int(s) for s in args.sizes.split(",")):
        for mode in ("coalesced", "baseline"):
            row = measure(size, mode, args.interval, args.polls)
            print(
                f"{size:>8} {mode:>10} {row['polls_per_interval']:>15.1f} {row['cpu_s']:>8.2f}"
                f" {row['each_fired_once']!s:>16}"
            )
            if args.json:
                print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
