"""The error-queue browser: groups, pages of previews, and retry or delete of messages addressed by position.

Everything heavy happens in the database (see ``ErrorQueue``): a page holds only previews cut in SQL, pages are
keyed by position, and an action reads each message by one index seek. A retry writes only to the queues of the
dashboard's configuration for that connection (the ``ReturnPolicy``); any other FailedQ is refused with the
reason, and nothing is changed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue.previews import MAX_GROUPS, FailedFilter, Position
from airflow_sqlqueue.transport.errorqueue.summary import CHECK_SECONDS

from .queues import canonical

log = logging.getLogger(__name__)

#: What the groups can be counted by: one header field each, or the three together.
GROUP_BY = {"exception_type": ("exception_type",), "message_type": ("message_type",),
            "failed_q": ("failed_q",), "all": ("failed_q", "exception_type", "message_type")}


#: Groups are counted per range of this many positions and kept in the API server's memory per error queue: a range
#: whose row count is unchanged (rows only ever leave a range) is not read again, so after a retry only the ranges
#: it touched are counted again, and an unchanged queue costs one walk of the position index.
RANGE = 10_000
_RANGES: dict[tuple[str, str], dict[int, tuple[int, list[dict[str, Any]]]]] = {}
#: Per error queue: (rows, newest position) when its ranges were last counted, and the groups merged then.
_SHAPES: dict[tuple[str, str], tuple[int, int | None]] = {}
_MERGED: dict[tuple[str, str], list[dict[str, Any]]] = {}
_RANGES_LOCK = threading.Lock()
MAX_KEPT_QUEUES = 64


def _merge_raw(into: dict[tuple[Any, ...], dict[str, Any]], groups: Iterable[dict[str, Any]]) -> None:
    for group in groups:
        key = (group["failed_q"], group["exception_type"], group["message_type"])
        have = into.get(key)
        if have is None:
            into[key] = dict(group)
            continue
        have["count"] += group["count"]
        for name, pick in (("first_failure", min), ("last_failure", max)):
            values = [v for v in (have[name], group[name]) if v]
            have[name] = pick(values) if values else None


def ranged_groups(transport: SqlQueueTransport, error_queue: str, cache_key: str,
                  size: int = RANGE) -> tuple[list[dict[str, Any]], int]:
    """The groups of the whole error queue (as ``transport.failed_groups``) and its exact row count, counting again
    only the ranges of positions whose row count changed since this API server last counted them (none, without
    walking the ranges, when the row count and the newest position are as they were)."""
    errors = transport.errors(error_queue)
    key = (cache_key, errors.name)
    shape = errors.count_and_last()  # index-only: as before, nothing came or went
    with _RANGES_LOCK:
        kept = dict(_RANGES.get(key, {}))
        merged_before = _MERGED.get(key) if _SHAPES.get(key) == shape and key in _RANGES else None
    if merged_before is not None:
        return [dict(g) for g in merged_before], shape[0]
    counts = errors.range_counts(size)
    fresh: dict[int, tuple[int, list[dict[str, Any]]]] = {}
    for number, rows in counts.items():
        known = kept.get(number)
        if known is not None and known[0] == rows:
            fresh[number] = known
            continue
        fresh[number] = (rows, errors.groups(limit=MAX_GROUPS * 10, after_seq=number * size - 1,
                                             through_seq=number * size + size - 1))
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _, groups in fresh.values():
        _merge_raw(merged, groups)
    ordered = sorted(merged.values(), key=lambda g: -g["count"])[:MAX_GROUPS]
    with _RANGES_LOCK:  # the ranges, the shape they were counted at and their merge: kept together
        if key not in _RANGES and len(_RANGES) >= MAX_KEPT_QUEUES:
            oldest = next(iter(_RANGES))
            for kept_map in (_RANGES, _SHAPES, _MERGED):
                kept_map.pop(oldest, None)
        _RANGES[key] = fresh
        _SHAPES[key] = shape if sum(counts.values()) == shape[0] else (-1, None)  # moved meanwhile: look again
        _MERGED[key] = [dict(g) for g in ordered]
    return ordered, sum(counts.values())


def summary_groups(transport: SqlQueueTransport, error_queue: str, *, complete: bool = False,
                   check: bool | None = None) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    """The groups from the error groups summary tables (``transport.errorqueue.summary``); (groups, row count, what
    the summary says of itself). The page and the batched retry's to-do both read them here
    (``ErrorQueue.summary_groups``): a bounded catch-up of the rows above the high water (``complete``: every one),
    a few rows read, and the drift check as ``check`` says (None: at once for a small queue, in the background at
    most every ``CHECK_SECONDS`` for a large one; True: at once, the page's "count again"). A small queue whose
    counts disagree with it (rows taken out by another program) is counted again at once. The row count is exact
    when the drift check found none since (``summary.checked_at``)."""
    groups, state = transport.errors(error_queue).summary_groups(complete=complete, check=check)
    info = {"high_water": state.high_water, "behind": state.behind, "drift": state.drift,
            "rebuilt_at": state.rebuilt_at, "caught_up_at": state.caught_up_at, "checked_at": state.checked_at,
            "checked_seconds_ago": None if state.checked_age is None else round(state.checked_age, 1),
            "check_every_seconds": CHECK_SECONDS}
    return groups, state.rows, info


def failed_groups(transport: SqlQueueTransport, error_queue: str, by: str = "exception_type",
                  cache_key: str | None = None, *, use_summary: bool = True, check: bool | None = None
                  ) -> dict[str, Any]:
    """Groups over the whole error queue (count, first and last failure), largest first; ``total`` is exact.
    They come from the error groups summary (``summary_groups``; ``summary`` says how far it is behind or off);
    where its tables cannot be made or written (a read-only login) they are counted per range of positions and kept
    in memory (with ``cache_key``, ``ranged_groups``), else by one scan.

    A field absent or empty is one group, None (the page's "(none)"); each group carries the ``filter`` that lists
    exactly its messages (``missing`` names its None fields)."""
    if by not in GROUP_BY:
        raise ValueError(f"group by one of {sorted(GROUP_BY)}, not {by!r}")
    keys = GROUP_BY[by]
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    info: dict[str, Any] | None = None
    raw: list[dict[str, Any]] | None = None
    total: int | None = None
    if use_summary:
        try:
            raw, total, info = summary_groups(transport, error_queue, check=check)
        except Exception:  # noqa: BLE001 - no right to make or write the summary tables: count as before
            log.warning("error groups summary of %s cannot be used; counting the groups from the queue", error_queue,
                        exc_info=True)
    if raw is None and cache_key is not None:
        raw, total = ranged_groups(transport, error_queue, cache_key)
    elif raw is None:
        raw, total = transport.failed_groups(error_queue), None
    for group in raw:
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
    return {"error_queue": canonical(transport, error_queue), "by": by,
            "total": transport.count(error_queue) if total is None else total,
            "grouped": sum(g["count"] for g in groups), "groups": groups, "summary": info}


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
