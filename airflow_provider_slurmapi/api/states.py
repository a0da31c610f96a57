"""Slurm's job-state names and the wait's defaults: cheap to import, nothing else loaded.

A DAG file builds sensors and operators whose constructors check states and take these defaults, so
they live here, away from the job model (``api.jobs`` and ``api.watch`` still import them from here,
so their old import paths keep working) and the clients.
"""

from __future__ import annotations

BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
TERMINAL_STATES = frozenset(BASE_STATES - {"PENDING", "RUNNING", "SUSPENDED"})
# While any of these flags is set the job is still moving, whatever its base state says.
UNSETTLED_FLAGS = frozenset({"COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "STAGE_OUT"})
# Failures of the machine rather than of the job: another try may well succeed.
RETRYABLE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})

# Consecutive failed polls (each already retried by the client) a wait tolerates.
DEFAULT_ERROR_BUDGET = 10
# Seconds a job id a sensor watches may be in neither the queue nor accounting before the sensor fails
# saying the id is unknown: room for a job submitted elsewhere a moment ago, not yet recorded.
UNKNOWN_JOB_GRACE = 120.0
