"""The argument checks (api/checks.py): a bad value is refused naming the field and the fix."""

from __future__ import annotations

import math

import pytest

from airflow_provider_slurmapi.api import checks
from airflow_provider_slurmapi.api.errors import SlurmJobSpecError


@pytest.mark.parametrize("value", [30, 0.5, 1e6])
def test_seconds_take_finite_positive_numbers(value):
    assert checks.seconds(value, "poll_interval") == float(value)


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, -math.inf, True, "30", None, [30]])
def test_seconds_refuse_what_would_poll_without_pause_or_never(value):
    with pytest.raises(SlurmJobSpecError, match=r"poll_interval.*is not a finite number of seconds above 0"):
        checks.seconds(value, "poll_interval")


def test_seconds_may_be_zero_or_text_where_asked():
    assert checks.seconds(0, "settle", zero=True) == 0.0
    assert checks.seconds("2.5", "timeout", text=True) == 2.5  # a connection's extra holds text
    with pytest.raises(SlurmJobSpecError, match="0 or more"):
        checks.seconds(-1, "settle", zero=True)
    with pytest.raises(SlurmJobSpecError, match="timeout"):
        checks.seconds("soon", "timeout", text=True)


def test_a_flag_is_a_bool_not_a_string_that_reads_as_true():
    assert checks.flag(False, "wait_for_termination") is False
    with pytest.raises(SlurmJobSpecError, match=r"wait_for_termination.*'false' is not a bool.*True or False"):
        checks.flag("false", "wait_for_termination")


def test_states_are_known_base_state_names_in_a_list():
    assert checks.states(["completed", " FAILED "], "success_states") == frozenset({"COMPLETED", "FAILED"})
    assert checks.states([], "failure_states", empty=True) == frozenset()
    for bad, said in [
        ("COMPLETED", "is not a list of state names"),  # a bare string would be its letters
        ([], "is not a non-empty list"),
        ([1], "is not a non-empty list"),
        (["COMPLETE"], "COMPLETE is not a Slurm job state"),
        (["NOPE", "NADA"], "NADA, NOPE are not Slurm job states"),
    ]:
        with pytest.raises(SlurmJobSpecError, match=said) as raised:
            checks.states(bad, "success_states")
        assert "success_states" in str(raised.value)
