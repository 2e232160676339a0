"""A send outside any transaction of the caller's, and an at-most-once ``receive``, are one autocommit statement:
one round trip on PostgreSQL (seen in libpq's protocol trace), one statement and no BEGIN/COMMIT on SQLite (seen
in sqlite3's trace). A connection lost once that statement left raises ``SendOutcomeUnknownError`` (sends nothing
twice) or ``OutcomeUnknownError``; rows a lean receive cannot sort out go back to the queue."""

from __future__ import annotations

import logging
import sqlite3
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_sqlqueue.transport import OutcomeUnknownError, OutgoingMessage, SendOutcomeUnknownError, SqlQueueTransport
from tests.conftest import _PG_SKIP, PG_URL, Db
from tests.reliability.helpers import insert_raw

pg_only = pytest.mark.skipif(_PG_SKIP is not None, reason=str(_PG_SKIP))


class PgTrace:
    """psycopg connections made for a transport, whose protocol messages can be traced."""

    def __init__(self) -> None:
        self.connections: list[Any] = []
        self.file = tempfile.TemporaryFile()

    def connect(self) -> Any:
        import psycopg

        connection = psycopg.connect(PG_URL)
        self.connections.append(connection)
        return connection

    def start(self) -> None:
        import psycopg

        for connection in self.connections:
            connection.pgconn.trace(self.file.fileno())
            connection.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)

    def lines(self) -> list[str]:
        for connection in self.connections:
            connection.pgconn.untrace()
        self.file.seek(0)
        return self.file.read().decode().splitlines()


def _pg_transport(db: Db, trace: PgTrace) -> SqlQueueTransport:
    return SqlQueueTransport(trace.connect, "postgres", error_queue=db.q("error"))


def _count(db: Db, queue: str) -> int:
    table = f'"{db.schema}"."{queue}"' if db.schema else f'"{queue}"'
    return db.sql(f"SELECT count(*) FROM {table}")[0][0]  # noqa: S608 - test table


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
@pytest.mark.parametrize("count", [1, 3])
def test_a_send_outside_a_transaction_is_one_round_trip_on_postgres(db: Db, count: int) -> None:
    db.transport.create_queue(db.q("orders"))
    trace = PgTrace()
    with _pg_transport(db, trace) as transport:
        transport.send(db.q("orders"), b"warm-up")  # the connection is made and configured
        trace.start()
        ids = transport.send_many(db.q("orders"), [OutgoingMessage(body=b"m%d" % i) for i in range(count)])
        lines = trace.lines()
    waits = [line for line in lines if line.startswith("B") and "ReadyForQuery" in line]
    assert len(waits) == 1, lines
    assert not any('"BEGIN"' in line or '"COMMIT"' in line for line in lines), lines
    assert waits[0].rstrip().endswith("I")  # idle afterwards: the statement committed by itself
    assert len(ids) == count and _count(db, "orders") == count + 1


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_send_inside_a_claim_still_commits_with_the_claim(db: Db) -> None:
    """A send given the caller's cursor runs in the caller's transaction: rolled back with it."""
    db.transport.create_queues([db.q("orders"), db.q("replies")])
    db.transport.send(db.q("orders"), b"in")
    with pytest.raises(RuntimeError), db.transport.claim(db.q("orders")) as claim:
        db.transport.send(db.q("replies"), b"out", cursor=claim.cursor)
        raise RuntimeError("the handler fails")
    assert _count(db, "replies") == 0 and _count(db, "orders") == 1


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_transaction_after_a_one_statement_send_is_still_one_transaction(db: Db) -> None:
    """A one-statement send leaves its pooled connection in autocommit (no switch back after each statement); the
    next transaction on that connection has it off again, so a failure rolls back everything it wrote."""
    transport = db.transport
    transport.create_queue(db.q("orders"))
    transport.send(db.q("orders"), b"one")
    left = transport.session._idle[-1]
    assert left.autocommit  # left on for the next one-statement call

    def work(cursor: Any) -> None:
        assert cursor.connection is left and not left.autocommit
        transport.send(db.q("orders"), b"two", cursor=cursor)
        raise RuntimeError("the work fails")

    with pytest.raises(RuntimeError):
        transport.session.run(work, what="a failing transaction")
    assert _count(db, "orders") == 1


