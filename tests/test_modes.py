"""The four transaction modes, handler success and failure, retries, the error queue and poison rows,
on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import sqlite3
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from airflow_sqlqueue.transport import (
    CrossDatabaseTransactionError,
    OutgoingMessage,
    SqlQueueError,
    TransactionMode,
)
from airflow_sqlqueue.transport.wire import headers as h
from tests.conftest import own

MODES = list(TransactionMode)
#: Modes where the delete waits for the handler: a failure puts the row back at the head of the queue.
HELD = [TransactionMode.RECEIVE_ONLY, TransactionMode.SENDS_ATOMIC_WITH_RECEIVE, TransactionMode.TRANSACTION_SCOPE]
ATOMIC = [TransactionMode.SENDS_ATOMIC_WITH_RECEIVE, TransactionMode.TRANSACTION_SCOPE]
POISON = ["not json", '["a","b"]', '{"a":1}']
FAILURE_NAMES = {h.FAILED_Q, h.TIME_OF_FAILURE, h.EXCEPTION_TYPE, h.EXCEPTION_MESSAGE, h.EXCEPTION_SOURCE,
                 h.EXCEPTION_STACK_TRACE, h.PROCESSING_ENDPOINT, h.PROCESSING_MACHINE, h.HOST_ID, h.HOST_DISPLAY_NAME}


class OrderRejected(Exception):
    """A handler's own exception type (its full name goes into the failure headers)."""


# -- helpers: raw SQL for assertions (identifiers quoted by the dialect, values bound) ----------------------
def table(db, name: str) -> str:
    return db.transport.dialect.qualified(db.transport.address(db.q(name)))


def ph(db) -> str:
    return "%s" if db.kind == "postgres" else "?"


def rows(db, name: str) -> list[tuple]:
    """(id as UUID, headers text, body bytes) in queue order."""
    found = db.sql(f"SELECT id, headers, body FROM {table(db, name)} ORDER BY seq")  # noqa: S608
    return [(uuid.UUID(str(i)), hd, None if b is None else bytes(b)) for i, hd, b in found]


def bodies(db, name: str) -> list[bytes | None]:
    return [r[2] for r in rows(db, name)]


def insert_native(db, name: str, headers: str, body: bytes | None) -> uuid.UUID:
    row_id = uuid.uuid4()
    p = ph(db)
    db.sql(f"INSERT INTO {table(db, name)} (id, expires, headers, body) VALUES ({p}, NULL, {p}, {p})",  # noqa: S608
           (str(row_id), headers, body))
    return row_id


def other_connection(db):
    if db.kind == "postgres":
        import psycopg

        return psycopg.connect(db.url)
    return sqlite3.connect(db.url[len("sqlite:///"):])


# -- success ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_success_removes_rows_and_sends_land(queues, mode):
    t, q = queues.transport, queues.q("orders")
    ids = t.send_many(q, [b"1", b"2", b"3"])
    seen = []

    def handler(message, context):
        seen.append(message.id)
        context.send(queues.q("replies"), OutgoingMessage(b"re:" + message.body, {"to": str(message.id)}))

    summary = t.process(q, handler, mode=mode.value)
    assert seen == ids
    assert (summary.received, summary.succeeded, summary.failed, summary.lost, summary.retries) == (3, 3, 0, 0, 0)
    assert rows(queues, "orders") == []
    replies = rows(queues, "replies")
    assert [r[2] for r in replies] == [b"re:1", b"re:2", b"re:3"]
    assert [h.parse_headers(r[1])["to"] for r in replies] == [str(i) for i in ids]
    assert rows(queues, "error") == []


@pytest.mark.parametrize("mode", MODES)
def test_send_many_and_delayed_send_from_a_handler(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"go")

    def handler(message, context):
        context.send_many(queues.q("replies"), [b"a", OutgoingMessage(b"b", {"x": "y"})])
        context.send(q, OutgoingMessage(b"later", delay=3600))

    assert t.process(q, handler, mode=mode, max_messages=1).succeeded == 1
    assert bodies(queues, "replies") == [b"a", b"b"]
    delayed = t.dialect.qualified(t.dialect.delayed_address(t.address(q)))
    assert queues.sql(f"SELECT count(*) FROM {delayed}")[0][0] == 1  # noqa: S608


