"""Return failed messages from the error queue to the queue named by their ``NServiceBus.FailedQ``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..common.errors import InvalidAddressError, NotAQueueError
from ..dialects import RawRow
from ..tables.queue import FIRST_SEQ
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.headers import PoisonHeadersError, parse_headers
from ..wire.messages import ReceivedMessage

if TYPE_CHECKING:
    from ..transport import SqlQueueTransport

log = logging.getLogger(__name__)
BATCH = 500


@dataclass
class RetrySummary:
    """What a retry run did: messages returned per queue, and those left in the error queue and why."""

    returned: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    left: list[dict[str, str]] = field(default_factory=list)

    @property
    def total_returned(self) -> int:
        return sum(self.returned.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_returned": self.total_returned}


def restored_headers(raw: str | None) -> str | None:
    """Headers to send back, as ServiceControl's retry writes them: every header starting with
    ``NServiceBus.Retries``, ``NServiceBus.FailedQ``, ``NServiceBus.TimeOfFailure``, ``NServiceBus.ExceptionInfo.``
    or ``ServiceControl.EditOf`` removed. A poison row gets its original text back."""
    parsed = parse_headers(raw)
    if h.RAW_HEADERS in parsed:
        return parsed[h.RAW_HEADERS]
    kept = {k: v for k, v in parsed.items() if not k.startswith(h.RETRY_REMOVED_PREFIXES)}
    return h.serialize_headers(kept, limit=None)


def failure_selector(transport: SqlQueueTransport, *, failed_q: str | None = None,
                     exception_type: str | None = None,
                     message_ids: Iterable[str] | None = None) -> Callable[[ReceivedMessage], bool] | None:
    """A ``select`` for :func:`retry_errors` from the usual filters; None (every message) when none is given.

    ``failed_q`` matches the ``NServiceBus.FailedQ`` header as an address of this dialect; ``exception_type``
    the full type name or the class name alone; ``message_ids`` native Ids or ``NServiceBus.MessageId`` values.
    """
    wanted_queue = transport.address(failed_q) if failed_q else None
    ids = {str(i).lower() for i in message_ids or ()}
    if wanted_queue is None and not exception_type and not ids:
        return None

    def select(message: ReceivedMessage) -> bool:
        if ids and str(message.id).lower() not in ids and \
                str(message.headers.get(h.MESSAGE_ID) or "").lower() not in ids:
            return False
        if wanted_queue is not None:
            try:
                failed_in = transport.address(message.headers.get(h.FAILED_Q) or "")
                if not transport.dialect.same_queue(failed_in, wanted_queue):
                    return False
            except InvalidAddressError:
                return False
        if exception_type:
            kind = message.headers.get(h.EXCEPTION_TYPE) or ""
            if kind != exception_type and not kind.endswith("." + exception_type):
                return False
        return True

    return select


@dataclass(frozen=True)
class Failure:
    """Why a row is in the error queue: the queue it failed in, the exception type, and its parsed headers.

    Rows whose headers are not JSON group as ``(headers not JSON)``, poison rows without a FailedQ as
    ``(poison)``, other rows without one as ``(no FailedQ)``; a missing exception type is ``-``.
    """

    failed_q: str
    exception_type: str
    headers: dict[str, str | None]


def failure_of(raw_headers: str | None) -> Failure:
    """The failure a stored error-queue row records (never raises: bad headers are a group of their own; the
    group names are printable even when the headers hold lone surrogates)."""
    try:
        parsed = parse_headers(raw_headers)
    except PoisonHeadersError:
        return Failure("(headers not JSON)", "-", {})
    missing = "(poison)" if h.RAW_HEADERS in parsed else "(no FailedQ)"
    return Failure(h.printable(parsed.get(h.FAILED_Q) or missing), h.printable(parsed.get(h.EXCEPTION_TYPE) or "-"),
                   parsed)


def failed_rows(transport: SqlQueueTransport, error_queue: str | QueueAddress, page: int = BATCH) -> Iterator[RawRow]:
    """Every row of an error queue, oldest first, read page by page without taking any."""
    after = FIRST_SEQ
    while True:
        rows = transport.browse(error_queue, after_seq=after, limit=page)
        yield from rows
        if len(rows) < page:
            return
        after = rows[-1].seq


class FailureGroups:
    """Failed messages grouped by ``NServiceBus.FailedQ`` and exception type: count, first and last failure."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, failure: Failure) -> dict[str, Any]:
        """Count one failed message; return its group (a dict the caller may add fields to)."""
        group = self._groups.setdefault((failure.failed_q, failure.exception_type), {
            "failed_q": failure.failed_q, "exception_type": failure.exception_type, "count": 0,
            "first_failure": None, "last_failure": None})
        group["count"] += 1
        when = failure.headers.get(h.TIME_OF_FAILURE)
        if when:
            group["first_failure"] = min(filter(None, [group["first_failure"], when]))
            group["last_failure"] = max(filter(None, [group["last_failure"], when]))
        return group

    def ordered(self) -> list[dict[str, Any]]:
        """The groups, largest first."""
        return sorted(self._groups.values(), key=lambda g: (-g["count"], g["failed_q"], g["exception_type"]))

    @property
    def total(self) -> int:
        return sum(g["count"] for g in self._groups.values())


