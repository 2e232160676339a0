"""The error-queue browser: groups, pages of previews, and retry or delete of messages addressed by position.

Everything heavy happens in the database (see ``ErrorQueue``): a page holds only previews cut in SQL, pages are
keyed by position, and an action reads each message by one index seek. A retry writes only to the queues of the
dashboard's configuration for that connection (the ``ReturnPolicy``); any other FailedQ is refused with the
reason, and nothing is changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue.previews import FailedFilter, Position

from .queues import canonical

#: What the groups can be counted by: one header field each, or the three together.
GROUP_BY = {"exception_type": ("exception_type",), "message_type": ("message_type",),
            "failed_q": ("failed_q",), "all": ("failed_q", "exception_type", "message_type")}


def failed_groups(transport: SqlQueueTransport, error_queue: str, by: str = "exception_type") -> dict[str, Any]:
    """Groups over the whole error queue (count, first and last failure), largest first; ``total`` is exact.

    A field absent or empty is one group, None (the page's "(none)"); each group carries the ``filter`` that lists
    exactly its messages (``missing`` names its None fields)."""
    if by not in GROUP_BY:
        raise ValueError(f"group by one of {sorted(GROUP_BY)}, not {by!r}")
    keys = GROUP_BY[by]
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for group in transport.failed_groups(error_queue):
        group = {**group, **{k: group[k] or None for k in keys}}  # absent or empty: one "(none)" group
        if group.get("failed_q"):  # one queue, one group, whatever spelling its messages carry
            group["failed_q"] = canonical(transport, group["failed_q"])
        key = tuple(group[k] for k in keys)
        into = merged.setdefault(key, {**{k: group[k] for k in keys}, "count": 0, "first_failure": None,
                                       "last_failure": None})
        into["count"] += group["count"]
        for name, pick in (("first_failure", min), ("last_failure", max)):
            values = [v for v in (into[name], group[name]) if v]
            into[name] = pick(values) if values else None
    groups = sorted(merged.values(), key=lambda g: (-g["count"], *[str(g[k] or "") for k in keys]))
    for group in groups:  # what the page sends to list (or retry, or archive) exactly this group
        group["filter"] = {**{k: group[k] for k in keys if group[k] is not None},
                           "missing": [k for k in keys if group[k] is None]}
    return {"error_queue": canonical(transport, error_queue), "by": by, "total": transport.count(error_queue),
            "grouped": sum(g["count"] for g in groups), "groups": groups}


#: A filtered or searched page reads at most this many rows (the page may then hold fewer messages than asked, with
#: ``next_after`` where the next read starts): a rare group or a search that finds nothing costs the same on a
#: queue of a million rows as on a small one.
SCAN_ROWS = 10_000


def _filtered(where: FailedFilter) -> bool:
    return bool(where.failed_q or where.exception_type or where.message_type or where.search or where.missing)


def failed_messages(transport: SqlQueueTransport, error_queue: str, *, after_seq: int, limit: int,
                    where: FailedFilter, scan_rows: int = SCAN_ROWS) -> dict[str, Any]:
    """One page of previews after position ``after_seq``; ``next_after`` is the position of the next page (null on
    the last). A filtered page reads at most ``scan_rows`` rows: it may hold fewer than ``limit`` messages and still
    have a ``next_after``."""
    errors = transport.errors(error_queue)
    end = errors.scan_end(after_seq, max(scan_rows, limit)) if _filtered(where) else None
    page = errors.page(after_seq=after_seq, limit=limit, where=where, through_seq=end)
    messages = [m.as_dict() for m in page]
    for message in messages:
        if message["failed_q"]:
            message["failed_q"] = canonical(transport, message["failed_q"])
    return {"error_queue": canonical(transport, error_queue), "after": after_seq, "limit": limit,
            "messages": messages,
            "next_after": page[-1].seq if len(page) == limit else end}


def retry_messages(transport: SqlQueueTransport, error_queue: str, positions: list[Position],
                   queue_names: Iterable[str]) -> dict[str, Any]:
    """Return the selected messages to their FailedQ when it is one of ``queue_names`` (the queues the dashboard
    shows for the connection), all or none; ``{"returned": {queue: n}, "total_returned"}``."""
    if not positions:
        raise ValueError("select at least one message")
    returned = transport.errors(error_queue, allowed=queue_names).retry(positions)
    return {"returned": returned, "total_returned": sum(returned.values())}


def delete_messages(transport: SqlQueueTransport, error_queue: str, positions: list[Position]) -> dict[str, Any]:
    """Delete the selected messages (all or none); ``{"deleted": n}``."""
    if not positions:
        raise ValueError("select at least one message")
    return {"deleted": transport.delete_positions(error_queue, positions)}
