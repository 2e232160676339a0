"""Each maintenance DAG of ``airflow_sqlqueue/example_dags/`` runs with ``dag.test()``, and what it did is asserted.

The maintenance DAGs run against SQLite and PostgreSQL queue databases (each PostgreSQL test in its own schema,
which the configuration's ``schemas`` filter keeps discovery to) filled with expired, fresh and poison messages,
a queue that lost its indexes, and failed messages in the error queue. The configuration reaches the DAGs
the three supported ways: the Variable (as ``AIRFLOW_VAR_SQLQUEUE_MAINTENANCE``), the file named by
``SQLQUEUE_MAINTENANCE_CONFIG``, and the ``config`` param. What the task logs say (per-queue counts, the
findings table, deadlock warnings) is read from the log records the tasks emit in process.
"""

from __future__ import annotations  # noqa: I001  (tests.airflow_env must be imported before airflow)

import tests.airflow_env as airflow_env
from tests.airflow_env import airflow_db  # noqa: F401  (fixture)

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_sqlqueue.maintenance import health, tasks
from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import Db, make_db

airflow_env.use_project_dags()

MAINTENANCE_DAGS = {
    "sqlqueue_purge_expired": "maintenance_purge_expired.py",
    "sqlqueue_check_schema": "maintenance_check_schema.py",
    "sqlqueue_queue_health": "maintenance_queue_health.py",
    "sqlqueue_provision_queues": "maintenance_provision_queues.py",
    "sqlqueue_error_queue": "error_queue_retry.py",
}
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
    else:  # the keys first (their indexes belong to the constraints), then the other indexes
        qualified = f'"{db.schema}"."{address.table}"'
        for (name,) in db.sql("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN "
                              "('p', 'u')", (qualified,)):
            db.sql(f'ALTER TABLE {qualified} DROP CONSTRAINT "{name}"')
        rows = db.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
                      (db.schema, address.table))
        for (name,) in rows:
            db.sql(f'DROP INDEX "{db.schema}"."{name}"')


def count(db: Db, queue: str) -> int:
    return len(db.transport.browse(queue, limit=10_000))


def fill_queues(db: Db) -> None:
    """The database the maintenance DAGs are run against: ``orders`` with expired, fresh, never-expiring and
    poison messages; ``audit`` with expired ones only; ``legacy`` with messages but its indexes dropped; ``error``."""
    t, q = db.transport, db.q
    t.create_queues([q("orders"), q("audit"), q("legacy"), q("error")])
    t.send_many(q("orders"), [OutgoingMessage(f"old-{i}", time_to_be_received=0.001) for i in range(5)])
    t.send_many(q("audit"), [OutgoingMessage(f"old-{i}", time_to_be_received=0.001) for i in range(3)])
    t.send_many(q("orders"), [OutgoingMessage(f"fresh-{i}", time_to_be_received=3600) for i in range(3)]
                + [OutgoingMessage("forever")])
    insert_poison(db, q("orders"))
    insert_poison(db, q("orders"))
    t.send_many(q("legacy"), ["kept-0", OutgoingMessage("kept-1", time_to_be_received=3600)])
    drop_indexes(db, q("legacy"))
    time.sleep(0.1)  # the TTBR of 1 ms has passed for every "old-" message