def retry_errors(transport: SqlQueueTransport, error_queue: QueueAddress,
                 select: Callable[[ReceivedMessage], bool] | None, max_messages: int | None) -> RetrySummary:
    """Walk the error queue oldest first; return each selected message to its FailedQ (same Id and body).

    Each batch is one transaction: the copy into the source queue and the delete commit together. Messages
    without a FailedQ, with a FailedQ that does not parse or whose queue does not exist stay, and are listed.
    """
    dialect = transport.dialect
    summary = RetrySummary()
    after = FIRST_SEQ
    error_name = dialect.format_address(error_queue)
    known: dict[QueueAddress, bool] = {}

    def batch(cur: Any) -> tuple[int, int, RetrySummary]:
        part = RetrySummary()
        last = after
        rows = dialect.execute(cur, "lock_after", {"after_seq": after, "batch_size": BATCH},
                               **dialect.identifiers(error_queue)).fetchall()
        rows = sorted(((dialect.to_raw_row(r), r[0]) for r in rows), key=lambda pair: pair[0].seq)
        for row, native_id in rows:
            if max_messages is not None and summary.total_returned + part.total_returned >= max_messages:
                break
            last = row.seq
            reason = _return_one(transport, cur, error_queue, row, native_id, select, known, part)
            if reason:
                part.left.append({"id": str(row.id), "reason": reason})
        return len(rows), last, part

    while True:
        taken, after, part = transport.run(batch, what=f"retry errors from {error_name!r}")
        for queue, count in part.returned.items():
            summary.returned[queue] = summary.returned.get(queue, 0) + count
        summary.skipped += part.skipped
        summary.left.extend(part.left)
        if taken < BATCH or (max_messages is not None and summary.total_returned >= max_messages):
            break
    log.info("returned %d messages from %s: %s", summary.total_returned, error_name, summary.returned)
    return summary


def _return_one(transport: SqlQueueTransport, cur: Any, error_queue: QueueAddress, row: Any, native_id: Any,
                select: Callable[[ReceivedMessage], bool] | None, known: dict[QueueAddress, bool],
                part: RetrySummary) -> str | None:
    """Move one row back to its FailedQ; return why it stays, or None."""
    dialect = transport.dialect
    try:
        parsed = parse_headers(row.headers)
    except PoisonHeadersError:
        return "headers are not a JSON object"
    message = ReceivedMessage(row.id, parsed, row.body, row.seq, dialect.format_address(error_queue))
    if select is not None and not select(message):
        part.skipped += 1
        return None
    target_text = parsed.get(h.FAILED_Q)
    if not target_text:
        return f"no {h.FAILED_Q} header"
    try:
        target = transport.book.queue(target_text).address
    except (InvalidAddressError, NotAQueueError) as exc:
        return f"bad {h.FAILED_Q}: {exc}"
    if target not in known:
        known[target] = dialect.table_exists(cur, target)
    if not known[target]:
        return f"queue {target_text} does not exist"
    transport.book.queue(target).insert(cur, native_id, restored_headers(row.headers), row.body)
    dialect.execute(cur, "delete_by_seq", {"seq": row.seq}, **dialect.identifiers(error_queue))
    key = dialect.format_address(target)
    part.returned[key] = part.returned.get(key, 0) + 1
    return None
