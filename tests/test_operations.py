"""Every queue operation on SQLite and on the real PostgreSQL (the `db`/`queues` fixtures run each test on both)."""

from __future__ import annotations

import ast
import re
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from airflow_sqlqueue.transport import (
    InvalidMessageError,
    OutgoingMessage,
    PermissionDeniedError,
    QueueNotFoundError,
    SqlQueueTransport,
    ddl_script,
    get_dialect,
)
from airflow_sqlqueue.transport.dialects.base import Dialect
from airflow_sqlqueue.transport.wire import headers as h
from airflow_sqlqueue.transport.wire.headers import serialize_headers
from tests.conftest import own

DOTNET_HEADERS = '{"NServiceBus.EnclosedMessageTypes":"X"}'


# -- helpers: raw SQL for assertions (identifiers quoted by the dialect, values always bound) --------------
def table(db, name: str, *, delayed: bool = False) -> str:
    dialect = db.transport.dialect
    address = db.transport.address(db.q(name))
    return dialect.qualified(dialect.delayed_address(address) if delayed else address)


def ph(db) -> str:
    """The raw-SQL placeholder of the test connection."""
    return "%s" if db.kind == "postgres" else "?"


def count(db, name: str, *, delayed: bool = False) -> int:
    return db.sql(f"SELECT count(*) FROM {table(db, name, delayed=delayed)}")[0][0]  # noqa: S608


def rows(db, name: str) -> list[tuple]:
    """(id as UUID, headers text, body bytes) in queue order."""
    found = db.sql(f"SELECT id, headers, body FROM {table(db, name)} ORDER BY seq")  # noqa: S608
    return [(uuid.UUID(str(i)), hd, None if b is None else bytes(b)) for i, hd, b in found]


def insert_native(db, name: str, headers: str, body: bytes | None, row_id: uuid.UUID | None = None) -> uuid.UUID:
    """Insert a row the way another endpoint would (plain INSERT, explicit columns)."""
    row_id = row_id or uuid.uuid4()
    p = ph(db)
    db.sql(f"INSERT INTO {table(db, name)} (id, expires, headers, body) VALUES ({p}, NULL, {p}, {p})",  # noqa: S608
           (str(row_id), headers, body))
    return row_id


# -- send and receive ------------------------------------------------------------------------------
def test_send_receive_one(queues):
    t, q = queues.transport, queues.q("orders")
    sent = t.send(q, OutgoingMessage(b"hello", {"k": "v"}))
    assert isinstance(sent, uuid.UUID)
    [message] = t.receive(q)
    assert (message.id, own(message.headers), message.body) == (sent, {"k": "v"}, b"hello")
    assert message.queue == t.name(q)
    assert t.receive(q) == []
    assert count(queues, "orders") == 0


def test_receive_batch_fifo_order(queues):
    t, q = queues.transport, queues.q("orders")
    ids = [t.send(q, f"m{i}") for i in range(7)]
    first = t.receive(q, 3)
    rest = t.receive(q, 10)
    assert [m.id for m in first + rest] == ids
    assert [m.body for m in first + rest] == [f"m{i}".encode() for i in range(7)]
    assert [m.seq for m in first + rest] == sorted(m.seq for m in first + rest)


def test_send_many_one_statement_keeps_order_and_ids(queues):
    t, q = queues.transport, queues.q("orders")
    messages = [OutgoingMessage(f"b{i}".encode(), {"i": str(i)}) for i in range(50)]
    ids = t.send_many(q, messages)
    assert len(ids) == len(set(ids)) == 50
    got = t.receive(q, 100)
    assert [m.id for m in got] == ids
    assert [own(m.headers) for m in got] == [{"i": str(i)} for i in range(50)]
    assert [m.body for m in got] == [f"b{i}".encode() for i in range(50)]


def test_send_many_uses_one_statement(queues):
    t, q = queues.transport, queues.q("orders")
    statements: list[str] = []

    def spy(cur):
        class Spy:
            def __init__(self, inner):
                self.inner = inner

            def execute(self, sql, *args):
                statements.append(sql)
                return self.inner.execute(sql, *args)

            def executemany(self, sql, *args):
                statements.append(sql)
                return self.inner.executemany(sql, *args)

            def __getattr__(self, name):
                return getattr(self.inner, name)

        return Spy(cur)

    t.run(lambda cur: t.send_many(q, [b"1", b"2", b"3"], cursor=spy(cur)))
    assert len(statements) == 1
    assert count(queues, "orders") == 3


@pytest.mark.parametrize("body", [b"", None, b"\x00\xff\xfe\x80binary\x00", "é text".encode(), bytes(range(256)),
                                  b"x" * 200_000])
def test_bodies_intact(queues, body):
    t, q = queues.transport, queues.q("orders")
    t.send(q, OutgoingMessage(body))
    [message] = t.receive(q)
    # a body of None is written as empty bytes: a NULL body stops .NET PostgreSQL receivers and ServiceControl
    assert message.body == (b"" if body is None else body)
    assert rows(queues, "orders") == []


def test_text_body_sent_as_utf8(queues):
    t, q = queues.transport, queues.q("orders")
    t.send(q, "héllo")
    [message] = t.receive(q)
    assert message.body == "héllo".encode()
    assert message.body_text() == "héllo"


