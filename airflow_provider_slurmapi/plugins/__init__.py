"""The provider's Airflow plugin: Slurm job pages inside the Airflow web server (Airflow 3.1+)."""
