"""Benchmark: N deferred jobs each printing a line a second, their output streamed into the task log by one
triggerer loop, against the same wait without streaming, in the same run.

Run: ``.venv/bin/python -m benchmarks.streaming_at_scale [--n 1000] [--duration 90] [--interval 5]
[--output-interval 30] [--modes plain,streaming]``

Each measurement runs in a fresh subprocess (its CPU is its own) with N ``SlurmJobTrigger`` in one event loop,
as a triggerer runs them, against the emulator in simulated-run mode (``benchmarks.waiting_at_scale``'s, in
another process) and fake-gcs-server (the tests' ``FakeGcs``, a fresh one per mode; its own log counts the
triggers' requests). The N jobs are submitted held (RUNNING, their clocks not started); once every trigger has
polled, their clocks start and each runs ``--duration`` seconds.

- ``plain``: the triggers as the operator defers without ``staging_uri`` (no output followed).
- ``streaming``: as it defers with ``staging_uri``: each trigger follows its job's staged output, sharing
  one listing per poll interval of the staging location's announcements (``.changes/``), and logs each new
  line.

In both modes, the parent process writes what N jobs' wrappers would write, from the release on: each job
"prints" a line a second (its text carries the time it was printed) and every ``--output-interval`` seconds
(each job at its own phase) stores the new bytes as a chunk of its stdout and announces it, as
``api/staging.py``'s wrapper does (the triggers only GET, the writers only POST). The jobs print until
``LAST_PASS`` seconds before they end, leaving time for their last passes (N at once from one writer
here). Simulated jobs run no script, so the writer stands in for the wrapper; the
wrapper's own uploads are proven on the emulator and real Slurm by ``tests/real_slurm/test_scenarios_staging.py``.

Figures, from the release to the last event: Slurm API calls per tick (the emulator's count; streaming must
add none), storage requests per tick while the jobs run and at their end (fake-gcs-server's count), CPU seconds
(the goal: streaming at most 2x plain), event-loop lag p99 (a 10 Hz sleep probe; goal at most 50 ms), and
the print-to-log delay p50/p95 of the lines stored while the jobs ran (the time a line was logged less the
time it was printed; goal: p95 at most output interval + poll interval + 2 s), and whether every line printed was
logged exactly once; ``late p95``: how long after its time the writers made a store (their own lag, which
the delay includes: a figure over a second or two means this machine could not write as fast as the jobs
would). The lines are logged through the triggers' own logger into a handler that only reads
them: what Airflow's log handlers then cost (a file per task, shipping to remote logging) is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.waiting_at_scale import EmulatorProcess, cpu_at, pct

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BUCKET = "bench-staging"
PREFIX = "bench"
LAST_PASS = 30.0
PUBLISH_GROUP = 50
LINE = re.compile(r"\[(\d+) stdout\] line (\d+) printed (\d+\.\d+)")


def task_instance(i: int) -> Any:
    from airflow_provider_slurmapi.api.staging import StagingLocation

    return StagingLocation(BUCKET, PREFIX).for_task_instance("bench", f"t{i}", "run", -1)


# -- the measured process -------------------------------------------------------------------------


def measure(mode: str, n: int, interval: float, duration: float) -> dict[str, Any]:
    """Child: submit N held jobs, follow them with N triggers in one loop until they end, report figures."""
    import asyncio
    import logging

    import structlog

    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.api.staging import StagingLocation
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
    from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger

    hook = SlurmJobApiHook()
    jobs: list[int] = []
    for i in range(n):
        script = f"#!/bin/bash\n#EMULATOR runtime={duration:.3f} hold=1 exit=0\ntrue\n"
        jobs.append(hook.submit(JobSpec.build(script, {"current_working_directory": "/bench", "name": f"s{i}"})).job_id)
    hook.get_conn().close()

    logged: list[tuple[float, str]] = []

    def capture(logger: Any, method: str, event: Any) -> Any:
        # The end of the triggers' log chain (Airflow 3's structlog): keep the line and its time, no output.
        logged.append((time.time(), str(event.get("event"))))
        raise structlog.DropEvent

    structlog.configure(
        processors=[structlog.stdlib.PositionalArgumentsFormatter(), capture],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,
    )
    lags: list[tuple[float, float]] = []
    ends: dict[int, float] = {}
    cpu_samples: list[tuple[float, float]] = []
    sampling = threading.Event()

    def sample_cpu() -> None:
        while not sampling.wait(0.5):
            cpu_samples.append((time.time(), time.process_time()))

    async def lag_probe(stop: asyncio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.1)
            lags.append((time.time(), time.perf_counter() - start - 0.1))

    root = StagingLocation(BUCKET, PREFIX)

    async def trigger(i: int, job_id: int) -> None:
        staged = mode == "streaming"
        wait = SlurmJobTrigger(
            job_id,
            poll_interval=interval,
            staging_uri=task_instance(i).uri if staged else None,
            staging_root=root.uri if staged else None,
            read_results=True,  # as the operator's (publish_results): the wrapper's report comes with the end
        )
        async for event in wait.run():
            assert event.payload["status"] == "success", event.payload
            ends[job_id] = time.time()
            return

    async def main() -> None:
        stop = asyncio.Event()
        probe = asyncio.ensure_future(lag_probe(stop))
        await asyncio.gather(*(trigger(i, j) for i, j in enumerate(jobs)))
        stop.set()
        await probe

    print(json.dumps({"job_ids": jobs}), flush=True)
    sampler = threading.Thread(target=sample_cpu, daemon=True)
    sampler.start()
    cpu0 = time.process_time()
    profile = os.environ.get("BENCH_PROFILE")  # a folder: the run's cProfile goes there
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.runcall(asyncio.run, main())
        profiler.dump_stats(f"{profile}/streaming-{mode}-{n}.prof")
    else:
        asyncio.run(main())
    end = time.time()
    sampling.set()
    sampler.join()
    cpu_samples.append((end, time.process_time()))
    lines = []
    for at, message in logged:
        for found in LINE.finditer(message):  # a record holds the lines of a poll
            lines.append((int(found.group(1)), int(found.group(2)), at - float(found.group(3))))
    return {"cpu0": cpu0, "cpu_samples": cpu_samples, "end": end, "lags": lags, "lines": lines, "ends": ends}


# -- the jobs' writers (the parent) ---------------------------------------------------------------


class Writers:
    """What N jobs' wrappers write while they run: a line a second each, a chunk and its announcement
    every ``every`` seconds at the job's own phase, until ``until``."""

    def __init__(
        self,
        storage: Any,
        jobs: list[int],
        every: float,
        start: float,
        until: float,
        publish: Callable[[str], Any] | None = None,
    ) -> None:
        """Lines are printed from ``start`` to ``until``; each job's last pass at ``until`` (which must leave
        the writers time to store everything before the jobs end), then ``publish`` is given each job's
        ``<job>:<bytes staged>``."""
        self.storage = storage
        self.publish = publish
        self.jobs = jobs
        self.every = every
        self.start = start
        self.until = until
        self.printed: dict[int, int] = dict.fromkeys(jobs, 0)  # lines stored per job
        self.offsets: dict[int, int] = dict.fromkeys(jobs, 0)
        self.failures = 0
        self.late: list[float] = []  # how long after its time each store while running was made (their own lag)
        self.final_from: dict[int, int] = {}  # per job, the first line its last pass (at its end) stored
        self.final_done: list[float] = []  # when each last pass was stored
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-writers")

    def begin(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _store(self, i: int, job: int, upto: float, last: bool = False) -> None:
        from airflow_provider_slurmapi.api.staging import (
            StagingLocation,
            announcement_name,
            chunk_name,
            inline_metadata,
        )

        if last:
            self.final_from[job] = self.printed[job]
        else:
            self.late.append(time.time() - upto)

        first = self.printed[job]
        count = int(upto - self.start) + 1 - first  # line k is printed at start + k
        if count <= 0:
            return
        data = "".join(
            f"line {k} printed {self.start + k:.3f} {'x' * 40}\n" for k in range(first, first + count)
        ).encode()
        run = StagingLocation(BUCKET, f"{task_instance(i).prefix}/try-1").for_job(str(job))
        name = run.object_name(chunk_name("stdout", self.offsets[job]))
        try:
            self.storage.write(BUCKET, name, data)
            announcement = announcement_name(StagingLocation(BUCKET, PREFIX), int(time.time()), name)
            self.storage.write(BUCKET, announcement, b"", inline_metadata(data))
        except Exception:
            self.failures += 1
            return
        self.printed[job] += count
        self.offsets[job] += len(data)
        if last:
            self.final_done.append(time.time())

    def _run(self) -> None:
        n = len(self.jobs)
        # Each job stores at start + phase + k * every; the last store at its end (``until``) takes the rest.
        schedule = sorted(
            (self.start + self.every * (i + 1) / n + k * self.every, i)
            for i in range(n)
            for k in range(int((self.until - self.start) / self.every) + 1)
            if self.start + self.every * (i + 1) / n + k * self.every < self.until
        )
        with ThreadPoolExecutor(8) as pool:
            for at, i in schedule:
                delay = at - time.time()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(self._store, i, self.jobs[i], at)
        # Each job's last pass, as its wrapper makes at its exit, then its publication with the report of what
        # it staged: by groups of PUBLISH_GROUP jobs (one request to the emulator each), so that the one writer
        # here publishes before the jobs end, as N wrappers in parallel would.
        numbered = list(enumerate(self.jobs))
        with ThreadPoolExecutor(8) as pool:
            for first in range(0, n, PUBLISH_GROUP):
                group = numbered[first : first + PUBLISH_GROUP]
                for done in [pool.submit(self._store, i, job, self.until - 0.001, True) for i, job in group]:
                    done.result()
                if self.publish is not None:
                    self.publish(" ".join(f"{job}:{self.offsets[job]}" for _, job in group))


def run_case(
    emu: EmulatorProcess, storage: Any, mode: str, n: int, interval: float, duration: float, every: float
) -> dict[str, Any]:
    before = emu.stats()
    # Straight to fake-gcs-server: its own log counts the triggers' requests (they only GET; the writers POST).
    env = dict(
        os.environ,
        AIRFLOW_CONN_SLURMAPI_DEFAULT=emu.conn,
        PYTHONPATH=str(ROOT),
        STORAGE_EMULATOR_HOST=storage.direct_url,
    )
    child = subprocess.Popen(
        [PY, "-m", "benchmarks.streaming_at_scale", "--measure", mode, str(n), str(interval), str(duration)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    assert child.stdout is not None
    jobs = json.loads(child.stdout.readline())["job_ids"]
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout or ()), daemon=True)
    reader.start()
    emu.ask(f"release-when-polled {before['calls']} {' '.join(map(str, jobs))}")
    released = None
    while released is None:
        time.sleep(0.2)
        released = emu.ask("released")["at"]
    # The jobs print until LAST_PASS seconds before they end: time for their last passes (N at once from one
    # writer here, N nodes in parallel on a cluster) to be stored before the triggers see the jobs end.
    writers = Writers(
        storage, jobs, every, released, released + duration - LAST_PASS, lambda jobs: emu.ask(f"publish-staged {jobs}")
    )
    writers.begin()
    reader.join()
    writers.join()
    if child.wait() != 0 or not output:
        raise RuntimeError(f"the {mode} measurement failed")
    figures = json.loads(output[-1])
    requests = [(at, path) for at, method, path in storage.server_requests() if method == "GET" and at >= released]
    after = emu.stats()
    release_index = emu.ask("released")["index"]
    calls = sum(1 for p in after["paths"][release_index:] if "submit" not in p)
    wait_s = figures["end"] - released
    ticks = max(1.0, wait_s / interval)
    lines = figures["lines"]
    logged: dict[tuple[int, int], int] = {}
    for job, k, _ in lines:
        logged[(job, k)] = logged.get((job, k), 0) + 1
    printed = sum(writers.printed.values())
    # The delay of the lines stored while the jobs ran: the lines of the jobs' last passes are read when
    # the jobs end, and here all N jobs end at once, which N nodes would write in parallel, not one writer.
    delays = [delay for job, k, delay in lines if k < writers.final_from.get(job, k + 1)]
    lags = [lag for t, lag in figures["lags"] if t >= released]
    # The storage requests while the jobs run, and those of their ends (each trigger's last listing).
    first_end = min(figures["ends"].values()) if figures["ends"] else figures["end"]
    running_s = max(1.0, first_end - released)
    return {
        "mode": mode,
        "n": n,
        "wait_s": wait_s,
        "slurm_calls_per_tick": calls / ticks,
        "storage_per_tick": len(requests) / ticks,
        "storage_running_per_tick": sum(1 for at, _ in requests if at < first_end) / (running_s / interval),
        "storage_total": len(requests),
        "cpu_s": figures["cpu_samples"][-1][1] - cpu_at(figures["cpu_samples"], released),
        "lag_p99_ms": 1000 * pct(lags, 0.99),
        "delay_p50_s": pct(delays, 0.50),
        "delay_p95_s": pct(delays, 0.95),
        "lines_printed": printed if mode == "streaming" else 0,
        "lines_logged": len(logged),
        "lines_twice": sum(1 for c in logged.values() if c > 1),
        "writer_failures": writers.failures,
        "writer_late_p95_s": pct(writers.late, 0.95),
        "missing_last_pass": sum(
            1
            for job in jobs
            for k in range(writers.final_from.get(job, 0), writers.printed[job])
            if (job, k) not in logged
        ),
        "missing_running": sum(
            1 for job in jobs for k in range(writers.final_from.get(job, 0)) if (job, k) not in logged
        ),
        # Last passes stored after their job ended (a loaded machine's writer falls behind): the trigger
        # may have read the job's end before them, which a real job's wrapper never lets happen.
        "last_pass_after_end": sum(1 for at in writers.final_done if at > released + duration),
        "requests_by_kind": request_kinds(requests, first_end),
    }


def request_kinds(requests: list[tuple[float, str]], first_end: float) -> dict[str, int]:
    """How many of the triggers' storage requests were listings of the announcements, listings of a task
    instance's own prefix, and reads of an object, while the jobs ran and at their ends."""
    kinds: dict[str, int] = {}
    for at, path in requests:
        if "alt=media" in path:
            kind = "read"
        elif "prefix=" in path:
            kind = "feed listing" if "%2F.changes%2F" in path or "/.changes/" in path else "own listing"
        else:
            kind = "other"
        key = f"{kind} {'running' if at < first_end else 'end'}"
        kinds[key] = kinds.get(key, 0) + 1
    return dict(sorted(kinds.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=90.0, help="seconds each job runs once released")
    parser.add_argument("--interval", type=float, default=5.0, help="the triggers' poll_interval")
    parser.add_argument("--output-interval", type=float, default=30.0, help="the jobs' output_interval")
    parser.add_argument("--modes", default="plain,streaming")
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        mode, n, interval, duration = args.measure
        print(json.dumps(measure(mode, int(n), float(interval), float(duration))), flush=True)
        return

    from tests.harness.storage import FakeGcs

    rows = []
    emu = EmulatorProcess()
    try:
        for mode in args.modes.split(","):
            # A fresh server for each mode: fake-gcs-server's in-memory store writes slower as it fills.
            with FakeGcs() as storage:
                storage.create_bucket(BUCKET)
                rows.append(run_case(emu, storage, mode, args.n, args.interval, args.duration, args.output_interval))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        emu.close()
    goal_delay = args.output_interval + args.interval + 2
    print(
        f"N={args.n} jobs, a line a second each for {args.duration:.0f} s; poll_interval {args.interval:.0f} s, "
        f"output_interval {args.output_interval:.0f} s\n"
    )
    header = (
        f"{'mode':<10} {'slurm/tick':>10} {'gcs/tick':>9} {'gcs run/tick':>12} {'gcs all':>8} {'CPU s':>7} "
        f"{'lag p99':>8} {'delay p50':>9} {'delay p95':>9} {'printed':>8} {'logged':>8} {'twice':>6} {'late p95':>8}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['mode']:<10} {r['slurm_calls_per_tick']:>10.2f} {r['storage_per_tick']:>9.1f} "
            f"{r['storage_running_per_tick']:>12.1f} {r['storage_total']:>8} {r['cpu_s']:>7.2f} "
            f"{r['lag_p99_ms']:>6.1f}ms {r['delay_p50_s']:>8.1f}s {r['delay_p95_s']:>8.1f}s "
            f"{r['lines_printed']:>8} {r['lines_logged']:>8} {r['lines_twice']:>6} {r['writer_late_p95_s']:>7.1f}s"
        )
    for r in rows:
        if r["requests_by_kind"]:
            kinds = ", ".join(f"{kind} {count}" for kind, count in r["requests_by_kind"].items())
            print(
                f"{r['mode']} storage requests: {kinds}; last passes stored after their job ended: "
                f"{r['last_pass_after_end']}"
            )
    by_mode = {r["mode"]: r for r in rows}
    if {"plain", "streaming"} <= set(by_mode):
        plain, streaming = by_mode["plain"], by_mode["streaming"]
        ratio = streaming["cpu_s"] / max(plain["cpu_s"], 1e-9)
        print(
            f"\nstreaming vs plain: Slurm calls/tick {streaming['slurm_calls_per_tick']:.2f} vs "
            f"{plain['slurm_calls_per_tick']:.2f}; CPU {ratio:.2f}x (goal <= 2x); lag p99 "
            f"{streaming['lag_p99_ms']:.1f} ms (goal <= 50 ms); delay p95 {streaming['delay_p95_s']:.1f} s "
            f"(goal <= {goal_delay:.0f} s); every line logged once: "
            f"{streaming['lines_logged'] == streaming['lines_printed'] and not streaming['lines_twice']}"
        )


if __name__ == "__main__":
    main()
