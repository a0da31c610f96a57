"""How far a deferred task's trigger logged its job's staged output, kept in the task instance's XCom
(``triggers/slurmapi._StreamPositions``): the rules, with a dict standing in for the XCom table.

The real XCom API, called by a real triggerer that is killed and replaced, is proven end to end in
tests/standalone/test_streaming.py on Airflow 3.3 and 2.11.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_slurmapi.triggers import slurmapi as triggers

TI = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)
POSITION = {"job": "7", "try": 1, "run": 0, "offsets": {"stdout": 8, "stderr": 0}}


class XComTable:
    """The XCom rows, by key and task instance; ``broken`` makes every call fail."""

    rows: dict[tuple, Any] = {}
    writes = 0
    broken = False

    @classmethod
    def get_one(cls, *, key: str, **where: Any) -> Any:
        if cls.broken:
            raise RuntimeError("execution API unreachable")
        return cls.rows.get((key, tuple(sorted(where.items()))))

    @classmethod
    def set(cls, *, key: str, value: Any, **where: Any) -> None:
        if cls.broken:
            raise RuntimeError("execution API unreachable")
        cls.writes += 1
        cls.rows[(key, tuple(sorted(where.items())))] = value


@pytest.fixture
def xcom(monkeypatch: pytest.MonkeyPatch) -> type[XComTable]:
    import airflow.providers.common.compat.sdk as sdk

    monkeypatch.setattr(XComTable, "rows", {})
    monkeypatch.setattr(XComTable, "writes", 0)
    monkeypatch.setattr(XComTable, "broken", False)
    monkeypatch.setattr(sdk, "XCom", XComTable, raising=False)
    return XComTable


LOG = logging.getLogger("test")


def positions(ti: Any = TI) -> triggers._StreamPositions:
    kept = triggers._StreamPositions.of(ti)
    assert kept is not None
    return kept


def test_a_position_kept_by_a_try_is_read_back_by_the_same_try_only(xcom):
    kept = positions()
    assert kept.load(LOG) is None
    kept.save(POSITION, LOG)
    kept.save(POSITION, LOG)  # unchanged: not written again
    assert xcom.writes == 1
    assert positions().load(LOG) == POSITION  # the trigger after a restart
    # the next try (a retry that reattached to the job) logs the job's output in its own log, whole
    later = positions(SimpleNamespace(**{**vars(TI), "try_number": 3}))
    assert later.load(LOG) is None


def test_without_a_task_instance_nothing_is_kept():
    assert triggers._StreamPositions.of(None) is None
    assert triggers._StreamPositions.of(SimpleNamespace(dag_id="d")) is None


def test_an_xcom_that_fails_is_said_once_and_costs_only_the_restart_guarantee(xcom, caplog):
    xcom.broken = True
    kept = positions()
    with caplog.at_level(logging.WARNING):
        assert kept.load(LOG) is None
        kept.save(POSITION, LOG)
        kept.save({**POSITION, "offsets": {"stdout": 20, "stderr": 0}}, LOG)
    warnings = [r.getMessage() for r in caplog.records if "slurm_stream_position" in r.getMessage()]
    assert len(warnings) == 1 and "may be logged again" in warnings[0], warnings
