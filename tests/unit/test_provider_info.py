"""The provider registers itself with Airflow, and both connection-form generations stay in step."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from airflow_provider_slurmapi.api.fields import CONNECTION_FIELDS, CONNECTION_SECTIONS, SECRET_FIELDS
from airflow_provider_slurmapi.hooks.slurmapi import SlurmJobApiHook


def provider_info() -> dict:
    (ep,) = [
        e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_provider_slurmapi")
    ]
    return ep.load()()


def test_entry_point_declares_every_class():
    import importlib

    info = provider_info()
    assert info["package-name"] == "airflow-provider-slurmapi"
    (conn,) = info["connection-types"]
    assert conn["connection-type"] == "slurmapi"
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for module in info[kind][0]["python-modules"]:
            importlib.import_module(module)
    decorators = [d["class-name"] for d in info["task-decorators"]]
    for dotted in [conn["hook-class-name"], *info["extra-links"], *decorators]:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name)


def test_conn_fields_match_the_hook():
    (conn,) = provider_info()["connection-types"]
    assert list(conn["conn-fields"]) == list(CONNECTION_FIELDS)
    assert conn["conn-fields"]["keyfile_dict"]["schema"]["format"] == "password"
    assert conn["ui-field-behaviour"]["hidden-fields"] == SlurmJobApiHook.get_ui_field_behaviour()["hidden_fields"]


def test_airflow_providers_manager_sees_the_connection_type():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-provider-slurmapi" in manager.providers
    hook_info = manager.hooks["slurmapi"]
    assert hook_info is not None and hook_info.hook_class_name.endswith("SlurmJobApiHook")


def test_legacy_form_widgets_match():
    pytest.importorskip("flask_appbuilder", reason="the legacy (FAB) connection form exists only with FAB")
    assert list(SlurmJobApiHook.get_connection_form_widgets()) == list(CONNECTION_FIELDS)


def test_task_slurm_script_is_registered_with_airflow():
    """``task.slurm_script`` resolves through Airflow's providers manager, as users write it."""
    from airflow.providers.common.compat.sdk import task

    from airflow_provider_slurmapi.decorators.slurm import slurm_script_task

    assert task.slurm_script is slurm_script_task


def test_task_slurm_script_refuses_a_script_argument():
    from airflow.providers.common.compat.sdk import DAG, task

    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

    with DAG(dag_id="refuses_script", schedule=None), pytest.raises(SlurmJobSpecError, match="script: is given"):

        @task.slurm_script(script="#!/bin/bash\ntrue\n", current_working_directory="/tmp")
        def job() -> str:
            return "#!/bin/bash\ntrue\n"

        job()


def test_task_slurm_is_registered_with_airflow():
    """``task.slurm`` resolves through Airflow's providers manager too."""
    from airflow.providers.common.compat.sdk import task

    from airflow_provider_slurmapi.decorators.slurm import slurm_task

    assert task.slurm is slurm_task


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"script": "#!/bin/bash\ntrue\n"}, "script: is given to @task.slurm. The job runs the decorated function"),
        ({"array": "0-3"}, "array: is given to @task.slurm"),
        ({"publish_results": False}, "publish_results: is False, so the function's return value could not come"),
        ({"wait_for_completion": False}, "wait_for_completion: is False"),
        ({"python_command": ""}, "python_command: '' is not a command line"),
    ],
)
def test_task_slurm_refuses_what_would_lose_the_return_value_when_the_dag_is_parsed(arguments, message):
    from airflow.providers.common.compat.sdk import DAG, task

    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

    with DAG(dag_id="refuses", schedule=None), pytest.raises(SlurmJobSpecError, match=message):

        @task.slurm(current_working_directory="/tmp", **arguments)
        def job() -> int:
            return 1

        job()


def test_task_slurm_refuses_a_function_that_reads_the_dag_files_names_when_the_dag_is_parsed():
    from airflow.providers.common.compat.sdk import DAG, task

    from airflow_provider_slurmapi.api.errors import SlurmJobSpecError

    with DAG(dag_id="refuses_globals", schedule=None), pytest.raises(SlurmJobSpecError, match="reads pytest from"):

        @task.slurm(current_working_directory="/tmp")
        def job() -> str:
            return pytest.__name__

        job()


def test_the_connection_form_opens_with_the_google_cluster_and_keeps_the_jwt_secret():
    """What Airflow 3's connection form gets (its own HookMetaService): no standard field but the
    description (login and password were the direct-slurmrestd fields, shown first), then the extra fields
    in sections, the Google cluster first; the slurmrestd JWT is a password field, redacted like the key."""
    ui = pytest.importorskip("airflow.api_fastapi.core_api.services.ui.connections", reason="Airflow 3's form")
    (meta,) = [m for m in ui.HookMetaService.hook_meta_data() if m.connection_type == "slurmapi"]
    standard = meta.standard_fields
    assert all(getattr(standard, name).hidden for name in ("host", "url_schema", "port", "login", "password"))
    sections = [field["schema"]["section"] for field in meta.extra_fields.values()]
    assert list(dict.fromkeys(sections)) == list(CONNECTION_SECTIONS)
    assert list(meta.extra_fields)[:3] == ["project_id", "region", "cluster_id"]
    assert {name for name, f in meta.extra_fields.items() if f["schema"].get("format") == "password"} == set(
        SECRET_FIELDS
    )
    from airflow.providers_manager import ProvidersManager

    widgets = ProvidersManager().connection_form_widgets
    assert widgets["extra__slurmapi__slurm_jwt"].is_sensitive and widgets["extra__slurmapi__keyfile_dict"].is_sensitive
