"""The error-queue browser's reads and writes: pages cut to a preview in SQL, counts, and actions by position.

A page never loads a whole row: the database cuts headers and body to a preview and returns their sizes, and the
fields the browser groups by (FailedQ, exception type, message type, time of failure, exception message, stack
trace) are read from the headers in SQL. Pages are keyed by position (``seq``), so the first and the ten
thousandth page cost the same. A retry or delete addresses each message by position and Id (an index seek on
``seq``): one action on a queue of a million rows reads one row.

Rows are untrusted: no row, whatever it holds (bad JSON, a lone surrogate escape, binary, a non-UUID Id), makes a
page fail; such a row is listed with ``bad`` reasons. Every text returned is valid Unicode (lone surrogates
replaced), so it can be sent as JSON.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..common.errors import InvalidAddressError
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.headers import PoisonHeadersError, parse_headers
from .error_queue import restored_headers

if TYPE_CHECKING:
    from ..transport import SqlQueueTransport

#: Preview sizes: what a page holds of each message, at most.
HEADERS_PREVIEW_CHARS = 16_384
BODY_PREVIEW_BYTES = 4_096
MAX_PAGE = 10_000
MAX_GROUPS = 1_000
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: Any) -> tuple[str | None, bool]:
    """A database value as printable-safe Unicode text, and whether it had to be repaired (invalid UTF-8 or a
    lone surrogate, each replaced by U+FFFD)."""
    if value is None:
        return None, False
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        text = raw.decode("utf-8", errors="replace")
        repaired = "\ufffd" in text and text.encode("utf-8") != raw
    else:
        text, repaired = str(value), False
    if _SURROGATE.search(text):
        return _SURROGATE.sub("\ufffd", text), True
    return text, repaired


@dataclass(frozen=True)
class FailedFilter:
    """What a page or a group is limited to; None matches every row. ``search`` is a substring of the headers."""

    failed_q: str | None = None
    exception_type: str | None = None
    message_type: str | None = None
    search: str | None = None

    def params(self) -> dict[str, Any]:
        return {"failed_q": self.failed_q or None, "exception_type": self.exception_type or None,
                "message_type": self.message_type or None, "search": self.search or None}


@dataclass
class FailedPreview:
    """One failed message as a page shows it: grouping fields, previews and full sizes, and what is wrong."""

    id: str
    seq: int
    failed_q: str | None
    exception_type: str | None
    message_type: str | None
    time_of_failure: str | None
    exception_message: str | None
    stack_trace: str | None
    headers: dict[str, str | None] | None
    headers_preview: str
    headers_length: int
    headers_truncated: bool
    body_preview: str
    body_binary: bool
    body_length: int
    body_truncated: bool
    bad: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Position:
    """A message in a queue by position and native Id (text, as a page lists it)."""

    seq: int
    id: str


class PositionsNotFoundError(LookupError):
    """Some of the addressed messages are not in the queue any more (nothing was changed)."""

    def __init__(self, missing: list[Position], queue: str) -> None:
        shown = ", ".join(f"{clean_text(p.id)[0]} at {p.seq}" for p in missing[:20])
        super().__init__(f"{len(missing)} selected messages are not in {queue!r} (already retried or deleted?); "
                         f"nothing was changed: {shown}")
        self.missing = missing


class RetryRefusedError(ValueError):
    """Some selected messages cannot be returned (the reason for each); nothing was changed."""

    def __init__(self, refused: list[tuple[Position, str]]) -> None:
        shown = "; ".join(f"{clean_text(p.id)[0]}: {reason}" for p, reason in refused[:20])
        super().__init__(f"{len(refused)} selected messages cannot be returned, nothing was changed: {shown}")
        self.refused = refused


def _preview(dialect: Any, row: Any, headers_chars: int, body_bytes: int) -> FailedPreview:
    (raw_id, seq, failed_q, exception_type, message_type, time_of_failure, exception_message, stack_trace,
     headers_preview, headers_length, body_preview, body_length) = row
    bad: list[str] = []
    fields = [dialect.header_field(v) for v in (failed_q, exception_type, message_type, time_of_failure,
                                                exception_message, stack_trace)]
    texts = [clean_text(v) for v in fields]
    if any(repaired for _, repaired in texts):
        bad.append("a header holds invalid Unicode (a lone surrogate or invalid UTF-8), shown replaced")
    id_text, id_repaired = clean_text(raw_id)
    id_text = id_text or ""
    try:
        uuid.UUID(id_text)
    except ValueError:
        bad.append("the Id is not a UUID")
    headers_length = int(headers_length or 0)
    truncated = headers_length > headers_chars
    headers_text, headers_repaired = clean_text(headers_preview)
    headers_text = headers_text or ""
    parsed: dict[str, str | None] | None = None
    if headers_repaired and not truncated:
        bad.append("the headers are not valid UTF-8 text")
    if not truncated:
        try:
            parsed = {clean_text(k)[0] or "": clean_text(v)[0] for k, v in parse_headers(headers_text).items()}
        except (PoisonHeadersError, RecursionError, ValueError):
            bad.append("the headers are not a JSON object of strings")
    if parsed is not None and h.RAW_HEADERS in parsed:
        bad.append("the original headers were not JSON (kept as airflow_sqlqueue.RawHeaders)")
    body = bytes(body_preview) if body_preview is not None else b""
    if not isinstance(body_preview, bytes | bytearray | memoryview | type(None)):
        body = str(body_preview).encode("utf-8", errors="replace")
        bad.append("the body is not binary (written by another program with a loose type)")
    body_length = int(body_length or 0)
    body_truncated = body_length > len(body)
    if _utf8_prefix(body) if body_truncated else _is_utf8(body):
        body_text, binary = body.decode("utf-8", errors="ignore"), False
    else:
        body_text, binary = body[:512].hex(" "), True
    body_text, _ = clean_text(body_text)
    failed_text, type_text, message_type_text, time_text, message_text, stack_text = (t for t, _ in texts)
    return FailedPreview(id_text, int(seq), failed_text, type_text, message_type_text, time_text, message_text,
                         stack_text, parsed, headers_text, headers_length, truncated, body_text or "", binary,
                         body_length, body_truncated, bad)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _utf8_prefix(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 but for a character cut at its end (a preview cut mid-character)."""
    return any(_is_utf8(data[:len(data) - cut]) for cut in range(min(4, len(data) + 1)))


