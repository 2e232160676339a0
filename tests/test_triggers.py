"""SqlQueueTrigger, SqlQueueMessageTrigger (ack mode) and the common.messaging plug-in, on SQLite and PostgreSQL.

Triggers are driven with asyncio in plain pytest; connections come from ``AIRFLOW_CONN_<ID>`` variables.
"""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome, SharedStreamManager

from airflow_sqlqueue.transport import OutgoingMessage
from airflow_sqlqueue.triggers import sqlqueue
from airflow_sqlqueue.triggers.sqlqueue import (
    SqlQueueMessageTrigger,
    SqlQueueStreamProducer,
    SqlQueueTrigger,
    UnsafeTriggerConfigurationError,
    event_messages,
    message_payload,
)
from tests.conftest import Db

ACKED = AdvanceOutcome(acked=1, failed=0)
FAILED = AdvanceOutcome(acked=0, failed=1)
REJECTED = AdvanceOutcome(acked=0, failed=0, rejected=1)


def airflow_conn(db: Db, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> str:
    """Register the test database as an Airflow connection (env var, JSON form); return its id."""
    conn_id = "sqtest_" + uuid.uuid4().hex[:10]
    if db.kind == "sqlite":
        fields: dict[str, Any] = {"conn_type": "sqlite", "host": db.url[len("sqlite:///"):]}
    else:
        fields = tests.airflow_env.pg_connection_fields()
    fields.update(overrides)
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps(fields))
    return conn_id


def count(db: Db, table: str) -> int:
    """Rows in a table, counted from a separate connection (ignores row locks; a reader on SQLite/WAL)."""
    return db.sql(f"SELECT count(*) FROM {db.q(table) if db.schema else chr(34) + table + chr(34)}")[0][0]  # noqa: S608


def leased(db: Db, table: str) -> int:
    """Rows of a queue held in the lease table (SQLite's event trigger moves an emitted batch there)."""
    if db.kind != "sqlite" or not db.sql("SELECT 1 FROM sqlite_master WHERE name = 'SqlQueueLeases'"):
        return 0
    return db.sql('SELECT count(*) FROM "SqlQueueLeases" WHERE QueueName = ?',
                  (db.transport.name(db.q(table)),))[0][0]


def pending(db: Db, table: str) -> int:
    """Rows not deleted yet: in the queue, or leased by a trigger whose event is not stored."""
    return count(db, table) + leased(db, table)


def send(db: Db, n: int, queue: str = "orders", prefix: str = "m") -> list[str]:
    ids = db.transport.send_many(db.q(queue), [OutgoingMessage(body=f"{prefix}{i}", headers={"n": str(i)})
                                               for i in range(n)])
    return [str(i) for i in ids]


def run(coro: Any, timeout: float = 20) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def producer_for(db: Db, conn_id: str, **kwargs: Any) -> SqlQueueStreamProducer:
    trigger = SqlQueueMessageTrigger(conn_id=conn_id, queue_name=db.q("orders"), error_queue=db.q("error"),
                                     poll_interval=0.1, **kwargs)
    return SqlQueueMessageTrigger.create_shared_stream_producer(trigger.serialize()[1])


# -- SqlQueueTrigger -----------------------------------------------------------------------------------
def test_depth_trigger_fires_at_n_and_not_before(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = airflow_conn(queues, monkeypatch)
    send(queues, 2)
    trigger = SqlQueueTrigger(conn_id=conn_id, queue=queues.q("orders"), min_messages=3, poll_interval=0.1)

    async def scenario() -> Any:
        events = trigger.run()
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.6)
        assert not first.done(), "fired with 2 of 3 messages"
        await asyncio.to_thread(send, queues, 1)
        event = await asyncio.wait_for(first, 10)
        await events.aclose()
        return event

    event = run(scenario())
    assert event.payload == {"status": "success", "queue": queues.q("orders"), "depth": 3}
    assert count(queues, "orders") == 3  # peeking takes nothing


