"""Airflow triggers of the Slurm Job API provider."""
