"""Tests and benchmarks share their harnesses through ``tests.harness`` without a cycle.

Benchmarks import the harness (``tests.harness.X``); tests never import a benchmark; neither reaches a
module by editing ``sys.path``: each is imported as what it is, from the repository root.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _edits_sys_path(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("insert", "append", "extend"):
            target = node.value
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "path"
                and isinstance(target.value, ast.Name)
                and target.value.id == "sys"
            ):
                return True
    return False


def test_no_test_imports_a_benchmark():
    importers = {
        str(path.relative_to(ROOT)): sorted(name for name in _imports(path) if name.split(".")[0] == "benchmarks")
        for path in _modules("tests")
    }
    assert {path: names for path, names in importers.items() if names} == {}


def test_the_harness_imports_no_test_module_but_its_own():
    """The harness is the bottom layer of the test code: a test suite's modules import it, not the reverse."""
    outside = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imports(path) if name.startswith("tests.") and not name.startswith("tests.harness")
        )
        for path in _modules("tests/harness")
    }
    assert {path: names for path, names in outside.items() if names} == {}


def test_no_test_or_benchmark_edits_sys_path():
    edits = [str(path.relative_to(ROOT)) for folder in ("tests", "benchmarks") for path in _modules(folder)]
    assert [path for path in edits if _edits_sys_path(ROOT / path)] == []


def test_the_benchmarks_reach_the_harness_as_a_package():
    users = sorted(
        str(path.relative_to(ROOT))
        for path in _modules("benchmarks")
        if any(name.startswith("tests.harness") for name in _imports(path))
    )
    assert "benchmarks/chaos.py" in users and "benchmarks/deployment.py" in users
