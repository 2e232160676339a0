"""SQLite dialect (stdlib sqlite3): the embedded default for the quick start, demo and development."""

from __future__ import annotations

import operator
import sqlite3
import uuid
from typing import Any

from ..common.errors import NameCollisionError, NotAQueueError
from ..wire.address import QueueAddress, format_sqlite, parse_sqlite
from .base import Dialect, Finding

EXPECTED_COLUMNS = {"id": "TEXT", "expires": "TEXT", "headers": "TEXT", "body": "BLOB", "seq": "INTEGER"}
DELAYED = ("headers", "body", "due", "seq")


class SqliteDialect(Dialect):
    """SQLite: one writer at a time (``BEGIN IMMEDIATE``), seq is the rowid."""

    name = "sqlite"
    sql_file = "sqlite.sql"
    queue_ddl = ("create_queue_table", "create_queue_expires_index")
    index_kinds = ("seq", "expires", "due", "id")
    queue_migration = ("migrate_dedupe_ids", "migrate_unique_id")
    single_writer = True
    loose_types = True
    #: One writer at a time: more receivers than this only queue for the write lock (and hold threads).
    receiver_cap = 64
    #: Without BEGIN a statement is its own transaction (the connection's isolation_level is None).
    autocommit_statements = True
    remote = False
    keeps_results = False

    def __init__(self, paramstyle: str = "named") -> None:
        super().__init__(paramstyle)

    def parse_address(self, text: str | QueueAddress) -> QueueAddress:
        if isinstance(text, QueueAddress):
            text = text.table
        return parse_sqlite(text)

    def format_address(self, address: QueueAddress) -> str:
        return format_sqlite(address)

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, address: QueueAddress) -> str:
        return self.quote(address.table)

    def configure(self, connection: Any) -> None:
        # Transactions are started explicitly (BEGIN IMMEDIATE) so that a receive holds the write lock
        # from its first statement; WAL lets peeks and reads run beside a writer.
        connection.isolation_level = None
        # Another program can store TEXT that is not UTF-8; the default decoder would fail the whole fetch (and
        # stop the queue). Bad bytes come back as surrogate escapes and are written back as the same bytes.
        connection.text_factory = _decode_text
        cur = connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=60000")  # write_lock_wait, in ms
        cur.close()

    def begin(self, cursor: Any, read_only: bool = False) -> None:
        cursor.execute("BEGIN" if read_only else "BEGIN IMMEDIATE")

    def index_name(self, address: QueueAddress, kind: str) -> str:
        if kind == "id":
            return f"{address.table}_id_ix"  # the unique index the 0.1 migration adds (new tables: UNIQUE)
        return super().index_name(address, kind)

    def create_queue(self, connection: Any, address: QueueAddress, delayed: bool) -> None:
        ids = self.identifiers(address)
        with self.transaction(connection) as cur:
            # CREATE ... IF NOT EXISTS skips silently when the name is held: check before and after (rolled back)
            for table, columns in [(address, None)] + ([(self.delayed_address(address), DELAYED)] if delayed else []):
                reason = self.not_a_queue(cur, table, columns)
                if reason is not None:
                    raise NotAQueueError(reason + ": nothing was created")
            taken = self.taken_names(cur, address, delayed)
            if taken:
                raise NameCollisionError("; ".join(
                    f"queue {address.table!r} needs the index name {name!r} ({kind}), which is taken by {holder}"
                    for kind, name, holder in taken)
                    + ": nothing was created; rename or drop that object, or choose another queue name")
            for name in self.queue_ddl + (self.delayed_ddl if delayed else ()):
                self.execute(cur, name, None, **ids)

    def object_named(self, cursor: Any, name: str) -> tuple[str, str] | None:
        row = self.execute(cursor, "object_named", {"name": name}).fetchone()
        return None if row is None else (row[0], row[1])

    def not_a_queue(self, cursor: Any, address: QueueAddress, columns: tuple[str, ...] | None = None) -> str | None:
        found = self.object_named(cursor, address.table)
        if found is None:
            return None
        kind, table = found
        if kind != "table":
            return f"{address.table!r} is {'an' if kind == 'index' else 'a'} {kind}" + (
                f" of table {table!r}" if kind == "index" else "") + ", not a queue table"
        wanted = columns or self.queue_columns
        have = {row[0] for row in self.execute(cursor, "list_columns", {"table_name": address.table})}
        missing = [c for c in wanted if c not in have]
        if missing:
            return (f"{address.table!r} is a table but not a {'delayed store' if columns else 'queue table'}: it "
                    f"lacks the column(s) {', '.join(missing)} (it needs {', '.join(wanted)})")
        return None

    def taken_names(self, cursor: Any, address: QueueAddress, delayed: bool) -> list[tuple[str, str, str]]:
        wanted = [("expires", address.table)] + ([("due", self.delayed_address(address).table)] if delayed else [])
        taken = []
        for kind, table in wanted:
            name = self.index_name(address, kind)
            found = self.object_named(cursor, name)
            if found is not None and not (found[0] == "index" and found[1] == table):
                holder = f"the {found[0]} {name!r}" + (f" of table {found[1]!r}" if found[0] == "index" else "")
                taken.append((kind, name, holder))
        return taken

    def move_due_delayed(self, cursor: Any, address: QueueAddress, batch_size: int) -> int:
        ids = self.identifiers(address)
        due = self.execute(cursor, "select_due_delayed", {"batch_size": batch_size}, **ids).fetchall()
        delayed_ids = {**ids, "queue": ids["delayed"]}
        for seq, headers, body in due:
            self.execute(cursor, "insert_raw", {"id": str(uuid.uuid4()), "headers": headers, "body": body}, **ids)
            self.execute(cursor, "delete_by_seq", {"seq": seq}, **delayed_ids)
        return len(due)

    supports_file_watch = True

    def database_files(self, cursor: Any) -> list[str]:
        path = self.scalar(cursor, "database_file")
        return [str(path), f"{path}-wal"] if path else []

    def table_exists(self, cursor: Any, address: QueueAddress) -> bool:
        return bool(self.scalar(cursor, "table_exists", {"table_name": address.table}))

    def discover(self, cursor: Any) -> list[QueueAddress]:
        return [QueueAddress(row[0]) for row in self.execute(cursor, "discover_queues").fetchall()]

    def check(self, cursor: Any, address: QueueAddress) -> list[Finding]:
        queue = self.format_address(address)
        findings: list[Finding] = []
        columns = {row[0]: (row[1].upper(), row[3]) for row in
                   self.execute(cursor, "list_columns", {"table_name": address.table})}
        for column, expected in EXPECTED_COLUMNS.items():
            actual = columns.get(column)
            if actual is None:
                findings.append(Finding(queue, "missing_column", f"column {column} ({expected}) is missing"))
            elif actual[0] != expected:
                findings.append(Finding(queue, "wrong_column_type",
                                        f"column {column} is {actual[0]}, expected {expected}"))
        if "seq" in columns and not columns["seq"][1]:
            findings.append(Finding(queue, "missing_seq_index",
                                    "seq is not the INTEGER PRIMARY KEY: receives scan the table; recreate "
                                    "the queue and copy its rows"))
        indexes = self.execute(cursor, "list_indexes", {"table_name": address.table}).fetchall()
        if "id" in columns and "id" not in {row[1] for row in indexes if row[4]}:
            findings.append(Finding(queue, "missing_unique_id",
                                    "id is not unique (a table made by airflow-sqlqueue 0.1); repair gives "
                                    "duplicated Ids new ones and adds a unique index", ("migrate_unique_id",)))
        if "expires" not in {row[1] for row in indexes}:
            taken = [t for t in self.taken_names(cursor, address, False) if t[0] == "expires"]
            if taken:
                findings.append(Finding(queue, "index_name_taken",
                                        f"the expires index is missing and cannot be created: its name "
                                        f"{taken[0][1]!r} is taken by {taken[0][2]}; rename or drop that object, "
                                        "then run check --repair"))
            else:
                findings.append(Finding(queue, "missing_expires_index",
                                        "no index on expires: purging expired messages scans the table",
                                        ("create_queue_expires_index",)))
        return findings

    def is_deadlock(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)

    def write_lock_timeout(self, seconds: float) -> Exception:
        # SQLite's own words for it, so that it is handled as SQLite's busy timeout is (retried as a lock timeout)
        return sqlite3.OperationalError(f"database is locked: another transaction of this process held the write "
                                        f"lock for {seconds:g} s")

    def is_missing_table(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc)

    def is_undefined_column(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and ("no such column" in str(exc)
                                                              or "has no column named" in str(exc))

    def is_connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc)


# bytes.decode with its arguments bound: called by the driver for every TEXT value read (a partial of str with
# keyword arguments builds a dict of them at each call: ~1,300 instructions a row more for a received message)
_decode_text = operator.methodcaller("decode", "utf-8", "surrogateescape")