def test_depth_trigger_fires_at_once_when_already_deep(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    send(queues, 5)
    trigger = SqlQueueTrigger(conn_id=airflow_conn(queues, monkeypatch), queue=queues.q("orders"), min_messages=5)

    async def first() -> Any:
        return await anext(trigger.run())

    assert run(first()).payload["depth"] == 5


def test_depth_trigger_missing_queue_is_an_error_event(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    trigger = SqlQueueTrigger(conn_id=airflow_conn(queues, monkeypatch), queue=queues.q("nope"), poll_interval=0.1)

    async def first() -> Any:
        return await anext(trigger.run())

    payload = run(first()).payload
    assert payload["status"] == "error"
    assert "nope" in payload["message"] and "QueueNotFoundError" in payload["message"]


def test_depth_trigger_error_hides_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = "sqtest_" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps(
        {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "postgres",
         "password": "s3cret-Pw", "schema": "test"}))
    trigger = SqlQueueTrigger(conn_id=conn_id, queue="orders", poll_interval=0.1)

    async def first() -> Any:
        return await anext(trigger.run())

    payload = run(first()).payload
    assert payload["status"] == "error" and conn_id in payload["message"]
    assert "s3cret-Pw" not in json.dumps(payload)


def test_depth_trigger_wrong_connection_type(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = "sqtest_" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("AIRFLOW_CONN_" + conn_id.upper(), json.dumps({"conn_type": "http", "host": "x"}))

    async def first() -> Any:
        return await anext(SqlQueueTrigger(conn_id=conn_id, queue="orders").run())

    payload = run(first()).payload
    assert payload["status"] == "error" and "'http'" in payload["message"]


def test_depth_trigger_serializes_and_validates(caplog: pytest.LogCaptureFixture) -> None:
    trigger = SqlQueueTrigger(conn_id="c", queue="orders", min_messages=4, poll_interval=0.5)
    path, kwargs = trigger.serialize()
    assert path == "airflow_sqlqueue.triggers.sqlqueue.SqlQueueTrigger"
    assert SqlQueueTrigger(**kwargs).serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="0.1"):
        SqlQueueTrigger(conn_id="c", queue="orders", poll_interval=0.05)
    with pytest.raises(ValueError, match="min_messages"):
        SqlQueueTrigger(conn_id="c", queue="orders", min_messages=0)
    with caplog.at_level(logging.WARNING):
        SqlQueueTrigger(conn_id="c", queue="orders", poll_interval=30)
    assert "over 10" in caplog.text


# -- SqlQueueMessageTrigger: the ack-mode producer -----------------------------------------------------------
def test_one_event_per_claimed_batch_deleted_only_after_advance(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 3)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch))

    async def scenario() -> None:
        stream = producer.open_stream()
        event, number = await anext(stream)
        assert event["count"] == 3 and [m["id"] for m in event["messages"]] == sent
        assert [m["body"] for m in event["messages"]] == ["m0", "m1", "m2"]
        assert event["messages"][1]["headers"]["n"] == "1"
        assert event["queue"] == event["messages"][0]["queue"] == queues.transport.name(queues.q("orders"))
        seqs = [m["seq"] for m in event["messages"]]
        assert seqs == sorted(seqs) and (event["first_seq"], event["last_seq"]) == (seqs[0], seqs[-1])
        json.dumps(event)  # the payload is JSON-serialisable
        assert await asyncio.to_thread(pending, queues, "orders") == 3  # nothing deleted before advance
        await producer.advance([AdvanceItem(number, ACKED)])
        assert await asyncio.to_thread(pending, queues, "orders") == 0
        await stream.aclose()
        await producer.aclose()

    run(scenario())


def test_failed_event_returns_its_messages_and_they_come_again(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 3)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch))

    async def scenario() -> None:
        stream = producer.open_stream()
        _, number = await anext(stream)
        await producer.advance([AdvanceItem(number, FAILED)])
        assert await asyncio.to_thread(count, queues, "orders") == 3
        again, number = await anext(stream)
        assert [m["id"] for m in again["messages"]] == sent  # the same Ids
        await producer.advance([AdvanceItem(number, AdvanceOutcome(acked=0, failed=0))])  # no subscriber
        assert await asyncio.to_thread(count, queues, "orders") == 3
        await stream.aclose()
        await producer.aclose()

    run(scenario())
    assert count(queues, "orders") == 3  # closing the stream returned the claimed rows


