"""How ``SqlQueueMessageTrigger`` spaces its events: the first message after a quiet spell goes out at once, a
light trickle (events of a few messages) keeps only ``min_event_interval`` between events, load keeps
``event_interval``, and messages sent while an event is in flight join the next event. SQLite and PostgreSQL."""

from __future__ import annotations

import tests.airflow_env  # noqa: F401  (sets AIRFLOW_HOME before any airflow import)

# isort: split

import asyncio
from typing import Any

import pytest
from airflow.triggers.shared_stream import AdvanceItem

from airflow_sqlqueue.triggers.sqlqueue import (
    DEFAULT_EVENT_INTERVAL,
    DEFAULT_MIN_EVENT_INTERVAL,
    LIGHT_EVENT_MESSAGES,
    SqlQueueMessageTrigger,
    next_event_gap,
)
from tests.conftest import Db
from tests.test_triggers import ACKED, FAILED, airflow_conn, producer_for, run, send


def test_gap_is_short_after_a_light_event_and_event_interval_under_load() -> None:
    assert (DEFAULT_MIN_EVENT_INTERVAL, DEFAULT_EVENT_INTERVAL) == (0.5, 5.0)
    assert next_event_gap(1, 5.0, 2.0) == 2.0
    assert next_event_gap(LIGHT_EVENT_MESSAGES, 5.0, 2.0) == 2.0
    assert next_event_gap(LIGHT_EVENT_MESSAGES + 1, 5.0, 2.0) == 5.0
    assert next_event_gap(1, 1.5, 2.0) == 1.5  # never longer than event_interval
    assert next_event_gap(500, 0, 2.0) == 0


