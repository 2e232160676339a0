"""One receive strategy per transaction mode, and the send policy each gives the handler's sends.

``strategy_for`` is the only place that reads a ``TransactionMode``:

============================  =================  =====================================================
mode                          strategy           sends made while handling
============================  =================  =====================================================
NONE                          ``AtMostOnce``     ``ImmediateSends``: each in its own short transaction
RECEIVE_ONLY                  ``HeldBatch``      ``ImmediateSends`` (another connection, committed at once);
                                                 on a single-writer database (SQLite) ``BufferedSends``
                                                 keeping failed messages' sends, written in the receive
                                                 transaction (a second connection cannot write meanwhile)
SENDS_ATOMIC_WITH_RECEIVE     ``HeldBatch``      ``BufferedSends``: kept only when the handler succeeded,
                                                 written in the receive transaction before it commits
TRANSACTION_SCOPE             ``ScopedBatch``    ``EnlistedSends``: written at once in the receive
                                                 transaction; the handler's own SQL joins it too
============================  =================  =====================================================
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..common.errors import CrossDatabaseTransactionError, InvalidAddressError, SqlQueueError
from ..common.printable import printable, printable_lines
from ..dialects import Dialect
from ..tables.queue import TableQueue
from ..tables.session import Session
from ..wire import headers as h
from ..wire.failures import exception_text
from ..wire.messages import OutgoingMessage, ReceivedMessage
from ..wire.standard_headers import REPLY, SEND, Origin
from .claim import Claim, ReceivePositions
from .modes import TransactionMode
from .recoverability import Action, Recoverability
from .sending import Outbox, PreparedSend
from .summaries import ProcessSummary

log = logging.getLogger(__name__)
Handler = Callable[[ReceivedMessage, "HandlerContext"], Any]


# -- send policies ---------------------------------------------------------------------------------------
class SendPolicy:
    """How the sends a handler makes are written. One object per batch."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def send(self, prepared: PreparedSend) -> None:
        """A send the handler made (checked already)."""
        raise NotImplementedError

    def message_done(self, succeeded: bool) -> None:
        """The handler of the current message returned (``succeeded``) or raised."""

    def flush(self) -> None:
        """The batch is about to commit: write what waits."""


class ImmediateSends(SendPolicy):
    """Each send committed at once in its own transaction, whatever happens to the message (ghost sends possible)."""

    def __init__(self, outbox: Outbox, session: Session) -> None:
        super().__init__(outbox)
        self.session = session

    def send(self, prepared: PreparedSend) -> None:
        self.session.run(lambda cursor: self.outbox.write(cursor, prepared),
                         what=f"send to {prepared.queue.name!r}")


class BufferedSends(SendPolicy):
    """Sends wait for the handler's outcome and are written in the receive transaction.

    :param keep_failed: also keep the sends of a message whose handler failed (RECEIVE_ONLY on SQLite), written
        as soon as the handler returns; otherwise they are dropped and the accepted ones written at ``flush``.
    """

    def __init__(self, outbox: Outbox, claim: Claim, keep_failed: bool) -> None:
        super().__init__(outbox)
        self.claim = claim
        self.keep_failed = keep_failed
        self._pending: list[PreparedSend] = []
        self._accepted: list[PreparedSend] = []

    def send(self, prepared: PreparedSend) -> None:
        # written later: find a missing destination now, so that only this message fails
        self.outbox.require_destinations(self.claim.cursor, prepared)
        self._pending.append(prepared)

    def message_done(self, succeeded: bool) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        if self.keep_failed:
            self._write(pending)
        elif succeeded:
            self._accepted.extend(pending)

    def flush(self) -> None:
        accepted, self._accepted = self._accepted, []
        self._write(accepted)

    def _write(self, sends: list[PreparedSend]) -> None:
        """One statement per destination (and one per delayed store) for the whole list."""
        merged: dict[tuple[int, int], PreparedSend] = {}
        for part in sends:
            key = (id(part.queue), id(part.store))
            into = merged.get(key)
            if into is None:
                merged[key] = PreparedSend(part.queue, part.store, list(part.rows), list(part.delayed), list(part.ids))
            else:
                into.rows.extend(part.rows)
                into.delayed.extend(part.delayed)
        for prepared in merged.values():
            self.outbox.write(self.claim.cursor, prepared)