def test_rejected_event_goes_to_the_error_queue(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 2)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch))

    async def scenario() -> None:
        stream = producer.open_stream()
        _, number = await anext(stream)
        await producer.advance([AdvanceItem(number, REJECTED)])
        await stream.aclose()
        await producer.aclose()

    run(scenario())
    assert count(queues, "orders") == 0
    rows = queues.transport.browse(queues.q("error"))
    assert sorted(str(r.id) for r in rows) == sorted(sent) and json.loads(rows[0].headers)["NServiceBus.FailedQ"]


def test_the_filter_sends_refused_messages_to_the_error_queue_with_the_reason(queues: Db,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """message_types and match_headers per watcher: refused messages leave for the error queue with failure headers
    naming the reason; accepted ones are emitted; every message counted once, in one place."""
    t, q = queues.transport, queues.q
    kinds = {"a": ("Shop.OrderPlaced, Shop.Messages, Version=1.0.0.0", "eu"),
             "b": ("Shop.OrderCancelled", "eu"), "c": ("Shop.OrderPlaced;Shop.IOrderEvent", "us"), "d": (None, "eu")}
    ids = {}
    for key, (kind, region) in kinds.items():
        headers = {"Region": region, **({"NServiceBus.EnclosedMessageTypes": kind} if kind else {})}
        ids[key] = str(t.send(q("orders"), OutgoingMessage(body=key, headers=headers)))
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), message_types=["Shop.OrderPlaced"],
                            match_headers={"Region": "eu"})

    async def scenario() -> list[str]:
        stream = producer.open_stream()
        event, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return [m["id"] for m in event["messages"]]

    assert run(scenario()) == [ids["a"]]
    assert count(queues, "orders") == 0
    errors = {str(r.id): json.loads(r.headers) for r in t.browse(q("error"))}
    assert sorted(errors) == sorted([ids["b"], ids["c"], ids["d"]])
    reasons = {k: errors[ids[k]]["NServiceBus.ExceptionInfo.Data.Reason"] for k in "bcd"}
    assert "message type Shop.OrderCancelled is not one of the watcher's message_types" in reasons["b"]
    assert reasons["c"] == "header 'Region' is 'us', the watcher's match_headers wants 'eu'"
    assert "no NServiceBus.EnclosedMessageTypes header" in reasons["d"]
    for headers in errors.values():
        assert headers["NServiceBus.ExceptionInfo.ExceptionType"].endswith("MessageFilteredError")
        assert headers["NServiceBus.ExceptionInfo.Message"] == headers["NServiceBus.ExceptionInfo.Data.Reason"]
        assert headers["NServiceBus.FailedQ"] and headers["NServiceBus.TimeOfFailure"]


@pytest.mark.parametrize("case", ["missing", "itself"])
def test_a_lossy_error_queue_is_refused_before_claiming(queues: Db, monkeypatch: pytest.MonkeyPatch,
                                                        case: str) -> None:
    send(queues, 3)
    error = queues.q("no_such_error") if case == "missing" else queues.q("orders")
    trigger = SqlQueueMessageTrigger(conn_id=airflow_conn(queues, monkeypatch), queue_name=queues.q("orders"),
                                     error_queue=error, poll_interval=0.1)
    producer = SqlQueueMessageTrigger.create_shared_stream_producer(trigger.serialize()[1])

    async def scenario() -> None:
        try:
            await anext(producer.open_stream())
        finally:
            await producer.aclose()

    message = "does not exist" if case == "missing" else "is the watched queue itself"
    with pytest.raises(UnsafeTriggerConfigurationError, match=message):
        run(scenario())
    assert count(queues, "orders") == 3  # nothing claimed, nothing moved


