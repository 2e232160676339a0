"""``SqlQueueTransport``: every queue operation on one database, over any DB-API connection.

The façade: it parses arguments and hands the work to the floors below it (the operations ``pump``, ``drain``,
``maintenance``, ...; the ``ErrorQueue``), which use the session, the queues and the claim; nothing below imports it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from .common.validation import check_count
from .dialects import Dialect, Finding, RawRow, get_dialect
from .dialects.connect import connection_factory, default_catalog_of, paramstyle_of
from .errorqueue.error_queue import ErrorQueue, RetrySummary
from .errorqueue.groups import Selector
from .errorqueue.previews import FailedFilter, FailedPreview, Position
from .operations.drain import ColumnSink, DrainSummary, Sink, drain
from .operations.inbox import DEFAULT_INBOX_TABLE, Inbox
from .operations.maintenance import check, purge_expired
from .operations.partitions import DEFAULT_MAX_PARTITIONS, DEFAULT_MESSAGES_PER_PARTITION, Partition, plan_partitions
from .operations.pubsub import DEFAULT_SUBSCRIPTION_TABLE, PublishResult, PubSub, Subscription
from .operations.pump import MessagePump, ProcessSummary
from .operations.wakeups import Wakeups
from .processing.claim import Claim, take_once
from .processing.lease import Leases
from .processing.modes import TransactionMode
from .processing.recoverability import Recoverability
from .processing.sending import Outbox
from .tables.circuit_breaker import CircuitBreaker
from .tables.queue import FIRST_SEQ, QueueBook, ReceiveStats, SeqRange
from .tables.session import Session
from .wire import headers as h
from .wire.address import QueueAddress
from .wire.failures import FailureInfoStorage
from .wire.messages import OutgoingMessage, ReceivedMessage

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PURGE_BATCH = 10_000
DEFAULT_DELAYED_BATCH = 100


@dataclass
class ReceivedBatch:
    """Messages taken in one transaction, and the rows dropped or moved on the way."""

    messages: list[ReceivedMessage] = field(default_factory=list)
    stats: ReceiveStats = field(default_factory=ReceiveStats)


class SqlQueueTransport:
    """Queue operations on one database.

    :param connect: a callable returning a new DB-API connection (called again after a connection is lost).
    :param dialect: ``"mssql"``, ``"postgres"``, ``"sqlite"`` or a Dialect object.
    :param error_queue: where poison rows and messages that exhausted their retries go.
    :param forward_to: queues a receiver of this transport may forward a message to when a row's
        ``NServiceBus.SqlServer.ForwardDestination`` names them (besides its own queue and the error queue);
        a row naming any other queue goes to the error queue.
    :param endpoint: the NServiceBus endpoint name this transport sends and processes as
        (``NServiceBus.OriginatingEndpoint`` on sends, ``NServiceBus.ProcessingEndpoint`` on error rows);
        default: the queue's table name on error rows, ``SQLQUEUE_ENDPOINT`` or ``airflow`` on sends.
    :param subscription_table: the subscription table shared with .NET endpoints (publish/subscribe).
    :param inbox_table: the inbox (deduplication) table of consumers that handle each message once
        (``create_inbox``, ``inbox.mark``).
    """

    def __init__(self, connect: Callable[[], Any], dialect: str | Dialect, *, error_queue: str = "error",
                 forward_to: Iterable[str] = (), endpoint: str | None = None,
                 subscription_table: str = DEFAULT_SUBSCRIPTION_TABLE, inbox_table: str = DEFAULT_INBOX_TABLE) -> None:
        self.dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
        self.session = Session(connect, self.dialect)
        self.book = QueueBook(self.dialect, error_queue, forward_to, endpoint)
        self.outbox = Outbox(self.book)
        self.pubsub = PubSub(self.session, self.book, self.outbox, self.book.address(subscription_table))
        self.inbox = Inbox(self.session, self.book.address(inbox_table))
        self.error_queue = self.book.error.address
        self._connection_limit: int | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SqlQueueTransport:
        """A transport for ``sqlite:///path``, ``postgresql://...``, ``mssql+pymssql://...``, ``mssql+pyodbc://...``."""
        connect, dialect = connection_factory(url)
        return cls(connect, get_dialect(dialect, paramstyle_of(url), default_catalog_of(url)), **kwargs)

    def close(self) -> None:
        """Close pooled connections."""
        self.session.close()

    def __enter__(self) -> SqlQueueTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses -------------------------------------------------------------------------------
    def address(self, queue: str | QueueAddress) -> QueueAddress:
        """Parse and validate a queue address for this dialect."""
        return self.book.address(queue)

    def name(self, queue: str | QueueAddress) -> str:
        """Canonical text of a queue address."""
        return self.book.queue(queue).name

    def wire_address(self, queue: str | QueueAddress) -> str:
        """The address of a queue as headers carry it (``FailedQ``, forward and reply addresses):
        ``Table@[schema]@[catalog]`` on SQL Server, ``"schema"."table"`` on PostgreSQL."""
        return self.book.queue(queue).wire

    # -- running statements ----------------------------------------------------------------------
    def run(self, work: Callable[[Any], T], *, what: str = "", read_only: bool = False) -> T:
        """Run ``work(cursor)`` in one transaction; deadlocks are retried, missing tables explained.

        ``read_only`` work (peek, browse, discovery, checks) does not wait for SQLite's write lock.
        """
        return self.session.run(work, what=what, read_only=read_only)

    def explain(self, exc: Exception, what: str) -> Exception:
        """Turn a driver error into a clear one where we know what it means."""
        return self.session.explain(exc, what)

    # -- provisioning ----------------------------------------------------------------------------
    def create_queue(self, queue: str | QueueAddress, *, delayed: bool = False, notify: bool = False) -> None:
        """Create a queue table (and its ``.Delayed`` table); idempotent and safe under concurrent creators.

        :param notify: also install the PostgreSQL wake-up trigger (see ``enable_notifications``).
        """
        address = self.address(queue)
        self._check_notify(notify)

        def attempt() -> None:
            with self.session.connection() as conn:
                self.dialect.create_queue(conn, address, delayed)

        try:
            self.session.retry.call(attempt, f"create queue {self.name(address)!r}")
        except Exception as exc:
            raise self.explain(exc, f"create queue {self.name(address)!r}") from exc
        if notify:
            self.enable_notifications(address)

    def create_queues(self, queues: Iterable[str | QueueAddress], *, delayed: bool = False,
                      notify: bool = False) -> list[str]:
        """Create several queues; return their canonical names."""
        names = [self.name(q) for q in queues]  # validate all before creating any
        self._check_notify(notify)
        for name in names:
            self.create_queue(name, delayed=delayed, notify=notify)
        return names

    def ddl(self, queues: Iterable[str | QueueAddress], *, delayed: bool = False, notify: bool = False) -> str:
        """The DDL script that creates the queues, for a DBA to review (no connection used)."""
        return ddl_script(self.dialect, queues, delayed=delayed, notify=notify)

    def enable_notifications(self, queue: str | QueueAddress) -> None:
        """Install the queue's wake-up trigger (PostgreSQL only; idempotent): run once per statement that inserts
        into the queue, it sends ``NOTIFY sqlqueue`` only while a watcher waits (one notifying transaction per
        queue at a time), so watchers (the sensor, the event trigger) wake at once instead of at their next poll.
        Senders, .NET ones included, write exactly what they wrote before."""
        address = self.address(queue)
        self._check_notify(True)

        def attempt() -> None:
            with self.session.connection() as conn:
                self.dialect.install_notify(conn, address)

        what = f"install the wake-up trigger on {self.name(address)!r}"
        try:
            self.session.retry.call(attempt, what)
        except Exception as exc:
            raise self.explain(exc, what) from exc

    def disable_notifications(self, queue: str | QueueAddress) -> None:
        """Remove the queue's wake-up trigger (PostgreSQL only; idempotent). Watchers fall back to polling."""
        address = self.address(queue)
        self._check_notify(True)
        with self.session.connection() as conn:
            self.dialect.uninstall_notify(conn, address)

    def wakeups(self, queue: str | QueueAddress, poll_interval: float, max_poll_interval: float | None = None, *,
                push: bool = True) -> Wakeups:
        """A ``Wakeups`` for a watcher of ``queue``: push when the queue has its wake-up trigger, else polling
        with an idle back-off (see ``transport/wakeups.py``). Close it when done."""
        return Wakeups(self.session, self.book.queue(queue), poll_interval, max_poll_interval, push=push)

    def _check_notify(self, notify: bool) -> None:
        if notify and not self.dialect.supports_notify:
            raise ValueError(f"notify=True needs PostgreSQL's LISTEN/NOTIFY; on {self.dialect.name} watchers poll "
                             "(with a back-off while the queue is idle): leave notify out")

    def exists(self, queue: str | QueueAddress) -> bool:
        """Whether the queue table exists."""
        address = self.address(queue)
        return self.run(lambda cur: self.dialect.table_exists(cur, address), what="exists", read_only=True)

    # -- send ------------------------------------------------------------------------------------
    def send(self, queue: str | QueueAddress, message: OutgoingMessage | bytes | str, *,
             endpoint: str | QueueAddress | None = None, cursor: Any = None) -> uuid.UUID | None:
        """Send one message; return its native Id (None for a delayed message, which gets one when due).

        :param endpoint: for a delayed message, the endpoint whose ``.Delayed`` table stores it (default: the
            destination queue itself).
        :param cursor: send inside an existing transaction of yours on this database.
        """
        ids = self.send_many(queue, [message], endpoint=endpoint, cursor=cursor)
        return ids[0] if ids else None

    def send_many(self, queue: str | QueueAddress, messages: Iterable[OutgoingMessage | bytes | str], *,
                  endpoint: str | QueueAddress | None = None, cursor: Any = None) -> list[uuid.UUID]:
        """Send a batch: immediate messages in one statement (one round trip), delayed ones to the store.

        Outside a transaction of yours (no ``cursor``), a send that is one statement (one message; on PostgreSQL
        any batch of immediate messages) runs in autocommit: one round trip. Should the connection be lost once
        that statement left, nobody knows whether it was stored: ``SendOutcomeUnknownError`` (with the native Ids)
        is raised, and nothing is retried (a retry could store the messages twice).
        """
        prepared = self.outbox.prepare(queue, messages, endpoint=endpoint)
        if cursor is not None:
            return self.outbox.write(cursor, prepared)
        what = prepared.queue.sending
        if self.outbox.one_statement(prepared):  # its own transaction: one round trip, no BEGIN or COMMIT
            return self.session.run_once(self.outbox.write, prepared, what=what, unknown=self.outbox.outcome_unknown,
                                         returns_rows=False)
        return self.run(lambda cur: self.outbox.write(cur, prepared), what=what)

    # -- publish / subscribe -----------------------------------------------------------------------
    def create_subscription_table(self) -> bool:
        """Create the subscription table shared with .NET endpoints unless it exists; True when created here."""
        try:
            return self.pubsub.create_table()
        except Exception as exc:
            raise self.explain(exc, f"create subscription table {self.pubsub.name!r}") from exc

    def subscribe(self, queue: str | QueueAddress, topics: str | Iterable[str], *,
                  endpoint: str | None = None) -> list[Subscription]:
        """Subscribe ``queue`` to events: ``topics`` are .NET full type names (e.g. ``Sales.OrderPlaced``).

        :param endpoint: the endpoint name the subscription is stored under (default: the queue's table name).
        """
        return self.pubsub.subscribe(self.book.queue(queue), topics, endpoint)

    def unsubscribe(self, endpoint: str | QueueAddress, topics: str | Iterable[str]) -> int:
        """Remove the subscriptions of ``endpoint`` (a name, or a queue: its table name) to ``topics``."""
        name = endpoint.table if isinstance(endpoint, QueueAddress) else endpoint
        return self.pubsub.unsubscribe(name, topics)

    def subscriptions(self) -> list[Subscription]:
        """Every subscription in the subscription table."""
        return self.pubsub.subscriptions()

    def publish(self, event_type: str, message: OutgoingMessage | bytes | str, *,
                base_types: Iterable[str] = ()) -> PublishResult:
        """Publish an event: one copy to every queue subscribed to ``event_type`` or one of ``base_types`` (its
        base classes and interfaces, .NET full names), all in one transaction."""
        return self.pubsub.publish(event_type, message, base_types=base_types)

    # -- receive ---------------------------------------------------------------------------------
    def claim(self, queue: str | QueueAddress, max_messages: int = 1, *, take: bool = False,
              before: Callable[[Any], Any] | None = None) -> Claim:
        """Lock up to ``max_messages`` of the oldest messages in an open transaction; settle each, then commit.

        See :class:`~airflow_sqlqueue.transport.processing.claim.Claim`. Use it as a context manager (commit at the
        end of the block, abandon on an error), or call ``commit``/``abandon`` yourself. ``before(cursor)`` runs in
        the claim's transaction before the rows are locked.
        """
        check_count(max_messages, "max_messages")
        return Claim(self.session, self.book.queue(queue), take=take, before=before).open(max_messages)

    def leases(self, queue: str | QueueAddress) -> Leases:
        """A new lease owner on ``queue`` (SQLite's event trigger; see ``processing.lease``)."""
        address = self.book.address(queue)
        return Leases(self.session, self.dialect, address, self.dialect.format_address(address))

    @contextmanager
    def receiving(self, queue: str | QueueAddress, max_messages: int = 1) -> Iterator[ReceivedBatch]:
        """Take up to ``max_messages`` (FIFO) in a transaction that commits when the block ends without error.

        Store the messages durably inside the block: if the block raises, or the process dies, the rows
        return to the queue. Expired rows are dropped and poison rows moved to the error queue in the same
        transaction.
        """
        with self.claim(queue, max_messages, take=True) as claim:
            yield ReceivedBatch(claim.messages, claim.stats)

    def receive(self, queue: str | QueueAddress, max_messages: int = 1) -> list[ReceivedMessage]:
        """Take up to ``max_messages`` and commit at once (at-most-once: the caller owns them now).

        On PostgreSQL and SQLite this is one statement in autocommit (one round trip); see
        :func:`~airflow_sqlqueue.transport.processing.claim.take_once` for the rows that need sorting out.
        """
        table = self.book.queue(queue)
        if type(max_messages) is not int or max_messages < 1:  # the check below, without its call when fine
            check_count(max_messages, "max_messages")
        if self.dialect.autocommit_statements:
            return take_once(self.session, table, max_messages)

        def attempt() -> list[ReceivedMessage]:
            with Claim(self.session, table, take=True).open(max_messages) as claim:
                return claim.messages

        return self.session.retry.call(attempt, f"receive from {table.name!r}")

    def drain(self, queue: str | QueueAddress, sink: Sink | ColumnSink, *, max_messages: int | None = None,
              max_duration: float | None = None, batch_size: int = 500, concurrency: int = 1,
              breaker: CircuitBreaker | None = None, partition: Partition | None = None,
              columns: bool = False) -> DrainSummary:
        """Receive batches with ``concurrency`` receivers and store each with ``sink(messages)`` before its commit.

        ``sink`` returns how many messages it delivered (they count against ``max_messages``). Nothing is lost
        if the process dies: uncommitted batches return to the queue. ``breaker`` replaces the default 30 s
        circuit breaker. ``partition`` (from ``plan_partitions``) restricts every receive to its positions.
        ``columns=True`` hands ``sink`` each batch as one ``ReceivedColumns`` (ids, positions, headers text, bodies;
        no ``ReceivedMessage`` per row), as ``ParquetBatchWriter.write`` takes it.
        """
        self.check_concurrency(concurrency, ask=False)
        table = self.book.queue(queue)
        within: SeqRange | None = None
        if partition is not None:
            if not self.dialect.same_queue(self.address(partition.queue), table.address):
                raise ValueError(f"partition {partition.index} is a partition of {partition.queue!r}, not of "
                                 f"{table.name!r}; drain the queue the partitions were planned for")
            within = partition.seq_range
        return drain(self.session, table, sink, max_messages=max_messages, max_duration=max_duration,
                     batch_size=batch_size, concurrency=concurrency, breaker=breaker, within=within,
                     columns=columns)

    def plan_partitions(self, queue: str | QueueAddress, *, partitions: int | None = None,
                        messages_per_partition: int = DEFAULT_MESSAGES_PER_PARTITION,
                        max_partitions: int = DEFAULT_MAX_PARTITIONS, open_end: bool = False) -> list[Partition]:
        """Split the backlog of ``queue`` into disjoint partitions for parallel drains (see ``partitions``).

        :param partitions: how many; None: ``ceil(depth / messages_per_partition)``, 1 to ``max_partitions``.
        :param open_end: the last partition also drains messages sent after the plan.
        """
        return plan_partitions(self.session, self.book.queue(queue), partitions=partitions,
                               messages_per_partition=messages_per_partition, max_partitions=max_partitions,
                               open_end=open_end)

    def check_concurrency(self, concurrency: int, what: str = "concurrency", *, ask: bool = True) -> None:
        """Raise ValueError unless ``concurrency`` receivers (one connection each, plus one for sends and peeks)
        fit the database: SQLite at most ``receiver_cap`` (64); PostgreSQL and SQL Server the connections the
        server allows (PostgreSQL: max_connections less reserved slots, or a lower database or role limit).

        ``ask=False`` (``drain``, ``pump``) opens no connection for it: the limit is checked when already read
        (the drain operator asks before receiving; a receive loop's connections are the breaker's business)."""
        check_count(concurrency, what)
        cap = self.dialect.receiver_cap
        if cap is not None:
            if concurrency > cap:
                raise ValueError(f"{what}={concurrency} is over {cap}, the most receivers this provider runs on "
                                 f"{self.dialect.name} (one writer at a time: more only wait for the write lock)")
            return
        if self._connection_limit is None:
            if not ask:
                return
            try:
                self._connection_limit = self.session.run(self.dialect.connection_limit,
                                                          what="read the connection limit", read_only=True) or 0
            except Exception:  # noqa: BLE001 - the database is unreachable now: the receive loop's breaker decides
                log.debug("connection limit unknown (database unreachable); checked at the next run")
                return
        limit = self._connection_limit
        if limit and concurrency > limit - 1:
            raise ValueError(
                f"{what}={concurrency} needs {concurrency + 1} connections, but the {self.dialect.name} server "
                f"allows {limit} for clients like this one (PostgreSQL: max_connections less the reserved "
                f"connections, or a lower CONNECTION LIMIT of the database or role); use at most {limit - 1} "
                "receivers, fewer when other programs connect too")

    # -- processing with a handler ---------------------------------------------------------------
    def pump(self, queue: str | QueueAddress, handler: Callable[..., Any], *,
             mode: TransactionMode | str = TransactionMode.SENDS_ATOMIC_WITH_RECEIVE, batch_size: int = 100,
             concurrency: int = 1, immediate_retries: int = 5, delayed_retries: int = 0,
             delayed_retry_delay: float = 10.0, breaker: CircuitBreaker | None = None,
             failures: FailureInfoStorage | None = None) -> MessagePump:
        """A ``MessagePump`` for ``queue`` (``process`` runs one); ``breaker`` and ``failures`` replace the
        defaults (a 30 s circuit breaker, immediate-failure counts for 10,000 messages)."""
        table = self.book.queue(queue)
        self.check_concurrency(concurrency, ask=False)
        recoverability = Recoverability(immediate_retries, delayed_retries, delayed_retry_delay, failures)
        if delayed_retries:
            self.run(lambda cur: self.book.require(cur, self.dialect.delayed_address(table.address)),
                     what=f"delayed retries of {table.name!r} need its delayed table", read_only=True)
        return MessagePump(self.session, self.book, table, handler, TransactionMode.parse(mode),
                           batch_size=batch_size, concurrency=concurrency, recoverability=recoverability,
                           breaker=breaker, transport=self)

    def process(self, queue: str | QueueAddress, handler: Callable[..., Any], *,
                mode: TransactionMode | str = TransactionMode.SENDS_ATOMIC_WITH_RECEIVE,
                max_messages: int | None = None, max_duration: float | None = None, batch_size: int = 100,
                concurrency: int = 1, immediate_retries: int = 5, delayed_retries: int = 0,
                delayed_retry_delay: float = 10.0, stop_when_empty: bool = True) -> ProcessSummary:
        """Run ``handler(message, context)`` per message with the semantics of ``mode``.

        Failures are retried immediately up to ``immediate_retries`` times (counted per native Id), then, when
        ``delayed_retries`` is set, sent back later through the queue's ``.Delayed`` table (after
        ``delayed_retry_delay * n`` seconds for the n-th), then moved to the error queue with the NServiceBus
        failure headers.
        """
        pump = self.pump(queue, handler, mode=mode, batch_size=batch_size, concurrency=concurrency,
                         immediate_retries=immediate_retries, delayed_retries=delayed_retries,
                         delayed_retry_delay=delayed_retry_delay)
        return pump.run(max_messages=max_messages, max_duration=max_duration, stop_when_empty=stop_when_empty)

    # -- peek and inspection ---------------------------------------------------------------------
    def peek(self, queue: str | QueueAddress) -> int:
        """Depth estimate (cheap on any backlog; rows held by receivers at the head are not counted)."""
        table = self.book.queue(queue)
        return int(self.run(lambda cur: self.dialect.scalar(cur, "peek", None, **table.ids) or 0,
                            what=f"peek {table.name!r}", read_only=True))

    def sent_position(self, queue: str | QueueAddress) -> int | None:
        """The last position (seq, RowVersion) the database handed out for ``queue``: a count of every message ever
        sent to it that receives never lower (None before the first send). Two readings give the send rate."""
        table = self.book.queue(queue)
        params = {"qualified_name": table.ids["queue"], "table_name": table.address.table}
        value = self.run(lambda cur: self.dialect.scalar(cur, "sent_position", params, **table.ids),
                         what=f"sent position of {table.name!r}", read_only=True)
        return None if value is None else int(value)

    def oldest_age(self, queue: str | QueueAddress) -> float | None:
        """Seconds since the oldest message was sent (from its TimeSent header, read in SQL), or None."""
        table = self.book.queue(queue)
        value = self.run(lambda cur: self.dialect.scalar(cur, "head_time_sent", None, **table.ids),
                         what=f"age of {table.name!r}", read_only=True)
        try:
            sent = self.dialect.header_field(value)
            if isinstance(sent, bytes):
                sent = sent.decode("utf-8")
            return None if not isinstance(sent, str) or not sent else (
                datetime.now(timezone.utc) - h.parse_wire_time(sent)).total_seconds()
        except (ValueError, UnicodeDecodeError):
            return None

    def browse(self, queue: str | QueueAddress, *, after_seq: int = FIRST_SEQ, limit: int = 100) -> list[RawRow]:
        """Rows after a position (default: from the first row, whatever its seq), without taking them."""
        table = self.book.queue(queue)
        check_count(limit, "limit")
        return self.run(lambda cur: [self.dialect.to_raw_row(r) for r in self.dialect.execute(
            cur, "browse", {"after_seq": after_seq, "batch_size": limit}, **table.ids)],
            what=f"browse {table.name!r}", read_only=True)

    def delete_messages(self, queue: str | QueueAddress, ids: Iterable[uuid.UUID | str]) -> int:
        """Delete messages by native Id in one transaction (the error-queue browser's delete); return how many rows.

        Every Id must be in the queue: an unknown one raises LookupError and nothing is deleted.
        """
        table = self.book.queue(queue)
        wanted = list(dict.fromkeys(uuid.UUID(str(i)) for i in ids))  # ValueError on a malformed Id

        def work(cur: Any) -> int:
            self.book.require(cur, table)
            deleted = 0
            for message_id in wanted:
                count = self.dialect.execute(cur, "delete_by_id", {"id": self.dialect.id_param(message_id)},
                                             **table.ids).rowcount
                if not count or count < 0:
                    raise LookupError(f"message {message_id} is not in {table.name!r}; nothing deleted")
                deleted += count
            return deleted

        return self.run(work, what=f"delete messages from {table.name!r}")

    # -- the error queue ---------------------------------------------------------------------------
    def errors(self, error_queue: str | QueueAddress | None = None, *, allowed: Iterable[str | QueueAddress] = (),
               redirects: dict[str, str] | None = None) -> ErrorQueue:
        """The error queue (default: this transport's) as an ``ErrorQueue``: count, group, page, retry, delete.

        :param allowed: the queues a retry may write to: a message whose ``NServiceBus.FailedQ`` names any other
            queue (or the error queue itself) stays, with the reason. None given: reading and deleting only.
        :param redirects: ``{failed queue: allowed queue}``: where messages that failed in a queue go back to instead.
        """
        return ErrorQueue(self.session, self.book, error_queue, allowed=allowed, redirects=redirects)

    def count(self, queue: str | QueueAddress) -> int:
        """Exact number of rows (scans the queue's index: meant for error queues, not for hot queues)."""
        return self.errors(queue).count()

    def failed_page(self, queue: str | QueueAddress, *, after_seq: int = 0, limit: int = 50,
                    where: FailedFilter | None = None) -> list[FailedPreview]:
        """A page of an error queue after a position: previews cut in SQL, never whole rows (the browser's list)."""
        return self.errors(queue).page(after_seq=after_seq, limit=limit, where=where)

    def failed_groups(self, queue: str | QueueAddress) -> list[dict[str, Any]]:
        """Failed messages counted by FailedQ, exception type and message type, largest group first."""
        return self.errors(queue).groups()

    def retry_positions(self, error_queue: str | QueueAddress, positions: Iterable[Position],
                        allowed: Iterable[str | QueueAddress]) -> dict[str, int]:
        """Return messages addressed by position and Id to their FailedQ when it is one of ``allowed``; all or none
        (see ``ErrorQueue.retry``)."""
        return self.errors(error_queue, allowed=allowed).retry(positions)

    def delete_positions(self, queue: str | QueueAddress, positions: Iterable[Position]) -> int:
        """Delete messages addressed by position and Id; all or none."""
        return self.errors(queue).delete(positions)

    def discover(self) -> list[str]:
        """Every queue table in the database (by its column shape), as canonical addresses."""
        found = self.run(self.dialect.discover, what="discover queues", read_only=True)
        return [self.dialect.format_address(a) for a in found]

    # -- maintenance -----------------------------------------------------------------------------
    def purge_expired(self, queue: str | QueueAddress, *, batch_size: int = DEFAULT_PURGE_BATCH,
                      progress: Callable[[int], None] | None = None) -> int:
        """Delete expired rows in batches (by seq, each batch its own transaction); return how many."""
        return purge_expired(self.session, self.book.queue(queue), batch_size, progress)

    def create_inbox(self) -> bool:
        """Create the inbox (deduplication) table unless it exists; True when created here. See ``Inbox``."""
        try:
            return self.inbox.create()
        except Exception as exc:
            raise self.explain(exc, f"create inbox table {self.inbox.name!r}") from exc

    def purge_inbox(self, older_than: float | timedelta, *, batch_size: int = DEFAULT_PURGE_BATCH,
                    progress: Callable[[int], None] | None = None) -> int:
        """Delete inbox rows older than ``older_than`` (seconds or a timedelta; database clock); return how many.
        A message redelivered after its row went is handled again: keep days. No inbox table: 0."""
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        return self.inbox.purge(seconds, batch_size, progress)

    def check(self, queue: str | QueueAddress, *, repair: bool = False) -> list[Finding]:
        """Schema and index findings for a queue; with ``repair`` fix what can be fixed and re-check."""
        return check(self.session, self.book.queue(queue), repair)

    def move_due_delayed(self, endpoint: str | QueueAddress, *, batch_size: int = DEFAULT_DELAYED_BATCH) -> int:
        """Move due messages from ``<endpoint>.Delayed`` into the endpoint's queue; return how many moved."""
        table = self.book.queue(endpoint)
        total = 0
        while True:
            moved = self.run(lambda cur: self.dialect.move_due_delayed(cur, table.address, batch_size),
                             what=f"move due delayed messages of {table.name!r}")
            total += moved
            if moved < batch_size:
                return total

    def retry_errors(self, *, error_queue: str | QueueAddress | None = None, select: Selector | None = None,
                     max_messages: int | None = None, allowed: Iterable[str | QueueAddress] = ()) -> RetrySummary:
        """Return failed messages to the queue named by their ``NServiceBus.FailedQ`` header when it is one of
        ``allowed`` (see ``ErrorQueue.retry_all``); ValueError, changing nothing, when ``allowed`` is empty."""
        return self.errors(error_queue, allowed=allowed).retry_all(select, max_messages)


