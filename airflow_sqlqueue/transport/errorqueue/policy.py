"""Where a retry may write: one rule for every path that returns a failed message (the dashboard, batched retries,
the command line, the operators, the maintenance DAGs).

``NServiceBus.FailedQ`` is a header anyone who can make a message fail controls, so it is never trusted as a
destination: it is only looked up among the queues a deployment allowed (the dashboard's configuration, the
maintenance Variable, an explicit list given to the command line or an operator). The error queue itself is never
a target, nor is any table outside the list, in whatever spelling. Redirects send the messages of one queue to
another queue of the list. A message the policy refuses stays where it is, with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..common.errors import InvalidAddressError, NotAQueueError
from ..tables.queue import QueueBook, TableQueue
from ..wire import headers as h
from ..wire.address import QueueAddress
from ..wire.headers import PoisonHeadersError, parse_headers
from .previews import clean_text
from .redirects import RetryRedirects

NO_TARGETS = ("no queue may receive retried messages: name the queues a retry may write to (allowed=[...] in "
              "Python and the operators, --allow QUEUE on the command line, the queues of the connection in the "
              "dashboard and maintenance configuration)")


class ReturnPolicy:
    """The queues a retry may write to, and the redirects between them.

    :param book: the transport's queues (the error queue among them).
    :param error_queue: the error queue retried from (never a target).
    :param allowed: the queues a retry may write to.
    :param redirects: ``{failed queue: queue to send its messages to instead}``; every destination must be allowed.
        These (one run's) come before the stored ones.
    :param stored: the redirects kept in the database (read in each retry's transaction); a stored redirect to a
        queue that is not allowed leaves the message where it is, with the reason.
    :raises ValueError: an allowed queue or a redirect that breaks the rule (named, nothing done).
    """

    def __init__(self, book: QueueBook, error_queue: TableQueue, allowed: Iterable[str | QueueAddress],
                 redirects: Mapping[str, str] | None = None, stored: RetryRedirects | None = None) -> None:
        self.book = book
        self.error_queue = error_queue
        self.stored = stored
        self._stored_cursor: Any = None
        self._stored_list: list[Any] = []
        same = book.dialect.same_queue
        self.allowed: list[TableQueue] = []
        for queue in allowed:
            table = _table(book, queue, "allowed queue")
            if same(table.address, error_queue.address):
                raise ValueError(f"{table.name} is the error queue itself: a retry never writes into it; leave it "
                                 "out of the allowed queues")
            if not any(same(table.address, t.address) for t in self.allowed):
                self.allowed.append(table)
        self.redirects: list[tuple[QueueAddress, TableQueue]] = []
        for source, destination in (redirects or {}).items():
            origin = _table(book, source, "redirect source").address
            target = self.allowed_queue(_table(book, destination, "redirect destination").address)
            if target is None:
                raise ValueError(f"redirect {source!r} -> {destination!r}: {destination!r} is not one of the queues a "
                                 "retry may write to (allowed: " + (", ".join(t.name for t in self.allowed) or "none")
                                 + ")")
            self.redirects.append((origin, target))

    @property
    def names(self) -> list[str]:
        """The allowed queues, canonical names."""
        return [t.name for t in self.allowed]

    def allowed_queue(self, address: QueueAddress) -> TableQueue | None:
        """The allowed queue ``address`` names (in any spelling), or None."""
        same = self.book.dialect.same_queue
        return next((t for t in self.allowed if same(address, t.address)), None)

    def redirected(self, address: QueueAddress) -> TableQueue | None:
        """Where messages that failed in ``address`` go instead, or None (no redirect)."""
        same = self.book.dialect.same_queue
        return next((target for source, target in self.redirects if same(address, source)), None)

    def target(self, cursor: Any, headers: Any) -> tuple[TableQueue | None, str]:
        """Where a stored failed message may go back to (its FailedQ, redirected), or None and why not."""
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
            address = self.book.address(target_text)
        except (InvalidAddressError, ValueError) as exc:
            return None, f"{h.FAILED_Q} {shown!r} is not a queue address ({clean_text(str(exc))[0]})"
        table = self.redirected(address)
        if table is None and self.stored is not None:
            stored = self.stored.find(self._stored_redirects(cursor), address)
            if stored is not None:
                table = self.allowed_queue(self.book.address(stored.target))
                if table is None:
                    return None, (f"queue {shown!r} is redirected to {stored.target} (a retry redirect), which is "
                                  "not one of the queues a retry may write to (allowed: "
                                  + (", ".join(self.names) or "none") + ")")
        if table is None:
            if self.book.dialect.same_queue(address, self.error_queue.address):
                return None, f"{h.FAILED_Q} {shown!r} is the error queue itself"
            table = self.allowed_queue(address)
            if table is None:
                return None, (f"queue {shown!r} is not one of the queues a retry may write to (allowed: "
                              + (", ".join(self.names) or "none") + ")")
        if not self.book.exists(cursor, table):
            return None, f"queue {table.name} does not exist"
        return table, ""


    def _stored_redirects(self, cursor: Any) -> list[Any]:
        """The stored redirects, read once per transaction (cursor)."""
        if cursor is not self._stored_cursor:
            self._stored_list = self.stored.load(cursor) if self.stored is not None else []
            self._stored_cursor = cursor
        return self._stored_list


def _table(book: QueueBook, queue: str | QueueAddress, what: str) -> TableQueue:
    try:
        return book.queue(queue)
    except (InvalidAddressError, NotAQueueError) as exc:
        raise ValueError(f"{what} {queue!r}: {exc}") from None
