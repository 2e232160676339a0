"""The maintenance DAGs' building blocks without a DAG run: configuration, the findings report, the health
samples table (on SQLite and PostgreSQL, and its T-SQL parsed with sqlglot)."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before airflow is imported)

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_sqlqueue.maintenance import health, tasks
from airflow_sqlqueue.maintenance.config import MaintenanceConfigError, load_config
from tests.conftest import Db


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", raising=False)
    monkeypatch.delenv("SQLQUEUE_MAINTENANCE_CONFIG", raising=False)


def test_configuration_sources_and_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = load_config({})
    assert [(c.conn_id, c.queues) for c in default.connections] == [("sqlqueue_default", None)]  # discover
    path = tmp_path / "maint.yaml"
    path.write_text("connections:\n  a: {queues: [x, y]}\n  b: {queues: {z: {max_depth: 3}}}\n")
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(path))
    config = load_config({})
    assert config.source == f"file {path}" and config.connection("b").queue_thresholds == {"z": {"max_depth": 3}}
    narrowed = load_config({"connections": ["b"], "queues": ["q"]})
    assert [(c.conn_id, c.queues) for c in narrowed.connections] == [("b", ["q"])]
    # the Variable wins over the file; the config param replaces both for one run, within what they configure
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({"connections": ["v", "w"]}))
    assert [c.conn_id for c in load_config({}).connections] == ["v", "w"]
    assert [c.conn_id for c in load_config({"config": {"connections": ["w"]}}).connections] == ["w"]
    with pytest.raises(MaintenanceConfigError, match="connection 'c' is not configured for these DAGs"):
        load_config({"config": {"connections": ["c"]}})


@pytest.mark.parametrize(("config", "message"), [
    ({"connections": {"a": {"queue": ["x"]}}}, r"connection 'a': unknown keys \['queue'\]"),
    ({"thresholds": {"max_depth": "ten"}}, "thresholds: max_depth must be a non-negative number, got 'ten'"),
    ({"purge_batch_size": 0}, "purge_batch_size must be a positive integer, got 0"),
    ({"record_health_samples": "false"}, "record_health_samples must be true or false, got 'false'"),
    ({"connections": {"a": {"record_health_samples": 1}}}, "connection 'a': record_health_samples must be true"),
    ({"health_samples_retention_days": -1}, "health_samples_retention_days must be a positive number"),
    ({"inbox_retention_days": 0}, "inbox_retention_days must be a positive number of days or null"),
    ({"connections": {"a": {"queues": [1]}}}, "connection 'a': 'queues' must list queue addresses"),
    ({"connections": {"a": {"error_queue": 5}}}, "connection 'a': error_queue must be a non-empty string"),
    ({"connections": []}, "'connections' must be an object"),
    ({"connection": {}}, r"unknown keys \['connection'\]"),
])
def test_bad_configuration_names_the_key(config: dict, message: str) -> None:
    with pytest.raises(MaintenanceConfigError, match=message) as caught:
        load_config({"config": config})
    assert str(caught.value).startswith("the 'config' param: ") and "\n" not in str(caught.value)


def test_bad_configuration_fails_the_task_without_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken Variable or file: an AirflowFailException (no retry would help) that names the source."""
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", "{not json")
    with pytest.raises(tasks.BadConfigurationError, match="Variable 'sqlqueue_maintenance' is not valid JSON"):
        tasks.find_targets({})
    monkeypatch.delenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE")
    path = tmp_path / "maintenance.yaml"
    path.write_text("purge_batch_size: lots\n")
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(path))
    with pytest.raises(tasks.BadConfigurationError, match=f"file {path}: purge_batch_size must be a positive"):
        tasks.purge_queue({"conn_id": "c", "queue": "q"}, {})


def test_check_report_fails_on_open_findings_and_prints_a_table(caplog: pytest.LogCaptureFixture) -> None:
    finding = {"conn_id": "c", "queue": "q", "code": "missing_expires_index", "repairable": True, "message": "m"}
    result = {"conn_id": "c", "queue": "q", "found": [finding], "remaining": [finding], "repaired": []}
    with pytest.raises(tasks.SchemaFindingsError, match="q: missing_expires_index; trigger with repair=true"):
        tasks.check_report([result], {"fail_on_findings": True})
    rows = tasks.check_report([result], {"fail_on_findings": False})
    assert rows[0]["status"] == "open"
    assert "conn_id  queue  code                   repairable  status  message" in caplog.text


# -- the health samples table --------------------------------------------------------------------------------
def test_health_samples_table_records_reads_back_and_keeps_a_bounded_history(db: Db) -> None:
    t = db.transport
    table = f'"{db.schema}"."samples"' if db.schema else "samples"
    now = datetime.now(timezone.utc).replace(microsecond=0)  # a whole second: the text form must still sort
    orders, audit = t.name(db.q("orders")), t.name(db.q("audit"))

    def sample(conn_id: str, queue: str, depth: int) -> dict:
        return {"conn_id": conn_id, "queue": queue, "depth": depth, "oldest_age_seconds": 1.5}

    for hours_ago, depth in ((50, 1), (5, 2), (1, 3)):
        health.record_samples(t, [sample("a", orders, depth), sample("a", audit, 9), sample("b", orders, 7)],
                              table, now=now - timedelta(hours=hours_ago))
    done = health.record_samples(t, [sample("a", orders, 4)], table, retention_days=1, now=now)
    assert done == {"recorded": 1, "deleted": 3}  # the three samples of 50 hours ago

    last_6h = health.recent_samples(t, table, "a", db.q("orders"), now - timedelta(hours=6))
    assert [(s["sampled_at"], s["depth"]) for s in last_6h] == [
        (now - timedelta(hours=5), 2), (now - timedelta(hours=1), 3), (now, 4)]
    assert last_6h[0]["oldest_age_seconds"] == 1.5
    assert [s["depth"] for s in health.recent_samples(t, table, "b", orders, now - timedelta(days=3))] == [7, 7]
    # the "last N hours of queue Q" query has its index, and so has the retention delete
    if db.kind == "sqlite":
        index_columns = {name: [c[2] for c in db.sql(f'PRAGMA index_info("{name}")')]
                         for (name,) in db.sql("SELECT name FROM sqlite_master WHERE type = 'index' "
                                               "AND tbl_name = 'samples'")}
    else:
        index_columns = {name: [c.strip() for c in definition.split("(")[1].rstrip(")").split(",")]
                         for name, definition in db.sql("SELECT indexname, indexdef FROM pg_indexes WHERE "
                                                        "schemaname = %s AND tablename = 'samples'", (db.schema,))}
    assert sorted(index_columns.values()) == [["conn_id", "queue_name", "sampled_at"], ["sampled_at"]]


