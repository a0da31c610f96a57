"""Chaos through real Airflow: the figures of N submit-and-wait tasks with retries while a fifth of all calls fail.

Run from the repository root: ``.venv/bin/python -m benchmarks.chaos [--tasks 100] [--fault-rate 0.2] [--seed 7]
[--modes provider,naive] [--log FILE]``

The harness is ``tests/harness/chaos.py`` (the DAGs, the faults, the cluster events and what a run counts),
which the chaos tests run too. ``chaos`` is the provider; ``chaos_naive`` the baseline: the same tasks, an
operator that submits, submits again when the submit call fails, and submits anew on every task try.
Printed: only the figures; the Airflow and provider logs go to ``--log``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.harness.chaos import DAG_FILE, EVENT_KINDS, FAULT_KINDS, ROOT, ChaosRun, load_dags, run_chaos


def prepare_airflow(home: Path) -> None:
    """A private AIRFLOW_HOME whose DAG folder holds the chaos DAGs, migrated on first use."""
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAG_FILE.parent)
    marker = home / ".migrated"
    if not marker.exists():
        home.mkdir(parents=True, exist_ok=True)
        airflow = Path(sys.executable).parent / "airflow"
        subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
        marker.touch()


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Everything written to stdout and stderr (Airflow's and the provider's logs) goes to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def table(runs: list[tuple[str, ChaosRun]], args: argparse.Namespace) -> str:
    import airflow

    lines = [
        f"Chaos through Airflow {airflow.__version__} dag.test(): {args.tasks} tasks (half deferred), "
        f"retries {load_dags()['RETRIES']}, fault rate {args.fault_rate:.0%} per call, seed {args.seed}",
        "",
        f"{'mode':9} {'ok':>4} {'failed':>6} {'tries':>5} {'jobs':>5} {'dup':>4} {'lost':>4} "
        f"{'calls':>6} {'faulted':>7} {'rate':>5} {'s':>6}",
    ]
    for mode, r in runs:
        lines.append(
            f"{mode:9} {r.tasks - r.tasks_failed:>4} {r.tasks_failed:>6} {r.tries:>5} {len(r.jobs):>5} "
            f"{r.duplicates:>4} {r.lost:>4} {r.total_calls:>6} {sum(r.faults.values()):>7} "
            f"{r.fault_rate:>5.1%} {r.seconds:>6.1f}"
        )
    lines += ["", f"{'calls faulted / cluster events':31}" + "".join(f" {mode:>9}" for mode, _ in runs)]
    for kind in FAULT_KINDS:
        lines.append(f"  {kind:29}" + "".join(f" {r.faults[kind]:>9}" for _, r in runs))
    for kind in EVENT_KINDS:
        lines.append(f"  {kind:29}" + "".join(f" {r.events[kind]:>9}" for _, r in runs))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--fault-rate", type=float, default=0.2, help="chance that a call meets a fault")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--modes", default="provider,naive", help="provider, naive, or both (comma separated)")
    parser.add_argument("--home", type=Path, default=ROOT / ".airflow-bench", help="AIRFLOW_HOME of the run")
    parser.add_argument("--log", type=Path, default=None, help="where the logs go (default HOME/chaos.log)")
    args = parser.parse_args()
    prepare_airflow(args.home)
    log = args.log or args.home / "chaos.log"
    dag_ids = {"provider": "chaos", "naive": "chaos_naive"}
    runs = []
    with output_to(log):
        for mode in args.modes.split(","):
            runs.append((mode, run_chaos(dag_ids[mode], args.tasks, args.fault_rate, args.seed)))
    print(table(runs, args))
    print(f"\n(logs: {log})")


if __name__ == "__main__":
    main()