def test_headers_intact(queues):
    t, q = queues.transport, queues.q("orders")
    headers = {h.MESSAGE_ID: "m-1", h.CONTENT_TYPE: "application/json", "名前": "値/ü", "empty": "", "null": None,
               "quote": 'a"b\\c', "newline": "a\nb"}
    t.send_many(q, [OutgoingMessage(b"1", headers), OutgoingMessage(b"2", {})])
    first, second = t.receive(q, 2)
    assert own(first.headers, headers) == headers
    assert first.message_id == "m-1"
    assert own(second.headers) == {}
    assert second.message_id == str(second.id)


def test_stored_row_shape_and_header_bytes(queues):
    headers = {h.ENCLOSED_MESSAGE_TYPES: "Sales.OrderPlaced", h.CONTENT_TYPE: "application/json", "ü": "é/x"}
    sent = queues.transport.send(queues.q("orders"), OutgoingMessage(b"\x01\x02", headers))
    if queues.kind == "postgres":
        columns = queues.sql(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (queues.schema, "orders"))
        assert columns == [("id", "uuid", "NO"), ("expires", "timestamp without time zone", "YES"),
                           ("headers", "text", "NO"), ("body", "bytea", "YES"), ("seq", "integer", "NO")]
        [(raw_headers, raw_id, body, expires)] = queues.sql(
            f"SELECT convert_to(headers, 'UTF8'), id, body, expires FROM {table(queues, 'orders')}")  # noqa: S608
        assert raw_id == sent
    else:
        columns = queues.sql("SELECT name, type, \"notnull\" FROM pragma_table_info('orders') ORDER BY cid")
        assert columns == [("id", "TEXT", 1), ("expires", "TEXT", 0), ("headers", "TEXT", 1), ("body", "BLOB", 0),
                           ("seq", "INTEGER", 0)]
        [(raw_headers, raw_id, body, expires)] = queues.sql(
            "SELECT CAST(headers AS BLOB), id, body, expires FROM orders")
        assert raw_id == str(sent)
    assert bytes(raw_headers) == serialize_headers(h.parse_headers(bytes(raw_headers).decode())).encode("utf-8")
    # the standard headers first, then the sender's own, byte for byte as 9.1 writes them
    assert bytes(raw_headers).startswith(b'{"NServiceBus.MessageId":"' + str(sent).encode() + b'",')
    assert bytes(raw_headers).endswith(b'"NServiceBus.EnclosedMessageTypes":"Sales.OrderPlaced",'
                                       b'"NServiceBus.ContentType":"application\\/json","\xc3\xbc":"\xc3\xa9\\/x"}')
    assert bytes(body) == b"\x01\x02"
    assert expires is None


def test_bad_message_refused_and_nothing_sent(queues):
    t, q = queues.transport, queues.q("orders")
    for bad in (OutgoingMessage(b"x", {"n": 1}), OutgoingMessage(b"x", time_to_be_received=-1),
                OutgoingMessage(b"x", delay=0), OutgoingMessage(12345)):
        with pytest.raises(InvalidMessageError):
            t.send_many(q, [b"fine", bad])
    assert count(queues, "orders") == 0


# -- time to be received ---------------------------------------------------------------------------
def test_expires_computed_by_the_database(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(b"ttbr", time_to_be_received=3600), OutgoingMessage(b"forever")])
    if queues.kind == "postgres":
        found = queues.sql(f"SELECT EXTRACT(EPOCH FROM expires - (now() AT TIME ZONE 'UTC')), expires IS NULL "  # noqa: S608
                           f"FROM {table(queues, 'orders')} ORDER BY seq")
        left = [None if is_null else float(seconds) for seconds, is_null in found]
    else:
        found = queues.sql("SELECT (julianday(expires) - julianday('now')) * 86400.0, expires FROM orders "
                           "ORDER BY seq")
        left = [None if expires is None else seconds for seconds, expires in found]
        datetime.strptime(found[0][1], "%Y-%m-%d %H:%M:%S.%f")  # UTC text in one sortable format
    assert left[1] is None
    assert 3000 < left[0] <= 3600.5
    assert [m.body for m in t.receive(q, 5)] == [b"ttbr", b"forever"]


def test_expired_rows_dropped_on_receive(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(b"old", time_to_be_received=0.001), OutgoingMessage(b"new"),
                    OutgoingMessage(b"old2", time_to_be_received=timedelta(milliseconds=1))])
    time.sleep(0.05)
    with t.receiving(q, 10) as batch:
        assert [m.body for m in batch.messages] == [b"new"]
        assert batch.stats.expired == 2
    assert count(queues, "orders") == 0
    assert count(queues, "error") == 0


def test_delay_and_ttbr_together_refused(queues):
    t, q = queues.transport, queues.q("orders")
    with pytest.raises(InvalidMessageError, match="delay and a time_to_be_received"):
        t.send(q, OutgoingMessage(b"x", delay=10, time_to_be_received=10))
    assert count(queues, "orders") == 0
    assert count(queues, "orders", delayed=True) == 0


# -- receive transactions --------------------------------------------------------------------------
def test_receiving_rolls_back_on_error(queues):
    t, q = queues.transport, queues.q("orders")
    ids = t.send_many(q, [b"1", b"2", b"3"])
    with pytest.raises(RuntimeError):
        with t.receiving(q, 2) as batch:
            assert [m.id for m in batch.messages] == ids[:2]
            raise RuntimeError("store failed")
    assert [r[0] for r in rows(queues, "orders")] == ids  # back at the head, in order
    assert [m.id for m in t.receive(q, 5)] == ids


