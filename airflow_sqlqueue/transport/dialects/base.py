"""The dialect contract: one object per database owns its SQL file, quoting, paramstyle and error kinds.

Nothing above a dialect writes SQL: operations ask for statements by name and pass values as parameters.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from ..address import QueueAddress
from ..errors import UnsupportedConnectionError
from ..messages import as_body, as_text, native_uuid
from ..sqlfile import Statement, load_statements

Row = Sequence[Any]
#: DB-API driver modules and the dialect each belongs to.
DRIVER_DIALECTS = {"sqlite3": "sqlite", "psycopg": "postgres", "psycopg2": "postgres", "pymssql": "mssql",
                   "_mssql": "mssql", "pyodbc": "mssql"}


class RawRow(NamedTuple):
    """A queue row as the database returned it (headers not parsed yet). A tuple: one is made per row received."""

    id: uuid.UUID
    seq: int
    expired: bool
    headers: str | None
    body: bytes | None


@dataclass(frozen=True)
class Finding:
    """One problem found by the schema and index check.

    :param code: stable identifier, e.g. ``missing_seq_index``.
    :param message: what is wrong and why it matters.
    :param repair: names of the statements that fix it (empty when it needs a person).
    """

    queue: str
    code: str
    message: str
    repair: tuple[str, ...] = ()

    @property
    def repairable(self) -> bool:
        return bool(self.repair)


class Dialect:
    """Base class of the three dialects. Subclasses set the class attributes and override hooks."""

    name: str = ""
    sql_file: str = ""
    default_schema: str | None = None
    #: Names of the statements that make up a queue's DDL script, in order.
    queue_ddl: tuple[str, ...] = ()
    delayed_ddl: tuple[str, ...] = ("create_delayed_table", "create_delayed_due_index")
    #: Names a DBA-facing tool uses for the column that orders the queue.
    seq_column: str = "seq"
    #: What to grant, said when a statement is refused for lack of rights.
    rights_hint: str = "Sending and receiving need SELECT, INSERT and DELETE on the queue tables."
    #: One writer at a time (SQLite): a second connection cannot write while a receive is open.
    single_writer: bool = False
    #: Columns hold values of any type whatever their declared type (SQLite): rows are read defensively.
    loose_types: bool = False
    #: Most receivers at once where the database has no connection limit to ask (SQLite), else None.
    receiver_cap: int | None = None

    def __init__(self, paramstyle: str = "pyformat") -> None:
        self.paramstyle = paramstyle
        self.statements: dict[str, Statement] = _load(self.sql_file)

    # -- addresses and identifiers ---------------------------------------------------------------
    def parse_address(self, text: str | QueueAddress) -> QueueAddress:
        """Parse and validate a queue address (an existing QueueAddress is validated again)."""
        raise NotImplementedError

    def format_address(self, address: QueueAddress) -> str:
        """Canonical text of an address (parses back to the same address)."""
        raise NotImplementedError

    def quote(self, name: str) -> str:
        """Quote one identifier."""
        raise NotImplementedError

    def qualified(self, address: QueueAddress) -> str:
        """The quoted, qualified table name used in SQL text."""
        raise NotImplementedError

    def same_queue(self, a: QueueAddress, b: QueueAddress) -> bool:
        """Whether two addresses name the same table (default schema filled in; an unknown catalog matches)."""
        return (a.table == b.table and (a.schema or self.default_schema) == (b.schema or self.default_schema)
                and (a.catalog is None or b.catalog is None or a.catalog == b.catalog))

    def delayed_address(self, address: QueueAddress) -> QueueAddress:
        """The delayed table of an endpoint: ``<table>.Delayed`` beside it."""
        return QueueAddress(address.table + ".Delayed", address.schema, address.catalog)

    def identifiers(self, address: QueueAddress) -> dict[str, str]:
        """Quoted identifiers for the ``{slots}`` of statements about one queue."""
        delayed = self.delayed_address(address)
        return {
            "queue": self.qualified(address),
            "delayed": self.qualified(delayed),
            "seq_index": self.quote(self.index_name(address, "seq")),
            "expires_index": self.quote(self.index_name(address, "expires")),
            "due_index": self.quote(self.index_name(address, "due")),
        }

    def index_name(self, address: QueueAddress, kind: str) -> str:
        """Name of the index of one kind (seq, expires, due) on a queue's tables."""
        return f"{address.table}_{ {'seq': 'seq', 'expires': 'exp', 'due': 'due'}[kind]}_ix"

    # -- statements ------------------------------------------------------------------------------
    def render(self, name: str, **identifiers: str) -> str:
        """The SQL text of a statement with its identifier slots filled (for DDL scripts and execution)."""
        return _render(self.statements[name].text, tuple(sorted(identifiers.items())))

    def prepare(self, name: str, params: dict[str, Any] | None, identifiers: dict[str, str]) -> tuple[str, Any]:
        """Statement text in the driver's paramstyle, and parameters in the matching shape."""
        key = (name, tuple(sorted(identifiers.items())), self.paramstyle)
        sql, order = _converted(self, key)
        if order is not None:
            return sql, tuple((params or {})[n] for n in order)
        # pyformat drivers only unescape %% when given parameters, so always give them (maybe empty)
        return sql, (params or {}) if self.paramstyle == "pyformat" else (params or None)

    def execute(self, cursor: Any, name: str, params: dict[str, Any] | None = None, **identifiers: str) -> Any:
        """Run a named statement; return the cursor."""
        sql, args = self.prepare(name, params, identifiers)
        if args is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql, args)
        return cursor

    def executemany(self, cursor: Any, name: str, seq_params: Iterable[dict[str, Any]], **identifiers: str) -> None:
        """Run a named statement once per parameter set."""
        params = list(seq_params)
        if not params:
            return
        sql, _ = self.prepare(name, params[0], identifiers)
        _, order = _converted(self, (name, tuple(sorted(identifiers.items())), self.paramstyle))
        if order is not None:
            cursor.executemany(sql, [tuple(p[n] for n in order) for p in params])
        else:
            cursor.executemany(sql, params)

    def scalar(self, cursor: Any, name: str, params: dict[str, Any] | None = None, **identifiers: str) -> Any:
        """Run a named statement and return the first column of the first row (None if no row)."""
        row = self.execute(cursor, name, params, **identifiers).fetchone()
        return None if row is None else row[0]

    # -- connections and transactions -------------------------------------------------------------
    def check_connection(self, connection: Any) -> None:
        """Refuse a connection of a driver that belongs to another dialect (clear error, nothing run)."""
        driver = type(connection).__module__.split(".")[0]
        owner = DRIVER_DIALECTS.get(driver)
        if owner is not None and owner != self.name:
            raise UnsupportedConnectionError(
                f"a {driver} connection was given to the {self.name} dialect; use the {owner} dialect for it, or "
                f"a connection of {', '.join(d for d, o in DRIVER_DIALECTS.items() if o == self.name)}")

    def configure(self, connection: Any) -> None:
        """Prepare a fresh connection (isolation level, autocommit off)."""

    def begin(self, cursor: Any, read_only: bool = False) -> None:
        """Start a transaction where the driver does not start one implicitly."""

    @contextmanager
    def transaction(self, connection: Any, read_only: bool = False) -> Iterator[Any]:
        """A cursor inside one transaction: commit on success, rollback on any error.

        ``read_only`` lets a single-writer database (SQLite) read beside an open write transaction.
        """
        cursor = connection.cursor()
        try:
            self.begin(cursor, read_only)
            yield cursor
            connection.commit()
        except BaseException:
            try:
                connection.rollback()
            except Exception:  # noqa: BLE001 - the connection may be gone; the original error matters
                pass
            raise
        finally:
            try:
                cursor.close()
            except Exception:  # noqa: BLE001
                pass

    # -- values ----------------------------------------------------------------------------------
    def id_param(self, value: uuid.UUID) -> Any:
        """A message id as the driver binds it."""
        return str(value)

    def connection_limit(self, cursor: Any) -> int | None:
        """Connections a client may open at once on this database (None: no limit to ask for)."""
        if "connection_limit" not in self.statements:
            return None
        value = self.scalar(cursor, "connection_limit")
        return None if value is None else int(value)

    def to_raw_row(self, row: Row) -> RawRow:
        """Normalize (id, seq, expired, headers, body) as returned by receive statements, whatever the columns held
        (an id that is not a UUID reads as the UUID derived from it, see ``native_uuid``)."""
        raw_id, seq, expired, headers, body = row
        return RawRow(native_uuid(raw_id), int(seq), bool(expired), as_text(headers), as_body(body))

    # -- operations a dialect may do differently --------------------------------------------------
    def create_queue(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        """Create a queue (and its delayed table) idempotently, safe under concurrent creators."""
        raise NotImplementedError

    def send_many(self, cursor: Any, address: QueueAddress, rows: list[dict[str, Any]]) -> None:
        """Insert many messages (each a dict of id, headers, body, ttbr_ms). Default: executemany."""
        self.executemany(cursor, "send", rows, **self.identifiers(address))

    def delete_seqs(self, cursor: Any, address: QueueAddress, seqs: list[int]) -> None:
        """Delete the rows at these positions (rows this transaction holds) in one statement."""
        self.execute(cursor, "delete_by_seqs", {"seqs": self.seq_list_param(seqs)}, **self.identifiers(address))

    def seq_list_param(self, seqs: list[int]) -> Any:
        """A list of positions as one parameter (a JSON array by default; PostgreSQL binds an array)."""
        return "[" + ",".join(str(int(s)) for s in seqs) + "]"

    def move_due_delayed(self, cursor: Any, address: QueueAddress, batch_size: int) -> int:
        """Move due delayed messages of an endpoint into its input queue; return how many moved."""
        cursor = self.execute(cursor, "move_due_delayed", {"batch_size": batch_size}, **self.identifiers(address))
        return max(cursor.rowcount, 0)

    def discover(self, cursor: Any) -> list[QueueAddress]:
        """Every table with the queue shape."""
        raise NotImplementedError

    def table_exists(self, cursor: Any, address: QueueAddress) -> bool:
        """Whether the queue table exists."""
        raise NotImplementedError

    def check(self, cursor: Any, address: QueueAddress) -> list[Finding]:
        """Schema and index findings for one queue."""
        raise NotImplementedError

    def ddl(self, address: QueueAddress, delayed: bool = False) -> list[str]:
        """The statements that create a queue (and its delayed table), as reviewable text."""
        names = self.queue_ddl + (self.delayed_ddl if delayed else ())
        ids = self.identifiers(address)
        return [self.render(n, **ids) for n in names]

    # -- error classification ----------------------------------------------------------------------
    def is_deadlock(self, exc: BaseException) -> bool:
        """A deadlock or lock timeout: retry the transaction, not a handler failure."""
        return False

    def is_connection_lost(self, exc: BaseException) -> bool:
        """The connection is unusable: reconnect."""
        return False

    def is_missing_table(self, exc: BaseException) -> bool:
        """The table (or schema) does not exist."""
        return False

    def is_permission_denied(self, exc: BaseException) -> bool:
        """The user lacks a right for the statement."""
        return False


@cache
def _load(filename: str) -> dict[str, Statement]:
    return load_statements(filename)


@cache
def _render(text: str, identifiers: tuple[tuple[str, str], ...]) -> str:
    values = dict(identifiers)
    out = []
    i = 0
    while i < len(text):
        start = text.find("{", i)
        if start < 0:
            out.append(text[i:])
            break
        end = text.index("}", start)
        out.append(text[i:start])
        out.append(values[text[start + 1:end]])
        i = end + 1
    return "".join(out)


_CONVERTED: dict[tuple, tuple[str, list[str] | None]] = {}


def _converted(dialect: Dialect, key: tuple) -> tuple[str, list[str] | None]:
    hit = _CONVERTED.get((dialect.name,) + key)
    if hit is None:
        name, identifiers, paramstyle = key
        statement = dialect.statements[name]
        # '%' inside a quoted identifier must survive the driver's parameter substitution
        escaped = tuple((k, v.replace("%", "%%")) for k, v in identifiers)
        hit = statement.convert(_render(statement.text, escaped), paramstyle)
        _CONVERTED[(dialect.name,) + key] = hit
    return hit
