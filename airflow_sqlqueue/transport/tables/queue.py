"""One object per queue table: lock or take batches, sort rows out, dead-letter, forward, insert.

``TableQueue`` is what NServiceBus.SqlServer calls a TableBasedQueue: every statement about one queue table
goes through it, always inside a transaction the caller holds (a cursor). ``QueueBook`` parses addresses and
keeps one ``TableQueue`` per table, the error queue and the forwarding rules of the transport.

Rows are input from other systems: whatever a row holds, ``sort_out`` either returns it as a message or settles
it (dropped when expired, moved to the error queue when it cannot be read or may not be forwarded, forwarded when
it names another queue it may go to). Nothing in a row can make the batch fail.
"""

from __future__ import annotations

import json
import json.scanner
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from ..common.errors import ForwardRefusedError, InvalidAddressError, NotAQueueError, QueueNotFoundError
from ..common.redaction import first_line
from ..dialects import Dialect
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.failures import PoisonMessageError, error_row_headers, failure_headers
from ..wire.headers import PoisonHeadersError, parse_headers
from ..wire.ids import new_id
from ..wire.messages import ReceivedColumns, ReceivedMessage, as_body, as_text, headers_text, native_uuid

log = logging.getLogger(__name__)

_json_loads = json.loads
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner json.loads ends in, called directly
_STR_OR_NONE = frozenset({str, type(None)})
_UUID = uuid.UUID
_BYTES = bytes
_STR = str
_DICT = dict
_seq_of = itemgetter(1)
#: Below every position a row can hold (another program may insert a seq of 0 or below): "from the start".
FIRST_SEQ = -(2**63)
#: How many queue names (as given) a book remembers with their parsed queue.
MAX_NAMES_KEPT = 10_000


@dataclass
class ReceiveStats:
    """Rows a receive settled on its own: dropped as ``expired``, moved to the error queue as ``poison`` (headers
    that cannot be read, a forward that is refused), or ``forwarded`` to the queue they name."""

    expired: int = 0
    poison: int = 0
    forwarded: int = 0

    @property
    def settled(self) -> int:
        return self.expired + self.poison + self.forwarded

    def add(self, other: ReceiveStats) -> None:
        self.expired += other.expired
        self.poison += other.poison
        self.forwarded += other.forwarded


#: The upper end of an open ``SeqRange`` (the largest bigint: above every position a queue can have).
MAX_SEQ = 2**63 - 1


@dataclass(frozen=True)
class SeqRange:
    """Positions ``first`` to ``last`` of a queue, both included (``last`` None: no upper end).

    A partitioned drain gives each partition one range: ranges that do not overlap make claims that cannot.
    """

    first: int
    last: int | None = None

    def __post_init__(self) -> None:
        if type(self.first) is not int or (self.last is not None and type(self.last) is not int):
            raise ValueError(f"a position range needs whole numbers, got first={self.first!r}, last={self.last!r}")
        if self.last is not None and self.last < self.first:
            raise ValueError(f"a position range must not end ({self.last}) before it starts ({self.first})")

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.first <= seq and (self.last is None or seq <= self.last)


