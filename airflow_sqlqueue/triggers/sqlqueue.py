"""Triggers for SQL queue tables.

- ``SqlQueueTrigger`` waits in the triggerer until a queue holds at least N messages (the deferrable half of
  ``SqlQueueSensor``).
- ``SqlQueueMessageTrigger`` emits one event per message, for ``AssetWatcher`` (event-driven scheduling). It runs
  in the triggerer's ack mode: rows are claimed (locked, not deleted) when emitted, and deleted only once
  Airflow has stored the asset events, so a triggerer crash returns them to the queue.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import aclosing
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome, SharedStreamProducer

from airflow_sqlqueue import metrics
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import Claim, QueueAddress, ReceivedMessage, SqlQueueError, SqlQueueTransport
from airflow_sqlqueue.transport.redaction import describe
from airflow_sqlqueue.transport.validation import check_count, is_number
from airflow_sqlqueue.transport.wakeups import Wakeups

log = logging.getLogger(__name__)

#: Below this, polling is refused; above ``SLOW_POLL_INTERVAL`` it is allowed with a warning.
MIN_POLL_INTERVAL = 0.1
SLOW_POLL_INTERVAL = 10.0
#: Consecutive transient failures (lost connection, lock timeout) tolerated before a trigger gives up.
MAX_TRANSIENT_FAILURES = 5


def check_poll_interval(poll_interval: float, owner: str) -> float:
    """Validate a poll interval in seconds: under 0.1 s is refused, over 10 s warns (events arrive late)."""
    if not is_number(poll_interval):
        raise TypeError(f"{owner}: poll_interval must be a number of seconds, got {poll_interval!r}")
    if poll_interval < MIN_POLL_INTERVAL:
        raise ValueError(
            f"{owner}: poll_interval={poll_interval} s is below the minimum of {MIN_POLL_INTERVAL} s; polling "
            "that often loads the database for nothing. Use 0.1 s or more")
    if poll_interval > SLOW_POLL_INTERVAL:
        log.warning("%s: poll_interval=%s s is over %s s: messages are noticed that much later", owner,
                    poll_interval, SLOW_POLL_INTERVAL)
    return float(poll_interval)


async def get_transport(conn_id: str, **kwargs: Any) -> tuple[SqlQueueTransport, Any]:
    """The transport of an Airflow connection, looked up without blocking the triggerer's event loop."""
    hook = await SqlQueueHook.afor_conn_id(conn_id, **kwargs)
    return hook.transport, hook.connection


def describe_error(exc: BaseException, connection: Any = None) -> str:
    """A one-line error text for an event payload: exception type and first line, secrets removed."""
    return describe(exc, getattr(connection, "password", None))


def _is_transient(transport: SqlQueueTransport, exc: BaseException) -> bool:
    return transport.dialect.is_connection_lost(exc) or transport.dialect.is_deadlock(exc)


async def _close(transport: SqlQueueTransport | None) -> None:
    if transport is not None:
        await asyncio.to_thread(transport.close)


