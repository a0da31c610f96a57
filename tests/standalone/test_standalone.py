"""A real ``airflow standalone`` runs the example DAG against the emulator; the job page, in a real browser.

Few and slow: one standalone for the session (``conftest.standalone``), one DAG run shared by the tests.
"""

from __future__ import annotations

import os
import shutil
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.version_compat import AIRFLOW_V_3_3_PLUS
from tests.harness.standalone import ARTIFACTS, NOBODY_PASSWORD, NOBODY_USER, ROOT, Standalone
from tests.standalone.chromium import Chromium, find_chromium

pytestmark = pytest.mark.standalone

SUBMITTING_TASKS = ("prepare_data", "train", "evaluate", "publish")
SCREENSHOT = ARTIFACTS / "slurm-job-page.png"
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "slurm-job-page.png"


def run_jobs(standalone: Standalone, run: dict[str, Any]) -> dict[str, SlurmJob]:
    """The Slurm jobs of the run, by task id (found by the task instance's identity in their names)."""
    found: dict[str, SlurmJob] = {}
    for task_id in SUBMITTING_TASKS:
        mine = standalone.emulator.jobs_of(run["dag_id"], task_id, run["run_id"])
        assert len(mine) == 1, f"{task_id}: expected one job, found {[(j.job_id, j.name) for j in mine]}"
        found[task_id] = mine[0]
    return found


def test_example_dag_run_succeeds_and_its_jobs_complete(standalone: Standalone, training_run: dict[str, Any]):
    tis = training_run["task_instances"]
    assert training_run["state"] == "success", {t: ti["state"] for t, ti in tis.items()}
    assert {t: ti["state"] for t, ti in tis.items()} == {
        "prepare_data": "success",
        "train": "success",
        "evaluate": "success",
        "evaluation_done": "success",
        "check_accuracy": "success",
        "publish": "success",
    }
    jobs = run_jobs(standalone, training_run)
    for task_id, job in jobs.items():
        assert job.state.is_success, f"{task_id}: job {job.job_id} is {job.describe_state()}"
        assert job.exit_code.return_code == 0
    train = standalone.xcom(training_run["dag_id"], training_run["run_id"], "train")
    assert int(train) == jobs["train"].job_id
    summary = standalone.xcom(training_run["dag_id"], training_run["run_id"], "train", "slurm_job")
    assert summary["state"] == "COMPLETED" and summary["exit_code"] == 0
    assert jobs["train"].partition == "gpu"
    # what the training job published came through the real scheduler and triggerer
    result = standalone.xcom(training_run["dag_id"], training_run["run_id"], "train", "slurm_result")
    assert result["checkpoint"] == f"checkpoints/model-{jobs['train'].job_id}.ckpt" and result["val_acc"] > 0.9


def test_the_deferrable_gate_sensor_started_in_the_triggerer(standalone: Standalone, training_run: dict[str, Any]):
    """On 3.3+ the gate never took a worker slot to start: the triggerer rendered its job id and waited.

    A sensor started on a worker first pokes there (its log says "Slurm job N: <state>") and then defers;
    started from the triggerer, its only worker run is the last step, after the trigger's event.
    """
    if not AIRFLOW_V_3_3_PLUS:
        pytest.skip("before Airflow 3.3 a templated job_id is rendered on a worker, so the sensor starts there")
    assert training_run["state"] == "success"
    task_dir = (
        standalone.home
        / "logs"
        / f"dag_id={training_run['dag_id']}"
        / f"run_id={training_run['run_id']}"
        / "task_id=evaluation_done"
    )
    worker_logs = sorted(p for p in task_dir.glob("attempt=*.log") if ".trigger." not in p.name)
    trigger_logs = sorted(task_dir.glob("attempt=*.log.trigger.*.log"))
    assert worker_logs and trigger_logs, sorted(p.name for p in task_dir.iterdir())
    worker_text = "\n".join(p.read_text(errors="replace") for p in worker_logs)
    trigger_text = "\n".join(p.read_text(errors="replace") for p in trigger_logs)
    evaluate = run_jobs(standalone, training_run)["evaluate"]
    assert f"Slurm job {evaluate.job_id}: " in trigger_text  # the rendered id, watched in the triggerer
    assert f"Slurm job {evaluate.job_id}: " not in worker_text  # no first poke on a worker
    assert "Pausing task as DEFERRED" not in worker_text
    assert f"Slurm job {evaluate.job_id} ({evaluate.name}) ended COMPLETED" in worker_text
    # the link is stored by that last step
    links = standalone.extra_links(training_run["dag_id"], training_run["run_id"], "evaluation_done")
    assert f"/jobs/{evaluate.job_id}" in (links.get("Slurm Job") or ""), links


