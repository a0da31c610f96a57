"""Airflow hooks of the Slurm Job API provider."""
