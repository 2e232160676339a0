"""A handler pump that keeps running on an empty queue waits for a wake-up, not a poll, on SQLite and PostgreSQL.

The pump's fallback poll is set to ten minutes: only a wake-up lets it handle a message sent while it waits. Every
sender is plain SQL from another process (SQLite) or connection (PostgreSQL), knowing nothing of the pump.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest

from airflow_sqlqueue.transport.operations import pump
from tests.conftest import PG_URL, make_db

INSERT_SQLITE = ("import sqlite3, sys, uuid; c = sqlite3.connect(sys.argv[1], timeout=60); "
                 "c.execute('INSERT INTO orders (id, expires, headers, body) VALUES (?, NULL, ?, ?)', "
                 "(str(uuid.uuid4()), '{}', sys.argv[2].encode())); c.commit()")


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path, monkeypatch):
    monkeypatch.setattr(pump, "IDLE_POLL_INTERVAL", 600.0, raising=False)
    monkeypatch.setattr(pump, "IDLE_MAX_POLL_INTERVAL", 600.0, raising=False)
    yield from make_db(request.param, tmp_path)


def _send_from_outside(db, body: str) -> None:
    if db.kind == "sqlite":
        subprocess.run([sys.executable, "-c", INSERT_SQLITE, db.url[len("sqlite:///"):], body], check=True)
        return
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{db.schema}"."orders" (id, expires, headers, body) VALUES (%s, NULL, %s, %s)',  # noqa: S608
                     (uuid.uuid4(), "{}", body.encode()))


@pytest.mark.parametrize("concurrency", [1, 3])
def test_an_idle_pump_is_woken_by_a_send_from_outside(db, concurrency, monkeypatch):
    """... and in between it waits: a few empty receives per wake-up, not a loop of them."""
    t, q = db.transport, db.q("orders")
    empty = []
    run = pump.ReceiverLoop.run

    def counting(self, one_batch, **kwargs):
        def batch(n):
            counted, taken = one_batch(n)
            if taken == 0:
                empty.append(n)
            return counted, taken
        return run(self, batch, **kwargs)

    monkeypatch.setattr(pump.ReceiverLoop, "run", counting)
    t.create_queue(q, notify=db.kind == "postgres")
    t.create_queue(db.q("error"))
    handled: list[bytes] = []
    first = threading.Event()

    def handler(message, context) -> None:
        handled.append(bytes(message.body))
        first.set()

    summary = []
    runner = threading.Thread(target=lambda: summary.append(
        t.process(q, handler, max_messages=2, concurrency=concurrency, stop_when_empty=False)), daemon=True)
    runner.start()
    _send_from_outside(db, "one")
    assert first.wait(120), "the idle pump was not woken by the first send"
    _send_from_outside(db, "two")  # sent while the pump waits again (or is about to)
    runner.join(120)
    assert not runner.is_alive(), "the idle pump was not woken by the second send"
    assert handled == [b"one", b"two"]
    assert summary[0].finished == 2
    # each wake-up: the receiver that waited and the others waiting on it look once, plus one look after PostgreSQL's
    # wake-up lock is taken again; a pump that did not wait would have looked thousands of times
    assert len(empty) <= 4 * (concurrency + 1)


@pytest.fixture
def lite(tmp_path):
    yield from make_db("sqlite", tmp_path)


def test_a_sqlite_send_of_the_same_process_wakes_a_watcher_at_once(lite, monkeypatch):
    """A write that ends in this process wakes a SQLite watcher without waiting for its next look at the files
    (here an hour away)."""
    from airflow_sqlqueue.transport.operations import wakeups as module

    monkeypatch.setattr(module, "FILE_CHECK_INTERVAL", 3600.0)
    t = lite.transport
    t.create_queues(["orders", "error"])
    wakeups = t.wakeups("orders", poll_interval=3600)
    woken: list[bool] = []
    try:
        assert wakeups.start() is False and wakeups.watching_files
        waiter = threading.Thread(target=lambda: woken.append(wakeups.wait(found=False)), daemon=True)
        waiter.start()
        time.sleep(0.2)  # let it look at the files first (a send before that look is seen by the look itself)
        t.send("orders", b"here")
        waiter.join(120)
        assert woken == [True], "the watcher was not woken by the send of its own process"
    finally:
        wakeups.close()
    assert [bytes(m.body) for m in t.receive("orders")] == [b"here"]
