"""Cloud Storage for jobs: the emulator's metadata server stand-in and fake-gcs-server (tests/harness/storage.py).

A job on a node of a Google Cloud cluster gets its token from the node's metadata server and writes to Cloud
Storage; here the token comes from the emulator's stand-in and the storage is fake-gcs-server, each over
loopback, from real processes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

import google.auth.transport.requests
import pytest
import requests
from google.auth import compute_engine
from google.auth.compute_engine import _metadata
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator
from airflow_provider_slurmapi.emulator.metadata import fingerprint
from tests.harness.emulator import CWD, Api, call_url
from tests.harness.storage import STAGING_BUCKET, FakeGcs

TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
FLAVOR = {"Metadata-Flavor": "Google"}
# A token from the metadata server, then an upload with it through Cloud Storage's JSON API (media upload).
CURL_UPLOAD = (
    "token=$(curl -sSf -H 'Metadata-Flavor: Google' "
    f'"http://$GCE_METADATA_HOST{TOKEN_PATH}"'
    """ | sed -E 's/.*"access_token": *"([^"]+)".*/\\1/')\n"""
    'curl -sSf -o /dev/null -X POST -H "Authorization: Bearer $token" -H "Content-Type: application/octet-stream" '
    '--data-binary "@$1" "$STORAGE_EMULATOR_HOST/upload/storage/v1/b/$2/o?uploadType=media&name=$3"\n'
)
URLLIB_UPLOAD = f"""
import json, os, sys, urllib.parse, urllib.request
asked = urllib.request.Request("http://" + os.environ["GCE_METADATA_HOST"] + "{TOKEN_PATH}", headers={FLAVOR!r})
token = json.load(urllib.request.urlopen(asked, timeout=30))["access_token"]
bucket, name = sys.argv[1:3]
url = os.environ["STORAGE_EMULATOR_HOST"] + "/upload/storage/v1/b/" + bucket + "/o?uploadType=media&name="
headers = {{"Authorization": "Bearer " + token, "Content-Type": "application/octet-stream"}}
upload = urllib.request.Request(url + urllib.parse.quote(name, safe=""), sys.stdin.buffer.read(), headers)
urllib.request.urlopen(upload, timeout=30)
"""


@pytest.fixture
def emu_with_storage(request: pytest.FixtureRequest, fake_gcs: FakeGcs) -> SlurmJobApiEmulator:
    """The plugin's ``slurmapi_emulator`` with ``storage_emulator_host`` the test's fake-gcs-server: the marker
    is made here, as the server's port is known only once it runs."""
    marker = pytest.mark.slurmapi_emulator(storage_emulator_host=fake_gcs.url)
    request.node.add_marker(marker, append=False)
    emulator: SlurmJobApiEmulator = request.getfixturevalue("slurmapi_emulator")
    return emulator


