"""Fixtures for the emulator's own tests: the plugin's fixture plus an authorized raw API helper."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.emulator.pytest_plugin import (  # noqa: F401 - registers the fixture and marker
    pytest_configure,
    slurmapi_emulator,
)
from tests.harness.emulator import Api


@pytest.fixture
def emu(slurmapi_emulator: SlurmJobApiEmulator) -> SlurmJobApiEmulator:  # noqa: F811 - the fixture
    return slurmapi_emulator


@pytest.fixture
def api(emu: SlurmJobApiEmulator) -> Iterator[Api]:
    client = Api(emu)
    yield client
    client.close()
