"""PostgreSQL dialect (psycopg 3 or psycopg2), wire-compatible with NServiceBus.Transport.PostgreSql."""

from __future__ import annotations

import json
import select
from collections.abc import Mapping
from typing import Any, ClassVar

from ..common.errors import NameCollisionError, NotAQueueError, PermissionDeniedError, QueueNotFoundError
from ..wire.address import QueueAddress, format_postgres, parse_postgres
from .base import Dialect, Finding

# SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html)
DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"
LOCK_NOT_AVAILABLE = "55P03"
UNDEFINED_TABLE = "42P01"
INVALID_SCHEMA_NAME = "3F000"
INSUFFICIENT_PRIVILEGE = "42501"
UNDEFINED_COLUMN = "42703"
UNIQUE_VIOLATION = "23505"
#: What a creator racing another one gets (upstream ignores them): duplicate table, duplicate object, and a
#: unique violation on a catalog (pg_type, pg_class) when both CREATE ... IF NOT EXISTS at the same moment.
DUPLICATE_OBJECT = ("42P07", "42710", "23505")
#: Identifiers longer than this many bytes are truncated by PostgreSQL (NAMEDATALEN - 1).
NAME_BYTES = 63
#: Schemas that hold system tables, never queues.
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
#: relkind letters, for saying what holds a name.
RELATION_KINDS = {"r": "table", "p": "partitioned table", "i": "index", "I": "partitioned index",
                  "S": "sequence", "v": "view", "m": "materialized view", "c": "composite type",
                  "f": "foreign table", "t": "TOAST table"}
CONNECTION_CLASS = "08"
OPERATOR_INTERVENTION = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now

EXPECTED_COLUMNS = {"id": "uuid", "expires": "timestamp without time zone", "headers": "text",
                    "body": "bytea", "seq": "integer"}
#: The delayed store as NServiceBus.Transport.PostgreSql 9.x creates it (0.1 of this provider made it with seq
#: and a due without time zone).
DELAYED_COLUMNS = {"id": "uuid", "headers": "text", "body": "bytea", "due": "timestamp with time zone"}