def read_back(url: str, project: str, name: str) -> bytes:
    """The object as google-cloud-storage reads it from the storage at ``url``."""
    client = storage.Client(project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": url})
    data: bytes = client.bucket(STAGING_BUCKET).blob(name).download_as_bytes()
    return data


@pytest.mark.parametrize(
    "program",
    [["bash", "-c", CURL_UPLOAD, "upload", "/dev/stdin"], [sys.executable, "-c", URLLIB_UPLOAD]],
    ids=["curl", "python-urllib"],
)
def test_a_process_with_the_node_environment_uploads_with_a_metadata_token(
    emu_with_storage: SlurmJobApiEmulator, fake_gcs: FakeGcs, program: list[str]
) -> None:
    emu = emu_with_storage
    assert emu.storage_emulator_host == fake_gcs.url
    data = os.urandom(3000) + b"\n\x00end\n"
    name = "runs/7/result.bin"
    env = {"GCE_METADATA_HOST": emu.metadata_host, "STORAGE_EMULATOR_HOST": fake_gcs.url}
    done = subprocess.run(
        [*program, STAGING_BUCKET, name], input=data, env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert emu.metadata_requests == 1
    assert fake_gcs.objects(STAGING_BUCKET) == {name: len(data)}
    assert read_back(fake_gcs.url, emu.project, name) == data


def test_a_job_uploads_its_file_with_the_nodes_token(emu_with_storage: SlurmJobApiEmulator, fake_gcs: FakeGcs) -> None:
    script = (
        "#!/bin/bash\nset -euo pipefail\n"
        "head -c 5000 /dev/urandom > payload.bin\n"
        f"upload() {{\n{CURL_UPLOAD}}}\n"
        f'upload payload.bin {STAGING_BUCKET} "jobs/$SLURM_JOB_ID/payload.bin"\n'
    )
    api = Api(emu_with_storage)
    try:
        job_id = api.submit(script, name="stage")
    finally:
        api.close()
    job = emu_with_storage.wait_for_state(job_id, ["COMPLETED", "FAILED"], 30)
    assert job["state"] == ["COMPLETED"], emu_with_storage.read_output(job_id)
    name = f"jobs/{job_id}/payload.bin"
    assert fake_gcs.objects(STAGING_BUCKET, "jobs/") == {name: 5000}
    written = emu_with_storage.host_path(f"{CWD}/payload.bin").read_bytes()
    assert fake_gcs.read(STAGING_BUCKET, name) == written
    assert read_back(fake_gcs.url, emu_with_storage.project, name) == written


@pytest.mark.slurmapi_emulator(log_calls=True)
def test_the_metadata_server_answers_only_with_its_header(
    emu: SlurmJobApiEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="airflow_provider_slurmapi.emulator")
    root = f"http://{emu.metadata_host}"
    refused = requests.get(root + TOKEN_PATH, timeout=10)
    assert refused.status_code == 403 and refused.headers["Metadata-Flavor"] == "Google"
    assert "Metadata-Flavor" in refused.text
    for path in ("/", "/computeMetadata/v1/"):
        reply = requests.get(root + path, headers=FLAVOR, timeout=10)
        assert (reply.status_code, reply.headers["Metadata-Flavor"]) == (200, "Google"), path
    answers = {
        path: requests.get(root + "/computeMetadata/v1/" + path, headers=FLAVOR, timeout=10)
        for path in ("instance/service-accounts/default/email", "project/project-id", "instance/nothing-here")
    }
    assert answers["instance/service-accounts/default/email"].text == emu.node_service_account
    assert answers["project/project-id"].text == emu.project
    assert answers["instance/nothing-here"].status_code == 404
    reply = requests.get(root + TOKEN_PATH, headers=FLAVOR, timeout=10)
    assert reply.headers["Metadata-Flavor"] == "Google"
    token: dict[str, Any] = reply.json()
    assert set(token) == {"access_token", "expires_in", "token_type"}
    assert (token["expires_in"], token["token_type"]) == (3599, "Bearer")
    assert emu.metadata_requests == 7
    log = "\n".join(record.getMessage() for record in caplog.records)
    assert f"metadata GET {TOKEN_PATH} -> 403" in log
    assert f"metadata GET {TOKEN_PATH} -> 200 (token {fingerprint(token['access_token'])})" in log
    assert token["access_token"] not in log


def test_google_auth_compute_engine_credentials_get_the_nodes_token(
    emu: SlurmJobApiEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", emu.metadata_host)
    # google-auth reads GCE_METADATA_HOST once, when it is first imported: before this test set it.
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", emu.metadata_host)
    creds = compute_engine.Credentials()
    creds.refresh(google.auth.transport.requests.Request())
    assert creds.token and creds.service_account_email == emu.node_service_account
    # A real token of the emulator's, for an account that may not run Slurm calls on this cluster.
    denied = requests.post(
        call_url(emu),
        json={"method": "HTTP_METHOD_GET", "path": "/slurm/v0.0.42/ping/"},
        headers={"Authorization": f"Bearer {creds.token}"},
        timeout=10,
    )
    assert denied.status_code == 403 and denied.json()["error"]["status"] == "PERMISSION_DENIED"


def test_a_jobs_google_auth_default_finds_the_metadata_server(api: Api, emu: SlurmJobApiEmulator) -> None:
    """``google.auth.default()`` in a job detects a Compute Engine node (it pings ``GCE_METADATA_IP``) and
    gets the node's credentials and project, as on a real node."""
    program = (
        "import google.auth, google.auth.transport.requests, json\n"
        "creds, project = google.auth.default()\n"
        "creds.refresh(google.auth.transport.requests.Request())\n"
        "print(json.dumps([type(creds).__module__, creds.service_account_email, project, bool(creds.token)]))\n"
    )
    job_id = api.submit(f"#!/bin/bash\nexec {sys.executable} -c '{program}'\n")
    job = emu.wait_for_state(job_id, ["COMPLETED", "FAILED"], 60)
    output = emu.read_output(job_id)
    assert job["state"] == ["COMPLETED"], output
    found = json.loads(output.splitlines()[-1])
    assert found == ["google.auth.compute_engine.credentials", emu.node_service_account, emu.project, True]


def test_fail_next_answers_the_next_uploads_with_an_error(fake_gcs: FakeGcs) -> None:
    url = f"{fake_gcs.url}/upload/storage/v1/b/{STAGING_BUCKET}/o"
    fake_gcs.fail_next(1)
    first = requests.post(url, params={"uploadType": "media", "name": "out"}, data=b"first", timeout=10)
    assert first.status_code == 503 and first.json()["error"]["code"] == 503
    assert fake_gcs.objects(STAGING_BUCKET) == {}
    second = requests.post(url, params={"uploadType": "media", "name": "out"}, data=b"second", timeout=10)
    assert second.status_code == 200, second.text
    assert fake_gcs.read(STAGING_BUCKET, "out") == b"second"
    fake_gcs.fail_next(2, status=429)
    statuses = [requests.get(f"{fake_gcs.url}/storage/v1/b/{STAGING_BUCKET}/o", timeout=10).status_code for _ in "abc"]
    assert statuses == [429, 429, 200]


def _path_without(tmp_path, *left_out: str) -> str:
    """A PATH of the system's programs less ``left_out`` (a node without curl, or without base64)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for where in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(where) if os.path.isdir(where) else ():
            if name not in left_out and not (folder / name).exists():
                (folder / name).symlink_to(os.path.join(where, name))
    return str(folder)


@pytest.mark.parametrize("left_out", [(), ("curl", "base64")], ids=["curl-base64", "python3-only"])
def test_the_wrapper_announces_a_small_chunk_with_its_bytes(
    emu_with_storage: SlurmJobApiEmulator, fake_gcs: FakeGcs, tmp_path, left_out: tuple[str, ...]
) -> None:
    """The job's wrapper (curl and base64, or python3 alone) stores each chunk, then announces it; a chunk of
    at most INLINE_LIMIT bytes travels in its announcement's custom metadata, which Airflow's listing reads
    back as the chunk's bytes; a larger one is announced by name only."""
    from airflow_provider_slurmapi.api import results
    from airflow_provider_slurmapi.api.staging import INLINE_LIMIT, StagingLocation, parse_announcement, parse_inline

    root = StagingLocation(STAGING_BUCKET, f"wrapper-{'-'.join(left_out) or 'all'}")
    location = root.for_task("d", "t", "r", -1, 1)
    small = "epoch 1: loss 0.25 \u00e9\n"
    script = f"#!/bin/sh\nprintf '%s' '{small}'\nhead -c {INLINE_LIMIT + 1} /dev/zero | tr '\\0' 'e' >&2\n"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(results.wrap_script(script, "tag", staging=location, output_interval=1, staging_root=root))
    env = {
        "PATH": _path_without(tmp_path, *left_out),
        "SLURM_JOB_ID": "31",
        "TMPDIR": str(tmp_path),
        "GCE_METADATA_HOST": emu_with_storage.metadata_host,
        "STORAGE_EMULATOR_HOST": fake_gcs.url,
    }
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        subprocess.run(["/bin/sh", str(wrapper)], stdout=out, stderr=err, env=env, timeout=120, check=False)
    run = location.for_job("31")
    carried = {
        parsed[1]: parse_inline(metadata)
        for name, metadata in fake_gcs.metadata(STAGING_BUCKET, root.object_name(".changes/")).items()
        if (parsed := parse_announcement(root, name)) is not None
    }
    stdout, stderr = run.object_name("stdout/000000000000"), run.object_name("stderr/000000000000")
    assert carried == {stdout: small.encode(), stderr: None}, (tmp_path / "err").read_bytes()[-500:]
    assert fake_gcs.read(STAGING_BUCKET, stdout) == small.encode()
    assert fake_gcs.read(STAGING_BUCKET, stderr) == b"e" * (INLINE_LIMIT + 1)