# -- failure ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", HELD)
def test_failure_moves_message_to_error_queue_with_failure_headers(queues, mode):
    t, q = queues.transport, queues.q("orders")
    original = {h.MESSAGE_ID: "m-1", h.ENCLOSED_MESSAGE_TYPES: "Sales.PlaceOrder", "Custom": "v/1 é"}
    sent = t.send(q, OutgoingMessage(b"\x00payload\xff", original))
    before = datetime.now(timezone.utc)

    def handler(message, context):
        raise OrderRejected("boom: no stock")

    summary = t.process(q, handler, mode=mode, immediate_retries=0)
    assert (summary.received, summary.failed, summary.succeeded, summary.retries) == (1, 1, 0, 0)
    assert rows(queues, "orders") == []
    [(error_id, error_headers, error_body)] = rows(queues, "error")
    assert (error_id, error_body) == (sent, b"\x00payload\xff")
    parsed = h.parse_headers(error_headers)
    assert set(own(parsed, original)) == set(original) | FAILURE_NAMES
    assert {k: parsed[k] for k in original} == original
    assert parsed[h.FAILED_Q] == t.wire_address(q)
    failed_at = h.parse_wire_time(parsed[h.TIME_OF_FAILURE])
    assert before - timedelta(seconds=1) <= failed_at <= datetime.now(timezone.utc) + timedelta(seconds=1)
    assert parsed[h.EXCEPTION_TYPE] == f"{__name__}.OrderRejected"
    assert parsed[h.EXCEPTION_MESSAGE] == "boom: no stock"
    assert parsed[h.EXCEPTION_SOURCE] == __name__
    assert "OrderRejected: boom: no stock" in parsed[h.EXCEPTION_STACK_TRACE]
    assert "in handler" in parsed[h.EXCEPTION_STACK_TRACE]


@pytest.mark.parametrize("mode", HELD)
def test_builtin_exception_type_name(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"x")
    t.process(q, lambda m, c: {}["missing key"], mode=mode, immediate_retries=0)
    [(_, error_headers, _)] = rows(queues, "error")
    assert h.parse_headers(error_headers)[h.EXCEPTION_TYPE] == "KeyError"


@pytest.mark.parametrize("mode", HELD)
def test_failing_message_back_at_head_then_error_queue_after_retries(queues, mode):
    t, q = queues.transport, queues.q("orders")
    a, b, c = t.send_many(q, [b"A", b"B", b"C"])
    attempts: list[tuple[uuid.UUID, int]] = []
    head_seen: list[uuid.UUID] = []

    def handler(message, context):
        attempts.append((message.id, message.seq))
        # what another session sees: the row is still in the table, at the head, between attempts
        head_seen.append(uuid.UUID(str(queues.sql(f"SELECT id FROM {table(queues, 'orders')} "  # noqa: S608
                                                  "ORDER BY seq LIMIT 1")[0][0])))
        raise RuntimeError("always fails")

    summary = t.process(q, handler, mode=mode, immediate_retries=2, max_messages=1)
    assert [i for i, _ in attempts] == [a, a, a]  # re-taken from the head each time, before B and C
    assert len({seq for _, seq in attempts}) == 1  # the same row, never re-sent to the tail
    assert head_seen == [a, a, a]
    assert (summary.received, summary.retries, summary.failed, summary.succeeded) == (1, 2, 1, 0)
    assert summary.deliveries == 3  # received counts messages; the same message taken 3 times is 3 deliveries
    assert [r[0] for r in rows(queues, "orders")] == [b, c]
    assert [r[0] for r in rows(queues, "error")] == [a]


