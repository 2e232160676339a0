"""The pool never hands out a connection whose commit or rollback failed.

One failed commit or rollback can leave a connection outside any transaction the driver knows about (pymssql
then fails every later COMMIT with "COMMIT can only be used in transaction blocks"): such a connection is
closed, and the next transaction runs on a fresh one. Proved on the real PostgreSQL and SQLite (a deferred
foreign key makes the commit itself fail; a connection closed mid-transaction makes the rollback fail), and
for the SQL Server dialect at the DB-API level with a fake pymssql connection (no SQL Server runs here).
"""

from __future__ import annotations

from typing import Any

import pymssql
import pytest

from airflow_sqlqueue.transport.dialects.mssql import MssqlDialect
from airflow_sqlqueue.transport.tables.session import Session
from tests.conftest import Db


def _tables(db: Db) -> tuple[str, str]:
    if db.kind == "sqlite":
        return "parent", "child"
    return f'"{db.schema}"."parent"', f'"{db.schema}"."child"'


def _identity(db: Db, cur: Any) -> Any:
    """Something that names the physical connection: the backend pid, or the sqlite3 connection object."""
    if db.kind == "sqlite":
        return cur.connection
    cur.execute("SELECT pg_backend_pid()")
    return cur.fetchone()[0]


def _is_closed(db: Db, connection: Any) -> bool:
    if db.kind == "postgres":
        return bool(connection.closed)
    try:
        connection.execute("SELECT 1")
    except Exception:  # noqa: BLE001 - sqlite3 raises ProgrammingError on a closed connection
        return True
    return False


def test_a_connection_whose_commit_failed_is_closed_not_reused(db: Db) -> None:
    parent, child = _tables(db)
    db.sql(f"CREATE TABLE {parent} (id integer PRIMARY KEY)")
    db.sql(f"CREATE TABLE {child} (pid integer REFERENCES {parent} (id) DEFERRABLE INITIALLY DEFERRED)")
    session: Session = db.transport.session
    if db.kind == "sqlite":  # the foreign key check is per connection, and set outside a transaction
        connection = session.checkout()
        connection.execute("PRAGMA foreign_keys = ON")
        session.checkin(connection)
    seen: list[Any] = []

    def orphan(cur: Any) -> None:
        seen.append(_identity(db, cur))
        seen.append(cur.connection)
        cur.execute(f"INSERT INTO {child} (pid) VALUES (1)")  # noqa: S608 - test tables; refused by the commit

    with pytest.raises(Exception, match="(?i)foreign key"):
        session.run(orphan, what="insert an orphan")
    failed_identity, failed_connection = seen
    assert _is_closed(db, failed_connection)
    assert all(c is not failed_connection for c in session._idle)
    # the next transaction runs on another, healthy connection and commits
    assert session.run(lambda cur: _identity(db, cur)) != failed_identity
    session.run(lambda cur: cur.execute(f"INSERT INTO {parent} (id) VALUES (1)"))  # noqa: S608 - test table
    assert db.sql(f"SELECT id FROM {parent}") == [(1,)]  # noqa: S608 - test table


def test_an_idle_connection_never_keeps_a_batch_of_rows(db: Db) -> None:
    """A transaction's cursor is kept for the next one (its type adaptation stays warm) only when its last result
    holds at most one row: a batch of received rows is never kept in memory on a connection idle in the pool."""
    session: Session = db.transport.session
    queue = db.q("orders")
    db.transport.create_queue(queue)
    db.transport.send_many(queue, [b"x"] * 50)

    def kept_cursor() -> Any:
        [connection] = session._idle
        entry = session._cursors.get(id(connection))
        return None if entry is None else entry[1]

    # a claim that locks a batch and ends with the delete of its rows: nothing held, the cursor is kept
    db.transport.process(queue, lambda message, context: None, batch_size=20, max_messages=20)
    first = kept_cursor()
    assert first is not None and first.description is None
    db.transport.process(queue, lambda message, context: None, batch_size=20, max_messages=20)
    assert kept_cursor() is first
    # a receive whose last statement returned the batch (DELETE ... RETURNING): psycopg's cursor holds that result
    # until its next statement, so it goes with its rows; sqlite3's holds nothing once they were fetched (kept)
    assert len(db.transport.receive(queue, 10)) == 10
    if db.transport.dialect.keeps_results:
        assert kept_cursor() is None
    else:
        cursor = kept_cursor()
        assert cursor is not None and cursor.fetchall() == []
    assert len(db.transport.receive(queue, 10)) == 0  # an empty result holds nothing: kept again
    assert kept_cursor() is not None


def test_a_connection_whose_rollback_failed_is_closed_not_reused(db: Db) -> None:
    session: Session = db.transport.session
    seen: list[Any] = []

    def break_then_fail(cur: Any) -> None:
        seen.append(cur.connection)
        cur.connection.close()  # the rollback that follows the error below fails on it
        raise RuntimeError("the work failed")

    with pytest.raises(RuntimeError, match="the work failed"):
        session.run(break_then_fail)
    assert all(c is not seen[0] for c in session._idle)
    assert session.run(lambda cur: cur.connection) is not seen[0]


