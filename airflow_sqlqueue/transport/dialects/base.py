"""The dialect contract: one object per database owns its SQL file, quoting, paramstyle and error kinds.

Nothing above a dialect writes SQL: operations ask for statements by name and pass values as parameters.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, ClassVar, NamedTuple

from ..common.errors import UnsupportedConnectionError
from ..wire.address import QueueAddress
from ..wire.messages import as_body, as_text, native_uuid
from .sqlfile import Statement, load_statements

Row = Sequence[Any]
#: DB-API driver modules and the dialect each belongs to.
DRIVER_DIALECTS = {"sqlite3": "sqlite", "psycopg": "postgres", "psycopg2": "postgres", "pymssql": "mssql",
                   "_mssql": "mssql", "pyodbc": "mssql"}
#: How many filled statement texts (statement x queue) a dialect keeps.
MAX_FILLED = 4096
#: The error groups summary tables beside an error queue (``errorqueue.summary``), in the error queue's schema.
ERROR_GROUPS_TABLE = "SqlQueueErrorGroups"
ERROR_GROUPS_STATE_TABLE = "SqlQueueErrorGroupsState"
#: The lease table beside a queue (``processing.lease``, SQLite's event trigger), in the queue's schema.
LEASE_TABLE = "SqlQueueLeases"


class RawRow(NamedTuple):
    """A queue row as the database returned it (headers not parsed yet). A tuple: one is made per row received."""

    id: uuid.UUID
    seq: int
    expired: bool
    headers: str | None
    body: bytes | None


@dataclass(frozen=True)
class Finding:
    """One problem found by the schema and index check, or one part of it the engine did not let it do.

    :param code: stable identifier, e.g. ``missing_seq_index`` (``..._not_checked`` for a part not checked).
    :param message: what is wrong and why it matters (or what was not checked, and why).
    :param repair: names of the statements that fix it (empty when it needs a person).
    :param not_checked: True when this says what could not be checked (e.g. a catalog view the engine lacks):
        reported so that nobody takes silence for health, but not a problem, so it fails no check.
    """

    queue: str
    code: str
    message: str
    repair: tuple[str, ...] = ()
    not_checked: bool = False

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
    #: Names of the statements that migrate a queue (and its delayed table) made by airflow-sqlqueue 0.1 to the
    #: current shape, in order (``sqlqueue ddl --migrate``; ``check --repair`` runs them step by step).
    queue_migration: tuple[str, ...] = ()
    delayed_migration: tuple[str, ...] = ()
    #: Columns every queue table has (a table without them is not a queue).
    queue_columns: tuple[str, ...] = ("id", "expires", "headers", "body", "seq")
    #: Names a DBA-facing tool uses for the column that orders the queue.
    seq_column: str = "seq"
    #: What to grant, said when a statement is refused for lack of rights.
    rights_hint: str = "Sending and receiving need SELECT, INSERT and DELETE on the queue tables."
    #: One writer at a time (SQLite): a second connection cannot write while a receive is open.
    single_writer: bool = False
    #: Seconds a writer waits for the write lock (a single-writer database's busy timeout) before it fails.
    write_lock_wait: float = 60.0
    #: Columns hold values of any type whatever their declared type (SQLite): rows are read defensively.
    loose_types: bool = False
    #: Push wake-ups (LISTEN/NOTIFY) can be installed and listened for; others poll.
    supports_notify: bool = False
    #: Whether a write shows in the database's files (SQLite): a watcher can stat them instead of querying.
    supports_file_watch: bool = False

    def database_files(self, cursor: Any) -> list[str]:
        """The files a write to this database changes (SQLite: the database and its WAL), or [] when unknown."""
        return []
    notify_ddl: tuple[str, ...] = ()
    #: Most receivers at once where the database has no connection limit to ask (SQLite), else None.
    receiver_cap: int | None = None
    #: One statement outside a transaction commits by itself (autocommit): a one-statement send is one round trip.
    autocommit_statements: bool = False
    #: A batch of sends is one statement (``send_many``), so it may run in autocommit too (else a transaction).
    send_many_is_one_statement: bool = False
    #: The database is across a network: a connection lost after a statement left leaves its outcome unknown.
    remote: bool = True
    #: A cursor keeps the last statement's result after its rows were fetched (psycopg does: a kept cursor's
    #: result is let go of by ``Session.release_cursor``); sqlite3's holds nothing once ``fetchall`` ended.
    keeps_results: bool = True
    #: A receiver of the pump or the drain starts its next receive past the last position it took (statements
    #: ``receive_after`` and ``lock_after``) until it goes back to the head (see ``ReceivePosition``): where the
    #: rows receives delete stay in the seq index until a vacuum (PostgreSQL's MVCC), so a receive from the head
    #: walks them all while a long transaction holds them there.
    bounded_receives: bool = False
    #: ``{slot}: fragment statement``: slots filled with the text of a fragment of the same file when it is loaded
    #: (one text shared by several statements, its parameters theirs); the fragment is never run alone.
    fragment_slots: ClassVar[Mapping[str, str]] = {}

    def __init__(self, paramstyle: str = "pyformat") -> None:
        self.paramstyle = paramstyle
        self.statements: dict[str, Statement] = _load(self.sql_file)
        for slot, fragment in self.fragment_slots.items():
            for name, statement in list(self.statements.items()):
                if slot in statement.slot_names:
                    self.statements[name] = statement.filled(slot, self.statements[fragment])
        self._filled: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # (statement, identifiers) -> see _fill
        self._identifiers: dict[QueueAddress, dict[str, str]] = {}

    # -- addresses and identifiers ---------------------------------------------------------------
    def parse_address(self, text: str | QueueAddress) -> QueueAddress:
        """Parse and validate a queue address (an existing QueueAddress is validated again)."""
        raise NotImplementedError

    def format_address(self, address: QueueAddress) -> str:
        """Canonical text of an address (parses back to the same address)."""
        raise NotImplementedError

    def wire_address(self, address: QueueAddress) -> str:
        """The canonical address written in headers that name a queue (``NServiceBus.FailedQ``, forward
        destinations, reply addresses), as a .NET endpoint writes its own: schema (and catalog) always given."""
        return self.format_address(address)

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
        """Quoted identifiers for the ``{slots}`` of statements about one queue (a new dict: the caller's to change)."""
        known = self._identifiers.get(address)
        if known is None:
            known = self._make_identifiers(address)
            if len(self._identifiers) < MAX_FILLED:
                self._identifiers[address] = known
        return dict(known)

    def _make_identifiers(self, address: QueueAddress) -> dict[str, str]:
        delayed = self.delayed_address(address)
        ids = {"queue": self.qualified(address), "delayed": self.qualified(delayed),
               "table": self.qualified(address),  # statements about a table that is not a queue (subscriptions)
               "inbox_index": self.quote(f"{address.table}_processed_ix"),  # the inbox table's retention index
               # the error groups summary beside an error queue, in its schema (``errorqueue.summary``)
               "groups": self.qualified(replace(address, table=ERROR_GROUPS_TABLE)),
               "state": self.qualified(replace(address, table=ERROR_GROUPS_STATE_TABLE)),
               "groups_index": self.quote(f"{ERROR_GROUPS_TABLE}_ErrorQueue_ix"),
               "leases": self.qualified(replace(address, table=LEASE_TABLE))}
        for kind in self.index_kinds:
            ids[kind + "_index"] = self.quote(self.index_name(address, kind))
        return ids

    #: Kinds of index (and constraint) names a queue's statements use, each a ``{<kind>_index}`` slot.
    index_kinds: tuple[str, ...] = ("seq", "expires", "due")

    def index_name(self, address: QueueAddress, kind: str) -> str:
        """Name of the index of one kind (seq, expires, due) on a queue's tables."""
        return f"{address.table}_{ {'seq': 'seq', 'expires': 'exp', 'due': 'due'}[kind]}_ix"

    def system_table(self, address: QueueAddress) -> str | None:
        """Why the address names a system table (never a queue), or None."""
        return None

    # -- statements ------------------------------------------------------------------------------
    def render(self, name: str, **identifiers: str) -> str:
        """The SQL text of a statement with its identifier slots filled (for DDL scripts a DBA reviews)."""
        return self.statements[name].compile("pyformat").fill(identifiers)

    def prepare(self, name: str, params: dict[str, Any] | None, identifiers: dict[str, str]) -> tuple[str, Any]:
        """Statement text in the driver's paramstyle, and parameters in the matching shape (None: no parameters)."""
        return self.prepare_statement(self.statements[name], params, identifiers)

    def prepare_statement(self, statement: Statement, params: dict[str, Any] | None,
                          identifiers: dict[str, str]) -> tuple[str, Any]:
        """:meth:`prepare` for any statement (a dialect's own or another module's, e.g. the health samples).

        Markers are converted before the slots are filled, so an identifier is never read as a marker here;
        what the driver does with the final text is the dialect's business (:meth:`driver_identifier`,
        :meth:`formats_values`). The same statement on the same identifiers is filled once.
        """
        return self._bind(self._ready(statement, identifiers), params, identifiers)

    def _ready(self, statement: Statement, identifiers: dict[str, str]) -> tuple[Statement, str, Any, Any]:
        """``_fill`` once per statement and identifiers."""
        key = (id(statement), *identifiers.items())
        ready = self._filled.get(key)
        if ready is None or ready[0] is not statement:
            ready = self._fill(statement, identifiers)
            if len(self._filled) < MAX_FILLED:
                self._filled[key] = ready  # holds the statement: its id is not reused while it is cached
        return ready

    def _bind(self, ready: tuple[Statement, str, Any, Any], params: dict[str, Any] | None,
              identifiers: dict[str, str]) -> tuple[str, Any]:
        """The text and the driver's arguments of a filled statement (see ``prepare_statement``)."""
        _, sql, order, compiled = ready
        if order is not None:
            return sql, tuple((params or {})[n] for n in order)
        if compiled is not None:  # the values are formatted into the text (see formats_values)
            return compiled.fill(identifiers, lambda part: self.format_values(part, params or {})), None
        if self.paramstyle == "pyformat":
            # a pyformat driver (psycopg) unescapes '%%' only when given parameters: always give them (maybe empty)
            return sql, params or {}
        return sql, params or None

    def _fill(self, statement: Statement, identifiers: dict[str, str]) -> tuple[Statement, str, Any, Any]:
        """(statement, final text, qmark parameter order, the compiled form when values must be formatted in)."""
        compiled = statement.compile(self.paramstyle)
        if compiled.order is not None:
            return statement, compiled.fill(identifiers), compiled.order, None
        if self.formats_values(identifiers):
            return statement, "", None, compiled
        return statement, compiled.fill({k: self.driver_identifier(v) for k, v in identifiers.items()}), None, None

    def driver_identifier(self, quoted: str) -> str:
        """A quoted identifier as it must appear in the text the driver parses (pyformat: ``%`` doubled)."""
        return quoted.replace("%", "%%") if self.paramstyle == "pyformat" else quoted

    def formats_values(self, identifiers: dict[str, str]) -> bool:
        """Whether values must be formatted into the text by the dialect itself (no driver escape exists)."""
        return False

    def format_values(self, part: str, params: dict[str, Any]) -> str:
        """One literal part of a statement with its markers replaced by the values (see :meth:`formats_values`)."""
        raise NotImplementedError

    def execute(self, cursor: Any, name: str, params: dict[str, Any] | None = None, **identifiers: str) -> Any:
        """Run a named statement; return the cursor."""
        return self.execute_statement(cursor, self.statements[name], params, identifiers)

    def execute_statement(self, cursor: Any, statement: Statement, params: dict[str, Any] | None,
                          identifiers: dict[str, str]) -> Any:
        """Run any statement with this dialect's parameter handling; return the cursor."""
        sql, args = self.prepare_statement(statement, params, identifiers)
        if args is None:
            cursor.execute(sql)
        else:
            cursor.execute(sql, args)
        return cursor

    def runner(self, name: str, identifiers: dict[str, str]) -> Callable[[Any, dict[str, Any] | None], Any]:
        """``run(cursor, params)``: what ``execute(cursor, name, params, **identifiers)`` does, for a statement run
        again and again on the same identifiers (a queue's send): the text is looked up here, once, instead of at
        each call (the look-up key holds every identifier of a queue)."""
        ready, bind = self._ready(self.statements[name], identifiers), self._bind
        _, text, order, compiled = ready
        direct = order is None and compiled is None  # values bound by name: _bind's answer without the call
        empty = {} if self.paramstyle == "pyformat" else None

        def run(cursor: Any, params: dict[str, Any] | None) -> Any:
            if direct:
                sql, args = text, params or empty
            else:
                sql, args = bind(ready, params, identifiers)
            if args is None:
                cursor.execute(sql)
            else:
                cursor.execute(sql, args)
            return cursor

        return run

    def executemany(self, cursor: Any, name: str, seq_params: Iterable[dict[str, Any]], **identifiers: str) -> None:
        """Run a named statement once per parameter set."""
        params = list(seq_params)
        if not params:
            return
        statement = self.statements[name]
        if self.formats_values(identifiers):
            for one in params:
                self.execute_statement(cursor, statement, one, identifiers)
            return
        sql, _ = self.prepare_statement(statement, params[0], identifiers)
        order = statement.compile(self.paramstyle).order
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

    def commit_after(self, connection: Any, cursor: Any, last: Any) -> None:
        """Run ``last(cursor)`` (the transaction's last statement, its result unread) and commit. A dialect whose
        driver can send both at once (one round trip) does so."""
        last(cursor)
        connection.commit()

    def autocommit(self, connection: Any, on: bool) -> None:
        """Turn a pooled connection's autocommit on (for one statement that commits by itself) or back off.
        Only called where ``autocommit_statements`` is set."""

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

    def header_field(self, value: Any) -> Any:
        """A header value as the ``failed_page``/``failed_groups`` statements return it, as text or bytes
        (default: already the value; PostgreSQL returns the JSON string text, still escaped)."""
        return value

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
        return "[" + ",".join(map(str, map(int, seqs))) + "]"

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

    def not_a_queue(self, cursor: Any, address: QueueAddress) -> str | None:
        """Why an existing object of that name is not a queue table (a view, an index, other columns), or None."""
        return None

    def taken_names(self, cursor: Any, address: QueueAddress, delayed: bool) -> list[tuple[str, str, str]]:
        """The index names of a queue (and of its delayed table) held by another object: (kind, name, holder)."""
        return []

    def migration(self, address: QueueAddress, delayed: bool = False) -> list[tuple[str, str]]:
        """(name, SQL) of the steps that migrate a 0.1 queue (and its delayed table), as reviewable text."""
        ids = self.migration_identifiers(address)
        names = self.queue_migration + (self.delayed_migration if delayed else ())
        return [(n, self.render(n, **ids).replace("%%", "%")) for n in names]

    def migration_identifiers(self, address: QueueAddress) -> dict[str, str]:
        """Identifiers of the migration statements (schema-qualified index names for DROP INDEX)."""
        return self.identifiers(address)

    def ddl(self, address: QueueAddress, delayed: bool = False) -> list[str]:
        """The statements that create a queue (and its delayed table), as reviewable text."""
        names = self.queue_ddl + (self.delayed_ddl if delayed else ())
        ids = self.identifiers(address)
        return [self.render(n, **ids) for n in names]

    # -- error classification ----------------------------------------------------------------------
    def is_deadlock(self, exc: BaseException) -> bool:
        """A deadlock or lock timeout: retry the transaction, not a handler failure."""
        return False

    def write_lock_timeout(self, seconds: float) -> Exception:
        """The error a writer gets after waiting ``seconds`` at a single-writer dialect's writer gate; such a dialect
        returns one its ``is_deadlock`` recognises, so that it is retried as a lock timeout (SQLite: its own
        ``database is locked``)."""
        return TimeoutError(f"no write lock after {seconds:g} s: another transaction holds it")

    def is_connection_lost(self, exc: BaseException) -> bool:
        """The connection is unusable: reconnect."""
        return False

    def is_missing_table(self, exc: BaseException) -> bool:
        """The table (or schema) does not exist."""
        return False

    def is_permission_denied(self, exc: BaseException) -> bool:
        """The user lacks a right for the statement."""
        return False

    def is_undefined_column(self, exc: BaseException) -> bool:
        """A statement named a column the table lacks (the table is not a queue table)."""
        return False

    def is_unique_violation(self, exc: BaseException) -> bool:
        """An insert or a unique index build met a value held twice."""
        return False

    def is_duplicate_object(self, exc: BaseException) -> bool:
        """Creating an object raced with another creator (a .NET endpoint creating the same table)."""
        return False


@cache
def _load(filename: str) -> dict[str, Statement]:
    return load_statements(filename)
