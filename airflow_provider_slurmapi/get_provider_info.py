"""What Airflow's providers manager reads about this provider (the ``apache_airflow_provider`` entry point)."""

from __future__ import annotations

from typing import Any

from airflow_provider_slurmapi import __version__
from airflow_provider_slurmapi.api.fields import CONNECTION_FIELDS, SECRET_FIELDS, section_of, ui_field_behaviour

_INTEGRATION = "Slurm Job API"
_NUMERIC = {"timeout": "number"}
_FORMATS = {"endpoint": "url", **dict.fromkeys(SECRET_FIELDS, "password")}


def _conn_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, (label, description) in CONNECTION_FIELDS.items():
        schema: dict[str, Any] = {"type": [_NUMERIC.get(name, "string"), "null"], "section": section_of(name)}
        if name in _FORMATS:
            schema["format"] = _FORMATS[name]
        fields[name] = {"label": label, "description": description, "schema": schema}
    return fields


def _ui_field_behaviour() -> dict[str, Any]:
    behaviour = ui_field_behaviour()
    return {
        "hidden-fields": behaviour["hidden_fields"],
        "relabeling": behaviour["relabeling"],
        "placeholders": behaviour["placeholders"],
    }


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-slurmapi",
        "name": "Slurm Job API",
        "description": "Submit, watch and cancel Slurm jobs on Google Cloud training clusters through "
        "their Slurm Job API (callSlurmRestApi).",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://cloud.google.com/vertex-ai",
                "tags": ["gcp"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_provider_slurmapi.hooks.slurmapi"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_provider_slurmapi.operators.slurmapi"],
            }
        ],
        "sensors": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_provider_slurmapi.sensors.slurmapi"],
            }
        ],
        "triggers": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "airflow_provider_slurmapi.triggers.slurmapi",
                    "airflow_provider_slurmapi.triggers.events",
                ],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_provider_slurmapi.hooks.slurmapi.SlurmJobApiHook",
                "hook-name": "Slurm Job API (Google Cloud training cluster)",
                "connection-type": "slurmapi",
                "conn-fields": _conn_fields(),
                "ui-field-behaviour": _ui_field_behaviour(),
            }
        ],
        "extra-links": ["airflow_provider_slurmapi.links.slurmapi.SlurmJobLink"],
        "task-decorators": [
            {"name": "slurm", "class-name": "airflow_provider_slurmapi.decorators.slurm.slurm_task"},
            {"name": "slurm_script", "class-name": "airflow_provider_slurmapi.decorators.slurm.slurm_script_task"},
        ],
    }
