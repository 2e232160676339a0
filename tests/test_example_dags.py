"""The ``example_dags/`` folder: every DAG imports cleanly (no errors, no deprecated imports, a ``doc_md``), and the
example DAGs run with ``dag.test()`` the way a user runs them: connection and queues from the environment and
params, default values otherwise (SQLite queue database)."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.wire import headers as h

airflow_env.use_project_dags()

MAINTENANCE_DAGS = {"sqlqueue_purge_expired", "sqlqueue_check_schema", "sqlqueue_queue_health",
                    "sqlqueue_provision_queues", "sqlqueue_error_queue", "sqlqueue_archive_failed",
                    "sqlqueue_error_queue_batch_retry"}
EXAMPLE_DAGS = {"example_sqlqueue_sensor_drain_mapped", "example_sqlqueue_asset_watcher",
                "example_sqlqueue_drain_with_handler", "example_sqlqueue_send_on_finish"}

# Run in a fresh interpreter, so that warnings raised while importing Airflow and the provider are seen too.
IMPORT_CHECK = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tests.airflow_env as airflow_env
    from airflow.dag_processing.dagbag import DagBag
    bag = DagBag(dag_folder=str(airflow_env.PROJECT_DAGS_FOLDER))
print(json.dumps({
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "captured": {str(k): list(v) for k, v in bag.captured_warnings.items()},
    "dags": {d.dag_id: {"doc": d.doc_md or "", "tags": sorted(d.tags)} for d in bag.dags.values()},
    "warnings": [{"category": w.category.__name__, "deprecation": "deprecat" in w.category.__name__.lower()
                  or "deprecated" in str(w.message).lower()
                  or issubclass(w.category, DeprecationWarning | PendingDeprecationWarning | FutureWarning),
                  "file": w.filename, "line": w.lineno, "message": str(w.message)} for w in caught],
}))
"""


def test_every_dag_imports_without_errors_or_deprecation_warnings(tmp_path: Path) -> None:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "PYTHONWARNINGS": "always"}
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=Path(__file__).resolve().parent.parent,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["import_errors"] == {}, result["import_errors"]
    assert result["captured"] == {}, result["captured"]  # warnings the DagBag caught while importing each file
    assert MAINTENANCE_DAGS | EXAMPLE_DAGS <= set(result["dags"]), sorted(result["dags"])
    deprecated = [w for w in result["warnings"] if w["deprecation"] and (
        "airflow" in w["message"].lower() or "/example_dags/" in w["file"] or "airflow_sqlqueue" in w["file"])]
    assert deprecated == [], deprecated
    for dag_id in MAINTENANCE_DAGS | EXAMPLE_DAGS:
        dag = result["dags"][dag_id]
        assert len(dag["doc"]) > 300 and "configur" in dag["doc"].lower(), f"{dag_id}: doc_md missing or says nothing"
        assert "sqlqueue" in dag["tags"], dag_id


def test_no_dag_uses_an_import_airflow_3_moved_or_removed() -> None:
    """Old paths Airflow 3 still serves silently (``from airflow.models import DAG`` warns nothing at runtime):
    ruff's Airflow rules know every moved name (AIR301 removed, AIR302/AIR312 moved to a provider, AIR311 moved
    to ``airflow.sdk``), and AIR201 asks for an explicit ``multiple_outputs`` on tasks returning a dict."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra)")
    done = subprocess.run([ruff, "check", "--isolated", "--preview", "--select", "AIR", "--output-format", "concise",
                           str(airflow_env.PROJECT_DAGS_FOLDER)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# -- example DAGs run --------------------------------------------------------------------------------------------
@pytest.fixture
def example_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A SQLite queue database behind the connection the examples are told to use."""
    path = tmp_path / "examples.db"
    airflow_env.sqlite_connection("sqlqueue_example", path)
    monkeypatch.setenv("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_example")
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as transport:
        yield transport


