"""Airflow links of the Slurm Job API provider."""
