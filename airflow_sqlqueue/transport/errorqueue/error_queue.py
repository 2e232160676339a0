"""``ErrorQueue``: one error queue as one object, like ``TableQueue`` is one queue and ``Claim`` one receive.

Reads: groups, pages of previews cut in SQL (keyed by position, so the first and the ten-thousandth page cost the
same), an exact count, every row page by page. Writes: retry (selected messages all or none, one batch best
effort, the whole queue walked with a selection, batches at a rate), edit and retry, delete. Every retry moves a
row with ``TableQueue.move`` (copied in, then deleted here, in one transaction: a row is never deleted that was
not copied) to the queue the ``ReturnPolicy`` allows. A message that cannot go back stays, with its reason; a
count reported is a count of rows that moved.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..common.errors import InvalidAddressError
from ..dialects import RawRow
from ..tables.queue import FIRST_SEQ, QueueBook, TableQueue
from ..tables.session import Session
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.failures import restored_headers
from ..wire.headers import PoisonHeadersError, parse_headers
from ..wire.ids import new_id
from ..wire.messages import ReceivedMessage
from .batches import BatchPlan, BatchRecord, BatchSummary
from .groups import Selector
from .policy import NO_TARGETS, ReturnPolicy
from .previews import (
    BODY_PREVIEW_BYTES,
    HEADERS_PREVIEW_CHARS,
    MAX_GROUPS,
    MAX_PAGE,
    MAX_SPELLINGS,
    FailedFilter,
    FailedPreview,
    Position,
    clean_text,
    preview,
)
from .redirects import RetryRedirects
from .summary import REBUILD_INLINE_ROWS, ErrorGroupSummary, SummaryState

log = logging.getLogger(__name__)
#: Above this many rows (as the database estimates them) the error queue's depth is the estimate, not a count.
ESTIMATE_ABOVE = 100_000
#: The largest position (a signed 64-bit identity).
MAX_POSITION = 2**63 - 1
#: Rows per transaction when the whole error queue is walked.
WALK_BATCH = 500
#: The longest a batched retry sleeps before it asks again whether it should stop.
STOP_CHECK_SECONDS = 0.5
#: Links an edited retry to the message it was edited from (its ``NServiceBus.MessageId``, else its native Id).
EDIT_OF = "airflow_sqlqueue.EditOf"
#: Headers an edit may not add, change or remove: identity, routing and the failure record.
PROTECTED_HEADERS = frozenset({
    h.MESSAGE_ID, h.CORRELATION_ID, h.CONVERSATION_ID, h.REPLY_TO_ADDRESS, h.ORIGINATING_ENDPOINT, h.TIME_SENT,
    h.MESSAGE_INTENT, h.FORWARD_DESTINATION, h.RAW_HEADERS, h.ORIGINAL_ID, EDIT_OF, *h.FAILURE_HEADERS})


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


class EditRefusedError(ValueError):
    """An edit that may not be sent (a protected header touched, a body that is not JSON); nothing was changed."""


@dataclass
class RetrySummary:
    """What a retry did: messages returned per queue, those not selected, and those left in the error queue and
    why."""

    returned: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    left: list[dict[str, str]] = field(default_factory=list)

    @property
    def total_returned(self) -> int:
        return sum(self.returned.values())

    def count(self, queue: str) -> None:
        self.returned[queue] = self.returned.get(queue, 0) + 1

    def add(self, other: RetrySummary) -> None:
        for queue, count in other.returned.items():
            self.returned[queue] = self.returned.get(queue, 0) + count
        self.skipped += other.skipped
        self.left.extend(other.left)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_returned": self.total_returned}


class ErrorQueue:
    """One error queue: browse it, count and group its messages, return them to the queues they failed in, delete.

    :param session: the transport's session.
    :param book: the transport's queues.
    :param queue: the error queue (default: the transport's).
    :param allowed: the queues a retry may write to (see ``ReturnPolicy``); none: reading and deleting only.
    :param redirects: ``{failed queue: allowed queue}``: where the messages of a queue go back to instead (one
        run's; they come before the redirects stored in the database, ``retry_redirects``, read by every retry).
    """

    def __init__(self, session: Session, book: QueueBook, queue: str | QueueAddress | None = None, *,
                 allowed: Iterable[str | QueueAddress] = (), redirects: Mapping[str, str] | None = None) -> None:
        self.session = session
        self.book = book
        self.dialect = book.dialect
        self.table: TableQueue = book.error if queue is None else book.queue(queue)
        self.retry_redirects = RetryRedirects(session, book, self.table)
        self.summary = ErrorGroupSummary(session, self.table)
        self.policy = ReturnPolicy(book, self.table, allowed, redirects, stored=self.retry_redirects)

    @property
    def name(self) -> str:
        """The error queue's canonical name."""
        return self.table.name

    def __repr__(self) -> str:
        return f"ErrorQueue({self.name!r}, allowed={self.policy.names!r})"

    # -- reading ------------------------------------------------------------------------------------
    def count(self) -> int:
        """Exact number of rows (a scan of the queue's index: for error queues, not hot queues)."""
        return int(self.session.run(lambda cur: self.dialect.scalar(cur, "count_rows", None, **self.table.ids) or 0,
                                    what=f"count {self.name!r}", read_only=True))

    def count_or_estimate(self, threshold: int = ESTIMATE_ABOVE) -> tuple[int, bool]:
        """(rows, exact): the database's own estimate when it says more than ``threshold`` rows (PostgreSQL's
        reltuples, SQL Server's partition counts: no scan), else the exact count."""
        estimate = self.session.run(lambda cur: self.dialect.scalar(
            cur, "estimate_rows", {"qualified_name": self.table.ids["queue"]}, **self.table.ids),
            what=f"estimate {self.name!r}", read_only=True)
        if estimate is not None and int(estimate) > threshold:
            return int(estimate), False
        return self.count(), True

    def scan_end(self, after_seq: int, rows: int) -> int | None:
        """The position ``rows`` rows after ``after_seq`` (an index walk), or None when fewer rows follow."""
        end = self.session.run(lambda cur: self.dialect.scalar(cur, "scan_end", {
            "after_seq": int(after_seq), "batch_size": int(rows)}, **self.table.ids),
            what=f"bound a scan of {self.name!r}", read_only=True)
        return None if end is None else int(end)

    def count_and_last(self) -> tuple[int, int | None]:
        """(rows, newest position or None): when both are as before, no row came or went."""
        row = self.session.run(lambda cur: self.dialect.execute(cur, "count_and_last", None, **self.table.ids)
                               .fetchone(), what=f"count {self.name!r}", read_only=True)
        return int(row[0] or 0), None if row[1] is None else int(row[1])

    def range_counts(self, size: int) -> dict[int, int]:
        """Rows per range of ``size`` positions (range ``r`` holds positions ``r * size`` to ``r * size + size - 1``),
        from the position index alone."""
        rows = self.session.run(lambda cur: self.dialect.execute(cur, "range_counts", {"batch_size": int(size)},
                                                                 **self.table.ids).fetchall(),
                                what=f"count ranges of {self.name!r}", read_only=True)
        return {int(r): int(n) for r, n in rows}

    def groups(self, limit: int = MAX_GROUPS, *, after_seq: int = 0,
               through_seq: int | None = None) -> list[dict[str, Any]]:
        """Counts of failed messages by FailedQ, exception type and message type, largest first (at most
        ``limit``), with the first and last time of failure; only positions after ``after_seq`` up to
        ``through_seq`` when given."""
        params = {"batch_size": limit, "after_seq": int(after_seq),
                  "through_seq": MAX_POSITION if through_seq is None else int(through_seq)}
        rows = self.session.run(lambda cur: self.dialect.execute(cur, "failed_groups", params,
                                                                 **self.table.ids).fetchall(),
                                what=f"group {self.name!r}", read_only=True)
        groups = []
        for failed_q, exception_type, message_type, count, first, last in rows:
            texts = [clean_text(self.dialect.header_field(v))[0]
                     for v in (failed_q, exception_type, message_type, first, last)]
            groups.append({"failed_q": texts[0], "exception_type": texts[1], "message_type": texts[2],
                           "count": int(count), "first_failure": texts[3], "last_failure": texts[4]})
        return groups

    def summary_groups(self, catch_up_rows: int | None = None, *, complete: bool = False,
                       check: bool | None = None) -> tuple[list[dict[str, Any]], SummaryState]:
        """The groups as the summary tables count them (after a bounded catch-up: see ``summary``), in the shape of
        ``groups``, with the summary's state (rows behind, drift). ``complete``: count every row above the high
        water first (for a total that must include every message, not a page's quick answer). ``check``: the
        drift check (``ErrorGroupSummary.read``; None: at once for a small queue, else in the background at most
        every ``CHECK_SECONDS``). A queue of at most ``REBUILD_INLINE_ROWS`` rows whose summary disagrees with it
        (rows taken out by another program) is counted again at once."""
        if complete:
            self.summary.catch_up()
            catch_up_rows = 0
        background = catch_up_rows is None  # a page's read: what it leaves behind is counted in the background
        state = self.summary.read(check=check, background=True) if background else self.summary.read(
            catch_up_rows, check=check)
        if state.drift and state.rows <= REBUILD_INLINE_ROWS:
            log.warning("error groups of %s disagree with the queue by %d rows: counted again", self.name,
                        state.drift)
            self.summary.rebuild()
            state = self.summary.read(0, check=check)
        groups = []
        for failed_q, exception_type, message_type, count, first, last, first_seq, last_seq in state.groups:
            texts = [clean_text(self.dialect.header_field(v))[0]
                     for v in (failed_q, exception_type, message_type, first, last)]
            groups.append({"failed_q": texts[0], "exception_type": texts[1], "message_type": texts[2],
                           "count": int(count), "first_failure": texts[3], "last_failure": texts[4],
                           "first_seq": None if first_seq is None else int(first_seq),
                           "last_seq": None if last_seq is None else int(last_seq)})
        return groups, state

    def page(self, *, after_seq: int = 0, limit: int = 50, where: FailedFilter | None = None,
             headers_chars: int = HEADERS_PREVIEW_CHARS, body_bytes: int = BODY_PREVIEW_BYTES,
             through_seq: int | None = None) -> list[FailedPreview]:
        """Up to ``limit`` failed messages after position ``after_seq`` (and up to ``through_seq``, when given),
        oldest first, matching ``where``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
        where = where or FailedFilter()
        if where.failed_q:  # every way of writing that queue in a FailedQ header, in one statement
            where = replace(where, failed_q_also=tuple(self.spellings_of(where.failed_q)[1:]))
        params = {"after_seq": int(after_seq), "batch_size": limit, "headers_chars": headers_chars,
                  "through_seq": MAX_POSITION if through_seq is None else int(through_seq),
                  "body_bytes": body_bytes, **where.params()}
        rows = self.session.run(lambda cur: self.dialect.execute(cur, "failed_page", params,
                                                                 **self.table.ids).fetchall(),
                                what=f"list {self.name!r}", read_only=True)
        return [preview(self.dialect, row, headers_chars, body_bytes) for row in rows]

    def spellings_of(self, failed_q: str) -> list[str]:
        """The texts a ``NServiceBus.FailedQ`` header may name the queue ``failed_q`` names with, ``failed_q`` first,
        worked out from the address alone (no read): its canonical and wire forms, with and without the default
        schema, each part quoted or not (``orders``, ``public.orders``, ``"public"."orders"``, ``"public".orders``
        on PostgreSQL). A text that is not an address of this dialect: only itself."""
        d = self.dialect
        try:
            wanted = d.parse_address(failed_q)
        except (InvalidAddressError, ValueError):
            return [failed_q]
        full = replace(wanted, schema=wanted.schema or d.default_schema) if d.default_schema else wanted
        addresses = {wanted, full}
        if d.default_schema and full.schema == d.default_schema:
            addresses.add(replace(full, schema=None))
        forms = [failed_q]
        for address in sorted(addresses, key=str):
            forms += [d.format_address(address), d.wire_address(address), d.qualified(address)]
            if address.schema:
                for schema in (address.schema, d.quote(address.schema)):
                    for table in (address.table, d.quote(address.table)):
                        forms.append(f"{schema}.{table}")
        spellings: list[str] = []
        for text in forms:
            if text in spellings:
                continue
            try:
                if d.same_queue(d.parse_address(text), wanted):
                    spellings.append(text)
            except (InvalidAddressError, ValueError):
                continue
        return spellings[:MAX_SPELLINGS]

    def failed_q_spellings(self, failed_q: str) -> list[str]:
        """Every ``NServiceBus.FailedQ`` text in this error queue that names the same queue as ``failed_q`` (``orders``,
        ``public.orders`` and ``"public"."orders"`` on PostgreSQL), ``failed_q`` first; a text that is not an
        address of this dialect only itself."""
        try:
            wanted = self.dialect.parse_address(failed_q)
        except (InvalidAddressError, ValueError):
            return [failed_q]
        spellings = [failed_q]
        try:  # the error groups summary (every row counted): a few rows instead of a pass over the queue
            groups, _ = self.summary_groups(complete=True)
        except Exception:  # noqa: BLE001 - no right to write the summary tables: group the queue itself
            log.warning("error groups summary of %s cannot be used; grouping the queue", self.name)
            groups = self.groups()
        for group in groups:
            text = group["failed_q"]
            if not text or text in spellings:
                continue
            try:
                if self.dialect.same_queue(self.dialect.parse_address(text), wanted):
                    spellings.append(text)
            except (InvalidAddressError, ValueError):
                continue
        return spellings

    def rows(self, page: int = WALK_BATCH) -> Iterator[RawRow]:
        """Every row, oldest first, read page by page without taking any."""
        after = FIRST_SEQ
        while True:
            rows = self.session.run(lambda cur, after=after: [self.dialect.to_raw_row(r) for r in self.dialect.execute(
                cur, "browse", {"after_seq": after, "batch_size": page}, **self.table.ids)],
                what=f"browse {self.name!r}", read_only=True)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1].seq

    # -- returning messages -------------------------------------------------------------------------
    def _return(self, cur: Any, seq: int, native_id: Any, headers: Any, body: Any,
                returned: RetrySummary, high_water: int | None) -> str | None:
        """Move one locked row back to where the policy sends it (its group in the summary counts one less); why it
        stays, or None."""
        target, reason = self.policy.target(cur, headers)
        if target is None:
            return reason
        group = self.summary.group_of(cur, high_water, seq, native_id)
        if not self.table.move(cur, seq, native_id, target, restored_headers(headers), body):
            return (f"a message with its Id is already in {target.name}: it stays in {self.name} (retry it once that "
                    "message has been received, or delete this copy)")
        self.summary.take_out(cur, group)
        returned.count(target.name)
        return None

    def _require_targets(self) -> None:
        if not self.policy.allowed:
            raise ValueError(NO_TARGETS)

    def _return_positions(self, cur: Any, positions: list[Position], strict: bool
                          ) -> tuple[RetrySummary, list[Position], list[tuple[Position, str]]]:
        """Return each addressed message in the caller's transaction; (returned, missing, refused).

        ``strict``: after the first missing or refused message nothing more is moved (the caller rolls back)."""
        done = RetrySummary()
        missing: list[Position] = []
        refused: list[tuple[Position, str]] = []
        high_water = self.summary.high_water(cur)
        for position in positions:
            row = self.dialect.execute(cur, "lock_position", {"seq": position.seq, "id": position.id},
                                       **self.table.ids).fetchone()
            if row is None:
                missing.append(position)
                continue
            if strict and (missing or refused):
                target, reason = self.policy.target(cur, row[3])
                if target is None:
                    refused.append((position, reason))
                continue  # it all rolls back: only the reasons are gathered
            reason = self._return(cur, position.seq, row[0], row[3], row[4], done, high_water)
            if reason:
                refused.append((position, reason))
        return done, missing, refused

    def retry(self, positions: Iterable[Position]) -> dict[str, int]:
        """Return the addressed messages to their (redirected) FailedQ, same Id and body, failure headers removed:
        all or none, in one transaction. A message the policy refuses, or whose Id its queue already holds, raises
        RetryRefusedError with the reason; one no longer there, PositionsNotFoundError."""
        self._require_targets()
        wanted = list(dict.fromkeys(positions))

        def work(cur: Any) -> dict[str, int]:
            done, missing, refused = self._return_positions(cur, wanted, strict=True)
            if missing:
                raise PositionsNotFoundError(missing, self.name)
            if refused:
                raise RetryRefusedError(refused)
            return done.returned

        return self.session.run(work, what=f"return messages from {self.name!r}")

    def retry_batch(self, positions: Iterable[Position]) -> tuple[dict[str, int], list[dict[str, str]]]:
        """Return what can be returned of one batch in one transaction; the rest stays, each with its reason."""
        self._require_targets()
        wanted = list(dict.fromkeys(positions))

        def work(cur: Any) -> tuple[dict[str, int], list[dict[str, str]]]:
            done, missing, refused = self._return_positions(cur, wanted, strict=False)
            left = [{"id": clean_text(p.id)[0] or "", "seq": str(p.seq), "reason": "no longer in the error queue"}
                    for p in missing]
            left += [{"id": clean_text(p.id)[0] or "", "seq": str(p.seq), "reason": reason} for p, reason in refused]
            return done.returned, left

        return self.session.run(work, what=f"return a batch of messages from {self.name!r}")

    def retry_all(self, select: Selector | None = None, max_messages: int | None = None) -> RetrySummary:
        """Walk the error queue oldest first and return each selected message (all when ``select`` is None), at
        most ``max_messages``. Each batch of rows is one transaction; messages that cannot go back stay, listed
        with their reason in ``left``."""
        self._require_targets()
        summary = RetrySummary()
        after = FIRST_SEQ

        def batch(cur: Any) -> tuple[int, int, RetrySummary]:
            part = RetrySummary()
            last = after
            high_water = self.summary.high_water(cur)
            rows = self.dialect.execute(cur, "lock_after", {"after_seq": after, "batch_size": WALK_BATCH},
                                        **self.table.ids).fetchall()
            rows.sort(key=lambda r: int(r[1]))
            for row in rows:
                if max_messages is not None and summary.total_returned + part.total_returned >= max_messages:
                    break
                raw = self.dialect.to_raw_row(row)
                last = raw.seq
                reason = self._select_and_return(cur, row, raw, select, part, high_water)
                if reason:
                    part.left.append({"id": str(raw.id), "reason": reason})
            return len(rows), last, part

        while True:
            taken, after, part = self.session.run(batch, what=f"retry errors from {self.name!r}")
            summary.add(part)
            if taken < WALK_BATCH or (max_messages is not None and summary.total_returned >= max_messages):
                break
        log.info("returned %d messages from %s: %s", summary.total_returned, self.name, summary.returned)
        return summary

    def _select_and_return(self, cur: Any, row: Sequence[Any], raw: RawRow, select: Selector | None,
                           part: RetrySummary, high_water: int | None) -> str | None:
        if select is not None:
            try:
                parsed = parse_headers(raw.headers)
            except PoisonHeadersError:
                return "headers are not a JSON object"
            if not select(ReceivedMessage(raw.id, parsed, raw.body, raw.seq, self.name)):
                part.skipped += 1
                return None
        return self._return(cur, raw.seq, row[0], row[3], row[4], part, high_water)

    def retry_in_batches(self, plan: BatchPlan, *, where: FailedFilter | None = None,
                         positions: Sequence[Position] | None = None,
                         on_batch: Callable[[BatchRecord], None] | None = None,
                         should_stop: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.time,
                         sleep: Callable[[float], None] = time.sleep) -> BatchSummary:
        """Walk the error queue oldest first in batches as ``plan`` says (see ``batches``), returning what can be
        returned of each batch; ``positions``: only these messages (``where`` is then ignored). ``should_stop``
        is asked before every batch and at least every half second of a rate-limit wait."""
        self._require_targets()
        chosen = sorted(dict.fromkeys(positions), key=lambda p: p.seq) if positions is not None else None
        summary = BatchSummary(started_at=clock())
        after = 0
        counted = 0
        for number, size in enumerate(plan.sizes(), start=1):
            if plan.max_messages is not None:
                size = min(size, plan.max_messages - counted)
                if size <= 0:
                    break
            if should_stop():
                summary.cancelled = True
                break
            page: list[Any] = chosen[counted:counted + size] if chosen is not None else self.page(
                after_seq=after, limit=size, where=where, headers_chars=1, body_bytes=1)
            if not page:
                break
            if plan.rate_per_second is not None and not _wait(
                    summary.started_at + (counted + len(page)) / plan.rate_per_second, clock, sleep, should_stop):
                summary.cancelled = True
                break
            started = clock()
            returned, left = self.retry_batch([Position(p.seq, p.id) for p in page])
            stayed = {x["id"] for x in left}
            record = BatchRecord(number, started, clock(), len(page), returned, left,
                                 [str(p.id) for p in page if clean_text(p.id)[0] not in stayed])
            summary.batches.append(record)
            counted += len(page)
            after = page[-1].seq
            if on_batch is not None:
                on_batch(record)
        return summary

    def edit_and_retry(self, position: Position, *, headers: dict[str, str | None] | None = None,
                       body: bytes | None = None, protected: frozenset[str] = PROTECTED_HEADERS) -> dict[str, Any]:
        """Send an edited copy of a failed message to its (redirected) FailedQ and delete the original, in one
        transaction.

        ``headers`` replace the message's headers (failure headers aside; None keeps them), ``body`` its body (None
        keeps it; a JSON content type needs valid JSON). The copy gets a new native Id and MessageId and the header
        ``airflow_sqlqueue.EditOf`` naming the original. Any change to a ``protected`` header is refused.
        """
        self._require_targets()

        def work(cur: Any) -> dict[str, Any]:
            high_water = self.summary.high_water(cur)
            row = self.dialect.execute(cur, "lock_position", {"seq": position.seq, "id": position.id},
                                       **self.table.ids).fetchone()
            if row is None:
                raise PositionsNotFoundError([position], self.name)
            raw_id, _, _, stored, stored_body = row
            target, reason = self.policy.target(cur, stored)
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
                _check_json(body)
            copy_id = new_id()
            edited[EDIT_OF] = original.get(h.MESSAGE_ID) or str(raw_id)
            edited[h.MESSAGE_ID] = str(copy_id)
            group = self.summary.group_of(cur, high_water, position.seq, raw_id)
            if self.table.move(cur, position.seq, copy_id, target, h.serialize_headers(edited), new_body):
                self.summary.take_out(cur, group)
            return {"queue": target.name, "id": str(copy_id), "edit_of": edited[EDIT_OF]}

        return self.session.run(work, what=f"edit and return a message from {self.name!r}")

    # -- deleting -----------------------------------------------------------------------------------
    def delete(self, positions: Iterable[Position]) -> int:
        """Delete the addressed messages, all or none (PositionsNotFoundError names those not there)."""
        wanted = list(dict.fromkeys(positions))

        def work(cur: Any) -> int:
            missing = self._delete_positions(cur, wanted)
            if missing:
                raise PositionsNotFoundError(missing, self.name)
            return len(wanted)

        return self.session.run(work, what=f"delete messages from {self.name!r}")

    # -- what the error archive asks of the database (its files are ``airflow_sqlqueue.archive``'s) ---------
    def whole_rows(self, first_seq: int, last_seq: int) -> list[Sequence[Any]]:
        """Every column of the rows at positions ``first_seq`` to ``last_seq``, oldest first, nothing taken: (id,
        correlation id, reply-to, recoverable, expires, headers type, headers, body type, body, seq)."""
        return self.session.run(lambda cur: self.dialect.execute(
            cur, "archive_rows", {"after_seq": first_seq - 1, "through_seq": last_seq}, **self.table.ids).fetchall(),
            what=f"read failed messages of {self.name!r}", read_only=True)

    def delete_found(self, positions: Iterable[Position]) -> list[Position]:
        """Delete the addressed messages still there, in one transaction; return those that were not."""
        wanted = list(dict.fromkeys(positions))

        return self.session.run(lambda cur: self._delete_positions(cur, wanted),
                                what=f"delete archived messages from {self.name!r}")

    def _delete_positions(self, cur: Any, wanted: list[Position]) -> list[Position]:
        """Delete the addressed rows in the caller's transaction (each one's group counts one less); those not
        there."""
        high_water = self.summary.high_water(cur)
        missing = []
        for p in wanted:
            group = self.summary.group_of(cur, high_water, p.seq, p.id)
            if (self.dialect.execute(cur, "delete_position", {"seq": p.seq, "id": p.id},
                                     **self.table.ids).rowcount or 0) < 1:
                missing.append(p)
            else:
                self.summary.take_out(cur, group)
        return missing

    def restore(self, rows: Iterable[dict[str, Any]], unsure: set[str] = frozenset()) -> tuple[int, int]:
        """Put archived rows back as they were (same Id, Expires, headers and body; ``rows`` hold the
        ``restore_row`` parameters), in one transaction; (restored, already there). An Id in ``unsure`` (a batch a
        crash may have committed) is looked for first; any other row whose Id the queue holds is not inserted."""
        batch = list(rows)

        def work(cur: Any) -> tuple[int, int]:
            added = there = 0
            for params in batch:
                if params["id"] in unsure and int(self.dialect.scalar(cur, "id_present", {"id": params["id"]},
                                                                      **self.table.ids) or 0):
                    there += 1
                    continue
                count = self.dialect.execute(cur, "restore_row", params, **self.table.ids).rowcount
                added, there = (added + 1, there) if (count or 0) > 0 or count == -1 else (added, there + 1)
            return added, there

        return self.session.run(work, what=f"restore archived messages into {self.name!r}")


#: The deepest nesting of arrays and objects an edited JSON body may have (Python's parser recurses per level).
MAX_JSON_DEPTH = 200
_JSON_TOKENS = re.compile(rb'\\.|["\[\]{}]', re.DOTALL)


def json_depth_over(text: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` levels deep (strings skipped; one pass
    over the brackets and quotes, no recursion)."""
    depth, in_string = 0, False
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token == b'"':
            in_string = not in_string
        elif in_string:
            continue
        elif token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def _check_json(body: bytes) -> None:
    if json_depth_over(body):
        raise EditRefusedError(f"the body nests JSON arrays and objects more than {MAX_JSON_DEPTH} levels deep; "
                               f"send a body nested at most {MAX_JSON_DEPTH} levels; nothing was changed")
    try:
        json.loads(body)
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise EditRefusedError(f"the body is not valid JSON ({detail}); nothing was changed") from None


def _wait(until: float, clock: Callable[[], float], sleep: Callable[[float], None],
          should_stop: Callable[[], bool]) -> bool:
    """Sleep until ``until`` in slices, asking ``should_stop`` between them; False when asked to stop."""
    while True:
        left = until - clock()
        if left <= 0:
            return True
        sleep(min(left, STOP_CHECK_SECONDS))
        if should_stop():
            return False


__all__ = ["EDIT_OF", "PROTECTED_HEADERS", "EditRefusedError", "ErrorQueue", "PositionsNotFoundError",
           "RetryRefusedError", "RetrySummary"]
