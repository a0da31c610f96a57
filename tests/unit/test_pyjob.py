"""``@task.slurm``'s script (decorators/pyjob.py): refused functions name the fix when the DAG is parsed;
the script it writes really runs under ``/bin/sh`` and the local ``python3``, as a job runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.decorators import pyjob

THRESHOLD = 0.9


def self_contained(rows: list[dict], scale: float = 1.0) -> dict:
    import os
    import statistics

    return {"mean": statistics.mean(r["x"] for r in rows) * scale, "job": os.environ.get("SLURM_JOB_ID")}


def raises(steps: int) -> float:
    raise FloatingPointError(f"loss is NaN at step {steps}")


def returns_a_set() -> object:
    return {1, 2}


def reads_a_module_constant() -> bool:
    return THRESHOLD > 0.5


def uses_json_without_importing_it() -> str:
    return json.dumps({})


def defaults_to_a_module_constant(x: float = THRESHOLD, *, y: int = len("ab")) -> float:
    return x * y


def _slurmapi_main() -> None:  # the job script's own entry point's name
    return None


def recursive(n: int) -> int:
    return 1 if n <= 1 else n * recursive(n - 1)


def run(script: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = tmp_path / "job.sh"
    path.write_text(script)
    result = tmp_path / "result.json"
    env = {**os.environ, "SLURMAPI_RETURN_FILE": str(result), "SLURM_JOB_ID": "42"}
    done = subprocess.run(["/bin/sh", str(path)], env=env, capture_output=True, text=True, timeout=60)
    return done, result


def test_the_script_runs_the_function_with_its_json_arguments_and_writes_its_return_value(tmp_path):
    source = pyjob.function_source(self_contained)
    assert source.startswith("def self_contained(") and "@" not in source.splitlines()[0]
    call = pyjob.call_json([[{"x": 1}, {"x": 3}]], {"scale": 2.0})
    script = pyjob.job_script(source, "self_contained", call, sys.executable)
    assert script.startswith(f"#!/bin/sh\nexec {sys.executable} - <<'SLURMAPI_PY_")
    done, result = run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(result.read_text()) == {"mean": 4.0, "job": "42"}


def test_an_exception_exits_1_with_its_traceback_on_stderr_and_no_result(tmp_path):
    script = pyjob.job_script(pyjob.function_source(raises), "raises", pyjob.call_json([7], {}), sys.executable)
    done, result = run(script, tmp_path)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "FloatingPointError: loss is NaN at step 7" in done.stderr
    assert not result.exists()


def test_a_return_value_that_is_not_json_fails_the_job_saying_so(tmp_path):
    script = pyjob.job_script(pyjob.function_source(returns_a_set), "returns_a_set", pyjob.call_json([], {}))
    done, result = run(script, tmp_path)
    assert done.returncode == 2 and not result.exists()
    assert "the return value of returns_a_set() is not JSON" in done.stderr


def test_a_recursive_function_may_call_itself(tmp_path):
    script = pyjob.job_script(pyjob.function_source(recursive), "recursive", pyjob.call_json([5], {}))
    done, result = run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(result.read_text()) == 120


def test_the_functions_it_refuses_name_the_reason_and_the_fix():
    factor = 3

    def closure(x: int) -> int:
        return x * factor

    async def coroutine() -> None:
        return None

    cases: list[tuple[Any, str]] = [
        (lambda: 1, "is a lambda"),
        (closure, "uses factor from the function around it"),
        (coroutine, "is an async or generator function"),
        (reads_a_module_constant, "reads THRESHOLD from its module"),
        (uses_json_without_importing_it, "reads json from its module"),
        (len, "is not a function"),
        (defaults_to_a_module_constant, r"the defaults of defaults_to_a_module_constant\(\) read THRESHOLD from"),
        (_slurmapi_main, "is named _slurmapi_main, the name of the job's own entry point"),
    ]
    for function, problem in cases:
        with pytest.raises(SlurmJobSpecError, match=problem) as raised:
            pyjob.function_source(function)
        assert raised.value.field == "python_callable" and raised.value.fix


def test_an_argument_that_is_not_json_is_named():
    with pytest.raises(SlurmJobSpecError, match="argument 'model': object") as raised:
        pyjob.call_json([1], {"model": object()})
    assert "Pass JSON values" in str(raised.value)
    with pytest.raises(SlurmJobSpecError, match="argument 2: set"):
        pyjob.call_json([1, {2}], {})


@pytest.mark.parametrize("command", ["", "  ", "python3\nrm -rf /", None, 3])
def test_python_command_must_be_one_command_line(command):
    with pytest.raises(SlurmJobSpecError, match="python_command"):
        pyjob.python_command(command)


def test_python_command_may_be_a_venv_path():
    assert pyjob.python_command(" /opt/venvs/train/bin/python ") == "/opt/venvs/train/bin/python"


@pytest.mark.parametrize("value", [{1: "a"}, [{"ok": {2.5: 1}}]], ids=["int key", "float key, nested"])
def test_a_dict_key_that_is_not_a_string_is_refused_not_rewritten(value):
    """JSON would hand the function {"1": "a"} for {1: "a"}: another dict than it was given."""
    with pytest.raises(SlurmJobSpecError, match=r"has the dict key .* which JSON would turn into the string"):
        pyjob.call_json([value], {})


def test_a_nan_argument_is_refused():
    with pytest.raises(SlurmJobSpecError, match="argument 'lr'"):
        pyjob.call_json([], {"lr": float("nan")})


def test_literal_arguments_are_checked_when_the_dag_is_parsed_and_the_others_when_the_task_runs():
    """A literal that is not JSON is known to be wrong when the DAG file is parsed; an XCom or a template
    is only known when the task runs."""
    from airflow.providers.common.compat.sdk import DAG, task

    with DAG(dag_id="pyjob_parse_time", schedule=None):

        @task
        def make() -> int:
            return 1

        @task.slurm(current_working_directory="/tmp")
        def train(x: Any, y: Any = None) -> int:
            return 1

        train(make(), y="{{ run_id }}")  # known at run time only: accepted now
        with pytest.raises(SlurmJobSpecError, match="argument 1: object"):
            train(object())
        with pytest.raises(SlurmJobSpecError, match="argument 'y'"):
            train(1, y={3: "x"})