class EnlistedSends(SendPolicy):
    """Sends written at once in the receive transaction (undone with the handler's work when it fails)."""

    def __init__(self, outbox: Outbox, claim: Claim) -> None:
        super().__init__(outbox)
        self.claim = claim

    def send(self, prepared: PreparedSend) -> None:
        own = getattr(self.outbox.dialect, "default_catalog", None)
        catalog = prepared.queue.address.catalog
        if catalog is not None and catalog != own:
            raise CrossDatabaseTransactionError(
                f"queue {prepared.queue.name!r} is in catalog {catalog!r}, another database than the receive "
                "transaction's; TRANSACTION_SCOPE cannot span databases")
        self.outbox.write(self.claim.cursor, prepared)


# -- what a handler gets -----------------------------------------------------------------------------------
class HandlerContext:
    """What a handler gets besides the message: sends with the mode's atomicity, and in TRANSACTION_SCOPE the
    receive transaction's connection.

    ``send`` follows the mode: its own short transaction (NONE, RECEIVE_ONLY) or the receive transaction
    (SENDS_ATOMIC_WITH_RECEIVE, TRANSACTION_SCOPE). ``connection``/``cursor`` are the receive transaction's,
    available in TRANSACTION_SCOPE only: SQL run on them commits or rolls back with the receive.
    Sends carry the standard headers as a .NET handler's do: the conversation of the message being handled, its
    correlation id, and this queue as the reply address.
    """

    def __init__(self, transport: Any, mode: TransactionMode, sends: SendPolicy, scope: Claim | None = None,
                 queue: TableQueue | None = None) -> None:
        #: The transport the message came from (for peeks and other reads of your own).
        self.transport = transport
        self.mode = mode
        self.sends = sends
        self._scope = scope
        self._queue = queue
        #: The message being handled (set before each handler call).
        self.message: ReceivedMessage | None = None

    def send(self, queue: str, message: OutgoingMessage | bytes | str, **kwargs: Any) -> None:
        """Send a message with the mode's atomicity."""
        self.send_many(queue, [message], **kwargs)

    def send_many(self, queue: str, messages: list[OutgoingMessage | bytes | str], *,
                  endpoint: str | None = None) -> None:
        """Send messages with the mode's atomicity (checked now, written as the mode says).

        :param endpoint: for delayed messages, the endpoint whose ``.Delayed`` table stores them.
        """
        self.sends.send(self.sends.outbox.prepare(queue, messages, endpoint=endpoint, origin=self._origin(SEND)))

    def reply(self, message: OutgoingMessage | bytes | str, *, queue: str | None = None) -> None:
        """Reply to the message being handled: intent ``Reply``, its conversation and correlation id.

        The destination is ``queue``, else the message's ``NServiceBus.ReplyToAddress``, which (being row input)
        must name this queue or one of the transport's ``forward_to`` queues.
        """
        if queue is None:
            queue = self._reply_address()
        self.sends.send(self.sends.outbox.prepare(queue, [message], origin=self._origin(REPLY)))

    def _origin(self, intent: str) -> Origin:
        base = self.sends.outbox.origin
        incoming = self.message.headers if self.message is not None else None
        reply_to = self._queue.wire if self._queue is not None else None
        return Origin(base.endpoint, intent, reply_to, incoming)

    def _reply_address(self) -> str:
        incoming = self.message.headers if self.message is not None else {}
        text = incoming.get(h.REPLY_TO_ADDRESS)
        if not text:
            raise SqlQueueError(f"the message has no {h.REPLY_TO_ADDRESS} header; pass queue= to reply()")
        book = self.sends.outbox.book
        source = self._queue or book.error
        try:
            address = book.address(text)
        except InvalidAddressError as exc:
            raise SqlQueueError(f"{h.REPLY_TO_ADDRESS} {text!r} is not a queue address: {exc}") from None
        if not book.may_forward(source, address):
            raise SqlQueueError(
                f"{h.REPLY_TO_ADDRESS} names {text!r}, which is not among the transport's forward_to queues; a "
                "header is row input and is not trusted as a destination: add it to forward_to=, or pass queue=")
        return text

    @property
    def connection(self) -> Any:
        """The receive transaction's connection (TRANSACTION_SCOPE only). Never commit or roll it back."""
        return self._require_scope("connection").connection

    @property
    def cursor(self) -> Any:
        """A cursor in the receive transaction (TRANSACTION_SCOPE only)."""
        return self._require_scope("cursor").cursor

    def enlist(self, connection: Any) -> Any:
        """Refuse a second connection in TRANSACTION_SCOPE: Python has no distributed transactions."""
        scope = self._require_scope("enlist")
        if connection is not scope.connection:
            raise CrossDatabaseTransactionError(
                "TRANSACTION_SCOPE cannot enlist another connection: without a distributed transaction "
                "coordinator its work could commit while the receive rolls back. Use context.connection "
                "(same database), or use an outbox table on this database and move it afterwards")
        return connection

    def _require_scope(self, what: str) -> Claim:
        if self._scope is None:
            raise SqlQueueError(f"context.{what} is only available in TRANSACTION_SCOPE (mode is "
                                f"{self.mode.value}); choose mode='transaction-scope' to join the handler's "
                                "SQL to the receive transaction")
        return self._scope