def ddl_script(dialect: Dialect | str, queues: Iterable[str | QueueAddress], *, delayed: bool = False,
               notify: bool = False, migrate: bool = False) -> str:
    """The named DDL statements that create ``queues`` in ``dialect``, as one reviewable script (with ``notify``,
    the PostgreSQL wake-up trigger too); with ``migrate``, the statements that migrate queues made by
    airflow-sqlqueue 0.1 to the current shapes instead."""
    if isinstance(dialect, str):
        dialect = get_dialect(dialect)
    if notify and not dialect.supports_notify:
        raise ValueError(f"notify=True needs PostgreSQL's LISTEN/NOTIFY, not {dialect.name}: leave notify out")
    if migrate:
        return migration_script(dialect, queues, delayed=delayed)
    parts = []
    for queue in queues:
        address = dialect.parse_address(queue)
        parts.append(f"-- queue {dialect.format_address(address)}")
        names = dialect.queue_ddl + (dialect.delayed_ddl if delayed else ())
        for name, sql in zip(names, dialect.ddl(address, delayed), strict=True):
            parts.append(f"-- {name}: {dialect.statements[name].description}\n{sql.rstrip().rstrip(';')};")
        if notify:
            ids = dialect.notify_identifiers(address)
            for name in dialect.notify_ddl:
                sql = dialect.render(name, **ids)
                parts.append(f"-- {name}: {dialect.statements[name].description}\n{sql.rstrip().rstrip(';')};")
    return "\n\n".join(parts) + "\n"


