"""The emulator's page per job: what the demo's job link opens."""

from __future__ import annotations

import requests

from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator

CWD = "/home/tester"


def test_job_page_shows_state_exit_code_and_output(slurmapi_emulator: SlurmJobApiEmulator) -> None:
    from airflow_provider_slurmapi.api.spec import JobSpec
    from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook

    job_id = (
        SlurmJobApiHook()
        .submit(
            JobSpec.build(
                "#!/bin/bash\necho '<b>hello</b>'\nexit 2\n", {"current_working_directory": CWD, "name": "pg"}
            )
        )
        .job_id
    )
    slurmapi_emulator.wait_for_state(job_id, "FAILED", 30)
    url = slurmapi_emulator.job_link_template.format(job_id=job_id)
    page = requests.get(url, timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert f"Slurm job {job_id} (pg)" in page.text
    assert "<td>FAILED (NonZeroExitCode)</td>" in page.text
    assert "<td>2</td>" in page.text
    assert "&lt;b&gt;hello&lt;/b&gt;" in page.text  # output is escaped
    assert 'http-equiv="refresh"' not in page.text  # finished: no refresh
    assert requests.get(f"{slurmapi_emulator.endpoint}/jobs/999999", timeout=10).status_code == 404
