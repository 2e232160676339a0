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

A claim given a ``ReceivePosition`` (the handler pump's and the drain's receivers, one each, where the dialect
has ``bounded_receives``: PostgreSQL) starts past the last row that receiver took instead of at the head of the
queue, and tells the position what it took and how it ended (see ``ReceivePosition``).

Every method blocks and is safe to call from any thread, one call at a time (the event trigger calls them
through ``asyncio.to_thread``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..common.errors import OutcomeUnknownError, SqlQueueError
from ..common.redaction import first_line
from ..dialects import Dialect
from ..tables.queue import ReceiveStats, SeqRange, TableQueue
from ..tables.session import Session, Transaction
from ..wire.messages import ReceivedColumns, ReceivedMessage

log = logging.getLogger(__name__)

#: A receiver that starts past its last position goes back to the head of the queue at least every this many
#: receives...
RESTART_EVERY = 64
#: ...and at least this often (seconds): the longest a row below its position waits for it (see ReceivePosition).
RESTART_SECONDS = 1.0


class ReceivePosition:
    """Where one receiver's next receive starts: past the last row it took, or at the head of the queue.

    On PostgreSQL the rows receives delete stay in the seq index until a vacuum may remove them, and no vacuum may
    while a transaction older than the deletes is open (an idle one, a REPEATABLE READ reader, a long report):
    a receive from the head then walks every one of them (a heap visit each) before it finds a live row. Starting
    past the last row this receiver took skips them.

    Rows below the position are not forgotten, only received later: a row whose sender's transaction took its
    position before and committed after the receiver passed it, a row another receiver held and released or
    rolled back, a row of a receiver that died. A claim that finds nothing past the position looks from the head
    at once (so an empty claim still means an empty queue); the receiver goes back to the head after a receive
    that took fewer rows than it asked for (the end of what it may take: the usual case below saturation), after
    its own claim rolled back or released a message, after a position it cannot read (NULL), and at least every
    ``every`` receives and every ``seconds`` (default ``RESTART_EVERY``, ``RESTART_SECONDS``): a row below the
    position waits at most that long.

    One per receiver, used by one thread at a time. ``clock`` is for tests.
    """

    __slots__ = ("after", "every", "seconds", "clock", "_receives", "_restart_at")

    def __init__(self, every: int | None = None, seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = RESTART_EVERY if every is None else every
        self.seconds = RESTART_SECONDS if seconds is None else seconds
        self.clock = clock
        #: The position the next receive starts after; None: at the head.
        self.after: int | None = None
        self._receives = 0
        self._restart_at = 0.0

    def start(self) -> int | None:
        """The position the next receive starts after, or None (from the head: then the count starts again)."""
        if self.after is not None:
            self._receives += 1
            if self._receives >= self.every or self.clock() >= self._restart_at:
                self.after = None
        if self.after is None:
            self._receives = 0
            self._restart_at = self.clock() + self.seconds
        return self.after

    def took(self, rows: Sequence[Sequence[Any]], asked: int) -> None:
        """A receive asked for ``asked`` rows and got ``rows`` (sorted by position): start past the last of them,
        or at the head when they were fewer than asked or one has no position."""
        if len(rows) < asked:
            self.after = None
            return
        last = rows[-1][1]  # rows come sorted by position, a NULL one last
        self.after = last if type(last) is int else None

    def restart(self) -> None:
        """Start the next receive at the head (a claim rolled back or released rows: they are below)."""
        self.after = None


class ReceivePositions:
    """One ``ReceivePosition`` per receiving thread, where the dialect has ``bounded_receives`` (else None)."""

    def __init__(self, dialect: Dialect) -> None:
        self.enabled = dialect.bounded_receives
        self._local = threading.local()

    def mine(self) -> ReceivePosition | None:
        """The calling thread's position (made at its first receive)."""
        if not self.enabled:
            return None
        position = getattr(self._local, "position", None)
        if position is None:
            position = self._local.position = ReceivePosition()
        return position


class ClaimClosedError(SqlQueueError):
    """The claim was committed or abandoned already."""


class Claim:
    """Rows of one queue held in one transaction until settled. See the module docstring.

    :param session: the transport's session (pool and transactions).
    :param queue: the queue to claim rows of.
    :param take: delete the rows when they are locked (keep-all-or-nothing callers).
    :param within: claim only rows at these positions (with ``take``: a partition of a partitioned drain).
    :param position: the receiver's position (start past its last row; see ``ReceivePosition``), or None: from
        the head of the queue.
    :param before: ``before(cursor)`` runs in the claim's transaction before the rows are locked (the event
        trigger's lease recovery puts rows back there first).
    :param columns: (with ``take``) the messages as columns in ``batch`` (``ReceivedColumns``), with no
        ``ReceivedMessage`` per row: for a caller that stores the whole batch as it is (the Parquet drain).
        ``messages`` is made from it only if asked for; nothing is left to settle.
    """

    _numbers = itertools.count(1)

    def __init__(self, session: Session, queue: TableQueue, *, take: bool = False,
                 within: SeqRange | None = None, position: ReceivePosition | None = None,
                 before: Callable[[Any], Any] | None = None, columns: bool = False) -> None:
        if within is not None and not take:
            raise ValueError("a claim restricted to a position range must take its rows (take=True)")
        if columns and not take:
            raise ValueError("a claim that reads its messages as columns must take its rows (take=True)")
        self.session = session
        self.queue = queue
        self.take = take
        self.within = within
        self.position = position
        self.before = before
        self.columns = columns
        #: A number unique in this process (the event trigger tells its claims apart by it).
        self.number = next(self._numbers)
        self._messages: list[ReceivedMessage] | None = []
        #: The messages as columns (a claim opened with ``columns=True``), else None.
        self.batch: ReceivedColumns | None = None
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
                if self.before is not None:
                    self.before(cursor)
                queue, within, position = self.queue, self.within, self.position
                after = None if position is None else position.start()
                if self.take:
                    def first(after: int | None = after) -> list[Any]:
                        return queue.take(cursor, count, within, after)
                else:
                    def first(after: int | None = after) -> list[Any]:
                        return queue.lock(cursor, count, after)
                rows = first()
                if position is not None:
                    if not rows and after is not None:
                        # nothing past the position: look from the head before the claim says the queue is empty
                        rows = first(None)
                    position.took(rows, count)
                self.locked = len(rows)
                if self.columns:  # taken rows: nothing is left to settle
                    self.batch = self.queue.sort_out_columns(cursor, rows, self.stats)
                    self._messages = None  # made from the columns if asked for
                else:
                    self._messages, settled = self.queue.sort_out(cursor, rows, self.stats)
                    self._done = [] if self.take else settled  # taken rows are deleted already
                    self._pending = {m.seq: m for m in self._messages}
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
    def messages(self) -> list[ReceivedMessage]:
        """The messages of the claim, FIFO (of a ``columns`` claim: made from ``batch`` when first asked for)."""
        if self._messages is None:
            self._messages = [] if self.batch is None else self.batch.messages()
        return self._messages

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
            if self.position is not None and self.released_seqs:
                self.position.restart()  # released rows stay where they were: below the position
            # the delete leaves with the COMMIT where the driver can (one round trip); if it fails, nothing is
            # committed and every row returns to the queue
            try:
                tx.commit((lambda cursor: self.queue.delete(cursor, done)) if done else None)
            except BaseException:
                if self.position is not None:
                    self.position.restart()
                raise

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
        if self.position is not None:
            self.position.restart()  # every row returns to the queue: below the position
        self._closed = True
        tx, self._tx = self._tx, None
        if tx is not None:
            tx.rollback(exc)


class _Abandoned(Exception):
    """Stands for the reason of an abandoned claim (a plain rollback)."""


#: What ``sort_out`` counts into when it settles no row itself (a ``deferred`` list takes them): never read.
_UNCOUNTED = ReceiveStats()


def take_once(session: Session, queue: TableQueue, count: int) -> list[ReceivedMessage]:
    """An at-most-once receive as lean as a hand loop: up to ``count`` of the oldest rows taken by one statement in
    autocommit (one round trip, no BEGIN or COMMIT; only where ``dialect.autocommit_statements`` is set).

    The common rows are the messages. Rows that need more (expired: dropped; unreadable or to be forwarded: error
    queue or the queue they name) are taken out with them and sorted out at once in a transaction of their own;
    should that fail, they are put back into the queue (under their Ids) and the failure is logged. Between the
    two a process that dies loses those rows, as it loses the messages it received. A connection lost once the
    statement left raises ``OutcomeUnknownError``: the rows it took, if any, are gone.
    """
    what = queue.receiving
    rows = session.run_once(queue.take, count, what=what,
                            unknown=_lost_receive(what) if session.dialect.remote else None)
    deferred: list[Sequence[Any]] = []
    messages, _ = queue.sort_out(None, rows, _UNCOUNTED, deferred)
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


def _lost_receive(what: str) -> Callable[[int, BaseException], Exception]:
    """The error of a receive whose connection was lost once its statement left (see ``Session.run_once``)."""

    def unknown(count: int, exc: BaseException) -> Exception:
        return OutcomeUnknownError(
            f"{what}: the connection was lost once the receive was sent ({first_line(exc)}): up to {count} "
            "message(s) may have been taken and are lost (receive() is at-most-once); use receiving() or a claim "
            "where a lost connection must leave them in the queue")

    return unknown


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