def pg_name(text: str) -> str:
    """A name as PostgreSQL stores it: cut to 63 bytes on a character boundary."""
    data = text.encode("utf-8")
    return text if len(data) <= NAME_BYTES else data[:NAME_BYTES].decode("utf-8", "ignore")


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg 3 or psycopg2 error."""
    return getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)


CREATE_ATTEMPTS = 5


class PostgresDialect(Dialect):
    """PostgreSQL: ``"schema"."table"``, ``FOR UPDATE SKIP LOCKED``, READ COMMITTED."""

    name = "postgres"
    sql_file = "postgres.sql"
    default_schema = "public"
    queue_ddl = ("create_queue_table", "create_queue_expires_index")
    index_kinds = ("seq", "expires", "due", "pkey", "seq_key")
    queue_migration = ("migrate_dedupe_ids", "migrate_build_id_index", "migrate_add_primary_key",
                       "migrate_build_seq_index", "migrate_add_seq_unique", "migrate_drop_index")
    delayed_migration = ("migrate_delayed_lock", "migrate_delayed_add_id", "migrate_delayed_primary_key",
                         "migrate_delayed_due_type", "migrate_delayed_drop_seq", "migrate_delayed_fillfactor",
                         "create_delayed_due_index", "migrate_delayed_drop_old_due_index")
    rights_hint = ("Sending needs INSERT (and USAGE on the seq sequence); receiving and peeking need SELECT and DELETE "
                   "on the queue tables, and UPDATE on their seq column (GRANT UPDATE (seq) ON ... TO ...; on a "
                   "delayed store, its id column): PostgreSQL requires an UPDATE right for the row locks of FOR "
                   "UPDATE SKIP LOCKED")

    autocommit_statements = True
    bounded_receives = True
    fragment_slots: ClassVar[Mapping[str, str]] = {"group_fields": "error_groups_fields"}
    send_many_is_one_statement = True

    def __init__(self, paramstyle: str = "pyformat") -> None:
        super().__init__(paramstyle)
        self._current_delayed: set[str] = set()  # delayed stores known to have the current shape
        self._text_send_many = self.statements["send_many"].with_text_parameters()

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

    def wire_address(self, address: QueueAddress) -> str:
        """``"schema"."table"``, always quoted, schema defaulting to ``public`` (NServiceBus.Transport.PostgreSql)."""
        return self.quote(address.schema or self.default_schema or "public") + "." + self.quote(address.table)

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, address: QueueAddress) -> str:
        return self.quote(address.schema or self.default_schema) + "." + self.quote(address.table)

    def index_name(self, address: QueueAddress, kind: str) -> str:
        """Index and constraint names: PostgreSQL's own for the keys (``<table>_pkey``, ``<table>_seq_key``),
        upstream's ``"<delayed table>_Due"``, this provider's ``<table>_exp_ix``; ``seq`` and ``legacy_due`` are
        the 0.1 names the migration replaces. Cut to 63 bytes as PostgreSQL cuts them."""
        table, delayed = address.table, self.delayed_address(address).table
        return pg_name({"seq": f"{table}_seq_ix", "expires": f"{table}_exp_ix", "due": f"{delayed}_Due",
                        "pkey": f"{table}_pkey", "seq_key": f"{table}_seq_key", "legacy_due": f"{table}_due_ix"}[kind])

    def system_table(self, address: QueueAddress) -> str | None:
        schema = address.schema or self.default_schema
        if schema in SYSTEM_SCHEMAS or schema.startswith("pg_"):
            return (f"{self.format_address(address)} is in the system schema {schema!r}: its tables belong to "
                    "PostgreSQL and are never queues; name a queue in your own schema (public by default)")
        return None

    def migration_identifiers(self, address: QueueAddress) -> dict[str, str]:
        ids = self.identifiers(address)
        schema = self.quote(address.schema or self.default_schema)
        ids["index"] = schema + "." + ids["seq_index"]
        ids["legacy_due_index"] = schema + "." + self.quote(self.index_name(address, "legacy_due"))
        return ids

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

    def commit_after(self, connection: Any, cursor: Any, last: Any) -> None:
        """psycopg 3 with a libpq that pipelines: the last statement and COMMIT leave together (one round trip);
        an error of either is raised when the pipeline syncs, and the transaction is not committed.

        A transaction's first statement is not pipelined with its BEGIN: psycopg 3 follows the implicit BEGIN of a
        pipeline with a Sync of its own and waits for it, and syncs again when the block ends, so a pipelined first
        statement cost three round trips, not one (libpq's protocol trace; issue 33)."""
        if not _pipelines(connection):
            super().commit_after(connection, cursor, last)
            return
        with connection.pipeline():  # one Sync when the block ends: both answered in one round trip
            last(cursor)
            self.execute(cursor, "commit")

    def autocommit(self, connection: Any, on: bool) -> None:
        """psycopg 3 and psycopg2 alike: an attribute, set while no transaction is open (no round trip)."""
        if connection.autocommit != on:
            connection.autocommit = on

    def create_queue(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        """Create idempotently; a .NET endpoint creating the same table at the same moment is tolerated (its
        duplicate-object errors mean the table is there: try again, and IF NOT EXISTS finds it)."""
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                self._create(connection, address, delayed)
                return
            except Exception as exc:
                if self.is_duplicate_object(exc) and attempt < CREATE_ATTEMPTS:
                    continue
                if self.is_permission_denied(exc):
                    schema = address.schema or self.default_schema
                    raise PermissionDeniedError(
                        f"creating queue {self.format_address(address)!r} needs CREATE on schema {schema!r}: "
                        f"{exc}".strip()) from exc
                raise

    def _create(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        schema = address.schema or self.default_schema
        ids = self.identifiers(address)
        with self.transaction(connection) as cur:
            self.execute(cur, "create_lock", {"lock_name": f"sqlqueue:{schema}.{address.table}"})
            if not self.scalar(cur, "schema_exists", {"schema_name": schema}):
                raise QueueNotFoundError(
                    f"schema {schema!r} does not exist; queues never create schemas: run "
                    f"CREATE SCHEMA {self.quote(schema)} first (or use an existing schema)")
            # CREATE ... IF NOT EXISTS skips silently when the name is held by anything: check before and after
            # (the transaction rolls back, nothing is left half made)
            self._refuse_not_a_queue(cur, address, delayed)
            for name in self.queue_ddl + (self.delayed_ddl if delayed else ()):
                self.execute(cur, name, None, **ids)
            self._refuse_not_a_queue(cur, address, delayed)
            taken = self.taken_names(cur, address, delayed)
            if taken:
                raise NameCollisionError("; ".join(
                    f"queue {self.format_address(address)!r} needs the index name {name!r} ({kind}), which is "
                    f"taken by {holder}" for kind, name, holder in taken)
                    + ": nothing was created; rename or drop that object, or choose another queue name")

    def _refuse_not_a_queue(self, cur: Any, address: QueueAddress, delayed: bool) -> None:
        reason = self.not_a_queue(cur, address)
        if reason is None and delayed:
            reason = self.not_a_queue(cur, self.delayed_address(address), DELAYED_COLUMNS)
        if reason is not None:
            raise NotAQueueError(reason + ": nothing was created")

    def relation(self, cur: Any, schema: str, name: str) -> tuple[str, str | None, bool | None] | None:
        row = self.execute(cur, "relation_named", {"schema_name": schema, "name": name}).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def not_a_queue(self, cursor: Any, address: QueueAddress,
                    columns: dict[str, str] | None = None) -> str | None:
        schema = address.schema or self.default_schema
        name = self.format_address(address)
        found = self.relation(cursor, schema, address.table)
        if found is None:
            return None
        kind = found[0]
        if kind not in ("r", "p"):
            holder = RELATION_KINDS.get(kind, f"relation of kind {kind!r}")
            owner = f" of table {found[1]!r}" if found[1] else ""
            return f"{name} is {_a(holder)}{owner}, not a queue table"
        wanted = columns or EXPECTED_COLUMNS
        have = {row[0] for row in self.execute(cursor, "list_columns",
                                               {"schema_name": schema, "table_name": address.table})}
        missing = [c for c in wanted if c not in have]
        if columns is None and missing:
            return (f"{name} is a table but not a queue table: it lacks the column(s) {', '.join(missing)} "
                    f"(a queue table has {', '.join(wanted)})")
        if columns is not None and not {"headers", "body", "due"} <= have:
            return f"{name} is a table but not a delayed store: it lacks headers, body or due"
        return None

    def taken_names(self, cursor: Any, address: QueueAddress, delayed: bool) -> list[tuple[str, str, str]]:
        schema = address.schema or self.default_schema
        delayed_table = self.delayed_address(address).table
        wanted = [("expires", address.table)] + ([("due", delayed_table)] if delayed else [])
        taken = []
        for kind, table in wanted:
            name = self.index_name(address, kind)
            found = self.relation(cursor, schema, name)
            if found is not None and not (found[0] == "i" and found[1] == table):
                holder = RELATION_KINDS.get(found[0], "an object")
                taken.append((kind, name, f"{_a(holder)} {schema}.{name}"
                              + (f" of table {found[1]!r}" if found[1] else "")))
        return taken

    # -- push wake-ups (LISTEN/NOTIFY) -------------------------------------------------------------
    supports_notify = True
    notify_ddl = ("create_wake_function", "drop_notify_trigger", "create_notify_trigger")

    def notify_identifiers(self, address: QueueAddress) -> dict[str, str]:
        """The queue's identifiers plus its wake-up trigger and the schema's wake-up function."""
        schema = address.schema or self.default_schema
        return {**self.identifiers(address), "notify_trigger": self.quote(self.notify_trigger_name(address)),
                "wake_function": self.quote(schema) + "." + self.quote("sqlqueue_wake")}

    def notify_trigger_name(self, address: QueueAddress) -> str:
        return f"{address.table}_notify"

    def install_notify(self, connection: Any, address: QueueAddress) -> None:
        with self.transaction(connection) as cur:
            schema = address.schema or self.default_schema
            self.execute(cur, "create_lock", {"lock_name": f"sqlqueue:{schema}.{address.table}"})
            for name in self.notify_ddl:
                self.execute(cur, name, None, **self.notify_identifiers(address))

    def uninstall_notify(self, connection: Any, address: QueueAddress) -> None:
        with self.transaction(connection) as cur:
            self.execute(cur, "drop_notify_trigger", None, **self.notify_identifiers(address))

    def notify_installed(self, cursor: Any, address: QueueAddress) -> bool:
        return bool(self.scalar(cursor, "notify_installed", {"table": self.qualified(address),
                                                               "trigger_name": self.notify_trigger_name(address)}))

    def notify_function_of(self, cursor: Any, address: QueueAddress) -> str | None:
        """The function the queue's wake-up trigger calls (``sqlqueue_wake``, or ``sqlqueue_notify`` when the
        trigger was installed by an earlier version and notifies on every send), or None without a trigger."""
        return self.scalar(cursor, "notify_function_of", {"table": self.qualified(address),
                                                          "trigger_name": self.notify_trigger_name(address)})

    def hold_wakeups(self, connection: Any, address: QueueAddress) -> str | None:
        """A receiver on this listening connection starts waiting: make senders notify for the queue.

        First waits for the senders that relied on another's notification instead of notifying (the covered lock,
        ``create_wake_function``). Returns ``"held"`` when this connection took the queue's wake-up lock (after
        every sender's transaction that started before; release it with ``release_wakeups``), ``"other"`` when
        another receiver holds it (senders notify already), None when a sender's transaction kept it past
        ``lock_timeout`` (a send in flight may be found only by the fallback poll). Either way, look at the queue
        once more before waiting."""
        cur = connection.cursor()
        table = {"table": self.qualified(address)}
        try:
            held = self.scalar(cur, "wake_lock_try", table)
        except Exception as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            held = self.scalar(cur, "wake_lock_try_now", table)  # a send relying on a notification is still open
        if held:
            return "held"
        if self.scalar(cur, "wake_lock_held", table):
            return "other"
        try:
            self.execute(cur, "wake_lock_wait", table)
        except Exception as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            return "other" if self.scalar(cur, "wake_lock_held", table) else None
        return "held"

    def queue_has_rows(self, connection: Any, address: QueueAddress) -> bool:
        """Whether the queue holds a row (a look on the listening connection, after taking the wake-up lock)."""
        return bool(self.scalar(connection.cursor(), "wake_peek", None, **self.identifiers(address)))

    def release_wakeups(self, connection: Any, address: QueueAddress) -> None:
        """The receiver on this connection is busy: senders stop notifying unless another receiver waits."""
        self.execute(connection.cursor(), "wake_lock_release", {"table": self.qualified(address)})

    def is_wakeup_for(self, payload: str, address: QueueAddress) -> bool:
        """Whether a wake-up's payload (``["schema", "table"]``) names this queue."""
        try:
            return json.loads(payload) == [address.schema or self.default_schema, address.table]
        except ValueError:
            return False

    def listen(self, connection: Any) -> None:
        connection.autocommit = True
        cur = connection.cursor()
        self.execute(cur, "listen")
        self.execute(cur, "wake_lock_timeout")

    def notifications(self, connection: Any, timeout: float) -> list[str]:
        """Payloads received on a listening connection within ``timeout`` seconds (psycopg 3 or psycopg2)."""
        if hasattr(connection, "notifies") and callable(connection.notifies):  # psycopg 3
            return [n.payload for n in connection.notifies(timeout=timeout, stop_after=1)]
        if select.select([connection], [], [], timeout) == ([], [], []):  # psycopg2: wait on the socket
            return []
        connection.poll()
        found = [n.payload for n in connection.notifies]
        connection.notifies.clear()
        return found

    def send_many(self, cursor: Any, address: QueueAddress, rows: list[dict[str, Any]]) -> None:
        params = {
            "ids": [r["id"] for r in rows],
            "ttbr_ms": [r["ttbr_ms"] for r in rows],
            "headers": [r["headers"] for r in rows],
            "bodies": [r["body"] for r in rows],
        }
        statement = self.statements["send_many"]
        if type(cursor).__module__.split(".")[0] != "psycopg":  # psycopg 3 takes %(name)b; psycopg2 does not
            statement = self._text_send_many
        self.execute_statement(cursor, statement, params, self.identifiers(address))

    def seq_list_param(self, seqs: list[int]) -> Any:
        """An integer array literal (``{1,2,3}``): bound as one text value, it costs a tenth of what the driver
        spends adapting a list element by element (about 1 µs a row of a batch)."""
        return "{" + ",".join(map(str, map(int, seqs))) + "}"

    def table_exists(self, cursor: Any, address: QueueAddress) -> bool:
        return bool(self.scalar(cursor, "table_exists", {
            "schema_name": address.schema or self.default_schema, "table_name": address.table}))

    def discover(self, cursor: Any) -> list[QueueAddress]:
        rows = self.execute(cursor, "discover_queues").fetchall()
        return [QueueAddress(table, None if schema == self.default_schema else schema) for schema, table in rows]

    def move_due_delayed(self, cursor: Any, address: QueueAddress, batch_size: int) -> int:
        """Move by id (reused), as upstream's mover; a 0.1 delayed store (no id column) by seq until migrated."""
        ids = self.identifiers(address)
        statement = "move_due_delayed" if self._delayed_has_id(cursor, address) else "move_due_delayed_legacy"
        return max(self.execute(cursor, statement, {"batch_size": batch_size}, **ids).rowcount, 0)

    def _delayed_has_id(self, cursor: Any, address: QueueAddress) -> bool:
        delayed = self.delayed_address(address)
        key = self.qualified(delayed)
        if key in self._current_delayed:
            return True
        has_id = bool(self.scalar(cursor, "column_exists", {
            "schema_name": delayed.schema or self.default_schema, "table_name": delayed.table, "column_name": "id"}))
        if has_id:  # only the current shape is remembered: a 0.1 store is asked again until it is migrated
            self._current_delayed.add(key)
        return has_id

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
        primary = {row[1] for row in indexes if row[5] and row[4]}
        unique = {row[1] for row in indexes if row[4]}
        if "id" in columns and "id" not in primary:
            findings.append(Finding(
                queue, "missing_primary_key",
                "no primary key on id (a table made by airflow-sqlqueue 0.1): .NET receivers delete by id, so "
                "each of their receives scans the table; repair builds it without blocking senders",
                ("migrate_primary_key",)))
        if "seq" in columns and "seq" not in unique:
            scans = "" if "seq" in first else ", and with no index on seq every receive and peek scans the table"
            findings.append(Finding(
                queue, "missing_seq_unique",
                f"seq is not UNIQUE as NServiceBus creates it (a table made by airflow-sqlqueue 0.1){scans}; "
                "repair builds the constraint without blocking senders", ("migrate_seq_unique",)))
        if "expires" not in first:
            findings.append(self._index_finding(cursor, address, "expires", address.table, (
                "missing_expires_index", "no index on expires: purging expired messages scans the table",
                ("create_queue_expires_index",))))
        findings += self._check_delayed(cursor, address, queue)
        stats = self.execute(cursor, "table_bloat", where).fetchone()
        if stats is not None:
            live, dead = int(stats[0]), int(stats[1])
            if dead > 10_000 and dead > live:
                findings.append(Finding(queue, "dead_tuples",
                                        f"{dead} dead tuples beside {live} live ones slow receives; VACUUM it",
                                        ("vacuum",)))
        return findings

    def _check_delayed(self, cursor: Any, address: QueueAddress, queue: str) -> list[Finding]:
        """Findings for the queue's delayed store, when it has one."""
        delayed = self.delayed_address(address)
        where = {"schema_name": delayed.schema or self.default_schema, "table_name": delayed.table}
        columns = {name: data_type for name, data_type, _ in self.execute(cursor, "list_columns", where)}
        if not columns:
            return []
        findings = []
        if any(columns.get(c) != t for c, t in DELAYED_COLUMNS.items()) or "seq" in columns:
            findings.append(Finding(
                queue, "legacy_delayed_table",
                f"the delayed store {self.format_address(delayed)} has the airflow-sqlqueue 0.1 shape "
                f"({', '.join(f'{c} {t}' for c, t in columns.items())}); NServiceBus creates id uuid primary key, "
                "headers, body, due timestamptz, and its mover deletes by id: a .NET endpoint cannot move these "
                "messages. Repair migrates it in one short transaction (senders wait, nothing is lost)",
                ("migrate_delayed",)))
        if "due" not in {row[1] for row in self.execute(cursor, "list_indexes", where)}:
            findings.append(self._index_finding(cursor, address, "due", delayed.table, (
                "missing_due_index", "no index on due in the delayed store: every move scans it",
                ("create_delayed_due_index",))))
        return findings

    def _index_finding(self, cursor: Any, address: QueueAddress, kind: str, table: str,
                       missing: tuple[str, str, tuple[str, ...]]) -> Finding:
        """The finding for a missing index: repairable, unless its name is taken by another object."""
        queue = self.format_address(address)
        for taken_kind, name, holder in self.taken_names(cursor, address, kind == "due"):
            if taken_kind == kind:
                return Finding(queue, "index_name_taken",
                               f"the {kind} index of {table!r} is missing and cannot be created: its name {name!r} "
                               f"is taken by {holder}; rename or drop that object, then run check --repair")
        return Finding(queue, *missing)

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

    def is_undefined_column(self, exc: BaseException) -> bool:
        return sqlstate(exc) == UNDEFINED_COLUMN

    def is_duplicate_object(self, exc: BaseException) -> bool:
        return sqlstate(exc) in DUPLICATE_OBJECT

    def is_unique_violation(self, exc: BaseException) -> bool:
        return sqlstate(exc) == UNIQUE_VIOLATION


_PIPELINES: dict[type, bool] = {}


def _pipelines(connection: Any) -> bool:
    """Whether a connection can pipeline statements (psycopg 3 on libpq 14 or later; never psycopg2)."""
    kind = type(connection)
    known = _PIPELINES.get(kind)
    if known is None:
        try:
            import psycopg

            known = issubclass(kind, psycopg.Connection) and psycopg.Pipeline.is_supported()
        except ImportError:  # pragma: no cover - psycopg2 only
            known = False
        _PIPELINES[kind] = known
    return known


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun
