"""The test sessions themselves: what they leave behind on the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_session_removes_its_own_airflow_home(tmp_path):
    """Each session (and each xdist worker) made a /tmp/slurmapi-airflow-* folder and left it there."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMAPI_TEST_AIRFLOW_HOME", "PYTEST_XDIST_WORKER")}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "tests/unit/test_ended.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob("slurmapi-airflow-*")) == []
