"""Checks of the arguments users give constructors, the hook and a connection: cheap to import.

Each refuses a bad value with a :class:`SlurmJobSpecError` naming the field and the fix, when the DAG
file is parsed or the call is made, before anything is sent.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from airflow_provider_slurmapi.api.errors import SlurmJobSpecError
from airflow_provider_slurmapi.api.states import BASE_STATES


def seconds(value: object, field: str, *, zero: bool = False, text: bool = False) -> float:
    """``value`` as a finite number of seconds above 0 (or 0 itself with ``zero``).

    NaN and infinity are refused: a NaN interval polls without pause (every comparison with it is
    false) and an infinite one never polls again. ``text``: also take a numeric string (a connection's
    extra holds text).
    """
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif text and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and not zero):
        bound = "0 or more" if zero else "above 0"
        raise SlurmJobSpecError(
            field, f"{value!r} is not a finite number of seconds {bound}", "Give seconds as a number, e.g. 30."
        )
    return number


def flag(value: object, field: str) -> bool:
    """``value`` if it is a bool: a string such as ``"false"`` would read as true."""
    if not isinstance(value, bool):
        raise SlurmJobSpecError(field, f"{value!r} is not a bool", "Give True or False (not a string).")
    return value


def count(value: object, field: str, *, minimum: int = 0) -> int:
    """``value`` as a whole number of at least ``minimum`` (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SlurmJobSpecError(field, f"{value!r} is not a whole number of at least {minimum}", "Give an int.")
    return value


def states(value: object, field: str, *, empty: bool = False) -> frozenset[str]:
    """Slurm base state names (upper-cased), e.g. ``["COMPLETED"]``; none at all only with ``empty``.

    A bare string is refused (``"COMPLETED"`` would be its letters), and so is a name Slurm does not
    have (``"COMPLETE"`` would never match, and the wait would end as if the job had failed).
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise SlurmJobSpecError(
            field, f"{value!r} is not a list of state names", f'Give a list, e.g. {field}=["COMPLETED"].'
        )
    names = list(value)
    if (not names and not empty) or not all(isinstance(n, str) for n in names):
        raise SlurmJobSpecError(
            field,
            f"{names!r} is not a{'' if empty else ' non-empty'} list of state names",
            f'Give a list, e.g. {field}=["COMPLETED"].',
        )
    found = frozenset(n.strip().upper() for n in names)
    unknown = sorted(found - BASE_STATES)
    if unknown:
        raise SlurmJobSpecError(
            field,
            f"{', '.join(unknown)} {'is not a Slurm job state' if len(unknown) == 1 else 'are not Slurm job states'}",
            f"Use only: {', '.join(sorted(BASE_STATES))}.",
        )
    return found