@pytest.mark.parametrize("mode", HELD)
def test_a_released_message_stays_exactly_as_it_was(queues, mode):
    """A message whose handler failed (an immediate retry) stays in the queue as it was: same Id, position,
    Expires, Headers text and Body, byte for byte (what another receiver, a .NET endpoint or ServicePulse, reads),
    and is handled again before the row behind it."""
    t, q = queues.transport, queues.q("orders")
    p = ph(queues)
    expires = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=123000) + timedelta(hours=1)
    stored_expires = expires if queues.kind == "postgres" else expires.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    headers_text = r'{"NServiceBus.MessageId":"not-a-guid","Zo\u00eb":"\u2028 \\ \"x\"","Order":"1"}'
    first = uuid.uuid4()
    queues.sql(f"INSERT INTO {table(queues, 'orders')} (id, expires, headers, body) "  # noqa: S608
               f"VALUES ({p}, {p}, {p}, {p})", (str(first), stored_expires, headers_text, b"\x00\xff body"))
    second = t.send(q, b"behind")

    def snapshot() -> list[tuple]:
        found = queues.sql(f"SELECT id, seq, expires, headers, body FROM {table(queues, 'orders')} "  # noqa: S608
                           "ORDER BY seq")
        return [(str(i), int(s), e, hd, bytes(b)) for i, s, e, hd, b in found]

    before = snapshot()
    seen: list[tuple[uuid.UUID, dict, bytes]] = []
    during_second_attempt: list[list[tuple]] = []

    def handler(message, context):
        seen.append((message.id, message.headers, message.body))
        if len(seen) == 1:
            raise RuntimeError("transient")
        if len(seen) == 2:
            during_second_attempt.append(snapshot())  # what the first batch committed: the row as it was

    summary = t.process(q, handler, mode=mode, immediate_retries=1, batch_size=1)
    assert during_second_attempt == [before]
    assert [i for i, _, _ in seen] == [first, first, second]
    assert seen[0][1:] == seen[1][1:] == ({"NServiceBus.MessageId": "not-a-guid", "Zoë": "\u2028 \\ \"x\"",
                                          "Order": "1"}, b"\x00\xff body")
    assert (summary.succeeded, summary.retries, summary.failed) == (2, 1, 0)
    assert rows(queues, "orders") == [] and rows(queues, "error") == []


@pytest.mark.parametrize("mode", HELD)
def test_failure_then_success_on_retry(queues, mode):
    t, q = queues.transport, queues.q("orders")
    a, b = t.send_many(q, [b"A", b"B"])
    calls: list[uuid.UUID] = []

    def handler(message, context):
        calls.append(message.id)
        if len(calls) == 1:
            raise RuntimeError("transient")

    summary = t.process(q, handler, mode=mode, immediate_retries=2, max_messages=1)
    assert calls == [a, a]
    assert (summary.succeeded, summary.retries, summary.failed) == (1, 1, 0)
    assert [r[0] for r in rows(queues, "orders")] == [b]
    assert rows(queues, "error") == []


@pytest.mark.parametrize("mode", HELD)
def test_failures_in_a_batch_do_not_block_the_others(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"ok1", b"bad", b"ok2", b"ok3"])
    handled = []

    def handler(message, context):
        if message.body == b"bad":
            raise ValueError("bad")
        handled.append(message.body)

    summary = t.process(q, handler, mode=mode, immediate_retries=1, batch_size=10)
    assert handled == [b"ok1", b"ok2", b"ok3"]
    assert (summary.succeeded, summary.failed, summary.retries) == (3, 1, 1)
    assert bodies(queues, "error") == [b"bad"]
    assert rows(queues, "orders") == []


def test_none_mode_failure_loses_the_message(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"lost", b"kept"])
    handled = []

    def handler(message, context):
        if message.body == b"lost":
            raise RuntimeError("at most once")
        handled.append(message.body)

    summary = t.process(q, handler, mode=TransactionMode.NONE, immediate_retries=5)
    assert (summary.lost, summary.succeeded, summary.failed, summary.retries) == (1, 1, 0, 0)
    assert handled == [b"kept"]
    assert rows(queues, "orders") == []
    assert rows(queues, "error") == []


def test_a_lost_message_is_logged_with_its_row_text_escaped(queues, caplog):
    """The handler's exception text may quote the row (a body with terminal escapes): the log shows it escaped,
    with the traceback, and never the raw control characters."""
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"\x1b]0;owned\x07")

    def handler(message, context):
        raise ValueError(f"cannot parse {message.body.decode()}")

    with caplog.at_level("ERROR", logger="airflow_sqlqueue.transport.processing.strategies"):
        assert t.process(q, handler, mode=TransactionMode.NONE).lost == 1
    [record] = [r for r in caplog.records if "message is lost" in r.getMessage()]
    text = record.getMessage()
    assert "\\x1b]0;owned\\x07" in text and "\x1b" not in text and "\x07" not in text
    assert "Traceback" in text and "ValueError" in text


def test_none_mode_delete_commits_before_the_handler(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"x")
    during: list[int] = []
    t.process(q, lambda m, c: during.append(len(rows(queues, "orders"))), mode="none")
    assert during == [0]


