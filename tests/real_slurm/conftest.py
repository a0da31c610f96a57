"""The `real_slurm` session fixture: a real Slurm 24.11 or 26.05 + slurmrestd on loopback for tests/real_slurm.

By default the fixture runs ``start_slurm.sh`` (a chroot cached under ``.real-slurm/``; ``SLURM_RELEASE=26.05``:
Slurm 26.05 under ``.real-slurm-26.05/``) and stops the
daemons at the end of the session. Environment switches:

- ``SLURMAPI_SKIP_REAL_SLURM=1``: skip every test here (say so loudly; nothing is started).
- ``SLURMAPI_REAL_SLURM_ENV=/path/slurm.env``: use an already running cluster, start and stop nothing.
- ``SLURMAPI_KEEP_REAL_SLURM=1``: leave the daemons running after the session (fast re-runs).
- ``SLURMAPI_REAL_SLURM_RECORD_DIR``: where replies are saved (default ``.real-slurm/recorded``).

One test session at a time uses a cluster: the fixture holds ``tests.lock`` beside its ``slurm.env`` (some
tests stop slurmdbd, and the session cancels what its user left running at the end), and a second session,
e.g. the Airflow 2.11 suite that CI runs beside the Airflow 3 one, waits for it up to
``SLURMAPI_REAL_SLURM_LOCK_WAIT`` seconds (default 240) and then fails saying so.

A machine that cannot run Slurm (not root, no mounts, no Debian archive) makes the fixture fail,
not skip: a silently skipped real-Slurm suite looks exactly like a passing one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from backends import BACKENDS, Backend, emulator_backend, real_backend

from tests.harness.real_slurm import RealSlurm, Recorder, load_env_file
from tests.suite_switch import SuiteSwitch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# start_slurm.sh's default state dir for SLURM_RELEASE (slurm_lib.sh): 24.11 and 26.05 run side by side
_RELEASE_DIR = {"24.11": ".real-slurm", "26.05": ".real-slurm-26.05"}
STATE_DIR = Path(
    os.environ.get("SLURM_STATE_DIR")
    or REPO / _RELEASE_DIR.get(os.environ.get("SLURM_RELEASE", "24.11"), ".real-slurm")
)
EXIT_CANNOT_RUN = 77
SKIP_REASON = (
    "SLURMAPI_SKIP_REAL_SLURM=1: the REAL Slurm suite (tests/real_slurm) did NOT run; "
    "nothing here was checked against slurmrestd"
)


def _emulator_half(item: pytest.Item) -> bool:
    """A scenario's run on the emulator backend (test_scenarios*.py), which needs no real Slurm."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "emulator"


SWITCH = SuiteSwitch("SLURMAPI_SKIP_REAL_SLURM", SKIP_REASON, HERE, keep=_emulator_half)
pytest_report_header = SWITCH.report_header
pytest_terminal_summary = SWITCH.terminal_summary
pytest_collection_modifyitems = SWITCH.collection_modifyitems


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def _start_cluster() -> Path:
    """Run start_slurm.sh; return its env file, or fail the fixture with the reason."""
    logs = STATE_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "start_slurm.log"
    # stdout to a file, not a pipe: nothing a daemon inherits can then keep us waiting
    with log.open("w") as out:
        try:
            rc = subprocess.run(
                ["bash", str(HERE / "start_slurm.sh")],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=540,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            pytest.fail(f"start_slurm.sh did not finish in 540 s; its log {log}:\n{_tail(log)}")
    if rc == EXIT_CANNOT_RUN:
        pytest.fail(
            "This machine cannot run the real Slurm test cluster (start_slurm.sh exit 77):\n"
            f"{_tail(log, 8)}\n"
            "Set SLURMAPI_SKIP_REAL_SLURM=1 to skip tests/real_slurm, or point SLURMAPI_REAL_SLURM_ENV "
            "at the slurm.env of a cluster running elsewhere.",
            pytrace=False,
        )
    if rc != 0:
        pytest.fail(f"start_slurm.sh failed (exit {rc}); log {log}:\n{_tail(log)}", pytrace=False)
    return STATE_DIR / "slurm.env"


def _hold_cluster(state_dir: Path) -> IO[str]:
    """This session's exclusive hold on the cluster whose state is in ``state_dir`` (released when closed)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = (state_dir / "tests.lock").open("w")
    wait = float(os.environ.get("SLURMAPI_REAL_SLURM_LOCK_WAIT", "240"))
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                pytest.fail(
                    f"another test session still holds the real Slurm cluster of {state_dir} after {wait:.0f} s "
                    f"({state_dir / 'tests.lock'}); let it finish, or raise SLURMAPI_REAL_SLURM_LOCK_WAIT",
                    pytrace=False,
                )
            time.sleep(0.5)


@pytest.fixture(scope="session")
def real_slurm() -> Iterator[RealSlurm]:
    external = os.environ.get("SLURMAPI_REAL_SLURM_ENV")
    with _hold_cluster(Path(external).parent if external else STATE_DIR):
        yield from _real_slurm(external)


def _real_slurm(external: str | None) -> Iterator[RealSlurm]:
    env_file = Path(external) if external else _start_cluster()
    if not env_file.is_file():
        pytest.fail(f"no env file at {env_file}", pytrace=False)
    record_dir = Path(os.environ.get("SLURMAPI_REAL_SLURM_RECORD_DIR", STATE_DIR / "recorded"))
    shutil.rmtree(record_dir, ignore_errors=True)  # only this session's replies, nothing stale
    cluster = RealSlurm(load_env_file(env_file), Recorder(record_dir))
    status, body = cluster.call("GET", "/slurm/v0.0.42/ping/")
    if status != 200:
        pytest.fail(f"slurmrestd at {cluster.rest_url} does not answer ping: {status} {body!r:.500}", pytrace=False)
    yield cluster
    cluster.cancel_all_jobs()
    if not external and os.environ.get("SLURMAPI_KEEP_REAL_SLURM", "") in ("", "0"):
        # without --purge: the chroot stays cached and the next session starts in seconds
        with (STATE_DIR / "logs" / "stop_slurm.log").open("w") as out:
            subprocess.run(
                ["bash", str(HERE / "stop_slurm.sh")],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=300,
                check=False,
            )


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The scenario's cluster: the emulator, then real Slurm (``backends.py``); the same test code on both."""
    if request.param == "real":
        made, emu = real_backend(request.getfixturevalue("real_slurm"), tmp_path_factory)
    else:
        made, emu = emulator_backend(tmp_path_factory)
    try:
        yield made
    finally:
        emu.stop()