# -- depth trigger -----------------------------------------------------------------------------------
class SqlQueueTrigger(BaseTrigger):
    """Fire once a queue holds at least ``min_messages`` messages (by ``peek``, which is cheap on any backlog).

    Yields ``{"status": "success", "queue": ..., "depth": n}``, or ``{"status": "error", "message": ...}`` when
    the queue cannot be read (missing table, wrong connection type, database down).

    :param conn_id: an Airflow connection of type ``mssql``, ``odbc``, ``postgres`` or ``sqlite``.
    :param queue: the queue address (``table``, ``table@schema`` or ``"schema"."table"`` per dialect).
    :param min_messages: fire when the depth reaches this many messages.
    :param poll_interval: seconds between two peeks (at least 0.1). On a PostgreSQL queue with the wake-up
        trigger (``create_queue(..., notify=True)``) a send wakes the trigger at once and this is only the
        fallback period.
    :param max_poll_interval: the longest pause between peeks while the queue stays empty (the idle back-off;
        default 4 x ``poll_interval``).
    """

    def __init__(self, conn_id: str, queue: str, min_messages: int = 1, poll_interval: float = 5.0,
                 max_poll_interval: float | None = None) -> None:
        super().__init__()
        check_count(min_messages, "min_messages")
        self.conn_id = conn_id
        self.queue = queue
        self.min_messages = min_messages
        self.poll_interval = check_poll_interval(poll_interval, type(self).__name__)
        self.max_poll_interval = max_poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"conn_id": self.conn_id, "queue": self.queue, "min_messages": self.min_messages,
                 "poll_interval": self.poll_interval, "max_poll_interval": self.max_poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        transport: SqlQueueTransport | None = None
        connection = None
        wakeups: Wakeups | None = None
        try:
            transport, connection = await get_transport(self.conn_id)
            wakeups = transport.wakeups(self.queue, self.poll_interval, self.max_poll_interval)
            if await asyncio.to_thread(wakeups.start):
                self.log.info("queue %s wakes this trigger on each send (LISTEN); polling every %.1f s as fallback",
                              self.queue, self.poll_interval)
            failures = 0
            while True:
                try:
                    depth = await asyncio.to_thread(transport.peek, self.queue)
                    failures = 0
                except Exception as exc:
                    failures += 1
                    if not _is_transient(transport, exc) or failures >= MAX_TRANSIENT_FAILURES:
                        raise
                    self.log.warning("peek of %s failed (%d/%d), retrying: %s", self.queue, failures,
                                     MAX_TRANSIENT_FAILURES, describe_error(exc, connection))
                    await asyncio.sleep(self.poll_interval)
                    continue
                if depth >= self.min_messages:
                    self.log.info("queue %s holds %d messages (waiting for %d)", self.queue, depth,
                                  self.min_messages)
                    metrics.incr("trigger_events", self.conn_id, self.queue)
                    yield TriggerEvent({"status": "success", "queue": self.queue, "depth": depth})
                    return
                self.log.debug("queue %s holds %d of %d messages", self.queue, depth, self.min_messages)
                await wakeups.wait_async(found=depth > 0)
        except Exception as exc:
            message = f"cannot watch queue {self.queue!r} on connection {self.conn_id!r}: " + describe_error(
                exc, connection)
            self.log.error("%s", message)
            yield TriggerEvent({"status": "error", "queue": self.queue, "message": message})
        finally:
            if wakeups is not None:
                await asyncio.to_thread(wakeups.close)
            await _close(transport)