def acknowledge_retry(sends: SendPolicy, queue: TableQueue, message: ReceivedMessage) -> None:
    """A message ServiceControl retried was handled: send the control message core sends to the acknowledgement
    queue it names (empty body; ``ServiceControl.Retry.Successful``, ``.UniqueMessageId``,
    ``NServiceBus.ControlMessage``), with the send policy of the mode (in the receive transaction where the mode
    writes sends there). The queue comes from a header, so it must be the error queue (ServiceControl's) or one
    of the transport's ``forward_to`` queues; otherwise the acknowledgement is skipped with a warning."""
    unique_id = message.headers.get(h.RETRY_UNIQUE_MESSAGE_ID)
    target = message.headers.get(h.RETRY_ACKNOWLEDGEMENT_QUEUE)
    if not unique_id or not target:
        return
    book = sends.outbox.book
    try:
        allowed = book.may_forward(queue, book.address(target))
    except InvalidAddressError:
        allowed = False
    if not allowed:
        log.warning("not acknowledging the ServiceControl retry of message %s: %s %r is not the error queue nor a "
                    "forward_to queue", printable(message.message_id), h.RETRY_ACKNOWLEDGEMENT_QUEUE, printable(target))
        return
    ack = OutgoingMessage(b"", {h.RETRY_SUCCESSFUL: h.format_wire_time(), h.RETRY_UNIQUE_MESSAGE_ID: unique_id,
                                h.CONTROL_MESSAGE: "True"})
    sends.send(sends.outbox.prepare(target, [ack], raw=True))


# -- receive strategies ------------------------------------------------------------------------------------
class ReceiveStrategy:
    """Receives one batch and runs the handler on each message, with one mode's transactions.

    :param transport: handed to handlers as ``context.transport`` (never used here).
    """

    def __init__(self, session: Session, queue: TableQueue, outbox: Outbox, handler: Handler,
                 recoverability: Recoverability, mode: TransactionMode, transport: Any = None) -> None:
        self.session = session
        self.queue = queue
        self.outbox = outbox
        self.handler = handler
        self.recoverability = recoverability
        self.mode = mode
        self.transport = transport
        self.dialect: Dialect = session.dialect
        # positions of messages this run received that went back to the queue (released, or in a batch that
        # rolled back): taken again, they are deliveries, not new messages. Only those are kept, so a long run
        # holds as many positions as it has messages waiting for another attempt, not one per message handled.
        self._returned: set[int] = set()
        self._returned_lock = threading.Lock()
        #: Each receiving thread's position (PostgreSQL: a receive starts past the last row that thread took).
        self.positions = ReceivePositions(self.dialect)

    def count_rows(self, claim: Claim, part: ProcessSummary) -> list[int]:
        """Count a claim's rows: every one as a delivery, the messages not received before in this run as
        received. Returns the positions of the messages received before (give them to ``returned`` if the batch
        rolls back: its counts are dropped, and they are in the queue again)."""
        part.deliveries = claim.locked
        again: list[int] = []
        if self._returned:
            with self._returned_lock:
                returned = self._returned
                again = [message.seq for message in claim.messages if message.seq in returned]
                returned.difference_update(again)
        part.received = claim.locked - len(again)
        return again

    def returned(self, seqs: list[int]) -> None:
        """The messages at these positions, counted as received, went back to the queue: when they are taken again
        they are deliveries, not new messages."""
        if seqs:
            with self._returned_lock:
                self._returned.update(seqs)

    def batch(self, count: int, summary: ProcessSummary) -> None:
        """Receive up to ``count`` rows and handle them; add what happened to ``summary`` once it is final."""
        raise NotImplementedError

    def _is_infrastructure(self, exc: BaseException) -> bool:
        """Failures of the database, not of the handler: the batch rolls back and is received again."""
        return self.dialect.is_connection_lost(exc) or self.dialect.is_deadlock(exc)


