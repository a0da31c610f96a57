"""Benchmark: N deferrable SlurmJobSensors waiting in the triggerer of a real ``airflow standalone``.

Run: ``.venv/bin/python -m benchmarks.standalone_triggerer [--sensors 500] [--interval 5] [--spread 120]``
(or ``python -m benchmarks.waiting_at_scale --standalone 500``). Airflow 3.3+ (the sensors start straight in the
triggerer, ``start_from_trigger``, so no worker slot is needed to defer them).

With ``tests/harness/standalone.py``: the emulator (simulated runs, its own process, logging each call)
and ``airflow standalone`` on a DAG of N ``SlurmJobSensor`` tasks (job ids 1..N, the ids a fresh emulator
hands out). Once every sensor's trigger is polling, the N jobs are submitted, their ends staggered over
``--spread`` seconds. Everything is measured from outside the Airflow processes:

- triggerer CPU seconds: user + system of the ``airflow triggerer`` process and its children (psutil),
  from the submission of the jobs until the last sensor left the deferred state;
- memory: the PSS and USS (psutil ``memory_full_info``: shared pages split, resp. not counted) of the
  trigger-runner process (the triggerer's forked child that runs the event loop) before the DAG run
  and while all N triggers wait (every one polling, no job ended yet, before the jobs are submitted),
  the difference divided by N; the supervisor's own figures beside it;
- API calls: the emulator's log of every call in that window, per poll interval (tick) and in total;
- detection latency: planned job end -> the task instance leaving ``deferred`` (its metadata database,
  read every 0.25 s), so it includes the triggerer's own hand-over of the event to the database;
- event-loop lag cannot be read from outside; the triggerer's own "async thread was blocked" warnings
  (its watchdog: a 0.1 s sleep that took longer than ``[triggerer] blocked_main_thread_warning_threshold``,
  0.2 s) are counted, with their durations and the phase in which they came: while the N triggers were
  being created, while they waited, while the jobs ended. ``--asyncio-debug`` runs the triggerer with
  ``PYTHONASYNCIODEBUG=1``, whose "Executing <callback> took N seconds" lines name what held the loop;
  and every Airflow process logs its garbage collector's passes of 50 ms or more (``gc.callbacks``, from a
  ``sitecustomize`` on its path), so each warning can be matched with a GC pass of the trigger runner.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DAG_ID = "bench_waiting_at_scale"
_BLOCKED = re.compile(r"async thread was blocked for ([0-9.]+) seconds")
_SLOW_CALLBACK = re.compile(r"Executing (.*?) took ([0-9.]+) seconds")

DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor

with DAG({dag_id!r}, schedule=None, start_date=datetime(2024, 1, 1), catchup=False, max_active_tasks={n}) as dag:
    for job_id in range(1, {n} + 1):
        SlurmJobSensor(
            task_id=f"wait_{{job_id}}", job_id=job_id, deferrable=True, poke_interval={interval}, timeout=3600
        )
"""


# Loaded by every Airflow process of the run (a sitecustomize on PYTHONPATH): logs GC passes >= 50 ms.
GC_TRACE = """
import gc, os, time

_out = os.environ.get("SLURMAPI_BENCH_GC_TRACE")
_began = []


def _trace(phase, info):
    if phase == "start":
        _began[:] = [time.perf_counter()]
    elif _began:
        took = time.perf_counter() - _began[0]
        if took >= 0.05:
            with open(f"{_out}/gc.{os.getpid()}", "a") as f:
                f.write(f"{time.time():.3f} {info['generation']} {took:.3f} {info['collected']}\\n")


if _out:
    gc.callbacks.append(_trace)
"""