def test_receive_argument_checks(queues):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_messages"):
            queues.transport.receive(queues.q("orders"), bad)


# -- peek ------------------------------------------------------------------------------------------
def test_peek(queues):
    t, q = queues.transport, queues.q("orders")
    assert t.peek(q) == 0
    t.send_many(q, [b"x"] * 25)
    t.send(q, b"y")
    assert t.peek(q) == 26
    t.receive(q, 26)
    assert t.peek(q) == 0


def test_peek_skips_rows_held_by_an_open_receive(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [f"m{i}".encode() for i in range(8)])
    other = queues.new_transport()
    result: dict[str, object] = {}

    def peek() -> None:
        try:
            result["depth"] = other.peek(q)
        except Exception as exc:  # noqa: BLE001
            result["error"] = exc

    try:
        with t.receiving(q, 5) as batch:
            assert len(batch.messages) == 5
            thread = threading.Thread(target=peek, daemon=True)
            thread.start()
            thread.join(timeout=30)
            assert not thread.is_alive(), "peek blocked behind an open receive"
        assert "error" not in result, result
        if queues.kind == "postgres":
            assert result["depth"] == 3  # the 5 rows held at the head are skipped
        else:
            # SQLite limitation: a reader sees the last committed snapshot, so the 5 rows the open receive
            # deleted are still counted until it commits (the alternative is a peek that waits for it)
            assert result["depth"] == 8
        assert other.peek(q) == 3
    finally:
        other.close()


def test_reads_answer_while_a_receive_is_open(queues):
    """peek, browse, exists, discover and check do not wait for the write lock of an open receive."""
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [b"a", b"b"])
    other = queues.new_transport()
    done = threading.Event()

    def reads() -> None:
        other.peek(q)
        other.browse(q)
        other.exists(q)
        other.discover()
        other.check(q)
        other.oldest_age(q)
        done.set()

    thread = threading.Thread(target=reads, daemon=True)
    try:
        with t.receiving(q, 1):
            thread.start()
            assert done.wait(20), "a read blocked behind an open receive transaction"
    finally:
        thread.join(30)
        other.close()


# -- browse and age --------------------------------------------------------------------------------
def test_browse_pages_without_taking(queues):
    t, q = queues.transport, queues.q("orders")
    ids = t.send_many(q, [OutgoingMessage(f"m{i}".encode(), {"i": str(i)}) for i in range(5)])
    first = t.browse(q, limit=2)
    rest = t.browse(q, after_seq=first[-1].seq, limit=10)
    assert [r.id for r in first + rest] == ids
    assert [r.body for r in first + rest] == [f"m{i}".encode() for i in range(5)]
    assert own(h.parse_headers(first[0].headers)) == {"i": "0"}
    assert not any(r.expired for r in first + rest)
    assert count(queues, "orders") == 5
    assert t.browse(q, after_seq=rest[-1].seq) == []


def test_oldest_age(queues):
    t, q = queues.transport, queues.q("orders")
    assert t.oldest_age(q) is None
    sent_at = datetime.now(timezone.utc) - timedelta(minutes=10)
    t.send(q, OutgoingMessage(b"old", {h.TIME_SENT: h.format_wire_time(sent_at)}))
    t.send(q, OutgoingMessage(b"new", {h.TIME_SENT: h.format_wire_time()}))
    age = t.oldest_age(q)
    assert age is not None and 590 < age < 3600
    t.receive(q, 2)
    t.send(q, OutgoingMessage(b"no time", {h.TIME_SENT: None}))  # the sender's own headers win
    assert t.oldest_age(q) is None


# -- purge -----------------------------------------------------------------------------------------
def test_purge_expired(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(f"old{i}".encode(), time_to_be_received=0.001) for i in range(5)]
                + [OutgoingMessage(b"fresh"), OutgoingMessage(b"later", time_to_be_received=3600)])
    time.sleep(0.05)
    progress: list[int] = []
    assert t.purge_expired(q, batch_size=2, progress=progress.append) == 5
    assert progress == [2, 2, 1]
    assert [r[2] for r in rows(queues, "orders")] == [b"fresh", b"later"]
    assert t.purge_expired(q) == 0


def test_purge_expired_default_batch(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(b"old", time_to_be_received=0.001)] * 30 + [OutgoingMessage(b"keep")])
    time.sleep(0.05)
    assert t.purge_expired(q) == 30
    assert count(queues, "orders") == 1
    with pytest.raises(ValueError, match="batch_size"):
        t.purge_expired(q, batch_size=0)


# -- check, repair, discover -----------------------------------------------------------------------
def test_check_fresh_queue_is_clean(queues):
    for name in ("orders", "replies", "error"):
        assert queues.transport.check(queues.q(name)) == []


def _drop_index(db, kind: str) -> None:
    dialect = db.transport.dialect
    address = db.transport.address(db.q("orders"))
    index = dialect.quote(dialect.index_name(address, kind))
    if db.kind == "postgres":
        index = dialect.quote(db.schema) + "." + index
    db.sql(f"DROP INDEX {index}")


