"""Native publish/subscribe, interoperable with NServiceBus endpoints: the shared subscription table.

The table (``SubscriptionRouting`` by default) holds one row per (Endpoint, Topic) with the QueueAddress the
endpoint receives on. A topic is the .NET full type name of an event; an event's topics are its type, its base
types and its interfaces. Publishing sends one copy of the event to each distinct queue subscribed to any of its
topics, in one transaction: every copy, or none.

The table is routing configuration that .NET endpoints write too; every address read from it is parsed and
validated for the dialect and must name an existing queue, or the publish fails and sends nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..common.errors import InvalidAddressError, InvalidMessageError, QueueNotFoundError
from ..common.validation import check_stored_text
from ..processing.sending import Outbox
from ..tables.queue import QueueBook, TableQueue
from ..tables.session import Session
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.messages import OutgoingMessage
from ..wire.standard_headers import PUBLISH, Origin, standard_headers

log = logging.getLogger(__name__)

#: Name upstream gives the subscription table.
DEFAULT_SUBSCRIPTION_TABLE = "SubscriptionRouting"
#: Width of the three columns (varchar(200) / nvarchar(200)).
MAX_NAME = 200


@dataclass(frozen=True)
class Subscription:
    """One row of the subscription table."""

    queue_address: str
    endpoint: str
    topic: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class PublishResult:
    """Where a published event went: the native Id of each copy by canonical queue name, and its MessageId."""

    message_id: str
    topics: list[str]
    sent: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _name(value: Any, what: str) -> str:
    return check_stored_text(value, what, MAX_NAME, "the subscription table")


def topics_of(event_type: str, base_types: Iterable[str] = ()) -> list[str]:
    """The topics of an event: its .NET full type name, then its base types and interfaces (checked, no repeats)."""
    if isinstance(base_types, str):
        base_types = [base_types]
    names = [_name(event_type, "event type")] + [_name(t, "base type") for t in base_types]
    return list(dict.fromkeys(names))


class PubSub:
    """Subscribe, unsubscribe, list and publish on one subscription table.

    :param session: the transport's session.
    :param book: the transport's queues.
    :param outbox: the transport's outbox (publishes go through it like every send).
    :param table: the subscription table's address.
    """

    def __init__(self, session: Session, book: QueueBook, outbox: Outbox, table: QueueAddress) -> None:
        self.session = session
        self.book = book
        self.outbox = outbox
        self.dialect = book.dialect
        self.table = table
        self.name = self.dialect.format_address(table)
        self.ids = self.dialect.identifiers(table)

    def _run(self, work: Any, what: str, read_only: bool = False) -> Any:
        """``session.run``, with a clear error when the subscription table itself is missing."""
        try:
            return self.session.run(work, what=what, read_only=read_only)
        except QueueNotFoundError as exc:
            if not self.session.run(lambda cur: self.dialect.table_exists(cur, self.table), what=what,
                                    read_only=True):
                raise QueueNotFoundError(
                    f"the subscription table {self.name!r} does not exist; create it with "
                    "`sqlqueue subscribe --create-table` or SqlQueueTransport.create_subscription_table() "
                    "(or let a .NET endpoint with native publish/subscribe create it)") from exc
            raise

    # -- the table ------------------------------------------------------------------------------------------
    def create_table(self) -> bool:
        """Create the subscription table unless it exists; True when this call created it. A .NET endpoint
        creating it at the same moment is tolerated (its duplicate-object error counts as created)."""
        if self.session.run(lambda cur: self.dialect.table_exists(cur, self.table), what="subscription table",
                            read_only=True):
            return False
        try:
            self.session.run(lambda cur: self.dialect.execute(cur, "create_subscription_table", None, **self.ids),
                             what=f"create subscription table {self.name!r}")
        except Exception:
            if self.session.run(lambda cur: self.dialect.table_exists(cur, self.table), what="subscription table",
                                read_only=True):
                log.debug("%s was created by a concurrent creator", self.name)
                return False
            raise
        return True

    def ddl(self) -> str:
        """The statement that creates the subscription table, for a DBA to review."""
        return self.dialect.render("create_subscription_table", **self.ids)

    # -- subscriptions --------------------------------------------------------------------------------------
    def subscribe(self, queue: TableQueue, topics: Iterable[str], endpoint: str | None = None) -> list[Subscription]:
        """Subscribe ``queue`` (as endpoint ``endpoint``, default its table name, as a .NET endpoint's input queue
        is named after it) to ``topics``; an existing
        subscription of that endpoint to a topic gets this queue address. Idempotent."""
        endpoint = _name(endpoint or queue.address.table, "endpoint")
        address = _name(queue.wire, "queue address")
        wanted = [Subscription(address, endpoint, t) for t in topics_of(*_split(topics))]

        def work(cur: Any) -> None:
            self.book.require(cur, queue)
            for row in wanted:
                self.dialect.execute(cur, "subscribe", {"queue_address": row.queue_address, "topic": row.topic,
                                                        "endpoint": row.endpoint}, **self.ids)

        self._run(work, f"subscribe {queue.name!r} in {self.name!r}")
        return wanted

    def unsubscribe(self, endpoint: str, topics: Iterable[str]) -> int:
        """Remove the endpoint's subscriptions to ``topics``; return how many rows went."""
        endpoint = _name(endpoint, "endpoint")
        names = topics_of(*_split(topics))

        def work(cur: Any) -> int:
            removed = 0
            for topic in names:
                count = self.dialect.execute(cur, "unsubscribe", {"endpoint": endpoint, "topic": topic},
                                             **self.ids).rowcount
                removed += max(count or 0, 0)
            return removed

        return self._run(work, f"unsubscribe {endpoint!r} in {self.name!r}")

    def subscriptions(self) -> list[Subscription]:
        """Every row of the subscription table, by topic."""
        rows = self._run(lambda cur: self.dialect.execute(cur, "list_subscriptions", None, **self.ids).fetchall(),
                         f"list {self.name!r}", read_only=True)
        return [Subscription(str(a), str(e), str(t)) for a, e, t in rows]

    def subscribers(self, cursor: Any, topics: list[str]) -> list[TableQueue]:
        """The distinct queues subscribed to any of ``topics`` (read on ``cursor``), in first-seen order."""
        found: dict[QueueAddress, TableQueue] = {}
        for topic in topics:
            for (text,) in self.dialect.execute(cursor, "subscribers", {"topic": topic}, **self.ids).fetchall():
                try:
                    queue = self.book.queue(self.book.address(str(text)))
                except InvalidAddressError as exc:
                    raise InvalidAddressError(f"the subscription table {self.name!r} holds {text!r} for topic "
                                              f"{topic!r}, which is not a queue address: {exc}") from None
                found.setdefault(queue.address, queue)
        return list(found.values())

    # -- publish --------------------------------------------------------------------------------------------
    def publish(self, event_type: str, message: OutgoingMessage | bytes | str, *, base_types: Iterable[str] = (),
                origin: Origin | None = None) -> PublishResult:
        """Send one copy of the event to every queue subscribed to its topics, in one transaction.

        The copies share one ``NServiceBus.MessageId`` and carry intent ``Publish`` and, unless the message sets
        it, ``NServiceBus.EnclosedMessageTypes`` listing the topics. A subscribed queue that does not exist fails
        the publish: nothing is sent.
        """
        topics = topics_of(event_type, base_types)
        message = message if isinstance(message, OutgoingMessage) else OutgoingMessage(body=message)
        if not isinstance(message.headers, Mapping):
            message.validated()  # the clear error for headers that are not a mapping
        message_id = str(uuid.uuid4())
        base = (origin or self.outbox.origin).with_intent(PUBLISH)
        headers = {**standard_headers(base, message_id, content_type=message.content_type),
                   h.ENCLOSED_MESSAGE_TYPES: ";".join(topics), **message.headers}
        copy = OutgoingMessage(message.body, headers, message.time_to_be_received, message.delay)
        copy.validated()  # a bad message fails before the database is touched

        def work(cur: Any) -> dict[str, str]:
            sent: dict[str, str] = {}
            for queue in self.subscribers(cur, topics):
                prepared = self.outbox.prepare(queue, [copy], raw=True)
                self.outbox.require_destinations(cur, prepared)
                ids = self.outbox.write(cur, prepared)
                sent[queue.name] = str(ids[0]) if ids else ""
            return sent

        sent = self._run(work, f"publish {event_type!r}")
        if not sent:
            log.info("published %s to no subscriber (topics %s)", event_type, topics)
        return PublishResult(message_id, topics, sent)


def _split(topics: Iterable[str]) -> tuple[str, list[str]]:
    """(first topic, the others) of a non-empty list of topics."""
    items = [topics] if isinstance(topics, str) else list(topics)
    if not items:
        raise InvalidMessageError("give at least one topic (the .NET full type name of an event)")
    return items[0], items[1:]
