"""PostgreSQL dialect (psycopg 3 or psycopg2), wire-compatible with NServiceBus.Transport.PostgreSql."""

from __future__ import annotations

import json
from typing import Any

from ..address import QueueAddress, format_postgres, parse_postgres
from ..errors import PermissionDeniedError, QueueNotFoundError
from .base import Dialect, Finding

# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html)
DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"
LOCK_NOT_AVAILABLE = "55P03"
UNDEFINED_TABLE = "42P01"
INVALID_SCHEMA_NAME = "3F000"
INSUFFICIENT_PRIVILEGE = "42501"
CONNECTION_CLASS = "08"
OPERATOR_INTERVENTION = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now

EXPECTED_COLUMNS = {"id": "uuid", "expires": "timestamp without time zone", "headers": "text",
                    "body": "bytea", "seq": "integer"}


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg 3 or psycopg2 error."""
    return getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)


class PostgresDialect(Dialect):
    """PostgreSQL: ``"schema"."table"``, ``FOR UPDATE SKIP LOCKED``, READ COMMITTED."""

    name = "postgres"
    sql_file = "postgres.sql"
    default_schema = "public"
    queue_ddl = ("create_queue_table", "create_queue_seq_index", "create_queue_expires_index")
    rights_hint = ("Sending needs INSERT (and USAGE on the seq sequence); receiving and peeking need SELECT and DELETE "
                   "on the queue tables, and UPDATE on their seq column (GRANT UPDATE (seq) ON ... TO ...): PostgreSQL "
                   "requires an UPDATE right for the row locks of FOR UPDATE SKIP LOCKED")

    def header_field(self, value: Any) -> Any:
        """``failed_page`` finds header values by pattern: the JSON string text, unescaped here (kept raw when
        the escapes do not decode)."""
        if value is None:
            return None
        try:
            return json.loads(f'"{value}"')
        except ValueError:
            return value

    def parse_address(self, text: str | QueueAddress) -> QueueAddress:
        if isinstance(text, QueueAddress):
            text = self.format_address(text)
        return parse_postgres(text)

    def format_address(self, address: QueueAddress) -> str:
        return format_postgres(address)

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, address: QueueAddress) -> str:
        return self.quote(address.schema or self.default_schema) + "." + self.quote(address.table)

    def configure(self, connection: Any) -> None:
        # READ COMMITTED is what SKIP LOCKED receivers need; set it explicitly (a server default may differ)
        if hasattr(connection, "isolation_level") and hasattr(connection, "autocommit"):
            connection.autocommit = False
        try:
            import psycopg

            if isinstance(connection, psycopg.Connection):
                connection.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
                return
        except ImportError:  # pragma: no cover - psycopg2 only
            pass
        if hasattr(connection, "set_session"):  # psycopg2
            connection.set_session(isolation_level="READ COMMITTED", autocommit=False)

    def create_queue(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        schema = address.schema or self.default_schema
        ids = self.identifiers(address)
        try:
            with self.transaction(connection) as cur:
                self.execute(cur, "create_lock", {"lock_name": f"sqlqueue:{schema}.{address.table}"})
                if not self.scalar(cur, "schema_exists", {"schema_name": schema}):
                    raise QueueNotFoundError(
                        f"schema {schema!r} does not exist; queues never create schemas: run "
                        f"CREATE SCHEMA {self.quote(schema)} first (or use an existing schema)")
                for name in self.queue_ddl + (self.delayed_ddl if delayed else ()):
                    self.execute(cur, name, None, **ids)
        except Exception as exc:
            if self.is_permission_denied(exc):
                raise PermissionDeniedError(
                    f"creating queue {self.format_address(address)!r} needs CREATE on schema {schema!r}: "
                    f"{exc}".strip()) from exc
            raise

    def send_many(self, cursor: Any, address: QueueAddress, rows: list[dict[str, Any]]) -> None:
        params = {
            "ids": [r["id"] for r in rows],
            "ttbr_ms": [r["ttbr_ms"] for r in rows],
            "headers": [r["headers"] for r in rows],
            "bodies": [r["body"] for r in rows],
        }
        self.execute(cursor, "send_many", params, **self.identifiers(address))

    def seq_list_param(self, seqs: list[int]) -> Any:
        return [int(s) for s in seqs]

    def table_exists(self, cursor: Any, address: QueueAddress) -> bool:
        return bool(self.scalar(cursor, "table_exists", {
            "schema_name": address.schema or self.default_schema, "table_name": address.table}))

    def discover(self, cursor: Any) -> list[QueueAddress]:
        rows = self.execute(cursor, "discover_queues").fetchall()
        return [QueueAddress(table, None if schema == self.default_schema else schema) for schema, table in rows]

    def check(self, cursor: Any, address: QueueAddress) -> list[Finding]:
        where = {"schema_name": address.schema or self.default_schema, "table_name": address.table}
        queue = self.format_address(address)
        findings: list[Finding] = []
        columns = {name: data_type for name, data_type, _ in self.execute(cursor, "list_columns", where)}
        for column, expected in EXPECTED_COLUMNS.items():
            actual = columns.get(column)
            if actual is None:
                findings.append(Finding(queue, "missing_column", f"column {column} ({expected}) is missing"))
            elif actual != expected and not (column == "headers" and actual == "character varying"):
                findings.append(Finding(queue, "wrong_column_type",
                                        f"column {column} is {actual}, expected {expected}"))
        if columns.get("headers") == "character varying":
            findings.append(Finding(queue, "varchar_headers",
                                    "headers is character varying; NServiceBus creates text"))
        indexes = self.execute(cursor, "list_indexes", where).fetchall()
        first = {row[1] for row in indexes}
        if "seq" not in first:
            findings.append(Finding(queue, "missing_seq_index",
                                    "no index on seq: every receive and peek scans the table",
                                    ("create_queue_seq_index",)))
        if "expires" not in first:
            findings.append(Finding(queue, "missing_expires_index",
                                    "no index on expires: purging expired messages scans the table",
                                    ("create_queue_expires_index",)))
        stats = self.execute(cursor, "table_bloat", where).fetchone()
        if stats is not None:
            live, dead = int(stats[0]), int(stats[1])
            if dead > 10_000 and dead > live:
                findings.append(Finding(queue, "dead_tuples",
                                        f"{dead} dead tuples beside {live} live ones slow receives; VACUUM it",
                                        ("vacuum",)))
        return findings

    def is_deadlock(self, exc: BaseException) -> bool:
        return sqlstate(exc) in (DEADLOCK_DETECTED, SERIALIZATION_FAILURE, LOCK_NOT_AVAILABLE)

    def is_connection_lost(self, exc: BaseException) -> bool:
        state = sqlstate(exc)
        if state is not None:
            return state.startswith(CONNECTION_CLASS) or state in OPERATOR_INTERVENTION
        return type(exc).__name__ in ("OperationalError", "InterfaceError")

    def is_missing_table(self, exc: BaseException) -> bool:
        return sqlstate(exc) in (UNDEFINED_TABLE, INVALID_SCHEMA_NAME)

    def is_permission_denied(self, exc: BaseException) -> bool:
        return sqlstate(exc) == INSUFFICIENT_PRIVILEGE