# Airflow's share, measured in a fresh interpreter: with start_from_trigger, Airflow 3.3 sends each trigger
# the whole serialized DAG and deserializes it in the event loop for each trigger (the triggerer's
# ``create_runtime_ti``); the trigger's task instance then holds that copy of the DAG.
DAG_COST = """
import gc, importlib.util, json, sys, time
import psutil
from airflow.serialization.serialized_objects import DagSerialization

spec = importlib.util.spec_from_file_location("bench_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
data = json.loads(json.dumps(DagSerialization.to_dict(module.dag)))
copies, took = [], []
gc.collect()
before = psutil.Process().memory_full_info().uss
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    copies.append(DagSerialization.from_dict(data).get_task("wait_1"))
    took.append(time.perf_counter() - start)
gc.collect()
after = psutil.Process().memory_full_info().uss
text = json.dumps(data)
raw = [json.loads(text) for _ in range(len(copies))]  # the workloads' dag_data, as the runner decodes them
gc.collect()
held = psutil.Process().memory_full_info().uss
print(json.dumps({"uss_per_copy": (after - before) / len(copies), "seconds": sorted(took)[len(took) // 2],
                  "json_bytes": len(text), "uss_per_dag_data": (held - after) / len(raw)}))
"""


def airflow_dag_cost(dag_file: Path, copies: int = 20) -> dict[str, float]:
    """USS per deserialized copy of the benchmark's DAG and seconds per deserialization (median)."""
    done = subprocess.run(
        [sys.executable, "-c", DAG_COST, str(dag_file), str(copies)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def gc_passes(folder: Path, pid: int) -> list[tuple[float, int, float]]:
    """The GC passes of 50 ms or more of process ``pid``: (end time, generation, seconds)."""
    trace = folder / f"gc.{pid}"
    if not trace.exists():
        return []
    rows = [line.split() for line in trace.read_text().splitlines()]
    return [(float(end), int(gen), float(took)) for end, gen, took, _ in rows]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def triggerer_processes(sid: int) -> list[Any]:
    """Our standalone's ``airflow triggerer`` process and its children (the trigger runner), not its log
    server; only processes of session ``sid`` (other Airflows may be running on the machine)."""
    import psutil

    from tests.harness.standalone import session_members

    found: dict[int, Any] = {}
    for pid in session_members(sid):
        try:
            proc = psutil.Process(pid)
            if "airflow triggerer" in " ".join(proc.cmdline()):
                for p in [proc, *proc.children(recursive=True)]:
                    if "serve-logs" not in " ".join(p.cmdline()):
                        found[p.pid] = p
        except psutil.NoSuchProcess:
            continue
    return list(found.values())


def usage(procs: list[Any]) -> tuple[float, int]:
    """CPU seconds (user + system) and RSS bytes, summed over ``procs``."""
    import psutil

    cpu, rss = 0.0, 0
    for proc in procs:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            rss += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return cpu, rss


def memory(procs: list[Any]) -> dict[str, dict[str, int]]:
    """PSS, USS and RSS bytes of the trigger runner (the triggerer's child) and of its supervisor."""
    found: dict[str, dict[str, int]] = {}
    for proc in procs:
        info = proc.memory_full_info()
        role = "supervisor" if "airflow triggerer" in " ".join(proc.cmdline()) and proc.children() else "runner"
        found[role] = {"pss": info.pss, "uss": info.uss, "rss": info.rss}
    return found


class LoopThreadSampler:
    """Samples the trigger runner's main thread (its event loop) from ``/proc/<pid>/task/<pid>/schedstat``
    every 50 ms: nanoseconds on a CPU and nanoseconds waiting in the run queue for one."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/task/{pid}/schedstat")
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                on_cpu, waiting, _ = self.path.read_text().split()
            except (OSError, ValueError):
                return
            self.samples.append((time.time(), int(on_cpu), int(waiting)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self, start: float, end: float) -> tuple[float, float] | None:
        """Of the wall time from ``start`` to ``end``: the share on a CPU, the share waiting for one."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return None
        (t0, cpu0, wait0), (t1, cpu1, wait1) = inside[0], inside[-1]
        wall = (t1 - t0) * 1e9
        return (cpu1 - cpu0) / wall, (wait1 - wait0) / wall


def blocked_warnings(
    log: Path, phases: list[tuple[str, float]], gc: list[tuple[float, int, float]], loop: LoopThreadSampler
) -> dict[str, Any]:
    """The triggerer's "async thread was blocked" warnings: durations, how many in each phase, how many
    came with a GC pass of the trigger runner of at least half their length inside the blocked time, and
    what the loop's thread did meanwhile: ran Python (on a CPU), waited for a CPU (the machine was busy), or
    neither (a blocking call that sleeps: I/O, a lock)."""
    counts = {name: 0 for name, _ in phases}
    with_gc = {name: 0 for name, _ in phases}
    spent = {name: [0.0, 0.0, 0.0] for name, _ in phases}
    durations: list[float] = []
    slow: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = _BLOCKED.search(line)
        if match:
            durations.append(float(match.group(1)))
            at = _line_time(line)
            phase = phases[0][0]
            for name, start in phases:
                if at is not None and at >= start:
                    phase = name
            counts[phase] += 1
            blocked = float(match.group(1))
            if at is not None and any(
                at - blocked - 0.5 <= end <= at + 0.5 and took >= blocked / 2 for end, _, took in gc
            ):
                with_gc[phase] += 1
            share = loop.shares(at - blocked, at) if at is not None else None
            if share is not None:
                on_cpu, queued = min(1.0, share[0]), min(1.0, share[1])
                for i, part in enumerate((on_cpu, queued, max(0.0, 1.0 - on_cpu - queued))):
                    spent[phase][i] += part * blocked
        callback = _SLOW_CALLBACK.search(line)
        if callback:
            slow.setdefault(re.sub(r" at 0x[0-9a-f]+|\(\d+\)|<Task [^ ]+ ", "", callback.group(1))[:160], []).append(
                float(callback.group(2))
            )
    return {
        "count": len(durations),
        "durations": durations,
        "phases": counts,
        "with_gc": with_gc,
        "spent": spent,
        "slow_callbacks": slow,
    }


_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d:?\d\d)?")


def _line_time(line: str) -> float | None:
    match = _STAMP.search(line)
    if match is None:
        return None
    stamp = f"{match.group(1)}T{match.group(2)}{(match.group(3) or '').replace('Z', '+00:00')}"
    moment = datetime.fromisoformat(stamp)
    return moment.timestamp()


def ti_states(db: Path, run_id: str) -> dict[str, str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        rows = conn.execute(
            "SELECT task_id, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (DAG_ID, run_id)
        ).fetchall()
    return {task: str(state) for task, state in rows}


def main(n: int = 500, interval: float = 5.0, spread: float = 120.0, asyncio_debug: bool = False) -> None:
    from airflow_provider_slurmapi.api.spec import JobSpec
    from tests.harness.standalone import airflow_major, run_emulator, run_standalone, wait_for

    if airflow_major() < 3:
        sys.exit("the standalone benchmark needs Airflow 3.3+ (sensors started in the triggerer)")
    dags = Path(tempfile.mkdtemp(prefix="slurmapi-bench-dags-"))
    (dags / "bench_waiting_at_scale.py").write_text(DAG_FILE.format(dag_id=DAG_ID, n=n, interval=interval))
    emulator_args = ("--simulate", "--min-job-age", "3600", "--partition", "debug=100000")
    # Airflow 3 reads DAGs from its bundles, not from [core] dags_folder: one bundle, the benchmark's DAG.
    bundles: list[dict[str, Any]] = [
        {
            "name": "bench",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(dags)},
        }
    ]
    trace = Path(tempfile.mkdtemp(prefix="slurmapi-bench-gc-"))
    (trace / "sitecustomize.py").write_text(GC_TRACE)
    extra_env = {
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        "SLURMAPI_BENCH_GC_TRACE": str(trace),
        "PYTHONPATH": os.pathsep.join(p for p in (str(trace), os.environ.get("PYTHONPATH", "")) if p),
    }
    if asyncio_debug:
        extra_env["PYTHONASYNCIODEBUG"] = "1"
    with (
        run_emulator(*emulator_args) as emulator,
        run_standalone(emulator, dags_folder=dags, extra_env=extra_env) as airflow,
    ):
        db = airflow.home / "airflow.db"
        sid = airflow.proc.pid  # the harness starts it in a session of its own
        procs = wait_for("the triggerer process", lambda: triggerer_processes(sid), timeout=60)
        _, rss_idle = usage(procs)
        mem_idle = memory(procs)
        loop = LoopThreadSampler(next(p.pid for p in procs if not p.children()))
        print(f"airflow standalone up; triggerer RSS {rss_idle / 2**20:.0f} MB with no trigger", file=sys.stderr)
        dag_run_at = time.time()
        run_id = airflow.trigger(DAG_ID, timeout=300)

        def all_polling() -> bool:
            states = ti_states(db, run_id)
            if len(states) < n or any(s != "deferred" for s in states.values()):
                return False
            # Every trigger has joined the poller: one tick asked for all n ids.
            text = emulator.log.read_text(errors="replace")
            return any(line.count("job_id=") >= min(n, 500) for line in text.splitlines()[-50:])

        wait_for(f"{n} sensors deferred and polling", all_polling, timeout=600, interval=1, log=airflow.log)
        time.sleep(2 * interval)  # settle: the first ticks after the triggers started are done
        procs = triggerer_processes(sid)
        cpu0, rss_waiting = usage(procs)
        mem_waiting = memory(procs)
        rss_peak = rss_waiting
        planned_end: dict[str, float] = {}
        start = time.time()
        with emulator.client() as client:
            for i in range(n):
                runtime = 1.0 + spread * (i + 1) / n
                script = f"#!/bin/bash\n#EMULATOR runtime={runtime:.3f} exit=0\ntrue\n"
                before = time.time()
                job_id = client.submit_job(JobSpec.build(script, {"current_working_directory": "/bench"})).job_id
                assert job_id == i + 1, f"the emulator gave job id {job_id}, the DAG waits on {i + 1}"
                planned_end[f"wait_{job_id}"] = before + runtime
        detected: dict[str, float] = {}
        deadline = time.time() + spread + 300
        while len(detected) < n and time.time() < deadline:
            now = time.time()
            for task, state in ti_states(db, run_id).items():
                if state != "deferred" and task not in detected:
                    detected[task] = now
            _, rss = usage(procs)
            rss_peak = max(rss_peak, rss)
            time.sleep(0.25)
        end = time.time()
        cpu1, _ = usage(procs)
        calls = [(at, path) for at, _, path in emulator.calls(start, end) if "/job/submit" not in path]
        runner_pid = next(p.pid for p in procs if not p.children())
        gc = gc_passes(trace, runner_pid)
        loop.stop()
        blocked = blocked_warnings(
            airflow.log, [("before the DAG run", 0.0), ("triggers starting", dag_run_at), ("waiting", start)], gc, loop
        )
    dag_cost = airflow_dag_cost(dags / "bench_waiting_at_scale.py")
    latencies = [detected[t] - planned_end[t] for t in detected]
    ticks = max(1.0, (end - start) / interval)
    figures = {
        "sensors": n,
        "detected": len(detected),
        "window_s": end - start,
        "calls_total": len(calls),
        "calls_per_tick": len(calls) / ticks,
        "max_ids_per_call": max((path.count("job_id=") + path.count("step=") for _, path in calls), default=0),
        "triggerer_cpu_s": cpu1 - cpu0,
        "triggerer_rss_idle_mb": rss_idle / 2**20,
        "triggerer_rss_peak_mb": rss_peak / 2**20,
        "memory_idle": mem_idle,
        "memory_waiting": mem_waiting,
        "runner_pss_per_trigger_kb": (mem_waiting["runner"]["pss"] - mem_idle["runner"]["pss"]) / 1024 / n,
        "runner_uss_per_trigger_kb": (mem_waiting["runner"]["uss"] - mem_idle["runner"]["uss"]) / 1024 / n,
        "detect_p50_s": pct(latencies, 0.5),
        "detect_p95_s": pct(latencies, 0.95),
        "blocked_loop_warnings": blocked,
        "runner_gc_passes": gc,
        "airflow_dag_copy": dag_cost,
    }
    runner_idle, runner_waiting = mem_idle["runner"], mem_waiting["runner"]
    sup = mem_waiting.get("supervisor", {"pss": 0, "uss": 0})
    durations = blocked["durations"]
    print(json.dumps(figures))
    print(
        f"\nairflow standalone, {n} deferred SlurmJobSensors (poke_interval {interval:.0f}s), job ends over "
        f"{spread:.0f}s; measured from outside over {figures['window_s']:.0f}s:\n"
        f"  detected {len(detected)}/{n}; API calls {len(calls)} ({figures['calls_per_tick']:.1f} per tick)\n"
        f"  triggerer CPU {figures['triggerer_cpu_s']:.2f}s (supervisor + trigger runner)\n"
        f"  trigger runner PSS {runner_idle['pss'] / 2**20:.1f} MB before the DAG run, "
        f"{runner_waiting['pss'] / 2**20:.1f} MB with all {n} triggers waiting: "
        f"{figures['runner_pss_per_trigger_kb']:.1f} KB per waiting trigger "
        f"(USS {runner_idle['uss'] / 2**20:.1f} -> {runner_waiting['uss'] / 2**20:.1f} MB, "
        f"{figures['runner_uss_per_trigger_kb']:.1f} KB); supervisor PSS {sup['pss'] / 2**20:.1f} MB\n"
        f"  detection latency p50 {figures['detect_p50_s']:.2f}s, p95 {figures['detect_p95_s']:.2f}s\n"
        f"  'async thread was blocked' warnings: {blocked['count']} "
        f"({', '.join(f'{k}: {v}' for k, v in blocked['phases'].items())}); "
        f"blocked for p50 {pct(durations, 0.5):.2f}s, max {max(durations, default=0):.2f}s; with a GC pass "
        f"of the trigger runner: {', '.join(f'{k}: {v}' for k, v in blocked['with_gc'].items())}\n"
        f"  trigger runner GC passes >= 50 ms: {len(gc)} (generation 2: {sum(1 for g in gc if g[1] == 2)}), "
        f"max {max((g[2] for g in gc), default=0):.2f}s, total {sum(g[2] for g in gc):.1f}s; while waiting: "
        f"{sum(1 for g in gc if g[0] >= start)}, total {sum(g[2] for g in gc if g[0] >= start):.1f}s"
    )
    print(
        f"  Airflow's copy of this DAG per start_from_trigger trigger (in a fresh interpreter): "
        f"{dag_cost['uss_per_copy'] / 1024:.0f} KB USS, {1000 * dag_cost['seconds']:.0f} ms to deserialize, "
        f"{dag_cost['json_bytes'] / 1024:.0f} KB serialized, {dag_cost['uss_per_dag_data'] / 1024:.0f} KB USS "
        "as the decoded dag_data each workload carries"
    )
    for phase, (on_cpu, queued, other) in blocked["spent"].items():
        if on_cpu + queued + other:
            print(
                f"  blocked time {phase}: {on_cpu + queued + other:.1f}s, of it the loop's thread on a CPU "
                f"{on_cpu:.1f}s, waiting for a CPU {queued:.1f}s, neither (sleeping in a blocking call) {other:.1f}s"
            )
    for callback, took in sorted(blocked["slow_callbacks"].items(), key=lambda kv: -sum(kv[1]))[:10]:
        print(f"  slow callback x{len(took)}, max {max(took):.2f}s, total {sum(took):.1f}s: {callback}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sensors", type=int, default=500)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--spread", type=float, default=120.0)
    parser.add_argument("--asyncio-debug", action="store_true", help="PYTHONASYNCIODEBUG=1 in the triggerer")
    args = parser.parse_args()
    main(args.sensors, args.interval, args.spread, args.asyncio_debug)
