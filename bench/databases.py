"""The databases a run measures: a SQLite file in a temp dir, and a schema of its own on PostgreSQL.

Also what the baselines need by hand: a connection set up by hand (WAL and a busy timeout on SQLite; READ
COMMITTED, in autocommit or not, on PostgreSQL), the hand loops' own statements of ``bench/sql/<dialect>.sql``
with their identifiers quoted (no statement of the provider's), and the backlog fill.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.dialects.sqlfile import Statement, parse_statements

#: The PostgreSQL database of a run (``--pg-url`` overrides it).
DEFAULT_PG_URL = os.environ.get("SQLQUEUE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SQL_DIR = Path(__file__).parent / "sql"
#: A typical NServiceBus message: the usual headers and a small JSON body.
HEADERS = {
    "NServiceBus.MessageId": "0f8fad5b-d9cb-469f-a165-70867728950e",
    "NServiceBus.EnclosedMessageTypes": "Sales.Messages.OrderPlaced, Sales.Messages",
    "NServiceBus.ContentType": "application/json",
    "NServiceBus.ConversationId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "NServiceBus.OriginatingEndpoint": "Sales",
    "NServiceBus.TimeSent": "2026-11-23 06:00:00:000000 Z",
    "NServiceBus.MessageIntent": "Send",
}
HEADERS_TEXT = json.dumps(HEADERS, separators=(",", ":")).replace("/", "\\/")
BODY = b'{"OrderId":"a1b2c3d4","Customer":"c-42","Lines":[{"Sku":"X-1","Qty":2},{"Sku":"Y-7","Qty":1}],"Total":42.5}'


def checkpoint(conn: Any) -> None:
    """A PostgreSQL ``CHECKPOINT`` on ``conn`` (autocommit), so that the next timed work does not pay for what
    earlier work left dirty; skipped for a user without ``pg_checkpoint``. Not timed."""
    import psycopg

    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        pass  # the run goes on without it


def outgoing(count: int) -> list[OutgoingMessage]:
    """``count`` messages for the provider (built before the clock starts)."""
    return [OutgoingMessage(body=BODY, headers=HEADERS) for _ in range(count)]


@cache
def _statements(dialect: str) -> dict[str, Statement]:
    """The bench's own statements: the hand loops' SQL and the setup (parsed by the provider's reader of named
    statements, the only provider code the baselines touch, and only before the clock starts)."""
    return parse_statements((SQL_DIR / f"{dialect}.sql").read_text(encoding="utf-8"))


def quote(name: str) -> str:
    """A double-quoted identifier (both databases)."""
    return '"' + name.replace('"', '""') + '"'


class BenchDb:
    """One database of the run. Queue tables are made by the provider; ``name`` is a bare table name."""

    def __init__(self, dialect: str, url: str, schema: str | None, workdir: Path) -> None:
        self.dialect = dialect
        self.url = url
        self.schema = schema
        self.workdir = workdir

    # -- opening and closing -----------------------------------------------------------------------
    @classmethod
    def open(cls, dialect: str, pg_url: str) -> BenchDb:
        """A fresh SQLite file, or a new ``bench_<random>`` schema on PostgreSQL."""
        workdir = Path(tempfile.mkdtemp(prefix=f"sqlqueue-bench-{dialect}-"))
        if dialect == "sqlite":
            return cls("sqlite", f"sqlite:///{workdir / 'bench.db'}", None, workdir)
        import psycopg

        schema = "bench_" + uuid.uuid4().hex[:10]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {quote(schema)}")  # noqa: S608 - a quoted identifier we generated
        return cls("postgres", pg_url, schema, workdir)

    def close(self) -> None:
        """Drop the schema (PostgreSQL) and remove the temp dir."""
        if self.schema is not None:
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {quote(self.schema)} CASCADE")  # noqa: S608
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- the provider's side -------------------------------------------------------------------------
    def address(self, name: str) -> str:
        """The provider's address of a bench queue."""
        return name if self.schema is None else f"{quote(self.schema)}.{quote(name)}"

    def transport(self) -> SqlQueueTransport:
        return SqlQueueTransport.from_url(self.url, error_queue=self.address("error"))

    # -- the baseline's side (no provider code) ------------------------------------------------------
    def connect(self, autocommit: bool = False) -> Any:
        """A connection set up by hand: SQLite in WAL with a busy timeout, no implicit transactions (each statement
        commits on its own unless ``begin`` opened one); PostgreSQL at READ COMMITTED, in ``autocommit`` (each
        statement is its own transaction: one round trip) or not (psycopg begins implicitly)."""
        if self.dialect == "sqlite":
            conn = sqlite3.connect(self.url[len("sqlite:///"):], timeout=60, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=60000")
            return conn
        import psycopg

        conn = psycopg.connect(self.url, autocommit=autocommit)
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return conn

    def begin(self, cursor: Any, read_only: bool = False) -> None:
        """Start a transaction by hand: SQLite takes the write lock first; psycopg begins implicitly."""
        if self.dialect == "sqlite":
            cursor.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")

    def table(self, name: str) -> str:
        """The quoted table of bench queue ``name``."""
        return quote(name) if self.schema is None else f"{quote(self.schema)}.{quote(name)}"

    def sql(self, statement: str, name: str, **tables: str) -> str:
        """A bench statement on queue ``name`` (and on the queues ``tables`` name for its other ``{key}``
        placeholders), in the driver's parameter style."""
        text = _statements(self.dialect)[statement]
        raw = text.text.replace("{queue}", self.table(name))
        for key, other in tables.items():
            raw = raw.replace("{" + key + "}", self.table(other))
        sql, _ = text.convert(raw, "named" if self.dialect == "sqlite" else "pyformat")
        return sql

    def seqs(self, keys: list[int]) -> Any:
        """A list of keys as one parameter, bound the fastest plain way: an array literal as text (PostgreSQL; a
        Python list costs the driver about 1 µs an element to adapt) or a JSON array (SQLite)."""
        return "{" + ",".join(map(str, keys)) + "}" if self.dialect == "postgres" else json.dumps(keys)

    def execute(self, statement: str, name: str, params: dict[str, Any] | None = None,
                **tables: str) -> list[tuple]:
        """Run one bench statement in its own transaction (setup work, not timed); return its rows. ``tables``:
        the other queues the statement names (``{key}`` placeholders)."""
        conn = self.connect()  # SQLite: autocommit (isolation_level None); PostgreSQL: commit below
        try:
            if self.dialect == "postgres":
                conn.autocommit = statement == "vacuum"  # VACUUM cannot run in a transaction
            cur = conn.cursor()
            cur.execute(self.sql(statement, name, **tables), params or {})
            rows = cur.fetchall() if cur.description else []
            if self.dialect == "postgres" and not conn.autocommit:
                conn.commit()
            return rows
        finally:
            conn.close()

    # -- queues and backlogs ---------------------------------------------------------------------------
    def reset(self, name: str) -> None:
        """An empty queue ``name`` (dropped and created again by the provider)."""
        self.execute("drop_queue", name)
        with self.transport() as transport:
            transport.create_queue(self.address(name))

    def fill(self, name: str, count: int, expires_s: float | None = None) -> None:
        """Add ``count`` rows in one statement (generate_series / recursive CTE); not what is measured."""
        for start in range(0, count, 1_000_000):
            self.execute("fill", name, {"count": min(1_000_000, count - start), "expires_s": expires_s,
                                        "headers": HEADERS_TEXT, "body": BODY})

    def settle(self) -> None:
        """Write out what earlier work left dirty (PostgreSQL: a checkpoint; SQLite: the WAL into the database
        file), so that the next timed work does not pay for it. Not timed."""
        if self.dialect == "sqlite":
            conn = self.connect()
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
            return
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            checkpoint(conn)

    def vacuum(self, name: str) -> None:
        """Reclaim dead rows left by an earlier repeat (PostgreSQL)."""
        self.execute("vacuum", name)
