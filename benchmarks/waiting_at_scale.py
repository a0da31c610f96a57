"""Benchmark: N deferred Slurm jobs watched by one triggerer loop, coalesced vs per-job polling.

Run: ``.venv/bin/python benchmarks/waiting_at_scale.py [--sizes 1,100,1000,2000] [--interval 5]``

Each measurement runs in a fresh subprocess (so CPU and RSS are the triggerer's alone), against the
emulator in simulated-run mode in another process. Jobs end at staggered times over ``--spread``
seconds. Printed per mode and N: API calls per tick and in total, triggerer CPU seconds, peak RSS and
RSS per waiting trigger, event-loop lag p50/p99, detection latency (job end -> event) p50/p95, token
fetches. Then the provider's import cost and a hook round trip against a bare ``requests.post``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
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

    with SlurmJobApiEmulator(simulate=True, partitions={"debug": 100_000}, min_job_age=3600) as emu:
        print(json.dumps({"conn": emu.connection_json()}), flush=True)
        for line in sys.stdin:
            if line.strip() == "calls":
                calls = list(emu.calls)
                print(
                    json.dumps({"calls": len(calls), "paths": [c[1] for c in calls], "tokens": emu.token_requests}),
                    flush=True,
                )
            elif line.strip() == "quit":
                break


class EmulatorProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, __file__, "--serve-emulator"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert self.proc.stdout is not None
        self.conn = json.loads(self.proc.stdout.readline())["conn"]

    def stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("calls\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=30)


# -- one measurement (a fresh process) ------------------------------------------------------------


def measure(mode: str, n: int, interval: float, spread: float) -> dict[str, Any]:
    """Child: submit N simulated jobs, wait for all of them with N triggers in one loop, report figures."""
    import asyncio

    from airflow_provider_slurmapi.api.jobs import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook
    from airflow_provider_slurmapi.triggers.slurmapi import SlurmJobTrigger

    hook = SlurmJobApiHook()
    planned_end: dict[int, float] = {}
    for i in range(n):
        runtime = 1.0 + spread * (i + 1) / n
        script = f"#!/bin/bash\n#EMULATOR runtime={runtime:.3f} exit=0\ntrue\n"
        before = time.time()
        job_id = hook.submit(JobSpec.build(script, {"current_working_directory": "/bench", "name": f"b{i}"})).job_id
        planned_end[job_id] = before + runtime
    hook.get_conn().close()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lags: list[float] = []
    latencies: list[float] = []

    async def lag_probe(stop: asyncio.Event) -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - start - 0.01)

    async def wait_one(job_id: int) -> None:
        trigger = SlurmJobTrigger(job_id, poll_interval=interval, coalesce=(mode == "coalesced"))
        async for event in trigger.run():
            assert event.payload["status"] == "success", event.payload
            latencies.append(time.time() - planned_end[job_id])
            return

    async def main() -> None:
        stop = asyncio.Event()
        probe = asyncio.ensure_future(lag_probe(stop))
        await asyncio.gather(*(wait_one(j) for j in planned_end))
        stop.set()
        await probe

    cpu0, wall0 = time.process_time(), time.time()
    asyncio.run(main())
    cpu, wall = time.process_time() - cpu0, time.time() - wall0
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "rss_peak_kb": rss_peak,
        "rss_per_trigger_kb": max(0, rss_peak - rss_before) / n,
        "lag_p50_ms": 1000 * pct(lags, 0.50),
        "lag_p99_ms": 1000 * pct(lags, 0.99),
        "detect_p50_s": pct(latencies, 0.50),
        "detect_p95_s": pct(latencies, 0.95),
    }


def run_case(emu: EmulatorProcess, mode: str, n: int, interval: float, spread: float) -> dict[str, Any]:
    before = emu.stats()
    env = dict(os.environ, AIRFLOW_CONN_SLURMAPI_DEFAULT=emu.conn, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [PY, __file__, "--measure", mode, str(n), str(interval), str(spread)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    after = emu.stats()
    paths = after["paths"][before["calls"] :]
    polls = [p for p in paths if "submit" not in p]
    ticks = max(1.0, figures["wall_s"] / interval)
    figures.update(
        calls_total=len(polls),
        calls_per_tick=len(polls) / ticks,
        token_fetches=after["tokens"] - before["tokens"],
        mode=mode,
        n=n,
    )
    return figures


# -- import cost and round trip -------------------------------------------------------------------


def import_cost(repeats: int = 7) -> tuple[float, float]:
    def median(code: str) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([PY, "-c", code], check=True, capture_output=True, cwd=ROOT)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    base = median("import airflow.sdk")
    ours = median(
        "import airflow.sdk; import airflow_provider_slurmapi.operators.slurmapi, "
        "airflow_provider_slurmapi.sensors.slurmapi"
    )
    return base * 1000, (ours - base) * 1000


def round_trip(emu: EmulatorProcess, repeats: int = 200) -> tuple[float, float]:
    os.environ["AIRFLOW_CONN_SLURMAPI_DEFAULT"] = emu.conn
    import requests

    from airflow_provider_slurmapi.api.jobs import JobSpec
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
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1,100,1000,2000")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--spread", type=float, default=30.0, help="seconds over which job ends are spread")
    parser.add_argument("--baseline-max", type=int, default=2000, help="largest N for the per-job baseline")
    args = parser.parse_args()
    emu = EmulatorProcess()
    rows = []
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            for mode in ("coalesced", "per-job"):
                if mode == "per-job" and n > args.baseline_max:
                    continue
                row = run_case(emu, mode, n, args.interval, args.spread)
                rows.append(row)
                print(f"  measured {mode:9} N={n}", file=sys.stderr, flush=True)
        base_ms, import_ms = import_cost()
        bare_ms, hook_ms = round_trip(emu)
    finally:
        emu.close()
    header = (
        f"{'mode':9} {'N':>5} {'calls/tick':>10} {'calls':>7} {'CPU s':>7} {'RSS MB':>7} {'KB/trig':>7} "
        f"{'lag p50':>8} {'lag p99':>8} {'det p50':>8} {'det p95':>8} {'tokens':>6}"
    )
    print(f"\nWaiting at scale: poll interval {args.interval:.0f}s, job ends spread over {args.spread:.0f}s\n")
    print(header)
    for r in rows:
        print(
            f"{r['mode']:9} {r['n']:>5} {r['calls_per_tick']:>10.1f} {r['calls_total']:>7} {r['cpu_s']:>7.2f} "
            f"{r['rss_peak_kb'] / 1024:>7.0f} {r['rss_per_trigger_kb']:>7.1f} {r['lag_p50_ms']:>6.1f}ms "
            f"{r['lag_p99_ms']:>6.1f}ms {r['detect_p50_s']:>7.2f}s {r['detect_p95_s']:>7.2f}s {r['token_fetches']:>6}"
        )
    by = {(r["mode"], r["n"]): r for r in rows}
    for n in sorted({r["n"] for r in rows}):
        c, b = by.get(("coalesced", n)), by.get(("per-job", n))
        if c and b:
            print(
                f"N={n}: {b['calls_total'] / max(1, c['calls_total']):.0f}x fewer calls, "
                f"{b['cpu_s'] / max(1e-6, c['cpu_s']):.1f}x less CPU"
            )
    print(f"\nimport airflow.sdk: {base_ms:.0f} ms; provider on top: {import_ms:+.0f} ms (median)")
    print(
        f"get_job round trip: hook {hook_ms:.2f} ms vs bare requests.post {bare_ms:.2f} ms "
        f"({hook_ms / bare_ms:.2f}x, median)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-emulator":
        serve_emulator()
    elif len(sys.argv) > 1 and sys.argv[1] == "--measure":
        _, _, mode, n, interval, spread = sys.argv
        print(json.dumps(measure(mode, int(n), float(interval), float(spread))))
    else:
        main()
