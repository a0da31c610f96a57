"""Session fixtures of the standalone suite: the emulator process, ``airflow standalone``, one DAG run.

What they start and how is in ``harness.py``; logs, timings and screenshots end up in ``artifacts/``.

Environment switches:

- ``SLURMAPI_SKIP_STANDALONE=1``: skip every test here (said loudly; nothing is started).
- ``SLURMAPI_SKIP_BROWSER=1``: skip the Chromium test only (otherwise a missing Chromium fails it:
  ``tests/standalone/install_chromium.sh`` installs Debian's).
- ``SLURMAPI_STANDALONE_READY_TIMEOUT``: seconds to wait for a healthy Airflow (default 180).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.standalone import LOGS, EmulatorProcess, Standalone, run_emulator, run_standalone
from tests.harness.storage import STAGING_BUCKET, FakeGcs
from tests.suite_switch import SuiteSwitch

HERE = Path(__file__).resolve().parent
SKIP_REASON = "SLURMAPI_SKIP_STANDALONE=1: the airflow standalone suite (tests/standalone) did NOT run"


SWITCH = SuiteSwitch("SLURMAPI_SKIP_STANDALONE", SKIP_REASON, HERE)
pytest_report_header = SWITCH.report_header
pytest_terminal_summary = SWITCH.terminal_summary
pytest_collection_modifyitems = SWITCH.collection_modifyitems


@pytest.fixture(scope="session")
def session_storage() -> Iterator[FakeGcs]:
    """The suite's Cloud Storage (fake-gcs-server, bucket ``slurmapi-staging``): the emulator's jobs stage
    their output there, and the standalone's triggerer and workers read it."""
    with FakeGcs() as storage:
        storage.create_bucket(STAGING_BUCKET)
        yield storage


@pytest.fixture(scope="session")
def emulator_process(session_storage: FakeGcs) -> Iterator[EmulatorProcess]:
    """The Slurm Job API emulator, started as a separate process (``python -m ...emulator``)."""
    with run_emulator("--storage-emulator-host", session_storage.url) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def standalone(emulator_process: EmulatorProcess, session_storage: FakeGcs) -> Iterator[Standalone]:
    """A real ``airflow standalone``, ready (health endpoints green) before the first test uses it."""
    with run_standalone(emulator_process, extra_env={"STORAGE_EMULATOR_HOST": session_storage.url}) as airflow:
        yield airflow


@pytest.fixture(scope="session")
def training_run(standalone: Standalone) -> dict[str, Any]:
    """One run of ``example_slurm_training`` in the standalone, finished: its id, state and tasks."""
    dag_id = "example_slurm_training"
    started = time.monotonic()
    run_id = standalone.trigger(dag_id)
    state = standalone.wait_for_run(dag_id, run_id)
    (LOGS / "dag_run_seconds.txt").write_text(f"{time.monotonic() - started:.1f}\n")
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "state": state,
        "task_instances": standalone.task_instances(dag_id, run_id),
    }
