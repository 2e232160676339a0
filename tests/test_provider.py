"""Provider registration and DAG import checks.

- ``airflow providers list`` (the venv's ``airflow`` binary, a throw-away ``AIRFLOW_HOME``) shows the provider,
  ``airflow providers triggers`` / ``queues`` show its trigger module and message-queue plug-in.
- Every module and class path in ``get_provider_info()`` imports.
- Every DAG file under ``tests/dags`` and ``example_dags/`` parses without import errors and without deprecation
  warnings, checked in a fresh interpreter so that warnings raised on first import are seen. ``example_dags/`` may not
  exist yet: whatever is there is checked.
"""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from importlib.metadata import distribution, entry_points
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue import __version__
from airflow_sqlqueue.get_provider_info import get_provider_info

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DAG_FOLDERS = [ROOT / "tests" / "dags", Path(importlib.util.find_spec("airflow_sqlqueue.example_dags").origin).parent]
PACKAGE = "airflow-provider-sqlqueue"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env.update({"AIRFLOW_HOME": tempfile.mkdtemp(prefix="sqlqueue-provider-test-"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"})
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def providers_list() -> tuple[list[dict[str, Any]], str]:
    """``airflow providers list --output json`` from the venv's binary: the parsed list and stderr."""
    airflow = BIN / "airflow"
    assert airflow.exists(), f"no airflow binary beside {sys.executable}"
    proc = subprocess.run([str(airflow), "providers", "list", "--output", "json"], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("["):]), proc.stderr  # JSON after any start-up chatter


# -- registration ---------------------------------------------------------------------------------------------
def test_providers_list_shows_the_provider(providers_list: tuple[list[dict[str, Any]], str]) -> None:
    providers, stderr = providers_list
    ours = [p for p in providers if p["package_name"] == PACKAGE]
    assert len(ours) == 1, [p["package_name"] for p in providers]
    assert ours[0]["version"] == __version__
    assert "SQL queue" in ours[0]["description"]
    assert PACKAGE not in stderr and "airflow_sqlqueue" not in stderr, stderr[-3000:]  # no warning about us


def test_providers_manager_registers_trigger_queue_and_hook_module() -> None:
    """What ``airflow providers triggers`` and ``airflow providers queues`` print, without a second start-up.

    ``airflow providers hooks`` lists hooks by connection type; this provider adds no connection type (it reuses
    mssql/odbc/postgres/sqlite), so its hook is found through ``get_provider_info()["hooks"]`` instead.
    """
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert PACKAGE in manager.providers
    data = manager.providers[PACKAGE].data
    assert data["package-name"] == PACKAGE
    assert data["hooks"][0]["python-modules"] == ["airflow_sqlqueue.hooks.sqlqueue"]
    triggers = {t.trigger_class_name for t in manager.trigger if t.package_name == PACKAGE}
    assert triggers == {"airflow_sqlqueue.triggers.sqlqueue"}
    assert "airflow_sqlqueue.queues.sqlqueue.SqlQueueMessageQueueProvider" in manager.queue_class_names


def test_entry_point_and_package_name() -> None:
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.dist and ep.dist.name == PACKAGE]
    assert len(eps) == 1 and eps[0].load() is get_provider_info
    info = get_provider_info()
    assert info["package-name"] == PACKAGE == distribution(PACKAGE).metadata["Name"]
    assert info["versions"] == [__version__] == [distribution(PACKAGE).version]
    assert "connection-types" not in info  # the user's mssql/odbc/postgres/sqlite connections are reused


def test_provider_info_is_valid_for_airflow() -> None:
    tests.airflow_env.provider_info_validator().validate(get_provider_info())  # raises jsonschema.ValidationError


def _module_paths(info: dict[str, Any]) -> list[str]:
    return [m for kind in ("hooks", "operators", "sensors", "triggers") for entry in info.get(kind, [])
            for m in entry["python-modules"]]


def test_provider_info_lists_every_component() -> None:
    info = get_provider_info()
    assert _module_paths(info) == ["airflow_sqlqueue.hooks.sqlqueue", "airflow_sqlqueue.operators.drain",
                                   "airflow_sqlqueue.operators.partition", "airflow_sqlqueue.operators.send",
                                   "airflow_sqlqueue.operators.publish", "airflow_sqlqueue.operators.maintenance",
                                   "airflow_sqlqueue.operators.retry", "airflow_sqlqueue.operators.archive",
                                   "airflow_sqlqueue.sensors.sqlqueue", "airflow_sqlqueue.triggers.sqlqueue"]
    integrations = {i["integration-name"] for i in info["integrations"]}
    assert all(entry["integration-name"] in integrations
               for kind in ("hooks", "operators", "sensors", "triggers") for entry in info[kind])


def test_every_module_and_class_path_resolves() -> None:
    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    info = get_provider_info()
    for path in _module_paths(info):
        importlib.import_module(path)
    for path in info["queues"]:
        module, _, name = path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert cls.scheme == "sqlqueue"
    hooks = importlib.import_module("airflow_sqlqueue.hooks.sqlqueue")
    assert issubclass(hooks.SqlQueueHook, BaseHook)
    operators = importlib.import_module("airflow_sqlqueue.operators")
    for name in ("SqlQueueDrainOperator", "SqlQueueSendOperator", "SqlQueueCreateQueuesOperator",
                 "SqlQueuePurgeExpiredOperator", "SqlQueueCheckSchemaOperator", "SqlQueueRetryErrorsOperator",
                 "SqlQueuePublishOperator"):
        assert issubclass(getattr(operators, name), BaseOperator), name
    sensors = importlib.import_module("airflow_sqlqueue.sensors.sqlqueue")
    assert issubclass(sensors.SqlQueueSensor, BaseSensorOperator)
    triggers = importlib.import_module("airflow_sqlqueue.triggers.sqlqueue")
    for name in ("SqlQueueTrigger", "SqlQueueMessageTrigger"):
        trigger = getattr(triggers, name)
        assert issubclass(trigger, BaseTrigger), name
    # a serialized trigger's class path is what the triggerer imports
    trigger = triggers.SqlQueueTrigger(conn_id="c", queue="orders")
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)
    message_trigger = triggers.SqlQueueMessageTrigger(conn_id="c", queue_name="orders")
    classpath, kwargs = message_trigger.serialize()
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name)(**kwargs).serialize() == (classpath, kwargs)