class AtMostOnce(ReceiveStrategy):
    """NONE: the rows are deleted and committed first; a handler failure loses the message."""

    def batch(self, count: int, summary: ProcessSummary) -> None:
        with Claim(self.session, self.queue, take=True, position=self.positions.mine()).open(count) as claim:
            pass  # committed: the messages are ours now
        part = ProcessSummary()
        self.count_rows(claim, part)
        part.add_stats(claim.stats)
        sends = ImmediateSends(self.outbox, self.session)
        context = HandlerContext(self.transport, self.mode, sends, queue=self.queue)
        try:
            for message in claim.messages:
                try:
                    context.message = message
                    self.handler(message, context)
                    acknowledge_retry(sends, self.queue, message)
                    part.succeeded += 1
                except Exception as exc:
                    part.lost += 1
                    # the traceback is the handler's, its text may quote the row: escaped like every row text
                    log.error("handler failed for message %s in mode NONE: the message is lost\n%s",
                              printable(message.message_id),
                              printable_lines("".join(traceback.format_exception(exc)).rstrip("\n")))
        finally:
            summary.add(part)


class HeldBatch(ReceiveStrategy):
    """RECEIVE_ONLY and SENDS_ATOMIC_WITH_RECEIVE: a batch is locked; each message is acked, retried (released),
    delayed or rejected by its handler's outcome; one delete and one commit end the batch.

    :param send_policy: makes the batch's send policy from the claim.
    """

    def __init__(self, *args: Any, send_policy: Callable[[Claim], SendPolicy], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.send_policy = send_policy

    #: Whether each message's handler runs inside a mark that its failure undoes (TRANSACTION_SCOPE).
    marks = False

    def batch(self, count: int, summary: ProcessSummary) -> None:
        part = ProcessSummary()
        finished: list[ReceivedMessage] = []
        again: list[int] = []
        try:
            with Claim(self.session, self.queue, position=self.positions.mine()).open(count) as claim:
                again = self.count_rows(claim, part)
                part.add_stats(claim.stats)
                sends = self.send_policy(claim)
                context = self._context(claim, sends)
                if self.marks or self.recoverability.failures:  # marks, or messages failed in an earlier batch
                    for message in claim.messages:
                        if self._handle(claim, context, sends, message, part):
                            finished.append(message)
                else:
                    self._handle_first(claim, context, sends, part)
                    # every failure was settled as it happened: what is unsettled now was handled
                    part.succeeded += claim.unsettled
                    claim.ack_all()
                sends.flush()
        except BaseException:
            # rolled back and its counts dropped: the messages received in this batch for the first time count
            # as received when taken again; those received before are still "received before"
            self.returned(again)
            raise
        # committed: only now are the counts and the failure bookkeeping true
        self.returned(claim.released_seqs)
        if finished:
            self.recoverability.forget_many(finished)
        summary.add(part)

    def _handle_first(self, claim: Claim, context: HandlerContext, sends: SendPolicy, part: ProcessSummary) -> None:
        """Handle a batch none of whose messages failed in an earlier batch. A failure is settled here (released,
        delayed or rejected); the messages that succeed are left unsettled for the caller to ack all at once."""
        handler, done, retry_header = self.handler, sends.message_done, h.RETRY_UNIQUE_MESSAGE_ID
        for message in claim.messages:
            context.message = message
            try:
                handler(message, context)
                if retry_header in message.headers:
                    acknowledge_retry(sends, self.queue, message)
            except Exception as exc:
                if self._is_infrastructure(exc):
                    raise
                self._failed(claim, sends, message, exc, part)
                continue
            done(True)

    def _context(self, claim: Claim, sends: SendPolicy) -> HandlerContext:
        return HandlerContext(self.transport, self.mode, sends, queue=self.queue)

    def _handle(self, claim: Claim, context: HandlerContext, sends: SendPolicy, message: ReceivedMessage,
                part: ProcessSummary) -> bool:
        """Handle one message; return True when it leaves the queue with the batch."""
        earlier = self.recoverability.exhausted(message)
        if earlier is not None:  # its immediate retries ran out in a batch that did not commit
            return self._give_up(claim, message, earlier, self.recoverability.after_immediate(message, 0), part)
        mark = self._before(claim)
        try:
            context.message = message
            self.handler(message, context)
            acknowledge_retry(sends, self.queue, message)
        except Exception as exc:
            if self._is_infrastructure(exc):
                raise
            self._undo(claim, mark)
            return self._failed(claim, sends, message, exc, part)
        self._keep(claim, mark)
        sends.message_done(True)
        claim.ack(message)
        part.succeeded += 1
        return True

    def _failed(self, claim: Claim, sends: SendPolicy, message: ReceivedMessage, exc: BaseException,
                part: ProcessSummary) -> bool:
        """The handler raised: retry (release), delay or reject; return True when the message leaves the queue."""
        sends.message_done(False)
        decision = self.recoverability.failed(message, exc)
        log.warning("handler failed for message %s (attempt %d of %d): %s", printable(message.message_id),
                    decision.attempts, self.recoverability.immediate_retries + 1, printable(exception_text(exc)))
        if decision.action is Action.RETRY:
            claim.release(message)
            part.retries += 1
            return False  # not deleted: back at the head of the queue when the batch commits
        return self._give_up(claim, message, exc, decision, part)

    def _give_up(self, claim: Claim, message: ReceivedMessage, exc: BaseException, decision: Any,
                 part: ProcessSummary) -> bool:
        if decision.action is Action.DELAY:
            self.outbox.write_delayed_copy(claim.cursor, self.queue, decision.headers, message.body, decision.delay)
            claim.ack(message)
            part.delayed += 1
        else:
            claim.reject(message, exc)
            part.failed += 1
        return True

    # the points where the handler's own SQL is kept or undone (TRANSACTION_SCOPE only)
    def _before(self, claim: Claim) -> Any:
        return None

    def _undo(self, claim: Claim, mark: Any) -> None:
        pass

    def _keep(self, claim: Claim, mark: Any) -> None:
        pass


class ScopedBatch(HeldBatch):
    """TRANSACTION_SCOPE: as ``HeldBatch``, and the handler's own SQL on ``context.connection`` joins the receive
    transaction; a savepoint per message undoes a failed handler's SQL and sends."""

    marks = True

    def _context(self, claim: Claim, sends: SendPolicy) -> HandlerContext:
        return HandlerContext(self.transport, self.mode, sends, scope=claim, queue=self.queue)

    def _before(self, claim: Claim) -> Any:
        savepoint = self.dialect.quote("sqlqueue_message")
        self.dialect.execute(claim.cursor, "savepoint", None, savepoint=savepoint)
        return savepoint

    def _undo(self, claim: Claim, mark: Any) -> None:
        self.dialect.execute(claim.cursor, "rollback_to_savepoint", None, savepoint=mark)
        self.dialect.execute(claim.cursor, "release_savepoint", None, savepoint=mark)

    def _keep(self, claim: Claim, mark: Any) -> None:
        self.dialect.execute(claim.cursor, "release_savepoint", None, savepoint=mark)


def strategy_for(mode: TransactionMode | str, session: Session, queue: TableQueue, outbox: Outbox,
                 handler: Handler, recoverability: Recoverability, transport: Any = None) -> ReceiveStrategy:
    """The receive strategy of a transaction mode on this database: the one place that reads the mode."""
    mode = TransactionMode.parse(mode)
    args = (session, queue, outbox, handler, recoverability, mode, transport)
    if mode is TransactionMode.NONE:
        return AtMostOnce(*args)
    if mode is TransactionMode.TRANSACTION_SCOPE:
        return ScopedBatch(*args, send_policy=lambda claim: EnlistedSends(outbox, claim))
    if mode is TransactionMode.SENDS_ATOMIC_WITH_RECEIVE:
        return HeldBatch(*args, send_policy=lambda claim: BufferedSends(outbox, claim, keep_failed=False))
    if session.dialect.single_writer:  # RECEIVE_ONLY where a second connection cannot write meanwhile
        return HeldBatch(*args, send_policy=lambda claim: BufferedSends(outbox, claim, keep_failed=True))
    return HeldBatch(*args, send_policy=lambda claim: ImmediateSends(outbox, session))
