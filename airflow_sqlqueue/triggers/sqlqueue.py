"""Triggers for SQL queue tables.

- ``SqlQueueTrigger`` waits in the triggerer until a queue holds at least N messages (the deferrable half of
  ``SqlQueueSensor``).
- ``SqlQueueMessageTrigger`` emits one event per claimed batch of messages, for ``AssetWatcher`` (event-driven
  scheduling). It runs in the triggerer's ack mode: rows are claimed (locked, not deleted; on SQLite leased) when
  emitted, and deleted only once Airflow has stored the asset event, so a triggerer crash returns them to the queue.
  ``event_messages(context)`` gives a task the messages of the events that triggered its run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from contextlib import aclosing
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome, SharedStreamProducer

from airflow_sqlqueue import metrics
from airflow_sqlqueue.hooks.sqlqueue import SqlQueueHook
from airflow_sqlqueue.transport import Claim, QueueAddress, ReceivedMessage, SqlQueueError, SqlQueueTransport
from airflow_sqlqueue.transport.common.redaction import describe
from airflow_sqlqueue.transport.common.threads import finish_in_thread
from airflow_sqlqueue.transport.common.validation import check_count, is_number
from airflow_sqlqueue.transport.operations.wakeups import Wakeups
from airflow_sqlqueue.transport.processing.lease import RECOVER_EVERY, RENEW_EVERY, Leases
from airflow_sqlqueue.transport.wire.headers import ENCLOSED_MESSAGE_TYPES
from airflow_sqlqueue.transport.wire.payload import to_payload

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
        await finish_in_thread(transport.close)


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
            await finish_in_thread(wakeups.start)
            self.log.info("queue %s: this trigger is %s", self.queue, wakeups.describe())
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
                await finish_in_thread(wakeups.close)
            await _close(transport)


# -- message trigger (ack mode) ------------------------------------------------------------------------
#: Defaults of the event trigger: most messages in one event, most bytes of one event's payload, and the
#: shortest time between two events of one queue.
DEFAULT_BATCH_SIZE = 500
DEFAULT_MAX_EVENT_BYTES = 1024 * 1024
DEFAULT_EVENT_INTERVAL = 5.0
DEFAULT_MAX_BODY_BYTES = 65536
#: Light traffic: after an event of at most ``LIGHT_EVENT_MESSAGES`` messages the next one may follow
#: ``min_event_interval`` (default 0.5 s) later; after a bigger one (load), ``event_interval`` later. 0.5 s: at one
#: send a second each message gets its own event at once and Airflow's scheduler, whose loop takes about a second,
#: merges what came meanwhile into one run (docs/performance.md, issue 29: 2 s made a trickle's messages wait 0-2 s).
DEFAULT_MIN_EVENT_INTERVAL = 0.5
LIGHT_EVENT_MESSAGES = 10
#: Most events of one watcher emitted and not stored yet.
MAX_EVENTS_IN_FLIGHT = 4
#: While a sweep event is owed, an empty queue is looked at again this often (seconds) until it is due.
SWEEP_CHECK_INTERVAL = 0.25


def _scheduler_may_leave_events() -> bool:
    """Airflow before 3.4 can leave an asset event out of the run the scheduler is creating (apache/airflow#56749:
    one queue row per asset, insert-or-nothing); 3.4's queue rows point at each event."""
    try:
        from importlib.metadata import version

        from packaging.version import Version

        return Version(version("apache-airflow")).release[:2] < (3, 4)
    except Exception:  # noqa: BLE001 - unknown: assume the race
        return True


SCHEDULER_MAY_LEAVE_EVENTS = _scheduler_may_leave_events()


def next_event_gap(last_count: int, event_interval: float, min_event_interval: float) -> float:
    """Seconds the next event keeps after the previous one (of ``last_count`` messages): ``event_interval`` under
    load (more than ``LIGHT_EVENT_MESSAGES``), else ``min_event_interval`` (never more than ``event_interval``).

    The first message after a quiet period goes out at once; messages that arrive within the gap join the next
    event. The next batch is claimed while the previous event is still being stored (on SQLite the claim leases
    its batch: ``LeasedBatch``).

    On Airflow 3.3 an event stored while the scheduler has not yet created the run of the previous event is left
    out of that run and waits for the next event (the scheduler queues a DAG by one row per asset, insert-or-
    nothing, and takes the events up to that row's time). So an event sent close behind another (within
    ``event_interval``, or while the other is not stored yet) always gets a later event behind it: the next
    batch, or, when no message comes, an empty sweep event ``event_interval`` after it (its run takes any event
    left out before; it has no messages). Airflow 3.4 fixed the race: no sweep events there.
    """
    if last_count > LIGHT_EVENT_MESSAGES:
        return event_interval
    return min(min_event_interval, event_interval)