def test_two_watchers_of_one_queue_with_different_filters_are_refused(queues: Db,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    send(queues, 2)
    conn_id = airflow_conn(queues, monkeypatch)
    first = producer_for(queues, conn_id, message_types=["Shop.A"])
    second = producer_for(queues, conn_id, message_types=["Shop.B"])
    same = producer_for(queues, conn_id, message_types=["Shop.A"])

    async def scenario() -> None:
        stream = first.open_stream()
        waiting = asyncio.ensure_future(anext(stream))  # claims and refuses both (neither is a Shop.A)
        await asyncio.sleep(0.5)
        try:
            with pytest.raises(UnsafeTriggerConfigurationError, match="another filter"):
                await anext(second.open_stream())
            same_stream = same.open_stream()
            other = asyncio.ensure_future(anext(same_stream))  # the same filter shares the queue: allowed
            await asyncio.sleep(0.3)
            assert not other.done()
            other.cancel()
            await asyncio.gather(other, return_exceptions=True)
        finally:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            for producer in (first, second, same):
                await producer.aclose()

    run(scenario())
    assert count(queues, "error") == 2


def test_the_run_fallback_is_refused_unless_allowed(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    send(queues, 2)
    trigger = SqlQueueMessageTrigger(conn_id=airflow_conn(queues, monkeypatch), queue_name=queues.q("orders"),
                                     error_queue=queues.q("error"), poll_interval=0.1)
    with pytest.raises(UnsafeTriggerConfigurationError, match="allow_delete_before_stored"):
        run(anext(trigger.run()))
    assert count(queues, "orders") == 2


def test_poison_and_expired_rows_are_not_emitted(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    table = queues.q("orders") if queues.schema else "orders"
    queues.sql(f"INSERT INTO {table} (id, headers, body) VALUES ('{uuid.uuid4()}', 'not json', NULL)")  # noqa: S608
    queues.transport.send(queues.q("orders"), OutgoingMessage(body="old", time_to_be_received=0.001))
    good = send(queues, 1)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch))

    async def scenario() -> list[str]:
        await asyncio.sleep(0.05)
        stream = producer.open_stream()
        event, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return [m["id"] for m in event["messages"]]

    assert run(scenario()) == good
    assert count(queues, "orders") == 0 and count(queues, "error") == 1


def test_messages_over_max_event_bytes_wait_for_the_next_event(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    queues.transport.send_many(queues.q("orders"), [OutgoingMessage(body="x" * 1000) for _ in range(5)])
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), max_event_bytes=3000,
                            event_interval=0)  # the split is under test here, not the spacing

    async def scenario() -> list[int]:
        stream = producer.open_stream()
        counts = []
        while sum(counts) < 5:
            event, number = await anext(stream)
            assert len(json.dumps(event)) <= 3000
            counts.append(event["count"])
            await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return counts

    counts = run(scenario())
    assert len(counts) >= 3 and sum(counts) == 5  # nothing lost, nothing twice
    assert count(queues, "orders") == 0


def test_a_message_too_big_alone_is_emitted_without_its_body(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 1, prefix="y" * 5000)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), max_event_bytes=2000, max_body_bytes=None)

    async def scenario() -> dict[str, Any]:
        stream = producer.open_stream()
        event, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return event

    [message] = run(scenario())["messages"]
    assert message["id"] == sent[0] and message["body_omitted"] is True and message["body_size"] == 5001


def test_messages_sent_within_event_interval_join_one_event(queues: Db, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    first = send(queues, 1, prefix="first")
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=1.5)

    async def scenario() -> list[dict[str, Any]]:
        stream = producer.open_stream()
        event, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        for i in range(3):  # a burst spread over the interval: one event, not three
            await asyncio.to_thread(send, queues, 1, "orders", f"later{i}-")
        second, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return [event, second]

    with caplog.at_level(logging.INFO, logger="airflow_sqlqueue.triggers.sqlqueue"):
        event, second = run(scenario())
    assert [m["id"] for m in event["messages"]] == first
    assert second["count"] == 3
    assert "first0" not in caplog.text and "later" not in caplog.text  # bodies are never logged at INFO
    assert "one event for 3 messages" in caplog.text


