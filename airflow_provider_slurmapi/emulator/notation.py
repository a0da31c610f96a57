"""Slurm's small text notations: hostlists, array specs, dependencies, output file patterns."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

NO_ARRAY_TASK = 4294967294  # what %a expands to outside an array (NO_VAL - 1)

_ARRAY_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
_DEPENDENCY_KINDS = ("afterok", "afternotok", "afterany", "after")


class NotationError(ValueError):
    """A value Slurm would refuse to parse."""


def hostlist(names: list[str]) -> str:
    """Compress ``["node1", "node2", "node4"]`` into ``"node[1-2,4]"`` (one common prefix per group)."""
    groups: dict[str, list[int]] = {}
    order: list[str] = []
    for name in names:
        match = re.match(r"^(.*?)(\d+)$", name)
        if not match:
            groups.setdefault(name, [])
            order.append(name)
            continue
        prefix, index = match.group(1), int(match.group(2))
        if prefix not in groups:
            order.append(prefix)
        groups.setdefault(prefix, []).append(index)
    parts: list[str] = []
    for prefix in dict.fromkeys(order):
        indexes = sorted(groups[prefix])
        if not indexes:
            parts.append(prefix)
        elif len(indexes) == 1:
            parts.append(f"{prefix}{indexes[0]}")
        else:
            parts.append(f"{prefix}[{_ranges(indexes)}]")
    return ",".join(parts)


def _ranges(indexes: list[int]) -> str:
    spans: list[str] = []
    start = prev = indexes[0]
    for index in [*indexes[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    return ",".join(spans)


@dataclass(frozen=True)
class ArraySpec:
    """A parsed ``--array`` value: the task indexes and the ``%N`` throttle (0 = none)."""

    indexes: tuple[int, ...]
    max_running: int
    text: str


def parse_array(text: str, max_size: int = 1001) -> ArraySpec:
    """Parse ``"0-3%2"``, ``"1,3,5"`` or ``"0-7:2"``."""
    body, _, throttle = text.strip().partition("%")
    if throttle and not throttle.isdigit():
        raise NotationError(f"bad array throttle {throttle!r}")
    indexes: set[int] = set()
    for item in body.split(","):
        match = _ARRAY_ITEM.match(item.strip())
        if not match:
            raise NotationError(f"bad array item {item!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1 or last >= max_size:
            raise NotationError(f"bad array range {item!r}")
        indexes.update(range(first, last + 1, step))
    return ArraySpec(tuple(sorted(indexes)), int(throttle or 0), body.strip())


def task_string(indexes: list[int] | tuple[int, ...]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``, as Slurm prints ``array_task_string``."""
    return _ranges(sorted(indexes)) if indexes else ""


@dataclass(frozen=True)
class Dependency:
    """One ``kind:ID[:ID...]`` clause of a dependency string."""

    kind: str
    job_ids: tuple[int, ...]


def parse_dependency(text: str) -> list[Dependency]:
    """Parse ``"afterok:12:13,afterany:14"`` (``?`` for "any of" is read like ``,``)."""
    clauses: list[Dependency] = []
    for clause in re.split(r"[,?]", text.strip()):
        if not clause:
            continue
        kind, _, ids = clause.partition(":")
        if kind not in _DEPENDENCY_KINDS or not ids:
            raise NotationError(f"bad dependency {clause!r}")
        try:
            job_ids = tuple(int(part.split("+")[0]) for part in ids.split(":"))
        except ValueError as exc:
            raise NotationError(f"bad dependency job id in {clause!r}") from exc
        clauses.append(Dependency(kind, job_ids))
    return clauses


def absolute_path(cwd: str, pattern: str) -> str:
    """An output file pattern made absolute against the job's working directory."""
    if not pattern or pattern.startswith("/"):
        return pattern
    return posixpath.join(cwd, pattern)


def expand_pattern(
    pattern: str, *, job_id: int, name: str, user: str, node: str, array_job_id: int, array_task_id: int | None
) -> str:
    """Expand ``%j %x %u %N %A %a %%`` in an output file pattern as slurmstepd does."""
    values = {
        "j": str(job_id),
        "x": name,
        "u": user,
        "N": node,
        "A": str(array_job_id or job_id),
        "a": str(NO_ARRAY_TASK if array_task_id is None else array_task_id),
        "%": "%",
    }

    def substitute(match: re.Match[str]) -> str:
        width, key = match.group(1), match.group(2)
        value = values.get(key)
        if value is None:
            return match.group(0)
        if width and key in "jAa":
            return value.zfill(int(width))
        return value

    return re.sub(r"%(\d*)([jxuNAa%])", substitute, pattern)
