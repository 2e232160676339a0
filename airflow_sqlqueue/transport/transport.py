"""``SqlQueueTransport``: every queue operation on one database, over any DB-API connection."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from . import headers as h
from .address import QueueAddress
from .connection import ConnectionSource
from .dialects import Dialect, Finding, RawRow, get_dialect
from .errors import InvalidMessageError, PermissionDeniedError, QueueNotFoundError
from .failures import PoisonMessageError, failure_headers
from .headers import PoisonHeadersError, parse_headers
from .messages import OutgoingMessage, ReceivedMessage
from .modes import TransactionMode
from .validation import check_count

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PURGE_BATCH = 10_000
DEFAULT_DELAYED_BATCH = 100
DEADLOCK_RETRIES = 5


@dataclass
class ReceiveStats:
    """What happened to the rows one receive took (besides the messages it returned)."""

    expired: int = 0
    poison: int = 0
    forwarded: int = 0


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
    """

    def __init__(self, connect: Callable[[], Any], dialect: str | Dialect, *, error_queue: str = "error") -> None:
        self.dialect = get_dialect(dialect) if isinstance(dialect, str) else dialect
        self.connections = ConnectionSource(connect, self.dialect)
        self.error_queue = self.address(error_queue)
        self._existing: set[QueueAddress] = set()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SqlQueueTransport:
        """A transport for ``sqlite:///path``, ``postgresql://...``, ``mssql+pymssql://...``, ``mssql+pyodbc://...``."""
        from .connect import connection_factory, default_catalog_of, paramstyle_of

        connect, dialect = connection_factory(url)
        return cls(connect, get_dialect(dialect, paramstyle_of(url), default_catalog_of(url)), **kwargs)

    def close(self) -> None:
        """Close pooled connections."""
        self.connections.close()

    def __enter__(self) -> SqlQueueTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses -------------------------------------------------------------------------------
    def address(self, queue: str | QueueAddress) -> QueueAddress:
        """Parse and validate a queue address for this dialect."""
        return self.dialect.parse_address(queue)

    def name(self, queue: str | QueueAddress) -> str:
        """Canonical text of a queue address."""
        return self.dialect.format_address(self.address(queue))

    # -- running statements ----------------------------------------------------------------------
    def run(self, work: Callable[[Any], T], *, what: str = "", read_only: bool = False) -> T:
        """Run ``work(cursor)`` in one transaction; deadlocks are retried, missing tables explained.

        ``read_only`` work (peek, browse, discovery, checks) does not wait for SQLite's write lock.
        """
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                with self.connections.connection() as conn, self.dialect.transaction(conn, read_only) as cur:
                    return work(cur)
            except Exception as exc:
                if self.dialect.is_deadlock(exc) and attempt < DEADLOCK_RETRIES:
                    log.warning("deadlock in %s, retrying (%d/%d)", what or "transaction", attempt + 1,
                                DEADLOCK_RETRIES)
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise self.explain(exc, what) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def explain(self, exc: Exception, what: str) -> Exception:
        """Turn a driver error into a clear one where we know what it means."""
        if isinstance(exc, QueueNotFoundError | PermissionDeniedError | InvalidMessageError):
            return exc
        if self.dialect.is_missing_table(exc):
            return QueueNotFoundError(
                f"{what}: a queue table (or its schema) does not exist: {_first_line(exc)}. Create it with "
                "`sqlqueue create QUEUE` or SqlQueueTransport.create_queue()")
        if self.dialect.is_permission_denied(exc):
            return PermissionDeniedError(f"{what}: the database user lacks a right: {_first_line(exc)}. "
                                         f"{self.dialect.rights_hint}")
        return exc

    # -- provisioning ----------------------------------------------------------------------------
    def create_queue(self, queue: str | QueueAddress, *, delayed: bool = False) -> None:
        """Create a queue table (and its ``.Delayed`` table); idempotent and safe under concurrent creators."""
        address = self.address(queue)
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                with self.connections.connection() as conn:
                    self.dialect.create_queue(conn, address, delayed)
                return
            except Exception as exc:
                if self.dialect.is_deadlock(exc) and attempt < DEADLOCK_RETRIES:
                    continue
                raise self.explain(exc, f"create queue {self.name(address)!r}") from exc

    def create_queues(self, queues: Iterable[str | QueueAddress], *, delayed: bool = False) -> list[str]:
        """Create several queues; return their canonical names."""
        names = [self.name(q) for q in queues]  # validate all before creating any
        for name in names:
            self.create_queue(name, delayed=delayed)
        return names

    def ddl(self, queues: Iterable[str | QueueAddress], *, delayed: bool = False) -> str:
        """The DDL script that creates the queues, for a DBA to review (no connection used)."""
        return ddl_script(self.dialect, queues, delayed=delayed)

    def require_queue(self, cursor: Any, queue: str | QueueAddress) -> QueueAddress:
        """Raise QueueNotFoundError unless the queue exists (checked on ``cursor``; positive answers cached)."""
        address = self.address(queue)
        if address not in self._existing:
            if not self.dialect.table_exists(cursor, address):
                raise QueueNotFoundError(f"queue {self.name(address)!r} does not exist; create it with "
                                         "`sqlqueue create` or SqlQueueTransport.create_queue()")
            self._existing.add(address)
        return address

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
        :param cursor: send inside an existing transaction (SENDS_ATOMIC_WITH_RECEIVE, TRANSACTION_SCOPE).
        """
        ids = self.send_many(queue, [message], endpoint=endpoint, cursor=cursor)
        return ids[0] if ids else None

    def send_many(self, queue: str | QueueAddress, messages: Iterable[OutgoingMessage | bytes | str], *,
                  endpoint: str | QueueAddress | None = None, cursor: Any = None) -> list[uuid.UUID]:
        """Send a batch: immediate messages in one statement (one round trip), delayed ones to the store."""
        address = self.address(queue)
        immediate: list[dict[str, Any]] = []
        delayed: list[dict[str, Any]] = []
        ids: list[uuid.UUID] = []
        for item in messages:
            message = item if isinstance(item, OutgoingMessage) else OutgoingMessage(body=item)
            headers_text, body, ttbr_ms, delay_ms = message.validated()
            if delay_ms is not None:
                forward = {**message.headers, h.FORWARD_DESTINATION: self.dialect.format_address(address)}
                delayed.append({"headers": h.serialize_headers(forward), "body": body, "delay_ms": delay_ms})
                continue
            message_id = uuid.uuid4()
            ids.append(message_id)
            immediate.append({"id": self.dialect.id_param(message_id), "headers": headers_text, "body": body,
                              "ttbr_ms": ttbr_ms})
        store = self.address(endpoint) if endpoint is not None else address

        def work(cur: Any) -> None:
            if immediate:
                if len(immediate) == 1:
                    self.dialect.execute(cur, "send", immediate[0], **self.dialect.identifiers(address))
                else:
                    self.dialect.send_many(cur, address, immediate)
            if delayed:
                self.dialect.executemany(cur, "send_delayed", delayed, **self.dialect.identifiers(store))

        if cursor is not None:
            work(cursor)
        else:
            self.run(work, what=f"send to {self.dialect.format_address(address)!r}")
        return ids

    # -- receive ---------------------------------------------------------------------------------
    @contextmanager
    def receiving(self, queue: str | QueueAddress, max_messages: int = 1) -> Iterator[ReceivedBatch]:
        """Take up to ``max_messages`` (FIFO) in a transaction that commits when the block ends without error.

        Store the messages durably inside the block: if the block raises, or the process dies, the rows
        return to the queue. Expired rows are dropped and poison rows moved to the error queue in the same
        transaction.
        """
        address = self.address(queue)
        check_count(max_messages, "max_messages")
        with self.connections.connection() as conn, self.dialect.transaction(conn) as cur:
            try:
                rows = self.take(cur, address, max_messages)
                batch = self.triage(cur, address, rows)
            except Exception as exc:
                raise self.explain(exc, f"receive from {self.name(address)!r}") from exc
            yield batch

    def receive(self, queue: str | QueueAddress, max_messages: int = 1) -> list[ReceivedMessage]:
        """Take up to ``max_messages`` and commit at once (at-most-once: the caller owns them now)."""
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                with self.receiving(queue, max_messages) as batch:
                    return batch.messages
            except Exception as exc:
                if self.dialect.is_deadlock(exc) and attempt < DEADLOCK_RETRIES:
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def take(self, cursor: Any, address: QueueAddress, count: int, *, lock_only: bool = False) -> list[RawRow]:
        """Delete (or, with ``lock_only``, lock) up to ``count`` of the oldest rows; return them in FIFO order."""
        statement = "lock_batch" if lock_only else "receive_batch"
        rows = self.dialect.execute(cursor, statement, {"batch_size": count},
                                    **self.dialect.identifiers(address)).fetchall()
        return sorted((self.dialect.to_raw_row(r) for r in rows), key=lambda r: r.seq)

    def triage(self, cursor: Any, address: QueueAddress, rows: list[RawRow]) -> ReceivedBatch:
        """Drop expired rows, move poison rows to the error queue, forward delayed ones; return the rest."""
        batch = ReceivedBatch()
        queue_name = self.dialect.format_address(address)
        for row in rows:
            message = self.classify(cursor, address, row, batch.stats)
            if message is not None:
                batch.messages.append(message)
        if batch.stats.expired or batch.stats.poison:
            log.info("%s: dropped %d expired, moved %d poison rows to %s", queue_name, batch.stats.expired,
                     batch.stats.poison, self.dialect.format_address(self.error_queue))
        return batch

    def classify(self, cursor: Any, address: QueueAddress, row: RawRow, stats: ReceiveStats) -> ReceivedMessage | None:
        """The message in a row already taken from the queue, or None when the row was dropped or moved."""
        if row.expired:
            stats.expired += 1
            return None
        queue_name = self.dialect.format_address(address)
        try:
            parsed = parse_headers(row.headers)
            forward = parsed.pop(h.FORWARD_DESTINATION, None)
            target = self.address(forward) if forward else None
        except (PoisonHeadersError, ValueError) as exc:
            self.move_to_error(cursor, address, row, PoisonMessageError(str(exc)), poison=True)
            stats.poison += 1
            return None
        if target is not None and not self.dialect.same_queue(target, address):
            headers = h.serialize_headers(parsed, limit=None)
            self.dialect.execute(cursor, "insert_raw", {"id": self.dialect.id_param(row.id), "headers": headers,
                                                        "body": row.body}, **self.dialect.identifiers(target))
            stats.forwarded += 1
            return None
        return ReceivedMessage(row.id, parsed, row.body, row.seq, queue_name)

    def move_to_error(self, cursor: Any, address: QueueAddress, row: RawRow, exc: BaseException, *,
                      poison: bool = False, delete: bool = False) -> None:
        """Copy a row to the error queue (same Id and body) with failure headers; optionally delete it."""
        added = failure_headers(self.dialect.format_address(address), exc)
        if poison:
            headers = {**added, h.RAW_HEADERS: row.headers if row.headers is not None else ""}
        else:
            headers = {**parse_headers(row.headers), **added}
        self.dialect.execute(cursor, "insert_raw",
                             {"id": self.dialect.id_param(row.id), "headers": h.serialize_headers(headers, limit=None),
                              "body": row.body}, **self.dialect.identifiers(self.error_queue))
        if delete:
            self.dialect.execute(cursor, "delete_by_seq", {"seq": row.seq}, **self.dialect.identifiers(address))

    def drain(self, queue: str | QueueAddress, sink: Callable[[list[ReceivedMessage]], int], *,
              max_messages: int | None = None, max_duration: float | None = None, batch_size: int = 500,
              concurrency: int = 1) -> Any:
        """Receive batches with ``concurrency`` receivers and store each with ``sink(messages)`` before its commit.

        ``sink`` returns how many messages it delivered (they count against ``max_messages``). Returns a
        DrainSummary. Nothing is lost if the process dies: uncommitted batches return to the queue.
        """
        from .drain import drain

        return drain(self, self.address(queue), sink, max_messages=max_messages, max_duration=max_duration,
                     batch_size=batch_size, concurrency=concurrency)

    # -- processing with a handler ---------------------------------------------------------------
    def process(self, queue: str | QueueAddress, handler: Callable[..., Any], *,
                mode: TransactionMode | str = TransactionMode.SENDS_ATOMIC_WITH_RECEIVE,
                max_messages: int | None = None, max_duration: float | None = None, batch_size: int = 100,
                concurrency: int = 1, immediate_retries: int = 5, stop_when_empty: bool = True) -> Any:
        """Run ``handler(message, context)`` per message with the semantics of ``mode``.

        Failures are retried immediately up to ``immediate_retries`` times (counted per native Id), then the
        message moves to the error queue with the NServiceBus failure headers. Returns a ProcessSummary.
        """
        from .pump import MessagePump

        pump = MessagePump(self, self.address(queue), handler, TransactionMode.parse(mode),
                           batch_size=batch_size, concurrency=concurrency, immediate_retries=immediate_retries)
        return pump.run(max_messages=max_messages, max_duration=max_duration, stop_when_empty=stop_when_empty)

    # -- peek and inspection ---------------------------------------------------------------------
    def peek(self, queue: str | QueueAddress) -> int:
        """Depth estimate (cheap on any backlog; rows held by receivers at the head are not counted)."""
        address = self.address(queue)
        return int(self.run(lambda cur: self.dialect.scalar(cur, "peek", None, **self.dialect.identifiers(address))
                            or 0, what=f"peek {self.dialect.format_address(address)!r}", read_only=True))

    def oldest_age(self, queue: str | QueueAddress) -> float | None:
        """Seconds since the oldest message was sent (from its TimeSent header), or None."""
        address = self.address(queue)
        text = self.run(lambda cur: self.dialect.scalar(cur, "head_headers", None, **self.dialect.identifiers(address)),
                        what=f"age of {self.name(address)!r}", read_only=True)
        try:
            sent = parse_headers(text).get(h.TIME_SENT) if text is not None else None
            return None if not sent else (datetime.now(timezone.utc) - h.parse_wire_time(sent)).total_seconds()
        except (PoisonHeadersError, ValueError):
            return None

    def browse(self, queue: str | QueueAddress, *, after_seq: int = 0, limit: int = 100) -> list[RawRow]:
        """Rows after a position, without taking them (for listing an error queue)."""
        address = self.address(queue)
        check_count(limit, "limit")
        return self.run(lambda cur: [self.dialect.to_raw_row(r) for r in self.dialect.execute(
            cur, "browse", {"after_seq": after_seq, "batch_size": limit}, **self.dialect.identifiers(address))],
            what=f"browse {self.name(address)!r}", read_only=True)

    def delete_messages(self, queue: str | QueueAddress, ids: Iterable[uuid.UUID | str]) -> int:
        """Delete messages by native Id in one transaction (the error-queue browser's delete); return how many rows.

        Every Id must be in the queue: an unknown one raises LookupError and nothing is deleted.
        """
        address = self.address(queue)
        wanted = list(dict.fromkeys(uuid.UUID(str(i)) for i in ids))  # ValueError on a malformed Id

        def work(cur: Any) -> int:
            self.require_queue(cur, address)
            deleted = 0
            for message_id in wanted:
                count = self.dialect.execute(cur, "delete_by_id", {"id": self.dialect.id_param(message_id)},
                                             **self.dialect.identifiers(address)).rowcount
                if not count or count < 0:
                    raise LookupError(f"message {message_id} is not in {self.name(address)!r}; nothing deleted")
                deleted += count
            return deleted

        return self.run(work, what=f"delete messages from {self.name(address)!r}")

    def discover(self) -> list[str]:
        """Every queue table in the database (by its column shape), as canonical addresses."""
        found = self.run(self.dialect.discover, what="discover queues", read_only=True)
        return [self.dialect.format_address(a) for a in found]

    # -- maintenance -----------------------------------------------------------------------------
    def purge_expired(self, queue: str | QueueAddress, *, batch_size: int = DEFAULT_PURGE_BATCH,
                      progress: Callable[[int], None] | None = None) -> int:
        """Delete expired rows in batches (by seq, each batch its own transaction); return how many."""
        from .maintenance import purge_expired

        return purge_expired(self, self.address(queue), batch_size, progress)

    def check(self, queue: str | QueueAddress, *, repair: bool = False) -> list[Finding]:
        """Schema and index findings for a queue; with ``repair`` fix what can be fixed and re-check."""
        from .maintenance import check

        return check(self, self.address(queue), repair)

    def move_due_delayed(self, endpoint: str | QueueAddress, *, batch_size: int = DEFAULT_DELAYED_BATCH) -> int:
        """Move due messages from ``<endpoint>.Delayed`` into the endpoint's queue; return how many moved."""
        address = self.address(endpoint)
        total = 0
        while True:
            moved = self.run(lambda cur: self.dialect.move_due_delayed(cur, address, batch_size),
                             what=f"move due delayed messages of {self.name(address)!r}")
            total += moved
            if moved < batch_size:
                return total

    def retry_errors(self, *, error_queue: str | QueueAddress | None = None,
                     select: Callable[[ReceivedMessage], bool] | None = None,
                     max_messages: int | None = None) -> Any:
        """Return failed messages to the queue named by their ``NServiceBus.FailedQ`` header."""
        from .error_queue import retry_errors

        source = self.address(error_queue) if error_queue is not None else self.error_queue
        return retry_errors(self, source, select, max_messages)


def ddl_script(dialect: Dialect | str, queues: Iterable[str | QueueAddress], *, delayed: bool = False) -> str:
    """The named DDL statements that create ``queues`` in ``dialect``, as one reviewable script."""
    if isinstance(dialect, str):
        dialect = get_dialect(dialect)
    parts = []
    for queue in queues:
        address = dialect.parse_address(queue)
        parts.append(f"-- queue {dialect.format_address(address)}")
        names = dialect.queue_ddl + (dialect.delayed_ddl if delayed else ())
        for name, sql in zip(names, dialect.ddl(address, delayed), strict=True):
            parts.append(f"-- {name}: {dialect.statements[name].description}\n{sql.rstrip().rstrip(';')};")
    return "\n\n".join(parts) + "\n"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
