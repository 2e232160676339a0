"""The handler loop: receive, run the handler per message in the mode's transactions, retry, error queue."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .address import QueueAddress
from .circuit_breaker import CircuitBreaker
from .dialects import RawRow
from .errors import CrossDatabaseTransactionError, SqlQueueError
from .failures import FailureInfoStorage
from .messages import OutgoingMessage
from .modes import TransactionMode
from .receivers import ReceiverLoop
from .validation import check_count

if TYPE_CHECKING:
    from .transport import ReceiveStats, SqlQueueTransport

log = logging.getLogger(__name__)


@dataclass
class ProcessSummary:
    """Counts of one processing run.

    ``received`` rows taken; ``succeeded`` handled; ``failed`` moved to the error queue after retries;
    ``lost`` failed in mode NONE (at-most-once); ``retries`` failed attempts that were retried;
    ``expired`` dropped; ``poison`` moved to the error queue; ``forwarded`` delayed messages passed on.
    """

    received: int = 0
    succeeded: int = 0
    failed: int = 0
    lost: int = 0
    retries: int = 0
    expired: int = 0
    poison: int = 0
    forwarded: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (for XCom and ``--json``)."""
        return asdict(self)

    def add(self, other: ProcessSummary) -> None:
        for key, value in asdict(other).items():
            if key != "seconds":
                setattr(self, key, getattr(self, key) + value)

    @property
    def finished(self) -> int:
        """Rows that left the queue for good (handled, moved, dropped or lost)."""
        return self.succeeded + self.failed + self.lost + self.expired + self.poison + self.forwarded


class HandlerContext:
    """What a handler gets besides the message: sends in the mode's transaction, and the connection.

    ``send`` follows the mode: its own short transaction (NONE, RECEIVE_ONLY) or the receive transaction
    (SENDS_ATOMIC_WITH_RECEIVE, TRANSACTION_SCOPE). ``connection``/``cursor`` are the receive transaction's,
    available in TRANSACTION_SCOPE only: SQL run on them commits or rolls back with the receive.
    """

    def __init__(self, transport: SqlQueueTransport, mode: TransactionMode, connection: Any, cursor: Any) -> None:
        self.transport = transport
        self.mode = mode
        self._connection = connection
        self._cursor = cursor
        #: Sends of the message being handled that wait for its outcome: SENDS_ATOMIC_WITH_RECEIVE keeps them
        #: only if the handler succeeds; RECEIVE_ONLY on a single-writer database (SQLite) writes them either
        #: way, in the receive transaction, because a second connection cannot write while it is open.
        self._pending: list[tuple[str, list[OutgoingMessage], dict[str, Any]]] = []
        #: Accepted sends of the batch, written in the receive transaction just before it commits.
        self._outbox: list[tuple[str, list[OutgoingMessage], dict[str, Any]]] = []

    def send(self, queue: str, message: OutgoingMessage | bytes | str, **kwargs: Any) -> None:
        """Send a message with the mode's atomicity."""
        self.send_many(queue, [message], **kwargs)

    def send_many(self, queue: str, messages: list[OutgoingMessage | bytes | str], **kwargs: Any) -> None:
        """Send messages with the mode's atomicity (checked now, written as the mode says)."""
        batch = [m if isinstance(m, OutgoingMessage) else OutgoingMessage(body=m) for m in messages]
        for message in batch:
            message.validated()
        self.transport.address(queue)
        if self.mode.atomic_sends:
            self._same_database(queue)
        if self._cursor is None:  # NONE: the receive has committed already
            self.transport.send_many(queue, batch, **kwargs)
        elif self.mode is TransactionMode.TRANSACTION_SCOPE:
            self.transport.send_many(queue, batch, cursor=self._cursor, **kwargs)
        elif self.mode is TransactionMode.SENDS_ATOMIC_WITH_RECEIVE or self.transport.dialect.single_writer:
            # written later: find a missing destination now, so that only this message fails
            self.transport.require_queue(self._cursor, queue)
            if kwargs.get("endpoint") is not None or any(m.delay is not None for m in batch):
                self.transport.require_queue(self._cursor, self.transport.dialect.delayed_address(
                    self.transport.address(kwargs.get("endpoint") or queue)))
            self._pending.append((queue, batch, kwargs))
        else:  # RECEIVE_ONLY: committed at once on another connection (ghost sends possible)
            self.transport.send_many(queue, batch, **kwargs)

    def message_done(self, succeeded: bool) -> None:
        """Settle the sends of the message just handled."""
        pending, self._pending = self._pending, []
        if self.mode is TransactionMode.RECEIVE_ONLY:
            self._write(pending)
        elif succeeded:
            self._outbox.extend(pending)

    def write_outbox(self) -> None:
        """Write the batch's accepted sends (one statement per destination) in the receive transaction."""
        outbox, self._outbox = self._outbox, []
        self._write(outbox)

    def _write(self, sends: list[tuple[str, list[OutgoingMessage], dict[str, Any]]]) -> None:
        grouped: dict[tuple[str, tuple], list[OutgoingMessage]] = {}
        for queue, batch, kwargs in sends:
            grouped.setdefault((queue, tuple(sorted(kwargs.items()))), []).extend(batch)
        for (queue, kwargs), batch in grouped.items():
            self.transport.send_many(queue, batch, cursor=self._cursor, **dict(kwargs))

    @property
    def connection(self) -> Any:
        """The receive transaction's connection (TRANSACTION_SCOPE only). Never commit or roll it back."""
        self._require_scope("connection")
        return self._connection

    @property
    def cursor(self) -> Any:
        """A cursor in the receive transaction (TRANSACTION_SCOPE only)."""
        self._require_scope("cursor")
        return self._cursor

    def enlist(self, connection: Any) -> Any:
        """Refuse a second connection in TRANSACTION_SCOPE: Python has no distributed transactions."""
        self._require_scope("enlist")
        if connection is not self._connection:
            raise CrossDatabaseTransactionError(
                "TRANSACTION_SCOPE cannot enlist another connection: without a distributed transaction "
                "coordinator its work could commit while the receive rolls back. Use context.connection "
                "(same database), or use an outbox table on this database and move it afterwards")
        return connection

    def _require_scope(self, what: str) -> None:
        if self.mode is not TransactionMode.TRANSACTION_SCOPE:
            raise SqlQueueError(f"context.{what} is only available in TRANSACTION_SCOPE (mode is "
                                f"{self.mode.value}); choose mode='transaction-scope' to join the handler's "
                                "SQL to the receive transaction")

    def _same_database(self, queue: str) -> None:
        catalog = self.transport.address(queue).catalog
        own = getattr(self.transport.dialect, "default_catalog", None)
        if catalog is not None and catalog != own and self.mode is TransactionMode.TRANSACTION_SCOPE:
            raise CrossDatabaseTransactionError(
                f"queue {queue!r} is in catalog {catalog!r}, another database than the receive transaction's; "
                "TRANSACTION_SCOPE cannot span databases")


