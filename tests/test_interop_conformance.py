"""Conformance with NServiceBus.Transport.SqlServer / .PostgreSql 9.x, built from the reference facts
(``wire-format.md``), not from this project's own output: rows inserted the way a 9.x .NET endpoint inserts them
(explicit column lists, database-clock expiry), headers byte for byte, canonical addresses, the receive-side
edge cases, the standard headers of every send path, delayed retries. Real SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from airflow_sqlqueue.transport import OutgoingMessage, QueueAddress, get_dialect
from airflow_sqlqueue.transport.dialects.mssql import MssqlDialect
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.standard_headers import ORIGINATING_HOST_ID, RELATED_TO

WIRE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{6} Z$")
#: Headers as 9.1 writes them (System.Text.Json relaxed, then "/" as "\/") and as 9.0.x wrote them.
DOTNET_9_1 = ('{"NServiceBus.MessageId":"0f8fad5b-d9cb-469f-a165-70867728950e",'
              '"NServiceBus.EnclosedMessageTypes":"Sales.OrderPlaced, Sales.Messages",'
              '"NServiceBus.ContentType":"application\\/json","NServiceBus.TimeSent":"2026-01-02 03:04:05:123456 Z",'
              '"Emoji":"\\uD83D\\uDE80","Ctl":"\\u001B\\u007F\\u0085\\u00A0\\u2028","Raw":"Zoë☃"}')
DOTNET_9_0 = ('{"NServiceBus.MessageId":"0f8fad5b-d9cb-469f-a165-70867728950e",'
              '"Emoji":"\\ud83d\\ude80","Ctl":"\\u001b\\u007f\\u0085\\u00a0\\u2028","Raw":"Zoë☃"}')


def _table(db, name: str) -> str:
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def dotnet_insert(db, name: str, headers: str, body: bytes, ttbr_ms: int | None = None) -> uuid.UUID:
    """INSERT as a 9.x .NET sender: explicit columns, Expires from the database clock (UTC) + TTBR."""
    row_id = uuid.uuid4()
    if db.kind == "postgres":
        expires = "NULL" if ttbr_ms is None else \
            f"(now() AT TIME ZONE 'UTC') + {int(ttbr_ms)} * interval '1 millisecond'"
        db.sql(f"INSERT INTO {_table(db, name)} (Id, Expires, Headers, Body) "  # noqa: S608
               f"VALUES (%s, {expires}, %s, %s)", (str(row_id), headers, body))
    else:
        expires = "NULL" if ttbr_ms is None else \
            f"strftime('%Y-%m-%d %H:%M:%f', julianday('now') + {int(ttbr_ms)} / 86400000.0)"
        db.sql(f"INSERT INTO {_table(db, name)} (Id, Expires, Headers, Body) "  # noqa: S608
               f"VALUES (?, {expires}, ?, ?)", (str(row_id), headers, body))
    return row_id


def raw_headers(db, name: str) -> list[bytes]:
    cast = "convert_to(headers, 'UTF8')" if db.kind == "postgres" else "CAST(headers AS BLOB)"
    return [bytes(r[0]) for r in db.sql(f"SELECT {cast} FROM {_table(db, name)} ORDER BY seq")]  # noqa: S608


# -- rows a .NET endpoint wrote --------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [DOTNET_9_1, DOTNET_9_0])
def test_rows_inserted_by_a_dotnet_9_endpoint_are_received(queues, text):
    t, q = queues.transport, queues.q("orders")
    row_id = dotnet_insert(queues, "orders", text, b'{"OrderId":1}', ttbr_ms=3_600_000)
    [message] = t.receive(q)
    assert (message.id, message.body) == (row_id, b'{"OrderId":1}')
    assert message.headers["Emoji"] == "🚀" and message.headers["Raw"] == "Zoë☃"
    assert message.headers["Ctl"] == "\x1b\x7f\x85\xa0\u2028"
    assert message.message_id == "0f8fad5b-d9cb-469f-a165-70867728950e"


def test_expired_dotnet_row_is_dropped_silently_and_live_one_kept(queues):
    t, q = queues.transport, queues.q("orders")
    dotnet_insert(queues, "orders", DOTNET_9_1, b"old", ttbr_ms=-1)
    live = dotnet_insert(queues, "orders", DOTNET_9_1, b"live", ttbr_ms=3_600_000)
    with t.receiving(q, 10) as batch:
        assert [m.id for m in batch.messages] == [live]
        assert batch.stats.expired == 1 and batch.stats.poison == 0
    assert t.peek(queues.q("error")) == 0


def test_expired_poison_row_is_dead_lettered_not_dropped(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = dotnet_insert(queues, "orders", "{not json", b"p", ttbr_ms=-1000)
    with t.receiving(q, 10) as batch:
        assert batch.stats.poison == 1 and batch.stats.expired == 0
    [error] = t.receive(queues.q("error"))
    assert error.id == row_id and error.headers[h.RAW_HEADERS] == "{not json"


@pytest.mark.parametrize("text", [" ", "\t\r\n", "null"])
def test_whitespace_only_or_null_headers_are_poison(queues, text):
    t, q = queues.transport, queues.q("orders")
    dotnet_insert(queues, "orders", text, b"p")
    assert t.receive(q) == []
    assert t.peek(queues.q("error")) == 1


def test_empty_headers_read_as_no_headers(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = dotnet_insert(queues, "orders", "", b"minimal")
    [message] = t.receive(q)
    assert (message.id, message.headers, message.message_id) == (row_id, {}, str(row_id))


@pytest.mark.parametrize("dialect", ["postgres", "sqlite", "mssql"])
def test_expires_equal_to_now_is_expired(dialect):
    """Upstream treats a row as live only while ``Expires > now``: the expired flag every receive computes must
    be ``Expires <= now`` (equality is expired), in every statement that returns rows."""
    statements = get_dialect(dialect).statements
    for name in ("receive_batch", "receive_one", "receive_range", "lock_batch", "lock_after", "browse"):
        if name not in statements:  # receive_one: only where a dialect has a cheaper statement for one row
            continue
        text = re.sub(r"\s+", " ", statements[name].text)
        now = r"(\(statement_timestamp\(\)|strftime|GETUTCDATE|julianday\('now'\))"
        assert re.search(r"expires\)? <= " + now, text, re.IGNORECASE), name
        assert not re.search(r"expires\)? < " + now, text, re.IGNORECASE), name


# -- what a .NET endpoint reads from us ----------------------------------------------------------------------
def test_header_bytes_are_what_9_1_writes(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, OutgoingMessage(b"x", {"Emoji": "🚀", "Ctl": "\x1b\x7f\x85\xa0\u2028", "Raw": "Zoë☃",
                                     h.CONTENT_TYPE: "application/json"}))
    [stored] = raw_headers(queues, "orders")
    assert stored.endswith('"Emoji":"\\uD83D\\uDE80","Ctl":"\\u001B\\u007F\\u0085\\u00A0\\u2028",'
                           '"Raw":"Zoë☃","NServiceBus.ContentType":"application\\/json"}'.encode())


def test_every_send_carries_the_standard_headers(queues):
    t, q = queues.transport, queues.q("orders")
    ids = t.send_many(q, [b"a", OutgoingMessage(b"b", {h.MESSAGE_ID: "mine", h.CONVERSATION_ID: "c-1"})])
    first, second = t.receive(q, 2)
    for message in (first, second):
        assert message.headers[h.MESSAGE_INTENT] == "Send"
        assert WIRE_TIME.match(message.headers[h.TIME_SENT])
        assert message.headers[h.ORIGINATING_ENDPOINT] and message.headers[h.ORIGINATING_MACHINE]
        uuid.UUID(message.headers[ORIGINATING_HOST_ID])
    assert first.headers[h.MESSAGE_ID] == str(ids[0]) == first.headers[h.CORRELATION_ID]
    uuid.UUID(first.headers[h.CONVERSATION_ID])
    assert (second.headers[h.MESSAGE_ID], second.headers[h.CONVERSATION_ID]) == ("mine", "c-1")  # caller wins
    assert h.REPLY_TO_ADDRESS not in first.headers  # a task has no input queue


@pytest.mark.parametrize("mode", ["sends-atomic-with-receive", "receive-only", "none"])
def test_handler_sends_continue_the_conversation_and_replies_correlate(queues, mode):
    t, q, replies = queues.transport, queues.q("orders"), queues.q("replies")
    incoming = {h.MESSAGE_ID: "in-1", h.CONVERSATION_ID: "conv-1", h.REPLY_TO_ADDRESS: t.wire_address(replies)}
    t.send(q, OutgoingMessage(b"order", incoming))

    def handler(message, context):
        context.send(replies, b"follow-up")
        context.reply(b"done", queue=replies)

    assert t.process(q, handler, mode=mode).succeeded == 1
    follow, reply = t.receive(replies, 2)
    for message in (follow, reply):
        assert message.headers[h.CONVERSATION_ID] == "conv-1"
        assert message.headers[h.CORRELATION_ID] == "in-1" and message.headers[RELATED_TO] == "in-1"
        assert message.headers[h.REPLY_TO_ADDRESS] == t.wire_address(q)
    assert (follow.headers[h.MESSAGE_INTENT], reply.headers[h.MESSAGE_INTENT]) == ("Send", "Reply")


def test_reply_goes_to_the_reply_address_only_when_allowed(queues):
    t = queues.new_transport(forward_to=[queues.q("replies")])
    q, replies = queues.q("orders"), queues.q("replies")
    t.send(q, OutgoingMessage(b"a", {h.REPLY_TO_ADDRESS: t.wire_address(replies)}))
    t.send(q, OutgoingMessage(b"b", {h.REPLY_TO_ADDRESS: t.wire_address(queues.q("elsewhere"))}))
    summary = t.process(q, lambda m, c: c.reply(b"re:" + m.body), immediate_retries=0)
    assert (summary.succeeded, summary.failed) == (1, 1)  # a header is not trusted as a destination
    assert [m.body for m in t.receive(replies, 10)] == [b"re:a"]
    t.close()


# -- canonical addresses --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("typed", "catalog", "wire"), [
    ("Sales", "nsb", "Sales@[dbo]@[nsb]"),
    ("Sales@dbo", "nsb", "Sales@[dbo]@[nsb]"),
    ("Sales@[sch]", None, "Sales@[sch]"),
    ("Sales@[s]]x]@[Other DB]", "nsb", "Sales@[s]]x]@[Other DB]"),
])
def test_sql_server_wire_addresses(typed, catalog, wire):
    dialect = MssqlDialect(default_catalog=catalog)
    assert dialect.wire_address(dialect.parse_address(typed)) == wire
    assert dialect.same_queue(dialect.parse_address(wire), dialect.parse_address(typed))


@pytest.mark.parametrize(("typed", "wire"), [
    ("Sales", '"public"."Sales"'), ("sales.orders", '"sales"."orders"'), ('"my ""q"""', '"public"."my ""q"""'),
])
def test_postgres_wire_addresses(typed, wire):
    dialect = get_dialect("postgres")
    assert dialect.wire_address(dialect.parse_address(typed)) == wire
    assert dialect.parse_address(wire) == QueueAddress(dialect.parse_address(typed).table,
                                                       dialect.parse_address(typed).schema or "public")


