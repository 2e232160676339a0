"""PostgreSQL through both drivers Airflow users have: psycopg 3 (binary batch sends) and psycopg2 (the Postgres
provider's default), the same queue semantics on each."""

from __future__ import annotations

import threading
import uuid

import psycopg
import psycopg2
import pytest

from airflow_sqlqueue.transport import SqlQueueTransport
from tests.conftest import PG_URL


@pytest.fixture(params=["psycopg", "psycopg2"])
def transport(request):
    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    driver = psycopg.connect if request.param == "psycopg" else psycopg2.connect
    t = SqlQueueTransport(lambda: driver(PG_URL), "postgres", error_queue=f'"{schema}"."error"')
    t.create_queues([f'"{schema}"."orders"', f'"{schema}"."error"'])
    try:
        yield t, f'"{schema}"."orders"', request.param
    finally:
        t.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_batch_send_and_receive_keep_order_ids_and_bytes(transport):
    t, q, _ = transport
    bodies = [bytes([i % 256]) * (i % 7) + b"\x00\xff" for i in range(1500)]
    ids = t.send_many(q, bodies)
    ids += t.send_many(q, [b"", b"last"])
    got = []
    while batch := t.receive(q, max_messages=400):
        got.extend(batch)
    assert [m.body for m in got] == bodies + [b"", b"last"]
    assert [m.id for m in got] == ids


def test_handler_failures_go_to_the_error_queue(transport):
    t, q, _ = transport
    t.send_many(q, [b"ok", b"bad", b"ok2"])

    def handler(message, context):
        if message.body == b"bad":
            raise RuntimeError("refused")

    summary = t.process(q, handler, immediate_retries=0)
    assert (summary.succeeded, summary.failed) == (2, 1)
    assert [m.body for m in t.receive(t.book.error.name, max_messages=5)] == [b"bad"]


def test_wakeups_arrive_on_either_driver(transport):
    t, q, _ = transport
    t.enable_notifications(q)
    wakeups = t.wakeups(q, poll_interval=600)
    try:
        assert wakeups.start()
        threading.Timer(0.2, lambda: t.send(q, b"x")).start()
        assert wakeups.wait(found=False) is True
    finally:
        wakeups.close()
