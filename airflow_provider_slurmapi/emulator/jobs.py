"""The emulator's job record and the parsed submit request it is made from."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from .notation import Dependency

TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE"}
)

_DIRECTIVE = re.compile(r"^#EMULATOR\s+(.*)$", re.MULTILINE)


@dataclass
class JobRequest:
    """What a submit asked for, after slurmrestd-like parsing and defaulting."""

    script: str
    environment: list[str]
    name: str = ""
    partition: str = ""
    node_count: int = 1
    cpus_per_task: int = 1
    tasks_per_node: int = 0
    tasks: int = 1
    current_working_directory: str = "/tmp"
    standard_output: str = ""
    standard_error: str = ""
    standard_input: str = ""
    time_limit: int | None = None
    comment: str = ""
    extra: str = ""
    dependency: str = ""
    dependencies: list[Dependency] = field(default_factory=list)
    hold: bool = False
    array: str = ""
    tres_per_node: str = ""
    memory_per_node: int | None = None
    account: str = ""
    # May Slurm requeue it (``requeue``; slurm.conf's JobRequeue=1 is the default)?
    requeue: bool = True
    # The warning before the time limit (``kill_warning_signal``/``_delay``/``_flags``): a signal number or None.
    warn_signal: int | None = None
    warn_delay: int = 60
    warn_flags: tuple[str, ...] = ()
    # ``account_gather_frequency``'s task sampling interval (``"task=N"`` or ``"N"``, seconds); None: the
    # cluster's (slurm.conf's JobAcctGatherFrequency).
    gather_seconds: int | None = None

    def directives(self) -> dict[str, str]:
        """``key=value`` pairs of the script's ``#EMULATOR`` lines (used by simulated runs)."""
        values: dict[str, str] = {}
        for line in _DIRECTIVE.findall(self.script):
            for item in line.split():
                key, _, value = item.partition("=")
                values[key] = value
        return values


@dataclass(eq=False)
class Job:
    """One job (or one array task) as slurmctld and slurmdbd know it."""

    job_id: int
    request: JobRequest
    user: str
    submit_time: int
    recorded_at: float
    array_job_id: int = 0
    array_task_id: int | None = None
    array_max_tasks: int = 0
    state: list[str] = field(default_factory=lambda: ["PENDING"])
    reason: str = "None"
    held: bool = False
    eligible_time: int = 0
    start_time: int = 0
    end_time: int = 0
    nodes: list[str] = field(default_factory=list)
    return_code: int | None = 0
    signal: int | None = None
    exit_status: str = "SUCCESS"
    restart_cnt: int = 0
    # A requeued job may not start before this time.monotonic() (slurm.conf's cred_expire after the requeue).
    begin_at: float = 0.0
    # What accounting keeps of the runs before a requeue: frozen copies, each with ``run_ended`` set.
    earlier_runs: list[Job] = field(default_factory=list)
    # Of such a copy: how accounting records the run (["PREEMPTED"], ["NODE_FAIL"], ["PENDING", "REQUEUED"]).
    run_ended: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    ending: str | None = None
    completing_until: float = 0.0
    token: int = 0
    kill_request_user: str = ""
    stdout_path: str = ""
    stderr_path: str = ""
    stdin_path: str = "/dev/null"
    in_queue: bool = True
    # An array task that has started: slurmctld has split it off the array's pending record.
    split_off: bool = False
    # slurmctld's view of the dependency ("afterok:12(unfulfilled)"); None until first evaluated
    dependency_text: str | None = None
    # The accounting comment the job's user wrote with sacctmgr (slurmdbd's derived_es, ``comment.job``).
    accounted_comment: str = ""
    # When (epoch seconds) the warning signal went out, once it has: a simulated run shows it here only.
    warned_at: float | None = None
    # The batch step's peak resident memory (bytes) as jobacct_gather/linux records it: only for a run that
    # lasted at least one sampling interval (measured on 24.11: a 4 s job sampled every 30 s has no
    # ``tres.requested.max``; with ``account_gather_frequency: "task=1"`` it has its ``mem``).
    max_rss_bytes: int | None = None

    @property
    def base_state(self) -> str:
        return self.state[0]

    @property
    def is_final(self) -> bool:
        """Terminal and done completing: nothing about it will change any more."""
        return self.state[0] in TERMINAL_STATES and len(self.state) == 1

    @property
    def is_running(self) -> bool:
        """Holding nodes: running, or being stopped (``COMPLETING``)."""
        return self.state[0] == "RUNNING" or (self.state[0] in TERMINAL_STATES and not self.is_final)

    @property
    def display_id(self) -> str:
        """``"12"``, or for an array task ``<record id>_<task>``, as ``jobs/state`` prints it.

        slurmctld 24.11 keeps an array's pending tasks on the array's own record and gives each task
        its own record id when it starts, and ``jobs/state`` names a task by its record: array 5's
        pending task 2 is ``5_2``, its started task 0 ``8_0`` (recorded: slurm-24.11-arrays).
        """
        if self.array_task_id is None:
            return str(self.job_id)
        return f"{self.job_id if self.split_off else self.array_job_id}_{self.array_task_id}"

    def matches(self, states: frozenset[str]) -> bool:
        """True when the base state is wanted and each extra flag (e.g. ``COMPLETING``) is wanted too."""
        return self.state[0] in states and all(flag in states for flag in self.state[1:])
