"""JobSpec: the submit body (``{"script": ..., "job": {...}}``), validated before anything is sent."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeGuard

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.jobs import array_task_count
from airflow_provider_slurmapi.api.shapes import no_val

DEFAULT_ENVIRONMENT: tuple[str, ...] = ("PATH=/bin:/usr/bin",)
_STR_FIELDS = (
    "name",
    "partition",
    "account",
    "qos",
    "comment",
    "reservation",
    "constraints",
    "dependency",
    "array",
    "tres_per_node",
    "tres_per_job",
    "tres_per_task",
    "standard_output",
    "standard_error",
    "standard_input",
    "licenses",
    "nodes",
    "wckey",
    "mail_user",
)
# Slurm's unsigned fields reserve their two top values (NO_VAL "unset", INFINITE), so a count goes up
# to 0xfffd (16-bit) or 0xfffffffd (32-bit); the C types are those of slurm.h's job_desc_msg_t.
UINT16_MAX = 0xFFFD
UINT32_MAX = 0xFFFFFFFD
# Memory is a uint64 whose top bit older Slurm used as the per-CPU flag: a real amount stays below it.
MEMORY_MAX_MB = 2**63 - 1
_INT_FIELDS = {
    "minimum_nodes": UINT32_MAX,
    "maximum_nodes": UINT32_MAX,
    "tasks": UINT32_MAX,
    "tasks_per_node": UINT16_MAX,
    "cpus_per_task": UINT16_MAX,
    "minimum_cpus": UINT32_MAX,
}
_BOOL_FIELDS = ("hold", "requeue", "contiguous")
_MEMORY = re.compile(r"\s*([0-9]+)\s*([KMGT]?)B?\s*", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Slurm's array notation: indexes, ranges with an optional step, comma separated, an optional %throttle.
_ARRAY = re.compile(r"[0-9]+(?:-[0-9]+(?::[0-9]+)?)?(?:,[0-9]+(?:-[0-9]+(?::[0-9]+)?)?)*(?:%[0-9]+)?")


def time_limit_minutes(value: Any, field_name: str = "time_limit") -> int:
    """Minutes from an int, a timedelta, or a ``{"set": true, "number": N}`` object (rounded up)."""
    if isinstance(value, timedelta):
        minutes = math.ceil(value.total_seconds() / 60)
    elif isinstance(value, Mapping) and _is_int(value.get("number")):
        minutes = value["number"]
    elif _is_int(value):
        minutes = value
    else:
        raise SlurmJobSpecError(
            field_name,
            f"{value!r} ({type(value).__name__}) is not a time limit",
            "Give minutes as an int (e.g. 120) or a datetime.timedelta.",
        )
    if minutes <= 0:
        raise SlurmJobSpecError(field_name, f"{value!r} is not positive", "Give at least 1 minute.")
    if minutes > UINT32_MAX:
        raise SlurmJobSpecError(
            field_name,
            f"{minutes} minutes is more than Slurm can hold ({UINT32_MAX})",
            "Give the limit in minutes (e.g. 120 for two hours), or leave time_limit unset for the partition's "
            "default.",
        )
    return minutes


# The warning signals a job may ask for (``kill_warning_signal``): the names Slurm knows (``sig_name2num``) that
# a script can catch, with their Linux numbers. Not KILL or STOP (no script can catch them), TERM (what Slurm
# itself sends at the time limit: the script could not tell the warning from the end) or the signals that
# stop a process (TSTP, TTIN, TTOU).
WARNING_SIGNALS: dict[str, int] = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "ABRT": 6,
    "USR1": 10,
    "USR2": 12,
    "ALRM": 14,
    "CONT": 18,
    "URG": 23,
    "XCPU": 24,
}
# Slurm's default warning time (sbatch --signal without @time).
DEFAULT_WARNING_DELAY = 60


def warning_signal(value: Any, field_name: str = "kill_warning_signal") -> str:
    """The signal's name as Slurm takes it (``"USR1"``) from ``"USR1"``, ``"SIGUSR1"``, ``10`` or ``"10"``."""
    text = str(value).strip().upper() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if text.isdigit():
        known = {**WARNING_SIGNALS, "KILL": 9, "TERM": 15, "STOP": 19}
        text = next((name for name, number in known.items() if number == int(text)), text)
    name = text.removeprefix("SIG")
    if name not in WARNING_SIGNALS:
        names = ", ".join(WARNING_SIGNALS)
        why = {
            "KILL": "no script can catch it",
            "STOP": "no script can catch it",
            "TERM": "Slurm sends TERM itself at the time limit, so the script could not tell the warning from the end",
        }.get(name, "it is not a signal a script can catch and go on from")
        raise SlurmJobSpecError(
            field_name,
            f"{value!r} is not a warning signal ({why})",
            f"Give a signal name such as 'USR1' (what checkpointing code usually traps), one of {names}.",
        )
    return name


