"""Fixtures of the real SQL Server suite: runs only when ``SQLQUEUE_TEST_MSSQL_URL`` is set.

``SQLQUEUE_TEST_MSSQL_URL=mssql+pymssql://sa:Passw0rd%21@127.0.0.1:1433/tempdb`` (or ``mssql+pyodbc://...``)
points it at any TDS endpoint: SQL Server 2016 or later, Azure SQL, or a T-SQL engine such as Babelfish.
Queues get ordinary names (``sqlqueue_t_<random>_<name>``); odd names have their own test. Tables are
dropped after each test.

A test that depends on an engine feature says so with ``@needs("feature", ...)``. Whether the endpoint has each
feature is found out once per session by a probe (a few statements on a scratch table, each in a transaction
rolled back), never from the engine's name: where a probe fails, exactly the tests that need that feature are
skipped, with the feature and what the engine answered.
"""

# ruff: noqa: S608 - the probes' SQL names scratch tables made here, quoted by the dialect; no value is formatted in
from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.dialects.connect import connection_factory, default_catalog_of, paramstyle_of
from airflow_sqlqueue.transport.dialects.mssql import MssqlDialect
from airflow_sqlqueue.transport.wire.address import QueueAddress

URL = os.environ.get("SQLQUEUE_TEST_MSSQL_URL")
SKIP_REASON = "set SQLQUEUE_TEST_MSSQL_URL=mssql+pymssql://user:pass@host:port/db to run the SQL Server suite"

#: Engine features some tests depend on, in words (the skip reason names them); PROBES finds each out.
FEATURES = {
    "lock_hints": "the READPAST and UPDLOCK row-lock hints (receivers skip rows another session holds)",
    "cte_delete": "DELETE through a CTE with OUTPUT (receive_batch, move_due_delayed)",
    "allocation_units": "the sys.allocation_units catalog view (the heap bloat check)",
    "rebuild": "ALTER TABLE ... REBUILD (the heap repair)",
    "filtered_index_metadata": "filtered-index metadata in sys.indexes (the Index_Expires check)",
    "index_names": "indexes listed in sys.indexes under the names they were created with (health-sample table)",
    "bracket_names": "a ']' in a table name (written ']]' inside brackets)",
    "identity_columns": "the sys.identity_columns catalog view (the sent position, for the send rate)",
}


def needs(*features: str) -> pytest.MarkDecorator:
    """Mark a test as depending on engine ``features`` (keys of FEATURES)."""
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
    return pytest.mark.mssql_needs(*features)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mssql_needs(*features): the test needs these SQL Server engine features")


@dataclass(frozen=True)
class Server:
    """What the endpoint says about itself, and the features its probes found missing (feature -> answer)."""

    version: str
    database: str
    missing: dict[str, str] = field(default_factory=dict)

    def lacks(self, feature: str) -> str | None:
        """Why ``feature`` cannot be tested here, or None when it can."""
        if feature not in self.missing:
            return None
        return (f"the engine lacks {FEATURES[feature]}: its probe got {self.missing[feature]} "
                f"({self.version.splitlines()[0][:80]})")


def connect() -> Any:
    """A new DB-API connection to the test endpoint (pymssql or pyodbc, by the URL)."""
    factory, _ = connection_factory(URL or "")
    return factory()


def new_dialect() -> MssqlDialect:
    dialect = get_dialect("mssql", paramstyle_of(URL or ""), default_catalog_of(URL or ""))
    assert isinstance(dialect, MssqlDialect)
    return dialect


# -- capability probes (test code: T-SQL written here only to ask the engine what it can do) ------------------
Probe = Callable[[Any, Any, dict[str, str]], bool]


def _rows(cursor: Any, sql: str) -> list[tuple]:
    cursor.execute(sql)
    return [tuple(row) for row in cursor.fetchall()]


def _probe_lock_hints(connection: Any, other: Any, names: dict[str, str]) -> bool:
    """One session holds row 1 (UPDLOCK, ROWLOCK); another, reading with READPAST, must get row 2 only."""
    _rows(connection.cursor(), f"SELECT Id FROM {names['table']} WITH (UPDLOCK, ROWLOCK) WHERE Id = 1")
    cursor = other.cursor()
    cursor.execute("SET LOCK_TIMEOUT 5000")
    try:
        return _rows(cursor, f"SELECT Id FROM {names['table']} WITH (UPDLOCK, READPAST, ROWLOCK) "
                             "ORDER BY Id") == [(2,)]
    finally:
        other.rollback()


def _probe_cte_delete(connection: Any, other: Any, names: dict[str, str]) -> bool:
    return _rows(connection.cursor(), f"WITH c AS (SELECT TOP (1) Id FROM {names['table']} ORDER BY Id) "
                                      "DELETE FROM c OUTPUT deleted.Id") == [(1,)]


def _probe_allocation_units(connection: Any, other: Any, names: dict[str, str]) -> bool:
    _rows(connection.cursor(), "SELECT TOP (1) au.type FROM sys.allocation_units AS au")
    return True


def _probe_identity_columns(connection: Any, other: Any, names: dict[str, str]) -> bool:
    _rows(connection.cursor(), "SELECT TOP (1) ic.object_id FROM sys.identity_columns AS ic")
    return True


def _probe_rebuild(connection: Any, other: Any, names: dict[str, str]) -> bool:
    connection.cursor().execute(f"ALTER TABLE {names['table']} REBUILD")
    return True


