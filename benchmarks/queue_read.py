"""Benchmark: what one tick's read of ended jobs costs on a real slurmrestd, by how the result travels.

Run (a real Slurm from ``tests/real_slurm/start_slurm.sh``; it submits and then cancels N held jobs)::

    set -a; . .real-slurm/slurm.env; set +a
    .venv/bin/python -m benchmarks.queue_read [--n 2000] [--ended 10] [--repeats 5]

With N jobs in the active queue (held, each with a 600-byte comment, as a publishing job's), it times the
reads a deferred wait makes in a tick, straight against slurmrestd (no Google in between):

- ``states`` (the baseline, every tick): ``GET /slurm/{v}/jobs/state/``, every job's state.
- ``accounting``: ``GET /slurmdb/{v}/jobs/?step=<id>...`` of ``--ended`` jobs, the tick's batched read of
  the jobs that ended; with the wrapper's accounting copy it carries what they published.
- ``whole queue``: ``GET /slurm/{v}/jobs/``, what a tick costs when the publications are only in the
  queue's records (no ``sacctmgr`` on the nodes): slurmrestd has no multi-id form of it (``/job/1,2`` is a
  400, ``?job_id=`` is ignored) and ``update_time`` returns all jobs or none.

Prints the median seconds and megabytes of each, and each against the baseline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.parse

import requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="jobs in the active queue")
    parser.add_argument("--ended", type=int, default=10, help="jobs in the tick's accounting read")
    parser.add_argument("--repeats", type=int, default=5, help="reads of each kind (the median is printed)")
    parser.add_argument("--version", default="v0.0.42", help="slurmrestd's REST version")
    args = parser.parse_args()
    missing = [v for v in ("SLURM_REST_URL", "SLURM_USER", "SLURM_JWT", "SLURM_PARTITION") if not os.environ.get(v)]
    if missing:
        sys.exit(f"set {', '.join(missing)}: source a real Slurm's slurm.env (tests/real_slurm/start_slurm.sh)")
    url, v = os.environ["SLURM_REST_URL"].rstrip("/"), args.version
    session = requests.Session()
    session.headers.update(
        {"X-SLURM-USER-NAME": os.environ["SLURM_USER"], "X-SLURM-USER-TOKEN": os.environ["SLURM_JWT"]}
    )
    ids: list[int] = []
    try:
        started = time.monotonic()
        for i in range(args.n):
            job = {
                "name": f"queue-read-{i}",
                "hold": True,
                "partition": os.environ["SLURM_PARTITION"],
                "current_working_directory": "/tmp",
                "environment": ["PATH=/bin:/usr/bin"],
                "comment": "c" * 600,
            }
            reply = session.post(f"{url}/slurm/{v}/job/submit", json={"script": "#!/bin/sh\ntrue\n", "job": job})
            reply.raise_for_status()
            ids.append(int(reply.json()["job_id"]))
        print(f"submitted {args.n} held jobs in {time.monotonic() - started:.1f}s", file=sys.stderr)
        step = urllib.parse.urlencode({"step": [str(j) for j in ids[: args.ended]]}, doseq=True)
        reads = {
            "states": f"{url}/slurm/{v}/jobs/state/",
            f"accounting ({args.ended} jobs)": f"{url}/slurmdb/{v}/jobs/?{step}",
            "whole queue": f"{url}/slurm/{v}/jobs/",
        }
        figures = {}
        for name, read in reads.items():
            times, size = [], 0
            for _ in range(args.repeats):
                start = time.perf_counter()
                reply = session.get(read)
                reply.raise_for_status()
                times.append(time.perf_counter() - start)
                size = len(reply.content)
            figures[name] = (statistics.median(times), size)
        base_s, base_b = figures["states"]
        print(f"\nOne tick's reads on slurmrestd ({os.environ.get('SLURM_VERSION', '?')}), {args.n} jobs queued:")
        print(f"{'read':24} {'median s':>9} {'MB':>7} {'x states (time)':>16}")
        for name, (seconds, size) in figures.items():
            print(f"{name:24} {seconds:>9.3f} {size / 1e6:>7.2f} {seconds / base_s:>15.1f}x")
        print(f"(baseline: states, {base_s * 1000:.0f} ms, {base_b / 1e6:.2f} MB)")
    finally:
        for job_id in ids:
            session.delete(f"{url}/slurm/{v}/job/{job_id}")


if __name__ == "__main__":
    main()
