"""Fixtures of the real SQL Server suite: runs only when ``SQLQUEUE_TEST_MSSQL_URL`` is set.

``SQLQUEUE_TEST_MSSQL_URL=mssql+pymssql://sa:Passw0rd%21@127.0.0.1:1433/tempdb`` (or ``mssql+pyodbc://...``)
points it at any TDS endpoint: SQL Server 2016 or later, Azure SQL, or a T-SQL engine such as Babelfish.
Queues get ordinary names (``sqlqueue_t_<random>_<name>``); odd names have their own test. Tables are
dropped after each test.

A test that depends on an engine feature says so with ``@needs("feature", ...)``: on an engine that lacks it
(Babelfish names itself in ``@@VERSION``) exactly those tests are skipped, with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.dialects import get_dialect
from airflow_sqlqueue.transport.dialects.connect import connection_factory, default_catalog_of, paramstyle_of
from airflow_sqlqueue.transport.dialects.mssql import MssqlDialect
from airflow_sqlqueue.transport.wire.address import QueueAddress

URL = os.environ.get("SQLQUEUE_TEST_MSSQL_URL")
SKIP_REASON = "set SQLQUEUE_TEST_MSSQL_URL=mssql+pymssql://user:pass@host:port/db to run the SQL Server suite"

#: Engine features some tests depend on, in words (the skip reason names them).
FEATURES = {
    "lock_hints": "the READPAST and UPDLOCK row-lock hints (receivers skip rows another session holds)",
    "cte_delete": "DELETE through a CTE with OUTPUT (receive_batch, move_due_delayed)",
    "allocation_units": "the sys.allocation_units catalog view (the heap bloat check)",
    "rebuild": "ALTER TABLE ... REBUILD (the heap repair)",
    "filtered_index_metadata": "filtered-index metadata in sys.indexes (the Index_Expires check)",
}
#: What Babelfish (a T-SQL engine on PostgreSQL) does not do as SQL Server does (docs/operations.md).
BABELFISH_LACKS = frozenset(FEATURES)


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
    """What the endpoint says about itself."""

    version: str
    database: str

    @property
    def babelfish(self) -> bool:
        return "babelfish" in self.version.lower()

    def lacks(self, feature: str) -> str | None:
        """Why ``feature`` cannot be tested here, or None when it can."""
        if self.babelfish and feature in BABELFISH_LACKS:
            return f"Babelfish lacks {FEATURES[feature]} ({self.version.splitlines()[0]})"
        return None


def connect() -> Any:
    """A new DB-API connection to the test endpoint (pymssql or pyodbc, by the URL)."""
    factory, _ = connection_factory(URL or "")
    return factory()


def new_dialect() -> MssqlDialect:
    dialect = get_dialect("mssql", paramstyle_of(URL or ""), default_catalog_of(URL or ""))
    assert isinstance(dialect, MssqlDialect)
    return dialect


@pytest.fixture(scope="session")
def server() -> Server:
    if not URL:
        pytest.skip(SKIP_REASON)
    connection = connect()
    try:
        cur = connection.cursor()
        cur.execute("SELECT @@VERSION, DB_NAME()")
        version, database = cur.fetchone()
        connection.rollback()
    finally:
        connection.close()
    return Server(str(version), str(database))


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