def test_check_finds_missing_expires_index_and_repairs(queues):
    t, q = queues.transport, queues.q("orders")
    _drop_index(queues, "expires")
    findings = t.check(q)
    assert [f.code for f in findings] == ["missing_expires_index"]
    assert findings[0].repairable and findings[0].queue == t.name(q)
    assert t.check(q, repair=True) == []
    assert t.check(q) == []


def test_check_finds_missing_seq_key_on_postgres_and_repairs_it(queues):
    if queues.kind != "postgres":
        pytest.skip("on SQLite seq is the rowid (INTEGER PRIMARY KEY): there is no index to drop")
    t, q = queues.transport, queues.q("orders")
    queues.sql(f'ALTER TABLE {table(queues, "orders")} DROP CONSTRAINT "orders_seq_key"')
    _drop_index(queues, "expires")
    assert sorted(f.code for f in t.check(q)) == ["missing_expires_index", "missing_seq_unique"]
    assert t.check(q, repair=True) == []
    indexes = queues.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s ORDER BY 1",
                         (queues.schema, "orders"))
    assert indexes == [("orders_exp_ix",), ("orders_pkey",), ("orders_seq_key",)]


def test_check_missing_queue(queues):
    [finding] = queues.transport.check(queues.q("nope"))
    assert finding.code == "missing_queue"


def test_discover_lists_exactly_the_queue_tables(queues):
    unrelated = table(queues, "unrelated")
    queues.sql(f"CREATE TABLE {unrelated} (id integer, headers text, body text)")
    t = queues.transport
    found = t.discover()
    if queues.kind == "postgres":
        found = [name for name in found if t.address(name).schema == queues.schema]
    assert sorted(found) == sorted(t.name(queues.q(n)) for n in ("orders", "replies", "error"))


# -- delayed delivery ------------------------------------------------------------------------------
def test_delayed_message_moves_when_due(queues):
    t, q = queues.transport, queues.q("orders")
    headers = {h.MESSAGE_ID: "d-1", "k": "v/1"}
    assert t.send(q, OutgoingMessage(b"later", headers, delay=0.001)) is None
    assert t.send(q, OutgoingMessage(b"much later", delay=3600)) is None
    assert count(queues, "orders") == 0
    stored = queues.sql(f"SELECT headers FROM {table(queues, 'orders', delayed=True)} ORDER BY due")  # noqa: S608
    assert [h.parse_headers(s[0])[h.FORWARD_DESTINATION] for s in stored] == [t.wire_address(q)] * 2
    time.sleep(0.05)
    assert t.move_due_delayed(q) == 1
    assert count(queues, "orders", delayed=True) == 1
    [message] = t.receive(q)
    assert message.body == b"later"
    assert own(message.headers, headers) == headers
    assert h.FORWARD_DESTINATION not in message.headers
    assert t.move_due_delayed(q) == 0


def test_delayed_move_in_batches(queues):
    t, q = queues.transport, queues.q("orders")
    t.send_many(q, [OutgoingMessage(f"d{i}".encode(), delay=0.001) for i in range(7)])
    time.sleep(0.05)
    assert t.move_due_delayed(q, batch_size=3) == 7
    assert sorted(m.body for m in t.receive(q, 10)) == sorted(f"d{i}".encode() for i in range(7))


def test_delayed_message_forwarded_to_its_destination(queues):
    endpoint, destination = queues.q("orders"), queues.q("replies")
    t = queues.new_transport(forward_to=[destination])  # the endpoint forwards for replies
    t.send(destination, OutgoingMessage(b"for B", {"k": "v"}, delay=0.001), endpoint=endpoint)
    assert count(queues, "orders", delayed=True) == 1
    time.sleep(0.05)
    assert t.move_due_delayed(endpoint) == 1
    with t.receiving(endpoint, 10) as batch:
        assert batch.messages == []
        assert batch.stats.forwarded == 1
    [message] = t.receive(destination)
    assert message.body == b"for B"
    assert own(message.headers) == {"k": "v"}
    assert count(queues, "orders") == 0
    t.close()


def test_delayed_without_delayed_table_changes_nothing(queues):
    t, q = queues.transport, queues.q("replies")  # replies has no .Delayed table
    with pytest.raises(QueueNotFoundError):
        t.send_many(q, [OutgoingMessage(b"now"), OutgoingMessage(b"later", delay=5)])
    assert count(queues, "replies") == 0


# -- error queue retry -----------------------------------------------------------------------------
def test_retry_errors_returns_to_failed_queue(queues):
    t, q = queues.transport, queues.q("orders")
    original = {h.MESSAGE_ID: "r-1", "k": "v"}
    sent = t.send(q, OutgoingMessage(b"body", original))

    def fail(message, context):
        raise ValueError("nope")

    summary = t.process(q, fail, immediate_retries=0)
    assert summary.failed == 1
    t.send(queues.q("error"), OutgoingMessage(b"orphan", {h.FAILED_Q: t.name(queues.q("missing"))}))
    t.send(queues.q("error"), OutgoingMessage(b"nowhere", {"k": "no FailedQ"}))
    result = t.retry_errors(allowed=[q, queues.q("missing")])
    assert result.returned == {t.name(q): 1}
    assert sorted(item["reason"] for item in result.left) == sorted(
        [f"queue {t.name(queues.q('missing'))} does not exist", f"it has no {h.FAILED_Q} header"])
    [back] = t.receive(q)
    # as ServiceControl's retry: failure headers gone by prefix; the processing endpoint and host stay
    kept = {h.PROCESSING_ENDPOINT, h.PROCESSING_MACHINE, h.HOST_ID, h.HOST_DISPLAY_NAME}
    assert (back.id, own(back.headers, original), back.body) == (sent, {**original, **{k: back.headers[k]
                                                                                        for k in kept}}, b"body")
    assert not [k for k in back.headers if k.startswith(h.RETRY_REMOVED_PREFIXES)]
    assert sorted(r[2] for r in rows(queues, "error")) == [b"nowhere", b"orphan"]


