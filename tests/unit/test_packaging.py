"""The package declares every library it imports (pyproject.toml), so no install depends on luck."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_provider_slurmapi"

# The extras a user installs for a feature of the provider (the others serve the emulator, the tests, the docs,
# and Airflow's own API server for the job pages): the docs' requirements table lists their libraries too.
FEATURE_EXTRAS = ("staging", "openlineage")

# Imported, yet rightly not declared: each is there whenever the code importing it runs.
PROVIDED = {
    "pytest": "only the emulator's pytest plugin imports it, and only pytest loads that plugin",
    "flask_appbuilder": "the connection form of Airflow 2.x's UI, which Airflow 2.x brings",
    "flask_babel": "the connection form of Airflow 2.x's UI, which Airflow 2.x brings",
    "wtforms": "the connection form of Airflow 2.x's UI, which Airflow 2.x brings",
    "attrs": "OpenLineage's facets are attrs classes: lineage/facets.py runs only with the openlineage extra, "
    "whose provider (as Airflow itself) depends on attrs",
}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> set[str]:
    """Top-level names of the absolute imports anywhere in the package, lazy ones included."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", "airflow_provider_slurmapi"}


def declared_distributions() -> set[str]:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra, items in project.get("optional-dependencies", {}).items():
        if extra != "dev":
            requirements.extend(items)
    return {_normal(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def test_every_imported_library_is_declared():
    distributions = importlib.metadata.packages_distributions()
    declared = declared_distributions()
    missing = []
    for module in sorted(imported_modules() - set(PROVIDED)):
        # Not installed here (fastapi on Airflow 2): the module's own name is its distribution's.
        owners = {_normal(d) for d in distributions.get(module, [module])}
        if not owners & declared:
            missing.append(f"{module} (from {sorted(owners)})")
    assert missing == [], f"imported but not declared in pyproject.toml: {missing}"


def test_the_exceptions_are_still_imported():
    assert set(PROVIDED) <= imported_modules()


def test_the_docs_list_every_runtime_dependency_with_its_version():
    """docs/index.rst's requirements table is the package's own list (it once named 4 of 9), with the
    feature extras' libraries."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for e in FEATURE_EXTRAS for r in project["optional-dependencies"][e])]
    declared = {
        _normal(name): version
        for name, version in (
            re.match(r"([A-Za-z0-9_.-]+)\s*([^;#]*)", r).groups()  # type: ignore[union-attr]
            for r in requirements
        )
    }
    table = re.findall(r"^``([A-Za-z0-9_.-]+)``\s+``([^`]+)``", (ROOT / "docs/index.rst").read_text(), re.M)
    assert {_normal(name): version for name, version in table} == {k: v.strip() for k, v in declared.items()}