def warning_delay(value: Any, field_name: str = "kill_warning_delay") -> int:
    """Seconds before the end of the time limit, 1 to 65533 (Slurm's uint16 less its two reserved values)."""
    number = value.get("number") if isinstance(value, Mapping) else value
    if not _is_int(number) or not 1 <= number <= UINT16_MAX:
        raise SlurmJobSpecError(
            field_name,
            f"{value!r} is not a number of seconds",
            f"Give an int from 1 to {UINT16_MAX}: how many seconds before its time limit the job gets the signal.",
        )
    return number


def memory_megabytes(value: Any, field_name: str) -> int:
    """Megabytes from an int (MB) or a string such as ``"16G"``."""
    if _is_int(value):
        megabytes = value
    elif isinstance(value, Mapping) and _is_int(value.get("number")):
        megabytes = value["number"]
    elif isinstance(value, str) and (match := _MEMORY.fullmatch(value)):
        factor = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2).upper()]
        megabytes = math.ceil(int(match.group(1)) * factor)
    else:
        raise SlurmJobSpecError(
            field_name,
            f"{value!r} is not an amount of memory",
            "Give megabytes as an int (e.g. 16000) or a string such as '16G'.",
        )
    if not 0 <= megabytes <= MEMORY_MAX_MB:
        raise SlurmJobSpecError(
            field_name,
            f"{value!r} is not an amount of memory Slurm can hold",
            f"Give megabytes from 0 to {MEMORY_MAX_MB} (an int, or a string such as '16G').",
        )
    return megabytes


def merge_environment(user: Any, defaults: Iterable[str] = DEFAULT_ENVIRONMENT) -> list[str]:
    """``KEY=VALUE`` strings: the defaults, overridden and extended by the user's dict or list.

    Values are strings, or ints and finite floats (written as Python writes them); bytes, bools and
    containers are refused, as are NUL characters (the job's environment is a C string array).
    """
    merged: dict[str, str] = {}
    for item in defaults:
        key, _, val = item.partition("=")
        merged[key] = val
    if user is None:
        items: list[tuple[Any, Any]] = []
    elif isinstance(user, Mapping):
        items = list(user.items())
    elif isinstance(user, (list, tuple)):
        items = []
        for entry in user:
            if not isinstance(entry, str) or "=" not in entry or entry.startswith("="):
                raise SlurmJobSpecError(
                    "environment",
                    f"entry {entry!r} is not a KEY=VALUE string",
                    "Give a dict {'KEY': 'value'} or a list of 'KEY=value' strings.",
                )
            key, _, val = entry.partition("=")
            items.append((key, val))
    else:
        raise SlurmJobSpecError(
            "environment",
            f"{type(user).__name__} is not an environment",
            "Give a dict {'KEY': 'value'} or a list of 'KEY=value' strings.",
        )
    for key, val in items:
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise SlurmJobSpecError(
                "environment", f"{key!r} is not a valid variable name", "Use letters, digits and _."
            )
        merged[key] = _env_value(key, val)
    return [f"{k}={v}" for k, v in merged.items()]