def test_retry_errors_with_selection_and_limit(queues):
    t, q = queues.transport, queues.q("orders")
    failed_q = {h.FAILED_Q: t.name(q)}
    t.send_many(queues.q("error"), [OutgoingMessage(f"e{i}".encode(), {**failed_q, "i": str(i)}) for i in range(6)])
    result = t.retry_errors(select=lambda m: int(m.headers["i"]) % 2 == 0, max_messages=2, allowed=[q])
    assert result.total_returned == 2
    assert [m.body for m in t.receive(q, 10)] == [b"e0", b"e2"]
    assert count(queues, "error") == 4


def test_failures_grouped_by_failed_queue_and_exception_over_pages(queues):
    from airflow_sqlqueue.transport.errorqueue.groups import FailureGroups, failure_of

    t, error = queues.transport, queues.q("error")
    failed = {h.FAILED_Q: "orders", h.EXCEPTION_TYPE: "System.TimeoutException"}
    t.send_many(error, [OutgoingMessage(b"t", {**failed, h.TIME_OF_FAILURE: f"2026-01-0{i + 1} 00:00:00:000000 Z"})
                        for i in range(5)])
    t.send(error, OutgoingMessage(b"k", {h.FAILED_Q: "billing", h.EXCEPTION_TYPE: "KeyError"}))
    t.send(error, OutgoingMessage(b"n", {"k": "v"}))
    t.send(error, OutgoingMessage(b"p", {h.RAW_HEADERS: "not json", h.EXCEPTION_TYPE: "PoisonMessageError"}))
    table = t.dialect.qualified(t.address(error))
    placeholder = "?" if queues.kind == "sqlite" else "%s"
    queues.sql(f"INSERT INTO {table} (id, headers, body) VALUES ({placeholder}, '[1]', NULL)",  # noqa: S608
               (str(uuid.uuid4()),))
    groups = FailureGroups()
    rows = list(t.errors(error).rows(page=2))  # several pages
    for row in rows:
        groups.add(failure_of(row.headers))
    assert len(rows) == 9 and groups.total == 9 and count(queues, "error") == 9  # nothing taken
    assert [(g["failed_q"], g["exception_type"], g["count"]) for g in groups.ordered()] == [
        ("orders", "System.TimeoutException", 5), ("(headers not JSON)", "-", 1), ("(no FailedQ)", "-", 1),
        ("(poison)", "PoisonMessageError", 1), ("billing", "KeyError", 1)]
    timeouts = groups.ordered()[0]
    assert (timeouts["first_failure"], timeouts["last_failure"]) == (
        "2026-01-01 00:00:00:000000 Z", "2026-01-05 00:00:00:000000 Z")


# -- missing queues and schemas --------------------------------------------------------------------
def test_missing_queue_is_a_clear_error_and_changes_nothing(queues):
    t = queues.transport
    missing = queues.q("missing")
    before = {n: count(queues, n) for n in ("orders", "replies", "error")}
    operations = [
        lambda: t.send(missing, b"x"),
        lambda: t.send_many(missing, [b"x", b"y"]),
        lambda: t.receive(missing),
        lambda: t.peek(missing),
        lambda: t.purge_expired(missing),
        lambda: t.move_due_delayed(missing),
        lambda: t.browse(missing),
        lambda: t.retry_errors(error_queue=missing, allowed=[queues.q("orders")]),
    ]
    for operation in operations:
        with pytest.raises(QueueNotFoundError) as info:
            operation()
        assert "create" in str(info.value).lower()
        assert "missing" in str(info.value)
    with pytest.raises(QueueNotFoundError):
        with t.receiving(missing):
            pass
    assert not t.exists(missing)
    assert {n: count(queues, n) for n in ("orders", "replies", "error")} == before


@pytest.mark.parametrize("mode", ["none", "receive-only", "sends-atomic-with-receive", "transaction-scope"])
def test_process_on_missing_queue_is_a_clear_error(queues, mode):
    with pytest.raises(QueueNotFoundError, match="(?i)create") as info:
        queues.transport.process(queues.q("missing"), lambda m, c: None, mode=mode, concurrency=2)
    assert "missing" in str(info.value)