def task_log(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> str:
    """What the tasks of the run logged through the provider's loggers (their task log), at ``level`` or above."""
    return "\n".join(r.getMessage() for r in caplog.records
                     if r.name.startswith("airflow_sqlqueue") and r.levelno >= level)


def inject_deadlocks(monkeypatch: pytest.MonkeyPatch, db: Db, queue: str, times: int) -> list[int]:
    """Make the dialect's ``purge_expired`` statement on ``queue`` fail with the driver's own deadlock error
    ``times`` times in a row, from its second batch on (after one batch committed)."""
    dialect_class = type(db.transport.dialect)
    original = dialect_class.execute
    table = db.transport.dialect.qualified(db.transport.address(queue))
    if db.kind == "sqlite":
        deadlock = sqlite3.OperationalError("database table is locked")
    else:
        import psycopg.errors

        deadlock = psycopg.errors.DeadlockDetected("deadlock detected")
    calls = [0]

    def execute(self, cursor, name, params=None, **identifiers):
        if name == "purge_expired" and identifiers.get("queue") == table:
            calls[0] += 1
            if 2 <= calls[0] <= 1 + times:
                raise deadlock
        return original(self, cursor, name, params, **identifiers)

    monkeypatch.setattr(dialect_class, "execute", execute)
    return calls


# -- DAG runs ---------------------------------------------------------------------------------------------------
def test_purge_expired(airflow_db, qdb: Db, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                       caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture) -> None:
    t, q = qdb.transport, qdb.q
    fill_queues(qdb)
    # configuration through the Variable: discovery on the test's connection, small batches
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps({**conn_config(qdb), "purge_batch_size": 2}))
    # the second batch on orders deadlocks 6 times: 5 retries by the transport, then one more purge by the task
    calls = inject_deadlocks(monkeypatch, qdb, q("orders"), times=6)
    caplog.set_level(logging.INFO)

    dr = run("sqlqueue_purge_expired")
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    orders, audit, legacy, error = (t.name(q(n)) for n in ("orders", "audit", "legacy", "error"))
    expected = {orders: 5, audit: 3, legacy: 0, error: 0}
    report = airflow_env.xcom_value(dr, "report")
    assert report == {CONN_ID: expected}, report
    per_queue = airflow_env.xcom_value(dr, "purge")
    assert {r["queue"]: r["purged"] for r in per_queue} == expected
    assert count(qdb, q("orders")) == 6 and count(qdb, q("audit")) == 0  # fresh, forever and the poison rows
    assert count(qdb, q("legacy")) == 2
    assert airflow_env.xcom_value(dr, "purge_inbox") == {CONN_ID: 0}  # no inbox table: nothing to purge
    out, err = capfd.readouterr()  # the task SDK logs through structlog to the process's output
    assert "XCom not found" not in out + err + caplog.text  # the report reads the mapped results, no ERROR line
    assert calls[0] == 9  # batches 2, 2, 1 after the 6 deadlocks: nothing deleted twice, nothing missed
    # the task log: deadlocks as warnings, each queue's count, and the report's table
    warnings = task_log(caplog, logging.WARNING)
    assert warnings.count(f"deadlock in purge expired from {orders!r}, retrying") == 5, warnings
    assert f"deadlock purging {orders} on {CONN_ID} after 2 rows, retrying (1/3)" in warnings
    assert not any(r.levelno >= logging.ERROR for r in caplog.records if r.name.startswith("airflow_sqlqueue"))
    log = task_log(caplog)
    assert f"purged 5 expired messages from {orders} on {CONN_ID} (batches of 2)" in log
    assert f"purged 3 expired messages from {audit} on {CONN_ID} (batches of 2)" in log
    table = log[log.index("expired messages purged:"):].splitlines()
    assert table[1].split() == ["conn_id", "queue", "purged"]
    rows = sorted(line.split() for line in table[3:3 + len(expected)])
    assert rows == sorted([CONN_ID, name, str(n)] for name, n in expected.items())


