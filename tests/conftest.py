"""Test set-up shared by every suite: a private AIRFLOW_HOME, set before Airflow is imported."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.harness.storage import FakeGcs

ROOT = Path(__file__).resolve().parent.parent
_OWN_HOME = not os.environ.get("SLURMAPI_TEST_AIRFLOW_HOME")
_HOME = os.environ.get("SLURMAPI_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="slurmapi-airflow-")
os.environ["AIRFLOW_HOME"] = _HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
# Airflow 3's dag.test() runs only DAGs it can find in a bundle: the examples and the tests' own DAGs.
_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
    [
        {"name": "dags-folder", "classpath": _BUNDLE, "kwargs": {"path": str(ROOT / "example_dags")}},
        {"name": "test-dags", "classpath": _BUNDLE, "kwargs": {"path": str(ROOT / "tests" / "dags")}},
    ]
)
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")


def _remove_own_home() -> None:
    if _OWN_HOME:
        shutil.rmtree(_HOME, ignore_errors=True)


# At the process's exit too, and registered before Airflow is imported, so that it runs after Airflow's
# own exit handlers: an xdist worker that got no test may be stopped (execnet interrupts its main thread)
# while it is still importing Airflow, which creates logs/ in the home; pytest_unconfigure never runs then.
atexit.register(_remove_own_home)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's own AIRFLOW_HOME goes with it (one folder per session, and per xdist worker, was left
    in /tmp). A home given with SLURMAPI_TEST_AIRFLOW_HOME is the caller's, and stays."""
    _remove_own_home()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """Airflow's metadata database, migrated once per session (SQLite in the private AIRFLOW_HOME)."""
    # Importing Airflow can create an empty airflow.db, so the marker, not the file, says "migrated".
    marker = Path(_HOME) / ".migrated"
    if not marker.exists():
        airflow = Path(sys.executable).parent / "airflow"
        subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
        marker.touch()
    return _HOME


@pytest.fixture
def fake_gcs() -> Iterator[FakeGcs]:
    """A started fake-gcs-server behind its fault proxy (``tests/harness/storage.py``), with the bucket
    ``slurmapi-staging``: its ``url`` is the value for ``STORAGE_EMULATOR_HOST``."""
    from tests.harness.storage import STAGING_BUCKET, FakeGcs

    with FakeGcs() as storage:
        storage.create_bucket(STAGING_BUCKET)
        yield storage


# Under pytest-xdist (`make test`: `-n 4`), the tests of one module run on one worker (its module fixtures
# start once), and the tests that share something costly or exclusive run on one worker, in order: the real
# Slurm tests share one cluster (and some of them stop its slurmdbd); the standalone files each start
# `airflow standalone` (scheduler, triggerer, api-server, dag-processor), which on a 2-core machine start in
# time only one at a time; the deployment suite owns its fixed ports. (By node id, in xdist's scheduler:
# pytest 9 ignores the node id suffix that xdist's own `--dist loadgroup` relies on.)
_SHARED_SCOPES = {
    "tests/real_slurm/": "real-slurm",
    "tests/standalone/": "standalone",
    "tests/deployment/": "deployment",
}


# A real-Slurm scenario's run on the emulator backend (``[emulator]``, ``[emulator-sync]``, ...) shares no
# cluster: each module's emulator half is a unit of its own, run beside the real cluster's tests instead of
# after them on their worker.
_EMULATOR_HALF = re.compile(r"\[(?:[^\]]*-)?emulator(?:-[^\]]*)?\]$")


def xdist_scope(nodeid: str) -> str:
    """The unit of work a test belongs to under pytest-xdist: what it shares, else its module."""
    if nodeid.startswith("tests/real_slurm/") and _EMULATOR_HALF.search(nodeid):
        return nodeid.split("::", 1)[0] + "::emulator"
    for prefix, scope in _SHARED_SCOPES.items():
        if nodeid.startswith(prefix):
            return scope
    return nodeid.split("::", 1)[0]


if importlib.util.find_spec("xdist") is not None:
    from xdist.scheduler import LoadScopeScheduling

    class _SharedScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    @pytest.hookimpl(optionalhook=True)  # a hook of xdist's, unknown with `-p no:xdist`
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling:
        return _SharedScopeScheduling(config, log)