def test_health_samples_table_name_is_validated(db: Db) -> None:
    with pytest.raises(ValueError, match="health_samples_table 'x.x00y' is not a valid table name: .*NUL"):
        health.record_samples(db.transport, [], "x\x00y")


def test_mssql_health_sample_statements_parse_as_tsql() -> None:
    sqlglot = pytest.importorskip("sqlglot")
    from airflow_sqlqueue.transport.dialects import get_dialect

    samples = health.SamplesTable(get_dialect("mssql"), "sqlqueue_health_samples@[ops]")
    assert samples.identifiers["samples"].endswith("[ops].[sqlqueue_health_samples]")
    for name, statement in health._statements("mssql").items():
        sql = statement.compile("qmark").fill(samples.identifiers)
        assert sqlglot.parse(sql, read="tsql"), name  # each driver's text: tests/test_mssql_driver_statements.py


def test_health_report_warns_instead_of_failing_and_survives_a_broken_alert_callback(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = [{"conn_id": "c", "queue": "q", "depth": 9, "oldest_age_seconds": None, "max_depth": 3,
                "max_age_seconds": None, "breaches": ["depth 9 > 3"]}]
    config = {"connections": ["c"], "alert_callback": "tests.no_such_module.notifier"}
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps(config))
    assert tasks.health_report(samples, {"on_breach": "warn"}) == samples
    assert "alert_callback 'tests.no_such_module.notifier' cannot be imported" in caplog.text
    assert "thresholds crossed: q on c: depth 9 > 3" in caplog.text
    with pytest.raises(tasks.QueueHealthError, match="thresholds crossed: q on c: depth 9 > 3"):
        tasks.health_report(samples, {})


def test_every_dialect_has_the_same_health_statements() -> None:
    names = {d: set(health._statements(d)) for d in ("sqlite", "postgres", "mssql")}
    assert names["sqlite"] == names["postgres"] == names["mssql"], names


def test_an_unknown_connection_fails_at_once_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({"connections": ["no_such_conn"]}))
    with pytest.raises(tasks.BadConfigurationError, match="connection 'no_such_conn' is not defined in Airflow"):
        tasks.find_targets({})


def test_samples_of_every_connection_go_to_the_central_store(tmp_path: Path) -> None:
    """``health_samples_conn_id``: one database holds the samples of all connections, told apart by conn_id;
    a connection with ``record_health_samples: false`` records nothing."""
    import sqlite3

    from airflow_sqlqueue.maintenance.config import parse_config
    from tests.airflow_env import sqlite_connection

    sqlite_connection("metrics_db", tmp_path / "metrics.db")
    config = parse_config({"connections": {"a": {}, "b": {}, "c": {"record_health_samples": False}},
                           "record_health_samples": True, "health_samples_conn_id": "metrics_db"})
    samples = [{"conn_id": c, "queue": "orders", "depth": d, "oldest_age_seconds": None}
               for c, d in (("a", 1), ("b", 2), ("c", 3))]
    tasks.record(config, samples)
    rows = sqlite3.connect(tmp_path / "metrics.db").execute(
        "SELECT conn_id, queue_name, depth FROM sqlqueue_health_samples ORDER BY conn_id").fetchall()
    assert rows == [("a", "orders", 1), ("b", "orders", 2)]


def test_alert_callback_may_be_a_plain_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLQUEUE_TEST_ALERT_FILE", str(tmp_path / "alerts.jsonl"))
    samples = [{"conn_id": "c", "queue": "q", "depth": 0, "oldest_age_seconds": 900.0, "max_depth": None,
                "max_age_seconds": 60, "breaches": ["oldest message 900s old > 60s"]}]
    config = {"connections": ["c"], "alert_callback": "tests.airflow_env.record_alert"}
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps(config))
    with pytest.raises(tasks.QueueHealthError):
        tasks.health_report(samples, {})
    assert json.loads((tmp_path / "alerts.jsonl").read_text()) == samples


def test_check_report_lists_what_was_not_checked_without_failing() -> None:
    unchecked = {"conn_id": "c", "queue": "q", "code": "heap_bloat_not_checked", "repairable": False,
                 "message": "heap bloat not checked: no sys.allocation_units", "not_checked": True}
    result = {"conn_id": "c", "queue": "q", "found": [unchecked], "remaining": [unchecked], "repaired": []}
    rows = tasks.check_report([result], {"fail_on_findings": True})
    assert [r["status"] for r in rows] == ["not checked"]
    problem = {**unchecked, "code": "missing_seq_index", "not_checked": False}
    both = {**result, "found": [unchecked, problem], "remaining": [unchecked, problem]}
    with pytest.raises(tasks.SchemaFindingsError, match="1 schema/index findings open: q: missing_seq_index;"):
        tasks.check_report([both], {"fail_on_findings": True})