def failed_page(transport: SqlQueueTransport, queue: str | QueueAddress, *, after_seq: int = 0, limit: int = 50,
                where: FailedFilter | None = None, headers_chars: int = HEADERS_PREVIEW_CHARS,
                body_bytes: int = BODY_PREVIEW_BYTES) -> list[FailedPreview]:
    """Up to ``limit`` failed messages after position ``after_seq``, oldest first, matching ``where``."""
    table = transport.book.queue(queue)
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
    params = {"after_seq": int(after_seq), "batch_size": limit, "headers_chars": headers_chars,
              "body_bytes": body_bytes, **(where or FailedFilter()).params()}
    dialect = transport.dialect
    rows = transport.run(lambda cur: dialect.execute(cur, "failed_page", params, **table.ids).fetchall(),
                         what=f"list {table.name!r}", read_only=True)
    return [_preview(dialect, row, headers_chars, body_bytes) for row in rows]


def failed_groups(transport: SqlQueueTransport, queue: str | QueueAddress,
                  limit: int = MAX_GROUPS) -> list[dict[str, Any]]:
    """Counts of failed messages by FailedQ, exception type and message type, largest first (at most ``limit``)."""
    table = transport.book.queue(queue)
    dialect = transport.dialect
    rows = transport.run(lambda cur: dialect.execute(cur, "failed_groups", {"batch_size": limit},
                                                     **table.ids).fetchall(),
                         what=f"group {table.name!r}", read_only=True)
    groups = []
    for failed_q, exception_type, message_type, count, first, last in rows:
        texts = [clean_text(dialect.header_field(v))[0] for v in (failed_q, exception_type, message_type, first, last)]
        groups.append({"failed_q": texts[0], "exception_type": texts[1], "message_type": texts[2],
                       "count": int(count), "first_failure": texts[3], "last_failure": texts[4]})
    return groups


def count_rows(transport: SqlQueueTransport, queue: str | QueueAddress) -> int:
    """Exact number of rows of a queue (a scan of its index: for error queues, not hot queues)."""
    table = transport.book.queue(queue)
    return int(transport.run(lambda cur: transport.dialect.scalar(cur, "count_rows", None, **table.ids) or 0,
                             what=f"count {table.name!r}", read_only=True))


Redirect = Callable[[QueueAddress], QueueAddress]


