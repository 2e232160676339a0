"""The ``dags/`` folder: every DAG imports cleanly, and each maintenance DAG runs with ``dag.test()``.

The maintenance DAGs run against SQLite and PostgreSQL queue databases (each PostgreSQL test in its own schema,
which the configuration's ``schemas`` filter keeps discovery to) filled with expired, fresh and poison messages,
a queue that lost its indexes, and failed messages in the error queue. The configuration reaches the DAGs
the three supported ways: the Variable (as ``AIRFLOW_VAR_SQLQUEUE_MAINTENANCE``), the file named by
``SQLQUEUE_MAINTENANCE_CONFIG``, and the ``config`` param.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_sqlqueue.maintenance import tasks
from airflow_sqlqueue.maintenance.config import MaintenanceConfigError, load_config
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport import headers as h
from tests.conftest import Db, make_db

airflow_env.use_project_dags()

MAINTENANCE_DAGS = {
    "sqlqueue_purge_expired": "maintenance_purge_expired.py",
    "sqlqueue_check_schema": "maintenance_check_schema.py",
    "sqlqueue_queue_health": "maintenance_queue_health.py",
    "sqlqueue_provision_queues": "maintenance_provision_queues.py",
    "sqlqueue_error_queue": "error_queue_retry.py",
}
EXAMPLE_DAGS = {"example_sqlqueue_sensor_drain_mapped", "example_sqlqueue_asset_watcher",
                "example_sqlqueue_drain_with_handler", "example_sqlqueue_send_on_finish"}
CONN_ID = "sqlqueue_maint"


@pytest.fixture(params=["sqlite", "postgres"])
def qdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """A queue database behind the Airflow connection ``sqlqueue_maint``."""
    for db in make_db(request.param, tmp_path):
        if db.kind == "sqlite":
            airflow_env.sqlite_connection(CONN_ID, db.url[len("sqlite:///"):])
        else:
            airflow_env.postgres_connection(CONN_ID)
        yield db


def conn_config(db: Db, **extra) -> dict:
    """This test's connection in the configuration format (discovery limited to the test's schema)."""
    spec = {"schemas": [db.schema]} if db.schema else {}
    return {"connections": {CONN_ID: {**spec, **extra}}}


def run(dag_id: str, **conf):
    dag = airflow_env.load_project_dag(dag_id, MAINTENANCE_DAGS[dag_id])
    return dag.test(run_conf=conf or None)


def insert_poison(db: Db, queue: str, failed_q: str | None = None) -> None:
    """A row whose headers are not JSON (a poison message), never expiring."""
    table = db.transport.dialect.qualified(db.transport.address(queue))
    if db.kind == "sqlite":
        db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (?, NULL, ?, ?)",  # noqa: S608
               (str(uuid.uuid4()), "not json {", b"\x00poison"))
    else:
        db.sql(f"INSERT INTO {table} (id, expires, headers, body) VALUES (gen_random_uuid(), NULL, %s, %s)",  # noqa: S608
               ("not json {", b"\x00poison"))


def drop_indexes(db: Db, queue: str) -> None:
    address = db.transport.address(queue)
    if db.kind == "sqlite":
        rows = db.sql("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                      (address.table,))
        for (name,) in rows:
            db.sql(f'DROP INDEX "{name}"')
    else:
        rows = db.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
                      (db.schema, address.table))
        for (name,) in rows:
            db.sql(f'DROP INDEX "{db.schema}"."{name}"')


def count(db: Db, queue: str) -> int:
    return len(db.transport.browse(queue, limit=10_000))


# -- import check --------------------------------------------------------------------------------------------
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
    """In a fresh interpreter, so that warnings raised while importing Airflow and the provider are seen too."""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "PYTHONWARNINGS": "always"}
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=airflow_env.PROJECT_DAGS_FOLDER.parent,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["import_errors"] == {}, result["import_errors"]
    assert result["captured"] == {}, result["captured"]  # warnings the DagBag caught while importing each file
    assert set(MAINTENANCE_DAGS) | EXAMPLE_DAGS <= set(result["dags"]), sorted(result["dags"])
    deprecated = [w for w in result["warnings"] if w["deprecation"] and (
        "airflow" in w["message"].lower() or "/dags/" in w["file"] or "airflow_sqlqueue" in w["file"])]
    assert deprecated == [], deprecated
    for dag_id in set(MAINTENANCE_DAGS) | EXAMPLE_DAGS:
        dag = result["dags"][dag_id]
        assert len(dag["doc"]) > 300 and "configur" in dag["doc"].lower(), f"{dag_id}: doc_md missing or says nothing"
        assert "sqlqueue" in dag["tags"], dag_id


# -- configuration (no DAG run) -------------------------------------------------------------------------------
def test_configuration_sources_and_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", raising=False)
    monkeypatch.delenv("SQLQUEUE_MAINTENANCE_CONFIG", raising=False)
    assert [c.conn_id for c in load_config({}).connections] == ["sqlqueue_default"]
    path = tmp_path / "maint.yaml"
    path.write_text("connections:\n  a: {queues: [x, y]}\n  b: {queues: {z: {max_depth: 3}}}\n")
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(path))
    config = load_config({})
    assert config.source == str(path) and config.connection("b").queue_thresholds == {"z": {"max_depth": 3}}
    narrowed = load_config({"connections": ["b"], "queues": ["q"]})
    assert [(c.conn_id, c.queues) for c in narrowed.connections] == [("b", ["q"])]
    assert load_config({"config": {"connections": ["c"]}}).connections[0].conn_id == "c"
    with pytest.raises(MaintenanceConfigError, match="unknown keys.*'queue'"):
        load_config({"config": {"connections": {"a": {"queue": ["x"]}}}})
    with pytest.raises(MaintenanceConfigError, match="max_depth must be a non-negative number"):
        load_config({"config": {"thresholds": {"max_depth": "ten"}}})


def test_check_report_fails_on_open_findings_and_prints_a_table(caplog: pytest.LogCaptureFixture) -> None:
    finding = {"conn_id": "c", "queue": "q", "code": "missing_expires_index", "repairable": True, "message": "m"}
    result = {"conn_id": "c", "queue": "q", "found": [finding], "remaining": [finding], "repaired": []}
    with pytest.raises(tasks.SchemaFindingsError, match="q: missing_expires_index; trigger with repair=true"):
        tasks.check_report([result], {"fail_on_findings": True})
    rows = tasks.check_report([result], {"fail_on_findings": False})
    assert rows[0]["status"] == "open"
    assert "queue  code                   repairable  status  message" in caplog.text


def test_purge_retries_a_deadlock_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A deadlock that outlasted the transport's own retries: logged as a warning, the purge runs again."""
    from contextlib import contextmanager

    class Deadlock(Exception):
        pass

    class FakeTransport:
        calls = 0
        dialect = type("D", (), {"is_deadlock": staticmethod(lambda exc: isinstance(exc, Deadlock))})()

        def purge_expired(self, queue, *, batch_size, progress):
            FakeTransport.calls += 1
            if FakeTransport.calls == 1:
                progress(batch_size)
                raise Deadlock("deadlock detected")
            progress(batch_size)
            progress(1)
            return 3

    @contextmanager
    def fake_transport_for(conn_id, error_queue="error"):
        yield FakeTransport()

    monkeypatch.setattr(tasks, "transport_for", fake_transport_for)
    monkeypatch.setattr(tasks.time, "sleep", lambda s: None)
    result = tasks.purge_queue({"conn_id": "c", "queue": "q"}, {"batch_size": 2, "config": {"connections": ["c"]}})
    assert result == {"conn_id": "c", "queue": "q", "purged": 5} and FakeTransport.calls == 2
    assert any(r.levelname == "WARNING" and "deadlock purging q on c after 2 rows" in r.getMessage()
               for r in caplog.records), caplog.text


