"""Which Slurm REST version a connection uses, on an emulated Slurm 24.11 and 26.05 (real HTTP, real tokens).

``auto`` picks the newest version the cluster serves; a version the cluster does not serve fails with an
error naming the ones it does; v0.0.42 on Slurm 26.05 (which deprecates it) logs once how to switch.
The same behaviours on real Slurm 26.05: tests/real_slurm (test_conformance, test_real_slurm_provider).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from airflow_provider_slurmapi.api.client import AsyncSlurmJobApiClient
from airflow_provider_slurmapi.api.errors import SlurmApiVersionError
from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

CWD = "/home/tester"
OK = "#!/bin/bash\ntrue\n"
NOTICE = "goes away in Slurm 26.11"


@pytest.fixture
def emulators(tmp_path):
    with (
        SlurmJobApiEmulator(state_dir=tmp_path / "2411") as old,
        SlurmJobApiEmulator(state_dir=tmp_path / "2605", slurm_release="26.05") as new,
    ):
        yield {"24.11": old, "26.05": new}


def connect(monkeypatch, emu, conn_id, **extra) -> SlurmJobApiHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", emu.connection_json(retries=1, **extra))
    return SlurmJobApiHook(slurmapi_conn_id=conn_id)


@pytest.mark.parametrize(("release", "newest"), [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
def test_auto_picks_the_newest_version_served(emulators, monkeypatch, release, newest):
    hook = connect(monkeypatch, emulators[release], f"auto_{release.replace('.', '')}", api_version="auto")
    job_id = hook.submit_job(OK, {"current_working_directory": CWD})
    assert hook.get_conn().api_version == newest
    assert hook.wait_for_job(job_id, poll_interval=0.2, timeout=60).state.is_success
    assert f"POST /slurm/{newest}/job/submit -> 200" in [f"{c[0]} {c[1]} -> {c[2]}" for c in emulators[release].calls]


@pytest.mark.parametrize(
    ("release", "version", "served"),
    [("24.11", "v0.0.45", "v0.0.40, v0.0.41, v0.0.42"), ("26.05", "v0.0.41", "v0.0.42, v0.0.43, v0.0.44, v0.0.45")],
)
def test_a_version_the_cluster_does_not_serve_is_named_with_those_it_does(
    emulators, monkeypatch, release, version, served
):
    hook = connect(monkeypatch, emulators[release], "unserved", api_version=version)
    with pytest.raises(SlurmApiVersionError, match=f"does not serve Slurm REST API {version}; it serves {served}"):
        hook.get_job(1)

    async def read():
        settings = await hook.aget_settings()
        async with AsyncSlurmJobApiClient(settings.cluster, **settings.client_kwargs()) as client:
            await client.job_states([1])

    with pytest.raises(SlurmApiVersionError, match=f"it serves {served}. Set the connection's api_version"):
        asyncio.run(read())


def test_a_served_version_whose_path_is_not_routed_keeps_the_original_error(emulators, monkeypatch):
    from airflow_provider_slurmapi.api.errors import GoogleApiError

    hook = connect(monkeypatch, emulators["26.05"], "served", api_version="v0.0.45")
    with pytest.raises(GoogleApiError, match="INVALID_ARGUMENT"):
        hook.call_slurm("GET", "/slurm/v0.0.45/no/such/path")
    assert hook.call_slurm("GET", "/slurm/v0.0.45/ping/")[0] == 200


def test_v0042_on_26_05_says_once_that_it_goes_away(emulators, monkeypatch, caplog):
    from airflow_provider_slurmapi.api import client

    monkeypatch.setattr(client, "_NOTICED", set())  # once per connection and process
    caplog.set_level(logging.WARNING, logger="airflow_provider_slurmapi.api.client")
    old = connect(monkeypatch, emulators["24.11"], "old_default")
    old.get_conn().list_jobs()
    assert NOTICE not in caplog.text  # Slurm 24.11 does not deprecate v0.0.42
    hook = connect(monkeypatch, emulators["26.05"], "new_default")
    job_id = hook.submit_job(OK, {"current_working_directory": CWD})
    hook.wait_for_job(job_id, poll_interval=0.2, timeout=60)
    notices = [r.getMessage() for r in caplog.records if NOTICE in r.getMessage()]
    assert len(notices) == 1, notices
    assert "v0.0.42 is deprecated on this cluster's Slurm 26.05" in notices[0]
    assert "api_version to auto" in notices[0] and "v0.0.45" in notices[0]
    newest = connect(monkeypatch, emulators["26.05"], "new_newest", api_version="v0.0.45")
    newest.get_conn().list_jobs()
    assert len([r for r in caplog.records if NOTICE in r.getMessage()]) == 1