def migration_script(dialect: Dialect, queues: Iterable[str | QueueAddress], *, delayed: bool = False) -> str:
    """The named statements that migrate 0.1 queues (and their delayed stores) to the current shapes.

    ``check --repair`` runs the same steps and skips those a table does not need; a DBA running this script by
    hand runs each statement on its own (the CONCURRENTLY ones outside a transaction, e.g. with psql's autocommit).
    """
    header = ("-- Migration of queue tables made by airflow-sqlqueue 0.1 to the current shapes. Run each statement on "
              "its own,\n-- in order, in autocommit mode (CREATE/DROP INDEX CONCURRENTLY cannot run inside a "
              "transaction); a statement\n-- that fails because its step is already done can be skipped. "
              "`sqlqueue check --repair` does the same steps,\n-- only those a table needs.")
    parts = [header]
    for queue in queues:
        address = dialect.parse_address(queue)
        steps = dialect.migration(address, delayed)
        parts.append(f"-- queue {dialect.format_address(address)}" + ("" if steps else
                                                                      ": nothing to migrate on this database"))
        for name, sql in steps:
            text = f"-- {name}: {dialect.statements[name].description}\n{sql.rstrip().rstrip(';')};"
            if dialect.delayed_migration and name == dialect.delayed_migration[0]:
                text = "BEGIN;  -- the delayed store is migrated in one transaction\n\n" + text
            parts.append(text)
        if delayed and dialect.delayed_migration:
            parts.append("COMMIT;")
    return "\n\n".join(parts) + "\n"