# -- DAG runs ---------------------------------------------------------------------------------------------------
def test_purge_expired(airflow_db, qdb: Db, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    t, q = qdb.transport, qdb.q
    t.create_queues([q("orders"), q("audit"), q("error")])
    t.send_many(q("orders"), [OutgoingMessage(f"old-{i}", time_to_be_received=0.001) for i in range(5)])
    t.send_many(q("audit"), [OutgoingMessage(f"old-{i}", time_to_be_received=0.001) for i in range(3)])
    t.send_many(q("orders"), [OutgoingMessage(f"fresh-{i}", time_to_be_received=3600) for i in range(3)]
                + [OutgoingMessage("forever")])
    insert_poison(qdb, q("orders"))
    insert_poison(qdb, q("orders"))
    time.sleep(0.1)
    # configuration through the Variable: discovery on the test's connection, small batches
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({**conn_config(qdb), "purge_batch_size": 2}))

    dr = run("sqlqueue_purge_expired")
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    names = {t.name(q(n)): n for n in ("orders", "audit", "error")}
    report = airflow_env.xcom_value(dr, "report")
    assert report == {CONN_ID: {t.name(q("orders")): 5, t.name(q("audit")): 3, t.name(q("error")): 0}}, report
    per_queue = airflow_env.xcom_value(dr, "purge")
    assert sorted((names[r["queue"]], r["purged"]) for r in per_queue) == [("audit", 3), ("error", 0), ("orders", 5)]
    assert count(qdb, q("orders")) == 6 and count(qdb, q("audit")) == 0  # fresh, forever and the poison rows