def _env_value(key: str, value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        fix = "Give each variable a string value (or a number); for a flag give '1' or 'true'."
        if isinstance(value, (bytes, bytearray)):
            fix = "Give each variable a string value: decode bytes first (value.decode())."
        raise SlurmJobSpecError("environment", f"{key} has the {type(value).__name__} value {value!r}", fix)
    text = str(value)
    if "\0" in text:
        raise SlurmJobSpecError(
            "environment", f"the value of {key} contains a NUL character", "Remove the NUL (\\0) from it."
        )
    return text


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse_nul(name: str, value: Any) -> None:
    """Slurm stores strings as C strings: a NUL would cut the value short (or be refused), so none goes out."""
    if isinstance(value, str):
        found = "\0" in value
    elif isinstance(value, Mapping):
        found = any(isinstance(v, str) and "\0" in v for v in value.values())
    elif isinstance(value, (list, tuple)):
        found = any(isinstance(v, str) and "\0" in v for v in value)
    else:
        found = False
    if found:
        raise SlurmJobSpecError(name, "contains a NUL character (\\0)", f"Remove the NUL from {name}.")


@dataclass(frozen=True)
class JobSpec:
    """A submit body that passed every check this provider can make before sending it.

    Build it with :meth:`build`; :meth:`body` is the ``job/submit`` payload. Checked: the script (a
    ``#!`` script's content, no NUL), the working directory (absolute), the types of the documented
    fields and Slurm's ranges for the numbers (counts from 1, ``time_limit`` in minutes up to
    4294967293, ``priority`` from 0, memory from 0), the array notation and the environment.
    """

    script: str
    job: Mapping[str, Any]

    @classmethod
    def build(cls, script: Any, job: Mapping[str, Any] | None) -> JobSpec:
        if not isinstance(script, str) or not script.strip():
            raise SlurmJobSpecError("script", "is empty", "Pass the batch script's content, starting with a #! line.")
        if not script.startswith("#!"):
            raise SlurmJobSpecError(
                "script",
                f"does not start with '#!' (it starts with {script[:20]!r})",
                "Slurm batch scripts need an interpreter line such as #!/bin/bash. Pass the script's "
                "content, not a path to it.",
            )
        if "\0" in script:
            raise SlurmJobSpecError(
                "script",
                f"contains a NUL character (\\0) at offset {script.index(chr(0))}",
                "A batch script is text: remove the NUL (a binary file read as text?).",
            )
        if job is None:
            job = {}
        if not isinstance(job, Mapping):
            raise SlurmJobSpecError("job", f"is a {type(job).__name__}", "Pass the Slurm job fields as a dict.")
        return cls(script=script, job=_check_job(job))

    def body(self) -> dict[str, Any]:
        return {"job": dict(self.job), "script": self.script}


def _check_job(job: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(job)
    for key in out:
        if not isinstance(key, str) or not key or "\0" in key:
            raise SlurmJobSpecError("job", f"has a field named {key!r}", "Field names are Slurm's strings.")
        _refuse_nul(key, out[key])
    cwd = out.get("current_working_directory")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        problem = "is missing" if cwd is None else f"{cwd!r} is not an absolute path"
        raise SlurmJobSpecError(
            "current_working_directory",
            problem,
            "Slurm needs the job's working directory on the cluster: give an absolute path such as "
            "/home/USERNAME (current_working_directory=... on the operator).",
        )
    for name in _STR_FIELDS:
        if name in out and not isinstance(out[name], str):
            if name == "nodes" and _is_int(out[name]) and 1 <= out[name] <= UINT32_MAX:
                out[name] = str(out[name])
                continue
            raise SlurmJobSpecError(
                name, f"{out[name]!r} ({type(out[name]).__name__}) is not a string", "Give a string value."
            )
    for name, highest in _INT_FIELDS.items():
        value = out.get(name)
        if name in out and not (_is_int(value) and 1 <= value <= highest):
            raise SlurmJobSpecError(name, f"{value!r} is not a count Slurm takes", f"Give an int from 1 to {highest}.")
    for name in _BOOL_FIELDS:
        if name in out and not isinstance(out[name], bool):
            raise SlurmJobSpecError(name, f"{out[name]!r} is not true/false", "Give a bool.")
    if "time_limit" in out:
        out["time_limit"] = no_val(time_limit_minutes(out["time_limit"]))
    for name in ("memory_per_node", "memory_per_cpu"):
        if name in out:
            out[name] = no_val(memory_megabytes(out[name], name))
    if "priority" in out:
        out["priority"] = _priority(out["priority"])
    _check_warning(out)
    out["environment"] = merge_environment(out.get("environment"))
    if "array" in out:
        _check_array(out["array"])
    return out


def _check_warning(out: dict[str, Any]) -> None:
    """``kill_warning_signal``/``_delay``/``_flags``: the signal by name, the delay within the time limit."""
    if "kill_warning_delay" in out and "kill_warning_signal" not in out:
        raise SlurmJobSpecError(
            "kill_warning_delay",
            "is given without kill_warning_signal",
            "Give kill_warning_signal too (e.g. 'USR1'), or leave the delay out.",
        )
    if "kill_warning_signal" not in out:
        return
    out["kill_warning_signal"] = warning_signal(out["kill_warning_signal"])
    delay = warning_delay(out.get("kill_warning_delay", DEFAULT_WARNING_DELAY))
    out["kill_warning_delay"] = no_val(delay)
    flags = out.get("kill_warning_flags", [])
    if not isinstance(flags, (list, tuple)) or not all(isinstance(flag, str) for flag in flags):
        raise SlurmJobSpecError(
            "kill_warning_flags",
            f"{flags!r} is not a list of Slurm's flag names",
            "Give a list such as ['BATCH_JOB'] (only the job's script), ['FULL_JOB'] (every process of the job) "
            "or [] (only its srun steps).",
        )
    limit = out.get("time_limit")
    minutes = limit.get("number") if isinstance(limit, Mapping) else None
    if _is_int(minutes) and delay >= minutes * 60:
        raise SlurmJobSpecError(
            "kill_warning_delay",
            f"{delay} s is not less than the job's time limit ({minutes} min): the job would get the signal at once",
            "Give fewer seconds than the time limit holds, or a longer time_limit.",
        )


def _priority(value: Any) -> Any:
    number = value.get("number", 0) if isinstance(value, Mapping) else value
    if not _is_int(number) or not 0 <= number <= UINT32_MAX:
        raise SlurmJobSpecError(
            "priority",
            f"{value!r} is not a priority Slurm takes",
            f"Give an int from 0 to {UINT32_MAX} (setting a priority usually needs an operator or admin).",
        )
    return value if isinstance(value, Mapping) else no_val(value)


def _check_array(value: str) -> None:
    if not _ARRAY.fullmatch(value) or array_task_count(value) is None:
        raise SlurmJobSpecError(
            "array",
            f"{value!r} is not an array spec",
            "Use Slurm's form, e.g. '0-15', '1,3,5', '0-15:2' or '0-15%4' (no spaces or newlines).",
        )
