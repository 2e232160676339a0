"""SqlQueueHook: existing mssql/odbc/postgres/sqlite connections (``AIRFLOW_CONN_<ID>`` JSON) to a transport.

SQLite and PostgreSQL connections are used for real (send, peek, receive); ``mssql`` and ``odbc`` connections
are checked without a server (the transport connects lazily): dialect, paramstyle and default catalog. Errors
for unsupported connection types name the supported ones and never show the connection's password.
"""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import json
import uuid
from typing import Any

import pytest

from airflow_sqlqueue.hooks.sqlqueue import SUPPORTED_CONN_TYPES, SqlQueueHook, dialect_name_for
from airflow_sqlqueue.sensors.sqlqueue import SqlQueueSensor
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport, UnsupportedConnectionError
from tests.conftest import Db
from tests.test_triggers import airflow_conn

PASSWORD = "Pw-" + uuid.uuid4().hex  # must never appear in an error text


def env_conn(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> str:
    """An Airflow connection from an ``AIRFLOW_CONN_<ID>`` variable in the JSON form; return its id."""
    conn_id = "hooktest_" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps(fields))
    return conn_id


def no_secret(exc: BaseException) -> None:
    for text in (str(exc), repr(exc), str(exc.__cause__ or ""), str(exc.__context__ or "")):
        assert PASSWORD not in text, text


# -- real databases -------------------------------------------------------------------------------------------
def test_hook_sends_peeks_and_receives(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = airflow_conn(queues, monkeypatch)
    hook = SqlQueueHook(sqlqueue_conn_id=conn_id, error_queue=queues.q("error"))
    try:
        assert hook.dialect_name == queues.kind
        assert hook.connection.conn_type == ("sqlite" if queues.kind == "sqlite" else "postgres")
        transport = hook.get_transport()
        assert transport is hook.transport  # one transport (and pool) per hook
        assert transport.error_queue == transport.address(queues.q("error"))
        ids = transport.send_many(queues.q("orders"), [OutgoingMessage(body=f"m{i}", headers={"n": str(i)})
                                                       for i in range(3)])
        assert transport.peek(queues.q("orders")) == 3
        assert queues.transport.peek(queues.q("orders")) == 3  # the same database as the test's own transport
        received = transport.receive(queues.q("orders"), max_messages=10)
        assert [m.id for m in received] == ids and [m.body for m in received] == [b"m0", b"m1", b"m2"]
        assert transport.peek(queues.q("orders")) == 0
        conn = hook.get_conn()  # a plain DB-API connection made by the database's own Airflow hook
        try:
            cursor = conn.cursor()
            cursor.execute("SELECT 1")
            assert cursor.fetchone()[0] == 1
        finally:
            conn.close()
    finally:
        hook.close()


def test_hook_default_conn_id_and_attributes(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    assert SqlQueueHook.default_conn_name == "sqlqueue_default" and SqlQueueHook.conn_name_attr == "sqlqueue_conn_id"
    monkeypatch.setenv("AIRFLOW_CONN_SQLQUEUE_DEFAULT",
                       json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "default.db")}))
    hook = SqlQueueHook()
    try:
        hook.transport.create_queue("orders")
        hook.transport.send("orders", OutgoingMessage(body="x"))
        assert hook.transport.peek("orders") == 1
    finally:
        hook.close()
    hook.close()  # closing twice, or a hook that never opened a transport, is fine
    SqlQueueHook("never_used").close()


# -- SQL Server connections, without a server -------------------------------------------------------------------
def test_odbc_connection_uses_qmark_and_its_database_as_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = env_conn(monkeypatch, conn_type="odbc", host="sql.example", port=1433, login="sa", password=PASSWORD,
                       schema="Shop", extra={"driver": "FreeTDS"})
    hook = SqlQueueHook(conn_id)
    assert hook.dialect_name == "mssql"
    dialect = hook.transport.dialect
    assert dialect.paramstyle == "qmark"  # pyodbc; the OdbcHook's own placeholder says %s, wrongly
    assert dialect.default_catalog == "Shop"
    assert dialect.identifiers(dialect.parse_address("orders"))["queue"] == "[Shop].[dbo].[orders]"
    assert hook.transport.name("orders@[sales]@[Other]") == "orders@[sales]@[Other]"
    assert dialect.identifiers(dialect.parse_address("orders@[sales]@[Other]"))["queue"] == "[Other].[sales].[orders]"


