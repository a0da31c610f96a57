"""Slurm's JSON shapes (api/shapes.py): numbers that may be wrapped, objects and lists that may not be."""

from __future__ import annotations

import math

import pytest

from airflow_provider_slurmapi.api.shapes import no_val, number, obj, seq
from tests.fixtures import recorded


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (2.5, 2.5),
        ({"set": True, "infinite": False, "number": 7}, 7),
        (no_val(9), 9),
        ({"set": False, "infinite": False, "number": 7}, None),  # unset
        ({"set": True, "infinite": True, "number": 0}, None),  # infinite (a time limit of UNLIMITED)
        ({"number": 3}, 3),  # "set" absent: set
        (math.inf, None),  # JSON's 1e400
        (math.nan, None),
        (True, None),  # a bool is not a count
        ("5", None),
        (None, None),
        ({"set": True, "number": {"set": True, "number": 4}}, 4),
    ],
)
def test_a_slurm_number_plain_or_wrapped(value, expected):
    assert number(value) == expected


def test_numbers_of_a_real_record_read_as_slurm_meant_them():
    record = recorded("job_running")["jobs"][0]
    assert number(record["job_id"]) == record["job_id"]
    assert number(record["time_limit"]) == record["time_limit"]["number"]
    assert number(record["end_time"]) is not None


def test_objects_and_lists_of_the_wrong_kind_read_as_empty():
    assert obj({"a": 1}) == {"a": 1} and obj([1]) == {} and obj(None) == {} and obj("x") == {}
    assert seq([1]) == [1] and seq({"a": 1}) == [] and seq("ab") == [] and seq(None) == []