# -- DAG files --------------------------------------------------------------------------------------------------
IMPORT_CHECK = r"""
import json, os, sys, warnings

folders = sys.argv[1:]
import airflow  # noqa: F401  (airflow's own start-up warnings are not the DAGs' business)
from airflow.dag_processing.dagbag import DagBag

result = {}
for folder in folders:
    if not os.path.isdir(folder):
        result[folder] = None
        continue
    sys.path.insert(0, folder)  # as Airflow does for its DAGs folder: helpers beside the DAGs import
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=folder)
    result[folder] = {
        "import_errors": {str(k): str(v)[-2000:] for k, v in bag.import_errors.items()},
        "dags": {dag_id: dag.fileloc for dag_id, dag in bag.dags.items()},
        "captured": {str(k): list(v) for k, v in bag.captured_warnings.items()},
        "warnings": [[w.category.__module__ + "." + w.category.__qualname__, w.filename, str(w.message)]
                     for w in caught],
    }
print("IMPORT-CHECK-RESULT" + json.dumps(result))
"""

DEPRECATION = re.compile(r"Deprecat|RemovedIn|FutureWarning|PendingDeprecation")


def _is_ours(path: str) -> bool:
    return str(ROOT) in path and ".venv" not in path


CANARY_DAG = """\
from datetime import datetime

from airflow.models.dag import DAG  # Airflow 2 style: a DeprecatedImportWarning (a FutureWarning)

with DAG("old_style", start_date=datetime(2024, 1, 1), schedule=None):
    pass
"""


