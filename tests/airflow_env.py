"""Airflow environment for tests that import Airflow: import this module before anything imports ``airflow``.

Sets defaults only (a value already in the environment wins): a throw-away ``AIRFLOW_HOME`` so nothing is
written to ``~/airflow``, no example DAGs, and ``tests/dags`` as the DAGs folder (a DAG run by ``dag.test()``
must live inside it). ``AIRFLOW__CORE__UNIT_TEST_MODE`` is deliberately not set: it replaces the whole
configuration with Airflow's own ``unit_tests.cfg`` (its DAGs folder, LocalExecutor, examples on), which is
meant for Airflow's test suite, not for a provider's.

Also helpers for DAG-run tests: the ``airflow_db`` fixture (metadata database migrated once per session),
connections as ``AIRFLOW_CONN_<ID>`` variables, loading a DAG from ``tests/dags``, and reading a run's XComs.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

DAGS_FOLDER = Path(__file__).resolve().parent / "dags"
if "AIRFLOW_HOME" not in os.environ:  # a throw-away home, removed when the test session ends
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="sqlqueue-airflow-home-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
AIRFLOW_HOME = os.environ["AIRFLOW_HOME"]
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(DAGS_FOLDER))

#: The test PostgreSQL server and database (the same URL as tests/conftest.py's ``PG_URL``).
PG_URL = os.environ.get("SQLQUEUE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def pg_connection_fields(url: str = PG_URL) -> dict[str, Any]:
    """The fields of an Airflow ``postgres`` connection to ``url`` (a libpq URL; its query becomes the extra)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    fields: dict[str, Any] = {"conn_type": "postgres", "host": parts.hostname or "127.0.0.1",
                              "port": parts.port or 5432, "login": unquote(parts.username or "postgres"),
                              "schema": unquote(parts.path.lstrip("/")) or "postgres"}
    password = unquote(parts.password) if parts.password else query.pop("password", None)
    if password:
        fields["password"] = password
    if query:
        fields["extra"] = query
    return fields


#: The test database as Airflow connection fields; OpenLineage names it ``postgres://<host>:<port>``.
PG_CONNECTION = pg_connection_fields()
PG_NAMESPACE = f"postgres://{PG_CONNECTION['host']}:{PG_CONNECTION['port']}"


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[None]:
    """The metadata database (SQLite in ``AIRFLOW_HOME``), reset and migrated once per test session."""
    from airflow.utils import db

    db.resetdb()
    yield


def set_connection(conn_id: str, fields: dict[str, Any]) -> str:
    """Register an Airflow connection as an ``AIRFLOW_CONN_<ID>`` variable (JSON form); return its id."""
    os.environ["AIRFLOW_CONN_" + conn_id.upper()] = json.dumps(fields)
    return conn_id


def sqlite_connection(conn_id: str, path: str | Path) -> str:
    """A ``sqlite`` connection to a database file (JSON form: four-slash URIs do not work)."""
    return set_connection(conn_id, {"conn_type": "sqlite", "host": str(Path(path).resolve())})


def postgres_connection(conn_id: str, **overrides: Any) -> str:
    """A ``postgres`` connection to the test database (``SQLQUEUE_TEST_PG_URL``)."""
    return set_connection(conn_id, {**PG_CONNECTION, **overrides})


def load_dag(dag_id: str, filename: str) -> Any:
    """A DAG from a file in ``tests/dags``, failing on import errors."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER / filename))
    assert bag.import_errors == {}, bag.import_errors
    assert dag_id in bag.dags, f"{dag_id} not in {sorted(bag.dags)}"
    return bag.dags[dag_id]


def xcom_value(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """The XCom a task pushed in a run (a list in map-index order for a mapped task)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=dag_run.run_id, key=key, dag_ids=dag_run.dag_id,
                                                  task_ids=task_id)).all()
        values = sorted((row.map_index, XComModel.deserialize_value(row)) for row in rows)
    if not values:
        raise KeyError(f"no XCom {key!r} from task {task_id!r} in run {dag_run.run_id}")
    if len(values) == 1 and values[0][0] < 0:
        return values[0][1]
    return [value for _, value in values]


def task_states(dag_run: Any) -> dict[str, str]:
    """``task_id[map_index]`` to state for every task instance of a run (for assertion messages)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = dag_run.get_task_instances(session=session)
        return {(ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"): str(ti.state) for ti in tis}


# -- the provider's DAG folder, example_dags/ (maintenance and example DAGs) --------------------------------
# the imported package's folder: the checkout's, or an installed wheel's (scripts/check-install-matrix.sh)
PROJECT_DAGS_FOLDER = Path(importlib.util.find_spec("airflow_sqlqueue.example_dags").submodule_search_locations[0])
PROJECT_BUNDLE = "sqlqueue-dags"


def use_project_dags() -> None:
    """Add ``example_dags/`` as a second DAG bundle beside ``dags-folder`` (``tests/dags``), for ``dag.test()``.

    ``dag.test()`` serializes the DAG by parsing the bundle that holds its file; a DAG loaded from outside every
    bundle fails with "the dag is not serialized". The bundle list is read from the configuration each time.
    """
    os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps([
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        {"name": PROJECT_BUNDLE, "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(PROJECT_DAGS_FOLDER)}},
    ])


def load_project_dag(dag_id: str, filename: str) -> Any:
    """A DAG from a file in ``example_dags/`` (call ``use_project_dags()`` first), failing on import errors."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(PROJECT_DAGS_FOLDER / filename))
    assert bag.import_errors == {}, bag.import_errors
    assert dag_id in bag.dags, f"{dag_id} not in {sorted(bag.dags)}"
    return bag.dags[dag_id]


def record_alert(context: Any) -> None:
    """An ``alert_callback`` for tests: appends the breaches it got to ``$SQLQUEUE_TEST_ALERT_FILE`` (JSON lines)."""
    with open(os.environ["SQLQUEUE_TEST_ALERT_FILE"], "a", encoding="utf-8") as f:
        f.write(json.dumps(context["sqlqueue_breaches"]) + "\n")


def _alert_notifier() -> Any:
    from airflow.sdk import BaseNotifier

    class RecordingNotifier(BaseNotifier):
        """An Airflow notifier for tests: appends its rendered ``text`` to ``$SQLQUEUE_TEST_ALERT_FILE``."""

        template_fields = ("text",)

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

        def notify(self, context: Any) -> None:
            with open(os.environ["SQLQUEUE_TEST_ALERT_FILE"], "a", encoding="utf-8") as f:
                f.write(json.dumps({"text": self.text, "breaches": context["sqlqueue_breaches"]}) + "\n")

    return RecordingNotifier(text="{{ dag.dag_id }}: {{ sqlqueue_breaches | length }} queues over threshold")


def __getattr__(name: str) -> Any:
    """``alert_notifier``: an ``alert_callback`` that is an Airflow notifier instance (as a user would configure a
    SlackNotifier), made on first use so that importing this module does not import Airflow."""
    if name == "alert_notifier":
        globals()[name] = _alert_notifier()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def provider_info_validator() -> Any:
    """A validator for ``get_provider_info()``: Airflow's own ``provider_info.schema.json``, read from the package."""
    from importlib.resources import files

    import jsonschema

    schema = json.loads((files("airflow") / "provider_info.schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)