# -- sends of failing handlers ---------------------------------------------------------------------
def test_receive_only_ghost_send_lands(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"x")

    def handler(message, context):
        context.send(queues.q("replies"), b"ghost")
        raise RuntimeError("after the send")

    summary = t.process(q, handler, mode=TransactionMode.RECEIVE_ONLY, immediate_retries=1)
    assert summary.failed == 1
    assert bodies(queues, "replies") == [b"ghost", b"ghost"]  # one per attempt
    assert bodies(queues, "error") == [b"x"]


@pytest.mark.parametrize("mode", ATOMIC)
def test_atomic_sends_of_failing_handler_never_land(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"bad", b"good"])

    def handler(message, context):
        context.send(queues.q("replies"), b"from " + message.body)
        context.send_many(queues.q("orders"), [b"echo " + message.body])
        if message.body == b"bad":
            raise RuntimeError("undo my sends")

    summary = t.process(q, handler, mode=mode, immediate_retries=2, max_messages=2)
    assert (summary.failed, summary.succeeded, summary.retries) == (1, 1, 2)
    assert bodies(queues, "replies") == [b"from good"]
    assert bodies(queues, "orders") == [b"echo good"]
    assert bodies(queues, "error") == [b"bad"]


@pytest.mark.parametrize("mode", HELD)
def test_send_to_missing_queue_fails_only_that_message(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"to missing", b"fine"])

    def handler(message, context):
        if message.body == b"to missing":
            context.send(queues.q("missing"), b"x")

    summary = t.process(q, handler, mode=mode, immediate_retries=0)
    assert (summary.failed, summary.succeeded) == (1, 1)
    assert bodies(queues, "error") == [b"to missing"]
    assert rows(queues, "orders") == []


@pytest.mark.parametrize("mode", HELD)
def test_delayed_send_without_delayed_table_fails_only_that_message(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"delay to replies", b"fine"])

    def handler(message, context):
        if message.body != b"fine":
            context.send(queues.q("replies"), OutgoingMessage(b"x", delay=60))  # replies has no .Delayed table
        context.send(queues.q("replies"), b"reply to " + message.body)

    summary = t.process(q, handler, mode=mode, immediate_retries=0)
    assert (summary.failed, summary.succeeded) == (1, 1)
    assert bodies(queues, "error") == [b"delay to replies"]
    assert bodies(queues, "replies") == [b"reply to fine"]


@pytest.mark.parametrize("mode", HELD)
def test_ttbr_of_a_send_counts_from_the_send_not_from_the_receive(queues, mode, request):
    """Expires = the database's now at the send + TTBR, even when the send shares a long receive transaction."""
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"slow")

    def handler(message, context):
        time.sleep(0.6)
        context.send(queues.q("replies"), OutgoingMessage(b"reply", time_to_be_received=0.5))

    assert t.process(q, handler, mode=mode).succeeded == 1
    assert [m.body for m in t.receive(queues.q("replies"))] == [b"reply"]


# -- TRANSACTION_SCOPE: the handler's own SQL joins the receive ------------------------------------
def test_transaction_scope_handler_sql_commits_and_rolls_back(queues):
    t, q = queues.transport, queues.q("orders")
    audit = table(queues, "audit")
    queues.sql(f"CREATE TABLE {audit} (v text)")
    insert = f"INSERT INTO {audit} (v) VALUES ({ph(queues)})"  # noqa: S608
    t.send_many(q, [b"ok-cursor", b"bad-cursor", b"ok-connection", b"bad-connection"])

    def handler(message, context):
        text = message.body.decode()
        if text.endswith("cursor"):
            context.cursor.execute(insert, (text,))
        else:
            cursor = context.connection.cursor()
            cursor.execute(insert, (text,))
            cursor.close()
        context.send(queues.q("replies"), message.body)
        if text.startswith("bad"):
            raise RuntimeError("roll my SQL back")

    summary = t.process(q, handler, mode=TransactionMode.TRANSACTION_SCOPE, immediate_retries=0)
    assert (summary.succeeded, summary.failed) == (2, 2)
    assert sorted(v for (v,) in queues.sql(f"SELECT v FROM {audit}")) == ["ok-connection", "ok-cursor"]  # noqa: S608
    assert sorted(bodies(queues, "replies")) == [b"ok-connection", b"ok-cursor"]
    assert sorted(bodies(queues, "error")) == [b"bad-connection", b"bad-cursor"]


