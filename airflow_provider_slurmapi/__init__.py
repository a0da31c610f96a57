"""Apache Airflow provider for the Slurm Job API of Google Cloud training clusters."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