def _target(transport: SqlQueueTransport, cur: Any, error_queue: QueueAddress, headers: Any,
            allowed: Callable[[QueueAddress], bool], known: dict[QueueAddress, bool],
            redirect: Redirect | None = None) -> tuple[QueueAddress | None, str]:
    """Where a stored failed message goes back to (its FailedQ, redirected), or why it cannot."""
    if not isinstance(headers, str):
        return None, "its headers are not text"
    try:
        target_text = parse_headers(headers).get(h.FAILED_Q)
    except (PoisonHeadersError, RecursionError, ValueError):
        return None, "its headers are not a JSON object of strings"
    if not target_text:
        return None, f"it has no {h.FAILED_Q} header"
    shown, repaired = clean_text(target_text)
    if repaired:
        return None, f"{h.FAILED_Q} {shown!r} holds invalid Unicode"
    try:
        target = transport.address(target_text)
    except (InvalidAddressError, ValueError) as exc:
        return None, f"{h.FAILED_Q} {shown!r} is not a queue address ({clean_text(str(exc))[0]})"
    if redirect is not None:
        target = redirect(target)
        shown = transport.dialect.format_address(target)
    if transport.dialect.same_queue(target, error_queue):
        return None, f"{h.FAILED_Q} {shown!r} is the error queue itself"
    if not allowed(target):
        return None, f"queue {shown!r} is not one of the queues this retry may write to (those of the configuration)"
    if target not in known:
        known[target] = transport.dialect.table_exists(cur, target)
    if not known[target]:
        return None, f"queue {shown!r} does not exist"
    return target, ""


def _retry(transport: SqlQueueTransport, cur: Any, error_queue: QueueAddress, positions: list[Position],
           allowed: Callable[[QueueAddress], bool], redirect: Redirect | None,
           strict: bool) -> tuple[dict[str, int], list[Position], list[tuple[Position, str]]]:
    """Return each addressed message in the caller's transaction; (returned per queue, missing, refused).

    ``strict``: after the first missing or refused message nothing more is copied (the caller rolls back).
    """
    table = transport.book.queue(error_queue)
    dialect = transport.dialect
    returned: dict[str, int] = {}
    missing: list[Position] = []
    refused: list[tuple[Position, str]] = []
    known: dict[QueueAddress, bool] = {}
    for position in positions:
        row = dialect.execute(cur, "lock_position", {"seq": position.seq, "id": position.id}, **table.ids).fetchone()
        if row is None:
            missing.append(position)
            continue
        raw_id, _, _, headers, body = row
        target, reason = _target(transport, cur, table.address, headers, allowed, known, redirect)
        if target is None:
            refused.append((position, reason))
            continue
        if strict and (missing or refused):
            continue  # it will all roll back: no need to copy
        dialect.execute(cur, "insert_raw", {
            "id": dialect.id_param(raw_id) if isinstance(raw_id, uuid.UUID) else raw_id,
            "headers": restored_headers(headers), "body": body}, **dialect.identifiers(target))
        dialect.execute(cur, "delete_position", {"seq": position.seq, "id": position.id}, **table.ids)
        name = dialect.format_address(target)
        returned[name] = returned.get(name, 0) + 1
    return returned, missing, refused


def retry_positions(transport: SqlQueueTransport, error_queue: str | QueueAddress, positions: Iterable[Position],
                    allowed: Callable[[QueueAddress], bool], redirect: Redirect | None = None) -> dict[str, int]:
    """Return the addressed messages to their FailedQ (same Id and body, failure headers removed), all or none.

    ``redirect`` maps a FailedQ to the queue its messages go to instead (retry redirects). A message whose target
    is not ``allowed`` (or is missing, unparseable, the error queue, not a table) is refused with the reason
    (RetryRefusedError); a message no longer there raises PositionsNotFoundError. Each message is read by one
    index seek on its position; one transaction.
    """
    table = transport.book.queue(error_queue)
    wanted = list(dict.fromkeys(positions))

    def work(cur: Any) -> dict[str, int]:
        returned, missing, refused = _retry(transport, cur, table.address, wanted, allowed, redirect, strict=True)
        if missing:
            raise PositionsNotFoundError(missing, table.name)
        if refused:
            raise RetryRefusedError(refused)
        return returned

    return transport.run(work, what=f"return messages from {table.name!r}")


def retry_batch(transport: SqlQueueTransport, error_queue: str | QueueAddress, positions: Iterable[Position],
                allowed: Callable[[QueueAddress], bool],
                redirect: Redirect | None = None) -> tuple[dict[str, int], list[dict[str, str]]]:
    """Return what can be returned of one batch in one transaction; the rest stays, each with its reason."""
    table = transport.book.queue(error_queue)
    wanted = list(dict.fromkeys(positions))

    def work(cur: Any) -> tuple[dict[str, int], list[dict[str, str]]]:
        returned, missing, refused = _retry(transport, cur, table.address, wanted, allowed, redirect, strict=False)
        left = [{"id": clean_text(p.id)[0] or "", "seq": str(p.seq), "reason": "no longer in the error queue"}
                for p in missing]
        left += [{"id": clean_text(p.id)[0] or "", "seq": str(p.seq), "reason": reason} for p, reason in refused]
        return returned, left

    return transport.run(work, what=f"return a batch of messages from {table.name!r}")


