"""The README shows code that runs: its DAG is example_slurm_hello as it is, its quickstart the two commands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_the_readme_dag_is_the_tested_example_as_it_is() -> None:
    example = (ROOT / "example_dags" / "example_slurm_hello.py").read_text(encoding="utf-8")
    (dag,) = blocks("python")
    assert example.endswith(dag)
    assert dag.startswith("from datetime import datetime")


def test_the_quickstart_is_make_demo_and_make_test() -> None:
    commands = [
        [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
        for block in blocks("bash")
        if "make" in block
    ]
    assert commands == [["make demo", "make test"]]
