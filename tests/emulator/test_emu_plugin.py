"""The pytest plugin: cheap to load, a started emulator per test, the Airflow connection in the env."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator


def test_fixture_sets_the_airflow_connection(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    connection = json.loads(os.environ["AIRFLOW_CONN_SLURMAPI_DEFAULT"])
    assert connection == json.loads(slurmapi_emulator.connection_json())
    assert connection["extra"]["endpoint"] == slurmapi_emulator.endpoint
    assert slurmapi_emulator.min_job_age == 2.0 and slurmapi_emulator.minute_seconds == 1.0


@pytest.mark.slurmapi_emulator(cluster="marked", partitions={"big": 16}, default_partition="big")
def test_marker_overrides(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    assert slurmapi_emulator.cluster == "marked" and slurmapi_emulator.partitions == {"big": 16}


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys; import airflow_provider_slurmapi.emulator.pytest_plugin; "
        "heavy = [m for m in ('airflow', 'cryptography', 'google.auth', 'http.server', "
        "'airflow_provider_slurmapi.emulator.app') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_connection_helpers() -> None:
    emu = SlurmJobApiEmulator(project="p", region="r", cluster="c")
    with emu:
        extra = emu.connection_extra(timeout=5)
        assert extra == {
            "project_id": "p",
            "region": "r",
            "cluster_id": "c",
            "endpoint": emu.endpoint,
            "key_path": emu.key_path,
            "timeout": 5,
        }
        assert emu.connection_uri().startswith("slurmapi://?__extra__=%7B")
        assert list(emu.airflow_env("my_conn")) == ["AIRFLOW_CONN_MY_CONN"]


def test_without_the_emulator_extra_the_plugin_is_harmless_and_the_fixture_names_the_extra(tmp_path) -> None:
    """A user's Airflow without the ``emulator`` extra (no cryptography): their own pytest runs with the
    plugin loaded; a test that asks for the fixture fails saying which extra to install."""
    (tmp_path / "test_user.py").write_text(
        "def test_plain():\n    assert True\n\n\ndef test_emulated(slurmapi_emulator):\n    pass\n"
    )
    # Plays "cryptography is not installed" for the process (a None entry makes its import fail).
    (tmp_path / "conftest.py").write_text("import sys\nsys.modules['cryptography'] = None\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert "1 passed" in run.stdout and "1 error" in run.stdout, run.stdout[-3000:]
    assert "pip install 'airflow-provider-slurmapi[emulator]'" in run.stdout, run.stdout[-3000:]
    cli = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['cryptography'] = None; import runpy; "
            "runpy.run_module('airflow_provider_slurmapi.emulator', run_name='__main__')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode != 0 and "airflow-provider-slurmapi[emulator]" in cli.stderr, cli.stderr[-2000:]
