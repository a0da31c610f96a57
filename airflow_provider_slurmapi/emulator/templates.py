"""Recorded slurmrestd 24.11 reply pieces, loaded once and handed out as deep copies to fill in."""

from __future__ import annotations

import copy
import functools
import json
import signal as _signal
from importlib import resources
from typing import Any

SLURM_RELEASE = "24.11.5"

# The type names slurmrestd's data parser prints in "Ignoring unknown field" warnings.
_DATA_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "64 bit integer"),
    (float, "floating point number"),
    (str, "string"),
    (dict, "dictionary"),
    (list, "list"),
)


@functools.cache
def _text(name: str) -> str:
    return resources.files(__package__).joinpath("templates").joinpath(f"{name}.json").read_text(encoding="utf-8")


@functools.cache
def _load(name: str) -> Any:
    return json.loads(_text(name))


def template(name: str) -> Any:
    """A fresh deep copy of the template file ``templates/{name}.json`` (parsing beats ``deepcopy``)."""
    return json.loads(_text(name))


def record(name: str) -> dict[str, Any]:
    """A fresh copy of one recorded error, warning or status entry from ``templates/records.json``."""
    return copy.deepcopy(_load("records")[name])


@functools.cache
def job_desc_fields() -> frozenset[str]:
    """The property names of ``v0.0.42_job_desc_msg`` in the 24.11.5 OpenAPI spec."""
    return frozenset(_load("job_desc_fields"))


def data_type_name(value: Any) -> str:
    """The name slurmrestd gives the JSON type of ``value``."""
    for kind, name in _DATA_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return "null"


def meta(kind: str, cluster: str) -> dict[str, Any]:
    """The ``meta`` block of a reply: ``kind`` is ``slurmctld`` or ``slurmdbd``."""
    block: dict[str, Any] = template(f"meta_{kind}")
    block["slurm"]["cluster"] = cluster
    block["slurm"]["release"] = SLURM_RELEASE
    return block


def envelope(kind: str, cluster: str, **fields: Any) -> dict[str, Any]:
    """A reply with ``fields`` first, then ``meta``, ``errors`` and ``warnings`` as slurmrestd orders them."""
    reply: dict[str, Any] = dict(fields)
    reply["meta"] = meta(kind, cluster)
    reply.setdefault("errors", [])
    reply.setdefault("warnings", [])
    reply["errors"] = reply.pop("errors")
    reply["warnings"] = reply.pop("warnings")
    return reply


def number(value: int | float | None, *, infinite: bool = False) -> dict[str, Any]:
    """Slurm's ``{set, infinite, number}`` struct; ``None`` is "not set"."""
    if infinite:
        return {"set": False, "infinite": True, "number": 0}
    if value is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def exit_code(return_code: int | None, signal: int | None, status: str) -> dict[str, Any]:
    """Slurm's ``process_exit_code_verbose`` struct."""
    return {
        "status": [status],
        "return_code": number(return_code),
        "signal": {
            "id": number(signal),
            "name": signal_name(signal) if signal else "",
        },
    }


def signal_name(signum: int) -> str:
    """``15`` -> ``"TERM"``, as Slurm prints signal names."""
    try:
        return _signal.Signals(signum).name.removeprefix("SIG")
    except ValueError:
        return str(signum)