def _probe_index_names(connection: Any, other: Any, names: dict[str, str]) -> bool:
    cursor = connection.cursor()
    cursor.execute(f"CREATE NONCLUSTERED INDEX [Index_SqlqueueProbe] ON {names['table']} (V)")
    return _rows(cursor, f"SELECT COUNT(*) FROM sys.indexes WHERE object_id = OBJECT_ID('{names['table']}') "
                         "AND name = 'Index_SqlqueueProbe'") == [(1,)]


def _probe_filtered_index_metadata(connection: Any, other: Any, names: dict[str, str]) -> bool:
    cursor = connection.cursor()
    cursor.execute(f"CREATE NONCLUSTERED INDEX [Index_SqlqueueFiltered] ON {names['table']} (V) WHERE V IS NOT NULL")
    return _rows(cursor, "SELECT MAX(CAST(has_filter AS int)) FROM sys.indexes "
                         f"WHERE object_id = OBJECT_ID('{names['table']}') AND type > 0") == [(1,)]


def _probe_bracket_names(connection: Any, other: Any, names: dict[str, str]) -> bool:
    """Create, write, read and find (OBJECT_ID, as the transport does) a table whose name holds ']'."""
    cursor = connection.cursor()
    odd = names["odd"]
    cursor.execute(f"CREATE TABLE {odd} (Id int NOT NULL)")
    cursor.execute(f"INSERT INTO {odd} (Id) VALUES (7)")
    literal = odd.replace("'", "''")
    found = _rows(cursor, f"SELECT COUNT(*) FROM sys.objects WHERE object_id = OBJECT_ID(N'{literal}') AND type = 'U'")
    return _rows(cursor, f"SELECT Id FROM {odd}") == [(7,)] and found == [(1,)]


PROBES: dict[str, Probe] = {
    "lock_hints": _probe_lock_hints, "cte_delete": _probe_cte_delete, "allocation_units": _probe_allocation_units,
    "rebuild": _probe_rebuild, "filtered_index_metadata": _probe_filtered_index_metadata,
    "index_names": _probe_index_names, "bracket_names": _probe_bracket_names,
    "identity_columns": _probe_identity_columns,
}


def probe_features(connection: Any, other: Any) -> dict[str, str]:
    """Each feature the endpoint lacks, with what its probe got (an error's first line, or a wrong answer).

    The probes share a scratch table (Id 1 and 2, a clustered key so a row lock holds one row), created and
    dropped here; each probe runs in its own transaction, rolled back whatever happens.
    """
    dialect = new_dialect()
    suffix = uuid.uuid4().hex[:8]
    names = {"table": dialect.qualified(QueueAddress(f"sqlqueue_probe_{suffix}")),
             "odd": dialect.qualified(QueueAddress(f"sqlqueue_probe_{suffix} ]x"))}
    cursor = connection.cursor()
    cursor.execute(f"CREATE TABLE {names['table']} (Id int NOT NULL PRIMARY KEY CLUSTERED, V int NULL)")
    cursor.execute(f"INSERT INTO {names['table']} (Id, V) VALUES (1, 1), (2, 2)")
    connection.commit()
    missing: dict[str, str] = {}
    try:
        for feature, probe in PROBES.items():
            try:
                if not probe(connection, other, names):
                    missing[feature] = "an answer SQL Server does not give"
            except Exception as exc:  # noqa: BLE001 - what the engine answered is the finding
                missing[feature] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            finally:
                connection.rollback()
    finally:
        cursor = connection.cursor()
        cursor.execute(f"DROP TABLE {names['table']}")
        connection.commit()
    return missing


@pytest.fixture(scope="session")
def server() -> Server:
    if not URL:
        pytest.skip(SKIP_REASON)
    connection, other = connect(), connect()
    try:
        for each in (connection, other):
            new_dialect().configure(each)  # autocommit off, READ COMMITTED: as the transport's sessions
        cur = connection.cursor()
        cur.execute("SELECT @@VERSION, DB_NAME()")
        version, database = cur.fetchone()
        connection.rollback()
        missing = probe_features(connection, other)
    finally:
        connection.close()
        other.close()
    return Server(str(version), str(database), missing)


@pytest.fixture(autouse=True)
def _engine_features(request: pytest.FixtureRequest) -> None:
    if not URL:
        pytest.skip(SKIP_REASON)
    server: Server = request.getfixturevalue("server")
    for mark in request.node.iter_markers("mssql_needs"):
        for feature in mark.args:
            reason = server.lacks(feature)
            if reason:
                pytest.skip(reason)


def drop_tables(addresses: list[QueueAddress]) -> None:
    """Drop queue tables and their delayed tables (test cleanup; a missing table is fine)."""
    dialect = new_dialect()
    connection = connect()
    try:
        for address in addresses:
            for table in (address, dialect.delayed_address(address)):
                cur = connection.cursor()
                try:
                    cur.execute(f"DROP TABLE {dialect.qualified(table)}")  # test cleanup only
                    connection.commit()
                except Exception:  # noqa: BLE001 - not there
                    connection.rollback()
    finally:
        connection.close()


@pytest.fixture
def names() -> Iterator[Callable[[str], str]]:
    """``names("orders")`` gives an ordinary, unique queue name; every table named is dropped afterwards."""
    prefix = f"sqlqueue_t_{uuid.uuid4().hex[:8]}_"
    made: list[str] = []

    def name(suffix: str) -> str:
        made.append(prefix + suffix)
        return made[-1]

    yield name
    drop_tables([QueueAddress(n) for n in made])


@pytest.fixture
def transport(names: Callable[[str], str]) -> Iterator[SqlQueueTransport]:
    """A transport on the endpoint with its own error queue (created)."""
    t = SqlQueueTransport.from_url(URL or "", error_queue=names("error"))
    t.create_queue(t.error_queue)
    yield t
    t.close()