@pytest.fixture(scope="module")
def import_check(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Parse every DAG folder, plus a canary folder with a deprecated import, in one fresh interpreter."""
    canary = tmp_path_factory.mktemp("canary_dags")
    (canary / "old_style.py").write_text(CANARY_DAG)
    folders = [str(f) for f in DAG_FOLDERS] + [str(canary)]
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHECK, *folders], cwd=str(ROOT),
                          env=_env(AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "tests" / "dags"), PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    marker = proc.stdout.rindex("IMPORT-CHECK-RESULT")
    result = json.loads(proc.stdout[marker + len("IMPORT-CHECK-RESULT"):])
    result["canary"] = result.pop(str(canary))
    return result


def _deprecations(result: dict[str, Any]) -> list[str]:
    """Deprecation warnings raised while the folder's files were imported, by them or by this provider."""
    found = [text for texts in result["captured"].values() for text in texts if DEPRECATION.search(text)]
    found += [" ".join(w) for w in result["warnings"]
              if DEPRECATION.search(w[0]) and (_is_ours(w[1]) or w[0].startswith("airflow"))]
    return found


@pytest.mark.parametrize("folder", DAG_FOLDERS, ids=["tests/dags", "example_dags"])
def test_dag_files_import_cleanly(import_check: dict[str, Any], folder: Path) -> None:
    result = import_check[str(folder)]
    if result is None:
        assert not folder.exists()
        return  # dags/ not written yet: nothing to check
    assert result["import_errors"] == {}, "\n\n".join(f"{k}:\n{v}" for k, v in result["import_errors"].items())
    if folder.name == "dags" and folder.parent.name == "tests":
        assert {"sqlqueue_ops", "sqlqueue_drain_pg", "sqlqueue_sensor_flow_poke",
                "sqlqueue_sensor_flow_deferrable"} <= set(result["dags"]), sorted(result["dags"])
    assert _deprecations(result) == []


def test_the_import_check_catches_deprecated_imports(import_check: dict[str, Any]) -> None:
    """The check above is not blind: it sees an Airflow 2 style import in the canary folder."""
    canary = import_check["canary"]
    assert canary["import_errors"] == {} and list(canary["dags"]) == ["old_style"]
    assert any("airflow.models.dag import DAG" in text or "Import 'DAG'" in text for text in _deprecations(canary))


def _sqlqueue_options_read() -> set[str]:
    """Every ``[sqlqueue]`` option the package reads: ``<conf>.get*("sqlqueue", "<key>")`` / ``has_option``."""
    import ast

    found = set()
    import airflow_sqlqueue

    for path in Path(airflow_sqlqueue.__file__).parent.rglob("*.py"):  # the package imported (checkout or wheel)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and (node.func.attr.startswith("get") or node.func.attr == "has_option")
                    and len(node.args) >= 2 and all(isinstance(a, ast.Constant) for a in node.args[:2])
                    and node.args[0].value == "sqlqueue"):
                found.add(node.args[1].value)
    return found


def test_every_option_the_provider_reads_is_declared() -> None:
    """``airflow config list`` shows an option only if ``get_provider_info()["config"]`` declares it."""
    read = _sqlqueue_options_read()
    assert "dashboard_edit_retry" in read  # the scan finds the reads
    declared = get_provider_info()["config"]["sqlqueue"]["options"]
    assert read == set(declared), (sorted(read - set(declared)), sorted(set(declared) - read))
    for option in declared.values():
        assert option["type"] == "boolean" and option["default"] == "False"  # off unless a deployment turns it on


def test_airflow_config_lists_the_options(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path)}
    env.pop("AIRFLOW__SQLQUEUE__DASHBOARD_EDIT_RETRY", None)
    done = subprocess.run([sys.executable, "-m", "airflow", "config", "list", "--section", "sqlqueue",
                           "--show-values", "--include-descriptions"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[sqlqueue]" in done.stdout and "dashboard_edit_retry = False" in done.stdout, done.stdout
    assert "Edit and retry" in done.stdout
