"""The error-queue browser: failed messages grouped by ``NServiceBus.FailedQ`` and exception type; retry, delete.

Grouping is the core's :class:`FailureGroups` (as in the error-queue DAG and ``sqlqueue retry-errors --list``),
selection for a retry the shared :func:`failure_selector`, the retry itself :meth:`SqlQueueTransport.retry_errors`
(same Id and body back in the source queue, failure headers removed), the delete
:meth:`SqlQueueTransport.delete_messages`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport import headers as h
from airflow_sqlqueue.transport.dialects import RawRow
from airflow_sqlqueue.transport.error_queue import FailureGroups, failed_rows, failure_of, failure_selector

BODY_PREVIEW_BYTES = 2048


class MessagesNotFoundError(LookupError):
    """Some of the selected messages are not in the error queue (nothing was changed)."""

    def __init__(self, missing: list[str], error_queue: str) -> None:
        super().__init__(f"{len(missing)} selected messages are not in {error_queue!r} (already retried or "
                         f"deleted?); nothing was changed: {', '.join(missing[:20])}")
        self.missing = missing


def message_view(row: RawRow) -> dict[str, Any]:
    """One failed message for the browser: its headers (raw text when they are not JSON) and a body preview."""
    failure = failure_of(row.headers)
    parsed = failure.headers
    body = row.body or b""
    view = {"id": str(row.id), "seq": row.seq, "failed_q": failure.failed_q, "exception_type": failure.exception_type,
            "exception_message": parsed.get(h.EXCEPTION_MESSAGE), "time_of_failure": parsed.get(h.TIME_OF_FAILURE),
            "message_id": parsed.get(h.MESSAGE_ID), "headers": parsed if parsed else {"(raw)": row.headers},
            "body_size": len(body), "body_preview": body[:BODY_PREVIEW_BYTES].decode("utf-8", errors="replace"),
            "body_truncated": len(body) > BODY_PREVIEW_BYTES}
    return h.printable(view)  # header values may hold lone surrogates: JSON responses must encode as UTF-8


def failed_groups(transport: SqlQueueTransport, error_queue: str, limit: int = 200) -> dict[str, Any]:
    """Groups over the whole error queue (counts, first and last failure) with up to ``limit`` messages listed."""
    groups = FailureGroups()
    listed = 0
    for row in failed_rows(transport, error_queue):
        group = groups.add(failure_of(row.headers))
        messages = group.setdefault("messages", [])
        if listed < limit:
            messages.append(message_view(row))
            listed += 1
    return {"error_queue": transport.name(error_queue), "total": groups.total, "listed": listed,
            "groups": groups.ordered()}


def require_present(transport: SqlQueueTransport, error_queue: str, ids: Iterable[uuid.UUID]) -> None:
    """Raise MessagesNotFoundError unless every Id is in the error queue."""
    missing = {str(i) for i in ids}
    for row in failed_rows(transport, error_queue):
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
