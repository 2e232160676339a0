"""SQL Server dialect (pymssql or pyodbc), wire-compatible with NServiceBus.Transport.SqlServer 9.x."""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from ..common.errors import PermissionDeniedError, QueueNotFoundError
from ..wire.address import QueueAddress, format_mssql, parse_mssql, validate_mssql
from .base import Dialect, Finding, RawRow, Row
from .sqlfile import Statement, numbered

log = logging.getLogger(__name__)

# SQL Server error numbers (sys.messages) and DB-Library / network numbers the drivers report.
DEADLOCK_VICTIM = 1205
LOCK_TIMEOUT = 1222
OBJECT_EXISTS = 2714  # a concurrent creator made the table first
INDEX_EXISTS = 1913  # ... or the index
INVALID_OBJECT = 208
#: Babelfish's number for a PostgreSQL error it maps to no SQL Server number: what it means is in the text
#: (Babelfish 4.3 reports a missing table this way, as ``relation "..." does not exist``, not as 208).
UNMAPPED_ERROR = 33557097
SCHEMA_MISSING = (2760, 15151)  # "specified schema name does not exist", "cannot find the schema"
DATABASE_MISSING = 911
PERMISSION_DENIED = (229, 230, 262, 297, 300, 1088)
CONNECTION_LOST = (
    20003,  # DB-Lib: server connection timed out
    20004,  # DB-Lib: read from the server failed
    20006,  # DB-Lib: write to the server failed
    20009,  # DB-Lib: unable to connect
    20047,  # DB-Lib: DBPROCESS is dead or not enabled
    10054,  # TCP: connection reset by peer
    10053,  # TCP: connection aborted
    233,  # named pipes: no process is on the other end of the pipe
    64,  # the specified network name is no longer available
)
CONNECTION_SQLSTATES = ("08S01", "08001", "08003", "08004", "08007")
DEADLOCK_SQLSTATE = "40001"

#: Column types of the queue table as sys.types names it. Recoverable is optional (old tables lack it).
EXPECTED_COLUMNS = {"Id": "uniqueidentifier", "CorrelationId": "varchar", "ReplyToAddress": "varchar",
                    "Recoverable": "bit", "Expires": "datetime", "Headers": "nvarchar", "Body": "varbinary",
                    "RowVersion": "bigint"}
OPTIONAL_COLUMNS = ("Recoverable",)
#: Statements that write the Recoverable column, each with a variant for tables that lack it.
RECOVERABLE_STATEMENTS = frozenset({"send", "send_many", "send_many_values", "insert_raw", "move_due_delayed"})
#: OPENJSON needs database compatibility level 130 (SQL Server 2016) or more.
OPENJSON_LEVEL = 130
#: Messages per send_many_values statement: 5 parameters each stays under SQL Server's 2100 per statement.
VALUES_CHUNK = 400
#: Positions per delete_by_seq_list statement (1000 parameters).
IN_LIST_CHUNK = 1000
#: A heap is bloated when it holds at least this many pages and more than this many pages per row.
BLOAT_MIN_PAGES = 1000
BLOAT_PAGES_PER_ROW = 2

_PYODBC_NATIVE = re.compile(r"\((-?\d+)\)\s*\(SQL\w*\)")  # "... (1205) (SQLExecDirectW)"
_SERVER_MESSAGE = re.compile(r"SQL Server message (\d+)")
_DBLIB_MESSAGE = re.compile(r"DB-Lib error message (\d+)")
_TUPLE_TEXT = re.compile(r"\((\d+), b?['\"]")  # "Cannot commit transaction: (20047, b'DBPROCESS is dead')"
#: The text of an UNMAPPED_ERROR for a missing table, schema or database (a missing catalog view, ``sys.x``, is
#: an engine gap, not a missing queue).
_MISSING_OBJECT_TEXT = re.compile(r'\b(?:relation|table|schema|database) "(?!sys\.)[^"]*" does not exist|'
                                  r"invalid object name '(?!sys\.)", re.IGNORECASE)
_CLOSED = re.compile(r"closed connection|connection is closed|cursor is closed|dbprocess is dead|"
                     r"communication link failure|connection is busy with results", re.IGNORECASE)