def test_min_event_interval_is_serialized_and_checked() -> None:
    trigger = SqlQueueMessageTrigger(conn_id="c", queue_name="orders", min_event_interval=0.5)
    path, kwargs = trigger.serialize()
    assert kwargs["min_event_interval"] == 0.5
    assert SqlQueueMessageTrigger(**kwargs).serialize() == (path, kwargs)
    assert SqlQueueMessageTrigger(conn_id="c", queue_name="orders").serialize()[1]["min_event_interval"] == 0.5
    with pytest.raises(ValueError, match="min_event_interval"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", min_event_interval=-1)


def test_a_trickle_is_not_held_and_a_sweep_event_follows_its_last_event(queues: Db,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """One message, then two more (one commit) after its event was stored: both go in the next event after the
    short gap (issue 29: before, the newest was held for ``event_interval``). That event came close behind the
    first, so on Airflow 3.3 the scheduler may have left it out of a run: as nothing else comes, an empty sweep
    event follows it (after ``event_interval``), whose run takes anything left out."""
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=0.5, min_event_interval=0.2)
    assert producer.sweep_events  # Airflow 3.3 here
    first = send(queues, 1, prefix="a")

    async def scenario() -> tuple[list[dict[str, Any]], list[str]]:
        stream = producer.open_stream()
        events: list[dict[str, Any]] = []
        later: list[str] = []
        try:
            for _ in range(3):
                event, number = await anext(stream)
                events.append(event)
                await producer.advance([AdvanceItem(number, ACKED)])
                if not later:
                    later = await asyncio.to_thread(send, queues, 2, "orders", "b")  # one commit
        finally:
            await stream.aclose()
            await producer.aclose()
        return events, later

    (one, two, sweep), later = run(scenario())
    assert [m["id"] for m in one["messages"]] == first
    assert [m["id"] for m in two["messages"]] == later
    assert sweep == {"queue": one["queue"], "count": 0, "first_seq": None, "last_seq": None, "messages": []}
    assert queues.transport.peek(queues.q("orders")) == 0


def test_an_event_after_a_quiet_spell_has_no_sweep_behind_it(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first event after ``event_interval`` of quiet cannot be left out: the next event is the next message's,
    not a sweep."""
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=0.3, min_event_interval=0.1)
    first = send(queues, 1, prefix="a")

    async def scenario() -> list[list[str]]:
        stream = producer.open_stream()
        ids: list[list[str]] = []
        try:
            event, number = await anext(stream)
            ids.append([m["id"] for m in event["messages"]])
            await producer.advance([AdvanceItem(number, ACKED)])
            await asyncio.sleep(0.6)  # longer than event_interval: no sweep is owed
            ids.append(await asyncio.to_thread(send, queues, 1, "orders", "b"))
            event, number = await anext(stream)
            ids.append([m["id"] for m in event["messages"]])
            await producer.advance([AdvanceItem(number, ACKED)])
        finally:
            await stream.aclose()
            await producer.aclose()
        return ids

    one, later, two = run(scenario())
    assert (one, two) == (first, later)


def test_a_failed_sweep_event_is_emitted_again(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=0.2, min_event_interval=0.1)
    send(queues, 1, prefix="a")

    async def scenario() -> list[int]:
        stream = producer.open_stream()
        counts: list[int] = []
        try:
            event, number = await anext(stream)
            counts.append(event["count"])
            later = asyncio.ensure_future(asyncio.to_thread(send, queues, 1, "orders", "b"))
            await producer.advance([AdvanceItem(number, ACKED)])
            await later
            for outcome in (ACKED, FAILED, ACKED):  # the message, its sweep (failed), the sweep again
                event, number = await anext(stream)
                counts.append(event["count"])
                await producer.advance([AdvanceItem(number, outcome)])
        finally:
            await stream.aclose()
            await producer.aclose()
        return counts

    assert run(scenario()) == [1, 1, 0, 0]


def test_postgresql_claims_the_next_batch_while_an_event_is_in_flight(queues: Db,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where claims skip each other's rows (PostgreSQL) the next event does not wait for Airflow to store the
    previous one; each message is in one event; a failed event's messages come again; on SQLite (one writer) the
    next claim waits for the advance."""
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=0, min_event_interval=0)
    first = send(queues, 1, prefix="a")

    async def scenario() -> tuple[list[list[str]], list[str], bool]:
        stream = producer.open_stream()
        ids: list[list[str]] = []
        try:
            event, one = await anext(stream)
            ids.append([m["id"] for m in event["messages"]])
            later = await asyncio.to_thread(send, queues, 2, "orders", "b") if queues.kind != "sqlite" else []
            pending = asyncio.ensure_future(anext(stream))
            if queues.kind == "sqlite":
                await asyncio.sleep(0.3)
                waited = not pending.done()  # held until the advance below
                await producer.advance([AdvanceItem(one, ACKED)])
                later = await asyncio.to_thread(send, queues, 2, "orders", "b")
                event, two = await pending
                ids.append([m["id"] for m in event["messages"]])
                await producer.advance([AdvanceItem(two, ACKED)])
                return ids, later, waited
            event, two = await pending  # the first event is still in flight
            ids.append([m["id"] for m in event["messages"]])
            await producer.advance([AdvanceItem(one, FAILED), AdvanceItem(two, ACKED)])
            event, three = await anext(stream)  # the failed event's message, again
            ids.append([m["id"] for m in event["messages"]])
            await producer.advance([AdvanceItem(three, ACKED)])
            return ids, later, True
        finally:
            await stream.aclose()
            await producer.aclose()

    ids, later, waited = run(scenario())
    assert waited
    if queues.kind == "sqlite":
        assert ids == [first, later]
    else:
        assert ids == [first, later, first]
    assert queues.transport.peek(queues.q("orders")) == 0


def test_messages_sent_while_an_event_is_in_flight_join_the_next_event(queues: Db,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=0, min_event_interval=0)
    first = send(queues, 1, prefix="a")

    async def scenario() -> list[dict[str, Any]]:
        stream = producer.open_stream()
        try:
            event, number = await anext(stream)
            # sent while the event is not stored yet (on SQLite the send waits for the claim's write lock)
            sending = asyncio.ensure_future(asyncio.to_thread(send, queues, 3, "orders", "b"))
            await asyncio.sleep(0)
            await producer.advance([AdvanceItem(number, ACKED)])
            later = await sending
            second, number = await anext(stream)
            await producer.advance([AdvanceItem(number, ACKED)])
        finally:
            await stream.aclose()
            await producer.aclose()
        return [event, second, later]

    event, second, later = run(scenario())
    assert [m["id"] for m in event["messages"]] == first
    assert [m["id"] for m in second["messages"]] == later