class TableQueue:
    """Statements about one queue table. Every method takes the cursor of a transaction the caller holds.

    :param dialect: the database's dialect.
    :param address: the queue table.
    :param book: the transport's address book (error queue, forwarding rules, existence cache).
    """

    def __init__(self, dialect: Dialect, address: QueueAddress, book: QueueBook) -> None:
        self.dialect = dialect
        self.address = address
        self.book = book
        self.name = dialect.format_address(address)
        #: The canonical address written in headers (``NServiceBus.FailedQ``, forward destinations, replies).
        self.wire = dialect.wire_address(address)
        self.ids = dialect.identifiers(address)
        #: What a send to this queue is called in errors and logs (made once: sends are many).
        self.sending = f"send to {self.name!r}"
        #: What a receive from this queue is called in errors and logs.
        self.receiving = f"receive from {self.name!r}"
        self._runners: dict[str, Callable[[Any, dict[str, Any] | None], Any]] = {}
        #: The statement that takes one row (a dialect may have a cheaper one than ``receive_batch``).
        self._receive_one = "receive_one" if "receive_one" in dialect.statements else "receive_batch"

    def run(self, cursor: Any, name: str, params: dict[str, Any] | None) -> Any:
        """Run the named statement about this queue (``dialect.execute`` with its identifiers); return the cursor."""
        return (self._runners.get(name) or self._runner(name))(cursor, params)

    def _runner(self, name: str) -> Callable[[Any, dict[str, Any] | None], Any]:
        run = self._runners[name] = self.dialect.runner(name, self.ids)
        return run

    def __repr__(self) -> str:
        return f"TableQueue({self.name!r})"

    # -- taking rows -------------------------------------------------------------------------------
    def lock(self, cursor: Any, count: int, after: int | None = None) -> list[Sequence[Any]]:
        """Lock up to ``count`` of the oldest rows no other receiver holds (held until the transaction ends); only
        rows past position ``after``, when given (``dialect.bounded_receives``)."""
        if after is None:
            return self._rows(cursor, "lock_batch", {"batch_size": count})
        return self._rows(cursor, "lock_after", {"batch_size": count, "after_seq": after})

    def take(self, cursor: Any, count: int, within: SeqRange | None = None,
             after: int | None = None) -> list[Sequence[Any]]:
        """Delete up to ``count`` of the oldest rows no other receiver holds (only positions ``within`` the range,
        when given; only past position ``after``, when given: ``dialect.bounded_receives``) and return them."""
        if within is None:
            if after is None:
                return self._rows(cursor, self._receive_one if count == 1 else "receive_batch", {"batch_size": count})
            return self._rows(cursor, "receive_after", {"batch_size": count, "after_seq": after})
        first = within.first if after is None else max(within.first, after + 1)
        last = MAX_SEQ if within.last is None else within.last
        if first > last:  # past the end of the range: nothing to take there
            return []
        return self._rows(cursor, "receive_range", {"batch_size": count, "first_seq": first, "last_seq": last})

    def bounds(self, cursor: Any) -> SeqRange | None:
        """The positions of the oldest and the newest row (None when the queue is empty)."""
        first, last = self.dialect.execute(cursor, "seq_bounds", None, **self.ids).fetchone()
        if first is None or last is None:
            return None
        return SeqRange(int(first), int(last))

    def _rows(self, cursor: Any, statement: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        rows = self.run(cursor, statement, params).fetchall()
        return rows if len(rows) < 2 else _in_order(rows)

    def delete(self, cursor: Any, seqs: list[int]) -> None:
        """Delete the rows at these positions (rows this transaction holds) in one statement."""
        if len(seqs) == 1:
            self.dialect.execute(cursor, "delete_by_seq", {"seq": seqs[0]}, **self.ids)
        elif seqs:
            self.dialect.delete_seqs(cursor, self.address, seqs)

    # -- sorting rows out --------------------------------------------------------------------------
    def sort_out(self, cursor: Any, rows: list[Sequence[Any]], stats: ReceiveStats,
                 deferred: list[Sequence[Any]] | None = None) -> tuple[list[ReceivedMessage], list[int]]:
        """The messages among ``rows`` (FIFO), and the positions of the rows settled here (expired, poison, forwarded).

        The common row (a JSON object of strings, not expired, no forward header, a UUID id and bytes body) takes
        the fast path; anything else is decided by ``_unusual``, or, when a ``deferred`` list is given (and
        ``cursor`` may be None), appended to it for the caller to sort out in a transaction of its own.
        """
        messages: list[ReceivedMessage] = []
        settled: list[int] = []
        name = self.name
        for row, headers in zip(rows, _plain_headers(rows)):  # noqa: B905 - one entry a row (strict= costs a call)
            if headers is None:
                if deferred is not None:
                    deferred.append(row)
                    continue
                message = self._unusual(cursor, row, stats)
                if message is None:
                    settled.append(row[1])
                else:
                    messages.append(message)
                continue
            messages.append(ReceivedMessage(row[0], headers, row[4], row[1], name, row[3]))
        return messages, settled

    def sort_out_columns(self, cursor: Any, rows: list[Sequence[Any]], stats: ReceiveStats) -> ReceivedColumns:
        """The messages among ``rows`` (FIFO) as columns, the other rows settled as ``sort_out`` settles them.

        The same triage without a ``ReceivedMessage`` or a kept headers dict per row: when every row takes the
        fast path (the common batch) the columns are the rows' own values, transposed in one step; only the rows
        ``_unusual`` decides are read one by one.
        """
        plain = _plain_headers(rows)
        if None not in plain:
            ids, seqs, _, texts, bodies = zip(*rows, strict=True) if rows else ((), (), (), (), ())
            return ReceivedColumns(ids, seqs, texts, bodies, self.name)
        ids, seqs, texts, bodies = [], [], [], []
        for row, headers in zip(rows, plain, strict=True):
            if headers is None:
                message = self._unusual(cursor, row, stats)
                if message is None:
                    continue
                ids.append(message.native_id)
                seqs.append(message.seq)
                texts.append(headers_text(message))
                bodies.append(message.body)
            else:
                ids.append(row[0])
                seqs.append(row[1])
                texts.append(row[3])
                bodies.append(row[4])
        return ReceivedColumns(ids, seqs, texts, bodies, self.name)

    def _unusual(self, cursor: Any, row: Sequence[Any], stats: ReceiveStats) -> ReceivedMessage | None:
        """Decide a row the fast path did not take: a message, or None once it was settled here."""
        raw_id, seq, expired, text, body = row
        text = as_text(text)
        try:
            headers = parse_headers(text)
        except (PoisonHeadersError, ValueError, RecursionError, MemoryError) as exc:
            # upstream parses before the expiry test: an expired poison row is still dead-lettered
            self.dead_letter_raw(cursor, raw_id, text, body, PoisonMessageError(f"{exc}"))
            stats.poison += 1
            return None
        if expired:
            stats.expired += 1
            return None
        body = as_body(body)
        forward = headers.pop(h.FORWARD_DESTINATION, None)
        if forward is not None:
            target = self._forward_target(forward)
            if isinstance(target, ForwardRefusedError):
                self.dead_letter(cursor, raw_id, headers, body, target)
                stats.poison += 1
                return None
            if target is not self:
                refused = self._forward(cursor, target, raw_id, headers, body)
                if refused is not None:
                    self.dead_letter(cursor, raw_id, headers, body, refused)
                    stats.poison += 1
                else:
                    stats.forwarded += 1
                return None
        # headers_text only while it holds exactly these headers (not once the forward header was taken out)
        return ReceivedMessage(raw_id, headers, body, int(seq), self.name, text if forward is None else None)

    # -- forwarding -------------------------------------------------------------------------------
    def _forward_target(self, forward: Any) -> TableQueue | ForwardRefusedError:
        """The queue a ForwardDestination names (this one when it names itself), or why it may not go there."""
        if not isinstance(forward, str) or not forward.strip():
            return ForwardRefusedError(f"{h.FORWARD_DESTINATION} is empty; the message cannot be forwarded")
        try:
            address = self.dialect.parse_address(forward)
        except InvalidAddressError as exc:
            return ForwardRefusedError(f"{h.FORWARD_DESTINATION} {forward!r} is not a queue address: {exc}")
        if self.dialect.same_queue(address, self.address):
            return self
        if not self.book.may_forward(self, address):
            return ForwardRefusedError(
                f"{h.FORWARD_DESTINATION} names {forward!r}, which {self.name} does not forward to (it forwards "
                "only to itself, the error queue and the queues given in forward_to=); the message was not sent on")
        try:
            return self.book.queue(address)
        except NotAQueueError as exc:
            return ForwardRefusedError(f"{h.FORWARD_DESTINATION} names {forward!r}: {exc}")

    def _forward(self, cursor: Any, target: TableQueue, raw_id: Any, headers: dict[str, str | None],
                 body: bytes) -> ForwardRefusedError | None:
        """Insert a forwarded message into ``target`` (same Id); why it could not, or None."""
        if not self.book.exists(cursor, target):
            return ForwardRefusedError(f"{h.FORWARD_DESTINATION} names {target.name!r}, which does not exist; "
                                       "create that queue, then retry the message from the error queue")
        savepoint = self.dialect.quote("sqlqueue_forward")
        self.dialect.execute(cursor, "savepoint", None, savepoint=savepoint)
        try:
            target.insert(cursor, raw_id, headers, body)
        except Exception as exc:  # noqa: BLE001 - the insert is undone; the row goes to the error queue instead
            self.dialect.execute(cursor, "rollback_to_savepoint", None, savepoint=savepoint)
            self.book.forget(target)
            return ForwardRefusedError(f"forwarding to {target.name!r} failed: {first_line(exc)}")
        self.dialect.execute(cursor, "release_savepoint", None, savepoint=savepoint)
        return None

    # -- writing rows ------------------------------------------------------------------------------
    def put(self, cursor: Any, native_id: Any, headers_text: str, body: bytes | None) -> bool:
        """Insert a row as it is (Id given, no Expires; a NULL body as empty bytes: NULL stops a .NET PostgreSQL
        receiver and ServiceControl's ingestion). False, inserting nothing, when the table already holds that Id:
        PostgreSQL and SQLite queue tables are keyed by Id. A SQL Server queue table has no key on Id (upstream
        makes none), so there the row always goes in."""
        params = {"id": native_id_param(self.dialect, native_id), "headers": headers_text,
                  "body": b"" if body is None else body}
        return self.dialect.execute(cursor, "insert_raw", params, **self.ids).rowcount != 0

    def insert(self, cursor: Any, native_id: Any, headers: dict[str, str | None], body: bytes | None) -> None:
        """Insert a row that must go in (a dead letter, a forward: the receive path cannot leave a row where it is):
        when the table already holds its Id, under a new Id, with the one it had in ``airflow_sqlqueue.OriginalId``."""
        if not self.put(cursor, native_id, h.serialize_headers(headers, limit=None), body):
            renamed = {**headers, h.ORIGINAL_ID: _id_text(native_id)}
            self.put(cursor, new_id(), h.serialize_headers(renamed, limit=None), body)

    def move(self, cursor: Any, seq: int, native_id: Any, target: TableQueue, headers_text: str,
             body: bytes | None) -> bool:
        """Move the row at position ``seq`` (locked by this transaction) into ``target`` as ``native_id`` with
        ``headers_text`` and ``body``: copy it in, then delete it here, in the caller's transaction.

        False, changing nothing, when ``target`` already holds that Id: a row is never deleted that was not copied.
        Every path that takes a row out of one queue and puts it into another (retry, redirect, edit and retry)
        moves it with this."""
        if not target.put(cursor, native_id, headers_text, body):
            return False
        if self.dialect.execute(cursor, "delete_by_seq", {"seq": seq}, **self.ids).rowcount == 0:
            raise LookupError(f"the row at position {seq} of {self.name} was copied to {target.name} but is no longer "
                              "there to delete; the copy is undone with the transaction")
        return True

    def dead_letter(self, cursor: Any, native_id: Any, headers: dict[str, str | None], body: bytes | None,
                    exc: BaseException) -> None:
        """Copy a message into the error queue (same Id and body) as core 10 does, so that ServiceControl imports
        it: ``NServiceBus.MessageId`` (the native Id when missing), the canonical ``FailedQ``, processing
        endpoint and machine, host, exception info; retry bookkeeping and the forward header removed."""
        merged = error_row_headers(headers, _id_text(native_id), self.wire, exc, endpoint=self.endpoint)
        self.book.error.insert(cursor, native_id, merged, body)

    def dead_letter_raw(self, cursor: Any, native_id: Any, text: str | None, body: Any, exc: BaseException) -> None:
        """Copy a row whose headers cannot be read into the error queue: their text kept under a header, and the
        error-row headers added (with the native Id as ``NServiceBus.MessageId``) so ServicePulse shows it."""
        headers = {h.MESSAGE_ID: _id_text(native_id),
                   **failure_headers(self.wire, exc, endpoint=self.endpoint),
                   h.RAW_HEADERS: "" if text is None else text}
        self.book.error.insert(cursor, native_id, headers, as_body(body))

    @property
    def endpoint(self) -> str:
        """The endpoint name written as ``NServiceBus.ProcessingEndpoint`` (the transport's, else the table's)."""
        return self.book.endpoint or self.address.table


class QueueBook:
    """The queues of one transport: addresses parsed once, one ``TableQueue`` per table, the error queue, which
    queues a receiver may forward to, and which tables are known to exist.

    :param dialect: the database's dialect.
    :param error_queue: where poison rows and failed messages go.
    :param forward_to: queues any receiver of this transport may forward a message to (besides itself and the
        error queue) when a row's ``NServiceBus.SqlServer.ForwardDestination`` names them.
    :param endpoint: the endpoint name this transport stands for (``NServiceBus.ProcessingEndpoint``,
        ``OriginatingEndpoint``); None: each queue's table name.
    """

    def __init__(self, dialect: Dialect, error_queue: str | QueueAddress, forward_to: Iterable[str] = (),
                 endpoint: str | None = None) -> None:
        self.dialect = dialect
        self.endpoint = endpoint
        self._queues: dict[QueueAddress, TableQueue] = {}
        self._by_text: dict[str, TableQueue] = {}
        self._existing: set[QueueAddress] = set()
        self._lock = threading.Lock()
        self.error = self.queue(error_queue)
        self.forward_to = tuple(self.address(q) for q in forward_to)

    def address(self, queue: str | QueueAddress) -> QueueAddress:
        """Parse and validate a queue address for this dialect."""
        return self.dialect.parse_address(queue)

    def queue(self, queue: str | QueueAddress | TableQueue) -> TableQueue:
        """The ``TableQueue`` of a queue (made once per table); NotAQueueError for a system table."""
        if isinstance(queue, TableQueue):
            return queue
        found = (self._by_text if type(queue) is str else self._queues).get(queue)  # type: ignore[call-overload]
        if found is not None:  # text seen before, or an address as parsed: no parse again
            return found
        address = self.address(queue)
        found = self._queues.get(address)
        if found is None:
            refused = self.dialect.system_table(address)
            if refused is not None:
                raise NotAQueueError(refused)
            with self._lock:
                found = self._queues.setdefault(address, TableQueue(self.dialect, address, self))
        if type(queue) is str and len(self._by_text) < MAX_NAMES_KEPT:
            self._by_text[queue] = found  # the same text names the same queue: parsed once
        return found

    def may_forward(self, source: TableQueue, target: QueueAddress) -> bool:
        """Whether ``source`` may forward a message to ``target`` (itself, the error queue, or ``forward_to``)."""
        same = self.dialect.same_queue
        return (same(target, source.address) or same(target, self.error.address)
                or any(same(target, allowed) for allowed in self.forward_to))

    def exists(self, cursor: Any, queue: TableQueue) -> bool:
        """Whether the queue's table exists (checked on ``cursor``; positive answers are kept)."""
        if queue.address in self._existing:
            return True
        if self.dialect.table_exists(cursor, queue.address):
            self._existing.add(queue.address)
            return True
        return False

    def require(self, cursor: Any, queue: str | QueueAddress | TableQueue) -> TableQueue:
        """The queue, or QueueNotFoundError when its table does not exist."""
        table = self.queue(queue)
        if not self.exists(cursor, table):
            raise QueueNotFoundError(f"queue {table.name!r} does not exist; create it with `sqlqueue create` or "
                                     "SqlQueueTransport.create_queue()")
        return table

    def forget(self, queue: TableQueue) -> None:
        """Check the queue's existence again next time (after a statement on it failed)."""
        self._existing.discard(queue.address)


def _in_order(rows: list[Sequence[Any]]) -> list[Sequence[Any]]:
    """Rows by position (a statement's RETURNING order is not FIFO), sorted in place."""
    try:
        rows.sort(key=_seq_of)
    except TypeError:  # a NULL position in a table of another program: last, as the database orders it
        rows.sort(key=lambda row: (row[1] is None, row[1] or 0))
    return rows


def _plain_headers(rows: list[Sequence[Any]]) -> list[dict[str, str | None] | None]:
    """Each row's parsed headers where the row takes the fast path (a JSON object of strings, not expired, no
    forward header, text headers, a bytes body), else None: ``TableQueue._unusual`` decides that row."""
    found: list[dict[str, str | None] | None] = []
    append = found.append
    forward, only_text = h.FORWARD_DESTINATION, _STR_OR_NONE.issuperset
    for _, _, expired, text, body in rows:
        try:
            headers, end = _scan_json(text, 0)
            if end != len(text):  # text after the object (whitespace is fine): json.loads decides
                headers = _json_loads(text)
        except Exception:  # noqa: BLE001 - not JSON, not text, too deep: decided by _unusual
            headers = None
        if (type(headers) is not _DICT or expired or forward in headers
                or not only_text(map(type, headers.values())) or type(body) is not _BYTES
                or type(text) is not _STR):
            headers = None
        append(headers)
    return found


def native_id_param(dialect: Dialect, native_id: Any) -> Any:
    """A native id for an insert (the Id column as a row held it, written back unchanged): a UUID as the dialect
    binds it; a loose SQLite id as it was (NULL: a new UUID)."""
    if isinstance(native_id, uuid.UUID):
        return dialect.id_param(native_id)
    if dialect.loose_types and native_id is not None:
        if isinstance(native_id, str):
            try:
                native_id.encode("utf-8")
            except UnicodeEncodeError:  # bytes that were not UTF-8: written back as those bytes
                return as_body(native_id)
        return native_id  # SQLite keeps whatever the row held
    return dialect.id_param(native_uuid(native_id) if native_id is not None else new_id())


def _id_text(native_id: Any) -> str:
    """A native id as upstream receivers show it when ``NServiceBus.MessageId`` is missing (lower-case, hyphens)."""
    return str(native_uuid(native_id)) if not isinstance(native_id, str) else native_id.lower()

