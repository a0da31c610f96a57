"""Which Airflow this is, for the few places where 2.11 and 3.x behave differently."""

from __future__ import annotations

from airflow.providers.common.compat.version_compat import (
    AIRFLOW_V_3_0_PLUS,
    AIRFLOW_V_3_3_PLUS,
    get_base_airflow_version_tuple,
)

__all__ = ["AIRFLOW_V_3_0_PLUS", "AIRFLOW_V_3_3_PLUS", "get_base_airflow_version_tuple"]