def test_two_producers_never_emit_the_same_message(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 40)
    conn_id = airflow_conn(queues, monkeypatch)
    producers = [producer_for(queues, conn_id, batch_size=4) for _ in range(2)]
    seen: list[tuple[int, str]] = []
    advanced: list[str] = []

    async def consume(index: int, producer: SqlQueueStreamProducer) -> None:
        stream = producer.open_stream()
        try:
            while True:
                event, number = await anext(stream)
                ids = [m["id"] for m in event["messages"]]
                seen.extend((index, i) for i in ids)
                await asyncio.sleep(0.01)
                await producer.advance([AdvanceItem(number, ACKED)])
                advanced.extend(ids)
        finally:
            await stream.aclose()
            await producer.aclose()

    async def scenario() -> None:
        tasks = [asyncio.create_task(consume(i, p)) for i, p in enumerate(producers)]
        while len(advanced) < len(sent):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a duplicate would show up here
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(scenario(), timeout=40)
    counts = Counter(message_id for _, message_id in seen)
    assert sorted(counts) == sorted(sent) and set(counts.values()) == {1}, counts.most_common(3)
    assert count(queues, "orders") == 0
    if queues.kind == "postgres":  # row locks: both claim at once (SQLite takes turns on the write lock)
        assert {index for index, _ in seen} == {0, 1}


CRASHING_PRODUCER = textwrap.dedent("""
    import tests.airflow_env
    import asyncio, sys, time
    from airflow_sqlqueue.triggers.sqlqueue import SqlQueueStreamProducer

    async def main():
        producer = SqlQueueStreamProducer(conn_id=sys.argv[1], queue_name=sys.argv[2], error_queue=sys.argv[3],
                                          batch_size=10, poll_interval=0.1)
        stream = producer.open_stream()
        await anext(stream)
        print("claimed", flush=True)
        time.sleep(60)  # the triggerer dies here, holding its claim

    asyncio.run(main())
""")


