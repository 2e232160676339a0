"""The SQL Server dialect against a real server, statement by statement (DB-API level).

Runs only when ``SQLQUEUE_TEST_MSSQL_URL`` is set (see conftest.py). Queues have ordinary names; the odd names
(``]``, ``%``, quotes) have their own test in test_real_transport.py.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_sqlqueue.transport.common.errors import QueueNotFoundError
from airflow_sqlqueue.transport.wire.address import QueueAddress
from tests.mssql_real.conftest import connect, drop_tables, needs, new_dialect

DIALECT = new_dialect()


def _connect() -> Any:
    connection = connect()
    DIALECT.configure(connection)
    return connection


@pytest.fixture
def conn() -> Iterator[Any]:
    connection = _connect()
    yield connection
    connection.close()


@pytest.fixture
def queue(conn: Any) -> Iterator[QueueAddress]:
    """A fresh queue address with an ordinary name; its tables dropped afterwards."""
    address = QueueAddress(f"sqlqueue_t_{uuid.uuid4().hex[:8]}_dialect", "dbo")
    yield address
    conn.rollback()
    drop_tables([address])


def _send(conn: Any, address: QueueAddress, headers: dict[str, str], body: bytes | None,
          ttbr_ms: int | None = None) -> uuid.UUID:
    message_id = uuid.uuid4()
    with DIALECT.transaction(conn) as cur:
        DIALECT.execute(cur, "send", {"id": DIALECT.id_param(message_id), "headers": json.dumps(headers),
                                      "body": body, "ttbr_ms": ttbr_ms}, **DIALECT.identifiers(address))
    return message_id


def _peek(conn: Any, address: QueueAddress) -> int:
    with DIALECT.transaction(conn) as cur:
        return int(DIALECT.scalar(cur, "peek", None, **DIALECT.identifiers(address)))


def _receive(conn: Any, address: QueueAddress, n: int) -> list:
    with DIALECT.transaction(conn) as cur:
        rows = DIALECT.execute(cur, "receive_batch", {"batch_size": n}, **DIALECT.identifiers(address)).fetchall()
    return sorted((DIALECT.to_raw_row(r) for r in rows), key=lambda r: r.seq)


@needs("filtered_index_metadata")
def test_create_is_idempotent_and_the_check_is_clean(conn: Any, queue: QueueAddress, server: Any) -> None:
    """Clean: no problem found; on an engine without sys.allocation_units, the heap part is said to be unchecked."""
    DIALECT.create_queue(conn, queue, delayed=True)
    DIALECT.create_queue(conn, queue, delayed=True)
    with DIALECT.transaction(conn) as cur:
        assert DIALECT.table_exists(cur, queue)
        assert DIALECT.table_exists(cur, DIALECT.delayed_address(queue))
        findings = DIALECT.check(cur, queue)
        assert [f.code for f in findings] == (["heap_bloat_not_checked"] if server.lacks("allocation_units") else [])
        assert all(f.not_checked for f in findings)
        found = {(a.table.lower(), (a.schema or "dbo").lower()) for a in DIALECT.discover(cur)}
        assert (queue.table.lower(), "dbo") in found  # catalog names compare as the server's collation does


@needs("cte_delete")
def test_send_receive_peek_in_fifo_order(conn: Any, queue: QueueAddress) -> None:
    DIALECT.create_queue(conn, queue, delayed=False)
    headers = {"NServiceBus.EnclosedMessageTypes": "Sales.OrderPlaced", "Text": "naïve / 名前"}
    ids = [_send(conn, queue, headers, f"body {i}".encode()) for i in range(3)]
    batch = [{"id": DIALECT.id_param(uuid.uuid4()), "headers": json.dumps(headers), "body": b"\x00\xff" * i or None,
              "ttbr_ms": None} for i in range(3)]
    with DIALECT.transaction(conn) as cur:
        DIALECT.send_many(cur, queue, batch)
    assert _peek(conn, queue) == 6
    rows = _receive(conn, queue, 4)
    assert [r.id for r in rows[:3]] == ids
    assert [r.body for r in rows] == [b"body 0", b"body 1", b"body 2", None]
    assert json.loads(rows[0].headers) == headers and not any(r.expired for r in rows)
    rest = _receive(conn, queue, 10)
    assert [str(r.id) for r in rest] == [b["id"] for b in batch[1:]]
    assert [r.body for r in rest] == [b"\x00\xff", b"\x00\xff\x00\xff"]
    assert _peek(conn, queue) == 0


@needs("lock_hints", "cte_delete")
def test_rollback_returns_the_row_and_locked_rows_are_skipped(conn: Any, queue: QueueAddress) -> None:
    DIALECT.create_queue(conn, queue, delayed=False)
    first = _send(conn, queue, {"n": "1"}, b"1")
    second = _send(conn, queue, {"n": "2"}, b"2")
    other = _connect()
    try:
        holder = conn.cursor()
        held = DIALECT.execute(holder, "lock_batch", {"batch_size": 1}, **DIALECT.identifiers(queue)).fetchall()
        assert DIALECT.to_raw_row(held[0]).id == first
        # another receiver skips the held row instead of waiting for it
        assert [r.id for r in _receive(other, queue, 10)] == [second]
        conn.rollback()
        assert [r.id for r in _receive(other, queue, 10)] == [first]
    finally:
        other.close()


@needs("cte_delete")
def test_expired_rows_are_flagged_and_purged(conn: Any, queue: QueueAddress) -> None:
    DIALECT.create_queue(conn, queue, delayed=False)
    _send(conn, queue, {"n": "old"}, b"x", ttbr_ms=1)
    _send(conn, queue, {"n": "old"}, b"x", ttbr_ms=1)
    keep = _send(conn, queue, {"n": "keep"}, b"y", ttbr_ms=40 * 24 * 3600 * 1000)  # beyond DATEADD's int ms
    time.sleep(0.1)
    with DIALECT.transaction(conn) as cur:
        rows = DIALECT.execute(cur, "browse", {"after_seq": 0, "batch_size": 10},
                               **DIALECT.identifiers(queue)).fetchall()
        assert [DIALECT.to_raw_row(r).expired for r in rows] == [True, True, False]
        purged = DIALECT.execute(cur, "purge_expired", {"batch_size": 1}, **DIALECT.identifiers(queue)).rowcount
        assert purged == 1
    with DIALECT.transaction(conn) as cur:
        DIALECT.execute(cur, "purge_expired", {"batch_size": 10}, **DIALECT.identifiers(queue))
    assert [r.id for r in _receive(conn, queue, 10)] == [keep]


@needs("cte_delete")
def test_delayed_messages_move_when_due(conn: Any, queue: QueueAddress) -> None:
    DIALECT.create_queue(conn, queue, delayed=True)
    with DIALECT.transaction(conn) as cur:
        DIALECT.executemany(cur, "send_delayed", [
            {"headers": json.dumps({"n": "due"}), "body": b"d", "delay_ms": 0},
            {"headers": json.dumps({"n": "later"}), "body": b"l", "delay_ms": 3_600_000},
        ], **DIALECT.identifiers(queue))
    time.sleep(0.05)
    with DIALECT.transaction(conn) as cur:
        DIALECT.move_due_delayed(cur, queue, 100)
    rows = _receive(conn, queue, 10)
    assert [json.loads(r.headers) for r in rows] == [{"n": "due"}] and rows[0].body == b"d"


@needs("allocation_units", "filtered_index_metadata", "rebuild")
def test_check_finds_and_repairs_a_clustered_rowversion_index(conn: Any, queue: QueueAddress) -> None:
    DIALECT.create_queue(conn, queue, delayed=False)
    ids = DIALECT.identifiers(queue)
    cur = conn.cursor()  # make the table look like one created before 2020 (test setup only)
    cur.execute(f"DROP INDEX {ids['seq_index']} ON {ids['queue']}")
    cur.execute(f"CREATE CLUSTERED INDEX {ids['seq_index']} ON {ids['queue']} (RowVersion)")
    conn.commit()
    with DIALECT.transaction(conn) as cur:
        findings = DIALECT.check(cur, queue)
    assert [f.code for f in findings] == ["clustered_seq_index"]
    with DIALECT.transaction(conn) as cur:
        for statement in findings[0].repair:
            DIALECT.execute(cur, statement, None, **ids)
    with DIALECT.transaction(conn) as cur:
        assert DIALECT.check(cur, queue) == []
        DIALECT.execute(cur, "rebuild_heap", None, **ids)


def test_missing_table_and_schema_are_recognised(conn: Any) -> None:
    address = QueueAddress(f"sqlqueue_t_missing_{uuid.uuid4().hex[:8]}")
    with pytest.raises(Exception) as caught, DIALECT.transaction(conn) as cur:
        DIALECT.execute(cur, "peek", None, **DIALECT.identifiers(address))
    assert DIALECT.is_missing_table(caught.value)
    with pytest.raises(QueueNotFoundError, match="does not exist"):
        DIALECT.create_queue(conn, QueueAddress("q", f"sqlqueue_no_schema_{uuid.uuid4().hex[:6]}"), delayed=False)
