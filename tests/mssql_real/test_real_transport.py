"""The transport, maintenance and dashboard against a real SQL Server (or any TDS endpoint).

Runs only when ``SQLQUEUE_TEST_MSSQL_URL`` is set (see conftest.py). Every message is counted by identity.
Tests that depend on an engine feature are marked ``@needs(...)`` and skipped, with the reason, where it lacks.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from airflow_sqlqueue.dashboard import failed as dashboard_failed
from airflow_sqlqueue.maintenance import health
from airflow_sqlqueue.transport import OutgoingMessage, SqlQueueTransport
from airflow_sqlqueue.transport.dialects.mssql import VALUES_CHUNK, MssqlDialect
from airflow_sqlqueue.transport.errorqueue.previews import Position
from airflow_sqlqueue.transport.processing.modes import TransactionMode
from airflow_sqlqueue.transport.wire.address import QueueAddress
from tests.mssql_real.conftest import URL, connect, drop_tables, needs, new_dialect

Names = Callable[[str], str]


def _take_all(transport: SqlQueueTransport, queue: str, batch: int = 500) -> list[Any]:
    """Every message of ``queue`` in order, through claims (lock, ack, one delete): no CTE delete needed."""
    taken: list[Any] = []
    while True:
        with transport.claim(queue, batch) as claim:
            messages = list(claim.messages)
            claim.ack_all()
        if not messages:
            return taken
        taken.extend(messages)


def _messages(count: int, tag: str) -> list[OutgoingMessage]:
    return [OutgoingMessage(bytes([i % 256]) * (i % 7) or None, {"n": str(i), "tag": tag, "text": "naïve 名前"})
            for i in range(count)]


# -- send ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["server default", "values rows"])
def test_batch_send_keeps_order_bodies_and_headers(transport: SqlQueueTransport, names: Names, path: str) -> None:
    queue = names("batch")
    transport.create_queue(queue)
    if path == "values rows":  # the statements used below compatibility level 130 and on Babelfish
        assert isinstance(transport.dialect, MssqlDialect)
        transport.dialect.compatibility_level = 120
    count = 2 * VALUES_CHUNK + 7
    sent = transport.send_many(queue, _messages(count, path))
    assert len(set(sent)) == count
    assert transport.peek(queue) == count
    got = _take_all(transport, queue, batch=300)
    assert [m.id for m in got] == sent
    assert [m.headers["n"] for m in got] == [str(i) for i in range(count)]
    assert all(m.headers["text"] == "naïve 名前" for m in got)
    assert [m.body or b"" for m in got] == [bytes([i % 256]) * (i % 7) for i in range(count)]
    assert transport.peek(queue) == 0


def test_time_to_be_received_sets_expires_by_the_database_clock(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("ttbr")
    transport.create_queue(queue)
    long_lived = transport.send(queue, OutgoingMessage(b"x", {}, time_to_be_received=40 * 24 * 3600))  # > 24.8 days
    transport.send_many(queue, [OutgoingMessage(b"y", {}, time_to_be_received=0.001)] * 3)
    rows = transport.browse(queue)
    assert [r.expired for r in rows][:1] == [False]
    assert transport.purge_expired(queue) >= 0
    assert [m.id for m in _take_all(transport, queue)][:1] == [long_lived]


# -- receive ---------------------------------------------------------------------------------------------------
@needs("lock_hints")
def test_batch_receive_with_two_sessions_takes_each_message_once(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("two")
    transport.create_queue(queue)
    sent = transport.send_many(queue, _messages(30, "two"))
    first = transport.claim(queue, 10)  # holds the 10 oldest rows in an open transaction
    try:
        second = transport.claim(queue, 10)  # another pooled connection: skips the held rows
        try:
            assert {m.id for m in first.messages}.isdisjoint({m.id for m in second.messages})
            assert [m.id for m in first.messages] == sent[:10]
            assert [m.id for m in second.messages] == sent[10:20]
            second.ack_all()
            second.commit()
        finally:
            second.abandon()
        first.ack_all()
        first.commit()
    finally:
        first.abandon()
    assert [m.id for m in _take_all(transport, queue)] == sent[20:]


@needs("lock_hints", "cte_delete")
def test_concurrent_drain_delivers_every_message_exactly_once(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("drain")
    transport.create_queue(queue)
    sent = transport.send_many(queue, _messages(400, "drain"))
    stored: list[uuid.UUID] = []
    lock = threading.Lock()

    def sink(messages: list[Any]) -> int:
        with lock:
            stored.extend(m.id for m in messages)
        return len(messages)

    transport.drain(queue, sink, batch_size=25, concurrency=4)
    assert sorted(stored) == sorted(sent) and len(stored) == len(set(stored))


@pytest.mark.parametrize("mode", list(TransactionMode), ids=[m.value for m in TransactionMode])
def test_handler_pump_in_each_transaction_mode(transport: SqlQueueTransport, names: Names, server: Any,
                                               mode: TransactionMode) -> None:
    if mode is TransactionMode.NONE and server.lacks("cte_delete"):
        pytest.skip(server.lacks("cte_delete"))
    queue, replies = names("pump"), names("replies")
    transport.create_queues([queue, replies])
    sent = transport.send_many(queue, _messages(12, "pump"))
    poison = transport.send(queue, OutgoingMessage(b"fail", {"fail": "yes"}))
    handled: list[uuid.UUID] = []

    def handler(message: Any, context: Any) -> None:
        if message.headers.get("fail"):
            raise ValueError("this message always fails")
        handled.append(message.id)
        context.send(replies, OutgoingMessage(message.body, {"reply-to": str(message.id)}))

    summary = transport.process(queue, handler, mode=mode, immediate_retries=1, batch_size=5)
    assert sorted(handled) == sorted(sent) and len(handled) == len(set(handled))
    assert sorted(m.headers["reply-to"] for m in _take_all(transport, replies)) == sorted(str(i) for i in sent)
    errors = _take_all(transport, transport.error_queue.table)
    if mode is TransactionMode.NONE:
        assert summary.lost == 1 and errors == []  # at-most-once: a failing handler loses the message
    else:
        assert summary.failed == 1 and [m.id for m in errors] == [poison]
        assert "NServiceBus.ExceptionInfo.Message" in errors[0].headers
    assert transport.peek(queue) == 0


@needs("lock_hints")
def test_purge_never_waits_for_rows_a_receiver_holds(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("purge")
    transport.create_queue(queue)
    dialect = new_dialect()
    transport.send_many(queue, [OutgoingMessage(b"old", {"n": str(i)}, time_to_be_received=0.001)
                                for i in range(5)])
    holder = connect()
    dialect.configure(holder)
    try:
        held = dialect.execute(holder.cursor(), "lock_batch", {"batch_size": 2},
                               **dialect.identifiers(QueueAddress(queue))).fetchall()
        assert len(held) == 2
        result: list[Any] = []
        purger = threading.Thread(target=lambda: result.append(transport.purge_expired(queue)), daemon=True)
        purger.start()
        purger.join(120)  # a hang guard, not a timing: a purge that waited for the held rows never returns
        assert not purger.is_alive(), "purge_expired waited for rows a receiver holds"
        assert result == [3]
    finally:
        holder.rollback()
        holder.close()
    assert transport.purge_expired(queue) == 2
    assert transport.peek(queue) == 0


# -- delayed delivery ------------------------------------------------------------------------------------------
@needs("cte_delete")
def test_delayed_delivery_moves_only_due_messages(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("delayed")
    transport.create_queue(queue, delayed=True)
    transport.send_many(queue, [OutgoingMessage(b"later", {"n": "later"}, delay=3600),
                                OutgoingMessage(b"due-1", {"n": "due-1"}, delay=0.001),
                                OutgoingMessage(b"due-2", {"n": "due-2"}, delay=0.001)])
    assert transport.peek(queue) == 0
    moved = 0
    for _ in range(100):  # the database clock decides when they are due (a few ms)
        moved += transport.move_due_delayed(queue)
        if moved >= 2:
            break
    assert moved == 2
    got = _take_all(transport, queue)
    assert sorted(m.headers["n"] for m in got) == ["due-1", "due-2"]
    assert sorted(m.body for m in got) == [b"due-1", b"due-2"]
    assert len({m.id for m in got}) == 2  # each moved message gets a new native Id


# -- maintenance -----------------------------------------------------------------------------------------------
def _problems(transport: SqlQueueTransport, queue: str) -> list[Any]:
    """The check's findings that are problems (not what the engine did not let it check)."""
    return [f for f in transport.check(queue) if not f.not_checked]


