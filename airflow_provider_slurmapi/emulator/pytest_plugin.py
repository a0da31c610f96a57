"""pytest plugin: the ``slurmapi_emulator`` fixture, a started emulator with fast clocks per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .app import SlurmJobApiEmulator

FAST_DEFAULTS: dict[str, Any] = {"min_job_age": 2.0, "minute_seconds": 1.0, "completing_time": 0.2}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurmapi_emulator(**options): keyword arguments for the slurmapi_emulator fixture"
    )


@pytest.fixture
def slurmapi_emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlurmJobApiEmulator]:
    """A started ``SlurmJobApiEmulator`` (MinJobAge 2 s, a Slurm minute lasts 1 s), as ``slurmapi_default``.

    ``AIRFLOW_CONN_SLURMAPI_DEFAULT`` points at it for the test. Change settings with
    ``@pytest.mark.slurmapi_emulator(simulate=True, partitions={"debug": 64}, ...)``.
    ``SLURMAPI_EMULATOR_REPLY_SHAPE=body`` makes every such emulator answer ``{status, body}`` (a JSON
    string) instead of ``{status, structuredBody}``.
    """
    from .app import SlurmJobApiEmulator

    options = dict(FAST_DEFAULTS)
    # One switch runs a whole suite against the other reply shape ({status, body} with a JSON string).
    shape = os.environ.get("SLURMAPI_EMULATOR_REPLY_SHAPE")
    if shape:
        options["reply_shape"] = shape
    marker = request.node.get_closest_marker("slurmapi_emulator")
    if marker is not None:
        options.update(marker.kwargs)
    options.setdefault("state_dir", tmp_path_factory.mktemp("slurmapi-emulator"))
    emulator = SlurmJobApiEmulator(**options)
    emulator.start()
    try:
        for name, value in emulator.airflow_env().items():
            monkeypatch.setenv(name, value)
        yield emulator
    finally:
        emulator.stop()
