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
from tests.test_triggers import ACKED, airflow_conn, producer_for, run, send


def test_gap_is_short_after_a_light_event_and_event_interval_under_load() -> None:
    assert (DEFAULT_MIN_EVENT_INTERVAL, DEFAULT_EVENT_INTERVAL) == (2.0, 5.0)
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
    assert SqlQueueMessageTrigger(conn_id="c", queue_name="orders").serialize()[1]["min_event_interval"] == 2.0
    with pytest.raises(ValueError, match="min_event_interval"):
        SqlQueueMessageTrigger(conn_id="c", queue_name="orders", min_event_interval=-1)


def test_a_trickle_is_not_held_for_event_interval(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """One message, then two more (one commit) after its event was stored: the older of the two gets an event
    after the short gap, not after ``event_interval`` (600 s here, far beyond the scenario's 20 s limit); the
    newest stays for a later event, so that an event on a short gap always has another behind it."""
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=600, min_event_interval=0.2)
    first = send(queues, 1, prefix="a")

    async def scenario() -> tuple[list[dict[str, Any]], list[str]]:
        stream = producer.open_stream()
        events: list[dict[str, Any]] = []
        try:
            event, number = await anext(stream)
            events.append(event)
            await producer.advance([AdvanceItem(number, ACKED)])
            later = await asyncio.to_thread(send, queues, 2, "orders", "b")  # one commit: both in the next claim
            event, number = await anext(stream)
            events.append(event)
            await producer.advance([AdvanceItem(number, ACKED)])
        finally:
            await stream.aclose()
            await producer.aclose()
        return events, later

    (one, two), later = run(scenario())
    assert [m["id"] for m in one["messages"]] == first
    assert [m["id"] for m in two["messages"]] == later[:1]
    assert queues.transport.peek(queues.q("orders")) == 1  # the newest: back in the queue, not lost


def test_the_last_message_of_a_trickle_keeps_event_interval(queues: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone message after a short gap is held, not dropped: it comes in the event after ``event_interval``."""
    producer = producer_for(queues, airflow_conn(queues, monkeypatch), event_interval=1.0, min_event_interval=0.1)
    first = send(queues, 1, prefix="a")

    async def scenario() -> list[list[str]]:
        stream = producer.open_stream()
        ids, later = [], []
        try:
            for _ in range(2):
                event, number = await anext(stream)
                ids.append([m["id"] for m in event["messages"]])
                await producer.advance([AdvanceItem(number, ACKED)])
                if not later:
                    later = await asyncio.to_thread(send, queues, 1, "orders", "b")
        finally:
            await stream.aclose()
            await producer.aclose()
        return [*ids, later]

    one, two, later = run(scenario())
    assert (one, two) == (first, later)


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