def test_example_sensor_drain_mapped(airflow_db, example_db: SqlQueueTransport,  # noqa: F811
                                    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> None:
    t = example_db
    t.create_queues(["incoming", "error"])
    ids = t.send_many("incoming", [OutgoingMessage(json.dumps({"n": i, "note": f"private-{i}"}), headers={
        h.ENCLOSED_MESSAGE_TYPES: "Orders.OrderPlaced"}) for i in range(3)])

    dag = airflow_env.load_project_dag("example_sqlqueue_sensor_drain_mapped", "example_sensor_drain_mapped.py")
    caplog.set_level(logging.INFO)
    dr = dag.test(run_conf={"queue": "incoming", "min_messages": 3})
    out, err = capfd.readouterr()  # the task SDK logs through structlog to the process's output
    assert "private-" not in out + err + caplog.text  # issue 29: no message body in a log at INFO
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    assert airflow_env.xcom_value(dr, "wait") == 3  # the depth the sensor saw
    processed = airflow_env.xcom_value(dr, "process")
    assert sorted(p["id"] for p in processed) == sorted(str(i) for i in ids)
    assert {p["type"] for p in processed} == {"Orders.OrderPlaced"}
    assert t.peek("incoming") == 0 and t.browse("error") == []


def test_example_send_on_finish_and_drain_with_handler(airflow_db, example_db: SqlQueueTransport) -> None:  # noqa: F811
    t = example_db
    t.create_queues(["Sales", "orders", "confirmations", "error"])
    t.send_many("orders", [json.dumps({"order_id": i}) for i in range(3)] + ["{}"])

    dr = airflow_env.load_project_dag("example_sqlqueue_send_on_finish", "example_send_on_finish.py").test()
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    [sent] = t.browse("Sales")
    assert json.loads(sent.body)["total"] == 16
    assert json.loads(sent.headers)[h.ENCLOSED_MESSAGE_TYPES] == "Reports.DailySalesReady, Reports.Messages"
    assert airflow_env.xcom_value(dr, "notify") == [str(sent.id)]

    dag = airflow_env.load_project_dag("example_sqlqueue_drain_with_handler", "example_drain_with_handler.py")
    dr = dag.test(run_conf={"replies_queue": "confirmations"})
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    summary = airflow_env.xcom_value(dr, "drain")
    assert (summary["succeeded"], summary["failed"]) == (3, 1), summary
    assert sorted(json.loads(r.body)["order_id"] for r in t.browse("confirmations")) == [0, 1, 2]
    assert all(json.loads(r.headers)[h.CORRELATION_ID] for r in t.browse("confirmations"))
    [failed] = t.browse("error")  # the order without an order_id, after its retries, with failure headers
    assert json.loads(failed.headers)[h.FAILED_Q] == "orders" and t.peek("orders") == 0


def test_example_asset_watcher_watches_the_configured_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scheduled by an ``AssetWatcher`` whose trigger is the ack-mode message trigger on the configured queue."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.triggers.base import BaseEventTrigger

    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueMessageTrigger

    monkeypatch.setenv("SQLQUEUE_EXAMPLE_CONN_ID", "events_db")
    monkeypatch.setenv("SQLQUEUE_EXAMPLE_EVENTS_QUEUE", "billing.events")
    bag = DagBag(dag_folder=str(airflow_env.PROJECT_DAGS_FOLDER / "example_asset_watcher.py"))
    assert bag.import_errors == {}, bag.import_errors
    dag = bag.dags["example_sqlqueue_asset_watcher"]
    [asset] = list(dag.timetable.asset_condition.objects)
    [watcher] = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, SqlQueueMessageTrigger) and isinstance(trigger, BaseEventTrigger)
    kwargs = trigger.serialize()[1]
    assert (kwargs["conn_id"], kwargs["queue_name"]) == ("events_db", "billing.events")
    assert trigger.shared_stream_key() is not None  # ack mode: rows deleted only after Airflow stored the events
    assert [t.task_id for t in dag.tasks] == ["handle"]
    # a killed worker's messages are only in the run's events (the queue no longer holds them): a retry handles them
    assert dag.tasks[0].retries >= 1


def test_the_maintenance_docs_table_gives_each_dag_its_real_schedule() -> None:
    """docs/maintenance.md lists every shipped DAG with the schedule it has (a copied example keeps it)."""
    from datetime import timedelta

    from airflow.dag_processing.dagbag import DagBag

    words = {None: "manual", "@daily": "daily", "@hourly": "hourly", timedelta(minutes=10): "every 10 min"}
    bag = DagBag(dag_folder=str(airflow_env.PROJECT_DAGS_FOLDER))
    docs = (Path(__file__).resolve().parents[1] / "docs" / "maintenance.md").read_text(encoding="utf-8")
    rows = {}
    for line in docs.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4 and cells[1].endswith(".py`"):
            rows[cells[0].strip("`")] = cells[2]
    assert set(rows) == MAINTENANCE_DAGS | EXAMPLE_DAGS
    for dag_id, written in rows.items():
        schedule = bag.dags[dag_id].schedule
        expected = "messages" if isinstance(schedule, list | tuple) or type(schedule).__name__.startswith("Asset") \
            else words[schedule]
        assert written.split(" (")[0] == expected, (dag_id, written, schedule)
