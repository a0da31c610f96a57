"""Fixtures of the deployment suite (``tests/deployment``, marker ``deployment``): PostgreSQL, Redis, the
Celery executor with two workers and two triggerers, started by ``deploy.sh`` and stopped after.

It installs Debian packages and runs PostgreSQL as the ``postgres`` user, so it runs only when asked:
``SLURMAPI_DEPLOYMENT=1`` (``.ci/run`` does; ``make test`` skips it, saying so). Airflow 3 only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.deployment import Deployment, run_deployment
from tests.harness.standalone import EmulatorProcess, run_emulator

ASKED = os.environ.get("SLURMAPI_DEPLOYMENT") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.deployment)
            if not ASKED:
                item.add_marker(pytest.mark.skip(reason="the deployment suite runs with SLURMAPI_DEPLOYMENT=1"))


@pytest.fixture(scope="session")
def deploy_emulator() -> Iterator[EmulatorProcess]:
    """The cluster: the emulator, simulated runs, room for thousands of jobs, ended jobs queued 10 min."""
    with run_emulator("--simulate", "--partition", "debug=100000", "--min-job-age", "600") as emulator:
        yield emulator


@pytest.fixture(scope="session")
def deployment(deploy_emulator: EmulatorProcess) -> Iterator[Deployment]:
    import airflow

    if int(airflow.__version__.split(".")[0]) < 3:
        pytest.skip("the deployment suite runs Airflow 3's processes (api-server, dag-processor)")
    with run_deployment(deploy_emulator) as deployment:
        yield deployment