def test_create_on_missing_schema(db):
    if db.kind != "postgres":
        pytest.skip("schemas are a PostgreSQL feature here")
    schema = "no_such_schema_" + uuid.uuid4().hex[:8]
    with pytest.raises(QueueNotFoundError) as info:
        db.transport.create_queue(f"{schema}.orders")
    assert schema in str(info.value)
    assert "CREATE SCHEMA" in str(info.value)
    assert db.sql("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)) == [(0,)]
    with pytest.raises(QueueNotFoundError):
        db.transport.send(f"{schema}.orders", b"x")


def test_create_is_idempotent(db):
    t, q = db.transport, db.q("twice")
    t.create_queue(q, delayed=True)
    t.send(q, b"kept")
    t.create_queue(q, delayed=True)
    assert t.exists(q)
    assert [m.body for m in t.receive(q)] == [b"kept"]
    assert t.create_queues([db.q("a"), db.q("b")]) == [t.name(db.q("a")), t.name(db.q("b"))]


# -- DDL -------------------------------------------------------------------------------------------
def test_ddl_script_postgres():
    script = ddl_script("postgres", ['"sales"."orders"', '"a""b"'], delayed=True)
    assert "-- queue sales.orders" in script
    assert 'CREATE TABLE IF NOT EXISTS "sales"."orders" (' in script
    assert 'CREATE TABLE IF NOT EXISTS "sales"."orders.Delayed" (' in script
    assert "id uuid NOT NULL PRIMARY KEY" in script and "seq serial NOT NULL UNIQUE" in script
    assert 'CREATE INDEX IF NOT EXISTS "orders.Delayed_Due" ON "sales"."orders.Delayed" (due);' in script
    assert "seq_ix" not in script
    assert '"public"."a""b"' in script
    for name in ("create_queue_table", "create_queue_expires_index",
                 "create_delayed_table", "create_delayed_due_index"):
        assert f"-- {name}: " in script
    assert "Delayed" not in ddl_script("postgres", ["orders"])


def test_ddl_script_sqlite():
    script = ddl_script(get_dialect("sqlite"), ['we"ird'], delayed=True)
    assert 'CREATE TABLE IF NOT EXISTS "we""ird" (' in script
    assert 'CREATE TABLE IF NOT EXISTS "we""ird.Delayed" (' in script
    assert "seq INTEGER PRIMARY KEY AUTOINCREMENT" in script


def test_ddl_script_mssql():
    try:
        script = ddl_script("mssql", ["orders@[sales]"], delayed=True)
    except ModuleNotFoundError as exc:
        pytest.skip(f"SQL Server dialect not available: {exc}")
    sqlglot = pytest.importorskip("sqlglot")
    assert "[sales].[orders]" in script
    assert "Index_RowVersion" in script or "RowVersion" in script
    for statement in script.split(";\n"):
        if statement.strip() and not all(line.startswith("--") for line in statement.strip().splitlines()):
            sqlglot.parse(statement, read="tsql")


def test_ddl_script_runs_and_makes_a_clean_queue(db):
    t = db.transport
    q = db.q("from ddl")
    script = t.ddl([q], delayed=True)
    if db.kind == "postgres":
        db.sql(script)
    else:
        import sqlite3

        conn = sqlite3.connect(db.url[len("sqlite:///"):])
        conn.executescript(script)
        conn.close()
    assert t.check(q) == []
    t.send(q, OutgoingMessage(b"x", delay=0.001))
    time.sleep(0.02)
    assert t.move_due_delayed(q) == 1
    assert [m.body for m in t.receive(q)] == [b"x"]


# -- rows written by other endpoints ---------------------------------------------------------------
def test_dotnet_style_row_received(queues):
    t, q = queues.transport, queues.q("orders")
    target = table(queues, "orders")
    if queues.kind == "postgres":
        queues.sql(f"INSERT INTO {target} (id, expires, headers, body) VALUES "  # noqa: S608
                   f"(gen_random_uuid(), NULL, '{DOTNET_HEADERS}', convert_to('{{\"a\":1}}', 'UTF8'))")
    else:
        queues.sql(f"INSERT INTO {target} (id, expires, headers, body) VALUES "  # noqa: S608
                   f"(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || "
                   f"substr(lower(hex(randomblob(2))), 2) || '-a' || substr(lower(hex(randomblob(2))), 2) || '-' || "
                   f"lower(hex(randomblob(6))), NULL, '{DOTNET_HEADERS}', CAST('{{\"a\":1}}' AS BLOB))")
    [(native_id, _, _)] = rows(queues, "orders")
    [message] = t.receive(q)
    assert message.headers == {h.ENCLOSED_MESSAGE_TYPES: "X"}
    assert message.body == b'{"a":1}'
    assert message.id == native_id
    assert message.message_id == str(native_id)


def test_dotnet_escaped_headers_and_expires_received(queues):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders",
                           '{"NServiceBus.MessageId":"abc","NServiceBus.ContentType":"application\\/json",'
                           '"NServiceBus.ReplyToAddress":"Sales@[dbo]@[shop]","U":"\\u00e9"}', b"{}")
    [message] = t.receive(q)
    assert message.id == row_id
    assert message.message_id == "abc"
    assert message.headers[h.CONTENT_TYPE] == "application/json"
    assert message.headers["U"] == "é"
    assert message.headers[h.REPLY_TO_ADDRESS] == "Sales@[dbo]@[shop]"


@pytest.mark.parametrize("headers", [""])
def test_empty_headers_are_not_poison(queues, headers):
    row_id = insert_native(queues, "orders", headers, b"b")
    [message] = queues.transport.receive(queues.q("orders"))
    assert (message.id, message.headers, message.body) == (row_id, {}, b"b")
    assert count(queues, "error") == 0