# -- SQL Server at the DB-API level --------------------------------------------------------------------------
class FakePymssqlConnection:
    """Not pymssql: a fake with pymssql's error shapes, because no SQL Server can run on these machines.

    A statement containing ``FAIL`` raises, and leaves the connection as the issue saw it: its rollback fails,
    and every later commit fails with "COMMIT can only be used in transaction blocks".
    """

    def __init__(self, number: int) -> None:
        self.number = number
        self.poisoned = False
        self.fail_next_commit = False  # the commit fails once; the rollback works
        self.closed = False
        self.commits = 0

    def autocommit(self, status: bool) -> None:
        pass

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def commit(self) -> None:
        if self.fail_next_commit:
            self.fail_next_commit = False
            raise pymssql.OperationalError(3902, b"COMMIT can only be used in transaction blocks")
        if self.poisoned:
            raise pymssql.OperationalError(3902, b"COMMIT can only be used in transaction blocks")
        self.commits += 1

    def rollback(self) -> None:
        if self.poisoned:
            raise pymssql.OperationalError(3903, b"The ROLLBACK TRANSACTION request has no corresponding BEGIN "
                                                 b"TRANSACTION.")

    def close(self) -> None:
        self.closed = True


class FakeCursor:
    def __init__(self, connection: FakePymssqlConnection) -> None:
        self.connection = connection
        self.rowcount = 0

    def execute(self, sql: str, params: Any = None) -> None:
        if "FAIL" in sql:
            self.connection.poisoned = True
            raise pymssql.OperationalError(102, b"Incorrect syntax near 'FAIL'.")

    def fetchone(self) -> None:
        return None

    def close(self) -> None:
        pass


def _mssql_session() -> tuple[Session, list[FakePymssqlConnection]]:
    made: list[FakePymssqlConnection] = []

    def connect() -> FakePymssqlConnection:
        made.append(FakePymssqlConnection(len(made)))
        return made[-1]

    return Session(connect, MssqlDialect()), made


def test_mssql_a_failed_rollback_does_not_poison_the_pool() -> None:
    session, made = _mssql_session()
    with pytest.raises(pymssql.OperationalError, match="Incorrect syntax"):
        session.run(lambda cur: cur.execute("SELECT FAIL"))
    assert made[0].closed and session._idle == []
    for _ in range(3):  # every later transaction commits, on the one fresh connection
        session.run(lambda cur: cur.execute("SELECT 1"))
    assert len(made) == 2 and made[1].commits == 1 + 3  # configure() commits once


def test_mssql_a_failed_commit_closes_the_connection() -> None:
    session, made = _mssql_session()
    session.run(lambda cur: cur.execute("SELECT 1"))
    made[0].poisoned = True  # the commit of the next transaction fails
    with pytest.raises(pymssql.OperationalError, match="COMMIT can only be used"):
        session.run(lambda cur: cur.execute("SELECT 1"))
    assert made[0].closed and session._idle == []
    session.run(lambda cur: cur.execute("SELECT 1"))
    assert len(made) == 2 and not made[1].closed


def test_mssql_a_failed_commit_inside_a_connection_block_closes_it() -> None:
    """DDL runs in ``Session.connection()`` with the dialect's own transaction; its failed commit discards too."""
    session, made = _mssql_session()
    with session.connection() as connection:  # configure() ran; a clean block keeps the connection
        pass
    assert session._idle == [made[0]]
    with pytest.raises(pymssql.OperationalError, match="COMMIT can only be used"):
        with session.connection() as connection, session.dialect.transaction(connection) as cur:
            cur.execute("SELECT 1")
            connection.fail_next_commit = True  # the commit at the end of the block fails, the rollback works
    assert made[0].closed and session._idle == []
    with session.connection() as connection:
        assert connection is made[1]


def test_a_claim_dropped_without_commit_or_abandon_gives_its_rows_back(db: Db) -> None:
    """Rows a forgotten claim locked are not held until the process ends: once the claim is collected its
    connection is closed (the database rolls back), and another receiver takes them."""
    import gc

    t = db.transport
    q = db.q("orders")
    t.create_queue(q)
    t.send_many(q, [b"a", b"b"])
    claim = t.claim(q, 2)
    assert [m.body for m in claim.messages] == [b"a", b"b"]
    connection = claim.connection
    del claim
    gc.collect()
    assert _is_closed(db, connection)
    assert sorted(m.body for m in t.receive(q, 10)) == [b"a", b"b"]
    t.send(q, b"c")  # the pool (and on SQLite the write lock) works as before
    assert [m.body for m in t.receive(q, 10)] == [b"c"]