def test_mssql_connection_catalog_from_schema_field(monkeypatch: pytest.MonkeyPatch) -> None:
    with_db = env_conn(monkeypatch, conn_type="mssql", host="sql.example", login="sa", password=PASSWORD,
                       schema="Warehouse")
    dialect = SqlQueueHook(with_db).transport.dialect
    assert dialect.paramstyle == "pyformat"  # pymssql
    assert dialect.default_catalog == "Warehouse"
    assert dialect.identifiers(dialect.parse_address("orders"))["queue"] == "[Warehouse].[dbo].[orders]"
    assert dialect.identifiers(dialect.parse_address("orders"))["sys"] == "[Warehouse].sys"
    without_db = env_conn(monkeypatch, conn_type="mssql", host="sql.example", login="sa", password=PASSWORD)
    dialect = SqlQueueHook(without_db).transport.dialect
    assert dialect.default_catalog is None
    assert dialect.identifiers(dialect.parse_address("orders"))["queue"] == "[dbo].[orders]"


def test_postgres_and_sqlite_paramstyles_and_no_catalog(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    pg = env_conn(monkeypatch, conn_type="postgres", host="db.example", login="app", password=PASSWORD,
                  schema="sales")
    assert SqlQueueHook(pg).transport.dialect.paramstyle == "pyformat"
    assert not getattr(SqlQueueHook(pg).transport.dialect, "default_catalog", None)  # schema is the database
    lite = env_conn(monkeypatch, conn_type="sqlite", host=str(tmp_path / "q.db"))
    assert SqlQueueHook(lite).dialect_name == "sqlite"


# -- errors ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("conn_type", ["http", "mysql", "generic", "aws"])
def test_unsupported_connection_type_names_the_supported_ones(monkeypatch: pytest.MonkeyPatch,
                                                             conn_type: str) -> None:
    conn_id = env_conn(monkeypatch, conn_type=conn_type, host="example.com", login="me", password=PASSWORD)
    hook = SqlQueueHook(conn_id)
    for attempt in (lambda: hook.transport, lambda: hook.dialect_name, hook.get_conn, hook.get_transport):
        with pytest.raises(UnsupportedConnectionError) as caught:
            attempt()
        text = str(caught.value)
        assert conn_id in text and repr(conn_type) in text
        assert "mssql, odbc, postgres, sqlite" in text
        no_secret(caught.value)
    hook.close()  # nothing was opened


def test_unsupported_connection_type_fails_the_sensor_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = env_conn(monkeypatch, conn_type="http", host="example.com", password=PASSWORD)
    sensor = SqlQueueSensor(task_id="wait", queue_name="orders", sqlqueue_conn_id=conn_id)
    with pytest.raises(UnsupportedConnectionError, match="mssql, odbc, postgres, sqlite") as caught:
        sensor.poke({})
    no_secret(caught.value)


def test_dialect_name_for() -> None:
    assert {t: dialect_name_for(t) for t in SUPPORTED_CONN_TYPES} == {
        "mssql": "mssql", "odbc": "mssql", "postgres": "postgres", "sqlite": "sqlite"}
    with pytest.raises(UnsupportedConnectionError, match=r"type None; .*mssql, odbc, postgres, sqlite"):
        dialect_name_for(None, "c")


def test_sqlite_connection_without_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = env_conn(monkeypatch, conn_type="sqlite")
    hook = SqlQueueHook(conn_id)
    with pytest.raises(UnsupportedConnectionError, match="no file path"):
        hook.transport.peek("orders")
    hook.close()


@pytest.mark.parametrize("fields", [
    {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "app", "schema": "test"},
    {"conn_type": "mssql", "host": "127.0.0.1", "port": 1, "login": "sa", "schema": "Shop"},
], ids=["postgres", "mssql"])
def test_unreachable_database_error_has_no_password(monkeypatch: pytest.MonkeyPatch, fields: dict) -> None:
    conn_id = env_conn(monkeypatch, **fields, password=PASSWORD)
    hook = SqlQueueHook(conn_id)
    try:
        with pytest.raises(Exception) as caught:  # noqa: B017  (the driver's own error type)
            hook.transport.peek("orders")
        no_secret(caught.value)
        assert "127.0.0.1" in str(caught.value) or "refused" in str(caught.value).lower()
    finally:
        hook.close()


def test_hook_for_a_connection_object(tmp_path) -> None:
    from airflow.sdk import Connection

    db_path = tmp_path / "obj.db"
    SqlQueueTransport.from_url(f"sqlite:///{db_path}").create_queue("orders")
    transport = SqlQueueHook.for_connection(Connection(conn_id="obj", conn_type="sqlite", host=str(db_path))).transport
    try:
        transport.send("orders", OutgoingMessage(body="x"))
        assert transport.peek("orders") == 1
    finally:
        transport.close()