@needs("filtered_index_metadata", "index_names")
def test_check_finds_missing_indexes_and_repairs_them(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("check")
    transport.create_queue(queue)
    assert _problems(transport, queue) == []
    dialect = new_dialect()
    ids = dialect.identifiers(QueueAddress(queue))
    connection = connect()
    try:  # make the table look hand-made (test setup only)
        cur = connection.cursor()
        cur.execute(f"DROP INDEX {ids['seq_index']} ON {ids['queue']}")
        cur.execute(f"DROP INDEX {ids['expires_index']} ON {ids['queue']}")
        connection.commit()
    finally:
        connection.close()
    assert {f.code for f in _problems(transport, queue)} == {"missing_seq_index", "missing_expires_index"}
    transport.check(queue, repair=True)
    assert _problems(transport, queue) == []


def test_discovery_finds_queue_tables_only(transport: SqlQueueTransport, names: Names) -> None:
    queues = [names("disc_a"), names("disc_b")]
    transport.create_queues(queues)
    other = names("not_a_queue")
    connection = connect()
    try:
        cur = connection.cursor()
        cur.execute(f"CREATE TABLE {new_dialect().qualified(QueueAddress(other))} (Id int)")  # test setup only
        connection.commit()
    finally:
        connection.close()
    found = {name.lower() for name in transport.discover()}  # the server's collation ignores case
    assert {q.lower() for q in queues} <= found
    assert other.lower() not in found


def test_peek_on_a_large_backlog(transport: SqlQueueTransport, names: Names, server: Any) -> None:
    queue = names("backlog")
    transport.create_queue(queue)
    for _ in range(10):
        transport.send_many(queue, [OutgoingMessage(b"x", {})] * 2000)
    assert transport.peek(queue) == 20_000
    if server.lacks("lock_hints") or server.lacks("cte_delete"):
        return
    claim = transport.claim(queue, 10, take=True)  # rows taken at the head, not committed: not counted
    try:
        assert transport.peek(queue) == 19_990
    finally:
        claim.abandon()
    assert transport.peek(queue) == 20_000


@needs("bracket_names")
def test_queue_names_with_brackets_percent_and_quotes(transport: SqlQueueTransport, names: Names) -> None:
    odd = [QueueAddress(f"{names('odd')} ]x"), QueueAddress(f"{names('odd')} %(id)s 100%"),
           QueueAddress(f"{names('odd')} it's \"q\" %d")]
    try:
        for address in odd:
            queue = transport.name(address)
            transport.create_queue(queue, delayed=True)
            one = transport.send(queue, OutgoingMessage(b"1", {"n": "1"}))
            many = transport.send_many(queue, [OutgoingMessage(b"2", {"n": "2"}),
                                               OutgoingMessage(b"3", {"n": "3"}, time_to_be_received=3600)])
            transport.send(queue, OutgoingMessage(b"d", {"n": "d"}, delay=3600))
            assert transport.exists(queue) and transport.peek(queue) == 3
            assert [m.id for m in _take_all(transport, queue)] == [one, *many]
            assert transport.purge_expired(queue) == 0
    finally:
        drop_tables(odd)


def _autocommit(connection: Any) -> None:
    if callable(getattr(connection, "autocommit", None)):
        connection.autocommit(True)  # pymssql: a method
    else:
        connection.autocommit = True  # pyodbc: an attribute


def test_least_privilege_login_sends_and_receives(transport: SqlQueueTransport, names: Names, server: Any) -> None:
    """A login with SELECT, INSERT and DELETE on the queue tables, and nothing else, can send and receive."""
    queue, replies = names("lp"), names("lp_replies")
    transport.create_queues([queue, replies])
    login = f"sqlqueue_lp_{uuid.uuid4().hex[:8]}"
    password = "Aa1!" + secrets.token_urlsafe(16)
    dialect = new_dialect()
    admin = connect()
    _autocommit(admin)  # CREATE LOGIN and CREATE USER outside a transaction
    cur = admin.cursor()
    try:
        try:
            cur.execute(f"CREATE LOGIN {dialect.quote(login)} WITH PASSWORD = '{password}'")  # test setup only
            cur.execute(f"CREATE USER {dialect.quote(login)} FOR LOGIN {dialect.quote(login)}")
            admin.commit()
        except Exception as exc:  # noqa: BLE001
            admin.rollback()
            pytest.skip(f"the test login needs CREATE LOGIN / CREATE USER rights: {type(exc).__name__}")
        for table in (queue, replies, transport.error_queue.table):
            cur.execute(f"GRANT SELECT, INSERT, DELETE ON {dialect.qualified(QueueAddress(table))} "
                        f"TO {dialect.quote(login)}")
        admin.commit()
        parts = urlsplit(URL or "")
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        url = urlunsplit((parts.scheme, f"{quote(login, safe='')}:{quote(password, safe='')}@{host}", parts.path,
                          parts.query, ""))
        with SqlQueueTransport.from_url(url, error_queue=transport.error_queue.table) as limited:
            sent = limited.send_many(queue, _messages(5, "lp"))
            limited.send(queue, OutgoingMessage(b"fail", {"fail": "yes"}))
            assert limited.peek(queue) == 6

            def handler(message: Any, context: Any) -> None:
                if message.headers.get("fail"):
                    raise ValueError("fails")
                context.send(replies, OutgoingMessage(b"r", {"of": str(message.id)}))

            summary = limited.process(queue, handler, mode="sends-atomic-with-receive", immediate_retries=0)
            assert summary.succeeded == 5 and summary.failed == 1
            assert sorted(m.headers["of"] for m in _take_all(limited, replies)) == sorted(str(i) for i in sent)
            assert limited.purge_expired(queue) == 0
            assert [r.id for r in limited.browse(transport.error_queue.table)] != []
    finally:
        admin.rollback()
        for statement in (f"DROP USER {dialect.quote(login)}", f"DROP LOGIN {dialect.quote(login)}"):
            try:
                cur.execute(statement)  # test cleanup only
                admin.commit()
            except Exception:  # noqa: BLE001 - never created
                admin.rollback()
        admin.close()


@needs("index_names")
def test_health_samples_are_recorded_and_read_back(transport: SqlQueueTransport, names: Names) -> None:
    queue = names("health")
    table = names("samples")
    transport.create_queue(queue)
    transport.send_many(queue, [OutgoingMessage(b"x", {"NServiceBus.TimeSent": "2020-01-01 00:00:00:000000 Z"})] * 3)
    measured = health.sample(transport, queue)
    assert measured["depth"] == 3 and measured["oldest_age_seconds"] is not None
    now = datetime.now(timezone.utc)
    old = [{**measured, "conn_id": "c1"}]
    assert health.record_samples(transport, old, table, now=now - timedelta(days=10)) == {"recorded": 1, "deleted": 0}
    result = health.record_samples(transport, [{**measured, "conn_id": "c1"}], table, retention_days=7, now=now)
    assert result == {"recorded": 1, "deleted": 1}
    samples = health.recent_samples(transport, table, "c1", queue, now - timedelta(hours=1))
    assert [s["depth"] for s in samples] == [3]
    assert abs((samples[0]["sampled_at"] - now).total_seconds()) < 1  # datetime2 round trip, not a timing


@needs("identity_columns", "bracket_names")
def test_sent_position_reads_the_identity_and_ignores_receives(transport: SqlQueueTransport, names: Names) -> None:
    """The identity's last value, for the dashboard's sent/min: None before the first send (as on the other
    databases), then the last RowVersion handed out, which receives never lower. Names needing brackets work."""
    odd = QueueAddress(f"{names('sentpos_plain')[:-len('_plain')]} ]odd")
    try:
        for queue in (names("sentpos_plain"), transport.name(odd)):
            transport.create_queue(queue)
            assert transport.sent_position(queue) is None
            transport.send_many(queue, [b"a", b"b", b"c"])
            assert transport.sent_position(queue) == 3
            assert len(_take_all(transport, queue)) == 3
            assert transport.peek(queue) == 0 and transport.sent_position(queue) == 3
            transport.send(queue, b"d")
            assert transport.sent_position(queue) == 4
    finally:
        drop_tables([odd])


def test_dashboard_statements(transport: SqlQueueTransport, names: Names) -> None:
    """What the dashboard runs: error-queue groups, retry and delete of failed messages, depth and age."""
    queue = names("dash")
    transport.create_queue(queue)
    transport.send_many(queue, [OutgoingMessage(b"a", {"NServiceBus.EnclosedMessageTypes": "Sales.A"})] * 3)

    def fail(message: Any, context: Any) -> None:
        raise RuntimeError("handler broke")

    assert transport.process(queue, fail, mode="receive-only", immediate_retries=0).failed == 3
    error_queue = transport.name(transport.error_queue)
    groups = dashboard_failed.failed_groups(transport, error_queue)
    assert groups["total"] == 3
    positions = [Position(row.seq, str(row.id)) for row in transport.browse(error_queue)]
    assert len(positions) == 3
    returned = dashboard_failed.retry_messages(transport, error_queue, positions[:2], [queue])
    assert returned == {"returned": {transport.name(queue): 2}, "total_returned": 2}
    assert dashboard_failed.delete_messages(transport, error_queue, positions[2:]) == {"deleted": 1}
    assert transport.peek(error_queue) == 0 and transport.peek(queue) == 2
    measured = health.sample(transport, queue)
    assert measured["depth"] == 2


def test_error_groups_summary_and_batched_retry_history(transport: SqlQueueTransport, names: Names) -> None:
    """The error groups summary on SQL Server: rows inserted by plain SQL (as a .NET endpoint) are caught up, a
    retry and a delete take theirs out, a delete behind its back is drift until a rebuild; a batch's messages are
    recorded by one OPENJSON INSERT ... SELECT."""
    from airflow_sqlqueue.maintenance import retry_progress

    queue = names("grp")
    transport.create_queue(queue)
    error_queue = transport.name(transport.error_queue)
    table = transport.dialect.qualified(transport.address(error_queue))
    transport.send_many(error_queue, [OutgoingMessage(b"{}", {
        "NServiceBus.FailedQ": transport.name(queue), "NServiceBus.ExceptionInfo.ExceptionType": f"E{i % 3}",
        "NServiceBus.TimeOfFailure": f"2026-11-01 10:00:{i:02d}:000000 Z"}) for i in range(12)])
    errors = transport.errors(error_queue, allowed=[queue])

    def scan() -> dict[Any, int]:
        return {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"] for g in errors.groups()}

    def summary() -> dict[Any, int]:
        groups, state = errors.summary_groups()
        assert state.behind == 0
        return {(g["failed_q"], g["exception_type"], g["message_type"]): g["count"] for g in groups}

    assert summary() == scan() and sum(scan().values()) == 12
    connection = connect()
    try:
        cur = connection.cursor()
        for _ in range(4):  # as NServiceBus.Transport.SqlServer moves a message to the error queue
            cur.execute(f"INSERT INTO {table} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, "  # noqa: S608
                        "Body) VALUES (NEWID(), NULL, NULL, 1, NULL, "
                        "N'{\"NServiceBus.FailedQ\":\"x\",\"NServiceBus.ExceptionInfo.ExceptionType\":\"Dotnet\"}', "
                        "0x7B7D)")
        connection.commit()
        assert summary() == scan() and sum(scan().values()) == 16
        page = transport.failed_page(error_queue, after_seq=0, limit=16)
        errors.retry([Position(p.seq, p.id) for p in page[:3]])
        transport.delete_positions(error_queue, [Position(p.seq, p.id) for p in page[3:5]])
        assert summary() == scan() and sum(scan().values()) == 11
        cur.execute(f"DELETE TOP (2) FROM {table}")  # noqa: S608 - behind its back
        connection.commit()
    finally:
        connection.close()
    assert errors.summary.read().drift == -2
    assert errors.summary.rebuild() == 9 and summary() == scan()

    progress = names("progress")
    names("progress_messages")  # dropped with the test
    ids = [str(uuid.uuid4()) for _ in range(3)]
    retry_progress.record(transport, "run-1", "conn", error_queue, "batch", batch=1, looked_at=3,
                          returned={transport.name(queue): 3}, user_name="alice", message_ids=ids, table=progress)
    found = retry_progress.message_retries(transport, "conn", ids[1].upper(), table=progress)
    assert [(f["run_id"], f["batch"], f["by"]) for f in found] == [("run-1", 1, "alice")]
