"""TaskFlow decorators: ``@task.slurm_script`` (registered through the provider info's ``task-decorators``)."""
