"""Poison and odd rows written by foreign or broken senders, mixed into a flowing queue, counted.

Per the wire format: headers that are not a JSON object of strings are poison (moved to the error queue in
the receive transaction, same Id and body, raw headers kept in ``airflow_sqlqueue.RawHeaders``, failure
headers added); NULL or empty headers read as ``{}`` (a valid message); a NULL body is a valid message.
Whatever its shape, a row never stops the messages behind it.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, TransactionMode
from airflow_sqlqueue.transport.wire import headers as h

from .helpers import MESSAGES, count, duplicates, error_rows, insert_raw, lost, summary, table
from .workers import InjectedFailure

GOOD = max(MESSAGES // 10, 200)
EVERY = 100
FAILURE_NAMES = {h.FAILED_Q, h.TIME_OF_FAILURE, h.EXCEPTION_TYPE, h.EXCEPTION_MESSAGE, h.EXCEPTION_SOURCE,
                 h.EXCEPTION_STACK_TRACE, h.PROCESSING_ENDPOINT, h.PROCESSING_MACHINE, h.HOST_ID, h.HOST_DISPLAY_NAME}
HUGE_VALID = '{"big":"' + "x" * 200_000 + '"}'  # 200 KB: big, under the send limit
#: (kind, headers text, body, poison?)
BAD_ROWS = [
    ("not-json", '{"NServiceBus.MessageId":', b"\xffnot json", True),
    ("json-array", '["a","b"]', b"array", True),
    ("json-number-value", '{"a":1}', b"number", True),
    ("json-string", '"just text"', b"string", True),
    ("null-headers", None, b"null headers", False),
    ("empty-headers", "", b"empty headers", False),
    ("null-body", '{"NServiceBus.EnclosedMessageTypes":"X"}', None, False),
    ("huge-headers", HUGE_VALID, b"huge", False),
    ("sql-in-headers", '{"x":"\'); DROP TABLE error;--"}', b"'); DELETE FROM orders;--", False),
]


def nullable_headers(db) -> None:
    """Let ``orders`` store NULL headers (tables of old or foreign senders may allow it)."""
    if db.kind == "postgres":
        db.sql(f"ALTER TABLE {table(db, 'orders')} ALTER COLUMN headers DROP NOT NULL")
        return
    script = db.transport.ddl([db.q("orders")]).replace("headers TEXT NOT NULL", "headers TEXT NULL")
    conn = sqlite3.connect(db.url[len("sqlite:///"):])
    try:
        conn.executescript(f'DROP TABLE {table(db, "orders")};\n{script}')
    finally:
        conn.close()


def _fill_with_bad_rows(db) -> tuple[set, dict]:
    """GOOD messages with a bad row after every EVERY of them; return (expected delivered, poison by id)."""
    t, q = db.transport, db.q("orders")
    expected: set = set()
    poison: dict = {}
    for start in range(0, GOOD, EVERY):
        batch = [f"good-{i:06d}".encode() for i in range(start, min(start + EVERY, GOOD))]
        t.send_many(q, [OutgoingMessage(b) for b in batch])
        expected.update(("good", b) for b in batch)
        kind, text, body, is_poison = BAD_ROWS[(start // EVERY) % len(BAD_ROWS)]
        body = None if body is None else body + f"-{start}".encode()
        row_id = insert_raw(db, "orders", text, body)
        if is_poison:
            poison[row_id] = (text, body)
        else:
            expected.add((kind, body if body is not None else row_id))
    return expected, poison


@pytest.mark.parametrize("how", ["drain", TransactionMode.RECEIVE_ONLY.value,
                                 TransactionMode.SENDS_ATOMIC_WITH_RECEIVE.value])
def test_bad_rows_moved_intact_and_the_queue_keeps_flowing(queues, how):
    nullable_headers(queues)
    t, q = queues.transport, queues.q("orders")
    expected, poison = _fill_with_bad_rows(queues)
    seen: list = []
    lock = threading.Lock()

    def record(message) -> None:
        kind = "good"
        if message.body is None:
            kind, key = "null-body", message.id
        else:
            key = message.body
            for name, text, body, _ in BAD_ROWS:
                if body is not None and message.body.startswith(body + b"-"):
                    kind = name
                    if text is None:
                        assert message.headers == {}  # NULL headers read as an empty object
                    else:
                        assert message.headers == h.parse_headers(text)  # stored verbatim, read back exactly
        with lock:
            seen.append((kind, key))

    if how == "drain":
        def sink(messages):
            for message in messages:
                record(message)
            return len(messages)

        moved = t.drain(q, sink, batch_size=50, concurrency=4).poison
    else:
        moved = t.process(q, lambda m, c: record(m), mode=how, batch_size=50, concurrency=4,
                          immediate_retries=0).poison
    assert not duplicates(seen)
    assert set(seen) == expected
    assert moved == len(poison) and count(queues, "orders") == 0
    errors = error_rows(queues)
    assert {row_id for row_id, _, _ in errors} == set(poison)
    for row_id, error_headers, body in errors:
        text, original_body = poison[row_id]
        parsed = h.parse_headers(error_headers)
        assert body == (b"" if original_body is None else original_body), "the body must be moved intact"
        assert parsed[h.RAW_HEADERS] == text, "the raw headers must be kept verbatim"
        assert set(parsed) == FAILURE_NAMES | {h.RAW_HEADERS, h.MESSAGE_ID}
        assert parsed[h.FAILED_Q] == t.wire_address(q)
    odd = len(expected) - GOOD
    summary(f"bad_rows[{how}]", queues.kind, messages=GOOD + len(poison) + odd, faults=len(poison) + odd,
            lost=len(lost(expected, seen)), poison_moved=len(poison), odd_rows_delivered=odd)


@pytest.mark.parametrize("kind", ["null-headers", "empty-headers", "null-body", "huge-headers", "sql-in-headers"])
def test_odd_row_whose_handler_fails_moves_intact_with_failure_headers(queues, kind):
    nullable_headers(queues)
    t, q = queues.transport, queues.q("orders")
    _, text, body, _ = next(r for r in BAD_ROWS if r[0] == kind)
    row_id = insert_raw(queues, "orders", text, body)
    t.send(q, b"behind")
    handled = []

    def handler(message, context):
        if message.id == row_id:
            raise InjectedFailure("refused")
        handled.append(message.body)

    result = t.process(q, handler, immediate_retries=1)
    assert handled == [b"behind"] and result.failed == 1
    [(error_id, error_headers, error_body)] = error_rows(queues)
    parsed = h.parse_headers(error_headers)
    # intact, except that no insert ever writes a NULL body (a .NET receiver and ServiceControl stop on one)
    assert (error_id, error_body) == (row_id, b"" if body is None else body)
    assert FAILURE_NAMES <= set(parsed)
    original = h.parse_headers(text)
    # MessageId is added (the native Id) when the row had none: ServiceControl reads it unconditionally
    assert {k: v for k, v in parsed.items() if k not in FAILURE_NAMES} == {h.MESSAGE_ID: str(row_id), **original}
    # and the failed message goes back to its queue unchanged (minus the failure headers)
    assert t.retry_errors(allowed=[q]).total_returned == 1
    [back] = t.receive(q)
    assert (back.id, back.body) == (row_id, b"" if body is None else body)


HUGE_POISON = "x" * 2_000_000  # 2 MB of non-JSON: over the 1,000,000-character limit of headers on send


def test_huge_poison_headers_moved_and_queue_flows(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_raw(queues, "orders", HUGE_POISON, b"p")
    t.send(q, b"behind")
    assert [m.body for m in t.receive(q, 10)] == [b"behind"]
    [(error_id, error_headers, body)] = error_rows(queues)
    assert (error_id, body) == (row_id, b"p")
    parsed = h.parse_headers(error_headers)
    assert parsed[h.RAW_HEADERS] == HUGE_POISON and set(parsed) == FAILURE_NAMES | {h.RAW_HEADERS, h.MESSAGE_ID}


def test_huge_valid_headers_of_a_failing_message_move_to_error(queues):
    t, q = queues.transport, queues.q("orders")
    huge = '{"big":"' + "y" * 2_000_000 + '"}'  # twice the limit of headers on send: only a foreign sender writes it
    row_id = insert_raw(queues, "orders", huge, b"h")
    t.send(q, b"behind")
    handled = []

    def handler(message, context):
        if message.id == row_id:
            raise InjectedFailure("refused")
        handled.append(message.body)

    assert t.process(q, handler, immediate_retries=0).failed == 1
    assert handled == [b"behind"] and count(queues, "orders") == 0
    [(error_id, error_headers, body)] = error_rows(queues)
    parsed = h.parse_headers(error_headers)
    assert (error_id, body) == (row_id, b"h") and FAILURE_NAMES <= set(parsed)
    kept = {k: v for k, v in parsed.items() if k not in FAILURE_NAMES}
    assert kept == {h.MESSAGE_ID: str(row_id), "big": "y" * 2_000_000}
