"""Airflow sensors of the Slurm Job API provider."""
