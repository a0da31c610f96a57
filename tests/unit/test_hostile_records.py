"""A reply with any value in any field (issue: hostile neighbour): fuzzed over real records.

Every record the provider reads comes from another program (slurmrestd, Google's service, a proxy), and
parts of it from other users' jobs. Whatever value sits in whatever field, reading the record gives a
:class:`SlurmJob` (unknown values read as absent) or a :class:`SlurmJobApiError` naming the reply; it never
raises anything else, so that one bad record cannot end a wait it does not belong to. The templates are
real slurmrestd replies (tests/fixtures), each field in turn replaced by a hostile value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_slurmapi.api import results
from airflow_provider_slurmapi.api.errors import SlurmJobApiError
from airflow_provider_slurmapi.api.jobs import SlurmJob
from airflow_provider_slurmapi.api.watch import outcome_text
from tests.fixtures import recorded

# Values that broke readers once, or that a JSON parser hands over: huge, non-finite, of the wrong type.
EDGES = [
    1e20,
    99999999999999999,
    -99999999999999999,
    2**63,
    2**64,
    10**400,
    -1,
    float("inf"),
    float("-inf"),
    float("nan"),
    1.5,
    "",
    "\x00",
    "\x1b]0;x\x07",
    "\ud800",
    True,
    None,
    [],
    {},
    {"set": True, "infinite": False, "number": 1e20},
    {"set": True, "infinite": False, "number": float("nan")},
    {"set": True, "infinite": False, "number": {"number": 2**70}},
    {"number": "12"},
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(EDGES)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=8,
)


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field of a record, nested ones too."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:2]):
            yield (*prefix, index)
            yield from paths(inner, (*prefix, index))


def replaced(record: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(record))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copy


JOB_INFO = recorded("job_completed")["jobs"][0]
SLURMDB = recorded("slurmdb_job")["jobs"][0]
JOB_INFO_PATHS = list(paths(JOB_INFO))
SLURMDB_PATHS = list(paths(SLURMDB))


def read_all_of(job: SlurmJob) -> None:
    """What the operator, the trigger and the job page do with a record once read."""
    summary = job.summary()
    json.dumps(summary, allow_nan=False)  # an XCom and a trigger event carry it
    results.read(summary)
    job.describe_state()
    outcome_text(job)
    str(job.exit_code)
    assert job.end_time is None or job.end_time.year <= 9999
    assert job.elapsed is None or math.isfinite(job.elapsed.total_seconds())


def read_or_refuse(parse: Any, record: dict[str, Any]) -> None:
    try:
        job = parse(record)
    except SlurmJobApiError:
        return
    read_all_of(job)


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(path=st.sampled_from(JOB_INFO_PATHS), value=VALUES)
def test_any_value_in_any_field_of_an_active_queue_record(path, value):
    read_or_refuse(SlurmJob.from_job_info, replaced(JOB_INFO, path, value))


@SETTINGS
@given(path=st.sampled_from(SLURMDB_PATHS), value=VALUES)
def test_any_value_in_any_field_of_an_accounting_record(path, value):
    read_or_refuse(SlurmJob.from_slurmdb, replaced(SLURMDB, path, value))


@pytest.mark.parametrize("value", [*EDGES, deep(200)], ids=repr)
@pytest.mark.parametrize("source", ["slurm", "slurmdb"])
def test_every_known_bad_value_in_every_field(source, value):
    """The values the adversarial review used, in every field (not left to chance)."""
    template, parse = (JOB_INFO, SlurmJob.from_job_info) if source == "slurm" else (SLURMDB, SlurmJob.from_slurmdb)
    for path in JOB_INFO_PATHS if source == "slurm" else SLURMDB_PATHS:
        read_or_refuse(parse, replaced(template, path, value))
