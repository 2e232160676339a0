"""Group cards and whole-group actions of the error queue: count, first and last failure, last retried, failed
again; return or delete every message of one group.

A group action names its group by filter and the number of messages the user confirmed: when the group holds a
different number now (messages failed or were handled meanwhile), nothing is changed and the answer says how many
it holds (409), so a click never acts on more than the confirmation named. Returning a group at once is for groups
of up to :data:`MAX_RETURN` messages (larger ones: the batched retry); a delete walks the group page by page.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from airflow_sqlqueue.transport import SqlQueueTransport
from airflow_sqlqueue.transport.errorqueue.previews import FILTER_FIELDS, FailedFilter, FailedPreview, Position, preview

from . import retry_history
from .failed import GROUP_BY, failed_groups, summary_groups
from .queues import canonical

#: The largest group returned in one request (a batched retry handles more, as a DAG run).
MAX_RETURN = 1_000
#: The largest group deleted in one request.
MAX_DELETE = 100_000
PAGE = 500


class CountChangedError(ValueError):
    """The group does not hold the number of messages the user confirmed."""


def group_span(transport: SqlQueueTransport, error_queue: str, where: FailedFilter
               ) -> tuple[int, int, int | None] | None:
    """(messages, after, through) of the group ``where`` from the error groups summary (read as the page reads it:
    ``failed.summary_groups``): its count and the positions its rows lie within (the first and last position
    counted into it, and every position above the high water); None when the summary cannot tell (it cannot be
    used, or its last drift check found it disagrees with the queue)."""
    try:
        groups, _, info = summary_groups(transport, error_queue)
    except Exception:  # noqa: BLE001 - no right to use the summary tables: the caller counts from the queue
        return None
    if info["drift"]:
        return None
    count, first, last = 0, None, None
    for group in groups:
        fields = {"failed_q": canonical(transport, group["failed_q"]) if group["failed_q"] else None,
                  "exception_type": group["exception_type"] or None, "message_type": group["message_type"] or None}
        if not where.matches(fields):
            continue
        if group["first_seq"] is None or group["last_seq"] is None:
            return count + group["count"], 0, None
        count += group["count"]
        first = group["first_seq"] if first is None else min(first, group["first_seq"])
        last = group["last_seq"] if last is None else max(last, group["last_seq"])
    if info["behind"]:
        return count, 0 if first is None else first - 1, None
    return count, 0 if first is None else first - 1, last if last is not None else 0


def group_count(transport: SqlQueueTransport, error_queue: str, where: FailedFilter) -> int:
    """How many messages the group ``where`` holds now (from the grouped counts: one statement)."""
    span = group_span(transport, error_queue, where)
    if span is not None:
        return span[0]
    groups = failed_groups(transport, error_queue, by="all")["groups"]
    return sum(g["count"] for g in groups if where.matches(g))


def check_count(transport: SqlQueueTransport, error_queue: str, where: FailedFilter, expected: int
                ) -> tuple[int, int, int | None]:
    """The group's (count, after, through) when it holds ``expected`` messages (see ``group_span``); else
    CountChangedError."""
    span = group_span(transport, error_queue, where)
    count = span[0] if span is not None else group_count(transport, error_queue, where)
    if count != expected:
        raise CountChangedError(f"the group holds {count} messages now, not the {expected} you confirmed: nothing "
                                "was changed; look at the group again and confirm its new count")
    return span if span is not None else (count, 0, None)


def positions(transport: SqlQueueTransport, error_queue: str, where: FailedFilter, limit: int, after: int = 0,
              through: int | None = None) -> Iterator[list[Position]]:
    """The group's positions, page by page (previews of one byte: only positions are used), after position
    ``after`` up to ``through`` (the span the summary gives: a group at the end of a large queue is not looked for
    from its start)."""
    seen = 0
    errors = transport.errors(error_queue)
    while seen < limit:
        page = errors.page(after_seq=after, limit=min(PAGE, limit - seen), where=where, headers_chars=1, body_bytes=1,
                           through_seq=through)
        if not page:
            return
        yield [Position(p.seq, p.id) for p in page]
        seen += len(page)
        after = page[-1].seq


def delete_group(transport: SqlQueueTransport, error_queue: str, where: FailedFilter, expected: int) -> dict[str, Any]:
    """Delete every message of the group (the confirmed count first checked); ``{"deleted", "not_found"}``."""
    _, after, through = check_count(transport, error_queue, where, expected)
    deleted = gone = 0
    errors = transport.errors(error_queue)
    for page in positions(transport, error_queue, where, expected, after, through):
        missing = errors.delete_found(page)
        deleted += len(page) - len(missing)
        gone += len(missing)
    return {"deleted": deleted, "not_found": gone}


def return_group(transport: SqlQueueTransport, error_queue: str, targets: Iterable[str], where: FailedFilter,
                 expected: int) -> dict[str, Any]:
    """Return every message of the group to its queue, page by page (what cannot go back stays, with its reason);
    ``{"returned": {queue: n}, "total_returned", "left": [{"id", "seq", "reason"}], "returned_ids"}``."""
    if expected > MAX_RETURN:
        raise ValueError(f"a group of more than {MAX_RETURN} messages is returned by a batched retry (a DAG run "
                         "with batches, a rate and cancel): use 'Batched retry' on the group")
    _, after, through = check_count(transport, error_queue, where, expected)
    errors = transport.errors(error_queue, allowed=list(targets))
    returned: dict[str, int] = {}
    left: list[dict[str, str]] = []
    ids: list[str] = []
    for page in positions(transport, error_queue, where, expected, after, through):
        done, stayed = errors.retry_batch(page)
        for queue, n in done.items():
            returned[canonical(transport, queue)] = returned.get(canonical(transport, queue), 0) + n
        left += stayed
        stayed_ids = {x["id"] for x in stayed}
        ids += [p.id for p in page if p.id not in stayed_ids]
    return {"returned": returned, "total_returned": sum(returned.values()), "left": left, "returned_ids": ids}


def _covers(chosen: dict[str, Any], group: dict[str, Any], keys: tuple[str, ...], transport: SqlQueueTransport
            ) -> bool:
    """Whether a retry of the filter ``chosen`` took the whole of ``group`` (a card grouped by ``keys``)."""
    for name in FILTER_FIELDS:
        value = chosen.get(name) or None
        if value is None:
            continue
        if name not in keys:
            return False  # a part of the card's group only
        if name == "failed_q":
            value = canonical(transport, str(value))
        if group.get(name) != value:
            return False
    return all(name in keys and group.get(name) is None for name in chosen.get("missing") or [])


def back_in_queue(transport: SqlQueueTransport, error_queue: str, ids: list[str]) -> dict[str, FailedPreview]:
    """The messages with these native Ids that are in the error queue now (by lower-case Id), each read by two
    index seeks, all in one read-only transaction."""
    table = transport.book.queue(error_queue)
    dialect = transport.dialect
    params = {"batch_size": 1, "headers_chars": 1, "body_bytes": 1, **FailedFilter().params()}

    def work(cur: Any) -> dict[str, FailedPreview]:
        found: dict[str, FailedPreview] = {}
        for message_id in ids:
            if dialect.name == "postgres" and not _is_uuid(message_id):
                continue  # PostgreSQL refuses the cast (and the transaction with it): no such row
            row = dialect.execute(cur, "position_of_id", {"id": message_id}, **table.ids).fetchone()
            if row is None:
                continue
            seq = int(row[0])
            rows = dialect.execute(cur, "failed_page", {**params, "after_seq": seq - 1, "through_seq": seq},
                                   **table.ids).fetchall()
            if rows:
                message = preview(dialect, rows[0], 1, 1)
                if message.seq == seq:
                    found[message_id.lower()] = message
        return found

    return transport.run(work, what=f"look for returned messages in {error_queue!r}", read_only=True)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
        return True
    except ValueError:
        return False


def group_cards(transport: SqlQueueTransport, error_queue: str, conn_id: str, by: str,
                check: bool | None = None) -> dict[str, Any]:
    """The groups of :func:`failed_groups` with, for each, when it was last retried (by whom, through which run)
    and how many of its messages failed again after a retry (of the retries of the last
    :data:`retry_history.CARD_DAYS` days). ``check``: the drift check (True: at once, the page's "count again")."""
    data = failed_groups(transport, error_queue, by=by, check=check)
    keys = GROUP_BY[by]
    recent = retry_history.recent_retries(conn_id)
    for group in data["groups"]:
        group.update({"last_retried": None, "last_retried_by": None, "last_run_id": None, "failed_again": 0})
        for entry in recent["groups"]:  # newest first
            if _covers(entry["filter"], group, keys, transport):
                group.update({"last_retried": entry["at"], "last_retried_by": entry["by"],
                              "last_run_id": entry["run_id"]})
                break
    by_key = {tuple(g[k] for k in keys): g for g in data["groups"]}
    back = back_in_queue(transport, error_queue, [entry["id"] for entry in recent["ids"]])
    for entry in recent["ids"]:
        message = back.get(entry["id"].lower())
        if message is None:
            continue
        failed_at = retry_history._time(message.time_of_failure)
        if failed_at is None or failed_at <= datetime.fromisoformat(entry["at"]):
            continue
        fields = {"failed_q": canonical(transport, message.failed_q) if message.failed_q else None,
                  "exception_type": message.exception_type or None, "message_type": message.message_type or None}
        group = by_key.get(tuple(fields[k] for k in keys))
        if group is not None:
            group["failed_again"] += 1
            if group["last_retried"] is None or entry["at"] > group["last_retried"]:
                group.update({"last_retried": entry["at"], "last_retried_by": entry["by"], "last_run_id": None})
    data["retried_looked_at"] = len(recent["ids"])
    data["retry_window_days"] = retry_history.CARD_DAYS
    return data
