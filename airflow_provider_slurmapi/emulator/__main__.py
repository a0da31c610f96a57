"""``python -m airflow_provider_slurmapi.emulator``: run the emulator in the foreground until Ctrl-C/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from .app import DEFAULT_PARTITIONS, REPLY_SHAPES, SlurmJobApiEmulator


def _partition(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=NODES, got {text!r}")
    return name, int(count)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_slurmapi.emulator", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--state-dir", default=None, help="job files and the key file (default: a temp dir)")
    parser.add_argument("--project", default="demo-project")
    parser.add_argument("--region", default="us-central1")
    parser.add_argument("--cluster", default="demo-cluster")
    parser.add_argument("--min-job-age", type=float, default=300.0, help="seconds a finished job stays queued")
    parser.add_argument("--minute-seconds", type=float, default=60.0, help="real seconds per Slurm minute")
    parser.add_argument("--accounting-delay", type=float, default=0.0)
    parser.add_argument("--token-lifetime", type=int, default=3600)
    parser.add_argument("--simulate", action="store_true", help="simulate job runs instead of running scripts")
    parser.add_argument(
        "--accounting-store-flags",
        default="",
        metavar="FLAGS",
        help="as slurm.conf's AccountingStoreFlags, e.g. job_comment (default none: accounting keeps no comment)",
    )
    parser.add_argument(
        "--partition",
        type=_partition,
        action="append",
        metavar="NAME=NODES",
        help=f"repeatable; the first is the default partition (default: {DEFAULT_PARTITIONS})",
    )
    parser.add_argument(
        "--reply-shape",
        choices=REPLY_SHAPES,
        default="structuredBody",
        help="replies as {status, structuredBody} (an object, default) or {status, body} (a JSON string)",
    )
    parser.add_argument(
        "--slurm-release",
        choices=("24.11", "26.05"),
        default="24.11",
        help="the Slurm it answers as: 24.11 (REST v0.0.40-v0.0.42, default) or 26.05 (v0.0.42-v0.0.45)",
    )
    parser.add_argument(
        "--storage-emulator-host",
        metavar="URL",
        help="STORAGE_EMULATOR_HOST for the jobs (a Cloud Storage emulator, e.g. http://127.0.0.1:4443); "
        "they always get GCE_METADATA_HOST, the emulator's metadata-server stand-in",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log each call")
    proxy = parser.add_argument_group(
        "proxy mode", "forward each Slurm call to a real slurmrestd; the Google layer stays the emulator's"
    )
    proxy.add_argument("--upstream", metavar="URL", help="slurmrestd URL, e.g. http://127.0.0.1:6820")
    proxy.add_argument("--upstream-user", metavar="USER", help="X-SLURM-USER-NAME (default: $SLURM_USER)")
    proxy.add_argument(
        "--upstream-token", metavar="JWT", help="X-SLURM-USER-TOKEN (default: $SLURM_JWT; prefer the variable)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    upstream_user = args.upstream_user or os.environ.get("SLURM_USER") or None
    upstream_token = args.upstream_token or os.environ.get("SLURM_JWT") or None
    if args.upstream and not (upstream_user and upstream_token):
        parser.error("--upstream needs --upstream-user (or $SLURM_USER) and --upstream-token (or $SLURM_JWT)")
    partitions = dict(args.partition) if args.partition else dict(DEFAULT_PARTITIONS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    emulator = SlurmJobApiEmulator(
        host=args.host,
        port=args.port,
        project=args.project,
        region=args.region,
        cluster=args.cluster,
        partitions=partitions,
        default_partition=next(iter(partitions)),
        state_dir=args.state_dir,
        min_job_age=args.min_job_age,
        minute_seconds=args.minute_seconds,
        accounting_delay=args.accounting_delay,
        token_lifetime=args.token_lifetime,
        simulate=args.simulate,
        accounting_store_flags=args.accounting_store_flags.split(","),
        log_calls=not args.quiet,
        reply_shape=args.reply_shape,
        slurm_release=args.slurm_release,
        storage_emulator_host=args.storage_emulator_host,
        upstream=args.upstream,
        upstream_user=upstream_user if args.upstream else None,
        upstream_token=upstream_token if args.upstream else None,
    )
    stopping = threading.Event()
    releasing = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    def on_release(signum: int, frame: FrameType | None) -> None:
        releasing.set()  # the main loop releases: a handler must not wait for the cluster's lock

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # SIGUSR1 starts the clock of every held simulated run (#EMULATOR hold=1), as release_held() does.
    signal.signal(signal.SIGUSR1, on_release)
    emulator.start()
    try:
        print(f"Slurm Job API emulator listening on {emulator.endpoint}")
        if args.upstream:
            print(f"proxy mode: Slurm calls go to {emulator.upstream} as {upstream_user}")
        print(f"service account: {emulator.service_account_email}")
        print(f"key file: {emulator.key_path}")
        print(f"connection: {emulator.connection_json()}")
        print(f"export AIRFLOW_CONN_SLURMAPI_DEFAULT='{emulator.connection_json()}'")
        print(f"jobs see GCE_METADATA_HOST={emulator.metadata_host}", end="")
        print(f" STORAGE_EMULATOR_HOST={args.storage_emulator_host}" if args.storage_emulator_host else "")
        sys.stdout.flush()
        while not stopping.wait(0.2):
            if releasing.is_set():
                releasing.clear()
                print(f"released {emulator.release_held()} held simulated runs", flush=True)
    finally:
        emulator.stop()
        print("emulator stopped")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
