"""What a DAG file pays for importing the provider: no HTTP or auth library, no web pages, no emulator.

Each check runs in a fresh interpreter, which imports Airflow first (what every DAG file has loaded
anyway) and then the operators and the sensor, and lists the modules that the provider's import added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Third-party libraries loaded only once a task talks to the API (execute time), and what a DAG file
# never needs. The provider's own modules load with it, at the top of each module: what that costs is
# measured by benchmarks.waiting_at_scale (import cost above airflow.sdk), not asserted here.
HEAVY = (
    "httpx",
    "requests",
    "urllib3",
    "google.auth",
    "google.oauth2",
    "jinja2",
    "fastapi",
    "airflow_provider_slurmapi.emulator",
    "airflow_provider_slurmapi.plugins.slurm_job_page",
    "airflow_provider_slurmapi.plugins.app",
    # OpenLineage (the openlineage extra): its listener imports it; a task asks for it only when it is enabled
    "openlineage",
    "airflow.providers.openlineage",
    "airflow_provider_slurmapi.lineage.facets",
)

AIRFLOW = """
try:
    import airflow.sdk
except ImportError:  # Airflow 2
    import airflow
"""
PROBE = """
import json, sys
{prelude}
before = set(sys.modules)
{imports}
print(json.dumps({{"before": sorted(before), "added": sorted(set(sys.modules) - before)}}))
"""


def added_by(imports: str, prelude: str = AIRFLOW) -> tuple[list[str], list[str]]:
    """The modules that ``imports`` adds in a fresh interpreter that has run ``prelude``, and the heavy
    ones among them: a library Airflow had not loaded yet, or one of the provider's execute-time modules."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(prelude=prelude, imports=imports)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    before, added = set(found["before"]), found["added"]
    # (Airflow 2's BaseOperator loads more of jinja2, which Airflow had imported already: not ours.)
    fresh = [h for h in HEAVY if h not in before]
    return added, [m for m in added if any(m == h or m.startswith(h + ".") for h in fresh)]


def test_a_dag_file_importing_the_operators_and_the_sensor_loads_nothing_heavy() -> None:
    added, heavy = added_by(
        "from airflow_provider_slurmapi.operators.slurmapi import SlurmSubmitJobOperator, SlurmCancelJobOperator\n"
        "from airflow_provider_slurmapi.sensors.slurmapi import SlurmJobSensor"
    )
    assert "airflow_provider_slurmapi.operators.slurmapi" in added  # the probe did import them
    assert heavy == []


def test_the_provider_info_every_airflow_process_reads_imports_only_the_field_list() -> None:
    # Without Airflow first: on Airflow 3 importing it already calls get_provider_info.
    added, heavy = added_by(
        "from airflow_provider_slurmapi.get_provider_info import get_provider_info\nget_provider_info()", prelude=""
    )
    ours = {m for m in added if m.startswith("airflow_provider_slurmapi")}
    assert "airflow_provider_slurmapi.get_provider_info" in ours
    assert heavy == []
    assert ours <= {
        "airflow_provider_slurmapi",
        "airflow_provider_slurmapi.api",
        "airflow_provider_slurmapi.api.fields",
        "airflow_provider_slurmapi.api.versions",  # the default version's home
        "airflow_provider_slurmapi.api.errors",
        "airflow_provider_slurmapi.get_provider_info",
    }, sorted(ours)