@pytest.mark.parametrize("headers", ["not json", "[1,2]", '{"a":1}', "   ", "null", "[" * 100_000])
def test_poison_row_moved_on_receive(queues, headers):
    t, q = queues.transport, queues.q("orders")
    row_id = insert_native(queues, "orders", headers, b"\xffpoison")
    t.send(q, b"good")
    with t.receiving(q, 10) as batch:
        assert [m.body for m in batch.messages] == [b"good"]
        assert batch.stats.poison == 1
    [(error_id, error_headers, body)] = rows(queues, "error")
    assert (error_id, body) == (row_id, b"\xffpoison")
    parsed = h.parse_headers(error_headers)
    assert parsed[h.RAW_HEADERS] == headers
    assert parsed[h.FAILED_Q] == t.wire_address(q)


def test_huge_time_to_be_received_is_accepted_or_clearly_refused(queues, request):
    t, q = queues.transport, queues.q("orders")
    try:
        t.send(q, OutgoingMessage(b"forever", time_to_be_received=timedelta(days=365 * 300_000)))
    except InvalidMessageError:
        return
    assert [m.body for m in t.receive(q)] == [b"forever"]


def test_max_messages_exact_with_concurrent_receivers(queues):
    t, q = queues.transport, queues.q("orders")
    ids = t.send_many(q, [f"m{i}".encode() for i in range(100)])
    got: list[uuid.UUID] = []
    lock = threading.Lock()

    def handler(message, context):
        with lock:
            got.append(message.id)

    summary = t.process(q, handler, max_messages=37, concurrency=4, batch_size=5)
    assert summary.succeeded == len(got) == 37
    assert sorted(got + [r[0] for r in rows(queues, "orders")]) == sorted(ids)


def test_delayed_message_for_own_queue_spelled_with_default_schema(db, request):
    """ForwardDestination naming the receiving queue, spelled differently (default schema written out or not),
    is the receiving queue: the message must be delivered, not forwarded to itself (NServiceBus endpoints
    write full addresses such as ``Sales@[dbo]@[shop]``)."""
    if db.kind != "postgres":
        pytest.skip("SQLite addresses have no schema")
    name = "zz_fwd_" + uuid.uuid4().hex[:10]
    t = db.transport
    try:
        t.create_queue(name, delayed=True)
        t.send(name, OutgoingMessage(b"due", delay=0.001), endpoint=f"public.{name}")
        time.sleep(0.05)
        assert t.move_due_delayed(f"public.{name}") == 1
        with t.receiving(f"public.{name}", 10) as batch:
            assert [m.body for m in batch.messages] == [b"due"]
            assert batch.stats.forwarded == 0
    finally:
        db.sql(f'DROP TABLE IF EXISTS public."{name}", public."{name}.Delayed"')


def _pg_role_url(url: str, role: str) -> str:
    parts = urlsplit(url)
    return f"postgresql://{role}@{parts.hostname}:{parts.port or 5432}{parts.path}"


