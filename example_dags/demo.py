"""The quickstart demo: runs example_slurm_training end to end against the built-in emulator.

``make demo`` runs this. It starts a local Slurm Job API emulator (real HTTP, real service-account
token flow, job scripts really run as local processes), points the ``slurmapi_default`` connection at
it, and runs the DAG with ``dag.test()``, the training task deferring to its trigger.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("SLURMAPI_DEMO_HOME", HERE.parent / ".airflow-demo"))
os.environ.setdefault("AIRFLOW_HOME", str(HOME))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(HERE))


def migrate() -> None:
    marker = Path(os.environ["AIRFLOW_HOME"]) / ".migrated"
    if not marker.exists():
        print("Preparing Airflow's database (first run only)...", flush=True)
        airflow = Path(sys.executable).parent / "airflow"
        subprocess.run([str(airflow), "db", "migrate"], check=True, stdout=subprocess.DEVNULL)
        marker.touch()


def main() -> int:
    migrate()
    from airflow_provider_slurmapi.emulator import SlurmJobApiEmulator

    with SlurmJobApiEmulator(partitions={"debug": 4, "gpu": 2}) as emu:
        # The task's "Slurm Job" link opens the emulator's own page of the job.
        os.environ.update(emu.airflow_env(job_link_template=emu.job_link_template))
        print(f"Slurm Job API emulator at {emu.endpoint} (cluster {emu.cluster})", flush=True)
        sys.path.insert(0, str(HERE))
        from example_slurm_training import dag

        dag_run = dag.test()
        print("\n=== Slurm jobs the DAG ran ===")
        for job in emu.jobs():
            print(f"  job {job['job_id']:>3}  {job['name']:<40} {'+'.join(job['state']):<12} exit {job['exit_code']}")
        train = [j for j in emu.jobs() if ".train~af" in j["name"]]
        if train:
            print(f"\n=== output of the training job ({train[0]['standard_output']}) ===")
            print(emu.read_output(train[0]["job_id"]))
        publish = [j for j in emu.jobs() if ".publish~af" in j["name"]]
        if publish:
            print(f"=== publish: {emu.read_output(publish[0]['job_id']).strip()} ===")
        train_ti = dag_run.get_task_instance("train")
        result = train_ti.xcom_pull(task_ids="train", key="slurm_result")
        print(f"=== the training job's result (XCom slurm_result, from $SLURMAPI_RETURN_FILE): {result} ===")
        link = train_ti.xcom_pull(task_ids="train", key="slurm_job_link")
        print(f"The train task's Slurm Job link: {link['url'] if link else '(none)'}")
        state = str(getattr(dag_run, "state", "unknown"))
        print(f"DAG run finished: {state}")
        return 0 if state.endswith("success") else 1


if __name__ == "__main__":
    sys.exit(main())
