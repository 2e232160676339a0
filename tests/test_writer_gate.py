"""SQLite's writer gate: the writers of one process take turns at a lock, not in SQLite's sleeping busy handler.

On the real SQLite: with SQLite's own busy timeout set to 0 (a writer that meets the lock fails at once), four
receivers and a sender of one transport still finish every message without one lock error, so none of them ever
met another at SQLite's lock. The gate is given back on every way a transaction ends (commit, rollback, a failed
commit, a claim ended from another thread, a transaction dropped unended); a writer that waits longer than the
write-lock wait gets SQLite's own lock-timeout error, which the retry policy knows; a write started inside a write
of the same thread is not held at the gate (SQLite decides it, as without the gate).
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.dialects.sqlite import SqliteDialect
from airflow_sqlqueue.transport.tables import session as session_module


def _transport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, busy_ms: int | None = None,
               wait: float | None = None) -> SqlQueueTransport:
    if wait is not None:
        monkeypatch.setattr(SqliteDialect, "write_lock_wait", wait)
    if busy_ms is not None:  # SQLite's own busy timeout, below the gate
        configure = SqliteDialect.configure

        def no_busy_wait(self: SqliteDialect, connection: sqlite3.Connection) -> None:
            configure(self, connection)
            connection.execute(f"PRAGMA busy_timeout={busy_ms}")

        monkeypatch.setattr(SqliteDialect, "configure", no_busy_wait)
    t = SqlQueueTransport.from_url(f"sqlite:///{tmp_path / 'q.db'}", error_queue="error")
    t.create_queues(["orders", "replies", "error"])
    return t


def _gate(t: SqlQueueTransport) -> session_module.WriterGate:
    gate = t.session._gate
    assert gate is not None
    return gate


def test_writers_of_one_process_never_meet_at_sqlites_lock(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="airflow_sqlqueue")
    t = _transport(tmp_path, monkeypatch, busy_ms=0)
    sent = [f"m{i}".encode() for i in range(600)]
    t.send_many("orders", sent)
    seen: list[bytes] = []
    lock = threading.Lock()

    def handler(message, context):
        with lock:
            seen.append(message.body)
        context.send("replies", message.body)  # a write in the receive transaction (SQLite: buffered)

    extra = threading.Thread(target=lambda: [t.send("orders", f"late{i}".encode()) for i in range(50)])
    extra.start()
    summary = t.process("orders", handler, batch_size=5, concurrency=4)
    extra.join()
    summary.add(t.process("orders", handler, batch_size=5, concurrency=4))  # what the sender added at the end
    t.close()
    late = {f"late{i}".encode() for i in range(50)}
    assert sorted(seen) == sorted([*sent, *late])  # each exactly once
    assert summary.succeeded == 650
    locked = [r.getMessage() for r in caplog.records if "locked" in r.getMessage()]
    assert not locked, locked[:3]


def test_the_gate_is_given_back_however_a_transaction_ends(tmp_path, monkeypatch):
    t = _transport(tmp_path, monkeypatch)
    gate = _gate(t)
    t.send_many("orders", [b"a", b"b"])

    with t.claim("orders", 1) as claim:  # committed
        assert gate._lock.locked()
        claim.ack_all()
    assert not gate._lock.locked()

    claim = t.claim("orders", 1)
    claim.abandon()
    assert not gate._lock.locked()

    with pytest.raises(RuntimeError), t.claim("orders", 1):  # the block raised: rolled back
        raise RuntimeError("handler bug")
    assert not gate._lock.locked()

    claim = t.claim("orders", 1)  # ended by another thread (the event trigger does so)
    ender = threading.Thread(target=claim.commit)
    ender.start()
    ender.join()
    assert not gate._lock.locked()

    with pytest.raises(sqlite3.ProgrammingError), t.session.transaction() as cursor:  # the commit fails
        cursor.execute('INSERT INTO "orders" (id, headers, body) VALUES (?, ?, ?)', ("x1", "{}", b""))
        cursor.connection.close()
    assert not gate._lock.locked()

    tx = t.session.begin()  # dropped without an end
    del tx
    gc.collect()
    assert not gate._lock.locked()
    t.send("orders", b"still")  # the queue still takes writes
    assert t.peek("orders") == 2  # b (never acked) and still
    t.close()


def test_a_writer_that_waits_too_long_gets_the_lock_timeout_and_changes_nothing(tmp_path, monkeypatch):
    t = _transport(tmp_path, monkeypatch, wait=0.2)
    t.send("orders", b"held")
    claim = t.claim("orders", 1)  # held by this thread
    errors: list[BaseException] = []

    def other() -> None:
        try:
            t.send("replies", b"never")
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    waiter = threading.Thread(target=other)
    waiter.start()
    waiter.join(30)
    assert not waiter.is_alive()
    [error] = errors
    assert isinstance(error, sqlite3.OperationalError) and "database is locked" in str(error)
    assert t.dialect.is_deadlock(error)  # retried as a lock timeout first (the policy's few attempts)
    claim.abandon()
    assert t.peek("replies") == 0 and t.peek("orders") == 1
    t.send("replies", b"now")  # the gate is free again
    assert t.peek("replies") == 1
    t.close()


def test_a_write_inside_a_write_of_the_same_thread_is_not_held_at_the_gate(tmp_path, monkeypatch):
    """Without the gate SQLite refuses it after its busy timeout; with the gate it must not wait forever."""
    t = _transport(tmp_path, monkeypatch, wait=0.2, busy_ms=50)
    t.send("orders", b"held")
    with t.claim("orders", 1) as claim:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            t.session.begin().cursor.execute('DELETE FROM "replies"')
        claim.ack_all()
    assert t.peek("orders") == 0
    t.close()


def test_the_gate_waits_as_long_as_sqlites_own_busy_timeout(tmp_path, monkeypatch):
    """The gate's wait and the busy timeout each connection is given are the same setting (one is a literal in
    the PRAGMA, the other the dialect's ``write_lock_wait``): a writer fails after the same time either way."""
    t = _transport(tmp_path, monkeypatch)
    with t.session.connection() as connection:
        [(busy_ms,)] = connection.execute("PRAGMA busy_timeout").fetchall()
    assert busy_ms == round(SqliteDialect.write_lock_wait * 1000) == round(_gate(t).timeout * 1000)
    t.close()
