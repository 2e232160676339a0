"""Shared fixtures: the same suite runs on SQLite (a temp file) and on the real PostgreSQL on 127.0.0.1:5432.

Each PostgreSQL test gets its own schema, dropped afterwards, so tests never see each other's queues.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tests.airflow_env  # noqa: F401  (Airflow's home and DAGs folder set before any test module imports Airflow)
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.wire.standard_headers import STANDARD

PG_URL = os.environ.get("SQLQUEUE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_available() -> str | None:
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=3).close()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"PostgreSQL not reachable at {PG_URL}: {exc}"


_PG_SKIP = _pg_available()


@dataclass
class Db:
    """One test database: a URL, a namespace for queue names, and a transport on it."""

    kind: str
    url: str
    schema: str | None
    transport: SqlQueueTransport

    def q(self, table: str) -> str:
        """A queue address in this test's namespace."""
        if self.schema is None:
            return table
        return '"' + self.schema + '"."' + table.replace('"', '""') + '"'

    def sql(self, text: str, params: tuple = ()) -> list[tuple]:
        """Run raw SQL (tests only) and return the rows."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.url[len("sqlite:///"):])
            try:
                cur = conn.execute(text, params)
                rows = cur.fetchall()
                conn.commit()
                return rows
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []

    def new_transport(self, **kwargs) -> SqlQueueTransport:
        return SqlQueueTransport.from_url(self.url, error_queue=self.q("error"), **kwargs)


def make_db(kind: str, tmp_path: Path) -> Iterator[Db]:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'queues.db'}"
        db = Db(kind, url, None, SqlQueueTransport.from_url(url, error_queue="error"))
        yield db
        db.transport.close()
        return
    if _PG_SKIP:
        pytest.skip(_PG_SKIP)
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    transport = SqlQueueTransport.from_url(PG_URL, error_queue=f'"{schema}"."error"')
    db = Db(kind, PG_URL, schema, transport)
    try:
        yield db
    finally:
        transport.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """The database under test, once per dialect."""
    yield from make_db(request.param, tmp_path)


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Db]:
    """The PostgreSQL database alone (tests of what only PostgreSQL has)."""
    yield from make_db("postgres", tmp_path)


@pytest.fixture
def queues(db: Db) -> Db:
    """``db`` with queues ``orders`` (with a delayed table), ``replies`` and ``error`` created."""
    db.transport.create_queues([db.q("orders")], delayed=True)
    db.transport.create_queues([db.q("replies"), db.q("error")])
    return db


def own(headers: dict[str, str | None] | None, sent: dict[str, str | None] | None = None) -> dict[str, str | None]:
    """A received message's headers without the standard headers every send fills in, except those the sender
    set itself (``sent``): what the sender wrote."""
    return {k: v for k, v in (headers or {}).items() if k not in STANDARD or (sent and k in sent)}