def test_a_send_on_sqlite_is_one_statement_without_begin(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    statements: list[str] = []

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, check_same_thread=False)
        connection.set_trace_callback(statements.append)
        return connection

    with SqlQueueTransport(connect, "sqlite") as transport:
        transport.create_queues(["orders", "error"])
        transport.send("orders", b"warm-up")
        statements.clear()
        transport.send("orders", b"one")
        assert len(statements) == 1 and statements[0].lstrip().upper().startswith("INSERT"), statements
        statements.clear()
        transport.send_many("orders", [b"a", b"b"])  # executemany: a transaction, so the batch is atomic
        assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT", statements
        assert [bytes(m.body) for m in transport.receive("orders", 10)] == [b"warm-up", b"one", b"a", b"b"]


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_lost_connection_after_the_send_left_raises_outcome_unknown_and_sends_nothing_twice(db: Db) -> None:
    """The send's INSERT waits behind a lock; its backend is terminated meanwhile: the client cannot know whether
    the row went in, so it says so (with the Id) instead of retrying into a duplicate."""
    import psycopg

    queue = db.q("orders")
    db.transport.create_queue(queue)
    app = "sqlqueue-lost-" + uuid.uuid4().hex[:8]
    transport = SqlQueueTransport(lambda: psycopg.connect(PG_URL, application_name=app), "postgres",
                                  error_queue=db.q("error"))
    locker = psycopg.connect(PG_URL)
    try:
        locker.execute(f"LOCK TABLE {queue} IN ACCESS EXCLUSIVE MODE")  # noqa: S608 - test table
        outcome: list[BaseException] = []

        def send() -> None:
            try:
                transport.send(queue, b"maybe")
            except BaseException as exc:  # noqa: BLE001 - inspected below
                outcome.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 10
        killed = 0
        while not killed and time.monotonic() < deadline:
            killed = db.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s "
                            "AND wait_event_type = 'Lock'", (app,))[0][0]
            time.sleep(0.05)
        sender.join(10)
        assert killed == 1
        locker.rollback()
        [error] = outcome
        assert isinstance(error, SendOutcomeUnknownError), repr(error)
        assert len(error.ids) == 1 and str(error.ids[0]) in str(error) and "orders" in error.queue
        assert _count(db, "orders") == 0  # not stored (the lock held it), and not sent again
        transport.send(queue, b"next")  # the lost connection was not pooled again
        assert [bytes(m.body) for m in transport.receive(queue, 10)] == [b"next"]
    finally:
        locker.close()
        transport.close()


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
@pytest.mark.parametrize("count", [1, 100])
def test_a_receive_is_one_round_trip_on_postgres(db: Db, count: int) -> None:
    db.transport.create_queue(db.q("orders"))
    db.transport.send_many(db.q("orders"), [b"m%d" % i for i in range(count + 1)])
    trace = PgTrace()
    with _pg_transport(db, trace) as transport:
        assert [bytes(m.body) for m in transport.receive(db.q("orders"))] == [b"m0"]  # warm-up
        trace.start()
        taken = transport.receive(db.q("orders"), count)
        lines = trace.lines()
    waits = [line for line in lines if line.startswith("B") and "ReadyForQuery" in line]
    assert len(waits) == 1 and waits[0].rstrip().endswith("I"), lines
    assert [bytes(m.body) for m in taken] == [b"m%d" % i for i in range(1, count + 1)]
    assert _count(db, "orders") == 0


def test_a_receive_on_sqlite_is_one_statement_without_begin(tmp_path: Path) -> None:
    statements: list[str] = []

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(tmp_path / "q.db", check_same_thread=False)
        connection.set_trace_callback(statements.append)
        return connection

    with SqlQueueTransport(connect, "sqlite") as transport:
        transport.create_queues(["orders", "error"])
        transport.send_many("orders", [b"a", b"b", b"c"])
        assert [bytes(m.body) for m in transport.receive("orders")] == [b"a"]
        statements.clear()
        assert [bytes(m.body) for m in transport.receive("orders", 5)] == [b"b", b"c"]
        assert len(statements) == 1 and statements[0].lstrip().upper().startswith("DELETE"), statements


