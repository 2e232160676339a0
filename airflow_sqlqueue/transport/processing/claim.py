"""``Claim``: up to N of the oldest rows of one queue, held in one open transaction until each is settled.

The one receive primitive: the handler pump, the drain, the command line's receive and the Airflow event
trigger all receive through it. Opening a claim locks up to N rows and settles on the spot the rows that are
not messages (expired: dropped; unreadable or refused forwards: error queue; forwards: passed on). Each message
is then settled once: ``ack`` (it leaves the queue), ``reject`` (it goes to the error queue) or ``release``
(it stays, and is received again after the claim ends). ``commit`` deletes every acked and settled row in one
statement and commits; ``abandon`` rolls everything back. If the process dies first, the database rolls the
transaction back and every row returns to the queue.

A claim opened with ``take=True`` deletes its rows as it locks them (one ``DELETE ... RETURNING``): for callers
that keep the whole batch or none of it (the drain, the handler pump's NONE mode); there ``release`` is refused.
``take_once`` (below) is the at-most-once ``receive()`` where a statement can commit by itself (PostgreSQL,
SQLite): the same take and the same triage of rows, without a transaction around them.

Every method blocks and is safe to call from any thread, one call at a time (the event trigger calls them
through ``asyncio.to_thread``).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from typing import Any

from ..common.errors import OutcomeUnknownError, SqlQueueError
from ..common.redaction import first_line
from ..tables.queue import ReceiveStats, SeqRange, TableQueue
from ..tables.session import Session, Transaction
from ..wire.messages import ReceivedMessage

log = logging.getLogger(__name__)


class ClaimClosedError(SqlQueueError):
    """The claim was committed or abandoned already."""


class Claim:
    """Rows of one queue held in one transaction until settled. See the module docstring.

    :param session: the transport's session (pool and transactions).
    :param queue: the queue to claim rows of.
    :param take: delete the rows when they are locked (keep-all-or-nothing callers).
    :param within: claim only rows at these positions (with ``take``: a partition of a partitioned drain).
    """

    _numbers = itertools.count(1)

    def __init__(self, session: Session, queue: TableQueue, *, take: bool = False,
                 within: SeqRange | None = None) -> None:
        if within is not None and not take:
            raise ValueError("a claim restricted to a position range must take its rows (take=True)")
        self.session = session
        self.queue = queue
        self.take = take
        self.within = within
        #: A number unique in this process (the event trigger tells its claims apart by it).
        self.number = next(self._numbers)
        self.messages: list[ReceivedMessage] = []
        self.stats = ReceiveStats()
        #: Rows locked when the claim opened (messages and settled rows).
        self.locked = 0
        self.acked = 0
        self.rejected = 0
        #: Positions of the released messages (back in the queue once the claim ends).
        self.released_seqs: list[int] = []
        self._tx: Transaction | None = None
        self._done: list[int] = []
        self._pending: dict[int, ReceivedMessage] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- opening -----------------------------------------------------------------------------------
    def open(self, count: int) -> Claim:
        """Lock (or take) up to ``count`` rows; settle the ones that are not messages. Returns the claim."""
        with self._lock:
            if self._tx is not None or self._closed:
                raise ClaimClosedError("a claim is opened once")
            tx = self._tx = self.session.begin()
            try:
                cursor = tx.cursor
                queue, within = self.queue, self.within
                if self.take:
                    def first() -> list[Any]:
                        return queue.take(cursor, count, within)
                else:
                    def first() -> list[Any]:
                        return queue.lock(cursor, count)
                rows = self.session.dialect.first_statement(tx.connection, first)  # sent with its BEGIN where it can
                self.locked = len(rows)
                self.messages, settled = self.queue.sort_out(cursor, rows, self.stats)
                self._done = [] if self.take else settled  # taken rows are deleted already
                self._pending = {m.seq: m for m in self.messages}
            except BaseException as exc:
                self._end(exc)
                if isinstance(exc, Exception):
                    explained = self.session.explain(exc, f"receive from {self.queue.name!r}")
                    if explained is not exc:
                        raise explained from exc
                raise
        return self

    # -- what the holder of the claim uses ---------------------------------------------------------
    @property
    def cursor(self) -> Any:
        """A cursor in the claim's transaction (work on it commits or rolls back with the claim)."""
        return self._open().cursor

    @property
    def connection(self) -> Any:
        """The claim's connection. Never commit or roll it back yourself."""
        return self._open().connection

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def released(self) -> int:
        """Messages released (left in the queue)."""
        return len(self.released_seqs)

    @property
    def unsettled(self) -> int:
        """Messages not acked, rejected or released yet."""
        return len(self._pending)

    def message(self, seq: int) -> ReceivedMessage | None:
        """The unsettled message at ``seq``, or None (settled already, or not in this claim)."""
        return self._pending.get(seq)

    # -- settling ------------------------------------------------------------------------------------
    def ack(self, message: ReceivedMessage | int) -> None:
        """The message was handled: it leaves the queue when the claim commits."""
        with self._lock:
            found = self._settle(message)
            if found is not None:
                self.acked += 1
                if not self.take:
                    self._done.append(found.seq)

    def ack_all(self) -> None:
        """Ack every unsettled message."""
        with self._lock:
            self._open()
            self.acked += len(self._pending)
            if not self.take:
                self._done.extend(self._pending)
            self._pending.clear()

    def reject(self, message: ReceivedMessage | int, exc: BaseException) -> None:
        """The message failed for good: copy it to the error queue (with ``exc`` as its failure) now, and let it
        leave the queue when the claim commits."""
        with self._lock:
            found = self._settle(message)
            if found is not None:
                tx = self._open()
                try:
                    self.queue.dead_letter(tx.cursor, found.native_id, found.headers, found.body, exc)
                except BaseException as error:
                    self._end(error)
                    raise
                self.rejected += 1
                if not self.take:
                    self._done.append(found.seq)

    def release(self, message: ReceivedMessage | int) -> None:
        """Leave the message in the queue: it is received again once the claim ends."""
        with self._lock:
            if self.take:
                raise SqlQueueError("a claim opened with take=True deleted its rows already: it cannot release one; "
                                    "abandon the claim to return every row")
            found = self._settle(message)
            if found is not None:
                self.released_seqs.append(found.seq)

    def _settle(self, message: ReceivedMessage | int) -> ReceivedMessage | None:
        self._open()
        seq = message if isinstance(message, int) else message.seq
        return self._pending.pop(seq, None)

    # -- ending ----------------------------------------------------------------------------------------
    def commit(self) -> None:
        """Delete the acked, rejected and settled rows (one statement) and commit. Unsettled messages stay."""
        with self._lock:
            if self._closed:
                return
            tx = self._open()
            done = self._done
            self._closed = True
            self._tx = None
            # the delete leaves with the COMMIT where the driver can (one round trip); if it fails, nothing is
            # committed and every row returns to the queue
            tx.commit((lambda cursor: self.queue.delete(cursor, done)) if done else None)

    def abandon(self) -> None:
        """Roll everything back: every row returns to the queue, the error-queue copies are undone."""
        with self._lock:
            if not self._closed:
                self._end(_Abandoned())

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.commit()
        else:
            with self._lock:
                if not self._closed:
                    self._end(exc)

    def _open(self) -> Transaction:
        if self._closed or self._tx is None:
            raise ClaimClosedError("the claim is not open (never opened, committed or abandoned)")
        return self._tx

    def _end(self, exc: BaseException) -> None:
        self._closed = True
        tx, self._tx = self._tx, None
        if tx is not None:
            tx.rollback(exc)