@pytest.mark.parametrize("with_update", [False, True])
def test_postgres_least_privilege(queues, with_update, request):
    if queues.kind != "postgres":
        pytest.skip("database roles: PostgreSQL")
    role = "sqlqueue_lp_" + uuid.uuid4().hex[:10]
    rights = "SELECT, INSERT, DELETE" + (", UPDATE" if with_update else "")
    schema = queues.transport.dialect.quote(queues.schema)
    queues.sql(f'CREATE ROLE "{role}" LOGIN')
    try:
        queues.sql(f'GRANT USAGE ON SCHEMA {schema} TO "{role}"')
        queues.sql(f'GRANT {rights} ON ALL TABLES IN SCHEMA {schema} TO "{role}"')
        queues.sql(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO "{role}"')
        q = queues.q("orders")
        queues.transport.send_many(q, [b"1", b"2", b"3"])
        with SqlQueueTransport.from_url(_pg_role_url(queues.url, role), error_queue=queues.q("error")) as limited:
            try:
                limited.exists(queues.q("replies"))
            except Exception as exc:  # noqa: BLE001
                pytest.skip(f"cannot log in as a new role here: {exc}")
            limited.send(q, b"4")
            if not with_update:
                # FOR UPDATE SKIP LOCKED needs UPDATE on PostgreSQL: a clear error that names the missing right
                with pytest.raises(PermissionDeniedError, match="UPDATE"):
                    limited.receive(q)
                assert count(queues, "orders") == 4
                return
            assert [m.body for m in limited.receive(q)] == [b"1"]
            assert limited.peek(q) == 3
            assert limited.process(q, lambda m, c: c.send(queues.q("replies"), m.body)).succeeded == 3
        assert count(queues, "replies") == 3
    finally:
        queues.sql(f'DROP OWNED BY "{role}"')
        queues.sql(f'DROP ROLE "{role}"')


def test_transport_from_url_and_close(db):
    with SqlQueueTransport.from_url(db.url, error_queue=db.q("error")) as t:
        t.create_queue(db.q("u"))
        t.send(db.q("u"), b"x")
    with db.new_transport() as t2:
        assert [m.body for m in t2.receive(db.q("u"))] == [b"x"]


# -- no value is ever formatted into SQL -----------------------------------------------------------
IDENTIFIER_SLOTS = {"queue", "delayed", "seq_index", "expires_index", "due_index", "savepoint", "sys", "pkey_index",
                    "table", "seq_key_index", "id_index", "index", "legacy_due_index", "notify_trigger",
                    "wake_function", "inbox_index", "groups", "state", "groups_index", "leases"}
#: Slots filled with copies of a fragment statement of the same file (its markers renamed), never with values;
#: ``group_fields`` once, verbatim, when the file is loaded (``Dialect.fragment_slots``).
FRAGMENT_SLOTS = {"rows", "seqs", "group_fields"}
CORE = Path(__file__).resolve().parent.parent / "airflow_sqlqueue" / "transport"


@pytest.mark.parametrize("dialect_name", ["postgres", "sqlite", "mssql"])
def test_statement_files_only_bind_values(dialect_name):
    dialect = get_dialect(dialect_name)
    assert dialect.statements
    for statement in dialect.statements.values():
        slots = set(re.findall(r"\{(\w+)\}", statement.text))
        assert slots <= IDENTIFIER_SLOTS | FRAGMENT_SLOTS, (statement.name, slots)
        leftover = re.sub(r"%\(\w+\)[sb]|%%", "", statement.text)
        assert "%" not in leftover, f"{statement.name}: a '%' that is not a named parameter"


def test_core_never_formats_sql_text():
    """Every execute() in the core gets a statement name or prepared text, never an f-string or a % / format()."""
    offenders = []
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("execute", "executemany", "executescript") and node.args):
                continue
            for arg in node.args[:2]:
                formatted = isinstance(arg, ast.JoinedStr) or (
                    isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod | ast.Add)) or (
                    isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format")
                if formatted:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_values_travel_as_parameters(queues, monkeypatch):
    """Run every operation with marker values and check that no marker ever appears in the SQL text sent."""
    prepared: list[tuple[str, object]] = []
    original = Dialect.prepare_statement

    def spy(self, statement, params, identifiers):
        sql, args = original(self, statement, params, identifiers)
        prepared.append((sql, args))
        return sql, args

    class Recording:
        """A cursor that records the text and values a queue's runner gives the driver."""

        def __init__(self, cursor):
            self._cursor = cursor

        def execute(self, sql, args=None):
            prepared.append((sql, args))
            return self._cursor.execute(sql) if args is None else self._cursor.execute(sql, args)

        def __getattr__(self, name):
            return getattr(self._cursor, name)

    original_runner = Dialect.runner

    def runner_spy(self, name, identifiers):
        run = original_runner(self, name, identifiers)
        return lambda cursor, params: run(Recording(cursor), params)

    monkeypatch.setattr(Dialect, "prepare_statement", spy)
    monkeypatch.setattr(Dialect, "runner", runner_spy)
    t, q = queues.transport, queues.q("orders")
    marker_header, marker_body = "hdr'); DROP TABLE x;--MARK1", b"body'); --MARK2"
    t.send_many(q, [OutgoingMessage(marker_body, {"k": marker_header}, time_to_be_received=987_654),
                    OutgoingMessage(marker_body, {"k": marker_header}, delay=876_543)])
    t.send(q, OutgoingMessage(marker_body, {"k": marker_header}, time_to_be_received=0.001))
    insert_native(queues, "orders", "MARK3 not json", b"p")
    time.sleep(0.02)
    t.peek(q)
    t.browse(q, after_seq=1357, limit=97)
    t.process(q, lambda m, c: c.send(queues.q("replies"), OutgoingMessage(m.body, {"k": marker_header})),
              batch_size=93, mode="sends-atomic-with-receive")
    t.send(q, b"fail me")
    t.process(q, lambda m, c: 1 / 0, immediate_retries=0, mode="transaction-scope")
    t.purge_expired(q, batch_size=4321)
    t.move_due_delayed(q, batch_size=87)
    t.retry_errors(allowed=[q])
    t.check(q)
    t.discover()
    assert len(prepared) > 15
    for sql, _ in prepared:
        for marker in ("MARK1", "MARK2", "MARK3", "987654", "876543", "1357", "4321", "ZeroDivisionError"):
            assert marker not in sql, sql
    flat = repr([args for _, args in prepared])
    assert "MARK1" in flat and "987654" in flat and "876543" in flat and "4321" in flat and "1357" in flat


@pytest.mark.parametrize(("dialect", "paramstyle"), [("sqlite", None), ("sqlite", "qmark"), ("postgres", None),
                                                     ("postgres", "qmark"), ("mssql", None)])
def test_a_queues_runner_gives_the_driver_what_execute_gives(dialect, paramstyle):
    """``Dialect.runner`` (a queue's statements, the text filled once) sends the same text and values as
    ``Dialect.execute``, in every paramstyle, and on SQL Server picks the same variant (through ``execute``)."""
    from airflow_sqlqueue.transport.dialects import get_dialect

    class Cursor:
        def __init__(self):
            self.sent = []

        def execute(self, sql, args=None):
            self.sent.append((sql, args))

        def fetchone(self):
            return (0, 1)  # SQL Server's column probe: a table without Recoverable (the variant differs)

    d = get_dialect(dialect, paramstyle)
    ids = d.identifiers(d.parse_address("orders%d"))
    params = {"send": {"id": "i", "headers": "{}", "body": b"b", "ttbr_ms": 5},
              "receive_batch": {"batch_size": 3}, "delete_by_seq": {"seq": 7}}
    for name, values in params.items():
        d.execute(Cursor(), name, values, **ids)  # SQL Server probes the table once; then both run one statement
        by_execute, by_runner = Cursor(), Cursor()
        d.execute(by_execute, name, values, **ids)
        d.runner(name, ids)(by_runner, values)
        assert by_runner.sent == by_execute.sent and by_runner.sent, name
