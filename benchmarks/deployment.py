"""Benchmark: the provider's waits in a production-shaped deployment, 1 vs 2 triggerers, and the sensor
started in the triggerer vs deferred from a worker.

Run: ``.venv/bin/python -m benchmarks.deployment [--triggerers 1,2] [--sizes 500,2000] [--dag-size 25]
[--sensors 200] [--ticks 6]`` (Airflow 3.3; root: it installs and runs PostgreSQL and Redis like the
deployment suite; about 25 minutes with the defaults).

Every case brings up its own deployment with ``tests/deployment/deploy.sh`` (PostgreSQL, Redis, the Celery
executor with two workers, scheduler, dag-processor, api-server, and 1 or 2 triggerers, each its own
process) on a fresh emulator (simulated runs), in ``/var/tmp/slurmapi-deployment-bench`` on ports of its
own, so it does not meet the deployment suite's. Each triggerer's capacity is raised to 5,000
(``DEPLOY_TRIGGERER_CAPACITY``; Airflow's default is 1,000 triggers per triggerer), so one triggerer can
take all 2,000 waits. Everything is measured from outside Airflow:

- **waiting** (``--triggerers`` x ``--sizes``): N jobs held RUNNING on the cluster and N deferrable
  ``SlurmJobSensor`` tasks on them, in DAGs of ``--dag-size`` sensors (started in the triggerer, the
  default on Airflow 3.3). Start-up: the first DAG run triggered -> every trigger held by a triggerer (the
  metadata database) -> every job polled (the emulator's log: every trigger runs; Airflow holds a
  trigger well before it runs it), and the triggerers' CPU seconds until then. Then over ``--ticks``
  poll intervals (5 s) while all N wait: the API calls per tick (the emulator's log; the bound the
  deployment suite asserts is ``triggerers x (ceil(N/500) + 1)``), the triggerers' CPU seconds per tick
  (user + system of each triggerer and its children), and the memory per waiting trigger: the growth of
  the triggerers' PSS (shared pages split between processes) from before the DAG runs to while all N
  wait, divided by N.
- **in-process**: the same N waits in one bare process (``benchmarks/waiting_at_scale.py``'s coalesced
  mode, no Airflow process around the triggers): calls per tick, CPU per tick and RSS per waiting trigger,
  measured over its job ends (spread over 30 s).
- **sensor** (``--sensors M``, one DAG of M sensors, 2 triggerers): ``start_from_trigger=True`` (the
  scheduler hands the wait straight to a triggerer) against ``False`` (each sensor first runs in a Celery
  worker slot, then defers). Start-up (run triggered -> every job polled), worker-slot seconds (for
  each task a worker ran: its start -> its trigger's creation, from the metadata database), the workers',
  scheduler's and triggerers' CPU seconds over the start-up, and the triggerers' PSS per waiting sensor.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INTERVAL = 5.0  # the sensors' poke_interval (the deployment harness's sensor DAG)
WORKERS = ("worker-1", "worker-2")
WORKER_HOSTS = ("127.0.0.21", "127.0.0.22")  # deploy.sh: each worker's hostname
# Its own state folder and ports: the benchmark never meets a deployment suite run on the same machine.
BENCH_ENV = {
    "DEPLOY_STATE": "/var/tmp/slurmapi-deployment-bench",
    "DEPLOY_PG_PORT": "54339",
    "DEPLOY_API_PORT": "28180",
    "DEPLOY_REDIS_PORT": "63809",
    "DEPLOY_TRIGGERER_CAPACITY": "5000",
}


@contextlib.contextmanager
def deployment(triggerers: int) -> Iterator[Any]:
    """A fresh emulator (simulated runs) and a fresh deployment of ``triggerers`` triggerers on it."""
    from tests.harness.deployment import run_deployment
    from tests.harness.standalone import run_emulator

    os.environ.update(BENCH_ENV)
    with (
        run_emulator("--simulate", "--partition", "debug=100000", "--min-job-age", "3600") as emulator,
        run_deployment(emulator, triggerers=triggerers) as dep,
    ):
        yield dep


def triggerer_names(dep: Any) -> list[str]:
    return [f"triggerer-{i}" for i in range(1, dep.triggerers + 1)]


def pss(dep: Any, names: list[str]) -> int:
    """PSS bytes of the processes ``names`` and everything they started."""
    import psutil

    total = 0
    for name in names:
        for proc in dep.processes(name):
            with contextlib.suppress(psutil.Error):
                total += proc.memory_full_info().pss
    return total


def cpu(dep: Any, names: list[str] | tuple[str, ...]) -> float:
    return sum(dep.cpu_seconds(name) for name in names)


def all_held(dep: Any, n: int, timeout: float) -> dict[str | None, int]:
    """Until exactly ``n`` triggers exist and each is held by a triggerer: how many each holds."""
    from tests.harness.standalone import wait_for

    def held() -> dict[str | None, int] | None:
        found = dep.triggers_by_triggerer()
        return found if None not in found and sum(found.values()) == n else None

    return dict(wait_for(f"{n} triggers held by the triggerers", held, timeout=timeout, interval=0.5))


def all_polling(dep: Any, job_ids: list[int], since: float, timeout: float) -> float:
    """Until every job of ``job_ids`` has been asked about by a call logged after ``since`` (epoch): every
    trigger runs and polls (a trigger held by a triggerer in the database may not run yet). When."""
    from benchmarks.waiting_at_scale import POLLED_ID
    from tests.harness.standalone import wait_for

    waiting = {str(job_id) for job_id in job_ids}
    seen = since

    def polled() -> float | None:
        nonlocal seen
        now = time.time()
        for at, _, path in dep.emulator.calls(seen, now + 60):
            waiting.difference_update(POLLED_ID.findall(path))
            seen = max(seen, at)
        return time.time() if not waiting else None

    return float(wait_for(f"{len(job_ids)} jobs polled", polled, timeout=timeout, interval=1))


def settle() -> None:
    """Let the processes finish what the start-up left (parsing, heartbeats) before a baseline is read."""
    time.sleep(2 * INTERVAL)


def measure_waiting(triggerers: int, n: int, dag_size: int, ticks: int) -> dict[str, Any]:
    with deployment(triggerers) as dep:
        names = triggerer_names(dep)
        targets = dep.submit_held(n, "bench")
        dags = [f"bench_waiting_{k:03d}" for k in range(math.ceil(n / dag_size))]
        for k, dag_id in enumerate(dags):
            dep.write_sensor_dag(dag_id, targets[k * dag_size : (k + 1) * dag_size])
        settle()
        pss_before = pss(dep, names)
        cpu_start = cpu(dep, names)
        started = time.time()
        for dag_id in dags:
            dep.trigger(dag_id, {})
        holders = all_held(dep, n, timeout=max(600.0, n * 0.5))
        held = time.time() - started
        running = all_polling(dep, targets, started, timeout=max(600.0, n * 0.5)) - started
        startup_cpu = cpu(dep, names) - cpu_start
        time.sleep(INTERVAL)  # past the tick in which the last triggers joined
        cpu_before = cpu(dep, names)
        window_start = time.time()
        time.sleep(ticks * INTERVAL)
        window_end = time.time()
        cpu_used = cpu(dep, names) - cpu_before
        pss_waiting = pss(dep, names)
        elapsed_ticks = (window_end - window_start) / INTERVAL
        calls = [path for _, _, path in dep.emulator.calls(window_start, window_end) if "submit" not in path]
        still = dep.triggers_by_triggerer()
        assert sum(still.values()) == n, f"triggers ended during the window: {still}"
        return {
            "triggerers": triggerers,
            "n": n,
            "dags": len(dags),
            "split": "/".join(str(holders[h]) for h in sorted(holders, key=str)),
            "held_s": held,
            "running_s": running,
            "startup_cpu": startup_cpu,
            "calls_per_tick": len(calls) / elapsed_ticks,
            "bound": triggerers * (math.ceil(n / 500) + 1),
            "cpu_per_tick": cpu_used / elapsed_ticks,
            "pss_before_mb": pss_before / 2**20,
            "pss_waiting_mb": pss_waiting / 2**20,
            "kb_per_trigger": (pss_waiting - pss_before) / 1024 / n,
        }


def measure_sensor(m: int, start_from_trigger: bool) -> dict[str, Any]:
    with deployment(2) as dep:
        names = triggerer_names(dep)
        targets = dep.submit_held(m, "sensed")
        dag_id = "bench_sensors"
        dep.write_sensor_dag(dag_id, targets, start_from_trigger=start_from_trigger)
        settle()
        pss_before = pss(dep, names)
        cpu_before = {
            "workers": cpu(dep, WORKERS),
            "scheduler": cpu(dep, ["scheduler"]),
            "triggerers": cpu(dep, names),
        }
        started = time.time()
        run_id = dep.trigger(dag_id, {})
        all_held(dep, m, timeout=max(900.0, m * 6.0))
        startup = all_polling(dep, targets, started, timeout=max(900.0, m * 6.0)) - started
        used = {
            "workers": cpu(dep, WORKERS) - cpu_before["workers"],
            "scheduler": cpu(dep, ["scheduler"]) - cpu_before["scheduler"],
            "triggerers": cpu(dep, names) - cpu_before["triggerers"],
        }
        time.sleep(2 * INTERVAL)  # past the start-up
        pss_waiting = pss(dep, names)
        ran = dep.sql(
            "SELECT count(*), coalesce(sum(extract(epoch FROM t.created_date - ti.start_date)), 0) "
            "FROM task_instance ti JOIN trigger t ON t.id = ti.trigger_id "
            "WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.hostname = ANY(%s)",
            dag_id,
            run_id,
            list(WORKER_HOSTS),
        )
        on_workers, slot_s = int(ran[0][0]), float(ran[0][1])
        return {
            "way": "in the triggerer" if start_from_trigger else "from a worker",
            "m": m,
            "startup_s": startup,
            "on_workers": on_workers,
            "slot_s": slot_s,
            "cpu": used,
            "kb_per_sensor": (pss_waiting - pss_before) / 1024 / m,
        }


def measure_in_process(n: int) -> dict[str, Any]:
    """``waiting_at_scale.py``'s coalesced mode at N: the same waits in one bare process."""
    from benchmarks.waiting_at_scale import EmulatorProcess as BareEmulator
    from benchmarks.waiting_at_scale import run_case

    emu = BareEmulator()
    try:
        figures = run_case(emu, "coalesced", n, INTERVAL, 30.0)
    finally:
        emu.close()
    ticks = max(1.0, figures["wait_s"] / INTERVAL)
    return {
        "n": n,
        "calls_per_tick": figures["calls_per_tick"],
        "cpu_per_tick": figures["cpu_wait_s"] / ticks,
        "kb_per_trigger": figures["rss_per_trigger_kb"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triggerers", default="1,2", help="triggerer counts of the waiting cases ('' for none)")
    parser.add_argument("--sizes", default="500,2000", help="the N waiting jobs of each waiting case")
    parser.add_argument("--dag-size", type=int, default=25, help="sensors per DAG in the waiting cases")
    parser.add_argument("--sensors", type=int, default=200, help="M sensors of one DAG, both ways (0: skip)")
    parser.add_argument("--ticks", type=int, default=6, help="poll intervals measured while all N wait")
    parser.add_argument("--no-in-process", action="store_true", help="skip the in-process comparison")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    waiting, bare, sensors = [], [], []
    for t in [int(t) for t in args.triggerers.split(",") if t]:
        for n in sizes:
            waiting.append(measure_waiting(t, n, args.dag_size, args.ticks))
            print(f"  measured {t} triggerer(s), N={n}", file=sys.stderr, flush=True)
    if waiting and not args.no_in_process:
        for n in sizes:
            bare.append(measure_in_process(n))
            print(f"  measured in-process N={n}", file=sys.stderr, flush=True)
    if args.sensors:
        for way in (True, False):
            sensors.append(measure_sensor(args.sensors, way))
            print(f"  measured {args.sensors} sensors, start_from_trigger={way}", file=sys.stderr, flush=True)

    import airflow

    print(
        f"\nA production-shaped deployment (Airflow {airflow.__version__}, PostgreSQL, Celery with 2 workers x 8 "
        f"slots): sensors in DAGs of {args.dag_size}, started in the triggerer; figures over {args.ticks} ticks "
        f"of {INTERVAL:.0f} s while all N wait\n"
    )
    if waiting:
        print(
            f"{'where':14} {'N':>5} {'held':>9} {'held in':>7} {'running':>7} {'start CPU':>9} {'calls/tick':>10} "
            f"{'bound':>5} {'CPU s/tick':>10} {'PSS before':>10} {'PSS waiting':>11} {'KB/trigger':>10}"
        )
        for r in waiting:
            print(
                f"{r['triggerers']} triggerer{'s' if r['triggerers'] > 1 else ' ':1} {r['n']:>5} {r['split']:>9} "
                f"{r['held_s']:>6.0f}s {r['running_s']:>6.0f}s {r['startup_cpu']:>8.1f}s {r['calls_per_tick']:>10.1f} "
                f"{r['bound']:>5} {r['cpu_per_tick']:>10.3f} {r['pss_before_mb']:>8.0f}MB "
                f"{r['pss_waiting_mb']:>9.0f}MB "
                f"{r['kb_per_trigger']:>10.0f}"
            )
        for r in bare:
            print(
                f"{'in-process':14} {r['n']:>5} {'':>9} {'':>7} {'':>7} {'':>9} {r['calls_per_tick']:>10.1f} {'':>5} "
                f"{r['cpu_per_tick']:>10.3f} {'':>10} {'(RSS)':>11} {r['kb_per_trigger']:>10.0f}"
            )
        print(
            "\n(held in: the first run triggered -> every trigger held by a triggerer in the database; running: -> "
            "every job polled, every trigger running; start CPU: the triggerers' CPU seconds until then; CPU s/tick "
            "afterwards, while all wait. in-process: one bare process, no Airflow around the triggers, over its "
            "job ends; its KB/trigger is RSS growth per trigger, what the provider's triggers and pollers cost)"
        )
    if sensors:
        print(f"\n{sensors[0]['m']} sensors of one DAG, 2 triggerers:\n")
        print(
            f"{'started':17} {'start-up':>8} {'run on a worker':>15} {'worker-slot s':>13} {'worker CPU':>10} "
            f"{'scheduler CPU':>13} {'triggerer CPU':>13} {'KB/sensor':>9}"
        )
        for r in sensors:
            print(
                f"{r['way']:17} {r['startup_s']:>7.0f}s {r['on_workers']:>15} {r['slot_s']:>13.0f} "
                f"{r['cpu']['workers']:>9.1f}s {r['cpu']['scheduler']:>12.1f}s {r['cpu']['triggerers']:>12.1f}s "
                f"{r['kb_per_sensor']:>9.0f}"
            )


if __name__ == "__main__":
    main()