class MessagePump:
    """Receives from one queue with ``concurrency`` threads and processes each message with ``handler``."""

    def __init__(self, transport: SqlQueueTransport, address: QueueAddress, handler: Callable[..., Any],
                 mode: TransactionMode, *, batch_size: int = 100, concurrency: int = 1,
                 immediate_retries: int = 5, failures: FailureInfoStorage | None = None,
                 breaker: CircuitBreaker | None = None) -> None:
        check_count(immediate_retries, "immediate_retries", minimum=0)
        self.transport = transport
        self.dialect = transport.dialect
        self.address = address
        self.handler = handler
        self.mode = mode
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.immediate_retries = immediate_retries
        self.failures = failures or FailureInfoStorage()
        self.breaker = breaker or CircuitBreaker(self.dialect.format_address(address))
        self.loop = ReceiverLoop(self.dialect, self.breaker, batch_size=batch_size, concurrency=concurrency)
        self._lock = threading.Lock()
        self._ids = self.dialect.identifiers(address)

    def run(self, *, max_messages: int | None = None, max_duration: float | None = None,
            stop_when_empty: bool = True) -> ProcessSummary:
        """Process until ``max_messages`` rows are finished, ``max_duration`` passes, or the queue is empty."""
        total = ProcessSummary()
        started = time.monotonic()

        def one_batch(n: int) -> tuple[int, int]:
            part = ProcessSummary()
            try:
                self._one_batch(n, part)
            finally:
                with self._lock:
                    total.add(part)
            return part.finished, part.received

        try:
            self.loop.run(one_batch, max_messages=max_messages, max_duration=max_duration,
                          stop_when_empty=stop_when_empty)
        except Exception as error:
            explained = self.transport.explain(error, f"process {self.dialect.format_address(self.address)!r}")
            if explained is not error:
                raise explained from error
            raise
        finally:
            total.seconds = time.monotonic() - started
        return total

    # -- one transaction ---------------------------------------------------------------------------
    def _one_batch(self, n: int, part: ProcessSummary) -> None:
        if self.mode is TransactionMode.NONE:
            self._batch_without_transaction(n, part)
        else:
            self._batch_in_transaction(n, part)

    def _batch_without_transaction(self, n: int, part: ProcessSummary) -> None:
        """NONE: the delete commits first; a handler failure loses the message."""
        from .transport import ReceiveStats

        stats = ReceiveStats()
        with self.transport.connections.connection() as conn:
            with self.dialect.transaction(conn) as cur:
                rows = self.transport.take(cur, self.address, n)
                messages = [m for m in (self.transport.classify(cur, self.address, r, stats) for r in rows) if m]
            part.received += len(rows)
            _add_stats(part, stats)
            context = HandlerContext(self.transport, self.mode, conn, None)
            for message in messages:
                try:
                    self.handler(message, context)
                    part.succeeded += 1
                except Exception:
                    part.lost += 1
                    log.exception("handler failed for message %s in mode NONE: the message is lost",
                                  message.message_id)

    def _batch_in_transaction(self, n: int, part: ProcessSummary) -> None:
        """RECEIVE_ONLY, SENDS_ATOMIC_WITH_RECEIVE, TRANSACTION_SCOPE: lock a batch, handle, delete, commit."""
        from .transport import ReceiveStats

        stats = ReceiveStats()
        counted = ProcessSummary()
        finished: list[RawRow] = []
        with self.transport.connections.connection() as conn:
            with self.dialect.transaction(conn) as cur:
                rows = self.transport.take(cur, self.address, n, lock_only=True)
                counted.received = len(rows)
                context = HandlerContext(self.transport, self.mode, conn, cur)
                for index, row in enumerate(rows):
                    if self._one_row(cur, context, row, index, stats, counted):
                        finished.append(row)
                context.write_outbox()
                if finished:
                    self.dialect.delete_seqs(cur, self.address, [row.seq for row in finished])
        # committed: only now do the counts and failure bookkeeping become true
        for row in finished:
            self.failures.clear(row.id)
        _add_stats(counted, stats)
        part.add(counted)

    def _one_row(self, cur: Any, context: HandlerContext, row: RawRow, index: int, stats: ReceiveStats,
                 counted: ProcessSummary) -> bool:
        """Handle one locked row; return True when it leaves the queue (deleted with the batch)."""
        message = self.transport.classify(cur, self.address, row, stats)
        if message is None:
            return True  # expired, poison or forwarded: dropped or moved already
        info = self.failures.get(row.id)
        if info is not None and info.attempts > self.immediate_retries:
            self.transport.move_to_error(cur, self.address, row, info.exception)
            counted.failed += 1
            return True
        scoped = self.mode is TransactionMode.TRANSACTION_SCOPE
        savepoint = self.dialect.quote(f"sqlqueue_{index}")
        if scoped:  # the handler's own SQL must be undone on failure
            self.dialect.execute(cur, "savepoint", None, savepoint=savepoint)
        try:
            self.handler(message, context)
        except Exception as exc:
            if self.dialect.is_connection_lost(exc) or self.dialect.is_deadlock(exc):
                raise
            if scoped:
                self.dialect.execute(cur, "rollback_to_savepoint", None, savepoint=savepoint)
                self.dialect.execute(cur, "release_savepoint", None, savepoint=savepoint)
            context.message_done(succeeded=False)
            attempts = self.failures.record(row.id, exc)
            log.warning("handler failed for message %s (attempt %d of %d): %s", message.message_id,
                        attempts, self.immediate_retries + 1, exc)
            if attempts > self.immediate_retries:
                self.transport.move_to_error(cur, self.address, row, exc)
                counted.failed += 1
                return True
            counted.retries += 1
            return False  # not deleted: back at the head of the queue when the batch commits
        if scoped:
            self.dialect.execute(cur, "release_savepoint", None, savepoint=savepoint)
        context.message_done(succeeded=True)
        counted.succeeded += 1
        return True


def _add_stats(summary: ProcessSummary, stats: ReceiveStats) -> None:
    summary.expired += stats.expired
    summary.poison += stats.poison
    summary.forwarded += stats.forwarded