def test_a_trigger_cancelled_while_it_claims_leaves_nothing_claimed(queues: Db,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The triggerer cancels a trigger (its DAG paused or deleted) while the claim's thread is still at work (it
    waited for a lock, then reads its rows): the cancellation ends only once that claim is undone, so no
    transaction of it holds the rows (PostgreSQL) or the write lock (SQLite) and every message is there for the
    next claim, whatever still refers to the claim."""
    sent = send(queues, 2)
    producer = producer_for(queues, airflow_conn(queues, monkeypatch))
    opening, go, opened = threading.Event(), threading.Event(), threading.Event()
    batch = sqlqueue.LeasedBatch if queues.kind == "sqlite" else sqlqueue.ClaimedBatch
    real_open = batch.open

    def slow_open(self: Any, batch_size: int) -> None:
        opening.set()
        go.wait(10)  # the thread is still busy when the cancellation comes (as when it waits for a lock)
        real_open(self, batch_size)
        opened.set()
        time.sleep(1.0)  # and busy a while after it locked the rows

    monkeypatch.setattr(batch, "open", slow_open)

    def claimable() -> list[str]:
        if queues.kind == "sqlite":
            from tests.test_trigger_leases import write_lock_free
            assert write_lock_free(queues), "a claim of the cancelled trigger holds the write lock"
        with queues.transport.claim(queues.q("orders"), 10) as claim:
            ids = [str(m.native_id) for m in claim.messages]
            claim.abandon()
        return ids

    async def scenario() -> None:
        stream = producer.open_stream()
        task = asyncio.ensure_future(anext(stream))
        assert await asyncio.to_thread(opening.wait, 10)
        threading.Timer(0.3, go.set).start()  # the claim opens after the cancellation came
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(opened.wait, 10)
        assert await asyncio.to_thread(claimable) == sent, "rows are locked by the cancelled trigger's claim"
        await producer.aclose()

    run(scenario())
    assert pending(queues, "orders") == 2


def test_rows_claimed_by_a_dead_triggerer_return(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 3)
    conn_id = airflow_conn(queues, monkeypatch)
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen([sys.executable, "-c", CRASHING_PRODUCER, conn_id, queues.q("orders"),
                              queues.q("error")], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        lines = iter(child.stdout.readline, "")
        assert any(line.strip() == "claimed" for line in lines)  # after the child's own log lines
        assert pending(queues, "orders") == 3
        if queues.kind == "sqlite":  # leased, not held in an open transaction
            assert leased(queues, "orders") == 3
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    later = send(queues, 2, prefix="later")  # sent after the crash: emitted after the dead claimer's batch
    producer = producer_for(queues, conn_id)

    async def scenario() -> list[str]:
        stream = producer.open_stream()
        event, number = await anext(stream)
        await producer.advance([AdvanceItem(number, ACKED)])
        await stream.aclose()
        await producer.aclose()
        return [m["id"] for m in event["messages"]]

    assert run(scenario()) == sent + later  # the same Ids again, first, in queue order
    assert pending(queues, "orders") == 0


def test_ack_mode_through_the_shared_stream_manager(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's own manager: rows stay until the trigger events are confirmed persisted, then go."""
    sent = send(queues, 2)
    trigger = SqlQueueMessageTrigger(conn_id=airflow_conn(queues, monkeypatch), queue_name=queues.q("orders"),
                                     error_queue=queues.q("error"), poll_interval=0.1)
    key = trigger.shared_stream_key()

    async def scenario() -> list[dict[str, Any]]:
        manager = SharedStreamManager(ack_timeout=30)
        events = trigger.filter_shared_stream(manager.subscribe(trigger_id=1, trigger=trigger, key=key))
        event = await asyncio.wait_for(anext(events), 10)
        payloads = event.payload["messages"]
        seqs = [manager.bind_pending_event(trigger_id=1, key=key)]
        await asyncio.sleep(0.3)
        assert await asyncio.to_thread(pending, queues, "orders") == 2  # not persisted yet: still there
        consumer = asyncio.ensure_future(anext(events))  # the subscriber moves past the last event
        await asyncio.sleep(0.1)
        manager.confirm_persisted(seqs)
        for _ in range(100):
            if await asyncio.to_thread(pending, queues, "orders") == 0:
                break
            await asyncio.sleep(0.05)
        consumer.cancel()
        await manager.unsubscribe(1, key)
        return payloads

    payloads = run(scenario())
    assert [p["id"] for p in payloads] == sent
    assert count(queues, "orders") == 0