def message_payload(message: ReceivedMessage, max_body_bytes: int | None = None) -> dict[str, Any]:
    """The JSON form of one message in an event (``transport.payload``): ``queue``, ``id``, ``message_id``,
    ``seq``, ``headers``, ``body_size`` and ``body`` (UTF-8 text), ``body_base64`` or ``body_omitted``."""
    return to_payload(message, max_body_bytes=max_body_bytes)


def _size(item: dict[str, Any]) -> int:
    return len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8")) + 1


def batch_payload(queue: str, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The payload of one event: ``{"queue", "count", "first_seq", "last_seq", "messages": [...]}`` (a sweep
    event has no messages: count 0, the sequence bounds None)."""
    return {"queue": queue, "count": len(items), "first_seq": items[0]["seq"] if items else None,
            "last_seq": items[-1]["seq"] if items else None, "messages": list(items)}


def fit_event(messages: Sequence[ReceivedMessage], max_event_bytes: int,
              max_body_bytes: int | None) -> list[dict[str, Any]]:
    """The payloads of the first messages (oldest first) whose JSON fits in ``max_event_bytes``.

    The first message always goes in (its body left out if even alone it does not fit); the caller releases the
    rest back to the queue for the next event.
    """
    items: list[dict[str, Any]] = []
    used = 200  # the envelope: queue, count, first_seq, last_seq
    for message in messages:
        item = message_payload(message, max_body_bytes)
        size = _size(item)
        if used + size > max_event_bytes:
            if items:
                break
            item = message_payload(message, 0 if message.body else None)  # alone and too big: body left out
            size = _size(item)
        items.append(item)
        used += size
    return items


def event_messages(context: Any, queue: str | None = None) -> list[dict[str, Any]]:
    """The messages of the asset events that triggered this DAG run, for a task of an event-driven DAG.

    Each is the JSON form of one message (``id``, ``message_id``, ``seq``, ``queue``, ``headers``, ``body`` or
    ``body_base64``; ``transport.payload.from_payload`` turns one into a ``ReceivedMessage``), in queue order
    (by ``queue`` then ``seq``), each ``id`` once even when a crash delivered it twice. Events of other triggers
    are skipped; ``queue`` keeps only the messages of that queue.

    :param context: the task's context (``get_current_context()`` or the ``**context`` of a ``@task``).
    """
    return messages_of_events((event for events in (context.get("triggering_asset_events") or {}).values()
                               for event in events), queue)


def event_payload_messages(event: Any) -> list[dict[str, Any]] | None:
    """The messages an asset event of ``SqlQueueMessageTrigger`` carries, or None for another trigger's event."""
    extra = getattr(event, "extra", None) or {}
    payload = extra.get("payload") if isinstance(extra, dict) else None
    if not isinstance(payload, dict) or not isinstance(payload.get("messages"), list):
        return None
    return payload["messages"]


def messages_of_events(events: Iterable[Any], queue: str | None = None) -> list[dict[str, Any]]:
    """The messages of asset events (``triggering_asset_events`` or ``inlet_events`` items): queue order, each
    ``id`` once; events of other triggers skipped; ``queue`` keeps only that queue's messages."""
    seen: dict[str, dict[str, Any]] = {}
    for event in events:
        for item in event_payload_messages(event) or ():
            if queue is not None and item.get("queue") != queue:
                continue
            seen.setdefault(str(item.get("id")), item)
    return sorted(seen.values(), key=lambda item: (str(item.get("queue")), int(item.get("seq") or 0)))


class MessagesEvent(TriggerEvent):
    """The event of a claimed batch. Its text (Airflow's triggerer logs every event at INFO) names the queue, the
    count and the sequence range, never a body or a header: messages may hold personal data."""

    def __repr__(self) -> str:
        payload = self.payload if isinstance(self.payload, dict) else {}
        return (f"MessagesEvent<queue={payload.get('queue')!r} count={payload.get('count')} "
                f"seq={payload.get('first_seq')}..{payload.get('last_seq')}>")

    __str__ = __repr__


class RejectedBySubscriberError(SqlQueueError):
    """A trigger refused the event (``reject_shared_stream_event``); its messages go to the error queue."""


class MessageFilteredError(SqlQueueError):
    """A message the watcher's filter refused. It goes to the error queue with the standard failure headers: the
    reason in ``NServiceBus.ExceptionInfo.Message`` and ``NServiceBus.ExceptionInfo.Data.Reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.data = {"Reason": reason, "RefusedBy": "SqlQueueMessageTrigger filter"}


class UnsafeTriggerConfigurationError(SqlQueueError):
    """A watcher configuration that could lose or misroute messages: refused before anything is claimed."""


def enclosed_types(headers: dict[str, Any]) -> list[str]:
    """The .NET full type names in ``NServiceBus.EnclosedMessageTypes`` (assembly parts after a comma dropped)."""
    value = headers.get(ENCLOSED_MESSAGE_TYPES) or ""
    return [part.split(",", 1)[0].strip() for part in str(value).split(";") if part.strip()]


class MessageFilter:
    """What a watcher accepts: one of ``message_types`` (matched against ``NServiceBus.EnclosedMessageTypes``, by
    full type name) and every header of ``match_headers`` with exactly that value. None or empty: no condition."""

    def __init__(self, message_types: Sequence[str] | None, match_headers: dict[str, str] | None) -> None:
        self.message_types = tuple(message_types or ())
        self.match_headers = dict(match_headers or {})

    def __bool__(self) -> bool:
        return bool(self.message_types or self.match_headers)

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple(sorted(self.message_types)), tuple(sorted(self.match_headers.items()))

    def refusal(self, message: ReceivedMessage) -> str | None:
        """Why the filter refuses the message (names the header, never its body), or None."""
        headers = message.headers or {}
        if self.message_types:
            types = enclosed_types(headers)
            if not any(t in self.message_types for t in types):
                return (f"message type {';'.join(types) or '(no ' + ENCLOSED_MESSAGE_TYPES + ' header)'} is not one "
                        f"of the watcher's message_types {list(self.message_types)}")
        for name, wanted in self.match_headers.items():
            if headers.get(name) != wanted:
                found = "missing" if headers.get(name) is None else f"{str(headers.get(name))[:200]!r}"
                return f"header {name!r} is {found}, the watcher's match_headers wants {wanted!r}"
        return None


def _check_filter(message_types: Any, match_headers: Any, owner: str) -> tuple[list[str] | None, dict | None]:
    if isinstance(message_types, str):
        message_types = [message_types]
    if message_types is not None and (not isinstance(message_types, list | tuple) or not all(
            isinstance(t, str) and t.strip() and "," not in t and ";" not in t for t in message_types)):
        raise ValueError(f"{owner}: message_types must be a list of .NET full type names (e.g. "
                         f"['Shop.OrderPlaced']), got {message_types!r}")
    if match_headers is not None and (not isinstance(match_headers, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in match_headers.items())):
        raise ValueError(f"{owner}: match_headers must be a dict of header name to the text it must equal, got "
                         f"{match_headers!r}")
    return (list(message_types) if message_types else None), (dict(match_headers) if match_headers else None)


#: Filters of the watchers running in this process, by (connection, queue): two watchers of one queue with
#: different filters would each send the other's messages to the error queue.
_ACTIVE_FILTERS: dict[tuple[str, str], tuple[tuple[Any, ...], int]] = {}


class ClaimedBatch:
    """The trigger's view of a core ``Claim``: up to N of the oldest rows of one queue, locked (not deleted) in one
    open transaction, emitted as one event and settled together by the outcome Airflow reports for it.

    Every method is blocking: call it through ``finish_in_thread`` (a cancelled caller's clean-up then sees the
    claim its thread opened).
    """

    def __init__(self, transport: SqlQueueTransport, address: QueueAddress) -> None:
        self.transport = transport
        self.address = address
        self.claim: Claim | None = None
        self.messages: list[ReceivedMessage] = []
        #: The messages in the event (the others were released for the next event).
        self.emitted: list[ReceivedMessage] = []
        #: Airflow stored the event (its messages were deleted); False while in flight, failed or rejected.
        self.stored = False
        #: An event without messages (see ``SqlQueueStreamProducer``): the claim found none and was committed.
        self.sweep = False

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
        self.messages = sorted(self.claim.messages, key=lambda m: m.seq)

    def refuse(self, refused: Sequence[tuple[ReceivedMessage, str]]) -> None:
        """Move the messages the filter refused to the error queue (when the claim commits), each with its reason;
        the others stay in the batch."""
        assert self.claim is not None
        gone = set()
        for message, reason in refused:
            self.claim.reject(message, MessageFilteredError(reason))
            gone.add(message.seq)
        self.messages = [m for m in self.messages if m.seq not in gone]

    def keep(self, count: int) -> None:
        """Emit the first ``count`` messages; release the rest (received again by the next claim)."""
        assert self.claim is not None
        self.emitted = self.messages[:count]
        for message in self.messages[count:]:
            self.claim.release(message)

    def settle(self, outcome: AdvanceOutcome) -> None:
        """Settle the event's messages by its outcome and end the claim: stored -> deleted; rejected -> error
        queue; failed or nobody subscribed -> left in the queue (emitted again)."""
        claim = self.claim
        if claim is None or claim.closed:
            return
        self.stored = bool(outcome.is_clean and not outcome.rejected)
        for message in self.emitted:
            if outcome.rejected:
                claim.reject(message, RejectedBySubscriberError("an Airflow trigger rejected the event"))
            elif outcome.is_clean:
                claim.ack(message)
            else:
                claim.release(message)
        claim.commit()

    def commit(self) -> None:
        """End the claim keeping what was settled (rows not settled yet return to the queue)."""
        if self.claim is not None:
            self.claim.commit()

    def abandon(self) -> None:
        """End the claim undoing everything: every row returns to the queue."""
        if self.claim is not None:
            self.claim.abandon()


class LeasedBatch(ClaimedBatch):
    """A claimed batch on a single-writer database (SQLite), whose open claim would hold the write lock until
    Airflow stored the event: ``hold`` moves the emitted messages into the lease table (``transport.leases``) and
    commits the claim before the event is emitted, so senders and the next claim do not wait; ``settle`` ends the
    leases by the event's outcome (stored: deleted; rejected: error queue; failed: back in the queue at their
    positions). ``recover``: the claim first puts back the leased rows of owners that are gone.
    """

    def __init__(self, transport: SqlQueueTransport, address: QueueAddress, leases: Leases,
                 recover: bool = False) -> None:
        super().__init__(transport, address)
        self.leases = leases
        self.recover = recover
        #: Messages in the lease table under this batch (emitted, not settled yet).
        self.held: list[int] = []
        self.returned = 0

    @property
    def released(self) -> int:
        return super().released + self.returned

    def open(self, batch_size: int) -> None:
        self.claim = self.transport.claim(self.address, batch_size,
                                          before=self.leases.recover if self.recover else None)
        self.messages = sorted(self.claim.messages, key=lambda m: m.seq)

    def hold(self) -> None:
        """Lease the emitted messages and commit the claim (it deletes them from the queue; released rows stay)."""
        claim = self.claim
        assert claim is not None
        seqs = [m.seq for m in self.emitted]
        try:
            self.leases.lease(claim.cursor, seqs)
            for message in self.emitted:
                claim.ack(message)
            claim.commit()
        except BaseException:
            claim.abandon()
            raise
        self.leases.leased(len(seqs))
        self.held = seqs

    def settle(self, outcome: AdvanceOutcome) -> None:
        if not self.held:
            super().settle(outcome)
            return
        seqs, self.held = self.held, []
        self.stored = bool(outcome.is_clean and not outcome.rejected)
        if outcome.rejected:
            claim = self.claim
            assert claim is not None

            def dead_letter(cursor: Any) -> None:
                for message in self.emitted:
                    claim.queue.dead_letter(cursor, message.native_id, message.headers, message.body,
                                            RejectedBySubscriberError("an Airflow trigger rejected the event"))

            self.leases.settle(seqs, dead_letter=dead_letter)
        elif outcome.is_clean:
            self.leases.settle(seqs)
        else:
            self.leases.settle(seqs, put_back=seqs)
            self.returned = len(seqs)

    def abandon(self) -> None:
        """Put the leased messages back in the queue (or undo the open claim)."""
        if self.held:
            seqs, self.held = self.held, []
            self.leases.settle(seqs, put_back=seqs)
            self.returned = len(seqs)
        else:
            super().abandon()


class SqlQueueStreamProducer(SharedStreamProducer):
    """The broker side of ``SqlQueueMessageTrigger`` in the triggerer's ack mode.

    ``open_stream`` claims a batch of rows and yields ONE raw event carrying its messages, no sooner than
    ``next_event_gap`` after the previous event. It claims the next batch while earlier events are still being
    stored (up to ``MAX_EVENTS_IN_FLIGHT``): on PostgreSQL and SQL Server claims skip each other's locked rows; on
    SQLite (one writer) each batch is leased (``LeasedBatch``) so that no claim holds the write lock meanwhile.
    ``advance`` deletes a batch once its asset events were stored, moves a rejected batch to the error queue, and
    leaves a failed one in the queue (emitted again). Where Airflow's scheduler can leave an
    event out of a run (before 3.4), an event close behind another is followed, when nothing comes after it, by
    an empty sweep event ``event_interval`` later (see ``next_event_gap``). See ``SqlQueueMessageTrigger`` for the
    parameters.
    """

    def __init__(self, conn_id: str, queue_name: str, batch_size: int = DEFAULT_BATCH_SIZE,
                 poll_interval: float = 2.0, error_queue: str = "error",
                 max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES, event_interval: float = DEFAULT_EVENT_INTERVAL,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, max_poll_interval: float | None = None,
                 message_types: Sequence[str] | None = None, match_headers: dict[str, str] | None = None,
                 allow_delete_before_stored: bool = False,
                 min_event_interval: float = DEFAULT_MIN_EVENT_INTERVAL) -> None:
        self.conn_id = conn_id
        self.filter = MessageFilter(message_types, match_headers)
        self.allow_delete_before_stored = allow_delete_before_stored
        self._registered: tuple[str, str] | None = None
        self.queue_name = queue_name
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.error_queue = error_queue
        self.max_body_bytes = max_body_bytes
        self.event_interval = event_interval
        self.min_event_interval = min_event_interval
        self.max_event_bytes = max_event_bytes
        self.transport: SqlQueueTransport | None = None
        self._connection: Any = None
        self._leases: Leases | None = None  # SQLite: this producer's lease owner (LeasedBatch)
        #: Claims whose event was emitted and not advanced yet, oldest first, by claim number.
        self._in_flight: dict[int, ClaimedBatch] = {}
        self._opening: ClaimedBatch | None = None  # the claim being opened or looked at, not emitted yet
        self._settled = asyncio.Event()
        self._failed = False  # an event was not stored: its messages are emitted again after poll_interval
        self._closing = False
        self._last_event = float("-inf")
        self._gap = 0.0  # what the next event keeps after the last one (next_event_gap)
        #: An event went out close behind another (the scheduler may have left it out of a run): a later event
        #: must follow it, a sweep event when no message comes.
        self._sweep_owed = False
        self.sweep_events = SCHEDULER_MAY_LEAVE_EVENTS

    @property
    def _claim(self) -> ClaimedBatch | None:
        """The newest claim in flight (or being opened), None when there is none."""
        if self._opening is not None:
            return self._opening
        return next(reversed(self._in_flight.values()), None)

    async def _wait_settled(self, most: int) -> None:
        """Wait until at most ``most`` events are in flight."""
        while len(self._in_flight) > most and not self._closing:
            self._settled.clear()
            await self._settled.wait()

    async def open_stream(self) -> AsyncIterator[tuple[dict[str, Any], int]]:
        self.transport, self._connection = await get_transport(self.conn_id, error_queue=self.error_queue)
        address = self.transport.address(self.queue_name)
        name = self.transport.name(address)
        await finish_in_thread(self.check_startup, name)  # refuse a lossy configuration before claiming
        loop = asyncio.get_running_loop()
        failures = 0
        most_in_flight = MAX_EVENTS_IN_FLIGHT - 1
        # SQLite: an open claim would hold the write lock until Airflow stored the event; a leased one does not
        leases = self._leases = self.transport.leases(address) if self.transport.dialect.single_writer else None
        renewing: asyncio.Task[None] | None = None
        recovered_at = float("-inf")
        busy = False  # the last claim found rows
        if leases is not None:
            await finish_in_thread(leases.create)
            renewing = asyncio.create_task(self._renew(leases, name))
        wakeups = self.transport.wakeups(address, self.poll_interval, self.max_poll_interval)
        await finish_in_thread(wakeups.start)  # before the first claim: no send is missed in between
        log.info("queue %s: this trigger is %s", name, wakeups.describe())
        try:
            while not self._closing:
                wait = self._last_event + self._gap - loop.time()
                if wait > 0:  # events spaced by next_event_gap: messages meanwhile join the next batch
                    await asyncio.sleep(wait)
                await self._wait_settled(most_in_flight)
                if self._failed and not self._closing:  # a failed event is emitted again, not in a tight loop
                    self._failed = False
                    await asyncio.sleep(self.poll_interval)
                if self._closing:
                    break
                claim: ClaimedBatch
                if leases is not None:  # gone owners' leases are put back first: at start, then every
                    # RECOVER_EVERY while messages come (an idle watcher makes no statement more than before)
                    recover = recovered_at == float("-inf") or (
                        busy and loop.time() - recovered_at >= RECOVER_EVERY)
                    recovered_at = loop.time() if recover else recovered_at
                    claim = LeasedBatch(self.transport, address, leases, recover)
                else:
                    claim = ClaimedBatch(self.transport, address)
                self._opening = claim
                try:
                    await finish_in_thread(claim.open, self.batch_size)
                    failures = 0
                    busy = claim.locked > 0
                except Exception as exc:
                    self._opening = None
                    failures += 1
                    await self._retry_after(exc, failures, f"claiming messages of {name}")
                    continue
                if self.filter and claim.messages:
                    refused = [(m, r) for m in claim.messages if (r := self.filter.refusal(m)) is not None]
                    if refused:
                        await finish_in_thread(claim.refuse, refused)
                        log.info("queue %s: %d messages refused by the filter, moved to %s", name, len(refused),
                                 self.error_queue)
                        metrics.incr("trigger_refused", self.conn_id, name, len(refused))
                if not claim.messages:
                    await finish_in_thread(claim.commit)  # keeps the drops of expired and poison rows
                    self._opening = None
                    if self._sweep_owed and not self._in_flight and loop.time() >= self._last_event + \
                            self.event_interval:
                        claim.sweep = True  # nothing came after an event close behind another: sweep
                        self._in_flight[claim.number] = claim
                        self._sweep_owed = False
                        self._last_event, self._gap = loop.time(), self.min_event_interval
                        log.info("queue %s: one sweep event (no messages) so that Airflow runs the event before it",
                                 name)
                        yield batch_payload(name, []), claim.number
                        continue
                    if not claim.locked:  # empty: a wake-up, the poll interval, or the idle back-off
                        if self._sweep_owed:  # look again soon: the sweep is due event_interval after the event
                            await asyncio.sleep(min(SWEEP_CHECK_INTERVAL, self.poll_interval))
                        else:
                            await wakeups.wait_async(found=False)
                    continue
                wakeups.next_pause(found=True)  # messages: the idle back-off starts over
                close_behind = bool(self._in_flight) or loop.time() - self._last_event < self.event_interval
                items = fit_event(claim.messages, self.max_event_bytes, self.max_body_bytes)
                if len(items) < len(claim.messages):
                    await finish_in_thread(claim.keep, len(items))
                else:
                    claim.emitted = claim.messages
                if isinstance(claim, LeasedBatch):
                    try:
                        await finish_in_thread(claim.hold)
                    except Exception as exc:  # the claim was undone: every row is back in the queue
                        self._opening = None
                        failures += 1
                        await self._retry_after(exc, failures, f"leasing messages of {name}")
                        continue
                payload = batch_payload(name, items)
                log.info("queue %s: one event for %d messages (seq %s..%s, %d bytes of bodies)%s", name,
                         len(items), payload["first_seq"], payload["last_seq"],
                         sum(len(m.body or b"") for m in claim.emitted),
                         f"; {len(claim.messages) - len(items)} left for the next event"
                         if len(items) < len(claim.messages) else "")
                log.debug("queue %s: event ids %s", name, [item["id"] for item in items])
                self._sweep_owed = self.sweep_events and close_behind
                self._last_event = loop.time()
                self._gap = next_event_gap(len(items), self.event_interval, self.min_event_interval)
                metrics.incr("trigger_events", self.conn_id, name)
                metrics.incr("trigger_messages", self.conn_id, name, len(items))
                self._in_flight[claim.number] = claim
                self._opening = None
                yield payload, claim.number
        finally:  # closed early (cancelled, or the consumer left): nothing claimed stays locked
            if renewing is not None:
                renewing.cancel()
            await self._abandon_all()
            if leases is not None:
                leases.close()
            await finish_in_thread(wakeups.close)
            self._unregister()

    async def _retry_after(self, exc: Exception, failures: int, what: str) -> None:
        """After the ``failures``-th failure in a row: raise it unless transient and under the limit, else wait."""
        assert self.transport is not None
        if not _is_transient(self.transport, exc) or failures >= MAX_TRANSIENT_FAILURES:
            raise exc
        log.warning("%s failed (%d/%d), retrying: %s", what, failures, MAX_TRANSIENT_FAILURES,
                    describe_error(exc, self._connection))
        await asyncio.sleep(self.poll_interval)

    @staticmethod
    async def _renew(leases: Leases, name: str) -> None:
        """Renew the leases this producer holds, every ``RENEW_EVERY`` seconds, while it runs."""
        while True:
            await asyncio.sleep(RENEW_EVERY)
            try:
                await asyncio.to_thread(leases.renew)
            except Exception as exc:  # noqa: BLE001 - tried again next time; the lease lasts several periods
                log.warning("queue %s: renewing the leases failed, trying again in %s s: %s", name, RENEW_EVERY,
                            describe_error(exc))

    async def _abandon_all(self) -> None:
        """Undo every claim not settled yet (their rows return to the queue), each one even when this is
        cancelled meanwhile (the cancellation is raised after the last)."""
        claims = [c for c in (self._opening, *self._in_flight.values()) if c is not None]
        self._opening = None
        self._in_flight.clear()
        cancelled: asyncio.CancelledError | None = None
        for claim in claims:
            try:
                await finish_in_thread(claim.abandon)
            except asyncio.CancelledError as exc:
                cancelled = exc
            except Exception as exc:  # noqa: BLE001 - the next claims are undone all the same
                log.warning("queue %s: undoing a claim failed (its rows return when its connection or lease ends): "
                            "%s", self.queue_name, describe_error(exc, self._connection))
        self._settled.set()
        if cancelled is not None:
            raise cancelled

    def check_startup(self, name: str) -> None:
        """Refuse, before anything is claimed, a configuration that could lose or misroute messages: an error
        queue that is the watched queue or does not exist (refused and unreadable messages have nowhere to go), or
        a second watcher of the same queue in this triggerer with another filter (each would move the other's
        messages to the error queue). Blocks: run it in a thread."""
        transport = self.transport
        assert transport is not None
        error = transport.name(self.error_queue)
        if error == name:
            raise UnsafeTriggerConfigurationError(
                f"watcher of {name}: error_queue is the watched queue itself; refused messages would come back "
                "forever. Give another error_queue (default 'error')")
        if not transport.exists(self.error_queue):
            raise UnsafeTriggerConfigurationError(
                f"watcher of {name}: the error queue {error} does not exist; refused and unreadable messages would "
                f"have nowhere to go, so nothing is claimed. Create it (`sqlqueue create {error}`) or name an "
                "existing one in error_queue")
        key = (self.conn_id, name)
        known = _ACTIVE_FILTERS.get(key)
        if known is not None and known[0] != self.filter.key:
            raise UnsafeTriggerConfigurationError(
                f"watcher of {name}: another watcher of the same queue runs with another filter (message_types, "
                "match_headers); each would move the other's messages to the error queue. Give every watcher of a "
                "queue the same filter, or route each message type to a queue of its own")
        _ACTIVE_FILTERS[key] = (self.filter.key, (known[1] if known else 0) + 1)
        self._registered = key

    def _unregister(self) -> None:
        key, self._registered = self._registered, None
        if key is not None and key in _ACTIVE_FILTERS:
            filter_key, count = _ACTIVE_FILTERS[key]
            if count <= 1:
                del _ACTIVE_FILTERS[key]
            else:
                _ACTIVE_FILTERS[key] = (filter_key, count - 1)

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        for item in batch:
            claim = self._in_flight.get(item.broker_payload) if isinstance(item.broker_payload, int) else None
            if claim is None:
                log.warning("advance of an event of an ended claim ignored (its messages were returned to %s)",
                            self.queue_name)
                continue
            if claim.sweep:
                claim.stored = bool(item.outcome.is_clean and not item.outcome.rejected)
            else:
                await finish_in_thread(claim.settle, item.outcome)
            self._in_flight.pop(item.broker_payload, None)
            if not claim.stored:
                if claim.sweep:  # a sweep that a subscriber failed to store is sent again (none without subscribers)
                    again = item.outcome.failed > 0
                    self._failed = self._failed or again
                    self._sweep_owed = self._sweep_owed or (self.sweep_events and again)
                else:
                    self._failed = self._failed or bool(claim.released)
            self._settled.set()

    async def aclose(self) -> None:
        self._closing = True
        self._unregister()
        await self._abandon_all()
        transport, self.transport = self.transport, None
        await _close(transport)


class SqlQueueMessageTrigger(BaseEventTrigger):
    """Asset events carrying the messages of a queue, for ``AssetWatcher``: messages schedule DAG runs.

    Each event carries one claimed batch: up to ``batch_size`` of the oldest messages and at most
    ``max_event_bytes`` of JSON. The first message after a quiet period goes out at once; after that, events
    keep a gap (``next_event_gap``): ``min_event_interval`` (0.5 s) after an event of at most 10 messages (light
    traffic, such as one send a second), ``event_interval`` (5 s) after a bigger one (load). Messages that arrive
    within the gap join the next event. On PostgreSQL and SQL Server the next batch is claimed while the previous
    event is still being stored (Airflow confirms an event about 2 s after it is emitted); on SQLite too, whose
    claim leases its batch (``LeasedBatch``) rather than hold the write lock meanwhile. Spaced events are what
    Airflow 3.3's scheduler turns into DAG runs without
    leaving events behind (an event stored before the scheduler created the run of the previous one waits for the
    next event: apache/airflow#56749); one event per message hit that on most bursts. So on Airflow before 3.4 an
    event close behind another (within ``event_interval``, or while that one is not stored yet) that no message
    follows gets an empty sweep event ``event_interval`` after it: a DAG run without messages, which takes along
    any event the scheduler left out.

    The triggerer runs it in ack mode: the batch is claimed (locked, not deleted) when its event is emitted and
    deleted only after Airflow stored the asset event. On SQLite the claim moves the batch into the lease table
    under a lease its live trigger renews (senders do not wait for the event); the rows of a gone owner go back
    into the queue at their positions and are emitted first. Two live triggerers never emit the same message. Guarantee:
    every message is in a stored event at least once; if the triggerer dies after Airflow stored the event but
    before the delete committed, the batch is emitted again (duplicates only after a crash, always with the same
    ``id``). A failed event is emitted again; a rejected one goes to the error queue. Several DAGs watching the
    same queue share one poll, and the batch is deleted once all of them stored their events.

    The payload (stored as the asset event's ``extra["payload"]``) is ``{"queue", "count", "first_seq",
    "last_seq", "messages": [...]}``, each message ``{"queue", "id", "message_id", "seq", "headers",
    "body_size", "body" | "body_base64" | "body_omitted"}``. A run can hold several events: iterate with
    ``event_messages(context)`` (queue order, each ``id`` once) and make the work idempotent by ``id``.

    :param conn_id: an Airflow connection of type ``mssql``, ``odbc``, ``postgres`` or ``sqlite``.
    :param queue_name: the queue address.
    :param batch_size: most messages in one event (default 500).
    :param poll_interval: seconds between two polls of an empty queue (at least 0.1).
    :param error_queue: where rejected messages and rows with unreadable headers go.
    :param max_body_bytes: bodies larger than this are left out of the payload (None: never).
    :param event_interval: shortest time in seconds between two events of this queue under load, after an event
        of more than 10 messages (default 5).
    :param min_event_interval: shortest time in seconds between two events of this queue under light traffic,
        after an event of at most 10 messages (default 0.5; never more than ``event_interval``).
    :param max_event_bytes: most bytes of one event's payload (default 1 MiB); messages that do not fit stay
        in the queue for the next event.
    :param max_poll_interval: the longest pause between polls while the queue stays empty (idle back-off;
        default 4 x ``poll_interval``). On a PostgreSQL queue with the wake-up trigger (``notify=True``) a send
        wakes the trigger at once and ``poll_interval`` is only the fallback period.
    :param message_types: accept only messages whose ``NServiceBus.EnclosedMessageTypes`` names one of these
        .NET full type names; the others go to ``error_queue`` with the reason (None: every type).
    :param match_headers: accept only messages whose headers have exactly these values; the others go to
        ``error_queue`` with the reason (None: no condition).
    :param allow_delete_before_stored: let ``run()`` (outside the triggerer's ack mode) delete a batch as soon as
        its event was taken, before Airflow stored it: a triggerer crash then loses that batch. Refused by default.

    Refused at start-up, before anything is claimed: an ``error_queue`` that does not exist or is the watched
    queue, and two watchers of one queue in one triggerer with different filters.
    """

    def __init__(self, conn_id: str, queue_name: str, batch_size: int = DEFAULT_BATCH_SIZE,
                 poll_interval: float = 2.0, error_queue: str = "error",
                 max_body_bytes: int | None = DEFAULT_MAX_BODY_BYTES, event_interval: float = DEFAULT_EVENT_INTERVAL,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, max_poll_interval: float | None = None,
                 message_types: Sequence[str] | None = None, match_headers: dict[str, str] | None = None,
                 allow_delete_before_stored: bool = False,
                 min_event_interval: float = DEFAULT_MIN_EVENT_INTERVAL) -> None:
        super().__init__()
        self.message_types, self.match_headers = _check_filter(message_types, match_headers, type(self).__name__)
        self.allow_delete_before_stored = bool(allow_delete_before_stored)
        check_count(batch_size, "batch_size")
        check_count(max_event_bytes, "max_event_bytes")
        if not is_number(event_interval) or event_interval < 0:
            raise ValueError(f"{type(self).__name__}: event_interval must be a number of seconds >= 0, got "
                             f"{event_interval!r}")
        if not is_number(min_event_interval) or min_event_interval < 0:
            raise ValueError(f"{type(self).__name__}: min_event_interval must be a number of seconds >= 0, got "
                             f"{min_event_interval!r}")
        self.conn_id = conn_id
        self.queue_name = queue_name
        self.batch_size = batch_size
        self.poll_interval = check_poll_interval(poll_interval, type(self).__name__)
        self.error_queue = error_queue
        self.max_body_bytes = max_body_bytes
        self.event_interval = float(event_interval)
        self.min_event_interval = float(min_event_interval)
        self.max_event_bytes = max_event_bytes
        self.max_poll_interval = max_poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"conn_id": self.conn_id, "queue_name": self.queue_name, "batch_size": self.batch_size,
                 "poll_interval": self.poll_interval, "error_queue": self.error_queue,
                 "max_body_bytes": self.max_body_bytes, "event_interval": self.event_interval,
                 "max_event_bytes": self.max_event_bytes, "max_poll_interval": self.max_poll_interval,
                 "message_types": self.message_types, "match_headers": self.match_headers,
                 "allow_delete_before_stored": self.allow_delete_before_stored,
                 "min_event_interval": self.min_event_interval})

    def shared_stream_key(self) -> Hashable | None:
        return ("airflow_sqlqueue", self.conn_id, self.queue_name, self.error_queue,
                MessageFilter(self.message_types, self.match_headers).key)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SqlQueueStreamProducer:
        return SqlQueueStreamProducer(**kwargs)

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for raw_event in shared_stream:
            yield MessagesEvent(raw_event)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Fallback outside ack mode: a batch is deleted once the triggerer took its event (not stored), so a crash
        can lose it; refused unless ``allow_delete_before_stored``."""
        if not self.allow_delete_before_stored:
            raise UnsafeTriggerConfigurationError(
                f"{type(self).__name__} on {self.queue_name!r} was run outside the triggerer's ack mode (run() "
                "instead of the shared stream): a batch would be deleted before Airflow stored its event, and a crash "
                "would lose it. Run it in an AssetWatcher on Airflow 3.3 or later, or pass "
                "allow_delete_before_stored=True to accept that")
        producer = self.create_shared_stream_producer(self.serialize()[1])
        try:
            async with aclosing(producer.open_stream()) as stream:
                async for raw_event, broker_payload in stream:
                    yield MessagesEvent(raw_event)
                    await producer.advance([AdvanceItem(broker_payload, AdvanceOutcome(acked=1, failed=0))])
        finally:
            await producer.aclose()