def test_failed_q_and_forward_destination_are_canonical_however_typed(db):
    if db.kind != "postgres":
        pytest.skip("SQLite addresses are bare table names")
    plain = f"{db.schema}.orders"  # typed without quotes
    t = db.transport
    t.create_queue(plain, delayed=True)
    t.create_queue(db.q("error"))
    t.send(plain, OutgoingMessage(b"later", delay=0.001))
    [stored] = [json.loads(r[0]) for r in db.sql(f'SELECT headers FROM "{db.schema}"."orders.Delayed"')]  # noqa: S608
    assert stored[h.FORWARD_DESTINATION] == f'"{db.schema}"."orders"'
    t.send(plain, b"fails")
    t.process(plain, lambda m, c: 1 / 0, immediate_retries=0)
    [error] = t.receive(db.q("error"))
    assert error.headers[h.FAILED_Q] == f'"{db.schema}"."orders"'


# -- delayed retries ------------------------------------------------------------------------------------------
def test_delayed_retries_keep_the_upstream_bookkeeping_then_error_queue(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, OutgoingMessage(b"flaky", {h.MESSAGE_ID: "d-1"}))
    attempts = []

    def handler(message, context):
        attempts.append(message.headers.get(h.RETRIES))
        raise TimeoutError("still down")

    for expected in ("1", "2"):
        summary = t.process(q, handler, immediate_retries=1, delayed_retries=2, delayed_retry_delay=0.001)
        assert summary.delayed == 1
        [stored] = [json.loads(r.decode()) for r in raw_headers_delayed(queues)]
        assert stored[h.RETRIES] == expected and WIRE_TIME.match(stored[h.RETRIES_TIMESTAMP])
        assert stored[h.FORWARD_DESTINATION] == t.wire_address(q)
        time.sleep(0.02)
        assert t.move_due_delayed(q) == 1
    summary = t.process(q, handler, immediate_retries=1, delayed_retries=2, delayed_retry_delay=0.001)
    assert summary.failed == 1
    assert attempts == [None, None, "1", "1", "2", "2"]  # immediate retries within each delayed round
    [error] = t.receive(queues.q("error"))
    assert error.headers[h.MESSAGE_ID] == "d-1"
    assert h.RETRIES not in error.headers and h.FORWARD_DESTINATION not in error.headers  # as core's MoveToError
    assert error.headers[h.EXCEPTION_TYPE] == "TimeoutError"


def raw_headers_delayed(db) -> list[bytes]:
    delayed = db.transport.dialect.qualified(db.transport.dialect.delayed_address(db.transport.address(db.q("orders"))))
    cast = "convert_to(headers, 'UTF8')" if db.kind == "postgres" else "CAST(headers AS BLOB)"
    return [bytes(r[0]) for r in db.sql(f"SELECT {cast} FROM {delayed}")]  # noqa: S608