def test_transaction_scope_failing_sql_in_handler_is_undone(queues):
    """A statement error inside the handler (which aborts a PostgreSQL transaction) fails only its message."""
    t, q = queues.transport, queues.q("orders")
    audit = table(queues, "audit")
    queues.sql(f"CREATE TABLE {audit} (v text NOT NULL)")
    insert = f"INSERT INTO {audit} (v) VALUES ({ph(queues)})"  # noqa: S608
    t.send_many(q, [b"first", b"null", b"last"])

    def handler(message, context):
        context.cursor.execute(insert, ("before " + message.body.decode(),))
        context.cursor.execute(insert, (None if message.body == b"null" else message.body.decode(),))

    summary = t.process(q, handler, mode="transaction-scope", immediate_retries=0)
    assert (summary.succeeded, summary.failed) == (2, 1)
    assert sorted(v for (v,) in queues.sql(f"SELECT v FROM {audit}")) == [  # noqa: S608
        "before first", "before last", "first", "last"]
    assert bodies(queues, "error") == [b"null"]


@pytest.mark.parametrize("mode", [m for m in MODES if m is not TransactionMode.TRANSACTION_SCOPE])
def test_connection_outside_transaction_scope_is_refused(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"x")
    errors: dict[str, Exception] = {}

    def handler(message, context):
        for what in ("connection", "cursor", "enlist"):
            try:
                context.enlist(object()) if what == "enlist" else getattr(context, what)
            except SqlQueueError as exc:
                errors[what] = exc

    assert t.process(q, handler, mode=mode).succeeded == 1
    assert set(errors) == {"connection", "cursor", "enlist"}
    for what, exc in errors.items():
        assert not isinstance(exc, CrossDatabaseTransactionError)
        assert f"context.{what}" in str(exc)
        assert "TRANSACTION_SCOPE" in str(exc) and "transaction-scope" in str(exc)


def test_enlisting_another_connection_is_refused(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"x")
    other = other_connection(queues)
    seen: dict[str, object] = {}

    def handler(message, context):
        try:
            context.enlist(other)
        except CrossDatabaseTransactionError as exc:
            seen["error"] = exc
        seen["same"] = context.enlist(context.connection) is context.connection

    try:
        assert t.process(q, handler, mode=TransactionMode.TRANSACTION_SCOPE).succeeded == 1
    finally:
        other.close()
    assert seen["same"] is True
    assert "distributed transaction" in str(seen["error"])


# -- expired, forwarded, poison --------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_expired_rows_dropped_by_the_pump(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(b"old", time_to_be_received=0.001), OutgoingMessage(b"new")])
    time.sleep(0.05)
    handled = []
    summary = t.process(q, lambda m, c: handled.append(m.body), mode=mode)
    assert handled == [b"new"]
    assert (summary.expired, summary.succeeded, summary.received) == (1, 1, 2)
    assert rows(queues, "orders") == [] and rows(queues, "error") == []


@pytest.mark.parametrize("mode", MODES)
def test_poison_rows_moved_intact_and_queue_keeps_flowing(queues, mode):
    t, q = queues.transport, queues.q("orders")
    t.send(q, b"good1")
    poison_ids = [insert_native(queues, "orders", text, f"poison {i}".encode() + b"\xff") for i, text in
                  enumerate(POISON)]
    t.send(q, b"good2")
    handled = []
    summary = t.process(q, lambda m, c: handled.append(m.body), mode=mode, immediate_retries=0)
    assert handled == [b"good1", b"good2"]
    assert (summary.poison, summary.succeeded, summary.failed, summary.lost) == (3, 2, 0, 0)
    assert rows(queues, "orders") == []
    moved = rows(queues, "error")
    assert [r[0] for r in moved] == poison_ids
    assert [r[2] for r in moved] == [f"poison {i}".encode() + b"\xff" for i in range(3)]
    for (_, error_headers, _), text in zip(moved, POISON, strict=True):
        parsed = h.parse_headers(error_headers)
        assert parsed[h.RAW_HEADERS] == text
        assert parsed[h.FAILED_Q] == t.wire_address(q)
        assert set(parsed) == FAILURE_NAMES | {h.RAW_HEADERS, h.MESSAGE_ID}
        assert parsed[h.EXCEPTION_TYPE].endswith("PoisonMessageError")
        assert parsed[h.EXCEPTION_MESSAGE]