def error_number(exc: BaseException) -> int | None:
    """The SQL Server error number of a pymssql or pyodbc error (None when it carries none).

    pymssql raises ``OperationalError(number, message_bytes)`` from statements and
    ``OperationalError((number, message_bytes))`` from ``connect``; its ``_mssql.MSSQLDatabaseException``
    has ``.number``. pyodbc raises ``Error(sqlstate, text)`` where the text ends ``... (1205) (SQLExecDirectW)``.
    """
    number = getattr(exc, "number", None)
    if isinstance(number, int) and not isinstance(number, bool) and number:
        return number
    args = getattr(exc, "args", ())
    first = args[0] if args else None
    if isinstance(first, tuple) and first and isinstance(first[0], int):
        first = first[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return first
    text = _text(exc)
    for pattern in (_PYODBC_NATIVE, _SERVER_MESSAGE, _TUPLE_TEXT, _DBLIB_MESSAGE):
        match = pattern.search(text)
        if match and int(match.group(1)) != 0:
            return int(match.group(1))
    return None


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a pyodbc error (its first argument), else None."""
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str) and re.fullmatch(r"[0-9A-Z]{5}", args[0]):
        return args[0]
    return None


def _text(exc: BaseException) -> str:
    """Every message text an error carries, decoded (pymssql messages are bytes)."""
    parts: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, bytes):
            parts.append(value.decode("utf-8", "replace"))
        elif isinstance(value, tuple):
            for item in value:
                add(item)
        elif isinstance(value, str):
            parts.append(value)

    for arg in getattr(exc, "args", ()):
        add(arg)
    return "\n".join(parts)


def _numbers(exc: BaseException) -> set[int]:
    """The primary error number and every DB-Library / native number mentioned in the text."""
    found = {n for n in (error_number(exc),) if n is not None}
    text = _text(exc)
    for pattern in (_PYODBC_NATIVE, _DBLIB_MESSAGE):
        found.update(int(m) for m in pattern.findall(text))
    return found


class MssqlDialect(Dialect):
    """SQL Server: ``[catalog].[schema].[table]``, ``UPDLOCK, READPAST, ROWLOCK`` under READ COMMITTED."""

    name = "mssql"
    sql_file = "mssql.sql"
    default_schema = "dbo"
    queue_ddl = ("create_queue_table", "create_queue_seq_index", "create_queue_expires_index")
    seq_column = "RowVersion"

    def __init__(self, paramstyle: str = "pyformat", default_catalog: str | None = None) -> None:
        super().__init__(paramstyle)
        self.default_catalog = default_catalog
        # qualified table name -> whether it has the Recoverable column (old tables do not)
        self._recoverable: dict[str, bool] = {}
        #: Lowest database compatibility level a connection reported (None: not read yet).
        self.compatibility_level: int | None = None
        #: Whether a connection reported a Babelfish server in @@VERSION.
        self.babelfish = False

    # -- addresses and identifiers ---------------------------------------------------------------
    def parse_address(self, text: str | QueueAddress) -> QueueAddress:
        if isinstance(text, QueueAddress):
            return validate_mssql(text)
        return parse_mssql(text)

    def format_address(self, address: QueueAddress) -> str:
        return format_mssql(address)

    def wire_address(self, address: QueueAddress) -> str:
        """``table@[schema]@[catalog]``: schema (default ``dbo``) and catalog (default the connection's database)
        always given, as NServiceBus.Transport.SqlServer writes its addresses; without a known catalog,
        ``table@[schema]``."""
        catalog = address.catalog or self.default_catalog
        full = QueueAddress(address.table, address.schema or self.default_schema or "dbo", catalog)
        return format_mssql(full)

    def quote(self, name: str) -> str:
        return "[" + name.replace("]", "]]") + "]"

    def qualified(self, address: QueueAddress) -> str:
        catalog = address.catalog or self.default_catalog
        parts = ([catalog] if catalog else []) + [address.schema or self.default_schema, address.table]
        return ".".join(self.quote(p) for p in parts)

    def index_name(self, address: QueueAddress, kind: str) -> str:
        # index names are per table in SQL Server: every queue uses NServiceBus's fixed names
        return {"seq": "Index_RowVersion", "expires": "Index_Expires", "due": "Index_Due"}[kind]

    def _make_identifiers(self, address: QueueAddress) -> dict[str, str]:
        ids = super()._make_identifiers(address)
        catalog = address.catalog or self.default_catalog
        ids["sys"] = self.quote(catalog) + ".sys" if catalog else "sys"
        return ids

    # -- statements ------------------------------------------------------------------------------
    def driver_identifier(self, quoted: str) -> str:
        # neither pymssql nor pyodbc unescapes '%%': an identifier goes in verbatim (see formats_values)
        return quoted

    def formats_values(self, identifiers: dict[str, str]) -> bool:
        """pymssql substitutes ``%(name)s`` anywhere in the text, identifiers included, and has no escape: when an
        identifier holds a ``%``, the values are put into the SQL parts here, with pymssql's own substitution,
        and the text goes to the driver without parameters (so it substitutes nothing)."""
        return self.paramstyle == "pyformat" and any("%" in v for v in identifiers.values())

    def format_values(self, part: str, params: dict[str, Any]) -> str:
        from pymssql import _mssql  # a pyformat SQL Server connection is a pymssql one

        return _mssql.substitute_params(part, params).decode("utf-8")

    @property
    def uses_openjson(self) -> bool:
        """Batch send and batch delete use OPENJSON (level 130+, not Babelfish), else VALUES rows and IN lists."""
        level = self.compatibility_level
        return not self.babelfish and (level is None or level >= OPENJSON_LEVEL)

    def execute(self, cursor: Any, name: str, params: dict[str, Any] | None = None, **identifiers: str) -> Any:
        """Run a named statement; picks the variant without Recoverable for old tables, skips no-ops."""
        if name == "release_savepoint":
            return cursor  # SQL Server has no RELEASE SAVEPOINT; do not spend a round trip on a no-op
        return super().execute(cursor, self._variant(cursor, name, identifiers), params, **identifiers)

    def runner(self, name: str, identifiers: dict[str, str]) -> Callable[[Any, dict[str, Any] | None], Any]:
        """Through ``execute`` each time: the variant depends on the table, and values may be formatted in."""
        return lambda cursor, params: self.execute(cursor, name, params, **identifiers)

    def executemany(self, cursor: Any, name: str, seq_params: Iterable[dict[str, Any]], **identifiers: str) -> None:
        super().executemany(cursor, self._variant(cursor, name, identifiers), seq_params, **identifiers)

    def _variant(self, cursor: Any, name: str, identifiers: dict[str, str]) -> str:
        if name not in RECOVERABLE_STATEMENTS or "queue" not in identifiers:
            return name
        table = identifiers["queue"]
        known = self._recoverable.get(table)
        if known is None:
            row = self.execute(cursor, "column_exists", {"object_name": table, "column_name": "Recoverable"}).fetchone()
            has_column, has_table = (bool(row[0]), bool(row[1])) if row else (True, False)
            if not has_table:
                return name  # the statement itself reports the missing table
            known = self._recoverable[table] = has_column
        return name if known else name + "_no_recoverable"

    # -- connections -------------------------------------------------------------------------------
    def configure(self, connection: Any) -> None:
        """Autocommit off and READ COMMITTED for the session (READPAST needs it; a server default may differ)."""
        autocommit = getattr(connection, "autocommit", None)
        if callable(autocommit):
            autocommit(False)  # pymssql: a method
        elif autocommit is not None:
            connection.autocommit = False  # pyodbc: an attribute
        cursor = connection.cursor()
        try:
            self.execute(cursor, "set_isolation")
            self._read_server_facts(cursor)
        finally:
            cursor.close()
        connection.commit()

    def _read_server_facts(self, cursor: Any) -> None:
        """Compatibility level and engine of this connection's database; unreadable counts as "no OPENJSON"."""
        try:
            row = self.execute(cursor, "server_facts").fetchone()
        except Exception as exc:  # noqa: BLE001 - a server that cannot say gets the statements every level has
            log.info("could not read the database compatibility level (%s); batch statements avoid OPENJSON",
                     type(exc).__name__)
            row = (0, "")
        level = int(row[0]) if row and row[0] is not None else 0
        version = str(row[1] or "") if row else ""
        self.compatibility_level = level if self.compatibility_level is None else min(level, self.compatibility_level)
        self.babelfish = self.babelfish or "babelfish" in version.lower()

    # -- values ----------------------------------------------------------------------------------
    def to_raw_row(self, row: Row) -> RawRow:
        """pymssql returns uuid.UUID, pyodbc an upper-case str; raw 16 bytes are SQL Server's mixed-endian form."""
        raw_id, seq, expired, headers, body = row
        if isinstance(raw_id, bytes | bytearray) and len(raw_id) == 16:
            raw_id = uuid.UUID(bytes_le=bytes(raw_id))
        elif isinstance(raw_id, bytes | bytearray):
            raw_id = raw_id.decode("ascii")
        return super().to_raw_row((raw_id, seq, expired, headers, body))

    # -- operations ------------------------------------------------------------------------------
    def create_queue(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        """Create the queue (and delayed) table with their indexes: check, app lock, re-check, create.

        A table created meanwhile by a creator that does not take the same lock (errors 2714 / 1913) counts as
        created. Schemas are never created.
        """
        self._create_table(connection, address, address, self.queue_ddl)
        if delayed:
            self._create_table(connection, address, self.delayed_address(address), self.delayed_ddl)

    def _create_table(self, connection: Any, address: QueueAddress, table: QueueAddress,
                      statements: tuple[str, ...]) -> None:
        ids = self.identifiers(address)
        object_name = self.qualified(table)
        schema = table.schema or self.default_schema
        try:
            with self.transaction(connection) as cur:
                # reads a catalog view first: that also opens pyodbc's implicit transaction for the app lock
                if self._exists(cur, object_name, ids):
                    return
                self.execute(cur, "create_lock", {"lock_name": object_name + "_lock"})
                if not self.scalar(cur, "schema_exists", {"schema_name": schema}, **ids):
                    raise QueueNotFoundError(self._missing_schema(table))
                if self._exists(cur, object_name, ids):
                    return
                for name in statements:
                    self.execute(cur, name, None, **ids)
        except (QueueNotFoundError, PermissionDeniedError):
            raise
        except Exception as exc:
            number = error_number(exc)
            if number in (OBJECT_EXISTS, INDEX_EXISTS):
                with self.transaction(connection) as cur:
                    if self._exists(cur, object_name, ids):
                        log.debug("%s was created by a concurrent creator", object_name)
                        return
                raise
            if self.is_permission_denied(exc):
                raise PermissionDeniedError(
                    f"creating {self.format_address(table)!r} needs CREATE TABLE in the database and ALTER on "
                    f"schema {schema!r}, and VIEW DEFINITION to see existing queues (running needs only SELECT, "
                    f"INSERT, DELETE): {exc}") from exc
            if number in SCHEMA_MISSING + (DATABASE_MISSING,):
                raise QueueNotFoundError(self._missing_schema(table) + f": {exc}") from exc
            raise

    def _missing_schema(self, table: QueueAddress) -> str:
        schema = table.schema or self.default_schema
        catalog = table.catalog or self.default_catalog
        where = f" in database {catalog!r}" if catalog else ""
        return (f"schema {schema!r}{where} does not exist; queues never create schemas: run "
                f"CREATE SCHEMA {self.quote(schema)} first (or use an existing schema)")

    def _exists(self, cursor: Any, object_name: str, ids: dict[str, str]) -> bool:
        return bool(self.scalar(cursor, "table_exists", {"object_name": object_name}, **ids))

    def send_many(self, cursor: Any, address: QueueAddress, rows: list[dict[str, Any]]) -> None:
        """One INSERT ... SELECT FROM OPENJSON for the whole batch: one parameter, one round trip.

        One JSON parameter (bodies base64) instead of a multi-row VALUES: SQL Server allows at most 2100
        parameters per statement, and the statement text stays the same for every batch. Without OPENJSON
        (level below 130, Babelfish) the batch goes as VALUES rows, ``VALUES_CHUNK`` messages per statement.
        """
        if not rows:
            return
        ids = self.identifiers(address)
        if not self.uses_openjson:
            name = self._variant(cursor, "send_many_values", ids)
            for start in range(0, len(rows), VALUES_CHUNK):
                chunk = rows[start:start + VALUES_CHUNK]
                values = [{"n": n, "id": str(r["id"]), "ttbr_ms": r["ttbr_ms"], "headers": r["headers"],
                           "body": None if r["body"] is None else bytes(r["body"])} for n, r in enumerate(chunk)]
                statement = self._repeated(name, "rows", "send_many_row", len(chunk))
                self.execute_statement(cursor, statement, numbered(values), ids)
            return
        payload = [{"n": n, "id": str(r["id"]), "ttbr_ms": r["ttbr_ms"], "headers": r["headers"],
                    "body": None if r["body"] is None else base64.b64encode(bytes(r["body"])).decode("ascii")}
                   for n, r in enumerate(rows)]
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        self.execute(cursor, "send_many", {"rows": text}, **ids)

    def delete_seqs(self, cursor: Any, address: QueueAddress, seqs: list[int]) -> None:
        """One DELETE with an OPENJSON list; without OPENJSON, ``IN (...)`` lists of ``IN_LIST_CHUNK`` positions."""
        if self.uses_openjson:
            super().delete_seqs(cursor, address, seqs)
            return
        ids = self.identifiers(address)
        for start in range(0, len(seqs), IN_LIST_CHUNK):
            chunk = seqs[start:start + IN_LIST_CHUNK]
            statement = self._repeated("delete_by_seq_list", "seqs", "seq_item", len(chunk))
            self.execute_statement(cursor, statement, numbered([{"seq": int(s)} for s in chunk]), ids)

    def _repeated(self, name: str, slot: str, fragment: str, count: int) -> Statement:
        return _repeated(self.statements[name], slot, self.statements[fragment], count)

    def table_exists(self, cursor: Any, address: QueueAddress) -> bool:
        return self._exists(cursor, self.qualified(address), self.identifiers(address))

    def discover(self, cursor: Any) -> list[QueueAddress]:
        rows = self.execute(cursor, "discover_queues").fetchall()
        # catalog names compare as SQL Server's default collation does: without case
        return [QueueAddress(table, None if schema.lower() == self.default_schema else schema)
                for schema, table in rows]

    def check(self, cursor: Any, address: QueueAddress) -> list[Finding]:
        """Findings: columns and types, varchar Headers, RowVersion index (missing or CLUSTERED), Expires
        index, and a bloated heap (``heap_bloat_not_checked`` where the engine has no ``sys.allocation_units``)."""
        ids = self.identifiers(address)
        where = {"schema_name": address.schema or self.default_schema, "table_name": address.table}
        queue = self.format_address(address)
        findings: list[Finding] = []
        # names and types compared without case, as the server's collation does (Babelfish may lower-case them)
        columns = {name.lower(): (type_name.lower(), int(max_length)) for name, type_name, max_length, _ in
                   self.execute(cursor, "list_columns", where, **ids).fetchall()}
        for column, expected in EXPECTED_COLUMNS.items():
            actual = columns.get(column.lower())
            if actual is None:
                if column not in OPTIONAL_COLUMNS:
                    findings.append(Finding(queue, "missing_column", f"column {column} ({expected}) is missing"))
            elif column == "Headers" and actual[0] == "varchar":
                findings.append(Finding(queue, "varchar_headers",
                                        "Headers is varchar(max): non-ASCII header values are mangled; "
                                        "NServiceBus creates nvarchar(max) (ALTER COLUMN it in a maintenance "
                                        "window)"))
            elif actual[0] != expected:
                findings.append(Finding(queue, "wrong_column_type",
                                        f"column {column} is {actual[0]}, expected {expected}"))
            elif column in ("Headers", "Body") and actual[1] != -1:
                findings.append(Finding(queue, "wrong_column_type",
                                        f"column {column} is {expected}({actual[1]} bytes), expected "
                                        f"{expected}(max)"))
        indexes = self.execute(cursor, "list_indexes", where, **ids).fetchall()
        indexes = [(name, (column or "").lower(), (kind or "").upper(), filtered)
                   for name, column, kind, filtered in indexes]
        on_seq = [row for row in indexes if row[1] == "rowversion"]
        if not on_seq:
            findings.append(Finding(queue, "missing_seq_index",
                                    "no index on RowVersion: every receive and peek scans the table",
                                    ("create_queue_seq_index",)))
        elif not any(row[2] == "NONCLUSTERED" for row in on_seq):
            clustered = next(row for row in on_seq if row[2] == "CLUSTERED")
            named = clustered[0].lower() == self.index_name(address, "seq").lower()
            findings.append(Finding(
                queue, "clustered_seq_index",
                f"index {clustered[0]} on RowVersion is CLUSTERED (tables made before 2020): it causes latch "
                "contention above ~8 concurrent receivers; make it NONCLUSTERED"
                + ("" if named else " (drop it by hand: the repair only knows Index_RowVersion)"),
                ("migrate_rowversion_index",) if named else ()))
        if not any(row[1] == "expires" for row in indexes):
            findings.append(Finding(queue, "missing_expires_index",
                                    "no index on Expires: purging expired messages scans the table",
                                    ("create_queue_expires_index",)))
        stats = self._heap_stats(cursor, where, ids)
        if isinstance(stats, str):
            findings.append(Finding(queue, "heap_bloat_not_checked", f"heap bloat not checked: {stats}",
                                    not_checked=True))
        elif stats is not None and stats[0] is not None:
            rows, pages = int(stats[0]), int(stats[1] or 0)
            if pages >= BLOAT_MIN_PAGES and pages > BLOAT_PAGES_PER_ROW * max(rows, 1):
                findings.append(Finding(queue, "heap_bloat",
                                        f"the heap holds {pages} data pages for {rows} rows: empty pages left by "
                                        "receives turn receives into scans; rebuild it",
                                        ("rebuild_heap",)))
        return findings

    def _heap_stats(self, cursor: Any, where: dict[str, str], ids: dict[str, str]) -> tuple | str | None:
        """The heap's (rows, pages), None when the table is not a heap, or why they cannot be read (text)."""
        view = f"{ids['sys']}.allocation_units"
        if not self.scalar(cursor, "catalog_view_exists", {"view_name": view}, **ids):
            return f"the database has no {view} catalog view (an engine that is not SQL Server, e.g. Babelfish)"
        try:
            return self.execute(cursor, "heap_bloat", where, **ids).fetchone()
        except Exception as exc:
            if error_number(exc) not in (INVALID_OBJECT, UNMAPPED_ERROR):
                raise
            first = (_text(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"the engine refused the catalog query ({first[:200]})"

    # -- error classification ----------------------------------------------------------------------
    def is_deadlock(self, exc: BaseException) -> bool:
        return error_number(exc) in (DEADLOCK_VICTIM, LOCK_TIMEOUT) or sqlstate(exc) == DEADLOCK_SQLSTATE

    def is_connection_lost(self, exc: BaseException) -> bool:
        state = sqlstate(exc)
        if state is not None and state in CONNECTION_SQLSTATES:
            return True
        if _numbers(exc) & set(CONNECTION_LOST) or _CLOSED.search(_text(exc)):
            return True
        if error_number(exc) is not None or state is not None:
            return False  # a server error on a live connection (pymssql raises OperationalError for most)
        # no number at all: pymssql wraps its driver-level failures (MSSQLDriverException) in InterfaceError
        return type(exc).__name__ == "InterfaceError"

    def is_missing_table(self, exc: BaseException) -> bool:
        number = error_number(exc)
        if number == UNMAPPED_ERROR:
            return bool(_MISSING_OBJECT_TEXT.search(_text(exc)))
        return number in (INVALID_OBJECT, DATABASE_MISSING) + SCHEMA_MISSING

    def is_permission_denied(self, exc: BaseException) -> bool:
        return error_number(exc) in PERMISSION_DENIED


@lru_cache(maxsize=64)
def _repeated(statement: Statement, slot: str, fragment: Statement, count: int) -> Statement:
    return statement.repeated(slot, fragment, count, separator=", " if fragment.name == "seq_item" else ",\n")
