"""Benchmark: N deferred Slurm jobs watched by one triggerer loop, coalesced vs the usual provider.

Run: ``.venv/bin/python -m benchmarks.waiting_at_scale [--sizes 1,100,1000,2000] [--interval 5] [--spread 240]``
(``--standalone 500``: the same wait in a real ``airflow standalone`` triggerer, see
``benchmarks/standalone_triggerer.py``).

Each measurement runs in a fresh subprocess (so CPU and RSS are that process's alone), against the
emulator in simulated-run mode in another process. The N jobs are submitted held (``#EMULATOR hold=1``:
RUNNING, their clock not started); once the emulator has seen every job polled at least once (every
trigger of the run is polling, however long its start-up took), it starts their clocks and the job ends
come staggered over the next ``--spread`` seconds. So every mode waits through the same job ends.

Modes:

- ``coalesced``: ``SlurmJobTrigger`` as shipped (one shared poller per connection and interval).
- ``results`` (``--modes coalesced,results``): ``coalesced`` with ``read_results=True``, as the operator's
  ``publish_results`` (default) runs it, on jobs whose comment carries what the operator's wrapper publishes
  at a job's exit, and whose accounting comment carries the wrapper's percent-quoted copy (``sacctmgr
  modify job``, as on nodes that have ``sacctmgr``). A simulated run runs no script, so the comment is set
  at the submit and the copy written through the emulator's own ``sacctmgr`` before the job ends; the
  poller reads them only once the job has ended: the tick's batched accounting read carries them.
- ``results-queue``: the same without the accounting copy (no ``sacctmgr`` on the nodes, or
  ``SLURMAPI_PUBLISH_ACCOUNTING=0``): accounting keeps no comment (Slurm's default), so the jobs that ended
  in the queue are read from there (one call; only their records are decoded), and once the poller has
  seen that, instead of accounting.
- ``results-silent``: the same with jobs that publish nothing (a job that ran without the wrapper): the
  poller never learns that accounting lacks comments and reads both, accounting and the queue: the worst case.
- ``baseline``: what the usual provider does (issue #7's definition): each trigger reads the connection,
  has its own httpx client and its own token source, and makes one GET per job per tick.
- ``slow-token`` (with ``--slow-token S``): ``coalesced`` again, but ``--slow-token-at`` seconds into the
  wait the emulator expires every access token and its token endpoint then answers only after S seconds;
  the event-loop lag is reported for that window too.

Figures: the start-up (first trigger started -> clocks released), API calls per tick and in total from
the release on (and ``nominal``: one call per job per tick until the job ended, what the baseline is
meant to make; ``all calls``: the whole run, start-up included), CPU seconds from the release on and over
the whole run, peak RSS and RSS per waiting trigger, event-loop lag p50/p99 (a sleep probe, whole
run), detection latency (job end, from the release -> event) p50/p95, token fetches.

CPU s is the measured process's CPU time (user + system, every thread: the event loop and the workers
that refresh tokens; sampled twice a second to cut at the release), up to the last trigger's event,
counted the same way in every mode; it excludes interpreter start-up, imports and submitting the jobs.
It includes the lag probe: ``--probe-hz`` wake-ups a second (default 10) in ``coalesced`` and ``baseline``
alike, 100 in ``slow-token`` (its 10 s window needs the samples; its CPU is not compared). On a 2-core VM
one asyncio timer wake-up costs about 0.2 ms of CPU, so a 100 Hz probe alone would be about 5 s over the
4 minutes, more than the coalesced triggers themselves. Then the provider's import cost and a
hook round trip against a bare ``requests.post``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the emulator process -------------------------------------------------------------------------


def serve_emulator() -> None:
    """Child: a simulated-run emulator; prints its connection, answers 'calls' on stdin with counters."""
    from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
    from airflow_provider_slurmapi.emulator.scontrol import sacctmgr, update

    with SlurmJobApiEmulator(simulate=True, partitions={"debug": 100_000}, min_job_age=3600) as emu:
        print(json.dumps({"conn": emu.connection_json()}), flush=True)
        for line in sys.stdin:
            command, *args = line.split()
            if command == "calls":
                calls = list(emu.calls)
                print(
                    json.dumps({"calls": len(calls), "paths": [c[1] for c in calls], "tokens": emu.token_requests}),
                    flush=True,
                )
            elif command == "slow-token":
                # At epoch ``at``: every token issued so far is refused (401), and the next token request
                # is answered after ``delay`` seconds.
                at, delay = float(args[0]), float(args[1])

                def expire(delay: float = delay) -> None:
                    emu.inject_fault("token_slow", delay=delay)
                    emu.expire_tokens()

                threading.Timer(max(0.0, at - time.time()), expire).start()
                print("{}", flush=True)
            elif command == "release-when-polled":
                # Start the held job ends (``#EMULATOR hold=1``) once each of these ids has been asked
                # about at least once by a call from index ``args[0]`` on: every trigger is polling.
                threading.Thread(
                    target=release_when_polled, args=(emu, int(args[0]), set(args[1:])), daemon=True
                ).start()
                print("{}", flush=True)
            elif command == "publish":
                # Each job's own publication in its queue comment, naming the job (scontrol update, as the
                # wrapper writes it at the job's exit).
                for job_id in args:
                    code, _, err = update(
                        emu._cluster, ["update", f"JobId={job_id}", f"Comment={published_comment(job_id)}"]
                    )
                    assert code == 0, err
                print("{}", flush=True)
            elif command == "publish-staged":
                # Each job's publication with its staging report (``<job>:<stdout bytes staged>``), as the
                # wrapper writes it at the job's exit after its last chunk (benchmarks/streaming_at_scale.py).
                # A job that already ended (a loaded machine's writer fell behind) is counted, not published.
                late = 0
                for item in args:
                    job_id, size = item.split(":")
                    code, _, err = update(
                        emu._cluster, ["update", f"JobId={job_id}", f"Comment={staged_comment(job_id, int(size))}"]
                    )
                    late += code != 0 and "finished" in err
                    assert code == 0 or "finished" in err, err
                print(json.dumps({"late": late}), flush=True)
            elif command == "account-copy":
                # Each job's accounting comment: the wrapper's percent-quoted copy of its comment, written
                # as a job does, with the emulator's sacctmgr.
                for job_id in args:
                    code, _, err = sacctmgr(
                        emu._cluster,
                        [
                            "-i",
                            "modify",
                            "job",
                            "where",
                            f"JobId={job_id}",
                            "set",
                            f"Comment={accounting_copy(emu.job(int(job_id))['comment'])}",
                        ],
                    )
                    assert code == 0, err
                print("{}", flush=True)
            elif command == "released":
                print(json.dumps({"at": released_at, "index": released_index}), flush=True)
            elif command == "quit":
                break


released_at: float | None = None
released_index = 0
# The job ids a call asks about (the batched state read, one job's read, accounting's steps).
POLLED_ID = re.compile(r"(?:job_id=|/job/|step=)(\d+)")


def release_when_polled(emu: Any, start: int, waiting: set[str]) -> None:
    global released_at, released_index
    released_at = None
    seen = start
    while waiting:
        calls = emu.calls
        for call in calls[seen:]:
            waiting.difference_update(POLLED_ID.findall(call.path))
        seen = len(calls)
        time.sleep(0.2)
    released_index = len(emu.calls)
    emu.release_held()
    released_at = time.time()


class EmulatorProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, "-m", "benchmarks.waiting_at_scale", "--serve-emulator"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        self.conn = json.loads(self.proc.stdout.readline())["conn"]

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self.ask("calls")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # its shutdown is not measured: do not let it hold the figures
            self.proc.kill()
            self.proc.wait()


# -- one measurement (a fresh process) ------------------------------------------------------------


def published_comment(job_id: str) -> str:
    """A comment as the operator's wrapper leaves it at a job's exit when the job wrote no result and
    printed nothing (api/results.py: the mark, then the job's id, result status, merged, result, stdout and
    stderr tails)."""
    from airflow_provider_slurmapi.api.results import MARK, RESULT_NONE, SEP, parse

    comment = f"bench {MARK}" + SEP.join(["", job_id, RESULT_NONE, "0", "", "", ""])
    assert parse(comment, job_id) is not None
    return comment


def staged_comment(job_id: str, stdout_bytes: int) -> str:
    """A comment as the wrapper leaves it at the exit of a job that staged ``stdout_bytes`` of output (stderr
    merged) and wrote no result: the publication with its staging report."""
    from airflow_provider_slurmapi.api.results import MARK_STAGED, RESULT_NONE, SEP, parse

    report = f"try=1;run=0;stdout={stdout_bytes}/{stdout_bytes};stderr=merged;result=none;error="
    comment = f"bench {MARK_STAGED}" + SEP.join(["", job_id, RESULT_NONE, "1", report, "", "", ""])
    published = parse(comment, job_id)
    assert published is not None and published.staged == report
    return comment


def accounting_copy(comment: str) -> str:
    """What the wrapper writes as the job's accounting comment (api/results.py's wrapper, in Python): the
    record with ``%``, quotes and backticks percent-quoted, marked :data:`QUOTED`."""
    from airflow_provider_slurmapi.api.results import MARK, QUOTED, split

    quoted = re.sub("[%\"'`]", lambda m: f"%{ord(m.group()):02X}", comment)
    copy = quoted.replace(MARK, MARK + QUOTED, 1)
    assert split(copy) == split(comment)
    return copy


def runtime_of(i: int, n: int, spread: float) -> float:
    return 1.0 + spread * (i + 1) / n


def measure(mode: str, n: int, interval: float, spread: float, probe_hz: float) -> dict[str, Any]:
    """Child: submit N held simulated jobs, wait for all of them with N triggers in one loop, report figures.

    The jobs' clocks start (``#EMULATOR hold=1``) only when the parent has seen every trigger poll, so
    every mode waits through the same ``spread`` seconds of job ends, whatever its start-up costs.
    """
    import asyncio

    from airflow_provider_slurmapi.api.auth import TokenSource
    from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
    from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger

    hook = SlurmJobApiHook()
    runtimes: dict[int, float] = {}
    for i in range(n):
        runtime = runtime_of(i, n, spread)
        script = f"#!/bin/bash\n#EMULATOR runtime={runtime:.3f} hold=1 exit=0\ntrue\n"
        fields = {"current_working_directory": "/bench", "name": f"b{i}"}
        job_id = hook.submit(JobSpec.build(script, fields)).job_id
        runtimes[job_id] = runtime
    hook.get_conn().close()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lags: list[tuple[float, float]] = []
    events: dict[int, float] = {}
    cpu_samples: list[tuple[float, float]] = []
    sampling = threading.Event()

    def sample_cpu() -> None:
        # Process CPU (all threads) twice a second, so the parent can cut out the window of job ends.
        while not sampling.wait(0.5):
            cpu_samples.append((time.time(), time.process_time()))

    period = 1.0 / probe_hz

    async def lag_probe(stop: asyncio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(period)
            lags.append((time.time(), time.perf_counter() - start - period))

    profile = os.environ.get("BENCH_PROFILE")
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()

    def ended(job_id: int) -> None:
        if profiler is not None and not events:
            profiler.enable()  # the profile covers the job ends (from the first event on), not the start-up
        events[job_id] = time.time()

    async def trigger(job_id: int) -> None:
        wait = SlurmJobTrigger(job_id, poll_interval=interval, coalesce=True, read_results=mode.startswith("results"))
        async for event in wait.run():
            assert event.payload["status"] == "success", event.payload
            ended(job_id)
            return

    async def usual_provider(job_id: int) -> None:
        # Issue #7's baseline: per trigger, the connection read, its own HTTP client and token source,
        # one GET of the job per tick until it has ended.
        settings = await SlurmJobApiHook().aget_settings()
        tokens = TokenSource(settings.auth)
        async with AsyncSlurmJobApiClient(settings.cluster, tokens=tokens, **settings.client_kwargs()) as client:
            while not (await client.get_job(job_id)).state.is_terminal:
                await asyncio.sleep(interval)
        ended(job_id)

    wait_one = usual_provider if mode == "baseline" else trigger

    async def main() -> None:
        stop = asyncio.Event()
        probe = asyncio.ensure_future(lag_probe(stop))
        await asyncio.gather(*(wait_one(j) for j in runtimes))
        stop.set()
        await probe

    print(json.dumps({"started": time.time(), "job_ids": list(runtimes)}), flush=True)
    sampler = threading.Thread(target=sample_cpu, daemon=True)
    sampler.start()
    cpu0, wall0 = time.process_time(), time.time()
    asyncio.run(main())
    cpu, wall = time.process_time() - cpu0, time.time() - wall0
    end = time.time()
    sampling.set()
    sampler.join()
    cpu_samples.append((end, cpu0 + cpu))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(f"{profile}/{mode}-{n}.prof")
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "cpu_s": cpu,
        "cpu0": cpu0,
        "cpu_samples": cpu_samples,
        "wall_s": wall,
        "end": end,
        "rss_peak_kb": rss_peak,
        "rss_per_trigger_kb": max(0, rss_peak - rss_before) / n,
        "lags": [(round(t, 3), round(lag, 5)) for t, lag in lags],
        "events": {str(j): t for j, t in events.items()},
        "runtimes": {str(j): r for j, r in runtimes.items()},
    }


def cpu_at(samples: list[tuple[float, float]], at: float) -> float:
    """The process's CPU seconds at time ``at``, from the samples (linear between the two around it)."""
    before = [s for s in samples if s[0] <= at]
    after = [s for s in samples if s[0] > at]
    if not before:
        return samples[0][1]
    if not after:
        return before[-1][1]
    (t0, c0), (t1, c1) = before[-1], after[0]
    return c0 + (c1 - c0) * (at - t0) / (t1 - t0)


def run_case(
    emu: EmulatorProcess,
    mode: str,
    n: int,
    interval: float,
    spread: float,
    slow: tuple[float, float] | None = None,
    probe_hz: float = 10.0,
) -> dict[str, Any]:
    before = emu.stats()
    env = dict(os.environ, AIRFLOW_CONN_SLURMAPI_DEFAULT=emu.conn, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [PY, "-m", "benchmarks.waiting_at_scale", "--measure", mode, str(n), str(interval), str(spread), str(probe_hz)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    assert child.stdout is not None
    hello = json.loads(child.stdout.readline())
    started = hello["started"]
    # Read the child's output (its log lines, then the figures) all along: a full pipe would stop its loop.
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout or ()), daemon=True)
    reader.start()
    if mode in ("results", "results-queue"):
        emu.ask(f"publish {' '.join(map(str, hello['job_ids']))}")
    if mode == "results":
        emu.ask(f"account-copy {' '.join(map(str, hello['job_ids']))}")
    emu.ask(f"release-when-polled {before['calls']} {' '.join(map(str, hello['job_ids']))}")
    window = None
    if slow is not None:
        # The slow refresh comes ``slow[0]`` s into the job ends (the clock starts at the release).
        released = None
        while released is None:
            time.sleep(0.5)
            released = emu.ask("released")["at"]
        window = (released + slow[0], released + slow[0] + slow[1] + interval)
        emu.ask(f"slow-token {window[0]} {slow[1]}")
    reader.join()
    figures = json.loads(output[-1])
    if child.wait() != 0:
        raise RuntimeError(f"the {mode} N={n} measurement failed")
    release = emu.ask("released")
    released = release["at"]
    after = emu.stats()
    paths = after["paths"][before["calls"] :]
    polls = [p for p in paths if "submit" not in p]
    # Calls from the release of the job ends on: the same window for every mode.
    window_calls = sum(1 for p in after["paths"][release["index"] :] if "submit" not in p)
    wait_s = figures["end"] - released
    ticks = max(1.0, wait_s / interval)
    lags = figures.pop("lags")
    all_lags = [lag for _, lag in lags]
    waiting_lags = [lag for t, lag in lags if t >= released]
    events, runtimes = figures.pop("events"), figures.pop("runtimes")
    latencies = [events[j] - (released + runtimes[j]) for j in events]
    samples = figures.pop("cpu_samples")
    figures.update(
        startup_s=released - started,
        wait_s=wait_s,
        cpu_wait_s=figures["cpu0"] + figures["cpu_s"] - cpu_at(samples, released),
        lag_p50_ms=1000 * pct(all_lags, 0.50),
        lag_p99_ms=1000 * pct(all_lags, 0.99),
        wait_lag_p99_ms=1000 * pct(waiting_lags, 0.99),
        calls_total=len(polls),
        calls_wait=window_calls,
        calls_per_tick=window_calls / ticks,
        nominal_calls=sum(math.ceil(r / interval) + 1 for r in runtimes.values()),
        detect_p50_s=pct(latencies, 0.50),
        detect_p95_s=pct(latencies, 0.95),
        token_fetches=after["tokens"] - before["tokens"],
        mode=mode,
        n=n,
    )
    if window is not None:
        during = [lag for t, lag in lags if window[0] <= t <= window[1]]
        figures.update(
            slow_window_s=window[1] - window[0],
            slow_samples=len(during),
            slow_lag_p50_ms=1000 * pct(during, 0.50),
            slow_lag_p99_ms=1000 * pct(during, 0.99),
            slow_lag_max_ms=1000 * max(during, default=float("nan")),
        )
    return figures


# -- import cost and round trip -------------------------------------------------------------------


def import_cost(repeats: int = 9) -> dict[str, float]:
    """What importing the operators and the sensor adds to ``import airflow.sdk`` (median, same run).

    First figure: inside each fresh interpreter that has imported ``airflow.sdk`` (as a DAG file has),
    the wall and CPU time of importing the operators and the sensor on top: exactly the cost above
    ``airflow.sdk``, without the run-to-run noise of the seconds ``airflow.sdk`` itself takes. Then, as
    a cross-check, the difference of the medians of the two whole interpreters (alternating, so a change
    of load hits both alike; wall and CPU time), and ``-X importtime``'s self time of the provider's own
    modules (all of them, including what Airflow's providers manager loads while ``airflow.sdk`` is
    imported; the tracing inflates it).
    """
    import compileall

    # Measure the provider as installed: pip compiles a wheel's modules at install time. Without it (a
    # source checkout, or PYTHONDONTWRITEBYTECODE=1 as on the CI machines) each fresh interpreter would
    # compile the provider's modules from source, about 40 ms more, while Airflow's own are compiled.
    compileall.compile_dir(str(ROOT / "airflow_provider_slurmapi"), quiet=1)
    base_code = "import airflow.sdk"
    ours_code = (
        "import time, airflow.sdk; t, c = time.perf_counter(), time.process_time()\n"
        "import airflow_provider_slurmapi.operators.slurmapi, airflow_provider_slurmapi.sensors.slurmapi\n"
        "print(time.perf_counter() - t, time.process_time() - c)"
    )

    def run(code: str, *flags: str) -> tuple[float, float, str, str]:
        """Wall and CPU seconds of one fresh interpreter running ``code``, its stdout and stderr."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([PY, *flags, "-c", code], cwd=ROOT, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode:
            raise RuntimeError(f"{code!r} failed: {done.stderr.decode()[-500:]}")
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return wall, cpu, done.stdout.decode(), done.stderr.decode()

    walls: dict[str, list[float]] = {"base": [], "ours": []}
    cpus: dict[str, list[float]] = {"base": [], "ours": []}
    inside: list[tuple[float, float]] = []
    own: list[float] = []
    for _ in range(repeats):
        for name, code in (("base", base_code), ("ours", ours_code)):
            wall, cpu, out, _ = run(code)
            walls[name].append(wall)
            cpus[name].append(cpu)
            if name == "ours":
                took_wall, took_cpu = map(float, out.split()[-2:])
                inside.append((took_wall, took_cpu))
        _, _, _, trace = run(ours_code, "-X", "importtime")
        own.append(
            sum(
                int(m.group(1))
                for m in re.finditer(r"^import time:\s+(\d+) \|\s+\d+ \|\s*airflow_provider_slurmapi\S*$", trace, re.M)
            )
            / 1000
        )
    med = statistics.median
    return {
        "base_ms": 1000 * med(walls["base"]),
        "wall_ms": 1000 * (med(walls["ours"]) - med(walls["base"])),
        "base_cpu_ms": 1000 * med(cpus["base"]),
        "cpu_ms": 1000 * (med(cpus["ours"]) - med(cpus["base"])),
        "own_ms": med(own),
        "inside_wall_ms": 1000 * med(w for w, _ in inside),
        "inside_cpu_ms": 1000 * med(c for _, c in inside),
    }


def round_trip(emu: EmulatorProcess, repeats: int = 200) -> tuple[float, float]:
    os.environ["AIRFLOW_CONN_SLURMAPI_DEFAULT"] = emu.conn
    import requests

    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

    hook = SlurmJobApiHook()
    job_id = hook.submit(
        JobSpec.build("#!/bin/bash\n#EMULATOR runtime=3600\n", {"current_working_directory": "/b"})
    ).job_id
    client = hook.get_conn()
    assert client.tokens is not None
    token = client.tokens.token()
    url = client.cluster.url  # type: ignore[union-attr]
    envelope = {"method": "HTTP_METHOD_GET", "path": f"/slurm/v0.0.42/job/{job_id}"}
    session = requests.Session()
    bare, ours = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        session.post(url, json=envelope, headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        hook.get_job(job_id)
        ours.append(time.perf_counter() - start)
    return statistics.median(bare) * 1000, statistics.median(ours) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,100,1000,2000", help="the N of each measurement")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--spread", type=float, default=240.0, help="seconds over which job ends are spread")
    parser.add_argument(
        "--modes",
        default="coalesced,baseline",
        help="modes of each N (also: results, coalesced reading published records with their accounting copy; "
        "results-queue, without it; results-silent)",
    )
    parser.add_argument("--baseline-max", type=int, default=2000, help="largest N for the baseline")
    parser.add_argument("--slow-token", type=float, default=5.0, help="token endpoint delay in the slow-token run")
    parser.add_argument("--slow-token-at", type=float, default=60.0, help="seconds into the wait it starts")
    parser.add_argument("--slow-token-n", type=int, default=2000, help="N of the slow-token run (0: none)")
    parser.add_argument("--probe-hz", type=float, default=10.0, help="event-loop lag probe rate (slow-token run: 100)")
    parser.add_argument(
        "--skip-extras", action="store_true", help="skip the import-cost and round-trip figures (quicker runs)"
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="write a cProfile of each measured process (from its first job end on) to DIR"
    )
    parser.add_argument("--standalone", type=int, metavar="N", help="N sensors in a real airflow standalone")
    args = parser.parse_args()
    if args.standalone:
        from benchmarks.standalone_triggerer import main as standalone_main

        standalone_main(args.standalone, args.interval, args.spread)
        return
    if args.profile:
        os.environ["BENCH_PROFILE"] = str(Path(args.profile).resolve())
    emu = EmulatorProcess()
    rows = []
    try:
        cases = [(mode, int(n)) for n in args.sizes.split(",") for mode in args.modes.split(",")]
        cases = [(mode, n) for mode, n in cases if mode != "baseline" or n <= args.baseline_max]
        if args.slow_token_n:
            cases.append(("slow-token", args.slow_token_n))
        for mode, n in cases:
            slow = (args.slow_token_at, args.slow_token) if mode == "slow-token" else None
            hz = 100.0 if mode == "slow-token" else args.probe_hz
            rows.append(run_case(emu, mode, n, args.interval, args.spread, slow, hz))
            print(f"  measured {mode:14} N={n}", file=sys.stderr, flush=True)
        imports = None if args.skip_extras else import_cost()
        bare_ms, hook_ms = (0.0, 0.0) if args.skip_extras else round_trip(emu)
    finally:
        emu.close()
    print(
        f"\nWaiting at scale: poll interval {args.interval:.0f}s, job ends spread over {args.spread:.0f}s, their "
        "clock started once every trigger polled (start-up s before it); calls, calls/tick, CPU s and det from "
        "then on, 'all' columns over the whole run\n"
    )
    print(
        f"{'mode':14} {'N':>5} {'start-up':>8} {'calls/tick':>10} {'calls':>7} {'nominal':>7} {'all calls':>9} "
        f"{'CPU s':>7} {'all CPU':>7} {'RSS MB':>6} {'KB/trig':>7} {'lag p50':>8} {'lag p99':>9} {'det p50':>8} "
        f"{'det p95':>8} {'tokens':>6}"
    )
    for r in rows:
        print(
            f"{r['mode']:14} {r['n']:>5} {r['startup_s']:>7.1f}s {r['calls_per_tick']:>10.1f} {r['calls_wait']:>7} "
            f"{r['nominal_calls']:>7} {r['calls_total']:>9} {r['cpu_wait_s']:>7.2f} {r['cpu_s']:>7.2f} "
            f"{r['rss_peak_kb'] / 1024:>6.0f} {r['rss_per_trigger_kb']:>7.1f} {r['lag_p50_ms']:>6.1f}ms "
            f"{r['lag_p99_ms']:>7.1f}ms {r['detect_p50_s']:>7.2f}s {r['detect_p95_s']:>7.2f}s {r['token_fetches']:>6}"
        )
    print()
    by = {(r["mode"], r["n"]): r for r in rows}
    for n in sorted({r["n"] for r in rows}):
        c, b = by.get(("coalesced", n)), by.get(("baseline", n))
        if c and b:
            print(
                f"N={n}: {b['calls_wait'] / max(1, c['calls_wait']):.0f}x fewer calls over the job ends "
                f"({b['calls_total'] / max(1, c['calls_total']):.0f}x over the whole run), "
                f"{b['cpu_wait_s'] / max(1e-6, c['cpu_wait_s']):.1f}x less CPU over the job ends "
                f"({b['cpu_s'] / max(1e-6, c['cpu_s']):.1f}x over the whole run); baseline event-loop lag p99 "
                f"{b['wait_lag_p99_ms']:.1f}ms over the job ends"
            )
    for r in rows:
        if "slow_lag_p99_ms" in r:
            print(
                f"slow token endpoint (N={r['n']}): all tokens expired at +{args.slow_token_at:.0f}s, the refresh "
                f"answered after {args.slow_token:.0f}s; lag in the {r['slow_window_s']:.0f}s after: "
                f"p50 {r['slow_lag_p50_ms']:.1f}ms, p99 {r['slow_lag_p99_ms']:.1f}ms, "
                f"max {r['slow_lag_max_ms']:.1f}ms ({r['slow_samples']} samples)"
            )
    if imports is None:
        return
    print(
        f"\nimporting the operators and the sensor after airflow.sdk, inside the interpreter: "
        f"{imports['inside_wall_ms']:.1f} ms wall, {imports['inside_cpu_ms']:.1f} ms CPU (median); cross-check, "
        f"whole interpreters: import airflow.sdk {imports['base_ms']:.0f} ms wall, {imports['base_cpu_ms']:.0f} ms "
        f"CPU, with the provider {imports['wall_ms']:+.0f} ms wall, {imports['cpu_ms']:+.0f} ms CPU (medians, "
        f"alternating runs); the provider's own modules: {imports['own_ms']:.0f} ms (-X importtime self time, "
        "median, including what Airflow loads of it)"
    )
    print(
        f"get_job round trip: hook {hook_ms:.2f} ms vs bare requests.post {bare_ms:.2f} ms "
        f"({hook_ms / bare_ms:.2f}x, median)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-emulator":
        serve_emulator()
    elif len(sys.argv) > 1 and sys.argv[1] == "--measure":
        _, _, mode, n, interval, spread, probe_hz = sys.argv
        print(json.dumps(measure(mode, int(n), float(interval), float(spread), float(probe_hz))))
    else:
        main()