def test_poison_row_returns_with_its_original_headers_text(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders", "not json", b"p")
    t.process(q, lambda m, c: None)
    assert t.retry_errors(allowed=[q]).total_returned == 1
    assert rows(queues, "orders") == [(row_id, "not json", b"p")]


@pytest.mark.parametrize("mode", MODES)
def test_empty_headers_are_not_poison(queues, mode):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders", "", b"plain")
    got = []
    summary = t.process(q, lambda m, c: got.append((m.id, m.headers, m.body, m.message_id)), mode=mode)
    assert got == [(row_id, {}, b"plain", str(row_id))]
    assert summary.poison == 0 and rows(queues, "error") == []


@pytest.mark.parametrize("mode", MODES)
def test_delayed_message_forwarded_by_the_pump(queues, mode):
    t = queues.new_transport(forward_to=[queues.q("replies")])  # the endpoint forwards for replies
    t.send(queues.q("replies"), OutgoingMessage(b"fwd", delay=0.001), endpoint=queues.q("orders"))
    time.sleep(0.05)
    assert t.move_due_delayed(queues.q("orders")) == 1
    summary = t.process(queues.q("orders"), lambda m, c: pytest.fail("must be forwarded"), mode=mode)
    assert summary.forwarded == 1
    [(_, headers, body)] = rows(queues, "replies")
    assert body == b"fwd" and h.FORWARD_DESTINATION not in h.parse_headers(headers)
    t.close()


# -- arguments -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "mode"), [
    ("none", TransactionMode.NONE), ("NONE", TransactionMode.NONE),
    ("ReceiveOnly", TransactionMode.RECEIVE_ONLY), ("receive_only", TransactionMode.RECEIVE_ONLY),
    ("SENDS_ATOMIC_WITH_RECEIVE", TransactionMode.SENDS_ATOMIC_WITH_RECEIVE),
    ("sends-atomic-with-receive", TransactionMode.SENDS_ATOMIC_WITH_RECEIVE),
    ("TransactionScope", TransactionMode.TRANSACTION_SCOPE),
    (TransactionMode.TRANSACTION_SCOPE, TransactionMode.TRANSACTION_SCOPE),
])
def test_mode_parse(text, mode):
    assert TransactionMode.parse(text) is mode


def test_mode_parse_refuses_unknown():
    with pytest.raises(ValueError, match="receive-only"):
        TransactionMode.parse("exactly-once")


def test_process_argument_checks(queues):
    t, q = queues.transport, queues.q("orders")
    for kwargs in ({"batch_size": 0}, {"concurrency": 0}, {"immediate_retries": -1}, {"mode": "bogus"}):
        with pytest.raises(ValueError):
            t.process(q, lambda m, c: None, **kwargs)


class _Deadlock(Exception):
    """What the database raises for a deadlock (SQLite: "database is locked"; PostgreSQL: SQLSTATE 40P01)."""

    sqlstate = "40P01"

    def __init__(self) -> None:
        super().__init__("database is locked (deadlock detected)")


@pytest.mark.parametrize("mode", HELD)
def test_a_batch_rolled_back_and_taken_again_counts_its_messages_once(queues, mode, monkeypatch):
    """A deadlock in the middle of a batch rolls it back; the loop takes the same rows again. Each message counts
    once as received; the run keeps no position of a message that left the queue."""
    t, q = queues.transport, queues.q("orders")
    if queues.kind == "sqlite":
        import sqlite3 as driver

        deadlock: Exception = driver.OperationalError("database is locked")
    else:
        deadlock = _Deadlock()
    ids = t.send_many(q, [b"A", b"B", b"C"])
    handled: list[uuid.UUID] = []

    def handler(message, context):
        handled.append(message.id)
        if len(handled) == 2:
            raise deadlock  # the database's failure, not the handler's: the whole batch is taken again

    strategies = []
    from airflow_sqlqueue.transport.operations import pump

    real = pump.strategy_for
    monkeypatch.setattr(pump, "strategy_for", lambda *a, **k: strategies.append(real(*a, **k)) or strategies[-1])
    summary = t.process(q, handler, mode=mode, batch_size=10)
    assert handled == [ids[0], ids[1], ids[0], ids[1], ids[2]]
    # the rolled-back batch's counts are dropped (counts are kept once a batch commits): 3 received, 3 deliveries
    assert (summary.received, summary.deliveries, summary.succeeded, summary.failed) == (3, 3, 3, 0)
    assert rows(queues, "orders") == []
    assert strategies and strategies[0]._returned == set()  # nothing kept for messages that left
