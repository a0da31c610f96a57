"""Sphinx configuration of the user documentation (``make docs`` builds it into docs/_build/html)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# autodoc imports the provider, which imports Airflow: give it a throwaway home, never the user's.
os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "docs" / "_build" / "airflow-home"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from airflow_provider_slurmapi import __version__  # noqa: E402

project = "airflow-provider-slurmapi"
author = "airflow-provider-slurmapi developers"
copyright = "airflow-provider-slurmapi developers, Apache License 2.0"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build"]
nitpicky = False

autodoc_default_options = {"show-inheritance": True}  # members: as docs/api.rst lists them (the public surface)
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"

html_theme = "furo"
html_title = f"Slurm Job API provider {release}"
html_static_path: list[str] = []
