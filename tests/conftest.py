"""Test set-up shared by every suite: a private AIRFLOW_HOME, set before Airflow is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


# Under pytest-xdist (`make test`, `--dist loadgroup`), the tests that share something costly or exclusive
# run on one worker, in order: each real Slurm release's tests share one cluster (and some of them stop its
# slurmdbd), each standalone file starts its own `airflow standalone` in a session fixture, and the
# deployment suite owns its fixed ports. Everything else is spread freely.
_SUITES = ROOT / "tests"


def _xdist_group(item: pytest.Item) -> str | None:
    path = Path(str(item.fspath)).resolve()
    if _SUITES / "real_slurm" in path.parents:
        return "real-slurm"
    if _SUITES / "standalone" in path.parents:
        return f"standalone:{path.stem}"
    if _SUITES / "deployment" in path.parents:
        return "deployment"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