def test_rows_a_receive_cannot_sort_out_go_back_and_the_messages_are_returned(db: Db, caplog) -> None:
    """Poison rows need the error queue; without one they cannot be settled: they are put back (same Id), the
    messages taken with them are returned in order, and the failure is logged."""
    db.transport.create_queue(db.q("orders"))  # no error queue
    db.transport.send(db.q("orders"), b"first")
    insert_raw(db, "orders", "not json", b"poison")
    db.transport.send(db.q("orders"), b"last")
    with caplog.at_level(logging.WARNING):
        taken = db.transport.receive(db.q("orders"), 10)
    assert [bytes(m.body) for m in taken] == [b"first", b"last"]
    assert _count(db, "orders") == 1 and "put back" in caplog.text
    db.transport.create_queue(db.q("error"))
    assert db.transport.receive(db.q("orders"), 10) == []  # now it is dead-lettered
    assert _count(db, "orders") == 0 and _count(db, "error") == 1


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_lost_connection_during_a_receive_raises_outcome_unknown(db: Db) -> None:
    import psycopg

    queue = db.q("orders")
    db.transport.create_queue(queue)
    db.transport.send(queue, b"kept")
    app = "sqlqueue-lost-" + uuid.uuid4().hex[:8]
    transport = SqlQueueTransport(lambda: psycopg.connect(PG_URL, application_name=app), "postgres",
                                  error_queue=db.q("error"))
    locker = psycopg.connect(PG_URL)
    try:
        locker.execute(f"LOCK TABLE {queue} IN ACCESS EXCLUSIVE MODE")  # noqa: S608 - test table
        outcome: list[BaseException] = []
        receiver = threading.Thread(target=lambda: outcome.append(_raised(lambda: transport.receive(queue))))
        receiver.start()
        deadline, killed = time.monotonic() + 10, 0
        while not killed and time.monotonic() < deadline:
            killed = db.sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s "
                            "AND wait_event_type = 'Lock'", (app,))[0][0]
            time.sleep(0.05)
        receiver.join(10)
        locker.rollback()
        [error] = outcome
        assert killed == 1 and isinstance(error, OutcomeUnknownError), repr(error)
        assert not isinstance(error, SendOutcomeUnknownError) and "at-most-once" in str(error)
        assert _count(db, "orders") == 1  # the lock held the row: here it is still there
    finally:
        locker.close()
        transport.close()


def _raised(work: Any) -> BaseException | None:
    try:
        work()
    except BaseException as exc:  # noqa: BLE001 - returned for the test to inspect
        return exc
    return None


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_claims_delete_leaves_with_its_commit_on_postgres(db: Db) -> None:
    """The handler pump's batch ends with one round trip: the delete of the acked rows and COMMIT, pipelined."""
    db.transport.create_queue(db.q("orders"))
    db.transport.send_many(db.q("orders"), [b"a", b"b", b"c"])
    trace = PgTrace()
    with _pg_transport(db, trace) as transport:
        claim = transport.claim(db.q("orders"), 2)
        claim.ack_all()
        trace.start()
        claim.commit()
        lines = trace.lines()
    waits = [line for line in lines if line.startswith("B") and "ReadyForQuery" in line]
    assert len(waits) == 1 and waits[0].rstrip().endswith("I"), lines
    assert any("DELETE" in line for line in lines) and any('"COMMIT"' in line for line in lines), lines
    assert [bytes(m.body) for m in db.transport.receive(db.q("orders"), 10)] == [b"c"]


@pg_only
@pytest.mark.parametrize("db", ["postgres"], indirect=True)
def test_a_drain_batch_is_three_round_trips_on_postgres(db: Db, tmp_path: Path) -> None:
    """A drain batch sends what a hand-written loop sends: BEGIN, the DELETE ... RETURNING, COMMIT, three round
    trips (a psycopg pipeline around the first statement synced after its BEGIN and again at its end: four)."""
    db.transport.create_queue(db.q("orders"))
    db.transport.send_many(db.q("orders"), [b"a", b"b", b"c"])
    trace = PgTrace()
    batches: list[list[bytes]] = []
    with _pg_transport(db, trace) as transport:
        transport.send(db.q("orders"), b"d")  # the connection is made and configured
        trace.start()
        summary = transport.drain(db.q("orders"), lambda ms: batches.append([bytes(m.body) for m in ms]) or len(ms),
                                  batch_size=10)
        lines = trace.lines()
    assert summary.delivered == 4 and batches[0] == [b"a", b"b", b"c", b"d"]
    first_commit = next(i for i, line in enumerate(lines) if '"COMMIT"' in line and line.startswith("F"))
    batch = lines[:first_commit + 3]
    sides = [line[0] for line in batch if line[:1] in ("F", "B")]
    round_trips = sum(1 for sent, got in zip(sides, sides[1:], strict=False) if sent == "F" and got == "B")
    assert round_trips == 3, batch  # BEGIN, the take, COMMIT
    assert _count(db, "orders") == 0