def delete_positions(transport: SqlQueueTransport, queue: str | QueueAddress, positions: Iterable[Position]) -> int:
    """Delete the addressed messages, all or none (PositionsNotFoundError names those not there)."""
    table = transport.book.queue(queue)
    dialect = transport.dialect
    wanted = list(dict.fromkeys(positions))

    def work(cur: Any) -> int:
        missing = [p for p in wanted if (dialect.execute(cur, "delete_position", {"seq": p.seq, "id": p.id},
                                                         **table.ids).rowcount or 0) < 1]
        if missing:
            raise PositionsNotFoundError(missing, table.name)
        return len(wanted)

    return transport.run(work, what=f"delete messages from {table.name!r}")


#: Links an edited retry to the message it was edited from (its ``NServiceBus.MessageId``, else its native Id).
EDIT_OF = "airflow_sqlqueue.EditOf"
#: Headers an edit may not add, change or remove: identity, routing and the failure record.
PROTECTED_HEADERS = frozenset({
    h.MESSAGE_ID, h.CORRELATION_ID, h.CONVERSATION_ID, h.REPLY_TO_ADDRESS, h.ORIGINATING_ENDPOINT, h.TIME_SENT,
    h.MESSAGE_INTENT, h.FORWARD_DESTINATION, h.RAW_HEADERS, EDIT_OF, *h.FAILURE_HEADERS})


class EditRefusedError(ValueError):
    """An edit that may not be sent (a protected header touched, a body that is not JSON); nothing was changed."""


def edit_and_retry(transport: SqlQueueTransport, error_queue: str | QueueAddress, position: Position,
                   allowed: Callable[[QueueAddress], bool], *, headers: dict[str, str | None] | None = None,
                   body: bytes | None = None, protected: frozenset[str] = PROTECTED_HEADERS) -> dict[str, Any]:
    """Send an edited copy of a failed message to its FailedQ and delete the original, in one transaction.

    ``headers`` replace the message's headers (failure headers aside; None keeps them), ``body`` its body (None
    keeps it; a JSON content type needs valid JSON). The copy gets a new native Id and MessageId and the header
    ``airflow_sqlqueue.EditOf`` naming the original. Any change to a ``protected`` header is refused.
    """
    table = transport.book.queue(error_queue)
    dialect = transport.dialect

    def work(cur: Any) -> dict[str, Any]:
        row = dialect.execute(cur, "lock_position", {"seq": position.seq, "id": position.id}, **table.ids).fetchone()
        if row is None:
            raise PositionsNotFoundError([position], table.name)
        raw_id, _, _, stored, stored_body = row
        target, reason = _target(transport, cur, table.address, stored, allowed, {})
        if target is None:
            raise RetryRefusedError([(position, reason)])
        original = parse_headers(stored)
        kept = {k: v for k, v in original.items() if k not in h.FAILURE_HEADERS}
        edited = dict(kept) if headers is None else dict(headers)
        touched = sorted(k for k in set(kept) | set(edited) if k in protected and kept.get(k) != edited.get(k))
        if touched:
            raise EditRefusedError(f"these headers may not be edited: {', '.join(touched)}; nothing was changed")
        new_body = stored_body if body is None else body
        if body is not None and "json" in str(edited.get(h.CONTENT_TYPE) or "").lower():
            try:
                json.loads(body)
            except ValueError as exc:
                raise EditRefusedError(f"the body is not valid JSON ({exc}); nothing was changed") from None
        new_id = uuid.uuid4()
        edited[EDIT_OF] = original.get(h.MESSAGE_ID) or str(raw_id)
        edited[h.MESSAGE_ID] = str(new_id)
        dialect.execute(cur, "insert_raw", {"id": dialect.id_param(new_id),
                                            "headers": h.serialize_headers(edited), "body": new_body},
                        **dialect.identifiers(target))
        dialect.execute(cur, "delete_position", {"seq": position.seq, "id": position.id}, **table.ids)
        return {"queue": dialect.format_address(target), "id": str(new_id), "edit_of": edited[EDIT_OF]}

    return transport.run(work, what=f"edit and return a message from {table.name!r}")
