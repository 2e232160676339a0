"""Retry redirects kept in the database: the messages that failed in one queue go back to another when retried.

One table beside the error queue (``SqlQueueRetryRedirects`` in the error queue's schema, created on the first
redirect) holds one row per source queue: its canonical name, the canonical name of the queue its messages go back
to, who made it and when. Every retry path reads it through the ``ReturnPolicy`` (the page's retry, batched retries,
edit and retry, the command line, the operators), in the retry's own transaction, so a redirect made or removed
takes effect at the next batch.

A redirect never trusts a header: its destination is a queue that exists, named when the redirect is made, and a
retry still writes only to the queues it is allowed to (a redirect to any other queue leaves the message where it
is, with the reason). Redirects do not chain: a destination may not be redirected itself, nor a source be another
redirect's destination.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..common.errors import InvalidAddressError, NotAQueueError
from ..dialects import Dialect
from ..tables.queue import QueueBook, TableQueue
from ..tables.session import Session
from ..wire.address import QueueAddress

log = logging.getLogger(__name__)

#: The redirect table's name (in the error queue's schema).
DEFAULT_REDIRECT_TABLE = "SqlQueueRetryRedirects"
#: The longest queue name a redirect stores.
MAX_NAME = 450
MAX_USER = 200


class RedirectRefusedError(ValueError):
    """A redirect that may not be made (the reason names the fix); nothing was changed."""


class RedirectExistsError(RedirectRefusedError):
    """The source queue already has a redirect (remove it first)."""


class RedirectNotFoundError(LookupError):
    """No redirect from that queue."""


@dataclass(frozen=True)
class Redirect:
    """One retry redirect: canonical names of the source and destination queues, who made it and when (UTC)."""

    source: str
    target: str
    created_by: str | None = None
    created_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def canonical_name(dialect: Dialect, address: QueueAddress) -> str:
    """The one name of a queue: the schema always given (the database's default filled in), quoted where needed."""
    if address.schema is None and dialect.default_schema:
        address = replace(address, schema=dialect.default_schema)
    return dialect.format_address(address)


class RetryRedirects:
    """The retry redirects of one error queue's database.

    :param session: the transport's session.
    :param book: the transport's queues.
    :param error_queue: the error queue (never a source or destination; the table is created in its schema).
    :param table: the table's name (default ``SqlQueueRetryRedirects``), in the error queue's schema unless given.
    """

    def __init__(self, session: Session, book: QueueBook, error_queue: TableQueue,
                 table: str = DEFAULT_REDIRECT_TABLE) -> None:
        self.session = session
        self.book = book
        self.dialect = book.dialect
        self.error_queue = error_queue
        address = self.dialect.parse_address(table)
        if address.schema is None:
            address = replace(address, schema=error_queue.address.schema, catalog=error_queue.address.catalog)
        self.table = address
        self.name = self.dialect.format_address(address)
        self.ids = self.dialect.identifiers(address)

    # -- reading ----------------------------------------------------------------------------------------
    def load(self, cursor: Any) -> list[Redirect]:
        """Every redirect, read on ``cursor`` (the caller's transaction); none while the table does not exist."""
        if not self.dialect.table_exists(cursor, self.table):
            return []
        rows = self.dialect.execute(cursor, "list_redirects", None, **self.ids).fetchall()
        return [Redirect(str(r[0]), str(r[1]), None if r[2] is None else str(r[2]),
                         None if r[3] is None else str(r[3])) for r in rows]

    def list(self) -> list[Redirect]:
        """Every redirect, by source queue."""
        return self.session.run(self.load, what=f"list retry redirects of {self.name!r}", read_only=True)

    def find(self, redirects: list[Redirect], address: QueueAddress) -> Redirect | None:
        """The redirect of ``address`` (any spelling) among ``redirects``, or None."""
        same = self.dialect.same_queue
        for redirect in redirects:
            try:
                if same(self.dialect.parse_address(redirect.source), address):
                    return redirect
            except (InvalidAddressError, ValueError):
                continue
        return None

    # -- changing ---------------------------------------------------------------------------------------
    def _queue(self, text: str, what: str) -> TableQueue:
        if not isinstance(text, str) or not text.strip():
            raise RedirectRefusedError(f"name the {what} queue")
        try:
            table = self.book.queue(text)
        except (InvalidAddressError, NotAQueueError, ValueError) as exc:
            raise RedirectRefusedError(f"{what} {text!r} is not a queue address: {exc}") from None
        if self.dialect.same_queue(table.address, self.error_queue.address):
            raise RedirectRefusedError(f"{what} {table.name!r} is the error queue itself: a redirect never reads "
                                       "from or writes to it")
        if len(canonical_name(self.dialect, table.address)) > MAX_NAME:
            raise RedirectRefusedError(f"{what} {text[:60]!r}... is longer than {MAX_NAME} characters")
        return table

    def create(self, source: str, target: str, *, created_by: str | None = None) -> Redirect:
        """Redirect the retries of queue ``source`` (which may no longer exist) to queue ``target`` (which must
        exist). RedirectRefusedError (RedirectExistsError when ``source`` has one) with the reason otherwise."""
        origin, destination = self._queue(source, "source"), self._queue(target, "destination")
        same = self.dialect.same_queue
        if same(origin.address, destination.address):
            raise RedirectRefusedError(f"a queue cannot be redirected to itself ({origin.name!r})")
        made = Redirect(canonical_name(self.dialect, origin.address), canonical_name(self.dialect, destination.address),
                        (created_by or None) and created_by[:MAX_USER])
        if not self.session.run(lambda cur: self.book.exists(cur, destination), what="retry redirect destination",
                                read_only=True):  # refused before the table is made: a refusal changes nothing
            raise RedirectRefusedError(f"destination queue {made.target!r} does not exist: create it first")
        self._create_table()

        def work(cur: Any) -> Redirect:
            if not self.book.exists(cur, destination):
                raise RedirectRefusedError(f"destination queue {made.target!r} does not exist: create it first")
            known = self.load(cur)
            if self.find(known, origin.address) is not None:
                raise RedirectExistsError(f"queue {made.source!r} already has a redirect: remove it first")
            if self.find(known, destination.address) is not None:
                raise RedirectRefusedError(f"destination {made.target!r} is redirected itself: redirects do not "
                                           "chain; redirect to where it goes instead")
            into = [r for r in known if _names(self.dialect, r.target, origin.address)]
            if into:
                raise RedirectRefusedError(f"queue {made.source!r} is the destination of the redirect from "
                                           f"{into[0].source!r}: redirects do not chain; change that one first")
            count = self.dialect.execute(cur, "insert_redirect", {
                "source_queue": made.source, "target_queue": made.target, "created_by": made.created_by},
                **self.ids).rowcount
            if count == 0:
                raise RedirectExistsError(f"queue {made.source!r} already has a redirect: remove it first")
            return made

        done = self.session.run(work, what=f"create a retry redirect in {self.name!r}")
        log.info("retry redirect %s -> %s created by %s", done.source, done.target, done.created_by)
        return done

    def remove(self, source: str) -> Redirect:
        """Remove the redirect of queue ``source`` (any spelling); the redirect removed, or RedirectNotFoundError."""
        try:
            origin = self.book.address(source)
        except (InvalidAddressError, ValueError) as exc:
            raise RedirectRefusedError(f"source {source!r} is not a queue address: {exc}") from None

        def work(cur: Any) -> Redirect:
            found = self.find(self.load(cur), origin)
            if found is None:
                raise RedirectNotFoundError(f"no retry redirect from {canonical_name(self.dialect, origin)!r}")
            self.dialect.execute(cur, "delete_redirect", {"source_queue": found.source}, **self.ids)
            return found

        done = self.session.run(work, what=f"remove a retry redirect from {self.name!r}")
        log.info("retry redirect %s -> %s removed", done.source, done.target)
        return done

    def _create_table(self) -> None:
        """The table, unless it exists (a concurrent creator's duplicate-object error counts as created)."""
        def exists(cur: Any) -> bool:
            return bool(self.dialect.table_exists(cur, self.table))

        if self.session.run(exists, what="retry redirect table", read_only=True):
            return
        try:
            self.session.run(lambda cur: self.dialect.execute(cur, "create_redirect_table", None, **self.ids),
                             what=f"create retry redirect table {self.name!r}")
        except Exception:
            if not self.session.run(exists, what="retry redirect table", read_only=True):
                raise


def _names(dialect: Dialect, text: str, address: QueueAddress) -> bool:
    try:
        return dialect.same_queue(dialect.parse_address(text), address)
    except (InvalidAddressError, ValueError):
        return False


__all__ = ["DEFAULT_REDIRECT_TABLE", "Redirect", "RedirectExistsError", "RedirectNotFoundError",
           "RedirectRefusedError", "RetryRedirects", "canonical_name"]
