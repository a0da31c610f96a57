"""The warning before the time limit and the requeue policy, through real Airflow (``dag.test()``): emulator
and real Slurm, the same test code (``backends.py``).

What real Slurm 24.11.5 and 26.05.5 did (measured with sbatch and the REST API, without the provider's wrapper,
then pinned here through it):

- ``kill_warning_flags`` say where ``kill_warning_signal`` goes: ``BATCH_JOB`` (sbatch's ``--signal=B:``) to
  the batch script's process alone, not what it started nor the ``srun`` steps; ``FULL_JOB`` to every process
  of the batch script's process group and to every step; neither, to the steps only (the batch script gets
  nothing). The provider sends ``BATCH_JOB``, and its wrapper (the batch script) passes the signal on to the
  user's script (api/results.py).
- The warning comes once, on slurmctld's time-limit sweep (every 30 s): when ``kill_warning_delay`` seconds
  or fewer, plus up to one sweep, are left (a 2-minute limit and 70 s: 88 and 92 s before the end on 24.11;
  here, 50 s: 54 and 72 s before it on 24.11, 77 s on 26.05; sbatch's manual allows up to 60 s early). The
  test allows ``delay - 15`` to ``delay + 65`` s.
- ``scontrol requeue`` of a job submitted with ``requeue: false`` is refused, "Requested operation is presently
  disabled for job N", for its user and for root alike; the job runs on, ``requeue`` false in its record.

Cost on real Slurm: one 2-minute time limit (and the ~30 s slurmctld takes to act on it) per run: the three jobs
run at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from backends import BACKENDS, Backend, emulator_backend, real_backend

from tests.fixtures import dag_file

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(900)]
DAGS = dag_file("slurm_signal_dags").DAGS
TIME_LIMIT = 2  # minutes
DELAY = 50  # seconds before the time limit
# Slurm sends the warning on a sweep: up to a sweep (30 s; its manual says 60 s) early; a late sweep, a bit late.
EARLY, LATE = 65, 15


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """conftest's backends, with the emulator's minute 6 s long: its warning 5 s before a 12 s limit, timed
    in tenths of a second rather than in the whole seconds of a 1-second minute."""
    if request.param == "real":
        made, emu = real_backend(request.getfixturevalue("real_slurm"), tmp_path_factory)
    else:
        made, emu = emulator_backend(tmp_path_factory, minute_seconds=6.0)
    try:
        yield made
    finally:
        emu.stop()


def test_the_script_is_warned_before_its_time_limit_and_a_job_that_may_not_be_requeued_is_not(
    backend, monkeypatch, capfd
):
    hook = backend.connect(monkeypatch)
    capfd.readouterr()
    dag_run = DAGS["warning"].test(run_conf={"cwd": backend.cwd, "time_limit": TIME_LIMIT, "delay": DELAY})
    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    log = "".join(capfd.readouterr())

    # train: its script trapped USR1, once, about DELAY s before the end Slurm gave it, and ran on to the limit
    ti = tis["train"]
    assert str(ti.state).rsplit(".", 1)[-1].lower() == "failed" and "TIMEOUT" in log, log[-3000:]
    output = backend.host_path(ti.xcom_pull(task_ids="train", key="slurm_job")["standard_output"]).read_text()
    warned = re.findall(r"warned at ([0-9.]+) end ([0-9]+)", output)
    assert len(warned) == 1, output
    before_end = (int(warned[0][1]) - float(warned[0][0])) / backend.slurm_second  # in Slurm's seconds
    print(f"{backend.name}: warned {before_end:.1f} s before the end (asked {DELAY})")
    assert DELAY - LATE <= before_end <= DELAY + EARLY, output

    # whole_job (FULL_JOB): the script and the child it started each got it once, from Slurm, and it ended
    whole_id = tis["whole_job"].xcom_pull(task_ids="whole_job")
    job = backend.wait_for_end(hook, whole_id, timeout=60)
    assert job.state.base == "COMPLETED", job
    output = backend.host_path(job.standard_output).read_text()
    assert output.count("script warned") == 1 and output.count("child warned") == 1, output
    assert "both warned" in output

    # may_not_requeue (requeue=False): Slurm refuses to requeue it, and it runs on
    held_id = tis["may_not_requeue"].xcom_pull(task_ids="may_not_requeue")
    assert backend.disruptions is not None
    try:
        # the emulator's requeue raises ValueError; real Slurm's scontrol fails the test with what it said
        with pytest.raises((ValueError, pytest.fail.Exception), match="Requested operation is presently disabled"):
            backend.disruptions.requeue(held_id)
        job = hook.get_job(held_id)
        assert job.state.base == "RUNNING" and job.restart_count == 0 and job.raw["requeue"] is False, job
    finally:
        hook.cancel_job(held_id)