def test_job_page_in_a_browser(standalone: Standalone, training_run: dict[str, Any]):
    """What a logged-in user sees on the train job's page, reached through the task's Slurm Job link."""
    if standalone.major < 3:
        pytest.skip("the job pages are an Airflow 3.1+ UI feature")
    if os.environ.get("SLURMAPI_SKIP_BROWSER", "") not in ("", "0"):
        pytest.skip("SLURMAPI_SKIP_BROWSER=1: the job page was NOT checked in a browser")
    binary = find_chromium()
    assert binary, "Chromium is missing: run tests/standalone/install_chromium.sh (or SLURMAPI_SKIP_BROWSER=1)"
    dag_id, run_id = training_run["dag_id"], training_run["run_id"]
    job = run_jobs(standalone, training_run)["train"]
    links = standalone.extra_links(dag_id, run_id, "train")
    assert links["Slurm Job"] == f"/slurmapi/jobs/{job.job_id}"
    page_url = standalone.url + links["Slurm Job"]

    with Chromium(binary) as browser:
        anonymous = browser.new_page()
        anonymous.open(page_url)
        assert "401 · Not authenticated" in anonymous.text()
        assert anonymous.js("document.getElementById('login') !== null")

        page = browser.new_page()
        page.set_cookie(standalone.url + "/", "_token", standalone.token())  # what the UI's login sets
        page.open(page_url)
        text = page.text()
        assert page.js("document.getElementById('job-state').innerText") == "COMPLETED", text
        assert page.js("document.getElementById('exit-code').innerText") == "0"
        assert f"job {job.job_id}" in text and "example_slurm_training.train" in text
        assert "Partition\tgpu" in text or "Partition\ngpu" in text
        assert "airflow-ti:example_slurm_training/train/" in text
        assert "from accounting (/slurmdb)" in text  # a finished job: accounting's record
        # What the job published, shown as the task recorded it (the API server reads the task's XCom).
        assert "val_acc" in (page.js("document.getElementById('published-result')?.innerText") or ""), text
        task_href = page.js("document.getElementById('task-link').getAttribute('href')")
        assert task_href == f"/dags/example_slurm_training/runs/{quote(run_id, safe='')}/tasks/train"
        assert "refresh" not in (page.js("document.head.innerHTML") or "")  # finished: no auto-refresh
        page.screenshot(SCREENSHOT)
        if os.environ.get("SLURMAPI_UPDATE_DOCS_SCREENSHOT") == "1":  # refresh the docs picture on request
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SCREENSHOT, DOCS_SCREENSHOT)

        # The overview lists the run's jobs, newest first; the link back opens the task instance in the UI.
        page.open(f"{standalone.url}/slurmapi/jobs")
        ids = page.js("[...document.querySelectorAll('#jobs td:first-child a')].map(a => a.innerText)")
        expected = [str(j.job_id) for j in sorted(run_jobs(standalone, training_run).values(), key=lambda j: -j.job_id)]
        assert ids[: len(expected)] == expected, page.text()
        page.screenshot(ARTIFACTS / "slurm-job-list.png")

        # The navigation entry (Browse > Slurm jobs) shows the overview inside the Airflow UI.
        page.open(f"{standalone.url}/plugin/slurm-jobs")
        framed = "document.querySelector('iframe')?.contentDocument?.querySelectorAll('#jobs td:first-child a')"
        try:
            framed_ids = page.wait_js(f"[...({framed} || [])].map(a => a.innerText)", 90)
        finally:
            page.screenshot(ARTIFACTS / "slurm-jobs-in-airflow-ui.png")
        assert framed_ids[: len(expected)] == expected
        # A run id wraps in a readable column, not one character per line, in the UI's narrower frame.
        run_cell = "document.querySelector('iframe').contentDocument.querySelector('#jobs td.run')"
        lines = page.js(
            f"(c => c.getBoundingClientRect().height / parseFloat(getComputedStyle(c).fontSize))({run_cell})"
        )
        assert lines < 8, f"the run id column is {lines:.0f} characters tall: it wraps one character per line"
        page.open(standalone.url + task_href)
        page.wait_js("document.body.innerText.includes('SlurmSubmitJobOperator')", 90)
        assert page.js("location.pathname") == task_href  # the UI shows the task instance, logged in

        # And back: the task's "Slurm Job" button (Details tab) opens this page.
        page.open(standalone.url + task_href + "/details")
        button = (
            f"[...document.querySelectorAll('a')].find(a => a.getAttribute('href') === '/slurmapi/jobs/{job.job_id}')"
        )
        try:
            page.wait_js(f"({button} || {{}}).innerText === 'Slurm Job'", 90)
        finally:
            page.screenshot(ARTIFACTS / "slurm-task-instance.png")
        page.send("Page.enable")
        page.js(f"{button}.click()")
        page.wait_js("location.pathname.startsWith('/slurmapi/jobs/') && !!document.getElementById('job-state')", 30)
        assert page.js("document.getElementById('job-state').innerText") == "COMPLETED"


def test_pages_refuse_whoever_may_not_see_the_job(standalone: Standalone, training_run: dict[str, Any]):
    job = run_jobs(standalone, training_run)["train"]
    url = f"{standalone.url}/slurmapi/jobs/{job.job_id}"
    if standalone.major < 3:
        # Airflow 2.x serves no page; the link falls back to job_link_template, and there is none here.
        assert requests.get(url, timeout=10).status_code == 404
        links = standalone.extra_links(training_run["dag_id"], training_run["run_id"], "train")
        assert not links.get("Slurm Job")
        return
    unauthenticated = requests.get(url, timeout=10)
    assert unauthenticated.status_code == 401 and unauthenticated.json() == {"detail": "Not authenticated"}
    forged = requests.get(url, headers={"Authorization": "Bearer not-a-jwt"}, timeout=10)
    assert forged.status_code == 403
    nobody = standalone.session(NOBODY_USER, NOBODY_PASSWORD)
    refused = nobody.get(url, timeout=10)
    assert refused.status_code == 403 and refused.json() == {"detail": "Forbidden"}
    assert nobody.get(f"{standalone.url}/slurmapi/jobs", timeout=30).status_code == 403  # may read no DAG
    admin = standalone.session()
    assert admin.get(url, timeout=30).status_code == 200
    assert admin.post(url, timeout=10).status_code == 405  # nothing can change a job
    assert admin.delete(url, timeout=10).status_code == 405
    plugins = admin.get(f"{standalone.api}/plugins", timeout=10).json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "slurmapi")
    assert [v["href"] for v in ours["external_views"]] == ["/slurmapi/jobs"]
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/slurmapi"]
