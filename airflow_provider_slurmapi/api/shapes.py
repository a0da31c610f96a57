"""Reading and writing Slurm's JSON shapes: numbers that may be ``{set, infinite, number}``, objects and
lists that vary between versions."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def number(value: Any) -> int | float | None:
    """A Slurm number: plain, or ``{set, infinite, number}`` (None when unset or infinite)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # JSON's 1e400 reads as inf, NaN as nan
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return number(value.get("number"))
    return None


def no_val(value: int) -> dict[str, Any]:
    """Slurm's ``{set, infinite, number}`` wrapper for a number."""
    return {"set": True, "infinite": False, "number": value}


def obj(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (replies vary between versions)."""
    return value if isinstance(value, Mapping) else {}


def seq(value: Any) -> list[Any]:
    """``value`` if it is a JSON list, else an empty one."""
    return value if isinstance(value, list) else []
