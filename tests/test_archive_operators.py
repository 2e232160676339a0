"""The archive and restore operators in a real ``dag.test()`` run, and the ``sqlqueue_archive_failed`` maintenance
DAG (configuration from the deployment; a run's conf cannot choose the location; params only narrow)."""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_sqlqueue.operators import SqlQueueArchiveFailedOperator
from airflow_sqlqueue.operators.archive import cutoff_from
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.archive.error_archive import list_archives
from tests.conftest import Db, make_db
from tests.test_maintenance_dags import CONN_ID as MAINT_CONN_ID
from tests.test_maintenance_dags import qdb  # noqa: F401  (fixture: a queue database behind MAINT_CONN_ID)

airflow_env.use_project_dags()
CONN_ID = "sqlqueue_archive"
OLD = datetime.now(timezone.utc) - timedelta(days=90)


def fail(db: Db, count: int, when: datetime, exception: str = "Boom") -> list[str]:
    ids = db.transport.send_many(db.q("error"), [OutgoingMessage(body=f"{exception}-{i}".encode(), headers={
        h.FAILED_Q: db.transport.name(db.q("orders")), h.EXCEPTION_TYPE: exception,
        h.TIME_OF_FAILURE: h.format_wire_time(when)}) for i in range(count)])
    return [str(i) for i in ids]


def error_ids(db: Db) -> list[str]:
    return sorted(str(m.id) for m in db.transport.browse(db.q("error"), limit=10_000))


def test_operators_archive_then_restore_in_a_dag_run(airflow_db: None, tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    location = tmp_path / "archive"
    monkeypatch.setenv("SQLQUEUE_TEST_ARCHIVE_LOCATION", str(location))
    for db in make_db("sqlite", tmp_path):
        airflow_env.sqlite_connection(CONN_ID, db.url[len("sqlite:///"):])
        db.transport.create_queues(["orders", "error"])
        old = fail(db, 20, OLD)
        fresh = fail(db, 5, datetime.now(timezone.utc))
        other = fail(db, 4, OLD, exception="Other")
        before = error_ids(db)
        dag = airflow_env.load_dag("sqlqueue_archive", "sqlqueue_archive_dag.py")
        run = dag.test(run_conf={"restore_ids": old[:3]})
        assert str(run.state) == "success", airflow_env.task_states(run)
        archived = airflow_env.xcom_value(run, "archive")
        assert archived["rows"] == 20 and archived["deleted"] == 20 and archived["status"] == "deleted"
        assert archived["selection"]["filter"] == {"exception_type": "Boom"}
        restored = airflow_env.xcom_value(run, "restore")
        assert restored["restored"] == 3 and restored["total_restored"] == 3
        assert error_ids(db) == sorted(fresh + other + old[:3])  # archived + left == before, 3 back once
        assert len(before) == 29
        [listed] = list_archives(str(location))
        assert listed["archive_id"] == archived["archive_id"] and listed["restored"] == 3


def test_operator_arguments_are_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="older_than or cutoff, not both"):
        SqlQueueArchiveFailedOperator(task_id="a", location="/x", older_than=3, cutoff="2024-01-01T00:00:00+00:00")
    with pytest.raises(ValueError, match="say what to archive"):
        SqlQueueArchiveFailedOperator(task_id="a", location="/x")
    with pytest.raises(ValueError, match="with its zone"):
        SqlQueueArchiveFailedOperator(task_id="a", location="/x", cutoff="2024-01-01T00:00:00")
    with pytest.raises(ValueError, match="location is empty"):
        SqlQueueArchiveFailedOperator(task_id="a", location=" ", older_than=3)
    with pytest.raises(ValueError, match="batch_size"):
        SqlQueueArchiveFailedOperator(task_id="a", location="/x", older_than=3, batch_size=0)
    with pytest.raises(ValueError, match="number of days"):
        SqlQueueArchiveFailedOperator(task_id="a", location="/x", older_than="-1")
    now = datetime(2026, 1, 31, tzinfo=timezone.utc)
    assert cutoff_from("30", None, now) == now - timedelta(days=30)
    assert cutoff_from(None, "2026-01-01T01:00:00+01:00") == datetime(2026, 1, 1, tzinfo=timezone.utc)
    SqlQueueArchiveFailedOperator(task_id="t", location="{{ var.value.loc }}", older_than="{{ params.days }}")


def test_maintenance_dag_archives_by_the_deployments_configuration(airflow_db, qdb: Db, tmp_path: Path,  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    t, q = qdb.transport, qdb.q
    t.create_queues([q("orders"), q("error")])
    old = fail(qdb, 12, OLD)
    month = fail(qdb, 6, datetime.now(timezone.utc) - timedelta(days=40))
    fresh = fail(qdb, 3, datetime.now(timezone.utc))
    location = tmp_path / "deployed-archive"
    spec = {"schemas": [qdb.schema]} if qdb.schema else {}
    config = {"connections": {MAINT_CONN_ID: {**spec, "error_queue": q("error")}},
              "archive": {"location": str(location), "older_than_days": 30, "batch_size": 5}}
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps(config))

    def run(**conf):  # a fresh DAG object each run (a run's conf must not stay in the next run's params)
        dag = airflow_env.load_project_dag("sqlqueue_archive_failed", "maintenance_archive_failed.py")
        return dag.test(run_conf=conf or None)

    # a run may ask for older messages only
    first_run = run(older_than_days=60)
    assert str(first_run.state) == "success", airflow_env.task_states(first_run)
    [first] = airflow_env.xcom_value(first_run, "archive")
    assert first["rows"] == 12 and sorted(error_ids(qdb)) == sorted(month + fresh)

    # a run's conf cannot choose where archives go, nor a younger cut-off
    elsewhere = tmp_path / "elsewhere"
    bad = run(config={**config, "archive": {"location": str(elsewhere)}})
    assert str(bad.state) == "failed" and not elsewhere.exists()
    younger = run(older_than_days=1)
    assert str(younger.state) == "failed"
    assert sorted(error_ids(qdb)) == sorted(month + fresh)

    last = run()
    assert str(last.state) == "success", airflow_env.task_states(last)
    [second] = airflow_env.xcom_value(last, "archive")
    assert second["rows"] == 6 and error_ids(qdb) == sorted(fresh)
    archives = list_archives(str(location))
    assert sorted(a["rows"] for a in archives) == [6, 12] and {a["status"] for a in archives} == {"deleted"}
    assert len(old) + len(month) + len(fresh) == sum(a["rows"] for a in archives) + len(error_ids(qdb))
