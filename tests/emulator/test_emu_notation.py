"""Slurm's text notations as the emulator reads and writes them."""

from __future__ import annotations

import pytest

from airflow_provider_slurmapi.emulator.notation import (
    NO_ARRAY_TASK,
    NotationError,
    expand_pattern,
    hostlist,
    parse_array,
    parse_dependency,
    task_string,
)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["node1"], "node1"),
        (["node1", "node2", "node3"], "node[1-3]"),
        (["node1", "node2", "node4"], "node[1-2,4]"),
        (["gpu-node2", "node1"], "gpu-node2,node1"),
        ([], ""),
    ],
)
def test_hostlist(names: list[str], expected: str) -> None:
    assert hostlist(names) == expected


@pytest.mark.parametrize(
    ("text", "indexes", "throttle"),
    [("0-3%2", (0, 1, 2, 3), 2), ("1,3,5", (1, 3, 5), 0), ("0-7:2", (0, 2, 4, 6), 0), ("4", (4,), 0)],
)
def test_parse_array(text: str, indexes: tuple[int, ...], throttle: int) -> None:
    spec = parse_array(text)
    assert (spec.indexes, spec.max_running) == (indexes, throttle)


@pytest.mark.parametrize("text", ["", "3-1", "a", "0-3%x", "0-5000", "1-4:0"])
def test_bad_array(text: str) -> None:
    with pytest.raises(NotationError):
        parse_array(text)


def test_task_string() -> None:
    assert task_string([5, 0, 1, 2]) == "0-2,5"


def test_parse_dependency() -> None:
    (ok, anyway) = parse_dependency("afterok:12:13,afterany:14")
    assert (ok.kind, ok.job_ids, anyway.kind, anyway.job_ids) == ("afterok", (12, 13), "afterany", (14,))
    for bad in ("afterok", "later:1", "afterok:x"):
        with pytest.raises(NotationError):
            parse_dependency(bad)


def test_expand_pattern() -> None:
    def expand(pattern: str, array_job_id: int = 0, array_task_id: int | None = None) -> str:
        return expand_pattern(
            pattern,
            job_id=7,
            name="train",
            user="u",
            node="node1",
            array_job_id=array_job_id,
            array_task_id=array_task_id,
        )

    assert expand("%x-%j.%u.%N.%%") == "train-7.u.node1.%"
    assert expand("%A_%a", 5, 2) == "5_2"
    assert expand("%a") == str(NO_ARRAY_TASK)
    assert expand("%4j") == "0007"