def make_dead_tuples(db: Db, queue: str, rows: int = 12_000) -> None:
    """PostgreSQL: fill and empty a queue so that dead tuples outnumber live ones (autovacuum kept off it)."""
    table = db.transport.dialect.qualified(db.transport.address(queue))
    db.sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    db.sql(f"INSERT INTO {table} (id, expires, headers, body) "  # noqa: S608
           f"SELECT gen_random_uuid(), NULL, '{{}}', NULL FROM generate_series(1, {rows})")
    db.sql(f"DELETE FROM {table}")  # noqa: S608
    # statistics reach pg_stat_user_tables when the session that made them ends: wait until they are there
    for _ in range(50):
        [(dead,)] = db.sql("SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                           (db.schema, db.transport.address(queue).table))
        if dead >= rows:
            return
        time.sleep(0.1)
    raise AssertionError(f"PostgreSQL did not report the {rows} dead tuples (saw {dead})")


def test_check_schema_and_repair(airflow_db, qdb: Db, tmp_path: Path,  # noqa: F811
                                 monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                 capfd: pytest.CaptureFixture) -> None:
    t, q = qdb.transport, qdb.q
    fill_queues(qdb)  # legacy lost its indexes; poison and expired rows elsewhere are no findings
    expected = {"legacy": {"missing_expires_index"} | ({"missing_primary_key", "missing_seq_unique"}
                                                       if qdb.kind == "postgres" else set()),
                "orders": set(), "audit": set(), "error": set()}
    if qdb.kind == "postgres":
        t.create_queues([q("bloated")])
        make_dead_tuples(qdb, q("bloated"))
        expected["bloated"] = {"dead_tuples"}
    for name, codes in expected.items():
        assert {f.code for f in t.check(q(name))} == codes, name
    # configuration through the file named by SQLQUEUE_MAINTENANCE_CONFIG
    path = tmp_path / "maintenance.json"
    path.write_text(json.dumps(conn_config(qdb)))
    monkeypatch.delenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", raising=False)
    monkeypatch.setenv("SQLQUEUE_MAINTENANCE_CONFIG", str(path))
    caplog.set_level(logging.INFO)

    dr = run("sqlqueue_check_schema", repair=True)
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    checked = {r["queue"]: r for r in airflow_env.xcom_value(dr, "check")}
    for name, codes in expected.items():
        result = checked[t.name(q(name))]
        assert {f["code"] for f in result["found"]} == codes and set(result["repaired"]) == codes, result
        assert result["remaining"] == [] and t.check(q(name)) == []
    rows = airflow_env.xcom_value(dr, "report")
    assert sorted((r["queue"], r["code"], r["status"]) for r in rows) == sorted(
        (t.name(q(name)), code, "repaired") for name, codes in expected.items() for code in codes)
    out, err = capfd.readouterr()
    assert "XCom not found" not in out + err + caplog.text  # the report reads the mapped results in one slice
    # the findings, as a table in the task log
    log = task_log(caplog)
    table = log[log.index(f"findings on {len(expected)} queues"):].splitlines()
    assert table[1].split() == ["conn_id", "queue", "code", "repairable", "status", "message"]
    found = {tuple(line.split()[1:5]) for line in table[3:3 + len(rows)]}
    assert found == {(t.name(q(name)), code, "True", "repaired") for name, codes in expected.items() for code in codes}
    if qdb.kind == "postgres":
        [(dead,)] = qdb.sql("SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
                            (qdb.schema, "bloated"))
        assert dead == 0  # VACUUM ran


def deploy(monkeypatch: pytest.MonkeyPatch, config: dict) -> None:
    """The deployment's maintenance configuration (the Variable): the only place connections and code are chosen."""
    monkeypatch.setenv("AIRFLOW_VAR_SQLQUEUE_MAINTENANCE", json.dumps(config))


def test_check_schema_fails_on_findings_without_repair(airflow_db, tmp_path: Path,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``repair`` the findings stay, the report fails (no retry), and nothing was changed (SQLite)."""
    deploy(monkeypatch, {"connections": [CONN_ID]})
    path = tmp_path / "q.db"
    airflow_env.sqlite_connection(CONN_ID, path)
    from airflow_sqlqueue.transport import SqlQueueTransport

    with SqlQueueTransport.from_url(f"sqlite:///{path}") as t:
        t.create_queues(["legacy"])
        sqlite3.connect(path).execute(f'DROP INDEX "{t.dialect.index_name(t.address("legacy"), "expires")}"')
        dr = run("sqlqueue_check_schema")
        states = airflow_env.task_states(dr)
        assert states["report"] == "failed" and states["check[0]"] == "success", states
        assert [f.code for f in t.check("legacy")] == ["missing_expires_index"]


def test_queue_health_alerts_through_a_notifier_and_fails(airflow_db, qdb: Db, tmp_path: Path,  # noqa: F811
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture,
                                                          capfd: pytest.CaptureFixture) -> None:
    t, q = qdb.transport, qdb.q
    t.create_queues([q("deep"), q("stale"), q("calm")])
    t.send_many(q("deep"), [f"m{i}" for i in range(4)] + [OutgoingMessage("gone", time_to_be_received=0.001)])
    insert_poison(qdb, q("deep"))  # poison and expired rows are part of the depth until received or purged
    old = h.format_wire_time(datetime.now(timezone.utc) - timedelta(hours=2))
    t.send(q("stale"), OutgoingMessage("late", headers={h.TIME_SENT: old}))
    t.send(q("calm"), "fine")
    alert_file = tmp_path / "alerts.jsonl"
    monkeypatch.setenv("SQLQUEUE_TEST_ALERT_FILE", str(alert_file))
    table = f'"{qdb.schema}"."health_samples"' if qdb.schema else "health_samples"
    config = conn_config(qdb, thresholds={"max_depth": 3}, record_health_samples=True)
    config["connections"][CONN_ID]["queues"] = {q("deep"): {}, q("stale"): {"max_age_seconds": 600},
                                                q("calm"): {}}
    config.update(alert_callback="tests.airflow_env.alert_notifier", health_samples_table=table)
    caplog.set_level(logging.INFO)
    deploy(monkeypatch, config)

    dr = run("sqlqueue_queue_health")
    assert str(dr.state) == "failed"
    states = airflow_env.task_states(dr)
    assert states["report"] == "failed" and states["sample[0]"] == "success", states
    deep, stale, calm = (t.name(q(n)) for n in ("deep", "stale", "calm"))
    samples = {s["queue"]: s for s in airflow_env.xcom_value(dr, "sample")}
    assert samples[deep]["depth"] == 6 and samples[deep]["breaches"] == ["depth 6 > 3"]
    assert samples[stale]["oldest_age_seconds"] > 7000
    assert samples[stale]["breaches"][0].startswith("oldest message")
    assert samples[calm]["breaches"] == []
    out, err = capfd.readouterr()
    assert "XCom not found" not in out + err + caplog.text  # the report reads the mapped results in one slice
    # the notifier got the breaches, with its template rendered from the task context
    [alert] = [json.loads(line) for line in alert_file.read_text().splitlines()]
    assert alert["text"] == "sqlqueue_queue_health: 2 queues over threshold"
    assert sorted(s["queue"] for s in alert["breaches"]) == sorted([deep, stale])
    logged = [line.split() for line in task_log(caplog).splitlines() if line.startswith(CONN_ID + " ")]
    # the health table in the log (the age column has a value: every send writes TimeSent)
    rows = {r[1]: r for r in logged if len(r) > 6}
    assert rows[deep][:3] == [CONN_ID, deep, "6"] and rows[deep][4:] == ["3", "-", "depth", "6", ">", "3"]
    assert rows[calm][:3] == [CONN_ID, calm, "1"] and rows[calm][4:] == ["3", "-", "ok"]
    # one sample per queue recorded, with its connection, readable as the queue's recent history
    recorded = qdb.sql(f"SELECT conn_id, queue_name, depth FROM {table}")  # noqa: S608
    assert sorted(recorded) == sorted((CONN_ID, n, d) for n, d in ((deep, 6), (stale, 1), (calm, 1)))
    history = health.recent_samples(t, table, CONN_ID, q("deep"), datetime.now(timezone.utc) - timedelta(hours=1))
    assert [s["depth"] for s in history] == [6]


def test_provision_queues(airflow_db, qdb: Db, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    deploy(monkeypatch, conn_config(qdb))
    t, q = qdb.transport, qdb.q
    dr = run("sqlqueue_provision_queues", conn_id=CONN_ID, queues=[q("p_orders"), q("p_replies")],
             delayed_queues=[q("p_endpoint")])
    assert str(dr.state) == "success", airflow_env.task_states(dr)
    result = airflow_env.xcom_value(dr, "provision")
    assert result["ready"] == [t.name(q("p_orders")), t.name(q("p_replies"))]
    assert result["delayed"] == [t.name(q("p_endpoint"))] and result["findings"] == []
    assert result["created"] == [t.name(q(n)) for n in ("p_orders", "p_replies", "p_endpoint")]
    assert result["existed"] == []
    assert all(t.exists(q(n)) for n in ("p_orders", "p_replies", "p_endpoint"))
    t.send(q("p_endpoint"), OutgoingMessage("later", delay=3600))
    assert t.peek(q("p_endpoint")) == 0  # it went to the delayed table, which exists
    # a bad name among the params: a clear error naming the params, and nothing created
    with pytest.raises(tasks.BadConfigurationError, match="params queues/delayed_queues: .*NUL character"):
        tasks.provision({"conn_id": CONN_ID, "queues": [q("p_more")], "delayed_queues": ["bad\x00name"]})
    assert not t.exists(q("p_more"))


def test_error_queue_lists_groups_and_returns_selected(airflow_db, qdb: Db,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    deploy(monkeypatch, conn_config(qdb, **({"error_queue": qdb.q("error")} if qdb.schema else {})))
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


def test_error_queue_lists_only_without_retry(airflow_db, tmp_path: Path,  # noqa: F811
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``retry`` param: the listing runs, the return task is skipped, nothing moves (SQLite only)."""
    deploy(monkeypatch, {"connections": [CONN_ID]})
    path = tmp_path / "q.db"
    airflow_env.sqlite_connection(CONN_ID, path)
    from airflow_sqlqueue.transport import SqlQueueTransport

    with SqlQueueTransport.from_url(f"sqlite:///{path}") as t:
        t.create_queues(["orders", "error"])
        t.send(t.error_queue, OutgoingMessage("x", headers={h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "E"}))
        dr = run("sqlqueue_error_queue")
        states = airflow_env.task_states(dr)
        assert states["return_selected[0]"] == "skipped" and str(dr.state) == "success", states
        assert airflow_env.xcom_value(dr, "list_failed")[0]["total"] == 1
        assert len(t.browse("error")) == 1 and t.peek("orders") == 0
        assert sqlite3.connect(path).execute("SELECT count(*) FROM error").fetchone() == (1,)


# -- a DAG run's conf cannot choose code or connections ---------------------------------------------------------
@pytest.mark.parametrize(("dag_id", "conf", "refused"), [
    ("sqlqueue_queue_health", {"config": {"connections": [CONN_ID], "alert_callback": "os.abort"}},
     "alert_callback cannot be set by a DAG run"),
    ("sqlqueue_queue_health", {"config": {"connections": [CONN_ID], "health_samples_conn_id": "other_db"}},
     "health_samples_conn_id cannot be set by a DAG run"),
    ("sqlqueue_purge_expired", {"config": {"connections": ["other_db"]}}, "connection 'other_db' is not configured"),
    ("sqlqueue_check_schema", {"connections": ["other_db"], "repair": True}, "connection 'other_db' is not configured"),
    ("sqlqueue_error_queue", {"conn_id": "other_db", "retry": True}, "connection 'other_db' is not configured"),
    ("sqlqueue_provision_queues", {"conn_id": "other_db", "queues": ["made_by_conf"]},
     "connection 'other_db' is not configured"),
])
def test_run_conf_cannot_choose_code_or_connections(airflow_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture,
                                                    dag_id: str, conf: dict, refused: str) -> None:
    """The deployment configures ``sqlqueue_maint`` only; a run's conf naming code or another connection (one that
    exists in Airflow) fails the run with a reason, and nothing runs against the other connection."""
    path, other = tmp_path / "q.db", tmp_path / "other.db"
    airflow_env.sqlite_connection(CONN_ID, path)
    airflow_env.sqlite_connection("other_db", other)
    deploy(monkeypatch, {"connections": [CONN_ID]})
    from airflow_sqlqueue.transport import SqlQueueTransport

    with SqlQueueTransport.from_url(f"sqlite:///{other}") as t:
        t.create_queues(["orders", "error"])
        t.send(t.error_queue, OutgoingMessage("x", headers={h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "E"}))
        t.send("orders", OutgoingMessage("gone", time_to_be_received=0.001))
        sqlite3.connect(other).execute(f'DROP INDEX "{t.dialect.index_name(t.address("orders"), "expires")}"')
        caplog.set_level(logging.INFO)
        dr = run(dag_id, **conf)
        assert str(dr.state) == "failed", airflow_env.task_states(dr)
        captured = capfd.readouterr()
        assert refused in caplog.text + captured.out + captured.err  # the failed task's reason
        # the other database is as it was: no retry, no purge, no repair, no table created
        assert len(t.browse("error")) == 1 and len(t.browse("orders")) == 1
        assert [f.code for f in t.check("orders")] == ["missing_expires_index"]
        assert not t.exists("made_by_conf")
