"""The error-queue browser: failed messages grouped by ``NServiceBus.FailedQ`` and exception type; retry, delete.

Grouping is the error-queue DAG's (``maintenance.tasks._failure_group``), selection for a retry the shared
:func:`failure_selector`, the retry itself :meth:`SqlQueueTransport.retry_errors` (same Id and body back in the
source queue, failure headers removed), the delete :meth:`SqlQueueTransport.delete_messages`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from airflow_sqlqueue.maintenance.tasks import _failure_group
from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport import headers as h
from airflow_sqlqueue.transport.dialects import RawRow
from airflow_sqlqueue.transport.error_queue import failure_selector

BROWSE_PAGE = 500
BODY_PREVIEW_BYTES = 2048


class MessagesNotFoundError(LookupError):
    """Some of the selected messages are not in the error queue (nothing was changed)."""

    def __init__(self, missing: list[str], error_queue: str) -> None:
        super().__init__(f"{len(missing)} selected messages are not in {error_queue!r} (already retried or "
                         f"deleted?); nothing was changed: {', '.join(missing[:20])}")
        self.missing = missing


def _rows(transport: SqlQueueTransport, error_queue: str) -> Iterable[RawRow]:
    """Every row of the error queue, oldest first, page by page, without taking any."""
    after = 0
    while True:
        rows = transport.browse(error_queue, after_seq=after, limit=BROWSE_PAGE)
        yield from rows
        if len(rows) < BROWSE_PAGE:
            return
        after = rows[-1].seq


def message_view(row: RawRow) -> dict[str, Any]:
    """One failed message for the browser: its headers (raw text when they are not JSON) and a body preview."""
    failed_q, kind, parsed = _failure_group(row.headers)
    body = row.body or b""
    return {"id": str(row.id), "seq": row.seq, "failed_q": failed_q, "exception_type": kind,
            "exception_message": parsed.get(h.EXCEPTION_MESSAGE), "time_of_failure": parsed.get(h.TIME_OF_FAILURE),
            "message_id": parsed.get(h.MESSAGE_ID), "headers": parsed if parsed else {"(raw)": row.headers},
            "body_size": len(body), "body_preview": body[:BODY_PREVIEW_BYTES].decode("utf-8", errors="replace"),
            "body_truncated": len(body) > BODY_PREVIEW_BYTES}


def failed_groups(transport: SqlQueueTransport, error_queue: str, limit: int = 200) -> dict[str, Any]:
    """Groups over the whole error queue (counts, first and last failure) with up to ``limit`` messages listed."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    listed = total = 0
    for row in _rows(transport, error_queue):
        total += 1
        message = message_view(row)
        group = groups.setdefault((message["failed_q"], message["exception_type"]), {
            "failed_q": message["failed_q"], "exception_type": message["exception_type"], "count": 0,
            "first_failure": None, "last_failure": None, "messages": []})
        group["count"] += 1
        when = message["time_of_failure"]
        if when:
            group["first_failure"] = min(filter(None, [group["first_failure"], when]))
            group["last_failure"] = max(filter(None, [group["last_failure"], when]))
        if listed < limit:
            group["messages"].append(message)
            listed += 1
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], g["failed_q"], g["exception_type"]))
    return {"error_queue": transport.name(error_queue), "total": total, "listed": listed, "groups": ordered}


def require_present(transport: SqlQueueTransport, error_queue: str, ids: Iterable[uuid.UUID]) -> None:
    """Raise MessagesNotFoundError unless every Id is in the error queue."""
    missing = {str(i) for i in ids}
    for row in _rows(transport, error_queue):
        missing.discard(str(row.id))
        if not missing:
            return
    if missing:
        raise MessagesNotFoundError(sorted(missing), transport.name(error_queue))


def retry_messages(transport: SqlQueueTransport, error_queue: str, ids: list[uuid.UUID]) -> dict[str, Any]:
    """Return the selected messages to their FailedQ; ``{"returned": {queue: n}, "left": [...], ...}``."""
    if not ids:  # no Id would select every message
        raise ValueError("select at least one message")
    require_present(transport, error_queue, ids)
    select = failure_selector(transport, message_ids=[str(i) for i in ids])
    return transport.retry_errors(error_queue=error_queue, select=select).as_dict()


def delete_messages(transport: SqlQueueTransport, error_queue: str, ids: list[uuid.UUID]) -> dict[str, Any]:
    """Delete the selected messages (all or none); ``{"deleted": n}``."""
    if not ids:
        raise ValueError("select at least one message")
    require_present(transport, error_queue, ids)
    try:
        return {"deleted": transport.delete_messages(error_queue, ids)}
    except LookupError as exc:  # went away between the check and the delete: the transaction rolled back
        raise MessagesNotFoundError([str(i) for i in ids], transport.name(error_queue)) from exc