# -- message trigger (ack mode) ------------------------------------------------------------------------
def message_payload(message: ReceivedMessage, max_body_bytes: int | None = None) -> dict[str, Any]:
    """The JSON-serialisable event payload of one message.

    ``body`` is the UTF-8 text of the body; a body that is not UTF-8 comes as ``body_base64`` instead. A body
    larger than ``max_body_bytes`` is left out (``body_omitted`` true, ``body_size`` says how big it was):
    event payloads are stored in Airflow's metadata database.
    """
    payload: dict[str, Any] = {
        "queue": message.queue,
        "id": str(message.id),
        "message_id": message.message_id,
        "seq": message.seq,
        "headers": dict(message.headers),
        "body_size": None if message.body is None else len(message.body),
    }
    body = message.body
    if body is None:
        payload["body"] = None
    elif max_body_bytes is not None and len(body) > max_body_bytes:
        payload["body_omitted"] = True
    else:
        try:
            payload["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            payload["body_base64"] = base64.b64encode(body).decode("ascii")
    return payload


class RejectedBySubscriberError(SqlQueueError):
    """A trigger refused the message (``reject_shared_stream_event``); it goes to the error queue."""


class ClaimedBatch:
    """The trigger's view of a core ``Claim``: up to N of the oldest rows of one queue, locked (not deleted) in one
    open transaction until each is settled by the outcome Airflow reports for its event.

    Every method is blocking: call it through ``asyncio.to_thread``.
    """

    def __init__(self, transport: SqlQueueTransport, address: QueueAddress) -> None:
        self.transport = transport
        self.address = address
        self.claim: Claim | None = None
        self.messages: list[ReceivedMessage] = []

    @property
    def number(self) -> int:
        return self.claim.number if self.claim is not None else 0

    @property
    def locked(self) -> int:
        return self.claim.locked if self.claim is not None else 0

    @property
    def released(self) -> int:
        return self.claim.released if self.claim is not None else 0

    def open(self, batch_size: int) -> None:
        """Lock up to ``batch_size`` rows; expired rows are dropped and poison rows moved to the error queue."""
        self.claim = self.transport.claim(self.address, batch_size)
        self.messages = self.claim.messages

    def settle(self, items: Sequence[tuple[int, AdvanceOutcome]]) -> bool:
        """Settle messages by their outcome; commit once every one is settled. Return whether the claim ended."""
        claim = self.claim
        if claim is None or claim.closed:
            return True
        for seq, outcome in items:
            if claim.message(seq) is None:
                continue
            if outcome.rejected:
                claim.reject(seq, RejectedBySubscriberError("an Airflow trigger rejected the message"))
            elif outcome.is_clean:
                claim.ack(seq)
            else:
                claim.release(seq)  # stays in the queue: delivered again after this claim ends
        if claim.unsettled:
            return False
        claim.commit()
        return True

    def commit(self) -> None:
        """End the claim keeping what was settled (rows not settled yet return to the queue)."""
        if self.claim is not None:
            self.claim.commit()

    def abandon(self) -> None:
        """End the claim undoing everything: every row returns to the queue."""
        if self.claim is not None:
            self.claim.abandon()


class SqlQueueStreamProducer(SharedStreamProducer):
    """The broker side of ``SqlQueueMessageTrigger`` in the triggerer's ack mode.

    ``open_stream`` claims a batch of rows and yields one raw event per message; it claims the next batch
    only after Airflow advanced every event of this one. ``advance`` deletes the messages whose asset events
    were stored, moves rejected ones to the error queue, and leaves failed ones in the queue (they are
    delivered again). See ``SqlQueueMessageTrigger`` for the parameters.
    """

    def __init__(self, conn_id: str, queue_name: str, batch_size: int = 100, poll_interval: float = 2.0,
                 error_queue: str = "error", max_body_bytes: int | None = 65536) -> None:
        self.conn_id = conn_id
        self.queue_name = queue_name
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.error_queue = error_queue
        self.max_body_bytes = max_body_bytes
        self.transport: SqlQueueTransport | None = None
        self._connection: Any = None
        self._claim: ClaimedBatch | None = None
        self._settled = asyncio.Event()
        self._closing = False

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], tuple[int, int]]]:
        self.transport, self._connection = await get_transport(self.conn_id, error_queue=self.error_queue)
        address = self.transport.address(self.queue_name)
        failures = 0
        try:
            while not self._closing:
                claim = ClaimedBatch(self.transport, address)
                self._claim = claim
                self._settled.clear()
                try:
                    await asyncio.to_thread(claim.open, self.batch_size)
                    failures = 0
                except Exception as exc:
                    failures += 1
                    if not _is_transient(self.transport, exc) or failures >= MAX_TRANSIENT_FAILURES:
                        raise
                    log.warning("claiming messages of %s failed (%d/%d), retrying: %s", self.queue_name,
                                failures, MAX_TRANSIENT_FAILURES, describe_error(exc, self._connection))
                    await asyncio.sleep(self.poll_interval)
                    continue
                if not claim.messages:
                    await asyncio.to_thread(claim.commit)  # keeps the drops of expired and poison rows
                    self._claim = None
                    if not claim.locked:
                        await asyncio.sleep(self.poll_interval)
                    continue
                for message in claim.messages:
                    yield message_payload(message, self.max_body_bytes), (claim.number, message.seq)
                await self._settled.wait()
                self._claim = None
                if claim.released:  # failed events are delivered again, but not in a tight loop
                    await asyncio.sleep(self.poll_interval)
        finally:  # closed early (cancelled, or the consumer left): nothing claimed stays locked
            claim, self._claim = self._claim, None
            if claim is not None:
                await asyncio.to_thread(claim.abandon)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        claim = self._claim
        items = []
        for item in batch:
            number, seq = item.broker_payload
            if claim is None or number != claim.number:
                log.warning("advance for message seq %s of an ended claim ignored (it was returned to %s)",
                            seq, self.queue_name)
                continue
            items.append((seq, item.outcome))
        if claim is not None and items and await asyncio.to_thread(claim.settle, items):
            self._settled.set()

    async def aclose(self) -> None:
        self._closing = True
        claim, self._claim = self._claim, None
        if claim is not None:
            await asyncio.to_thread(claim.abandon)
        self._settled.set()
        transport, self.transport = self.transport, None
        await _close(transport)