def test_check_schema_and_repair(airflow_db, qdb: Db, tmp_path: Path,  # noqa: F811
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    t, q = qdb.transport, qdb.q
    t.create_queues([q("legacy"), q("healthy")])
    drop_indexes(qdb, q("legacy"))
    expected = {"missing_expires_index"} | ({"missing_seq_index"} if qdb.kind == "postgres" else set())
    assert {f.code for f in t.check(q("legacy"))} == expected
    # configuration through the file named by SQLQUEUE_MAINTENANCE_CONFIG
    path = tmp_path / "maintenance.json"
    path.write_text(json.dumps(conn_config(qdb)))
    monkeypatch.delenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", raising=False)
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(path))

    dr = run("sqlqueue_check_schema", repair=True)
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    checked = {r["queue"]: r for r in airflow_env.xcom_value(dr, "check")}
    legacy = checked[t.name(q("legacy"))]
    assert {f["code"] for f in legacy["found"]} == expected and legacy["remaining"] == []
    assert set(legacy["repaired"]) == expected
    assert checked[t.name(q("healthy"))]["found"] == []
    rows = airflow_env.xcom_value(dr, "report")
    assert {(r["code"], r["status"]) for r in rows} == {(code, "repaired") for code in expected}
    assert t.check(q("legacy")) == []