def test_run_fallback_emits_and_deletes(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = send(queues, 2)
    trigger = SqlQueueMessageTrigger(conn_id=airflow_conn(queues, monkeypatch), queue_name=queues.q("orders"),
                                     error_queue=queues.q("error"), poll_interval=0.1,
                                     allow_delete_before_stored=True)

    async def scenario() -> list[str]:
        events = trigger.run()
        ids = [m["id"] for m in (await anext(events)).payload["messages"]]
        waiting = asyncio.ensure_future(anext(events))  # taking the next event acks the previous one
        for _ in range(100):
            if await asyncio.to_thread(pending, queues, "orders") == 0:
                break
            await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await events.aclose()
        return ids

    assert run(scenario()) == sent
    assert count(queues, "orders") == 0


def test_message_trigger_serializes_and_shares_by_queue() -> None:
    trigger = SqlQueueMessageTrigger(conn_id="c", queue_name="orders", batch_size=10)
    path, kwargs = trigger.serialize()
    assert path == "airflow_sqlqueue.triggers.sqlqueue.SqlQueueMessageTrigger"
    assert SqlQueueMessageTrigger(**kwargs).serialize() == (path, kwargs)
    assert trigger.shared_stream_key() == SqlQueueMessageTrigger(conn_id="c", queue_name="orders").shared_stream_key()
    assert trigger.shared_stream_key() != SqlQueueMessageTrigger(conn_id="c", queue_name="other").shared_stream_key()
    assert isinstance(SqlQueueMessageTrigger.create_shared_stream_producer(kwargs), SqlQueueStreamProducer)
    assert (kwargs["batch_size"], kwargs["event_interval"], kwargs["max_event_bytes"]) == (10, 5.0, 1024 * 1024)
    with pytest.raises(ValueError, match="batch_size"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", batch_size=0)
    with pytest.raises(ValueError, match="event_interval"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", event_interval=-1)
    filtered = SqlQueueMessageTrigger(conn_id="c", queue_name="orders", message_types="Shop.OrderPlaced",
                                      match_headers={"Region": "eu"})
    path, kwargs = filtered.serialize()
    assert (kwargs["message_types"], kwargs["match_headers"]) == (["Shop.OrderPlaced"], {"Region": "eu"})
    assert kwargs["allow_delete_before_stored"] is False
    assert SqlQueueMessageTrigger(**kwargs).serialize() == (path, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs  # stored as JSON by Airflow
    assert filtered.shared_stream_key() != trigger.shared_stream_key()  # a filter is part of the stream
    with pytest.raises(ValueError, match="message_types"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", message_types=["Shop.A, Shop"])
    with pytest.raises(ValueError, match="match_headers"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", match_headers={"Region": 1})


def test_event_messages_gives_each_message_once_in_queue_order() -> None:
    class Event:
        def __init__(self, extra: dict[str, Any]) -> None:
            self.extra = extra

    def message(seq: int, queue: str = "orders") -> dict[str, Any]:
        return {"id": f"id-{queue}-{seq}", "seq": seq, "queue": queue, "headers": {}, "body": str(seq)}

    batch = {"payload": {"queue": "orders", "count": 2, "messages": [message(3), message(4)]}}
    again = {"payload": {"queue": "orders", "count": 2, "messages": [message(1), message(3)]}}  # after a crash
    other = {"payload": {"queue": "refunds", "count": 1, "messages": [message(2, "refunds")]}}
    context = {"triggering_asset_events": {"a": [Event(batch), Event(again)], "b": [Event(other), Event({"x": 1})]}}
    assert [m["id"] for m in event_messages(context)] == ["id-orders-1", "id-orders-3", "id-orders-4",
                                                          "id-refunds-2"]
    assert [m["seq"] for m in event_messages(context, queue="refunds")] == [2]
    assert event_messages({}) == []


def test_payload_of_binary_large_and_null_bodies() -> None:
    from airflow_sqlqueue.transport import ReceivedMessage

    def payload(body: bytes | None, limit: int | None = 10) -> dict[str, Any]:
        return message_payload(ReceivedMessage(uuid.uuid4(), {"a": "b"}, body, 7, "orders"), limit)

    assert payload(b"\xff\x00")["body_base64"] == "/wA="
    assert payload(b"x" * 11)["body_omitted"] is True and payload(b"x" * 11)["body_size"] == 11
    assert payload(b"x" * 11, None)["body"] == "x" * 11
    assert payload(None)["body"] is None


# -- common.messaging ---------------------------------------------------------------------------------------
@pytest.fixture
def message_queue_trigger(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``MessageQueueTrigger``, with our provider registered even before the entry point is installed."""
    from airflow.providers.common.messaging.triggers import msg_queue

    from airflow_sqlqueue.queues.sqlqueue import SqlQueueMessageQueueProvider

    if not any(isinstance(p, SqlQueueMessageQueueProvider) for p in msg_queue.MESSAGE_QUEUE_PROVIDERS):
        monkeypatch.setattr(msg_queue, "MESSAGE_QUEUE_PROVIDERS",
                            [*msg_queue.MESSAGE_QUEUE_PROVIDERS, SqlQueueMessageQueueProvider()])
    return msg_queue.MessageQueueTrigger


def test_message_queue_trigger_builds_ours(message_queue_trigger: Any) -> None:
    trigger = message_queue_trigger(scheme="sqlqueue", conn_id="queues_db", queue_name="orders", batch_size=5)
    assert isinstance(trigger.trigger, SqlQueueMessageTrigger)
    path, kwargs = trigger.serialize()
    assert path == "airflow_sqlqueue.triggers.sqlqueue.SqlQueueMessageTrigger"
    assert kwargs["queue_name"] == "orders" and kwargs["batch_size"] == 5


def test_message_queue_trigger_queue_uri(message_queue_trigger: Any) -> None:
    with pytest.warns(Warning, match="deprecated"):
        trigger = message_queue_trigger(queue="sqlqueue://queues_db/orders%40dbo")
    assert trigger.trigger.serialize()[1]["conn_id"] == "queues_db"
    assert trigger.trigger.serialize()[1]["queue_name"] == "orders@dbo"


def test_provider_info_is_valid() -> None:
    from airflow_sqlqueue.get_provider_info import get_provider_info
    from airflow_sqlqueue.queues.sqlqueue import SqlQueueMessageQueueProvider

    info = get_provider_info()
    tests.airflow_env.provider_info_validator().validate(info)
    assert info["package-name"] == "airflow-provider-sqlqueue"
    assert info["queues"] == ["airflow_sqlqueue.queues.sqlqueue.SqlQueueMessageQueueProvider"]
    assert "connection-types" not in info
    assert SqlQueueMessageQueueProvider().trigger_class() is SqlQueueMessageTrigger


async def first_event_after_a_quiet_spell(db, trigger) -> dict:
    """Run ``trigger`` until it listens and has looked once (finding nothing), send one message to ``orders``, and
    return the payload of its first event: within 60 s, far below its 600 s poll, so only a wake-up gets there."""
    events = trigger.run()
    first = asyncio.ensure_future(anext(events))
    for _ in range(300):  # until the trigger listens, then a moment for its first (empty) look
        listening = await asyncio.to_thread(db.sql, "SELECT count(*) FROM pg_stat_activity WHERE query = "
                                            "'LISTEN sqlqueue' AND pid <> pg_backend_pid()")
        if listening[0][0]:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    assert not first.done()
    await asyncio.to_thread(db.transport.send, db.q("orders"), b"wake")
    event = await asyncio.wait_for(first, 60)
    await events.aclose()
    return event.payload


def test_depth_trigger_wakes_on_a_send_when_the_queue_notifies(db, monkeypatch):
    """PostgreSQL with the wake-up trigger: the sensor's trigger fires on the send, not at its next poll (600 s
    away); elsewhere it keeps polling."""
    if db.kind != "postgres":
        pytest.skip("push wake-ups are PostgreSQL's LISTEN/NOTIFY")
    db.transport.create_queue(db.q("orders"), notify=True)
    trigger = SqlQueueTrigger(conn_id=airflow_conn(db, monkeypatch), queue=db.q("orders"), poll_interval=600)

    payload = asyncio.run(first_event_after_a_quiet_spell(db, trigger))
    assert payload == {"status": "success", "queue": db.q("orders"), "depth": 1}


def test_event_trigger_wakes_on_a_send_when_the_queue_notifies(db, monkeypatch):
    """The AssetWatcher's trigger on a PostgreSQL queue with the wake-up trigger: a send after a quiet spell is
    emitted at once, not at the next poll (600 s away)."""
    if db.kind != "postgres":
        pytest.skip("push wake-ups are PostgreSQL's LISTEN/NOTIFY")
    db.transport.create_queues([db.q("orders"), db.q("error")], notify=True)
    trigger = SqlQueueMessageTrigger(conn_id=airflow_conn(db, monkeypatch), queue_name=db.q("orders"),
                                     poll_interval=600, error_queue=db.q("error"), allow_delete_before_stored=True)

    payload = asyncio.run(first_event_after_a_quiet_spell(db, trigger))
    assert payload["count"] == 1 and [m["body"] for m in payload["messages"]] == ["wake"]