class SqlQueueMessageTrigger(BaseEventTrigger):
    """One event per message of a queue, for ``AssetWatcher``: a DAG run is scheduled by messages arriving.

    The triggerer runs it in ack mode: a message is claimed (locked, not deleted) when its event is emitted,
    and deleted only after Airflow stored the asset event. Two triggerers never emit the same message; if the
    triggerer dies in between, the message returns to the queue and is emitted again later. Messages whose
    event failed are delivered again; rejected ones go to the error queue. Several DAGs watching the same
    queue share one poll, and each message is deleted once all of them stored their events.

    The payload (stored as the asset event's ``extra["payload"]``) is ``{"queue", "id", "message_id", "seq",
    "headers", "body" (UTF-8 text) or "body_base64", "body_size"}``. Bursts can be coalesced into one DAG run
    and arrive out of order: sort by ``seq`` and make downstream tasks idempotent (by ``id``).

    :param conn_id: an Airflow connection of type ``mssql``, ``odbc``, ``postgres`` or ``sqlite``.
    :param queue_name: the queue address.
    :param batch_size: most messages claimed at once.
    :param poll_interval: seconds between two polls of an empty queue (at least 0.1).
    :param error_queue: where rejected messages and rows with unreadable headers go.
    :param max_body_bytes: bodies larger than this are left out of the payload (None: never).
    """

    def __init__(self, conn_id: str, queue_name: str, batch_size: int = 100, poll_interval: float = 2.0,
                 error_queue: str = "error", max_body_bytes: int | None = 65536) -> None:
        super().__init__()
        check_count(batch_size, "batch_size")
        self.conn_id = conn_id
        self.queue_name = queue_name
        self.batch_size = batch_size
        self.poll_interval = check_poll_interval(poll_interval, type(self).__name__)
        self.error_queue = error_queue
        self.max_body_bytes = max_body_bytes

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"conn_id": self.conn_id, "queue_name": self.queue_name, "batch_size": self.batch_size,
                 "poll_interval": self.poll_interval, "error_queue": self.error_queue,
                 "max_body_bytes": self.max_body_bytes})

    def shared_stream_key(self) -> Hashable | None:
        return ("airflow_sqlqueue", self.conn_id, self.queue_name, self.error_queue)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SqlQueueStreamProducer:
        return SqlQueueStreamProducer(**kwargs)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for raw_event in shared_stream:
            yield TriggerEvent(raw_event)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Fallback outside ack mode: a message is deleted once the triggerer took its event (not stored)."""
        producer = self.create_shared_stream_producer(self.serialize()[1])
        try:
            async with aclosing(producer.open_stream()) as stream:
                async for raw_event, broker_payload in stream:
                    yield TriggerEvent(raw_event)
                    await producer.advance([AdvanceItem(broker_payload, AdvanceOutcome(acked=1, failed=0))])
        finally:
            await producer.aclose()