class _Abandoned(Exception):
    """Stands for the reason of an abandoned claim (a plain rollback)."""


def take_once(session: Session, queue: TableQueue, count: int) -> list[ReceivedMessage]:
    """An at-most-once receive as lean as a hand loop: up to ``count`` of the oldest rows taken by one statement in
    autocommit (one round trip, no BEGIN or COMMIT; only where ``dialect.autocommit_statements`` is set).

    The common rows are the messages. Rows that need more (expired: dropped; unreadable or to be forwarded: error
    queue or the queue they name) are taken out with them and sorted out at once in a transaction of their own;
    should that fail, they are put back into the queue (under their Ids) and the failure is logged. Between the
    two a process that dies loses those rows, as it loses the messages it received. A connection lost once the
    statement left raises ``OutcomeUnknownError``: the rows it took, if any, are gone.
    """
    what = f"receive from {queue.name!r}"

    def unknown(exc: BaseException) -> Exception:
        return OutcomeUnknownError(
            f"{what}: the connection was lost once the receive was sent ({first_line(exc)}): up to {count} "
            "message(s) may have been taken and are lost (receive() is at-most-once); use receiving() or a claim "
            "where a lost connection must leave them in the queue")

    rows = session.run_once(lambda cursor: queue.take(cursor, count), what=what, unknown=unknown)
    deferred: list[Sequence[Any]] = []
    messages, _ = queue.sort_out(None, rows, ReceiveStats(), deferred)
    if not deferred:
        return messages

    def settle(cursor: Any) -> list[ReceivedMessage]:
        return queue.sort_out(cursor, deferred, ReceiveStats())[0]

    try:
        more = session.run(settle, what=what)
    except Exception as exc:  # noqa: BLE001 - the rows go back; the messages taken are the caller's already
        _put_back(session, queue, deferred, exc)
        return messages
    if more:
        messages = sorted(messages + more, key=_position)
    return messages


def _position(message: ReceivedMessage) -> tuple[bool, int]:
    return message.seq is None, message.seq or 0


def _put_back(session: Session, queue: TableQueue, rows: list[Sequence[Any]], exc: Exception) -> None:
    """Return rows a lean receive could not sort out into their queue (same Id, headers and body)."""
    ids = ", ".join(str(row[0]) for row in rows[:5])

    def put(cursor: Any) -> None:
        for row in rows:
            queue.put(cursor, row[0], row[3], row[4])

    try:
        session.run(put, what=f"put rows back into {queue.name!r}")
    except Exception as error:  # noqa: BLE001 - nothing more can be done: said loudly
        log.error("receive from %s took %d row(s) it could not sort out (%s) nor put back (%s): they are lost "
                  "(Ids %s)", queue.name, len(rows), first_line(exc), first_line(error), ids)
        return
    log.warning("receive from %s could not sort out %d row(s) (%s): put back into the queue (Ids %s)", queue.name,
                len(rows), first_line(exc), ids)