def test_queue_health_fails_when_a_threshold_is_crossed(airflow_db, qdb: Db, tmp_path: Path,  # noqa: F811
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    t, q = qdb.transport, qdb.q
    t.create_queues([q("deep"), q("stale"), q("calm")])
    t.send_many(q("deep"), [f"m{i}" for i in range(5)])
    old = h.format_wire_time(datetime.now(timezone.utc) - timedelta(hours=2))
    t.send(q("stale"), OutgoingMessage("late", headers={h.TIME_SENT: old}))
    t.send(q("calm"), "fine")
    alert_file = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("SQLQUEUE_TEST_ALERT_FILE", str(alert_file))
    table = f'"{qdb.schema}"."health_samples"' if qdb.schema else "health_samples"
    config = conn_config(qdb, thresholds={"max_depth": 3},
                         record_health_samples=True)
    config["connections"][CONN_ID]["queues"] = {q("deep"): {}, q("stale"): {"max_age_seconds": 600},
                                                q("calm"): {}}
    config.update(alert_callback="tests.airflow_env.record_alert", health_samples_table=table)

    dr = run("sqlqueue_queue_health", config=config)
    assert str(dr.state) == "failed"
    states = airflow_env.task_states(dr)
    assert states["report"] == "failed" and states["sample[0]"] == "success", states
    samples = {s["queue"]: s for s in airflow_env.xcom_value(dr, "sample")}
    assert samples[t.name(q("deep"))]["depth"] == 5 and samples[t.name(q("deep"))]["breaches"] == ["depth 5 > 3"]
    assert samples[t.name(q("stale"))]["oldest_age_seconds"] > 7000
    assert samples[t.name(q("stale"))]["breaches"][0].startswith("oldest message")
    assert samples[t.name(q("calm"))]["breaches"] == []
    alerts = [json.loads(line) for line in alert_file.read_text().splitlines()]
    assert len(alerts) == 1 and sorted(s["queue"] for s in alerts[0]) == sorted([t.name(q("deep")),
                                                                                   t.name(q("stale"))])
    recorded = qdb.sql(f"SELECT queue_name, depth FROM {table} ORDER BY queue_name")  # noqa: S608
    assert sorted(recorded) == sorted((t.name(q(n)), d) for n, d in (("deep", 5), ("stale", 1), ("calm", 1)))


def test_provision_queues(airflow_db, qdb: Db) -> None:  # noqa: F811
    t, q = qdb.transport, qdb.q
    dr = run("sqlqueue_provision_queues", conn_id=CONN_ID, queues=[q("p_orders"), q("p_replies")],
             delayed_queues=[q("p_endpoint")])
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    result = airflow_env.xcom_value(dr, "provision")
    assert result["created"] == [t.name(q("p_orders")), t.name(q("p_replies"))]
    assert result["delayed"] == [t.name(q("p_endpoint"))] and result["findings"] == []
    assert all(t.exists(q(n)) for n in ("p_orders", "p_replies", "p_endpoint"))
    t.send(q("p_endpoint"), OutgoingMessage("later", delay=3600))
    assert t.peek(q("p_endpoint")) == 0  # it went to the delayed table, which exists


def test_error_queue_lists_groups_and_returns_selected(airflow_db, qdb: Db) -> None:  # noqa: F811
    t, q = qdb.transport, qdb.q
    t.create_queues([q("orders"), q("billing"), q("error")])

    def failed(queue: str, kind: str, n: int) -> list[OutgoingMessage]:
        return [OutgoingMessage(f"{kind}-{i}", headers={h.FAILED_Q: queue, h.EXCEPTION_TYPE: kind,
                                                        h.EXCEPTION_MESSAGE: f"{kind} number {i}",
                                                        h.TIME_OF_FAILURE: h.format_wire_time(), "keep": "me"})
                for i in range(n)]

    t.send_many(q("error"), failed(q("orders"), "System.InvalidOperationException", 3)
                + failed(q("orders"), "System.TimeoutException", 2) + failed(q("billing"), "System.TimeoutException", 1)
                + failed(q("gone"), "System.TimeoutException", 1))
    insert_poison(qdb, q("error"))

    dr = run("sqlqueue_error_queue", conn_id=CONN_ID, error_queue=q("error"), retry=True,
             exception_type="TimeoutException", failed_q=q("orders"))
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    [listing] = airflow_env.xcom_value(dr, "list_failed")
    groups = {(g["failed_q"], g["exception_type"]): g["count"] for g in listing["groups"]}
    assert groups == {(q("orders"), "System.InvalidOperationException"): 3, (q("orders"), "System.TimeoutException"): 2,
                      (q("billing"), "System.TimeoutException"): 1, (q("gone"), "System.TimeoutException"): 1,
                      ("(headers not JSON)", "-"): 1}, groups
    [summary] = airflow_env.xcom_value(dr, "return_selected")
    assert summary["returned"] == {t.name(q("orders")): 2} and summary["total_returned"] == 2, summary
    back = t.browse(q("orders"))
    assert sorted(r.body for r in back) == [b"System.TimeoutException-0", b"System.TimeoutException-1"]
    assert all(h.FAILED_Q not in json.loads(r.headers) and json.loads(r.headers)["keep"] == "me" for r in back)
    assert count(qdb, q("error")) == 6


def test_error_queue_lists_only_without_retry(airflow_db, tmp_path: Path) -> None:  # noqa: F811
    """No ``retry`` param: the listing runs, the return task is skipped, nothing moves (SQLite only)."""
    path = tmp_path / "q.db"
    airflow_env.sqlite_connection(CONN_ID, path)
    from airflow_sqlqueue.transport import SqlQueueTransport

    with SqlQueueTransport.from_url(f"sqlite:///{path}") as t:
        t.create_queues(["orders", "error"])
        t.send(t.error_queue, OutgoingMessage("x", headers={h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "E"}))
        dr = run("sqlqueue_error_queue", config={"connections": [CONN_ID]})
        states = airflow_env.task_states(dr)
        assert states["return_selected[0]"] == "skipped" and str(dr.state) == "success", states
        assert airflow_env.xcom_value(dr, "list_failed")[0]["total"] == 1
        assert len(t.browse("error")) == 1 and t.peek("orders") == 0
        assert sqlite3.connect(path).execute("SELECT count(*) FROM error").fetchone() == (1,)


def test_example_send_on_finish_and_drain_with_handler(airflow_db, tmp_path: Path,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two example DAGs as a user would run them: connection from the environment, default params (SQLite)."""
    from airflow_sqlqueue.transport import SqlQueueTransport

    path = tmp_path / "examples.db"
    airflow_env.sqlite_connection("sqlqueue_example", path)
    monkeypatch.setenv("SQLQUEUE_EXAMPLE_CONN_ID", "sqlqueue_example")
    with SqlQueueTransport.from_url(f"sqlite:///{path}") as t:
        t.create_queues(["Sales", "orders", "replies", "error"])
        t.send_many("orders", [json.dumps({"order_id": i}) for i in range(3)] + ["{}"])

        dr = airflow_env.load_project_dag("example_sqlqueue_send_on_finish", "example_send_on_finish.py").test()
        assert str(dr.state) == "success", airflow_env.task_states(dr)
        [sent] = t.browse("Sales")
        assert json.loads(sent.body)["total"] == 16
        assert json.loads(sent.headers)[h.ENCLOSED_MESSAGE_TYPES] == "Reports.DailySalesReady, Reports.Messages"

        dag = airflow_env.load_project_dag("example_sqlqueue_drain_with_handler", "example_drain_with_handler.py")
        dr = dag.test()
        assert str(dr.state) == "success", airflow_env.task_states(dr)
        summary = airflow_env.xcom_value(dr, "drain")
        assert (summary["succeeded"], summary["failed"]) == (3, 1), summary
        assert sorted(json.loads(r.body)["order_id"] for r in t.browse("replies")) == [0, 1, 2]
        assert len(t.browse("error")) == 1 and t.peek("orders") == 0
