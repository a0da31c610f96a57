"""Airflow operators of the Slurm Job API provider."""
